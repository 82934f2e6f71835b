//! `spool status PATH [--json]`: a spool directory's owner and the counts
//! and bytes of its packs, or, for a spool root (or a catalog key
//! directory), one row per rank directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use spool_core::layout::RankDirName;
use spool_core::siblings::{self, Owner};
use spool_core::spool::{inspect, DirCounts};

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

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Show a spool directory's owner and packs, or every rank directory of a
spool root. A probe only: it never takes a lock and changes nothing.

For a spool directory: who holds it (pid and host from its owner record),
whether it is live (held), dead (nobody holds it: an adopter will ship its
packs) or blocked (an adopter gave up and said why; fix the cause, then
`spool unblock DIR`), and the count and bytes of its ready, open (temp),
quarantined and rejected packs.

For a spool root (ROOT/<catalog key>/r<rank>-<incarnation>/) or a catalog
key directory: one row per rank directory with its key, name, state,
owner, ready packs, bytes on disk, and the reason when blocked. The
embedded defaults inside the root (ROOT/.store, ROOT/.catalog.db) are
skipped.

Examples:
  spool status /var/lib/spool
  spool status /var/lib/spool/3f2a9c01b7de/r0-1a2b3c4d
  spool status /var/lib/spool --json | jq '.rank_dirs[] | select(.state == \"blocked\")'";

