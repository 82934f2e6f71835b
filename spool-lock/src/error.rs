//! The one error type of spool-lock: a variant per way a lock operation can
//! fail or be refused. Every message names the directory (and the holder,
//! when one is known) and says what to do.

use std::path::{Path, PathBuf};

/// Who holds a lock, as far as its owner record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's pid, from the owner record (`None` if the record has none).
    pub pid: Option<u32>,
    /// The holder's host, from the owner record (`"unknown"` if it has none).
    pub host: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid} on host {}", self.host),
            None => write!(f, "pid unknown on host {}", self.host),
        }
    }
}

/// Everything spool-lock can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another process holds the directory's lock.
    #[error(
        "spool directory {} is owned by {holder} (it holds {}); stop that process or use another directory",
        dir.display(),
        lock_path.display()
    )]
    OwnedByOther {
        /// The spool directory.
        dir: PathBuf,
        /// Who holds it (from its owner record).
        holder: Holder,
        /// `<dir>/.owner.lock`.
        lock_path: PathBuf,
    },

    /// This very process already holds the directory's lock (flock binds to
    /// an open file description, so a second take in one process is refused).
    #[error(
        "spool directory {} is already owned by this process (pid {pid}; it holds {}); \
         a second take in one process is refused: open the spool `held_by_caller` instead",
        dir.display(),
        lock_path.display()
    )]
    HeldByThisProcess {
        /// The spool directory.
        dir: PathBuf,
        /// This process's pid.
        pid: u32,
        /// `<dir>/.owner.lock`.
        lock_path: PathBuf,
    },

    /// The directory itself is locked but its lock file is not: the owner's
    /// lock file was removed or replaced behind its back, so its holder
    /// cannot be named.
    #[error(
        "spool directory {} is owned by a live process whose lock file {} was removed or \
         replaced behind its back, so the holder cannot be named; find it with \
         `fuser -v {}` and wait for it to exit",
        dir.display(),
        lock_path.display(),
        dir.display()
    )]
    LockFileReplaced {
        /// The spool directory.
        dir: PathBuf,
        /// `<dir>/.owner.lock` (the path, not the holder's unlinked inode).
        lock_path: PathBuf,
    },

    /// `held_by_caller` was asked for but nobody holds the lock.
    #[error(
        "spool directory {} is opened held_by_caller but nobody holds its lock ({}); \
         claim the directory first (or open it with mode `take`)",
        dir.display(),
        lock_path.display()
    )]
    NotHeld {
        /// The spool directory.
        dir: PathBuf,
        /// `<dir>/.owner.lock`.
        lock_path: PathBuf,
    },

    /// The directory is on a filesystem where flock does not exclude
    /// other nodes, and `allow_shared_filesystem` was not set.
    #[error(
        "spool directory {} is on a shared filesystem ({fs_name}, statfs type {magic:#x}), \
         where flock does not keep out processes on other nodes{hint}; move the spool to a \
         node-local filesystem, or set allow_shared_filesystem (--allow-shared-filesystem) \
         if you are sure only this node uses it",
        path.display()
    )]
    SharedFilesystem {
        /// The path checked.
        path: PathBuf,
        /// The filesystem's name (`NFS`, `Lustre`, ...).
        fs_name: &'static str,
        /// Its statfs `f_type` magic.
        magic: u32,
        /// Extra advice for some filesystems (FUSE), or empty.
        hint: &'static str,
    },

    /// The directory lies inside a spool directory whose lock is held.
    #[error(
        "spool directory {} is nested under the owned spool directory {} ({holder} holds it); \
         use a directory outside it",
        dir.display(),
        outer.display()
    )]
    NestedUnderHeld {
        /// The directory being taken.
        dir: PathBuf,
        /// The held ancestor.
        outer: PathBuf,
        /// Who holds the ancestor.
        holder: Holder,
    },

    /// The directory contains a spool directory whose lock is held.
    #[error(
        "spool directory {} contains the owned spool directory {} ({holder} holds it); \
         use a directory that does not contain a live spool",
        dir.display(),
        inner.display()
    )]
    ContainsHeld {
        /// The directory being taken.
        dir: PathBuf,
        /// The held descendant.
        inner: PathBuf,
        /// Who holds the descendant.
        holder: Holder,
    },

    /// An unknown owner-lock mode string (config, flag).
    #[error("unknown owner-lock mode {value:?}: expected \"take\" or \"held_by_caller\"")]
    UnknownMode {
        /// The refused value.
        value: String,
    },

    /// The filesystem cannot rename without replacing (`renameat2`
    /// `RENAME_NOREPLACE` unsupported); spool-lock never falls back to a
    /// plain rename.
    #[error(
        "cannot create spool directory {} locked: its filesystem does not support \
         renameat2(RENAME_NOREPLACE) ({source}); create the directory beforehand \
         or use a local filesystem (ext4, xfs, btrfs, tmpfs)",
        dir.display()
    )]
    NoReplaceUnsupported {
        /// The directory being created.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },

    /// The lock file kept being replaced between its open and its flock.
    #[error(
        "could not lock {}: the file was replaced {attempts} times between its open and its \
         flock (something keeps removing it); stop whatever removes files in {}",
        lock_path.display(),
        dir.display()
    )]
    LockFileUnstable {
        /// The spool directory.
        dir: PathBuf,
        /// `<dir>/.owner.lock`.
        lock_path: PathBuf,
        /// How many opens were tried.
        attempts: u32,
    },

    /// Only shared flocks hold the lock file (or the directory), and they
    /// outlasted a take's wait for probes: a reader, not an owner (in
    /// group mode, any member of the group can hold one). The take is
    /// refused for now; an adopter tries again on a later pass.
    #[error(
        "spool directory {} cannot be taken now: {} is held shared by {} (a reader, not an \
         owner; probes let go at once, this one did not); the take is retried on a later pass; \
         stop that process (see /proc/locks), or make the spool private (spool.mode = \"0700\")",
        dir.display(),
        lock_path.display(),
        pids_text(pids)
    )]
    HeldShared {
        /// The spool directory.
        dir: PathBuf,
        /// The lock file (or the directory) held shared.
        lock_path: PathBuf,
        /// The pids `/proc/locks` names as holding it shared (may be empty
        /// when it cannot tell).
        pids: Vec<u32>,
    },

    /// The lock file is not a regular file (a symlink, a FIFO, a socket,
    /// a directory, a device): nobody can own the directory until a person
    /// replaces it. Never opened for reading or writing beyond a
    /// non-blocking open, so a FIFO never blocks a take.
    #[error(
        "spool directory {} cannot be locked: its lock file {} is {kind}, not a regular \
         file; nothing can own the directory until it is one: look at it, then remove it \
         (`rm {}`) if no process uses it",
        dir.display(),
        lock_path.display(),
        lock_path.display()
    )]
    LockFileNotRegular {
        /// The spool directory.
        dir: PathBuf,
        /// `<dir>/.owner.lock`.
        lock_path: PathBuf,
        /// What it is instead (`"a symlink"`, `"a FIFO"`, ...).
        kind: &'static str,
    },

    /// A bad `spool.mode` / `spool.group`.
    #[error("{why}")]
    BadAccess {
        /// What is wrong and what to do.
        why: String,
    },

    /// A test seam was asked for in a build without them.
    #[error(
        "this build has no test seams ({what}); they exist only in test builds \
         (the spool-lock `testing` feature)"
    )]
    NoTestSeams {
        /// Which seam.
        what: &'static str,
    },

    /// An I/O error on a path.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`"open"`, `"flock"`, ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// "pid 12 and pid 34", or "an unknown process".
