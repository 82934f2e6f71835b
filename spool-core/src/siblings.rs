//! The siblings of a rank directory: the other `r<rank>-<inc>` directories
//! under the same catalog key, and who owns them.
//!
//! One place for the four readers of siblings — the dead-sibling charge
//! ([`crate::spool::dead_sibling_bytes`]), the adoption environment of
//! spool-service, and the `spool run` and `spool status` commands:
//!
//! - [`rank_dirs`] / `siblings_of` enumerate (directories whose name is a
//!   [`RankDirName`], never following anything else);
//! - [`probe`] reads the owner lock without blocking (spool-lock's
//!   `read_owner`, plus `held_by_this_process` when it is held);
//! - [`Probe::owner`] is the one decision of "a live owner's files
//!   are never counted by anyone else": held by another process → [`Owner::Live`];
//! - `classify` adds what the budget charges on: a dead sibling this process
//!   could not take and empty is [`Owner::NotOurs`].

use std::io;
use std::path::{Path, PathBuf};

use crate::at::{AtDir, Kind, Name};
use crate::lk::{self, OwnerStatus, Purpose};
use crate::rank_dir::RankDirName;
use crate::Error;

/// The rank directories directly under `key_dir` (directories whose name
/// parses as a [`RankDirName`]), sorted. The key directory is opened
/// without following a link (the root above it is the operator's path): a
/// link, a file or a FIFO at `key_dir` is [`Error::UnexpectedEntry`], and a
/// link named like a rank directory is never listed.
pub fn rank_dirs(key_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    match AtDir::open_layout(key_dir, 1)? {
        Some(dir) => rank_dirs_in(&dir),
        None => Err(Error::io(
            "read directory",
            key_dir,
            io::ErrorKind::NotFound.into(),
        )),
    }
}

/// [`rank_dirs`] of a key directory already open.
pub(crate) fn rank_dirs_in(key_dir: &AtDir) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for name in key_dir.names()? {
        let Name::Utf8(name) = name else { continue };
        if RankDirName::parse(&name).is_some() && key_dir.kind(&name)? == Some(Kind::Dir) {
            out.push(key_dir.join(&name));
        }
    }
    Ok(out)
}

/// The other rank directories under `dir`'s parent, sorted; empty when
/// `dir` is not itself a rank directory or its parent cannot be read.
pub(crate) fn siblings_of(dir: &Path) -> Vec<PathBuf> {
    let is_rank = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(RankDirName::parse)
        .is_some();
    let Some(parent) = dir.parent().filter(|_| is_rank) else {
        return Vec::new();
    };
    let mut all = rank_dirs(parent).unwrap_or_default();
    all.retain(|p| p != dir);
    all
}

/// Who owns a sibling, as far as this process can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Another live process holds its lock: never counted, swept, taken or
    /// uploaded by anyone else.
    Live,
    /// This process holds its lock: as an adoption (`adopting: true`) or as
    /// a claim it keeps.
    HeldHere {
        /// The owner record says `adopting`.
        adopting: bool,
    },
    /// Nobody holds it and an adopter marked it blocked (the reason).
    Blocked(String),
    /// Nobody holds it and it is not marked blocked.
    Dead,
    /// Dead, but this process could not take and empty it (another user's),
    /// or it could not be probed at all (the reason). Only `classify` says
    /// this.
    NotOurs(String),
}

/// What a non-blocking probe of a sibling's owner lock read.
#[derive(Debug, Clone)]
pub struct Probe {
    /// spool-lock's probe: held or not, the owner record, the lock file.
    pub status: OwnerStatus,
    /// Held, and by this very process (`/proc/self/fdinfo`).
    pub held_here: bool,
}

impl Probe {
    /// The owner this probe shows: [`Owner::Live`], [`Owner::HeldHere`],
    /// [`Owner::Blocked`] or [`Owner::Dead`] (never `NotOurs`).
    pub fn owner(&self) -> Owner {
        let purpose = self.status.record.as_ref().map(|r| &r.purpose);
        if self.status.held {
            return if self.held_here {
                Owner::HeldHere {
                    adopting: matches!(purpose, Some(Purpose::Adopting)),
                }
            } else {
                Owner::Live
            };
        }
        match purpose {
            Some(Purpose::Blocked(why)) => Owner::Blocked(why.clone()),
            _ => Owner::Dead,
        }
    }
}

/// Probes `dir`'s owner lock without blocking and without an exclusive lock
/// (spool-lock's `read_owner`); when it is held, asks whether this process
/// is the holder.
pub fn probe(dir: &Path) -> Result<Probe, lk::Error> {
    let status = lk::read_owner(dir)?;
    let held_here = status.held && lk::held_by_this_process(dir).unwrap_or(false);
    Ok(Probe { status, held_here })
}

/// [`probe`] and [`Probe::owner`], with what the budget's charge needs on top: a
/// sibling that cannot be probed, or a dead one this process could not take
/// and empty, is [`Owner::NotOurs`].
pub(crate) fn classify(dir: &Path) -> Owner {
    let owner = match probe(dir) {
        Ok(p) => p.owner(),
        Err(e) => {
            tracing::debug!(dir = %dir.display(), "cannot probe sibling: {e}");
            return Owner::NotOurs(e.to_string());
        }
    };
    if owner == Owner::Dead && !could_take_and_empty(dir) {
        return Owner::NotOurs(format!(
            "this process may not list and write {} or its lock file",
            dir.display()
        ));
    }
    owner
}

