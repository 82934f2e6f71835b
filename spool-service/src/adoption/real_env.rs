//! The real [`AdoptionEnv`]: spool-lock probes and takes, spool-core's
//! recovery listing, the siblings this service holds ([`Held`]), and the
//! service's [`Drain`] (which validates each adopted pack just ahead of its
//! upload).
//!
//! # Unadoptable is not a backoff
//!
//! A take that fails for a reason no retry fixes from here blocks the
//! sibling once: an I/O error spool-lock judges
//! [`Permanent`](spool_lock::IoVerdict::Permanent) (its errno list is
//! there), a shared filesystem, a held ancestor, a lock file that is not a
//! regular file (spool-lock's `LockFileNotRegular`: opened only
//! non-blocking), a sibling that cannot be opened. `last_error` names it,
//! the cycle is not failed, and the loop keeps its pace. A
//! [`Transient`](spool_lock::IoVerdict::Transient) failure is no verdict:
//! the probe lets the take decide, and a take that fails transiently leaves
//! the sibling queued for the next pass (counted toward the backoff, like
//! any retryable failure). A read-only filesystem
//! ([`ReadOnly`](spool_lock::IoVerdict::ReadOnly), in the lock's error or
//! `Spool::open`'s) is neither: the sibling is listed blocked, not owed,
//! reported once, no backoff, and taken again every `recheck_interval`,
//! since a remount ends it. A take that meets only readers' shared flocks
//! (spool-lock's `HeldShared`) is tried again on a later pass, within
//! [`HELD_SHARED_RECHECK`](crate::adoption::HELD_SHARED_RECHECK): never
//! blocked, never a backoff.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_core::at::{AtDir, Kind, Name};
use spool_core::siblings::{self, Owner};
use spool_core::spool::SpoolConfig;
use spool_core::{ReadyPack, Spool};
use spool_lock::{LockMode, LockOptions};

use crate::adoption::{
    AdoptRefusal, AdoptionEnv, Cause, PackOutcome, ProbeVerdict, RecoveryFailure,
};
use crate::bound::Bound;
use crate::drain::{Drain, Job, Origin};
use crate::offload::blocking;

/// A sibling this service holds for adoption: its lock and its spool.
pub(crate) struct Held {
    claim: spool_lock::Claim,
    spool: Arc<Spool>,
}

/// The siblings this service holds, by directory.
pub(crate) type HeldSiblings = HashMap<PathBuf, Held>;

/// The environment of one adopting cycle.
pub(crate) struct Env<'a> {
    pub(crate) drain: &'a mut Drain,
    pub(crate) held: &'a mut HeldSiblings,
    pub(crate) key_dir: PathBuf,
    pub(crate) own_dir: PathBuf,
    pub(crate) lock: LockOptions,
    /// The cycle's deadline and stop's cancel, for every catalog call.
    pub(crate) bound: Bound,
    pub(crate) cancel_flag: Arc<AtomicBool>,
}

/// An I/O failure of a take that no retry can fix from here (another
/// user's files, a symlink loop, a path that is not a directory:
/// [`spool_lock::IoVerdict::Permanent`]). Transient ones (EMFILE, EINTR,
/// EIO, ENOSPC, ...) are retried. A read-only filesystem (EROFS) is
/// neither: see [`is_read_only`].
fn is_permanent(e: &spool_lock::Error) -> bool {
    matches!(e, spool_lock::Error::Io { .. })
        && spool_lock::io_verdict(e) == Some(spool_lock::IoVerdict::Permanent)
}

