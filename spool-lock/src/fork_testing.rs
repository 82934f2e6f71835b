//! Forks for fork-safety tests, behind safe functions (compiled only with
//! `cfg(test)` or the `testing` feature), so the test helpers that exercise
//! The atfork rules need no `unsafe` of their own.
//!
//! * [`fork_paused_child`] works in any process: the child runs only
//!   async-signal-safe calls (`fcntl`, `getpid`, `write`, `pause`), writes
//!   one report line to stdout and pauses until it is killed.
//! * [`fork_single_threaded`] is a plain fork whose child may run any code;
//!   it refuses to fork unless the calling process has exactly one thread
//!   (a child of a multi-threaded process may inherit a lock some other
//!   thread held — the allocator's — and deadlock on its first allocation).

use std::io;

use crate::Claim;

/// What a paused child reports about a claim its parent held at the fork.
#[derive(Debug, Clone, Copy)]
pub enum ChildProbe<'a> {
    /// Report `child <pid>` only.
    Nothing,
    /// Report `child <pid> closed=<0|1> held=<0|1>`: whether every
    /// descriptor of the claim is closed in the child, and whether the
    /// child's copy of the claim reads as held.
    Claim(&'a Claim),
}

/// Forks a child that writes `child <pid>[ closed=.. held=..]\n` to stdout
/// (one `write(2)`) and then pauses until it is killed. Returns the child's
/// pid in the parent.
///
/// # Panics
/// If `fork` fails.
pub fn fork_paused_child(probe: ChildProbe<'_>) -> i32 {
    let fds = match probe {
        ChildProbe::Nothing => None,
        ChildProbe::Claim(c) => Some(c.raw_descriptors().unwrap_or([-1, -1])),
    };
    // SAFETY: between fork and pause the child calls only async-signal-safe
    // functions (fcntl, getpid, write, pause) and reads an atomic
    // (`is_held`); it touches no lock, allocates nothing and never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut line = LineBuf::new();
        line.push(b"child ");
        // SAFETY: getpid is async-signal-safe and cannot fail.
        line.push_u32(unsafe { libc::getpid() } as u32);
        if let (Some(fds), ChildProbe::Claim(claim)) = (fds, probe) {
            let closed = fds
                .iter()
                // SAFETY: F_GETFD only queries a descriptor number.
                .all(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1);
            line.push(if closed { b" closed=1" } else { b" closed=0" });
            line.push(if claim.is_held() {
                b" held=1"
            } else {
                b" held=0"
            });
        }
        line.push(b"\n");
        // SAFETY: write(2) from a valid buffer of `len` bytes; it is
        // async-signal-safe.
        unsafe {
            libc::write(1, line.buf.as_ptr().cast(), line.len);
        }
        loop {
            // SAFETY: pause is async-signal-safe.
            unsafe {
                libc::pause();
            }
        }
    }
    assert!(pid > 0, "fork failed: {}", io::Error::last_os_error());
    pid
}

/// Which side of a [`fork_single_threaded`] this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    /// The parent; the child's pid.
    Parent(i32),
    /// The child.
    Child,
}

/// Forks a process that has exactly one thread; the child may then run any
/// code (its atfork handlers ran, as in a real producer's child).
///
/// # Errors
/// `InvalidInput` if the process has more than one thread (read from
/// `/proc/self/status`), or the OS error of a failed fork.
pub fn fork_single_threaded() -> io::Result<Forked> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse::<u32>().ok());
    if threads != Some(1) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fork_single_threaded: this process has {threads:?} threads, not 1"),
        ));
    }
    // SAFETY: the process has one thread (checked above, and nothing in it
    // can start another between the check and the fork), so the child
    // inherits no lock held by another thread and may run any code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid)),
    }
}

/// A fixed buffer for one report line, filled without allocating.
struct LineBuf {
    buf: [u8; 128],
    len: usize,
}

impl LineBuf {
    fn new() -> Self {
        LineBuf {
            buf: [0; 128],
            len: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    fn push_u32(&mut self, mut n: u32) {
        let mut digits = [0u8; 10];
        let mut d = 0;
        loop {
            digits[d] = b'0' + (n % 10) as u8;
            d += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        while d > 0 {
            d -= 1;
            self.push(&[digits[d]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LineBuf;

    #[test]
    fn a_line_buffer_writes_decimal_and_never_overflows() {
        let mut l = LineBuf::new();
        l.push(b"child ");
        l.push_u32(4_294_967_295);
        l.push_u32(0);
        assert_eq!(&l.buf[..l.len], b"child 42949672950");
        for _ in 0..200 {
            l.push(b"x");
        }
        assert_eq!(l.len, 128);
    }
}
