//! What is left on disk for a run to drain: the ready packs of the rank
//! directories under one catalog key that no other live process owns, and
//! those under the spool root's other catalog keys (another destination's,
//! which a run for this destination never ships).
//!
//! A read-only walk by name: no lock taken, nothing changed, no pack read.
//! It counts what [`crate::spool::inspect`] counts as ready (the one
//! directory walk, skips included), so it never disagrees with `spool
//! status`. The liveness rule is [`crate::siblings::Probe::owner`]'s: a
//! directory another live process holds is its owner's business and never
//! counted here, except, when asked, one it holds to adopt it (what the
//! node's shipper is still draining).

use std::path::{Path, PathBuf};

use crate::layout::catalog_key_dirs;
use crate::lk::Purpose;
use crate::siblings::{self, Owner};

/// Ready packs left per rank directory (only directories holding some),
/// sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    dirs: Vec<(PathBuf, u64)>,
}

impl Backlog {
    /// The ready packs of `own` and of every rank directory under
    /// `key_dir` that no other live process holds and nobody marked
    /// blocked. With `adopting`, also those another live process holds
    /// to adopt them.
    pub fn scan(key_dir: &Path, own: &Path, adopting: bool) -> Backlog {
        let mut dirs = Vec::new();
        let Ok(all) = siblings::rank_dirs(key_dir) else {
            return Backlog::default();
        };
        for dir in all {
            if dir != own {
                let Ok(probe) = siblings::probe(&dir) else {
                    continue;
                };
                let adopted_elsewhere = adopting
                    && matches!(
                        probe.status.record.as_ref().map(|r| &r.purpose),
                        Some(Purpose::Adopting)
                    );
                match probe.owner() {
                    Owner::Live if !adopted_elsewhere => continue,
                    Owner::Blocked(_) => continue,
                    Owner::Live | Owner::Dead | Owner::HeldHere { .. } | Owner::NotOurs(_) => {}
                }
            }
            let packs = ready_packs(&dir);
            if packs > 0 {
                dirs.push((dir, packs));
            }
        }
        Backlog { dirs }
    }

    /// The ready packs under every catalog key of `root` but `own_key`,
    /// whoever owns them: one entry per key directory holding some (the
    /// key's directory, its packs).
    pub fn elsewhere(root: &Path, own_key: &str) -> Backlog {
        let mut dirs = Vec::new();
        for (key, key_dir) in catalog_key_dirs(root).unwrap_or_default() {
            if key == own_key {
                continue;
            }
            let packs: u64 = siblings::rank_dirs(&key_dir)
                .unwrap_or_default()
                .iter()
                .map(|d| ready_packs(d))
                .sum();
            if packs > 0 {
                dirs.push((key_dir, packs));
            }
        }
        dirs.sort();
        Backlog { dirs }
    }

    /// Ready packs in all.
    pub fn packs(&self) -> u64 {
        self.dirs.iter().map(|(_, n)| n).sum()
    }

    /// The directories holding ready packs, with their counts.
    pub fn dirs(&self) -> &[(PathBuf, u64)] {
        &self.dirs
    }

    /// `"3 ready pack(s) left in 2 rank directories: A (2), B (1)"`, or
    /// `"no ready pack left"`.
    pub fn describe(&self) -> String {
        if self.dirs.is_empty() {
            return "no ready pack left".into();
        }
        let list: Vec<String> = self
            .dirs
            .iter()
            .map(|(d, n)| format!("{} ({n})", d.display()))
            .collect();
        format!(
            "{} ready pack(s) left in {} rank director{}: {}",
            self.packs(),
            self.dirs.len(),
            if self.dirs.len() == 1 { "y" } else { "ies" },
            list.join(", ")
        )
    }
}

/// The ready packs of one rank directory (its `w<ordinal>/` included), as
/// [`crate::spool::inspect`] counts them; 0 when it cannot be read.
fn ready_packs(dir: &Path) -> u64 {
    crate::spool::inspect(dir).map_or(0, |c| c.ready.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lk;

    #[test]
    fn counts_ready_packs_of_own_and_dead_rank_dirs_and_other_keys_apart() {
        let root = tempfile::tempdir().unwrap();
        let key = root.path().join("0123456789ab");
        let own = key.join("r0-0000000a");
        let dead = key.join("r1-0000000b");
        std::fs::create_dir_all(dead.join("w2")).unwrap();
        std::fs::create_dir_all(&own).unwrap();
        let id = |n: u8| crate::PackId::with_timestamp(u64::from(n)).to_hex();
        for p in [
            dead.join(format!("{}.ready", id(1))),
            dead.join(format!("w2/{}.ready", id(2))),
            dead.join(format!("{}.quarantined", id(3))),
            own.join(format!("{}.ready", id(4))),
        ] {
            std::fs::write(p, b"x").unwrap();
        }
        // not a rank directory: never counted
        std::fs::create_dir_all(key.join("not-a-rank")).unwrap();
        std::fs::write(key.join(format!("not-a-rank/{}.ready", id(5))), b"x").unwrap();
        let b = Backlog::scan(&key, &own, false);
        assert_eq!(b.packs(), 3, "{b:?}");
        assert!(b.describe().contains("r1-0000000b (2)"), "{}", b.describe());
        // a live owner's directory is never counted
        let claim = lk::acquire(&dead, &lk::LockOptions::default()).unwrap();
        let b = Backlog::scan(&key, &own, false);
        assert_eq!(b.packs(), 3, "held here is not another live owner: {b:?}");
        claim.release().unwrap();
        // another key's packs are elsewhere, and only there
        let other = root.path().join("ba9876543210/r0-0000000c");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join(format!("{}.ready", id(6))), b"x").unwrap();
        assert_eq!(Backlog::scan(&key, &own, false).packs(), 3);
        let e = Backlog::elsewhere(root.path(), "0123456789ab");
        assert_eq!(e.dirs(), [(root.path().join("ba9876543210"), 1)]);
        assert_eq!(Backlog::elsewhere(root.path(), "ba9876543210").packs(), 3);
    }
}