/// Whether this process could take `dir` and empty it: it can list and
/// write the directory, and read and write its lock file if it has one.
fn could_take_and_empty(dir: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    let rwx = AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK;
    if access(dir, rwx).is_err() {
        return false;
    }
    let lock = dir.join(lk::LOCK_FILE_NAME);
    match std::fs::symlink_metadata(&lock) {
        Ok(_) => access(&lock, AccessFlags::R_OK | AccessFlags::W_OK).is_ok(),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_dirs_lists_rank_directories_only_and_siblings_skip_self() {
        let key = tempfile::tempdir().unwrap();
        for d in ["r0-0000000a", "r1-0000000b", "not-a-rank", "r2-0000000c"] {
            std::fs::create_dir(key.path().join(d)).unwrap();
        }
        std::fs::write(key.path().join("r3-0000000d"), b"a file").unwrap();
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(rank_dirs(key.path()).unwrap()),
            ["r0-0000000a", "r1-0000000b", "r2-0000000c"]
        );
        assert_eq!(
            names(siblings_of(&key.path().join("r1-0000000b"))),
            ["r0-0000000a", "r2-0000000c"]
        );
        assert!(siblings_of(&key.path().join("not-a-rank")).is_empty());
    }

    #[test]
    fn a_sibling_held_by_this_process_is_held_here_and_an_unlocked_one_dead() {
        let key = tempfile::tempdir().unwrap();
        let held = key.path().join("r0-0000000a");
        let claim = lk::acquire(&held, &lk::LockOptions::default()).unwrap();
        assert_eq!(classify(&held), Owner::HeldHere { adopting: false });
        let dead = key.path().join("r1-0000000b");
        std::fs::create_dir(&dead).unwrap();
        assert_eq!(classify(&dead), Owner::Dead);
        claim.release().unwrap();
        assert_eq!(classify(&held), Owner::Dead);
    }

    /// Set in the child of [`a_dead_sibling_another_user_may_not_empty_is_not_ours`]:
    /// the key directory whose siblings it classifies as `nobody`.
    const AS_NOBODY: &str = "SPOOL_CORE_SIBLINGS_AS_NOBODY";

    /// The charge as a non-root user (root's `access(2)` grants whatever the
    /// mode says): this test runs itself again as `nobody` (uid 65534), which
    /// classifies four dead siblings. Its own with its own lock file, and its
    /// own without one, are dead; one whose directory is root's (it may not
    /// write it), and one of its own whose lock file is root's and only
    /// readable (it may probe it but not write it), are not ours.
    #[test]
    fn a_dead_sibling_another_user_may_not_empty_is_not_ours() {
        use std::os::unix::fs::{chown, PermissionsExt};
        use std::os::unix::process::CommandExt;
        const NOBODY: u32 = 65534;
        const NAME: &str = "siblings::tests::a_dead_sibling_another_user_may_not_empty_is_not_ours";
        if let Some(key) = std::env::var_os(AS_NOBODY) {
            for dir in rank_dirs(Path::new(&key)).unwrap() {
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                println!("classified {name} {:?}", classify(&dir));
            }
            return;
        }
        let root = nix::unistd::Uid::effective().is_root();
        if !lk::testing::required(root, "root, to run a child as another user") {
            return;
        }
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        // under /tmp: the ancestors of $TMPDIR may be closed to `nobody`
        let key = tempfile::tempdir_in("/tmp").unwrap();
        mode(key.path(), 0o755);
        let dead = |name: &str, lock_owner: Option<u32>| {
            let dir = key.path().join(name);
            lk::acquire(&dir, &lk::LockOptions::default())
                .unwrap()
                .release()
                .unwrap();
            let lock = dir.join(lk::LOCK_FILE_NAME);
            match lock_owner {
                Some(uid) => {
                    chown(&lock, Some(uid), Some(uid)).unwrap();
                    mode(&lock, 0o644);
                }
                None => std::fs::remove_file(&lock).unwrap(),
            }
            dir
        };
        for (name, lock_owner) in [("r0-0000000a", Some(NOBODY)), ("r1-0000000b", Some(0))] {
            let dir = dead(name, lock_owner);
            chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
            mode(&dir, 0o700);
        }
        let no_lock = dead("r2-0000000c", None);
        chown(&no_lock, Some(NOBODY), Some(NOBODY)).unwrap();
        mode(&dead("r3-0000000d", None), 0o755);
        // The test binary may sit where uid 65534 cannot reach it (a
        // checkout under a 0700 directory, as CI's fresh clone): run a copy
        // from a directory it can.
        let bin = tempfile::tempdir_in("/tmp").unwrap();
        mode(bin.path(), 0o755);
        let exe = bin.path().join("spool-core-tests");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        mode(&exe, 0o755);
        let out = std::process::Command::new(&exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(AS_NOBODY, key.path())
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the child as uid {NOBODY} failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = |name: &str| {
            stdout
                .lines()
                // libtest's `test … ... ` may start the first line
                .find_map(|l| l.split_once(&format!("classified {name} ")))
                .map(|(_, owner)| owner)
                .unwrap_or_else(|| panic!("the child did not classify {name}: {stdout}"))
                .to_owned()
        };
        assert_eq!(
            said("r0-0000000a"),
            "Dead",
            "its own, with its own lock file"
        );
        assert_eq!(said("r2-0000000c"), "Dead", "its own, without a lock file");
        for name in ["r1-0000000b", "r3-0000000d"] {
            assert!(
                said(name).starts_with("NotOurs(\"this process may not list and write"),
                "{name} (root's lock file, or root's directory) is not ours: {}",
                said(name)
            );
        }
    }
}
