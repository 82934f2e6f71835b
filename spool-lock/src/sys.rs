//! The FFI: descriptors on lock files and locked directories, registered
//! for fork safety, and the flock calls on them.
//!
//! # Fork safety
//!
//! A child made by `fork()` (no exec) shares its parent's open file
//! descriptions, so a copied descriptor keeps the parent's flock alive after
//! the parent dies. Every descriptor this crate opens on a lock file or a
//! directory it locks or probes is therefore registered:
//!
//! * [`RegFd::open`] opens it and adds it to the registry under one
//!   `pthread_mutex_t`; [`RegFd`]'s drop closes it and removes it under the
//!   same mutex. No fork can fall between an open and its registration, or
//!   between a close and its removal.
//! * A `pthread_atfork` prepare handler takes that mutex, so the registry is
//!   never copied mid-update; the parent handler releases it.
//! * The child handler `close()`s every registered descriptor — never
//!   `LOCK_UN`, which would drop the lock of the shared description, i.e. the
//!   parent's — empties the registry and bumps the fork generation. A
//!   [`RegFd`] remembers the generation it was opened in; a child's copy
//!   (another generation) reads as dead and its drop never closes the
//!   descriptor number, which the child may have reused since.
//!
//! `posix_spawn`/`vfork` run no atfork handler, but they exec, and every
//! descriptor here is `O_CLOEXEC`.

use std::cell::UnsafeCell;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

struct Registry {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    fds: UnsafeCell<Vec<libc::c_int>>,
}

// SAFETY: `fds` is only touched with `mutex` held (RegistryGuard), or in the
// atfork child handler, where the forking thread holds `mutex` (taken by the
// prepare handler) and is the only thread left.
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    fds: UnsafeCell::new(Vec::new()),
};

/// Bumped in every fork child: descriptors of an older generation were
/// closed by the child handler.
static GENERATION: AtomicU64 = AtomicU64::new(0);

static ATFORK: Once = Once::new();

extern "C" fn atfork_prepare() {
    // SAFETY: the mutex is a valid, statically initialised pthread mutex.
    unsafe {
        libc::pthread_mutex_lock(REGISTRY.mutex.get());
    }
}

extern "C" fn atfork_parent() {
    // SAFETY: the prepare handler took the mutex in this thread.
    unsafe {
        libc::pthread_mutex_unlock(REGISTRY.mutex.get());
    }
}

extern "C" fn atfork_child() {
    // SAFETY: the prepare handler took the mutex in the forking thread, the
    // only thread of the child; nobody else can touch `fds`. Only close()
    // (async-signal-safe) is called; clearing a Vec<c_int> frees nothing.
    unsafe {
        let fds = &mut *REGISTRY.fds.get();
        for &fd in fds.iter() {
            libc::close(fd);
        }
        fds.clear();
        GENERATION.fetch_add(1, Ordering::SeqCst);
        libc::pthread_mutex_unlock(REGISTRY.mutex.get());
    }
}

fn ensure_atfork() {
    ATFORK.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions with static
        // lifetime that only lock/unlock our mutex and close descriptors.
        let rc = unsafe {
            libc::pthread_atfork(
                Some(atfork_prepare),
                Some(atfork_parent),
                Some(atfork_child),
            )
        };
        assert_eq!(
            rc, 0,
            "pthread_atfork failed: spool-lock cannot keep its locks out of fork children"
        );
    });
}

/// Holds the registry mutex; released on drop.
struct RegistryGuard;

impl RegistryGuard {
    fn lock() -> RegistryGuard {
        ensure_atfork();
        // SAFETY: valid static mutex; unlocked in Drop by this thread.
        unsafe {
            libc::pthread_mutex_lock(REGISTRY.mutex.get());
        }
        RegistryGuard
    }

    fn fds(&mut self) -> &mut Vec<libc::c_int> {
        // SAFETY: the mutex is held for this guard's life.
        unsafe { &mut *REGISTRY.fds.get() }
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        // SAFETY: taken in `lock` by this thread.
        unsafe {
            libc::pthread_mutex_unlock(REGISTRY.mutex.get());
        }
    }
}

/// The current fork generation.
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}

