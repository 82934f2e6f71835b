//! `spool verify DIR [--json]`: validates every ready pack without taking
//! the lock or changing anything; exit 8 if any is corrupt.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use serde_json::json;

use crate::exit::ExitCode;

/// Arguments of `spool verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool directory.
    pub dir: PathBuf,
    /// Print JSON: `valid` (count) and `corrupt` (list of `{path, reason}`).
    #[arg(long)]
    pub json: bool,
}

/// Runs `spool verify`.
pub fn run(args: Args) -> Result<ExitCode> {
    let report = spool_core::spool::verify_dir(&args.dir, &AtomicBool::new(false))
        .with_context(|| format!("cannot verify spool directory {}", args.dir.display()))?;
    if args.json {
        let corrupt: Vec<_> = report
            .corrupt
            .iter()
            .map(|(p, r)| json!({"path": p, "reason": r}))
            .collect();
        println!(
            "{}",
            json!({"dir": args.dir, "valid": report.valid.len(), "corrupt": corrupt})
        );
    } else {
        println!(
            "{}: {} valid, {} corrupt",
            args.dir.display(),
            report.valid.len(),
            report.corrupt.len()
        );
        for (p, r) in &report.corrupt {
            println!("  corrupt {}: {r}", p.display());
        }
        if !report.corrupt.is_empty() {
            println!(
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
