//! The crash-safe spool directory. See the crate docs ("The
//! spool directory") for the file names, the stage protocol, the accounting
//! and what each walk skips.
//!
//! One concern per file: `names.rs` (what a file name says), `walk.rs` (the
//! one directory walk and its skips, the fs helpers), `stage.rs` (stage,
//! reserve and account, the pause-before-publish seam), `recovery.rs`
//! (sweep, validate, quarantine, reject, purge), `requeue.rs` (set-aside
//! packs back to ready), `inspect.rs` (lock-free
//! reads: scan, counts, verify), `charge.rs` (the dead-sibling charge);
//! this file holds the [`Spool`] itself and its shared types.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::at::{AtDir, Kind};
use crate::lk::{self, Claim, LockMode, LockOptions};
use crate::pack::PackId;
use crate::Error;

mod charge;
mod inspect;
mod names;
mod pause;
mod ready;
mod recovered;
mod recovery;
mod requeue;
mod requeued;
mod stage;
mod walk;

#[cfg(test)]
use charge::sibling_charge;
pub use charge::{dead_sibling_bytes, SiblingCharge};
pub use inspect::{
    inspect, scan_dir, validate_file, verify_dir, verify_dir_with_progress, DirCounts,
    VerifyProgress, VerifyReport,
};
pub use names::{file_kind, ordinal_dir_name, parse_ordinal_dir, FileKind};
pub use pause::set_pause_before_publish;
pub use ready::ReadyPack;
pub use recovered::{Recovery, RecoveryReport, RecoveryStep, SetAside};
pub use requeued::Requeued;
pub use walk::file_type_name;

/// Where a live owner consents to the hand-off of its packs (see
/// [`crate::handoff`]); no walk enters it.
pub const REFS_DIR: &str = "_refs";

/// How a [`Spool`] opens its directory.
#[derive(Debug, Clone, Default)]
pub struct SpoolConfig {
    /// Take the owner lock (default), or check that this process holds it.
    pub lock_mode: LockMode,
    /// Lock options (the shared-filesystem override reaches every check).
    pub lock: LockOptions,
    /// Byte budget of the directory (`None`: unbounded).
    pub max_bytes: Option<u64>,
    /// Charge what dead sibling rank directories hold against `max_bytes`
    ///. Only meaningful for a rank directory of the layout.
    pub charge_dead_siblings: bool,
}

/// What a stage sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedPack {
    /// `<dir>[/w<k>]/<id>.ready`.
    pub path: PathBuf,
    /// The pack's id.
    pub id: PackId,
    /// Its size.
    pub bytes: u64,
}

/// The byte account of a spool (what counts against `max_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of open, ready, quarantined and rejected files, as of the last
    /// walk plus what stages and removals have done since.
    pub committed: u64,
    /// Bytes reserved by stages in flight.
    pub reserved: u64,
    /// Bytes of dead siblings charged (0 without `charge_dead_siblings`).
    pub dead_sibling_bytes: u64,
}

impl Usage {
    /// Everything counted against the budget.
    pub fn used(&self) -> u64 {
        self.committed + self.reserved + self.dead_sibling_bytes
    }
}

/// A stage in flight in this [`Spool`] (the reconcile leaves its files to
/// the stage's own accounting).
#[derive(Debug, Default)]
struct Flight {
    count: u32,
    /// Bytes of a `.ready` of this id that a reconcile skipped.
    skipped_ready: u64,
}

#[derive(Debug, Default)]
struct State {
    committed: u64,
    reserved: u64,
    dead_sibling_bytes: u64,
    in_flight: HashMap<PackId, Flight>,
    /// A refusal for a full budget was logged and no stage has fit since:
    /// a sink retrying its stage logs the refusal once, not once a retry.
    full_logged: bool,
}

/// An open spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// The directory's device and inode when opened: a stage works only in
    /// that very directory, whatever is put at its path later.
    identity: (u64, u64),
    config: SpoolConfig,
    claim: Option<Claim>,
    state: Mutex<State>,
}

impl Spool {
    /// Opens a spool directory: the node-local check, the owner lock per
    /// mode (`Take` creates the directory locked if it does not exist;
    /// `HeldByCaller` checks this process holds it), and the accounting
    /// walk (plus the dead-sibling charge when configured). Nothing else:
    /// recovery is explicit.
    pub fn open(dir: &Path, config: &SpoolConfig) -> Result<Spool, Error> {
        let dir = std::path::absolute(dir).map_err(|e| Error::io("resolve", dir, e))?;
        let parent = dir.parent().unwrap_or(&dir);
        lk::check_node_local(
            if dir.exists() { &dir } else { parent },
            config.lock.allow_shared_filesystem,
        )?;
        let claim = match config.lock_mode {
            LockMode::Take => Some(lk::acquire(&dir, &config.lock)?),
            LockMode::HeldByCaller => {
                lk::verify_held_by_caller(&dir, &config.lock)?;
                None
            }
        };
        let identity = crate::at::AtDir::open_path(&dir)
            .map_err(|e| Error::io("open directory", &dir, e.into()))?
            .identity()?;
        let spool = Spool {
            dir,
            identity,
            config: config.clone(),
            claim,
            state: Mutex::new(State::default()),
        };
        {
            let mut st = spool.state();
            spool.reconcile_locked(&mut st)?;
        }
        tracing::debug!(dir = %spool.dir.display(), usage = ?spool.usage(), "spool opened");
        Ok(spool)
    }

