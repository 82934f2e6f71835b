//! `spool recover DIR [--json] [--purge-quarantined]`: takes the lock,
//! sweeps dead writers' temp files, quarantines corrupt packs.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use serde_json::json;
use spool_core::spool::{RecoveryReport, RecoveryStep, Spool, SpoolConfig};
use spool_lock::{LockMode, LockOptions};

use crate::exit::ExitCode;
use crate::progress::{Mode, Progress};

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
    /// No progress on stderr (by default a bar on a terminal, else a plain
    /// line at the start, every few seconds, and at the end).
    #[arg(long)]
    pub no_progress: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Recover a spool directory by hand: take its lock (refused with exit 3,
naming the holder, while anyone holds it), sweep the temp files of dead
writers (`.<id>.<rand>.open`), validate every ready pack and rename the
corrupt ones to `<id>.quarantined` (kept, counted in the budget, never
uploaded), then let go. With --purge-quarantined the quarantined packs are
removed afterwards (they are data: look first).

A service recovers its own directory at start, and adopters validate what
they adopt, so this is for an operator looking at a directory by hand.
Progress goes to stderr (a bar on a terminal, plain lines otherwise);
--json output on stdout stays clean.

Examples:
  spool recover /var/lib/spool/3f2a9c01b7de/r0-1a2b3c4d
  spool recover DIR --json --purge-quarantined";

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
    let report = recover_with_progress(&spool, &args)
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
        outln!(
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
        outln!(
            "{}: swept {} temp files, quarantined {} packs, {} valid",
            args.dir.display(),
            report.swept.len(),
            report.quarantined.len(),
            report.valid.len()
        );
        for q in &report.quarantined {
            outln!("  quarantined {}: {}", q.path.display(), q.reason);
        }
        if let Some((n, b)) = purged {
            outln!("  purged {n} quarantined packs ({b} bytes)");
        }
    }
    if let Some(claim) = spool.into_claim() {
        claim.release()?;
    }
    Ok(ExitCode::Ok)
}

/// [`Spool::recover`], step by step (`begin_recovery`, then one
/// `continue_recovery` per pack) so progress can be shown.
fn recover_with_progress(spool: &Spool, args: &Args) -> Result<RecoveryReport, spool_core::Error> {
    let never = AtomicBool::new(false);
    let mut rec = spool.begin_recovery()?;
    let total = rec.remaining() as u64;
    let progress = Progress::start(
        format!("recover {}", args.dir.display()),
        Some(total),
        Mode::pick(args.json, args.no_progress),
    );
    let mut report = RecoveryReport::default();
    let (mut done, mut bytes) = (0u64, 0u64);
    while let Some(step) = spool.continue_recovery(&mut rec, &never)? {
        done += 1;
        match step {
            RecoveryStep::Valid(p, _) => {
                bytes += p.bytes;
                report.valid.push(p);
            }
            RecoveryStep::Quarantined(q) => report.quarantined.push(q),
        }
        progress.set(done, bytes);
    }
    report.swept = rec.swept;
    report.quarantined.extend(rec.set_aside);
    progress.finish(&format!(
        "{} valid, {} quarantined, {} temp files swept",
        report.valid.len(),
        report.quarantined.len(),
        report.swept.len()
    ));
    Ok(report)
}
