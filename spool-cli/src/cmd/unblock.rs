//! `spool unblock DIR`: clears a spool directory's `blocked: <why>` mark
//! (spool-lock's [`spool_lock::clear_blocked`]) once a person fixed the
//! cause, so adopters take it again.

use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use spool_lock::{OwnerRecord, Unblocked};

use crate::exit::{coded, ExitCode};

/// Arguments of `spool unblock`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The blocked spool (rank) directory.
    pub dir: PathBuf,
    /// Print one JSON object: dir, cleared (bool), reason, previous holder.
    #[arg(long)]
    pub json: bool,
    /// Admit a shared (network) filesystem. Only for one used by one node.
    #[arg(long)]
    pub allow_shared_filesystem: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Clear a spool directory's blocked mark, after a person fixed its cause.

An adopter that cannot finish a dead rank directory (a pack the store
refuses for good, a quarantined pack, a file it does not know, a directory
it may not open) ships what it can, writes `blocked: <why>` into the
directory's owner record and lets go. Every service then skips the
directory until an operator clears the mark: `spool status ROOT` shows it
with its reason. Fix the cause (move the odd file away, `spool recover
DIR --purge-quarantined`, fix the credentials), then run `spool unblock
DIR`; the next adopter takes the directory again.

unblock takes the directory's lock for a moment: it is refused (exit 3,
naming the holder) while anyone holds it, so a live owner's directory is
never touched. It reads the record under the lock, rewrites it only if it
says blocked, and lets go. Running it on a directory that is not blocked
changes nothing and says so (exit 0).

Examples:
  spool status /var/lib/spool          # shows `blocked: <why>` rows
  spool unblock /var/lib/spool/3f2a9c01b7de/r3-8c1d22e0";

fn who(record: &OwnerRecord) -> String {
    format!(
        "pid {} on host {}",
        record
            .pid
            .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        record.host
    )
}

/// Runs `spool unblock`.
pub fn run(args: Args) -> Result<ExitCode> {
    let dir = &args.dir;
    let opts = super::spool_dir::existing_spool_dir(dir, args.allow_shared_filesystem)?;
    let outcome = match spool_lock::clear_blocked(dir, &opts) {
        Ok(o) => o,
        Err(e) if e.is_owned_by_another() => {
            return Err(coded(
                ExitCode::Owned,
                format!(
                    "{e}; a held directory is never unblocked: its owner is alive (an adopter \
                     holding it is still working on it). Check again with `spool status`"
                ),
            ))
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot unblock {}", dir.display())))
        }
    };
    match &outcome {
        Unblocked::Cleared { why, previous } => {
            if args.json {
                outln!(
                    "{}",
                    json!({"dir": dir, "cleared": true, "reason": why,
                           "marked_by": {"host": previous.host, "pid": previous.pid}})
                );
            } else {
                outln!(
                    "{}: cleared the blocked mark (it said: {why}; written by {}). The next \
                     adopter on this node takes the directory.",
                    dir.display(),
                    who(previous)
                );
            }
        }
        Unblocked::NotBlocked { record } => {
            if args.json {
                outln!(
                    "{}",
                    json!({"dir": dir, "cleared": false, "reason": null,
                           "record": record.as_ref().map(|r| json!({
                               "host": r.host, "pid": r.pid, "purpose": r.purpose.to_string()}))})
                );
            } else {
                let state = match record {
                    Some(r) => format!(
                        "its owner record says `{}` (last held by {})",
                        r.purpose,
                        who(r)
                    ),
                    None => "it has no owner record".to_owned(),
                };
                outln!(
                    "{}: nothing to clear, it is not blocked: {state}. Nothing was changed.",
                    dir.display()
                );
            }
        }
    }
    Ok(ExitCode::Ok)
}