/// How many descriptors are registered (for tests).
#[cfg(test)]
pub(crate) fn registered_count() -> usize {
    RegistryGuard::lock().fds().len()
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Runs a read/write-style call until it is not interrupted.
fn retry_eintr(mut call: impl FnMut() -> libc::ssize_t) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// A registered descriptor on a lock file or a (locked or probed) directory.
#[derive(Debug)]
pub(crate) struct RegFd {
    fd: libc::c_int,
    generation: u64,
}

impl RegFd {
    /// Opens `path` with `flags | O_CLOEXEC` and registers the descriptor,
    /// both under the registry mutex.
    pub(crate) fn open(path: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<RegFd> {
        let c = cstring(path)?;
        // SAFETY: `c` is a valid NUL-terminated path; open has no other
        // preconditions. O_NONBLOCK keeps a planted FIFO from blocking us.
        RegFd::registered(|| unsafe {
            libc::open(
                c.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOCTTY,
                libc::c_uint::from(mode),
            )
        })
    }

    /// Opens `name` relative to the directory `parent` (`openat`) with
    /// `flags | O_CLOEXEC` and registers the descriptor, both under the
    /// registry mutex. `name` is one component: with `O_NOFOLLOW` nothing
    /// of it is resolved through a link.
    pub(crate) fn open_at(
        parent: std::os::fd::BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        flags: libc::c_int,
        mode: libc::mode_t,
    ) -> io::Result<RegFd> {
        let c = cstring(Path::new(name))?;
        // SAFETY: `c` is a valid NUL-terminated name and `parent` an open
        // descriptor borrowed for the call; openat has no other
        // preconditions.
        RegFd::registered(|| unsafe {
            libc::openat(
                std::os::fd::AsRawFd::as_raw_fd(&parent),
                c.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOCTTY,
                libc::c_uint::from(mode),
            )
        })
    }

    /// Runs `open` (an open call returning a descriptor or -1) and
    /// registers what it opened, both under the registry mutex: no fork
    /// falls between them.
    fn registered(open: impl FnOnce() -> libc::c_int) -> io::Result<RegFd> {
        let mut guard = RegistryGuard::lock();
        let fd = open();
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        guard.fds().push(fd);
        Ok(RegFd {
            fd,
            generation: generation(),
        })
    }

    /// False in a fork child: the child handler closed this descriptor.
    pub(crate) fn is_live(&self) -> bool {
        self.generation == generation()
    }

    /// `flock(op | LOCK_NB)`: `Ok(true)` when taken, `Ok(false)` when
    /// someone else holds a conflicting lock.
    pub(crate) fn try_flock(&self, op: libc::c_int) -> io::Result<bool> {
        loop {
            // SAFETY: flock on a descriptor we own; no memory involved.
            let rc = unsafe { libc::flock(self.fd, op | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(true);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EWOULDBLOCK) => return Ok(false),
                Some(libc::EINTR) => continue,
                _ => return Err(err),
            }
        }
    }

    /// `fstat` of the descriptor.
    pub(crate) fn fstat(&self) -> io::Result<libc::stat> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is a valid out-pointer for one `struct stat`.
        let rc = unsafe { libc::fstat(self.fd, st.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat succeeded and filled it.
        Ok(unsafe { st.assume_init() })
    }

    /// Replaces the file's contents with `bytes`.
    pub(crate) fn overwrite(&self, bytes: &[u8]) -> io::Result<()> {
        // SAFETY: ftruncate on a descriptor we own.
        if unsafe { libc::ftruncate(self.fd, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut done = 0usize;
        while done < bytes.len() {
            let rest = &bytes[done..];
            // SAFETY: `rest` is a valid readable buffer of `rest.len()` bytes.
            done += retry_eintr(|| unsafe {
                libc::pwrite(
                    self.fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    done as libc::off_t,
                )
            })?;
        }
        Ok(())
    }

    /// Reads up to `max` bytes from offset 0.
    pub(crate) fn read_prefix(&self, max: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; max];
        let mut done = 0usize;
        while done < max {
            let rest = &mut buf[done..];
            // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
            let n = retry_eintr(|| unsafe {
                libc::pread(
                    self.fd,
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    done as libc::off_t,
                )
            })?;
            if n == 0 {
                break;
            }
            done += n;
        }
        buf.truncate(done);
        Ok(buf)
    }

    /// `fsync`.
    pub(crate) fn sync(&self) -> io::Result<()> {
        // SAFETY: fsync on a descriptor we own.
        if unsafe { libc::fsync(self.fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The raw descriptor number (for `/proc/self/fdinfo`).
    pub(crate) fn raw(&self) -> libc::c_int {
        self.fd
    }
}

impl std::os::fd::AsFd for RegFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: `fd` is open for as long as `self` lives (closed only in
        // Drop, or by the fork child handler, after which a child's copy
        // must not be used: callers check `is_live` before locking work).
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for RegFd {
    fn drop(&mut self) {
        if !self.is_live() {
            // A fork child's copy: the child handler closed it already, and
            // the number may have been reused since.
            return;
        }
        let mut guard = RegistryGuard::lock();
        let fds = guard.fds();
        if let Some(i) = fds.iter().position(|&fd| fd == self.fd) {
            fds.swap_remove(i);
        }
        // SAFETY: we own this descriptor and close it exactly once, with the
        // registry mutex held so no fork copies it half-closed. Closing (not
        // LOCK_UN) releases our flock only if no other descriptor shares the
        // description.
        unsafe {
            libc::close(self.fd);
        }
        drop(guard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_registers_and_drop_unregisters() {
        let dir = std::env::temp_dir();
        let before = registered_count();
        let fd = RegFd::open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
        assert!(fd.is_live());
        assert!(registered_count() > before || registered_count() >= 1);
        let raw = fd.raw();
        drop(fd);
        // SAFETY: F_GETFD only queries the (now closed) descriptor number.
        assert_eq!(unsafe { libc::fcntl(raw, libc::F_GETFD) }, -1);
    }

    #[test]
    fn dropping_a_descriptor_unregisters_that_one_and_no_other() {
        // The fork child handler closes what the registry lists: a dropped
        // descriptor left listed (or a live one lost) would close a reused
        // number, or keep a lock open, in every child.
        let dir = std::env::temp_dir();
        let a = RegFd::open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
        let b = RegFd::open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
        let (ra, rb) = (a.raw(), b.raw());
        drop(a);
        let listed = RegistryGuard::lock().fds().clone();
        assert!(!listed.contains(&ra), "{ra} closed but listed: {listed:?}");
        assert!(listed.contains(&rb), "{rb} open but not listed: {listed:?}");
        drop(b);
    }

    #[test]
    fn read_prefix_reads_up_to_max_and_asks_for_nothing_past_it() {
        // A record exactly `max` bytes long is read whole; one byte longer
        // is cut at `max`. Once it has `max` bytes it issues no further
        // read: the only trace such a read (of 0 bytes) would leave is the
        // error it gets on a descriptor that cannot read, so `max` 0 on a
        // write-only descriptor reads nothing and succeeds.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("record");
        std::fs::write(&path, [b'x'; 4096]).unwrap();
        let fd = RegFd::open(&path, libc::O_RDONLY, 0).unwrap();
        assert_eq!(fd.read_prefix(4096).unwrap(), vec![b'x'; 4096]);
        assert_eq!(fd.read_prefix(4095).unwrap(), vec![b'x'; 4095]);
        assert_eq!(fd.read_prefix(5000).unwrap().len(), 4096);
        let wronly = RegFd::open(&path, libc::O_WRONLY, 0).unwrap();
        assert_eq!(wronly.read_prefix(0).unwrap(), Vec::<u8>::new());
        let err = wronly.read_prefix(1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF), "{err}");
    }

    #[test]
    fn descriptor_zero_is_a_descriptor() {
        // A daemon started with stdin closed gets 0 from its first open.
        // (nextest runs each test in a process of its own, so freeing this
        // process's fd 0 for a moment disturbs no other test.)
        // SAFETY: dup and close of descriptor 0, which nothing in this
        // test process reads.
        let saved = unsafe { libc::dup(0) };
        // SAFETY: as above.
        unsafe { libc::close(0) };
        let fd = RegFd::open(&std::env::temp_dir(), libc::O_RDONLY | libc::O_DIRECTORY, 0);
        let raw = fd.as_ref().map(RegFd::raw).map_err(|e| e.to_string());
        drop(fd);
        if saved >= 0 {
            // SAFETY: puts the saved stdin back at 0 and closes the copy.
            unsafe {
                libc::dup2(saved, 0);
                libc::close(saved);
            }
        }
        assert_eq!(raw, Ok(0));
    }
}
