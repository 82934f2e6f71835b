//! `spool status PATH [--json]`: a spool directory's owner and the counts
//! and bytes of its packs, or, for a spool root (or a catalog key
//! directory), one row per rank directory; and, where the node's daemon
//! serves `/metrics`, its open bundle (`status/daemon.rs`).

mod daemon;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use spool_service::status::{status, OwnerState, OwnerView, RankDirRow, Status};

use crate::exit::ExitCode;

/// Arguments of `spool status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A spool directory, a spool root, or a catalog key directory.
    pub path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Ask the daemon serving /metrics here for its open bundle
    /// (default: metrics.addr of the configuration, if set).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
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

The node's daemon (`spool run`) is asked for its open bundle: the small
packs it holds back for up to upload.bundle_linger so that they share one
object, with their count, bytes and the oldest one's wait. It is asked at
--metrics-addr, else at metrics.addr of the configuration (--config,
SPOOL_METRICS_ADDR); without either it is not asked. One request, at most
1 s: a daemon that does not answer is reported, never waited for.

Examples:
  spool status /var/lib/spool
  spool status /var/lib/spool/3f2a9c01b7de/r0-1a2b3c4d
  spool status /var/lib/spool --json | jq '.rank_dirs[] | select(.state == \"blocked\")'
  spool status /var/lib/spool --metrics-addr 127.0.0.1:9464";

/// `owned by pid P on host H (purpose)`, `not owned (…)`: a spool
/// directory's owner in words.
fn owner_text(o: &OwnerView) -> String {
    let who = match (&o.host, o.pid) {
        (Some(h), Some(p)) => format!("pid {p} on host {h}"),
        (Some(h), None) => format!("pid unknown on host {h}"),
        _ => "no owner record".to_string(),
    };
    let purpose = o.purpose.as_deref().unwrap_or("-");
    let text = match o.state {
        OwnerState::Live => format!("owned by {who} ({purpose})"),
        OwnerState::Blocked => format!("not owned; {purpose} (last {who})"),
        _ if o.lock_file_present == Some(false) => "not owned (no lock file)".into(),
        _ => format!("not owned (last {who})"),
    };
    match o.held_shared_text() {
        Some(shared) => {
            format!("{text}; {shared} (a reader, not an owner: adoption retries until it lets go)")
        }
        None => text,
    }
}

/// Where to ask the daemon: `--metrics-addr`, else the configuration's
/// `metrics.addr`; `Err` says why the configuration could not tell.
fn daemon_addr(args: &Args, config_file: Option<&Path>) -> Result<Option<SocketAddr>, String> {
    if args.metrics_addr.is_some() {
        return Ok(args.metrics_addr);
    }
    let cfg = crate::config::load(config_file, &Default::default()).map_err(|e| e.to_string())?;
    Ok(crate::config::keys::METRICS_ADDR.get(&cfg))
}

/// Runs `spool status`.
pub fn run(args: Args, config_file: Option<&Path>) -> Result<ExitCode> {
    let report = status(&args.path)?;
    let daemon = match daemon_addr(&args, config_file) {
        Ok(addr) => addr.map(daemon::ask),
        Err(why) => Some(daemon::Daemon::NotAsked {
            why: format!("the configuration, which names its metrics.addr, does not load: {why}"),
        }),
    };
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let Some(fields) = value.as_object_mut() {
            fields.insert("daemon".into(), serde_json::to_value(&daemon)?);
        }
        outln!("{value}");
        return Ok(ExitCode::Ok);
    }
    match &report {
        Status::Spool { path, owner, packs } => {
            outln!("spool directory {}", path.display());
            outln!("  owner:       {}", owner_text(owner));
            for (name, k) in [
                ("ready", packs.ready),
                ("open", packs.open),
                ("quarantined", packs.quarantined),
                ("rejected", packs.rejected),
            ] {
                outln!("  {name:<12} {} packs, {} bytes", k.count, k.bytes);
            }
            if packs.rejected.count > 0 {
                outln!(
                    "  rejected packs are kept until a person fixes their cause; then `spool requeue {}`",
                    path.display()
                );
            }
        }
        Status::Root { path, rank_dirs } => {
            outln!(
                "spool root {} ({} rank directories)",
                path.display(),
                rank_dirs.len()
            );
            print_root_table(rank_dirs)?;
            for r in rank_dirs.iter().filter(|r| r.detail.rejected.count > 0) {
                outln!(
                    "{}: {} rejected pack(s) kept until a person fixes their cause; then `spool requeue {}`",
                    r.path.display(),
                    r.detail.rejected.count,
                    r.path.display()
                );
            }
        }
    }
    if let Some(d) = &daemon {
        outln!("daemon: {}", d.text());
    }
    Ok(ExitCode::Ok)
}

/// Who a row's owner record names: `pid P on host H` (with `last` when the
/// lock is not held).
fn owner_cell(row: &RankDirRow) -> String {
    let o = &row.owner;
    if o.lock_file_replaced {
        return "unknown (lock file replaced)".into();
    }
    let who = match (&o.host, o.pid) {
        (Some(h), Some(p)) => format!("pid {p} on {h}"),
        (Some(h), None) => format!("pid ? on {h}"),
        _ => return "-".into(),
    };
    match o.state {
        OwnerState::Live => format!("{who} ({})", o.purpose.as_deref().unwrap_or("-")),
        _ => format!("last {who}"),
    }
}

fn print_root_table(rows: &[RankDirRow]) -> Result<()> {
    let head = [
        "KEY", "RANK DIR", "STATE", "OWNER", "READY", "BYTES", "REASON",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.key.clone().unwrap_or_else(|| "-".to_owned()),
                r.dir.clone().unwrap_or_else(|| "?".to_owned()),
                r.state.as_str().to_owned(),
                owner_cell(r),
                r.packs.to_string(),
                indicatif::BinaryBytes(r.bytes).to_string(),
                r.reason.clone().unwrap_or_default(),
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
