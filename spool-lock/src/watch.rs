//! [`DirWatch`]: which watched directories changed, from the kernel
//! (inotify), so that one process learns of another's files without
//! polling.
//!
//! A watch reports a directory as changed when an entry is created in it,
//! moved into or out of it, or removed from it. The kernel's queue is
//! bounded: when it overflows (`IN_Q_OVERFLOW`) events are lost, and
//! [`Changes::overflowed`] says so; the caller then rescans everything it
//! watches. A watched directory that is removed or replaced stops being
//! watched ([`Changes::gone`]). The descriptor is opened `IN_CLOEXEC`, so
//! no child inherits it.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::Error;

/// The events that make a directory "changed".
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// What one [`DirWatch::wait`] saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Watched directories in which an entry appeared or went.
    pub changed: HashSet<PathBuf>,
    /// Watched directories that were removed or moved away: no longer
    /// watched.
    pub gone: HashSet<PathBuf>,
    /// The kernel's queue overflowed: events were lost, rescan everything.
    pub overflowed: bool,
    /// A [`WatchWaker`] woke the wait.
    pub woken: bool,
}

impl Changes {
    /// Whether nothing happened.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.gone.is_empty() && !self.overflowed && !self.woken
    }
}

/// Wakes a [`DirWatch::wait`] from another thread (to stop it, or to have
/// it take new directories to watch).
#[derive(Debug, Clone)]
pub struct WatchWaker(Arc<OwnedFd>);

impl WatchWaker {
    /// Makes the current or next wait return at once with `woken`.
    pub fn wake(&self) {
        // EAGAIN: the pipe is full of wakes already
        let _ = nix::unistd::write(self.0.as_fd(), &[1]);
    }
}

/// A set of watched directories (see the module doc).
#[derive(Debug)]
pub struct DirWatch {
    inotify: Inotify,
    /// The read end of the waker's pipe.
    wakes: OwnedFd,
    waker: WatchWaker,
    by_wd: HashMap<WatchDescriptor, PathBuf>,
    by_dir: HashMap<PathBuf, WatchDescriptor>,
}

impl DirWatch {
    /// A watch of no directory yet.
    pub fn new() -> Result<DirWatch, Error> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .map_err(|e| Error::io("inotify_init", "", e.into()))?;
        let (wakes, tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)
            .map_err(|e| Error::io("pipe2", "", e.into()))?;
        Ok(DirWatch {
            inotify,
            wakes,
            waker: WatchWaker(Arc::new(tx)),
            by_wd: HashMap::new(),
            by_dir: HashMap::new(),
        })
    }

    /// Watches `dir` (a directory, never followed if a symlink). Watching
    /// it again is a no-op.
    pub fn watch(&mut self, dir: &Path) -> Result<(), Error> {
        if self.by_dir.contains_key(dir) {
            return Ok(());
        }
        let wd = self
            .inotify
            .add_watch(dir, mask())
            .map_err(|e| Error::io("inotify_add_watch", dir, e.into()))?;
        // the kernel gives one descriptor per inode: a second path to the
        // same directory replaces the first
        if let Some(old) = self.by_wd.insert(wd, dir.to_path_buf()) {
            self.by_dir.remove(&old);
        }
        self.by_dir.insert(dir.to_path_buf(), wd);
        Ok(())
    }

    /// Stops watching `dir` (no-op when not watched).
    pub fn unwatch(&mut self, dir: &Path) {
        if let Some(wd) = self.by_dir.remove(dir) {
            self.by_wd.remove(&wd);
            // EINVAL: the kernel already dropped it (the directory is gone)
            let _ = self.inotify.rm_watch(wd);
        }
    }

    /// Whether `dir` is watched.
    pub fn is_watched(&self, dir: &Path) -> bool {
        self.by_dir.contains_key(dir)
    }

    /// How many directories are watched.
    pub fn len(&self) -> usize {
        self.by_dir.len()
    }

    /// Whether no directory is watched.
    pub fn is_empty(&self) -> bool {
        self.by_dir.is_empty()
    }

    /// A handle that wakes [`wait`](Self::wait) from another thread.
    pub fn waker(&self) -> WatchWaker {
        self.waker.clone()
    }

    /// Waits up to `timeout` for a change or a wake, then returns
    /// everything queued (empty after the timeout).
    pub fn wait(&mut self, timeout: Duration) -> Result<Changes, Error> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [
            PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.wakes.as_fd(), PollFlags::POLLIN),
        ];
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(Error::io("poll inotify", "", e.into())),
        }
        let mut buf = [0u8; 64];
        let mut woken = false;
        while nix::unistd::read(&self.wakes, &mut buf).is_ok_and(|n| n > 0) {
            woken = true;
        }
        let mut out = self.take()?;
        out.woken = woken;
        Ok(out)
    }

    /// Everything queued now, without waiting.
    pub fn take(&mut self) -> Result<Changes, Error> {
        let mut out = Changes::default();
        loop {
            let events = match self.inotify.read_events() {
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => return Ok(out),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(Error::io("read inotify", "", e.into())),
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    out.overflowed = true;
                    continue;
                }
                let Some(dir) = self.by_wd.get(&ev.wd).cloned() else {
                    continue;
                };
                if ev.mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED,
                ) {
                    self.by_wd.remove(&ev.wd);
                    self.by_dir.remove(&dir);
                    out.changed.remove(&dir);
                    out.gone.insert(dir);
                } else if !out.gone.contains(&dir) {
                    out.changed.insert(dir);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_created_or_removed_marks_its_directory_changed_and_a_removed_directory_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let mut w = DirWatch::new().unwrap();
        w.watch(&a).unwrap();
        w.watch(&b).unwrap();
        assert!(w.wait(Duration::from_millis(10)).unwrap().is_empty());
        std::fs::write(a.join("x"), b"").unwrap();
        let c = w.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(c.changed, HashSet::from([a.clone()]));
        std::fs::remove_file(a.join("x")).unwrap();
        std::fs::remove_dir(&b).unwrap();
        let mut seen = Changes::default();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while seen.gone.is_empty() && std::time::Instant::now() < deadline {
            let c = w.wait(Duration::from_millis(100)).unwrap();
            seen.changed.extend(c.changed);
            seen.gone.extend(c.gone);
        }
        assert!(seen.changed.contains(&a));
        assert_eq!(seen.gone, HashSet::from([b.clone()]));
        assert!(!w.is_watched(&b) && w.is_watched(&a));
        let waker = w.waker();
        let t = std::time::Instant::now();
        std::thread::spawn(move || waker.wake());
        assert!(w.wait(Duration::from_secs(30)).unwrap().woken);
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}