/// Whether `e`, or any error in its source chain, is an I/O error EROFS: a
/// take on a read-only filesystem. The sibling is blocked for now (listed,
/// not owed, no backoff, reported once) and taken again every
/// `recheck_interval`, since a remount can end it (blocked once, never
/// retried in a loop; a spool read-only for a while is drained once it is
/// writable again).
fn is_read_only(e: &(dyn std::error::Error + 'static)) -> bool {
    spool_lock::io_verdict(e) == Some(spool_lock::IoVerdict::ReadOnly)
}

/// Whether `e` is a momentary shortage of this process or host (EMFILE,
/// ENFILE, ENOMEM, EINTR, ...): no verdict on the directory, so its take is
/// tried again later instead of blocking it (a descriptor storm must not
/// block a healthy sibling, in memory or on disk).
fn is_transient(e: &(dyn std::error::Error + 'static)) -> bool {
    spool_lock::io_verdict(e) == Some(spool_lock::IoVerdict::Transient)
}

/// Anything in `dir` besides the lock file, empty subdirectories and nested
/// spools. Listed relative to the directory's descriptor: a subdirectory is
/// opened without following a link, and an entry's kind is its own (a link
/// is reported, never followed).
fn describe_other_files(dir: &AtDir, top: bool) -> Result<Option<String>, spool_core::Error> {
    for name in dir.names()? {
        let name = match name {
            Name::Utf8(s) => std::ffi::OsString::from(s),
            Name::Foreign(os) => os,
        };
        if top && name == spool_lock::LOCK_FILE_NAME {
            continue;
        }
        let Some(kind) = dir.kind(&name)? else {
            continue; // gone meanwhile
        };
        if kind == Kind::Dir {
            let Some(sub) = dir.open_dir(&name)? else {
                continue;
            };
            // a nested spool: a lock file of its own
            if sub.kind(spool_lock::LOCK_FILE_NAME)?.is_some() {
                continue;
            }
            if let Some(d) = describe_other_files(&sub, false)? {
                return Ok(Some(d));
            }
            continue;
        }
        return Ok(Some(format!(
            "{} ({}, not a pack)",
            dir.join(&name).display(),
            kind.described()
        )));
    }
    Ok(None)
}

/// [`describe_other_files`] of the rank directory `dir` (`<root>/<key>/<rank>`,
/// the key and rank directories opened without following a link).
fn describe_other_files_of(dir: &Path) -> Result<Option<String>, spool_core::Error> {
    match AtDir::open_layout(dir, 2)? {
        Some(at) => describe_other_files(&at, true),
        None => Err(spool_core::Error::DirectoryVanished {
            dir: dir.to_path_buf(),
        }),
    }
}

impl AdoptionEnv for Env<'_> {
    fn now(&self) -> Instant {
        Instant::now()
    }

    async fn list_siblings(&mut self) -> Result<Vec<PathBuf>, String> {
        let (key_dir, own_dir) = (self.key_dir.clone(), self.own_dir.clone());
        blocking(move || {
            let mut out = siblings::rank_dirs(&key_dir)
                .map_err(|e| format!("listing {}: {e}", key_dir.display()))?;
            out.retain(|p| *p != own_dir);
            Ok(out)
        })
        .await
        .unwrap_or_else(|| Err(format!("listing {}: cut by stop", self.key_dir.display())))
    }

    async fn remove_stale_staging_copies(&mut self, older_than: Duration) -> usize {
        let opts = LockOptions {
            staging_max_age: older_than,
            ..self.lock.clone()
        };
        let key_dir = self.key_dir.clone();
        blocking(
            move || match spool_lock::remove_stale_staging(&key_dir, &opts) {
                Ok(v) => v.len(),
                Err(e) => {
                    tracing::warn!(dir = %key_dir.display(), "stale staging cleanup: {e}");
                    0
                }
            },
        )
        .await
        .unwrap_or(0)
    }

    async fn probe(&mut self, dir: &Path) -> ProbeVerdict {
        let d = dir.to_path_buf();
        // cut by stop: no verdict; the adopter is letting go anyway
        blocking(move || probe_sync(&d))
            .await
            .unwrap_or(ProbeVerdict::Dead)
    }

    async fn try_adopt(&mut self, dir: &Path) -> Result<(), AdoptRefusal> {
        let (d, lock) = (dir.to_path_buf(), self.lock.clone());
        let (claim, spool) = blocking(move || take_sync(&d, lock))
            .await
            .unwrap_or_else(|| Err(AdoptRefusal::Retryable("cut by stop".into())))?;
        spool_core::seams::kill_point("after_try_adopt");
        tracing::info!(dir = %dir.display(), "adopting dead sibling {}", dir.display());
        self.held.insert(
            dir.to_path_buf(),
            Held {
                claim,
                spool: Arc::new(spool),
            },
        );
        Ok(())
    }

    async fn begin_recovery(&mut self, dir: &Path) -> Result<Vec<ReadyPack>, RecoveryFailure> {
        let Some(held) = self.held.get_mut(dir) else {
            return Err(RecoveryFailure::Unopenable(
                format!("{} is not held", dir.display()).into(),
            ));
        };
        let spool = held.spool.clone();
        let flag = self.cancel_flag.clone();
        let r = tokio::task::spawn_blocking(move || {
            // a dead owner's hand-off first: what the shipper confirmed is
            // removed, never shipped twice (see spool_core::handoff)
            let settled = spool.settle_hand_off()?;
            let rec = spool.begin_recovery()?;
            Ok((settled, rec, spool.scan(&flag)?))
        })
        .await
        .unwrap_or(Err(spool_core::Error::Cancelled));
        // logged here, on the adopter's task, not on the blocking pool
        if let Ok((settled, rec, _)) = &r {
            if settled.removed > 0 {
                tracing::info!(dir = %dir.display(), settled = settled.removed, "removed packs the shipper had confirmed");
            }
            // left where they are, never followed: the directory is set
            // aside once the rest is shipped (it still holds other files)
            if let Some(first) = settled.left.first() {
                tracing::warn!(dir = %dir.display(), entries = settled.left.len(), "entries spool did not make in a dead owner's hand-off, left alone (the directory is set aside once its packs are shipped): {first}");
            }
            if !rec.swept.is_empty() || !rec.set_aside.is_empty() {
                tracing::info!(dir = %dir.display(), swept = rec.swept.len(),
                    set_aside = rec.set_aside.len(), "swept a dead writer's temp files");
            }
        }
        match r {
            Ok((_, _, list)) => Ok(list),
            Err(spool_core::Error::Cancelled) => Err(RecoveryFailure::Cancelled),
            Err(e) => Err(RecoveryFailure::Retryable(e.into())),
        }
    }

    async fn upload_and_index_round(
        &mut self,
        dir: &Path,
        packs: &[ReadyPack],
    ) -> Vec<(ReadyPack, PackOutcome)> {
        let Some(spool) = self.held.get(dir).map(|h| h.spool.clone()) else {
            let reason = Cause::from(format!("{} is not held", dir.display()));
            return packs
                .iter()
                .map(|p| {
                    let reason = reason.clone();
                    (
                        p.clone(),
                        PackOutcome::Failed {
                            retryable: true,
                            reason,
                        },
                    )
                })
                .collect();
        };
        // The dead producer named by the owner record at the take, never
        // this adopter.
        let source = Origin::of_producer(self.held.get(dir).and_then(|h| h.claim.producer()));
        let jobs = packs
            .iter()
            .map(|p| Job::new(p.clone(), spool.clone(), source.clone()))
            .collect();
        self.drain
            .run(jobs, &self.bound, &self.cancel_flag)
            .await
            .into_iter()
            .map(|(job, outcome)| (job.pack().clone(), outcome))
            .collect()
    }

    async fn other_files(&mut self, dir: &Path) -> Option<String> {
        let d = dir.to_path_buf();
        blocking(move || match describe_other_files_of(&d) {
            Ok(found) => found,
            Err(e) => Some(format!("cannot look into {}: {e}", d.display())),
        })
        .await
        .unwrap_or_else(|| Some(format!("{}: the look was cut by stop", dir.display())))
    }

    async fn mark_blocked(&mut self, dir: &Path, reason: &str) {
        let Some(h) = self.held.remove(dir) else {
            return;
        };
        let (d, reason) = (dir.to_path_buf(), reason.to_string());
        let back = blocking(move || {
            if let Err(e) = h.claim.mark_blocked(&reason) {
                tracing::warn!(dir = %d.display(), "marking blocked: {e}");
            }
            h
        })
        .await;
        // (None: the runtime is going down; the claim is kept until exit)
        if let Some(h) = back {
            self.held.insert(dir.to_path_buf(), h);
        }
    }

    async fn release(&mut self, dir: &Path) {
        self.drain.forget(dir);
        if let Some(h) = self.held.remove(dir) {
            release_all(vec![(dir.to_path_buf(), h)]).await;
        }
    }

    async fn release_and_remove_if_empty(&mut self, dir: &Path) -> bool {
        self.drain.forget(dir);
        let Some(h) = self.held.remove(dir) else {
            return false;
        };
        let d = dir.to_path_buf();
        blocking(move || {
            drop(h.spool);
            match h.claim.release_and_remove_if_empty() {
                Ok(removed) => removed,
                Err(e) => {
                    tracing::warn!(dir = %d.display(), "releasing drained sibling: {e}");
                    false
                }
            }
        })
        .await
        .unwrap_or(false)
    }
}

/// Lets go of every sibling held (stop, a latch, a failed loop): their
/// packs, owed ones included, stay for a successor.
pub(crate) async fn let_go_of_all(drain: &mut Drain, held: &mut HeldSiblings) {
    let all: Vec<(PathBuf, Held)> = held.drain().collect();
    for (dir, _) in &all {
        drain.forget(dir);
    }
    release_all(all).await;
}

/// Lets go of adopted siblings whole, on the blocking pool (a release
/// rewrites and fsyncs the owner record): their packs stay for a successor.
async fn release_all(held: Vec<(PathBuf, Held)>) {
    if held.is_empty() {
        return;
    }
    blocking(move || {
        for (dir, h) in held {
            drop(h.spool);
            match h.claim.release() {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "let go of adopted sibling {}", dir.display())
                }
                Err(e) => tracing::warn!(dir = %dir.display(), "releasing adopted sibling: {e}"),
            }
        }
    })
    .await;
}

