//! Test seams, compiled only for tests (`cfg(test)` or the `testing`
//! feature). Production builds get the always-present shims at the bottom,
//! which report "no seam".
//!
//! * **statfs type**: [`testing::set_filesystem_type`] makes every path under a
//!   prefix report a given `f_type` magic.
//! * **fdinfo without lock lines**: [`testing::set_fdinfo_hides_locks`]
//!   strips `lock:` lines from this process's `/proc/self/fdinfo` reads (as
//!   gVisor and WSL1 do), so the owner record decides.
//! * **forks**: [`crate::testing::fork_paused_child`] and
//!   [`crate::testing::fork_single_threaded`] (in `fork_testing.rs`), so fork tests
//!   need no `unsafe` of their own.
//! * **lock hooks**: [`testing::set_lock_hook`] runs a closure at a
//!   [`HookPoint`] for paths under a prefix: between a lock file's open and
//!   its flock, inside a release before its descriptors close, inside
//!   the removal of a drained directory, between a release's two closes,
//!   and at the windows where another
//!   process may change a directory under a take (before the lock file's
//!   open, before the directory's open, before and after a `mkdir`), and
//!   at every refused flock of a take, and where the nesting check is about
//!   to read a lock file it found.
//! * **`/proc/locks` silent**: [`testing::set_proc_locks_hidden`] makes a
//!   take read `/proc/locks` as naming no holder for paths under a prefix
//!   (as when the holder is in another pid namespace), so its bounded
//!   retries decide.
//!
//! * **parent fsync failure**: [`testing::set_parent_fsync_fails`] makes
//!   the fsync of a parent directory under a prefix fail with `EIO` (after
//!   a create-locked rename, and after creating a missing parent).
//!
//! Seams are keyed by path prefix, so tests that use their own scratch
//! directories do not see each other's seams even in one process. The
//! fdinfo seam is process-wide; under it, answers come from the owner
//! record, which is right for every lock this crate takes.

use std::path::Path;

/// Where a lock hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// A lock file is open and not yet flocked (path: the lock file).
    LockFileOpened,
    /// A release has begun and its descriptors are not yet closed (path:
    /// the spool directory).
    ReleaseBeforeClose,
    /// A drained directory is being removed: its lock file is unlinked,
    /// the directory not yet (path: the spool directory).
    RemovingDirectory,
    /// A lock in place is about to open (or create) the lock file of an
    /// existing directory (path: the lock file).
    OpeningLockFile,
    /// A lock in place holds the lock file and is about to open the
    /// directory to flock it (path: the spool directory).
    OpeningDirectory,
    /// `create_parents` is about to `mkdir` a missing parent, or a
    /// create-locked take its staging copy `.<name>.<8 hex>.creating`
    /// (path: that directory).
    CreatingDirectory,
    /// [`crate::Access::create_dir`] made the directory and is about to open
    /// it to set its mode and group (path: that directory).
    DirectoryMade,
    /// A take's flock was refused and it is about to ask `/proc/locks`
    /// who holds it (path: the lock file or directory).
    FlockRefused,
    /// A held lock is letting go: its directory's descriptor is closed,
    /// its lock file's not yet (path: the lock file, as
    /// `/proc/self/fd` names it).
    ReleaseBetweenCloses,
    /// The nesting check found a lock file in a directory and is about to
    /// read whether it is held (path: that directory).
    CheckingNestedSpool,
    /// A lock in place found its lock file already there (its exclusive
    /// create failed with `EEXIST`) and is about to open the existing one
    /// (path: the lock file).
    OpeningExistingLockFile,
    /// [`crate::read_owner`] probed the lock file and is about to probe
    /// the directory (path: the spool directory).
    ProbingDirectory,
}

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    //! Test seams (only with `cfg(test)` or the `testing` feature).
    use super::HookPoint;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// A lock hook.
    pub type Hook = Arc<dyn Fn(HookPoint, &Path) + Send + Sync>;

    static FS_TYPES: Mutex<Vec<(PathBuf, u32)>> = Mutex::new(Vec::new());
    static HIDE_FDINFO_LOCKS: AtomicBool = AtomicBool::new(false);
    static HOOKS: Mutex<Vec<(PathBuf, Hook)>> = Mutex::new(Vec::new());
    static FSYNC_FAILS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    static LOCKS_HIDDEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    /// Adds `prefix` to a seam's prefixes (`on`), or removes it.
    fn set_prefix(prefixes: &Mutex<Vec<PathBuf>>, prefix: &Path, on: bool) {
        let mut v = prefixes.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|p| p != prefix);
        if on {
            v.push(prefix.to_path_buf());
        }
    }

    /// Whether `path` is under one of a seam's prefixes.
    fn under_prefix(prefixes: &Mutex<Vec<PathBuf>>, path: &Path) -> bool {
        prefixes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|p| path.starts_with(p))
    }

    /// Makes a take read `/proc/locks` as naming no holder of any path
    /// under `prefix` (`false`: removes the seam).
    pub fn set_proc_locks_hidden(prefix: &Path, hidden: bool) {
        set_prefix(&LOCKS_HIDDEN, prefix, hidden);
    }

    pub(crate) fn proc_locks_hidden(path: &Path) -> bool {
        under_prefix(&LOCKS_HIDDEN, path)
    }

    /// Makes the fsync of every parent directory under `prefix` fail with
    /// `EIO` (`false`: removes the fault).
    pub fn set_parent_fsync_fails(prefix: &Path, fail: bool) {
        set_prefix(&FSYNC_FAILS, prefix, fail);
    }

    pub(crate) fn parent_fsync_fails(path: &Path) -> bool {
        under_prefix(&FSYNC_FAILS, path)
    }

    /// Every path under `prefix` reports statfs `f_type` `magic`.
    pub fn set_filesystem_type(prefix: &Path, magic: u32) {
        let mut v = FS_TYPES.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _)| p != prefix);
        v.push((prefix.to_path_buf(), magic));
    }

    /// Removes the statfs override for `prefix`.
    pub fn clear_filesystem_type(prefix: &Path) {
        FS_TYPES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| p != prefix);
    }

    /// Makes this process's fdinfo reads see no `lock:` lines.
    pub fn set_fdinfo_hides_locks(hide: bool) {
        HIDE_FDINFO_LOCKS.store(hide, Ordering::SeqCst);
    }

    /// Runs `hook` at every [`HookPoint`] for paths under `prefix`.
    pub fn set_lock_hook(prefix: &Path, hook: Hook) {
        let mut v = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|(p, _)| p != prefix);
        v.push((prefix.to_path_buf(), hook));
    }

    /// Removes the lock hook for `prefix`.
    pub fn clear_lock_hook(prefix: &Path) {
        HOOKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, _)| p != prefix);
    }

    pub(crate) fn filesystem_type(path: &Path) -> Option<u32> {
        let v = FS_TYPES.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .filter(|(p, _)| path.starts_with(p))
            .max_by_key(|(p, _)| p.as_os_str().len())
            .map(|(_, m)| *m)
    }

    pub(crate) fn fdinfo_hides_locks() -> bool {
        HIDE_FDINFO_LOCKS.load(Ordering::SeqCst)
    }

    /// The environment variable that makes a missing requirement a failure
    /// ([`required`]); `cargo xtask test` sets it to `1` (TESTING.md).
    pub const REQUIRE_ALL: &str = "SPOOL_REQUIRE_ALL";

    /// Whether a test can run: `present` says whether what it `needs`
    /// (root, a tool such as strace, a server) is there. When it is not,
    /// the test panics under `SPOOL_REQUIRE_ALL=1` (so CI, which sets it,
    /// skips nothing) and otherwise says why on stderr and returns `false`
    /// (the caller returns: skipped).
    pub fn required(present: bool, needs: &str) -> bool {
        if present {
            return true;
        }
        if std::env::var(REQUIRE_ALL).as_deref() == Ok("1") {
            panic!(
                "this test needs {needs}, which is missing, and {REQUIRE_ALL}=1 makes that a \
                 failure (cargo xtask test sets it and installs what its tiers need)"
            );
        }
        eprintln!("skipped: this test needs {needs} ({REQUIRE_ALL}=1 makes this a failure)");
        false
    }

    pub(crate) fn run_hook(point: HookPoint, path: &Path) {
        let hooks: Vec<Hook> = HOOKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(p, _)| path.starts_with(p))
            .map(|(_, h)| h.clone())
            .collect();
        for hook in hooks {
            hook(point, path);
        }
    }
}

