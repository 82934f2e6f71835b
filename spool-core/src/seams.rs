//! Kill points: named places where a crash torture (`cargo xtask torture`)
//! makes a process die on purpose, at the N-th time it passes one.
//!
//! [`kill_point`] is called from spool-core, spool-service and (through
//! the hooks they expose, which the `spool-with-seams` helper wires to
//! [`kill_point`]) spool-catalog and spool-lock. It is a test seam: without
//! the `testing` feature it is an empty `#[inline(always)]` function, so
//! the shipped `spool` binary has no kill point, and [`set_kill_at`]
//! refuses with [`Error::NoTestSeams`].
//!
//! The death is a `SIGKILL` the process sends itself (nix's safe `kill`,
//! no `unsafe`): no destructor, no flush, no atexit handler runs, exactly as
//! when the scheduler kills it from outside. Before it, one line on stderr
//! names the point: `spool: kill point NAME hit N: SIGKILL (test seam)`.
//!
//! The points (name: where):
//! - `after_try_adopt`: an adopter took a dead sibling's lock
//!   (spool-service's adoption environment), nothing listed yet;
//! - `scan_entry`: a scan of a spool directory, at each entry (mid-listing);
//! - `before_index`: a batch is uploaded, its catalog insert not yet sent
//!   (spool-service's pipeline, and the retry of what is owed);
//! - `after_index`: the catalog answered Ok, no pack file removed yet;
//! - `remove_dir`: a drained directory's lock file is unlinked, the
//!   directory not yet removed (spool-lock's `release_and_remove_if_empty`);
//! - `lease_claim`: a lease claim is appended, not yet read back
//!   (spool-catalog's lease);
//! - `before_confirm`: the node's shipper holds packs of a live owner whose
//!   rows the catalog confirmed, their confirmations not yet written
//!   (`handoff::confirm`, in the daemon);
//! - `after_confirm`: those confirmations are written and their directory
//!   fsynced, the owner not yet told by its watch (`handoff::confirm`);
//! - `after_consent`: a hand-off owner staged a pack and created its ref,
//!   the stage not yet reported to the sink's callers (the sink's thread);
//! - `before_release`: a hand-off owner read confirmations of packs it
//!   still holds, none of them removed yet (`Spool::release_confirmed`);
//! - `after_release`: it removed those packs, their refs not yet.
//!
//! The last three are passed only by a live sink-only owner that hands its
//! packs off ([`OWNER_POINTS`]); the others by a service.

use crate::Error;

/// Every kill point, by name (see the module docs).
pub const KILL_POINTS: &[&str] = &[
    "after_try_adopt",
    "scan_entry",
    "before_index",
    "after_index",
    "remove_dir",
    "lease_claim",
    "before_confirm",
    "after_confirm",
    "after_consent",
    "before_release",
    "after_release",
];

/// The kill points only a hand-off owner (a sink-only producer handing its
/// packs to the node's shipper) passes; a service passes the others.
pub const OWNER_POINTS: &[&str] = &["after_consent", "before_release", "after_release"];

/// The kill points of the hand-off's steps, the owner's and the shipper's.
pub const HAND_OFF_POINTS: &[&str] = &[
    "before_confirm",
    "after_confirm",
    "after_consent",
    "before_release",
    "after_release",
];

#[cfg(any(test, feature = "testing"))]
mod armed {
    use std::sync::Mutex;

    /// The armed point: its name, the hit that kills, the hits so far.
    pub(super) static KILL_AT: Mutex<Option<(String, u64, u64)>> = Mutex::new(None);

    pub(super) fn hit(name: &str) {
        let mut armed = KILL_AT.lock().unwrap_or_else(|e| e.into_inner());
        let Some((point, at, hits)) = armed.as_mut() else {
            return;
        };
        if point != name {
            return;
        }
        *hits += 1;
        if *hits < *at {
            return;
        }
        eprintln!("spool: kill point {name} hit {hits}: SIGKILL (test seam)");
        let me = nix::unistd::Pid::this();
        let _ = nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; should it not have been delivered yet,
        // nothing after this point may run.
        std::process::abort();
    }
}

/// Passes the kill point `name`: in a build with test seams, the process
/// SIGKILLs itself if `name` is the armed point and this is its N-th hit
/// ([`set_kill_at`]); otherwise (and always in production) nothing.
#[cfg(any(test, feature = "testing"))]
pub fn kill_point(name: &'static str) {
    armed::hit(name);
}

/// Passes the kill point `name`: nothing, in a build without test seams.
#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub fn kill_point(_name: &'static str) {}

/// Arms the kill point `name`: the process dies at its `nth` hit (≥ 1).
/// Refuses a name not in [`KILL_POINTS`] ([`Error::UnknownKillPoint`]) and,
/// in a build without test seams, everything ([`Error::NoTestSeams`]).
pub fn set_kill_at(name: &str, nth: u64) -> Result<(), Error> {
    if !KILL_POINTS.contains(&name) {
        return Err(Error::UnknownKillPoint {
            name: name.to_string(),
            known: KILL_POINTS.join(", "),
        });
    }
    #[cfg(any(test, feature = "testing"))]
    {
        *armed::KILL_AT.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((name.to_string(), nth.max(1), 0));
        Ok(())
    }
    #[cfg(not(any(test, feature = "testing")))]
    {
        let _ = nth;
        Err(Error::NoTestSeams {
            seam: "kill points",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_kill_point_is_refused_naming_the_known_ones() {
        let err = set_kill_at("nowhere", 1).unwrap_err().to_string();
        assert!(
            err.contains("nowhere") && err.contains("after_try_adopt"),
            "{err}"
        );
    }

    #[test]
    fn an_unarmed_or_other_point_does_not_kill() {
        // (a test process with another point armed at a far hit: passing
        // this one, and that one below its count, leaves it alive)
        set_kill_at("remove_dir", 1_000_000).unwrap();
        kill_point("after_index");
        kill_point("remove_dir");
        *armed::KILL_AT.lock().unwrap() = None;
        kill_point("remove_dir");
    }

    #[test]
    fn the_owner_and_hand_off_points_are_kill_points() {
        for p in OWNER_POINTS.iter().chain(HAND_OFF_POINTS) {
            assert!(KILL_POINTS.contains(p), "{p}");
        }
        assert!(OWNER_POINTS.iter().all(|p| HAND_OFF_POINTS.contains(p)));
    }
}