/// [`AdoptionEnv::probe`]'s work: `read_owner` and, for a held lock, the
/// `/proc/self/fd` walk that tells a kept claim of this process.
fn probe_sync(dir: &Path) -> ProbeVerdict {
    if !dir.exists() {
        return ProbeVerdict::Vanished;
    }
    // A sibling this very process holds (a kept claim) is live too.
    match siblings::probe(dir) {
        Ok(p) => match p.owner() {
            Owner::Live | Owner::HeldHere { .. } => ProbeVerdict::Live,
            Owner::Blocked(why) => ProbeVerdict::MarkedBlocked(why),
            // `try_adopt` finds out whether it can be taken and opened.
            Owner::Dead | Owner::NotOurs(_) => ProbeVerdict::Dead,
        },
        // A transient failure (EMFILE, EINTR, EIO, ENOENT of a directory
        // that vanished since the check above, ...) is no verdict: the take
        // decides (it refuses a live owner, finds a vanished directory, and
        // fails retryably if the cause persists), so it is retried, never a
        // permanent "not ours".
        Err(e) if !is_permanent(&e) && matches!(e, spool_lock::Error::Io { .. }) => {
            tracing::debug!(dir = %dir.display(), "probe failed transiently, the take decides: {e}");
            ProbeVerdict::Dead
        }
        Err(e) => ProbeVerdict::NotOurs(e.into()),
    }
}