    /// Opens the directory of a claim this process holds (a rank directory
    /// from [`crate::layout::claim_rank_dir`]) and keeps the claim, as a
    /// `Take` open would: [`Spool::into_claim`] gives it back. The lock mode
    /// in `config` is ignored. On failure the claim is released and the
    /// directory removed if empty (the error is returned).
    pub fn open_claimed(claim: Claim, config: &SpoolConfig) -> Result<Spool, Error> {
        let mut held = config.clone();
        held.lock_mode = LockMode::HeldByCaller;
        match Spool::open(claim.dir(), &held) {
            Ok(mut spool) => {
                spool.config.lock_mode = LockMode::Take;
                spool.claim = Some(claim);
                Ok(spool)
            }
            Err(err) => {
                let dir = claim.dir().to_path_buf();
                if let Err(e) = claim.release_and_remove_if_empty() {
                    tracing::warn!(dir = %dir.display(), "releasing {} after a failed open: {e}", dir.display());
                }
                Err(err)
            }
        }
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The claim this spool took (mode `Take`), if any.
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Gives up the spool and returns its claim (mode `Take`), so the
    /// caller can release it (or keep it).
    pub fn into_claim(self) -> Option<Claim> {
        self.claim
    }

    /// The current account.
    pub fn usage(&self) -> Usage {
        let st = self.state();
        Usage {
            committed: st.committed,
            reserved: st.reserved,
            dead_sibling_bytes: st.dead_sibling_bytes,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists the ready packs (regular files named `<id>.ready`, here and in
    /// `w<k>/`), in id order. Checks `cancel` between entries.
    pub fn scan(&self, cancel: &AtomicBool) -> Result<Vec<ReadyPack>, Error> {
        scan_dir(&self.dir, cancel)
    }

    /// Checks that `pack` names a ready pack of this spool by its id and
    /// ordinal (never trusting its path), and returns the path.
    fn own_path(&self, pack: &ReadyPack, kind: &str) -> Result<PathBuf, Error> {
        let base = match pack.ordinal {
            None => self.dir.clone(),
            Some(k) => self.dir.join(ordinal_dir_name(k)),
        };
        let path = base.join(format!("{}.{kind}", pack.id));
        if path != pack.path {
            return Err(Error::NotAPack {
                path: pack.path.clone(),
                dir: self.dir.clone(),
                why: "its path is not <dir>[/w<k>]/<id>.ready",
            });
        }
        Ok(path)
    }

    /// Removes a pack after it is uploaded and indexed. Refuses a path that
    /// is not exactly this spool's `<id>.ready`. Removing a pack that is
    /// already gone succeeds.
    pub fn remove(&self, pack: &ReadyPack) -> Result<(), Error> {
        match self.remove_all(std::slice::from_ref(pack)).pop() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Removes packs after they are uploaded and indexed, as [`remove`]
    /// does each, then fsyncs each directory they were in once (not once a
    /// pack: a batch of 256 costs one directory fsync, not 256). Returns
    /// the packs that could not be removed, with why; the others are gone.
    ///
    /// The fsync is not what keeps a pack safe (it is in the store and the
    /// catalog already): a removal a crash undoes only makes a successor
    /// find the pack again, already stored and indexed (invariant
    /// 7). It makes the removal stick, and the account follows.
    ///
    /// [`remove`]: Self::remove
    pub fn remove_all(&self, packs: &[ReadyPack]) -> Vec<(PathBuf, Error)> {
        let mut failed = Vec::new();
        if packs.is_empty() {
            return failed;
        }
        // the spool's own directory as opened, each `w<k>/` below it opened
        // without following a link (crate::at): a link planted at `w<k>`
        // or at a pack's name is never followed by a removal
        let mut dirs = walk::EntryDirs::new(&self.dir);
        let mut synced = std::collections::BTreeSet::new();
        let mut freed = 0u64;
        for pack in packs {
            let at = match dirs.of(pack.ordinal) {
                Ok(Some(at)) => at,
                Ok(None) => continue, // its w<k>/ is gone: so is the pack
                Err(e) => {
                    failed.push((pack.path.clone(), e));
                    continue;
                }
            };
            match self.unlink_ready(at, pack) {
                Ok(Some(len)) => {
                    freed += len;
                    synced.insert(pack.ordinal);
                }
                Ok(None) => {}
                Err(e) => failed.push((pack.path.clone(), e)),
            }
        }
        for ordinal in synced {
            if let Ok(Some(at)) = dirs.of(ordinal) {
                if let Err(e) = at.sync() {
                    failed.push((at.path().to_path_buf(), e));
                }
            }
        }
        let mut st = self.state();
        st.committed = st.committed.saturating_sub(freed);
        failed
    }

    /// Unlinks one `<id>.ready` of this spool from `at` (its directory):
    /// its length, or `None` if it was already gone. Anything but a
    /// regular file at its name is [`Error::UnexpectedEntry`] and stays.
    fn unlink_ready(&self, at: &AtDir, pack: &ReadyPack) -> Result<Option<u64>, Error> {
        self.own_path(pack, "ready")?;
        let name = format!("{}.ready", pack.id);
        let len = match at.stat(&name)? {
            None => return Ok(None),
            Some((Kind::Regular, len)) => len,
            Some((k, _)) => {
                return Err(at.unexpected(&name, k.described(), "a sealed pack (a regular file)"))
            }
        };
        match at.remove_file(&name)? {
            true => Ok(Some(len)),
            false => Ok(None),
        }
    }

    /// How the spool was opened.
    pub(crate) fn config(&self) -> &SpoolConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests;
