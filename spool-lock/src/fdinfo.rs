//! "Does THIS process hold the lock?" — asked of the kernel through
//! `/proc/self/fdinfo`, with the owner record as the fallback where fdinfo
//! lists no locks (gVisor, WSL1).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::sys::RegFd;
use crate::{host_name, read_owner, seams, Error, LOCK_FILE_NAME};

/// Reads `/proc/self/fdinfo/<fd>` (through the fdinfo seam).
fn read_fdinfo(fd: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    if seams::fdinfo_hides_locks() {
        return Some(
            text.lines()
                .filter(|l| !l.starts_with("lock:"))
                .map(|l| format!("{l}\n"))
                .collect(),
        );
    }
    Some(text)
}

/// True when an fdinfo text shows an exclusive flock held by that
/// description (`lock:\t1: FLOCK  ADVISORY  WRITE ...`). Probes take shared
/// locks (`READ`), so a concurrent probe never reads as a hold.
fn shows_exclusive_flock(text: &str) -> bool {
    text.lines().any(|l| {
        l.starts_with("lock:") && {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.contains(&"FLOCK") && words.contains(&"WRITE")
        }
    })
}

fn probe_fdinfo_lists_locks() -> bool {
    let path = std::env::temp_dir().join(format!(
        ".spool-lock-fdinfo-probe.{}.{:x}",
        std::process::id(),
        crate::names::random_u32()
    ));
    let fd = match RegFd::open(
        &path,
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        0o600,
    ) {
        Ok(fd) => fd,
        Err(err) => {
            tracing::debug!(path = %path.display(), %err, "cannot make the fdinfo probe file; the owner record decides");
            return false;
        }
    };
    let _ = std::fs::remove_file(&path);
    let lists = matches!(fd.try_flock(libc::LOCK_EX), Ok(true))
        && read_fdinfo(&fd.raw().to_string()).is_some_and(|t| shows_exclusive_flock(&t));
    drop(fd);
    if !lists {
        tracing::info!("this kernel's /proc/self/fdinfo lists no flocks (gVisor, WSL1?): held_by_caller falls back to the owner record (this host, this pid)");
    }
    lists
}

/// Whether `/proc/self/fdinfo` lists flocks here: probed once per process
/// with a flock on a temporary file.
pub(crate) fn fdinfo_lists_locks() -> bool {
    if seams::fdinfo_hides_locks() {
        return false;
    }
    static LISTS: OnceLock<bool> = OnceLock::new();
    *LISTS.get_or_init(probe_fdinfo_lists_locks)
}

/// Any descriptor of this process on one of `targets` (dev, ino) whose
/// description holds an exclusive flock. `None` when `/proc/self/fd`
/// cannot be read.
fn any_descriptor_holds(targets: &[(u64, u64)]) -> Option<bool> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(fd) = name.to_str() else { continue };
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if !targets.contains(&(meta.dev(), meta.ino())) {
            continue;
        }
        if read_fdinfo(fd).is_some_and(|t| shows_exclusive_flock(&t)) {
            return Some(true);
        }
    }
    Some(false)
}

/// True when THIS process holds `dir`'s lock, on the lock file at its path
/// or on the directory itself (so an owner whose lock file was replaced
/// still reads as holding it).
///
/// The kernel answers (`/proc/self/fdinfo`); where fdinfo lists no flocks
/// (probed once per process), the owner record decides: the lock is held
/// and the record names this host and this pid.
pub fn held_by_this_process(dir: &Path) -> Result<bool, Error> {
    let dmeta = std::fs::metadata(dir).map_err(|e| Error::io("stat", dir, e))?;
    let mut targets = vec![(dmeta.dev(), dmeta.ino())];
    if let Ok(fmeta) = std::fs::symlink_metadata(dir.join(LOCK_FILE_NAME)) {
        targets.push((fmeta.dev(), fmeta.ino()));
    }
    if fdinfo_lists_locks() {
        if let Some(held) = any_descriptor_holds(&targets) {
            return Ok(held);
        }
    }
    let status = read_owner(dir)?;
    Ok(status.held
        && status
            .record
            .is_some_and(|r| r.pid == Some(std::process::id()) && r.host == host_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_flock_lines_are_recognised() {
        let held = "pos:\t0\nflags:\t02100002\nmnt_id:\t30\nino:\t5\nlock:\t1: FLOCK  ADVISORY  WRITE 1234 fd:01:5 0 EOF\n";
        assert!(shows_exclusive_flock(held));
        let shared = held.replace("WRITE", "READ ");
        assert!(!shows_exclusive_flock(&shared));
        assert!(!shows_exclusive_flock("pos:\t0\nflags:\t02\n"));
        assert!(!shows_exclusive_flock(
            "lock:\t1: POSIX  ADVISORY  WRITE 1 fd:01:5 0 EOF\n"
        ));
    }
}
