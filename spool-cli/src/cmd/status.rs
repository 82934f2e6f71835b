//! `spool status PATH [--json]`: a spool directory's owner and the counts
//! and bytes of its packs, or, for a spool root (or a catalog key
//! directory), one row per rank directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use spool_core::layout::RankDirName;
use spool_core::spool::{inspect, DirCounts};
use spool_lock::{read_owner, Purpose};

use crate::exit::ExitCode;

/// Arguments of `spool status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A spool directory, a spool root, or a catalog key directory.
    pub path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Owner of a directory as one JSON object (as `spool lock owner` says it).
fn owner_json(dir: &Path) -> Result<Value> {
    let st =
        read_owner(dir).with_context(|| format!("cannot probe the owner of {}", dir.display()))?;
    let record = st.record.as_ref();
    let blocked = matches!(record.map(|r| &r.purpose), Some(Purpose::Blocked(_)));
    let state = if st.held {
        "live"
    } else if blocked {
        "blocked"
    } else {
        "dead"
    };
    Ok(json!({
        "held": st.held,
        "state": state,
        "host": record.map(|r| r.host.clone()),
        "pid": record.and_then(|r| r.pid),
        "purpose": record.map(|r| r.purpose.to_string()),
        "lock_file_present": st.lock_file_present,
        "lock_file_replaced": st.lock_file_replaced,
    }))
}

fn counts_json(c: &DirCounts) -> Value {
    let kind = |(n, b): (u64, u64)| json!({"count": n, "bytes": b});
    json!({
        "ready": kind(c.ready),
        "open": kind(c.open),
        "quarantined": kind(c.quarantined),
        "rejected": kind(c.rejected),
    })
}

fn owner_text(o: &Value) -> String {
    let who = match (o["host"].as_str(), o["pid"].as_u64()) {
        (Some(h), Some(p)) => format!("pid {p} on host {h}"),
        (Some(h), None) => format!("pid unknown on host {h}"),
        _ => "no owner record".to_string(),
    };
    let purpose = o["purpose"].as_str().unwrap_or("-");
    match o["state"].as_str() {
        Some("live") => format!("owned by {who} ({purpose})"),
        Some("blocked") => format!("not owned; {purpose} (last {who})"),
        _ if o["lock_file_present"] == json!(false) => "not owned (no lock file)".into(),
        _ => format!("not owned (last {who})"),
    }
}

/// Rank directories directly under `dir`.
fn rank_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(RankDirName::parse)
                .is_some()
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Whether `path` is a spool directory (rather than a root or key dir).
fn is_spool_dir(path: &Path) -> bool {
    if path.join(spool_lock::LOCK_FILE_NAME).exists() {
        return true;
    }
    if path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(RankDirName::parse)
        .is_some()
    {
        return true;
    }
    inspect(path)
        .map(|c| c.ready.0 + c.open.0 + c.quarantined.0 + c.rejected.0 > 0)
        .unwrap_or(false)
}

/// Runs `spool status`.
pub fn run(args: Args) -> Result<ExitCode> {
    let path = &args.path;
    anyhow::ensure!(path.is_dir(), "{} is not a directory", path.display());
    if is_spool_dir(path) {
        let owner = owner_json(path)?;
        let counts = inspect(path).with_context(|| format!("cannot read {}", path.display()))?;
        if args.json {
            println!(
                "{}",
                json!({"kind": "spool", "path": path, "owner": owner, "packs": counts_json(&counts)})
            );
        } else {
            println!("spool directory {}", path.display());
            println!("  owner:       {}", owner_text(&owner));
            for (name, (n, b)) in [
                ("ready", counts.ready),
                ("open", counts.open),
                ("quarantined", counts.quarantined),
                ("rejected", counts.rejected),
            ] {
                println!("  {name:<12} {n} packs, {b} bytes");
            }
        }
        return Ok(ExitCode::Ok);
    }
    // A root: rank directories under each catalog key, or directly below
    // (a catalog key directory).
    let mut dirs = rank_dirs(path);
    for entry in std::fs::read_dir(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .flatten()
    {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false)
            && entry
                .file_name()
                .to_str()
                .is_some_and(spool_core::layout::is_catalog_key)
        {
            dirs.extend(rank_dirs(&entry.path()));
        }
    }
    let mut rows = Vec::new();
    for d in &dirs {
        let owner = owner_json(d)?;
        let c = inspect(d).unwrap_or_default();
        let bytes = c.ready.1 + c.open.1 + c.quarantined.1 + c.rejected.1;
        rows.push(json!({
            "path": d,
            "owner": owner,
            "state": owner["state"],
            "packs": c.ready.0,
            "bytes": bytes,
            "detail": counts_json(&c),
        }));
    }
    if args.json {
        println!(
            "{}",
            json!({"kind": "root", "path": path, "rank_dirs": rows})
        );
    } else {
        println!(
            "spool root {} ({} rank directories)",
            path.display(),
            rows.len()
        );
        for r in &rows {
            println!(
                "  {}  {:<7}  {} packs  {} bytes  {}",
                r["path"].as_str().unwrap_or("?"),
                r["state"].as_str().unwrap_or("?"),
                r["packs"],
                r["bytes"],
                owner_text(&r["owner"])
            );
        }
    }
    Ok(ExitCode::Ok)
}