/// Owner of a directory as one JSON object (as `spool lock owner` says it).
fn owner_json(dir: &Path) -> Result<Value> {
    let probe = siblings::probe(dir)
        .with_context(|| format!("cannot probe the owner of {}", dir.display()))?;
    let state = match probe.owner() {
        Owner::Live | Owner::HeldHere { .. } => "live",
        Owner::Blocked(_) => "blocked",
        Owner::Dead | Owner::NotOurs(_) => "dead",
    };
    let st = probe.status;
    let record = st.record.as_ref();
    Ok(json!({
        "held": st.held,
        "state": state,
        "host": record.map(|r| r.host.clone()),
        "pid": record.and_then(|r| r.pid),
        "purpose": record.map(|r| r.purpose.to_string()),
        "lock_file_present": st.lock_file_present,
        "lock_file_replaced": st.lock_file_replaced,
        "held_shared_by": st.shared_by,
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
    let text = match o["state"].as_str() {
        Some("live") => format!("owned by {who} ({purpose})"),
        Some("blocked") => format!("not owned; {purpose} (last {who})"),
        _ if o["lock_file_present"] == json!(false) => "not owned (no lock file)".into(),
        _ => format!("not owned (last {who})"),
    };
    match held_shared_text(o) {
        Some(shared) => {
            format!("{text}; {shared} (a reader, not an owner: adoption retries until it lets go)")
        }
        None => text,
    }
}

/// `held shared by pid N` when a reader's shared flock (group mode) holds
/// the lock file or directory of an unowned directory: adopters cannot
/// take it until it lets go, and retry.
fn held_shared_text(o: &Value) -> Option<String> {
    let pids: Vec<String> = o["held_shared_by"]
        .as_array()?
        .iter()
        .filter_map(Value::as_u64)
        .map(|p| format!("pid {p}"))
        .collect();
    (!pids.is_empty()).then(|| format!("held shared by {}", pids.join(" and ")))
}

/// Rank directories directly under `dir`.
fn rank_dirs(dir: &Path) -> Vec<PathBuf> {
    siblings::rank_dirs(dir).unwrap_or_default()
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
            outln!(
                "{}",
                json!({"kind": "spool", "path": path, "owner": owner, "packs": counts_json(&counts)})
            );
        } else {
            outln!("spool directory {}", path.display());
            outln!("  owner:       {}", owner_text(&owner));
            for (name, (n, b)) in [
                ("ready", counts.ready),
                ("open", counts.open),
                ("quarantined", counts.quarantined),
                ("rejected", counts.rejected),
            ] {
                outln!("  {name:<12} {n} packs, {b} bytes");
            }
            if counts.rejected.0 > 0 {
                outln!(
                    "  rejected packs are kept until a person fixes their cause; then `spool requeue {}`",
                    path.display()
                );
            }
        }
        return Ok(ExitCode::Ok);
    }
    // A root: rank directories under each catalog key, or directly below
    // (a catalog key directory). Hidden entries are never rank directories
    // or keys: the embedded `.store` and `.catalog.db`, staging copies.
    let mut dirs: Vec<(Option<String>, PathBuf)> = rank_dirs(path)
        .into_iter()
        .map(|d| (key_of(path), d))
        .collect();
    let keys = spool_core::layout::catalog_key_dirs(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    for (key, key_dir) in keys {
        dirs.extend(
            rank_dirs(&key_dir)
                .into_iter()
                .map(|d| (Some(key.clone()), d)),
        );
    }
    let mut rows = Vec::new();
    let mut shippers = std::collections::HashMap::new();
    for (key, d) in &dirs {
        // One directory this user cannot read (another user's) is a row
        // saying so, never the end of the listing.
        let (owner, unreadable) = match owner_json(d) {
            Ok(o) => (o, None),
            Err(e) => (
                json!({
                    "held": null,
                    "state": "unreadable",
                    "host": null,
                    "pid": null,
                    "purpose": null,
                    "lock_file_present": null,
                    "lock_file_replaced": false,
                    "held_shared_by": [],
                }),
                Some(crate::exit::message_of(&e)),
            ),
        };
        let c = inspect(d).unwrap_or_default();
        let bytes = c.ready.1 + c.open.1 + c.quarantined.1 + c.rejected.1;
        let mut hand_off = hand_off_json(d);
        let served_by = served_by_json(d, &owner, &hand_off, &mut shippers);
        if served_by["live"] == json!(true) {
            // what the shipper refused or cannot confirm is not "being
            // shipped": said as what it is
            let (refused, unconfirmed, why) = shipper_says_of(d, &served_by);
            let waiting = hand_off["waiting"].as_u64().unwrap_or(0);
            let not_shipping = refused.len() as u64 + unconfirmed;
            hand_off["waiting"] = json!(waiting.saturating_sub(not_shipping));
            hand_off["refused_by_shipper"] = json!(refused
                .iter()
                .map(|(r, why)| json!({"ref": r, "why": why}))
                .collect::<Vec<_>>());
            hand_off["unconfirmed"] = json!(unconfirmed);
            hand_off["unconfirmed_why"] = json!(why);
        }
        let reason = unreadable.or_else(|| {
            owner["purpose"]
                .as_str()
                .and_then(|p| p.strip_prefix("blocked:"))
                .filter(|_| owner["state"] == "blocked")
                .map(|r| r.trim().to_owned())
                .or_else(|| held_shared_text(&owner))
                .or_else(|| hand_off_text(&owner, &hand_off, &served_by))
        });
        rows.push(json!({
            "key": key,
            "dir": d.file_name().map(|n| n.to_string_lossy().into_owned()),
            "path": d,
            "owner": owner,
            "state": owner["state"],
            "reason": reason,
            "host": owner["host"],
            "pid": owner["pid"],
            "packs": c.ready.0,
            "bytes": bytes,
            "detail": counts_json(&c),
            "hand_off": hand_off,
            "served_by": served_by,
        }));
    }
    if args.json {
        outln!(
            "{}",
            json!({"kind": "root", "path": path, "rank_dirs": rows})
        );
    } else {
        outln!(
            "spool root {} ({} rank directories)",
            path.display(),
            rows.len()
        );
        print_root_table(&rows)?;
        let with_rejected: Vec<&Value> = rows
            .iter()
            .filter(|r| r["detail"]["rejected"]["count"].as_u64().unwrap_or(0) > 0)
            .collect();
        for r in with_rejected {
            outln!(
                "{}: {} rejected pack(s) kept until a person fixes their cause; then `spool requeue {}`",
                r["path"].as_str().unwrap_or_default(),
                r["detail"]["rejected"]["count"],
                r["path"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::Ok)
}

/// What a live owner consented to hand off (`spool_core::handoff`):
/// `null` when it consented to nothing.
fn hand_off_json(dir: &Path) -> Value {
    match spool_core::handoff::list_consented(dir) {
        Ok(c) if !c.packs.is_empty() || c.confirmed > 0 || !c.refused.is_empty() => json!({
            "waiting": c.packs.len(),
            "confirmed": c.confirmed,
            "refused": c.refused.iter().map(|r| json!({"ref": r.path.to_string_lossy(), "why": r.why})).collect::<Vec<_>>(),
        }),
        _ => Value::Null,
    }
}

/// The daemon serving a live owner that handed packs off, as
/// [`shipper_json`] says it (read once per catalog key into `shippers`);
/// `null` for any other directory.
fn served_by_json(
    dir: &Path,
    owner: &Value,
    hand_off: &Value,
    shippers: &mut std::collections::HashMap<PathBuf, Value>,
) -> Value {
    if owner["state"] != "live" || hand_off.is_null() {
        return Value::Null;
    }
    let Some(key_dir) = dir.parent() else {
        return Value::Null;
    };
    shippers
        .entry(key_dir.to_path_buf())
        .or_insert_with(|| shipper_json(key_dir))
        .clone()
}

/// The node's shipper for the owners under `key_dir` (the daemon
/// `spool_core::handoff::shipper_of` names): its rank directory, whether
/// it is live, and its owner record's host and pid; `null` when no daemon
/// ever served there.
pub(crate) fn shipper_json(key_dir: &Path) -> Value {
    let record = match spool_core::handoff::read_shipper(key_dir) {
        Ok(Some(r)) => r,
        Ok(None) => return Value::Null,
        // a planted entry where the record belongs: said, never followed
        // or read through
        Err(e) => {
            return json!({"dir": null, "live": false, "host": null, "pid": null, "error": e.to_string()})
        }
    };
    let dir = key_dir.join(&record.dir_name);
    let owner = owner_json(&dir).unwrap_or(Value::Null);
    json!({
        "dir": dir,
        "live": owner["state"] == "live",
        "host": owner["host"],
        "pid": owner["pid"],
        "node": record.node,
        "refused": record.refused.iter().map(|(o, r, why)| json!({"owner": o, "ref": r, "why": why})).collect::<Vec<_>>(),
        "refused_more": record.refused_more,
        "unconfirmed": record.unconfirmed.iter().map(|(o, n, why)| json!({"owner": o, "packs": n, "why": why})).collect::<Vec<_>>(),
    })
}

/// What the shipper `served_by` recorded against owner `dir`: the refs it
/// refused (with why) and the packs it shipped but cannot confirm (with
/// why).
fn shipper_says_of(dir: &Path, served_by: &Value) -> (Vec<(String, String)>, u64, Option<String>) {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let mine = |v: &Value| v["owner"].as_str() == name.as_deref();
    let refused = served_by["refused"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| mine(v))
                .map(|v| {
                    (
                        v["ref"].as_str().unwrap_or_default().to_string(),
                        v["why"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let unconfirmed = served_by["unconfirmed"]
        .as_array()
        .and_then(|a| a.iter().find(|v| mine(v)).cloned());
    let count = unconfirmed
        .as_ref()
        .and_then(|v| v["packs"].as_u64())
        .unwrap_or(0);
    let why = unconfirmed.and_then(|v| v["why"].as_str().map(str::to_string));
    (refused, count, why)
}

/// `spool run pid P on host H (DIR)`, the shipper [`shipper_json`] names.
pub(crate) fn shipper_text(shipper: &Value) -> String {
    format!(
        "spool run pid {} on host {} ({})",
        shipper["pid"],
        shipper["host"].as_str().unwrap_or("?"),
        shipper["dir"].as_str().unwrap_or("?")
    )
}

/// Why a live owner's handed-off packs are still there.
fn hand_off_text(owner: &Value, hand_off: &Value, served_by: &Value) -> Option<String> {
    if owner["state"] != "live" {
        return None;
    }
    let waiting = hand_off["waiting"].as_u64().unwrap_or(0);
    let confirmed = hand_off["confirmed"].as_u64().unwrap_or(0);
    let refused = hand_off["refused"].as_array().map_or(0, Vec::len);
    let mut parts = Vec::new();
    if waiting > 0 && served_by["live"] == json!(true) {
        parts.push(format!(
            "{waiting} handed-off pack(s) being shipped by the node's shipper, {}",
            shipper_text(served_by)
        ));
    } else if waiting > 0 {
        parts.push(format!(
            "{waiting} handed-off pack(s) waiting for the node's shipper (a `spool run` holding \
             the node lease; none serves now: they ship when one starts, or when the \
             producer exits)"
        ));
    }
    if confirmed > 0 {
        parts.push(format!(
            "{confirmed} confirmed, to be removed by their owner"
        ));
    }
    if refused > 0 {
        parts.push(format!(
            "{refused} ref(s) refused: see `spool status --json`"
        ));
    }
    if let Some(by) = hand_off["refused_by_shipper"]
        .as_array()
        .filter(|a| !a.is_empty())
    {
        parts.push(format!(
            "{} pack(s) refused by the node's shipper, kept by their owner (shipped when it \
             exits, or set aside if still bad), first: {} ({})",
            by.len(),
            by[0]["ref"].as_str().unwrap_or("?"),
            by[0]["why"].as_str().unwrap_or("?")
        ));
    }
    let unconfirmed = hand_off["unconfirmed"].as_u64().unwrap_or(0);
    if unconfirmed > 0 {
        parts.push(format!(
            "{unconfirmed} pack(s) shipped and indexed by the node's shipper, {}, but not \
             confirmed to their owner (it keeps them until it can be): {}",
            shipper_text(served_by),
            hand_off["unconfirmed_why"]
                .as_str()
                .unwrap_or("the shipper cannot write the confirmation")
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The catalog key a directory's name is, if it is one.
fn key_of(dir: &Path) -> Option<String> {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| spool_core::layout::is_catalog_key(n))
        .map(str::to_owned)
}

/// Who a row's owner record names: `pid P on host H` (with `last` when the
/// lock is not held).
fn owner_cell(row: &Value) -> String {
    let o = &row["owner"];
    if o["lock_file_replaced"] == json!(true) {
        return "unknown (lock file replaced)".into();
    }
    let who = match (o["host"].as_str(), o["pid"].as_u64()) {
        (Some(h), Some(p)) => format!("pid {p} on {h}"),
        (Some(h), None) => format!("pid ? on {h}"),
        _ => return "-".into(),
    };
    match o["state"].as_str() {
        Some("live") => format!("{who} ({})", o["purpose"].as_str().unwrap_or("-")),
        _ => format!("last {who}"),
    }
}

fn print_root_table(rows: &[Value]) -> Result<()> {
    let head = [
        "KEY", "RANK DIR", "STATE", "OWNER", "READY", "BYTES", "REASON",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r["key"].as_str().unwrap_or("-").to_owned(),
                r["dir"].as_str().unwrap_or("?").to_owned(),
                r["state"].as_str().unwrap_or("?").to_owned(),
                owner_cell(r),
                r["packs"].to_string(),
                indicatif::BinaryBytes(r["bytes"].as_u64().unwrap_or(0)).to_string(),
                r["reason"].as_str().unwrap_or("").to_owned(),
            ]
        })
        .collect();
    let mut width = head.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: [&str; 7]| -> Result<()> {
        let text = format!(
            "  {:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {:>w5$}  {}",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            cols[6],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4],
            w5 = width[5],
        );
        outln!("{}", text.trim_end());
        Ok(())
    };
    if cells.is_empty() {
        return Ok(());
    }
    line(head)?;
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]])?;
    }
    Ok(())
}