pub(crate) fn pids_text(pids: &[u32]) -> String {
    if pids.is_empty() {
        return "an unknown process".to_owned();
    }
    pids.iter()
        .map(|p| format!("pid {p}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

impl Error {
    /// True when another process owns the directory, directly or as a
    /// nesting holder: the `spool` command's exit code 3.
    pub fn is_owned_by_another(&self) -> bool {
        matches!(
            self,
            Error::OwnedByOther { .. }
                | Error::LockFileReplaced { .. }
                | Error::NestedUnderHeld { .. }
                | Error::ContainsHeld { .. }
        )
    }

    /// True when the directory is on a shared filesystem and no override was
    /// given: the `spool` command's exit code 4.
    pub fn is_shared_filesystem(&self) -> bool {
        matches!(self, Error::SharedFilesystem { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// What an I/O failure on a spool directory means for whoever tried it,
/// by the errno of the first I/O error in a failure's source chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoVerdict {
    /// No retry from this process can fix it: another user's files
    /// (EACCES, EPERM), a symlink loop or a path that is not a directory
    /// (ELOOP, ENOTDIR).
    Permanent,
    /// A read-only filesystem (EROFS): fixed by a remount, not by a retry
    /// loop.
    ReadOnly,
    /// A momentary shortage or interruption of this process or host
    /// (EMFILE, ENFILE, ENOMEM, ENOBUFS, EAGAIN, EINTR) or anything else:
    /// says nothing about the directory, so it is tried again later.
    Transient,
}

/// The [`IoVerdict`] of a failure, from the errno of the first
/// `std::io::Error` in its source chain; `None` when the chain holds no
/// I/O error.
pub fn io_verdict(e: &(dyn std::error::Error + 'static)) -> Option<IoVerdict> {
    use nix::errno::Errno;
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            let errno = io.raw_os_error().map(Errno::from_raw);
            return Some(match errno {
                Some(Errno::EROFS) => IoVerdict::ReadOnly,
                Some(Errno::EACCES | Errno::EPERM | Errno::ELOOP | Errno::ENOTDIR) => {
                    IoVerdict::Permanent
                }
                _ if io.kind() == std::io::ErrorKind::PermissionDenied => IoVerdict::Permanent,
                _ => IoVerdict::Transient,
            });
        }
        cur = e.source();
    }
    None
}

/// [`Error::LockFileNotRegular`] for a lock file of this `st_mode`.
pub(crate) fn not_regular(dir: &Path, lock_path: &Path, mode: libc::mode_t) -> Error {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFDIR => "a directory",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        _ => "something else",
    };
    Error::LockFileNotRegular {
        dir: dir.to_path_buf(),
        lock_path: lock_path.to_path_buf(),
        kind,
    }
}