/// The statfs magic a seam reports for `path`, if any.
pub(crate) fn filesystem_type(_path: &Path) -> Option<u32> {
    #[cfg(any(test, feature = "testing"))]
    return testing::filesystem_type(_path);
    #[cfg(not(any(test, feature = "testing")))]
    None
}

/// Whether fdinfo reads must hide `lock:` lines.
pub(crate) fn fdinfo_hides_locks() -> bool {
    #[cfg(any(test, feature = "testing"))]
    return testing::fdinfo_hides_locks();
    #[cfg(not(any(test, feature = "testing")))]
    false
}

/// Whether a seam makes the fsync of parent directory `path` fail.
pub(crate) fn parent_fsync_fails(_path: &Path) -> bool {
    #[cfg(any(test, feature = "testing"))]
    return testing::parent_fsync_fails(_path);
    #[cfg(not(any(test, feature = "testing")))]
    false
}

/// Whether a seam hides `path`'s holders in `/proc/locks`.
pub(crate) fn proc_locks_hidden(_path: &Path) -> bool {
    #[cfg(any(test, feature = "testing"))]
    return testing::proc_locks_hidden(_path);
    #[cfg(not(any(test, feature = "testing")))]
    false
}

/// Runs the hooks for `point` (nothing in production builds).
pub(crate) fn run_hook(_point: HookPoint, _path: &Path) {
    #[cfg(any(test, feature = "testing"))]
    testing::run_hook(_point, _path);
}

/// Runs the hooks for `point` on the path descriptor `_fd` is open on, as
/// `/proc/self/fd` names it (nothing in production builds, which never
/// read the link).
pub(crate) fn run_hook_on_fd(_point: HookPoint, _fd: i32) {
    #[cfg(any(test, feature = "testing"))]
    if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{_fd}")) {
        testing::run_hook(_point, &path);
    }
}

/// Makes every path under `prefix` report statfs type `magic` — for a hidden
/// command-line option. Always present; in a build without test seams it
/// returns [`crate::Error::NoTestSeams`].
pub fn set_filesystem_type_for_testing(_prefix: &Path, _magic: u32) -> Result<(), crate::Error> {
    #[cfg(any(test, feature = "testing"))]
    {
        testing::set_filesystem_type(_prefix, _magic);
        Ok(())
    }
    #[cfg(not(any(test, feature = "testing")))]
    Err(crate::Error::NoTestSeams {
        what: "statfs filesystem type",
    })
}
