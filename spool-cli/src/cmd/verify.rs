//! `spool verify DIR [--json]`: validates every ready pack without taking
//! the lock or changing anything; exit 8 if any is corrupt.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use serde_json::json;

use crate::exit::ExitCode;
use crate::progress::{Mode, Progress};

/// Arguments of `spool verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool directory.
    pub dir: PathBuf,
    /// Print JSON: `valid` (count), `corrupt` and `quarantined` (lists of
    /// `{path, reason}`).
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr (by default a bar on a terminal, else a plain
    /// line at the start, every few seconds, and at the end).
    #[arg(long)]
    pub no_progress: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Validate every ready pack of a spool directory (and its w<k>/
subdirectories) without taking the lock or changing anything: safe beside
a live owner. Each pack is read whole and checked (header, records,
footer, trailer, SHA-256) in bounded memory. Packs already set aside as
<id>.quarantined (by recovery, or by an upload whose bytes no longer
matched their checksum) are validated too and listed with what is wrong.

Exit 0 when every pack is valid, 8 when any is corrupt; then run `spool
recover DIR` to quarantine them. Progress goes to stderr (a bar on a
terminal, plain lines otherwise); --json output on stdout stays clean.

Examples:
  spool verify /var/lib/spool/3f2a9c01b7de/r0-1a2b3c4d
  spool verify DIR --json | jq '.corrupt[].path'";

/// Runs `spool verify`.
pub fn run(args: Args) -> Result<ExitCode> {
    // A path that is not there (a typo) is said so, not reported as a spool
    // that vanished while in use.
    match std::fs::metadata(&args.dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(crate::exit::coded(
                ExitCode::Usage,
                format!(
                    "{} is not a directory: give a spool directory (`spool status ROOT` lists them)",
                    args.dir.display()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(crate::exit::coded(
                ExitCode::Other,
                format!(
                    "spool directory {} does not exist: check the path (`spool status ROOT` lists the rank directories)",
                    args.dir.display()
                ),
            ))
        }
        Err(_) => {} // the verify below names the failure
    }
    let progress = Progress::start(
        format!("verify {}", args.dir.display()),
        None,
        Mode::pick(args.json, args.no_progress),
    );
    let report =
        spool_core::spool::verify_dir_with_progress(&args.dir, &AtomicBool::new(false), |at| {
            if at.done == 0 {
                progress.set_total(at.total);
            }
            progress.set(at.done, at.done_bytes);
        })
        .with_context(|| format!("cannot verify spool directory {}", args.dir.display()))?;
    progress.finish(&format!(
        "{} valid, {} corrupt",
        report.valid.len(),
        report.corrupt.len()
    ));
    if args.json {
        let corrupt: Vec<_> = report
            .corrupt
            .iter()
            .map(|(p, r)| json!({"path": p, "reason": r}))
            .collect();
        let quarantined: Vec<_> = report
            .quarantined
            .iter()
            .map(|(p, r)| json!({"path": p, "reason": r}))
            .collect();
        outln!(
            "{}",
            json!({"dir": args.dir, "valid": report.valid.len(), "corrupt": corrupt, "quarantined": quarantined})
        );
    } else {
        outln!(
            "{}: {} valid, {} corrupt",
            args.dir.display(),
            report.valid.len(),
            report.corrupt.len()
        );
        for (p, r) in &report.corrupt {
            outln!("  corrupt {}: {r}", p.display());
        }
        for (p, r) in &report.quarantined {
            outln!("  quarantined {}: {r}", p.display());
        }
        if !report.corrupt.is_empty() {
            outln!(
                "run `spool recover {}` to quarantine them",
                args.dir.display()
            );
        }
    }
    Ok(if report.corrupt.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::Corrupt
    })
}