/// [`AdoptionEnv::try_adopt`]'s work: spool-lock's take (its retries wait
/// out a probe's momentary shared flock, up to a second) and `Spool::open`
/// of the sibling (its reconcile lists every file in it).
/// A directory gone before or during the take is [`AdoptRefusal::Vanished`].
fn take_sync(dir: &Path, lock: LockOptions) -> Result<(spool_lock::Claim, Spool), AdoptRefusal> {
    let claim = match spool_lock::try_adopt(dir, &lock) {
        Ok(c) => c,
        Err(e) if e.is_owned_by_another() => return Err(AdoptRefusal::Live(e.into())),
        Err(e @ spool_lock::Error::HeldShared { .. }) => {
            return Err(AdoptRefusal::HeldShared(e.into()))
        }
        Err(e @ spool_lock::Error::HeldByThisProcess { .. }) => {
            return Err(AdoptRefusal::Live(e.into()))
        }
        Err(e @ spool_lock::Error::Io { .. }) if is_read_only(&e) => {
            return Err(AdoptRefusal::ReadOnly(e.into()))
        }
        Err(e @ spool_lock::Error::Io { .. }) if is_permanent(&e) => {
            return Err(AdoptRefusal::Unadoptable(e.into()))
        }
        // A sibling that can never be taken from here is
        // blocked once, never a reason to back the loop off
        Err(
            e @ (spool_lock::Error::SharedFilesystem { .. }
            | spool_lock::Error::NestedUnderHeld { .. }
            | spool_lock::Error::LockFileNotRegular { .. }
            | spool_lock::Error::NoReplaceUnsupported { .. }),
        ) => return Err(AdoptRefusal::Unadoptable(e.into())),
        Err(e) if !dir.exists() => {
            tracing::debug!(dir = %dir.display(), "sibling vanished: {e}");
            return Err(AdoptRefusal::Vanished);
        }
        Err(e) => return Err(AdoptRefusal::Retryable(e.into())),
    };
    let config = SpoolConfig {
        lock_mode: LockMode::HeldByCaller,
        lock,
        ..SpoolConfig::default()
    };
    match Spool::open(claim.dir(), &config) {
        Ok(spool) => Ok((claim, spool)),
        Err(e) => {
            let _ = claim.release();
            if is_read_only(&e) {
                Err(AdoptRefusal::ReadOnly(e.into()))
            } else if is_transient(&e) {
                Err(AdoptRefusal::Retryable(e.into()))
            } else {
                Err(AdoptRefusal::Unadoptable(e.into()))
            }
        }
    }
}

#[cfg(test)]
mod tests;
