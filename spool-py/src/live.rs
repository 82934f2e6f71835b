//! Which process an object belongs to, and the objects still open.
//!
//! A `fork()` child (a DataLoader worker) inherits copies of the parent's
//! engines and sinks: their threads did not survive the fork and spool-lock
//! closed the child's copies of the lock descriptors. Every handle records
//! the pid that opened it and refuses ([`owner_check`]) to run anything in
//! another process, checked first in every method, before any lock is
//! taken (a fork may have copied a lock held); on drop in another process
//! it forgets its Rust state instead of running destructors that would wait
//! on dead threads.
//!
//! [`register`] keeps a weak reference to every engine and sink, so
//! `spool._native._close_at_exit` (registered with `atexit`) closes what the
//! program did not: sinks first, then engines (the engine's release order).

use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;

use crate::errors;

/// Something `atexit` closes.
pub trait Closable: Send + Sync {
    /// The pid that opened it.
    fn owner(&self) -> u32;
    /// Closes it (idempotent), with the GIL released inside.
    fn close_at_exit(&self, py: Python<'_>);
    /// Sinks close before engines.
    fn is_engine(&self) -> bool;
}

/// In a fork child (`owner` is another pid), forgets the Rust state in
/// `state` instead of dropping it: its destructor would wait on threads that
/// did not survive the fork (spool-lock's atfork handler already closed the
/// child's lock descriptors).
pub fn forget_in_fork_child<T>(owner: u32, state: std::sync::LockResult<&mut Option<T>>) {
    if std::process::id() != owner {
        if let Some(inherited) = state
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            std::mem::forget(inherited);
        }
    }
}

static LIVE: Mutex<Vec<Weak<dyn Closable>>> = Mutex::new(Vec::new());

/// Remembers `obj` for the exit-time close.
pub fn register(obj: &Arc<dyn Closable>) {
    let mut live = LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(obj));
}

/// Refuses to act for an object opened by another process.
pub fn owner_check(py: Python<'_>, owner: u32, what: &str, dir: &std::path::Path) -> PyResult<()> {
    let me = std::process::id();
    if me == owner {
        return Ok(());
    }
    Err(errors::raise(
        py,
        "ForkedError",
        format!(
            "this {what} on {} belongs to pid {owner}, and this is pid {me} (a forked child): \
             it is not usable here; open your own (spool.Sink.claim or spool.Engine) in this process",
            dir.display()
        ),
        &[],
    ))
}

/// Closes every live engine and sink this process opened: sinks, then
/// engines. Objects of a parent process (after a fork) are left alone.
#[pyfunction]
pub fn _close_at_exit(py: Python<'_>) {
    let me = std::process::id();
    let live: Vec<Arc<dyn Closable>> = {
        let live = LIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.iter().filter_map(Weak::upgrade).collect()
    };
    for pass_engines in [false, true] {
        for obj in live.iter().filter(|o| o.is_engine() == pass_engines) {
            if obj.owner() == me {
                obj.close_at_exit(py);
            }
        }
    }
}
