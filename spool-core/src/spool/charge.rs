//! The dead-sibling charge: what the siblings of a rank
//! directory hold counts against its budget when nobody live owns them.
//! Who owns a sibling is [`crate::siblings`]'s alone.

use std::path::Path;

use super::walk::account;
use crate::siblings::{self, Owner};

/// Why a sibling is or is not charged (see `sibling_charge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiblingCharge {
    /// Nobody holds it, not blocked, and this process could take and empty
    /// it: an adoption can drain it. Charged.
    Dead,
    /// This process holds it as an adoption. Charged.
    AdoptedHere,
    /// Another live process holds it (its own budget). Not charged.
    LiveElsewhere,
    /// This process holds it as a claim (a kept claim). Not charged.
    KeptClaim,
    /// Marked blocked by an adopter. Not charged.
    Blocked,
    /// This process could not take or empty it (another user's). Not
    /// charged.
    NotOurs,
}

impl SiblingCharge {
    /// Whether its bytes count against the budget.
    pub fn charged(self) -> bool {
        matches!(self, SiblingCharge::Dead | SiblingCharge::AdoptedHere)
    }
}

/// Classifies one sibling rank directory for `charge_dead_siblings`
/// ([`siblings::classify`]).
pub(crate) fn sibling_charge(sibling: &Path) -> SiblingCharge {
    match siblings::classify(sibling) {
        Owner::Live => SiblingCharge::LiveElsewhere,
        Owner::HeldHere { adopting: true } => SiblingCharge::AdoptedHere,
        Owner::HeldHere { adopting: false } => SiblingCharge::KeptClaim,
        Owner::Blocked(_) => SiblingCharge::Blocked,
        Owner::Dead => SiblingCharge::Dead,
        Owner::NotOurs(_) => SiblingCharge::NotOurs,
    }
}

/// Bytes held by the charged siblings of a rank directory (0 when `dir` is
/// not a rank directory).
pub fn dead_sibling_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for path in siblings::siblings_of(dir) {
        let charge = sibling_charge(&path);
        if charge.charged() {
            total += account(&path, |_| false).unwrap_or(0);
        } else {
            tracing::trace!(dir = %path.display(), ?charge, "sibling not charged");
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Case by case: charged are dead siblings this process
    /// could take and empty, and siblings it holds as an adoption; not
    /// charged are another live process's, a claim this process keeps,
    /// blocked ones and another user's. (The same cases on real
    /// directories and processes: `spool/tests.rs::charge_dead_siblings_every_case`
    /// and `tests/tests/spool_processes.rs::another_users_sibling_is_not_charged`.)
    #[test]
    fn every_case_of_the_dead_sibling_charge() {
        use SiblingCharge::*;
        let table = [
            (Dead, true),
            (AdoptedHere, true),
            (LiveElsewhere, false),
            (KeptClaim, false),
            (Blocked, false),
            (NotOurs, false),
        ];
        for (case, charged) in table {
            assert_eq!(case.charged(), charged, "{case:?}");
        }
    }

    /// A sibling that is not a rank directory's sibling, or a directory
    /// outside the layout, is charged nothing.
    #[test]
    fn outside_the_layout_nothing_is_charged() {
        let tmp = tempfile::tempdir().unwrap();
        let plain = tmp.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        std::fs::create_dir(tmp.path().join("other")).unwrap();
        std::fs::write(tmp.path().join("other").join("x.ready"), [0u8; 10]).unwrap();
        assert_eq!(dead_sibling_bytes(&plain), 0);
    }
}
