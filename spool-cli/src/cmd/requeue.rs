//! `spool requeue DIR`: turns packs set aside back into ready packs once a
//! person fixed the cause — `<id>.rejected` (an own pack that failed for
//! good, e.g. a different object at its key), and with `--quarantined` the
//! `<id>.quarantined` packs that now validate. The directory's lock is held
//! throughout (refused with exit 3 while anyone holds it), a ready pack is
//! never replaced (spool-core's `Spool::requeue`), and it says what it changed.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::json;
use spool_core::spool::Requeued;
use spool_core::{Spool, SpoolConfig};
use spool_lock::LockMode;

use crate::exit::{coded, ExitCode};

/// Arguments of `spool requeue`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool (rank) directory.
    pub dir: PathBuf,
    /// Requeue `<id>.rejected` packs (the default when no kind is named).
    #[arg(long)]
    pub rejected: bool,
    /// Requeue `<id>.quarantined` packs that validate now (each is hashed
    /// first; one that still fails stays quarantined).
    #[arg(long)]
    pub quarantined: bool,
    /// Print one JSON object: dir, requeued, kept (with why).
    #[arg(long)]
    pub json: bool,
    /// Admit a shared (network) filesystem. Only for one used by one node.
    #[arg(long)]
    pub allow_shared_filesystem: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Turn packs set aside back into ready packs, after a person fixed the cause.

A service renames an own pack that failed for good to `<id>.rejected` (a
different object already at its key, a pack over max_in_flight_bytes,
staged bytes that changed) and a corrupt one to `<id>.quarantined`; both
stay in the directory, counted, never uploaded. Once the cause is fixed
(the conflicting object compared and removed, the bound raised), `spool
requeue DIR` renames every `<id>.rejected` back to `<id>.ready`; with
`--quarantined` it also requeues the quarantined packs that validate now
(hashed first; one that still fails stays). The next service (or the
adopter of a dead directory) uploads them.

requeue takes the directory's lock while it works: refused (exit 3, naming
the holder) while anyone holds it. A pack whose `<id>.ready` exists is left
as it is. It says what it changed and what it kept.

Examples:
  spool status /var/lib/spool                          # shows rejected packs
  spool requeue /var/lib/spool/3f2a9c01b7de/r3-8c1d22e0
  spool requeue --quarantined --rejected DIR";

/// Runs `spool requeue`.
pub fn run(args: Args) -> Result<ExitCode> {
    let dir = &args.dir;
    let opts = super::spool_dir::existing_spool_dir(dir, args.allow_shared_filesystem)?;
    let config = SpoolConfig {
        lock_mode: LockMode::Take,
        lock: opts,
        ..SpoolConfig::default()
    };
    let spool = match Spool::open(dir, &config) {
        Ok(s) => s,
        Err(spool_core::Error::Lock(e)) if e.is_owned_by_another() => {
            return Err(coded(
                ExitCode::Owned,
                format!(
                    "{e}; nothing is requeued in a directory someone holds (its owner may be \
                     working on it). Stop it, or check again with `spool status`"
                ),
            ))
        }
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("cannot requeue in {}", dir.display()))
            )
        }
    };
    let rejected = args.rejected || !args.quarantined;
    let result = spool.requeue(rejected, args.quarantined);
    let released = spool.into_claim().map_or(Ok(()), |c| c.release());
    let seen = result.with_context(|| format!("cannot requeue in {}", dir.display()))?;
    released.with_context(|| format!("releasing the lock of {}", dir.display()))?;
    let requeued: Vec<&Requeued> = seen.iter().filter(|s| s.kept().is_none()).collect();
    let kept: Vec<&Requeued> = seen.iter().filter(|s| s.kept().is_some()).collect();
    if args.json {
        outln!(
            "{}",
            json!({
                "dir": dir,
                "requeued": requeued.iter().map(|s| json!({"from": s.from(), "to": s.to()})).collect::<Vec<_>>(),
                "kept": kept.iter().map(|s| json!({"path": s.from(), "why": s.kept()})).collect::<Vec<_>>(),
            })
        );
    } else {
        for s in &requeued {
            outln!("requeued {} -> {}", s.from().display(), s.to().display());
        }
        for s in &kept {
            outln!(
                "kept {}: {}",
                s.from().display(),
                s.kept().unwrap_or_default()
            );
        }
        outln!(
            "{}: {} pack(s) requeued as ready, {} kept as they were{}",
            dir.display(),
            requeued.len(),
            kept.len(),
            if requeued.is_empty() {
                ""
            } else {
                "; the next service (or adopter) uploads them"
            }
        );
    }
    Ok(ExitCode::Ok)
}
