//! Probes: who holds a directory's lock, without blocking and without
//! making a concurrent legitimate take fail.
//!
//! A probe opens a fresh (registered) descriptor and tries a *shared*
//! `flock(LOCK_SH|LOCK_NB)`: refused means an exclusive holder exists;
//! granted means nobody holds it, and the close drops the shared lock at
//! once. A take that meets such a momentary shared lock retries briefly
//! (see `TAKE_RETRIES` in `lock.rs`), so a probe never makes it fail;
//! two probes never refuse each other.

use std::io;
use std::path::{Path, PathBuf};

use crate::record::{OwnerRecord, MAX_RECORD_BYTES};
use crate::sys::RegFd;
use crate::{Error, Holder, LOCK_FILE_NAME};

/// What [`read_owner`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerStatus {
    /// Someone (maybe this process) holds the lock, on the lock file or on
    /// the directory.
    pub held: bool,
    /// The owner record in the lock file, whether or not the lock is held
    /// (`None` when there is no lock file or nothing readable in it).
    pub record: Option<OwnerRecord>,
    /// The directory is locked but the file at `.owner.lock` is not: the
    /// holder's lock file was removed or replaced behind its back, so the
    /// record (if any) does not name the holder.
    pub lock_file_replaced: bool,
    /// A `.owner.lock` exists.
    pub lock_file_present: bool,
    /// Other processes holding a *shared* flock on the lock file or the
    /// directory right now (from `/proc/locks`; this process left out).
    /// Usually a probe that lets go at once; one that stays (a reader in
    /// group mode) makes takes wait and fail with
    /// [`Error::HeldShared`] until it lets go. Empty when the lock is held
    /// exclusively.
    pub shared_by: Vec<u32>,
}

impl OwnerStatus {
    /// The holder as the record names it (`unknown` fields when it does not).
    pub fn holder(&self) -> Holder {
        holder_of(self.record.as_ref())
    }
}

pub(crate) fn holder_of(record: Option<&OwnerRecord>) -> Holder {
    match record {
        Some(r) => Holder {
            pid: r.pid,
            host: r.host.clone(),
        },
        None => Holder {
            pid: None,
            host: "unknown".to_owned(),
        },
    }
}

/// The shared holders of a probed (not exclusively held) descriptor's inode.
fn shared_by(held: bool, fd: &RegFd, into: &mut Vec<u32>) {
    if held {
        return;
    }
    if let Ok(st) = fd.fstat() {
        for pid in crate::holders::shared_holders(&st) {
            if !into.contains(&pid) {
                into.push(pid);
            }
        }
    }
}

/// Probes one inode. `Ok(None)` when the path does not exist.
fn probe(path: &Path, directory: bool) -> io::Result<Option<(bool, RegFd)>> {
    let flags = if directory {
        libc::O_RDONLY | libc::O_DIRECTORY
    } else {
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW
    };
    let fd = match RegFd::open(path, flags, 0) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let free = fd.try_flock(libc::LOCK_SH)?;
    Ok(Some((!free, fd)))
}

pub(crate) fn read_record(fd: &RegFd) -> Option<OwnerRecord> {
    let st = fd.fstat().ok()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    OwnerRecord::parse(&fd.read_prefix(MAX_RECORD_BYTES).ok()?)
}

/// Who holds `dir`'s lock, and what its owner record says. Never blocks,
/// never takes the lock (only a momentary shared probe, which no take
/// fails on), and reads the record whether or not the lock is held.
pub fn read_owner(dir: &Path) -> Result<OwnerStatus, Error> {
    let lock_path = dir.join(LOCK_FILE_NAME);
    let file = probe(&lock_path, false).map_err(|e| match e.raw_os_error() {
        // O_NOFOLLOW refuses a symlink (ELOOP), a socket does not open
        // (ENXIO): say what the lock file is, not the errno
        Some(libc::ELOOP | libc::ENXIO) => {
            let mode = std::fs::symlink_metadata(&lock_path)
                .map(|m| std::os::unix::fs::MetadataExt::mode(&m))
                .unwrap_or(0);
            crate::error::not_regular(dir, &lock_path, mode)
        }
        _ => Error::io("probe lock file", &lock_path, e),
    })?;
    let mut shared = Vec::new();
    let (file_held, record, present) = match file {
        Some((held, fd)) => {
            shared_by(held, &fd, &mut shared);
            (held, read_record(&fd), true)
        }
        None => (false, None, false),
    };
    // Probe the directory too: a take holds both, and a lock file replaced
    // behind the owner's back leaves only the directory's lock in place.
    crate::seams::run_hook(crate::seams::HookPoint::ProbingDirectory, dir);
    let dir_held = match probe(dir, true).map_err(|e| Error::io("probe directory", dir, e))? {
        Some((held, fd)) => {
            shared_by(held, &fd, &mut shared);
            held
        }
        None => {
            return Err(Error::io(
                "probe directory",
                dir,
                io::Error::from(io::ErrorKind::NotFound),
            ))
        }
    };
    Ok(OwnerStatus {
        held: file_held || dir_held,
        record,
        lock_file_replaced: dir_held && !file_held,
        lock_file_present: present,
        shared_by: if file_held || dir_held {
            Vec::new()
        } else {
            shared
        },
    })
}

/// The holder of `dir` when its lock file exists and it is held; for the
/// nesting checks, where an unheld (stale) lock file never refuses.
pub(crate) fn held_spool(dir: &Path) -> Result<Option<Holder>, Error> {
    let lock_path = dir.join(LOCK_FILE_NAME);
    if std::fs::symlink_metadata(&lock_path).is_err() {
        return Ok(None);
    }
    crate::seams::run_hook(crate::seams::HookPoint::CheckingNestedSpool, dir);
    let status = match read_owner(dir) {
        Ok(s) => s,
        // Vanished between the listing and the probe: not a holder.
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    Ok(status.held.then(|| status.holder()))
}

/// True when `dir` has a `.owner.lock` of its own: another spool directory
/// (live or dead), which no walk of an enclosing spool counts, sweeps,
/// lists or uploads.
pub fn is_nested_spool(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(LOCK_FILE_NAME)).is_ok()
}

/// `<dir>/.owner.lock`.
pub fn lock_path(dir: &Path) -> PathBuf {
    dir.join(LOCK_FILE_NAME)
}
