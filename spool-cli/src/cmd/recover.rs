//! `spool recover DIR [--json] [--purge-quarantined]`: takes the lock,
//! sweeps dead writers' temp files, quarantines corrupt packs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;
use spool_core::spool::{Spool, SpoolConfig};
use spool_lock::{LockMode, LockOptions};

use crate::exit::ExitCode;

/// Arguments of `spool recover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool directory.
    pub dir: PathBuf,
    /// Print JSON: `swept`, `quarantined`, `valid` (counts), and the
    /// quarantined packs with their reasons.
    #[arg(long)]
    pub json: bool,
    /// Also remove every quarantined pack (after this recovery).
    #[arg(long)]
    pub purge_quarantined: bool,
    /// Admit a shared (network) filesystem. Only for one used by one node.
    #[arg(long)]
    pub allow_shared_filesystem: bool,
}

/// Runs `spool recover`.
pub fn run(args: Args) -> Result<ExitCode> {
    anyhow::ensure!(
        args.dir.is_dir(),
        "spool directory {} does not exist",
        args.dir.display()
    );
    let config = SpoolConfig {
        lock_mode: LockMode::Take,
        lock: LockOptions {
            allow_shared_filesystem: args.allow_shared_filesystem,
            ..LockOptions::default()
        },
        ..SpoolConfig::default()
    };
    let spool = Spool::open(&args.dir, &config)
        .with_context(|| format!("cannot open spool directory {}", args.dir.display()))?;
    let report = spool
        .recover()
        .with_context(|| format!("cannot recover spool directory {}", args.dir.display()))?;
    let purged = if args.purge_quarantined {
        Some(spool.purge_quarantined()?)
    } else {
        None
    };
    if args.json {
        let q: Vec<_> = report
            .quarantined
            .iter()
            .map(|q| json!({"path": q.path, "reason": q.reason}))
            .collect();
        println!(
            "{}",
            json!({
                "dir": args.dir,
                "swept": report.swept.len(),
                "quarantined": report.quarantined.len(),
                "valid": report.valid.len(),
                "quarantined_packs": q,
                "purged": purged.map(|(n, b)| json!({"count": n, "bytes": b})),
            })
        );
    } else {
        println!(
            "{}: swept {} temp files, quarantined {} packs, {} valid",
            args.dir.display(),
            report.swept.len(),
            report.quarantined.len(),
            report.valid.len()
        );
        for q in &report.quarantined {
            println!("  quarantined {}: {}", q.path.display(), q.reason);
        }
        if let Some((n, b)) = purged {
            println!("  purged {n} quarantined packs ({b} bytes)");
        }
    }
    if let Some(claim) = spool.into_claim() {
        claim.release()?;
    }
    Ok(ExitCode::Ok)
}
