//! What the commands that work on one existing spool directory (`requeue`,
//! `unblock`) check before they lock it.

use std::path::Path;

use spool_lock::LockOptions;

use crate::exit::{coded, ExitCode};

/// The lock options of a command that works on one existing spool
/// directory, refusing (exit 1) a `dir` that is not a directory.
pub(crate) fn existing_spool_dir(
    dir: &Path,
    allow_shared_filesystem: bool,
) -> anyhow::Result<LockOptions> {
    if !dir.is_dir() {
        return Err(coded(
            ExitCode::Other,
            format!(
                "spool directory {} does not exist (or is not a directory)",
                dir.display()
            ),
        ));
    }
    Ok(LockOptions {
        allow_shared_filesystem,
        ..LockOptions::default()
    })
}
