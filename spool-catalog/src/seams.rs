//! The crash torture's kill points in this crate: a hook the test seams
//! set ([`crate::testing::set_kill_hook`]) and the points that call it; nothing
//! in a build without test seams.

/// The kill hook: what [`kill_point`] calls.
#[cfg(any(test, feature = "testing"))]
static KILL_HOOK: std::sync::OnceLock<fn(&'static str)> = std::sync::OnceLock::new();

/// From now on, every kill point of this crate (`lease_claim`: a claim
/// appended, not yet read back) calls `hook` with its name. The
/// `spool-with-seams` helper hands in spool-core's
/// `seams::kill_point` (this crate does not depend on spool-core). Set
/// once per process; a second call is ignored.
#[cfg(any(test, feature = "testing"))]
pub fn set_kill_hook(hook: fn(&'static str)) {
    let _ = KILL_HOOK.set(hook);
}

/// A kill point of the crash torture ([`set_kill_hook`]).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn kill_point(name: &'static str) {
    if let Some(hook) = KILL_HOOK.get() {
        hook(name);
    }
}

/// A kill point of the crash torture: nothing in a build without test
/// seams.
#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn kill_point(_name: &'static str) {}
