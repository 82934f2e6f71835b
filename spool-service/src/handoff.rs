//! The node's shipper: the service holding the node lease ships
//! the packs live sink-only owners consented to hand off (the protocol and
//! its files are `spool_core::handoff`'s), through the same drain and fence
//! as its own, and tells each owner which rows the catalog confirmed.
//!
//! # A cycle's hand-off step ([`Shipper::ship`])
//!
//! 1. Tell owners about packs indexed since the last step (an owed
//!    hand-off indexed by the cycle's own work, or a confirmation that
//!    could not be written before).
//! 2. List the owners to look at: every rank directory under the key
//!    (a full rescan: at start, on the poll interval, when a new directory
//!    appears, after the watch overflowed, and while handed-off packs
//!    wait for their bundle), or only those the watch saw change. Each must be live: its lock held by another process, or by a
//!    claim this process keeps (an engine of the same process that ships
//!    by the daemon); a dead one is adoption's, one this process is
//!    adopting is too, and the own directory is the service's.
//! 3. Read what each consented to (never following a symlink, never
//!    outside its directory), leaving out what is owed, waiting for its
//!    confirmation, or refused before; run all of it through the drain in
//!    one run, so rows of every owner share index batches (one insert
//!    stream per node).
//! 4. Tell owners about what the catalog confirmed, and collect the
//!    confirmations of packs their owners have removed.
//!
//! A ref that names no valid pack (a symlink, a directory, a file that
//! fails validation, a pack changed after consent) is refused: reported
//! once (a few in full per owner and step, the rest of a flood in one
//! line), never shipped, left with its owner (adoption quarantines it when
//! the owner is gone); it never holds up another pack or owner. A
//! confirmation that cannot be written (a read-only filesystem, EACCES, a
//! file where `_shipped/` should be) is reported once per owner and tried
//! again with the service's retry backoff; the pack is not shipped again
//! meanwhile, and stays with its owner.
//!
//! The shipper records itself in `<key>/_shipped/.shipper` (spool-core's
//! `ShipperRecord`). A service whose node name differs from that of a live
//! recorded shipper serves no owner (two node names on one root would each
//! hold a node lease and both ship every owner's packs); its adoption,
//! which the lock makes exclusive, goes on. Its owners' rows share the
//! drain's index calls, paced by the index linger
//! (`drain/pipeline.rs`), so a node sends one insert stream whatever its
//! ranks.

mod watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use spool_core::handoff::{self, Consents};
use spool_core::registry::Registry;
use spool_core::siblings::{self, Owner};
use spool_core::PackId;
use spool_lock::Access;

use crate::bound::Bound;
use crate::drain::{Drain, Job, Linger, Origin, PackOutcome, Stream};
use crate::offload::blocking;

pub(crate) use watch::RefWatch;

/// Refusals reported in full per owner and step; the rest are counted.
const REPORTED_REFUSALS: usize = 3;

/// What the shipper counts (the snapshot's hand-off figures).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HandOffCounts {
    /// Live owners served in the last full rescan or since.
    pub owners: u64,
    /// Consented packs seen waiting to be shipped in the last step.
    pub waiting: u64,
    /// Handed-off packs indexed.
    pub shipped: u64,
    /// Handed-off packs whose owners were told their rows are confirmed.
    pub confirmed: u64,
    /// Refs refused (reported once each).
    pub refused: u64,
    /// Handed-off packs indexed whose confirmations cannot be written yet
    /// (they stay with their owners).
    pub unconfirmed: u64,
    /// Consent to confirmation of the last pack confirmed (its ref's age
    /// when its confirmation was written), milliseconds.
    pub last_lag_ms: u64,
    /// The longest such lag so far, milliseconds.
    pub max_lag_ms: u64,
}

/// A pack to confirm to its owner: its ordinal and id.
type Confirmable = (Option<u32>, PackId);

/// One owner as a step read it.
struct Looked {
    dir: PathBuf,
    source: Origin,
    consents: Consents,
}

/// The shipper (see the module doc).
pub(crate) struct Shipper {
    key_dir: PathBuf,
    own_dir: PathBuf,
    watch: Option<RefWatch>,
    /// Owners watched (live when last looked at).
    served: HashSet<PathBuf>,
    /// Refs refused, with why: never shipped, reported once.
    refused: HashMap<PathBuf, String>,
    /// Refusals of this step not reported yet, by owner.
    unreported: HashMap<PathBuf, Vec<PathBuf>>,
    /// Packs indexed whose owners are not told yet, by owner.
    to_confirm: HashMap<PathBuf, Vec<Confirmable>>,
    /// Owners whose confirmations could not be written, with why
    /// (reported once, and recorded for `spool status`).
    confirm_failing: HashMap<PathBuf, String>,
    /// The record this service last wrote to `<key>/_shipped/.shipper`
    /// (`None`: it wrote none, or cleared it).
    recorded: Option<String>,
    /// This service's node name (`lease.node_name`), in its record.
    node: String,
    /// Another daemon serving the owners under the key was reported.
    reported_other: Option<PathBuf>,
    /// The mode and group of what the shipper creates (`spool.mode`,
    /// `spool.group`), like the owners' packs.
    access: Access,
    counts: HandOffCounts,
    /// The handed-off packs' bundle linger: every owner's small packs wait
    /// together for one bundle.
    linger: Linger,
}

impl Shipper {
    /// A shipper for the owners under `key_dir` (all but `own_dir`),
    /// woken through `registry`.
    pub(crate) fn new(
        key_dir: &Path,
        own_dir: &Path,
        registry: Arc<Registry>,
        access: Access,
        node: String,
    ) -> Shipper {
        Shipper {
            key_dir: key_dir.to_path_buf(),
            own_dir: own_dir.to_path_buf(),
            watch: RefWatch::start(key_dir, registry),
            served: HashSet::new(),
            refused: HashMap::new(),
            unreported: HashMap::new(),
            to_confirm: HashMap::new(),
            confirm_failing: HashMap::new(),
            recorded: None,
            node,
            reported_other: None,
            access,
            counts: HandOffCounts::default(),
            linger: Linger::default(),
        }
    }

    /// The handed-off packs' bundle linger.
    pub(crate) fn linger(&self) -> &Linger {
        &self.linger
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> HandOffCounts {
        self.counts
    }

    /// Whether a registry wake for `dir` concerns the shipper: the key
    /// directory, or one of its rank directories other than the own.
    pub(crate) fn concerns(&self, dir: &Path) -> bool {
        dir == self.key_dir || (dir.parent() == Some(&self.key_dir) && dir != self.own_dir)
    }

    /// Whether a registry wake for `dir` asks for a full rescan (a new
    /// directory under the key).
    pub(crate) fn rescans_for(&self, dir: &Path) -> bool {
        dir == self.key_dir
    }

    /// This service no longer serves (it does not hold the node's lease):
    /// its record as the node's shipper goes.
    pub(crate) fn stand_down(&mut self) {
        if self.recorded.take().is_some() {
            handoff::forget_shipper(&self.own_dir);
        }
    }

    /// One hand-off step (see the module doc) over every live owner
    /// (`only` = `None`) or those named. Returns whether something failed
    /// that a retry may fix.
    pub(crate) async fn ship(
        &mut self,
        drain: &mut Drain,
        only: Option<HashSet<PathBuf>>,
        bound: &Bound,
        flag: &Arc<AtomicBool>,
    ) -> bool {
        if self.served_elsewhere(drain).await {
            return false;
        }
        self.queue(drain.take_confirmable());
        self.tell_owners(drain).await;
        let (key, own) = (self.key_dir.clone(), self.own_dir.clone());
        let full = only.is_none();
        let looked = blocking(move || look(&key, &own, only.as_ref()))
            .await
            .unwrap_or_default();
        let owed = drain.owed_ids();
        let mut jobs = Vec::new();
        let mut waiting = 0u64;
        let mut live = HashSet::new();
        for l in looked {
            live.insert(l.dir.clone());
            if !self.served.contains(&l.dir) {
                if let Some(w) = &self.watch {
                    w.serve(&l.dir);
                }
                self.served.insert(l.dir.clone());
            }
            for r in l.consents.refused {
                self.refuse(r.path, r.why);
            }
            let unconfirmed: HashSet<PackId> = self
                .to_confirm
                .get(&l.dir)
                .map(|v| v.iter().map(|(_, id)| *id).collect())
                .unwrap_or_default();
            for pack in l.consents.packs {
                let ref_path = ref_path(&l.dir, &pack);
                if owed.contains(&pack.id)
                    || unconfirmed.contains(&pack.id)
                    || self.refused.contains_key(&ref_path)
                {
                    continue;
                }
                waiting += 1;
                jobs.push(Job::handed_off(pack, l.dir.clone(), l.source.clone()));
            }
        }
        if full {
            self.served.retain(|d| live.contains(d));
            self.counts.owners = self.served.len() as u64;
            if self.served.is_empty() {
                let no_record = matches!(handoff::shipper_of(&self.key_dir), Ok(None));
                if self.recorded.is_some() || !no_record {
                    // no owner to serve: no record (a killed daemon's included)
                    self.recorded = None;
                    handoff::clear_shipper(&self.key_dir);
                } else {
                    // no record, but perhaps the temp file of one a daemon
                    // killed mid-write left; the record itself is never
                    // touched here, so a daemon recording at this moment
                    // keeps its record
                    handoff::clear_shipper_temps(&self.key_dir);
                }
            }
        }
        self.counts.waiting = waiting;
        let mut failed = false;
        if drain.hold_for_bundle(&mut self.linger, &jobs) {
            // a bundle's worth is not there yet, and may come; meanwhile
            // they ride along the cycle's other runs, if any
            drain.park(Stream::HandOff, std::mem::take(&mut jobs));
        }
        if !jobs.is_empty() {
            for (job, outcome) in drain.run(jobs, bound, flag).await {
                failed |= self.settle(&job, outcome);
            }
        }
        self.report_refusals();
        self.queue(drain.take_confirmable());
        self.tell_owners(drain).await;
        // confirmations that could not be written are tried again soon
        failed |= !self.to_confirm.is_empty();
        self.counts.unconfirmed = self.to_confirm.values().map(|v| v.len() as u64).sum();
        if !self.served.is_empty() {
            self.record();
        }
        per_owner(live.into_iter().map(|d| (d, ())), |d, ()| {
            if let Err(e) = handoff::collect_confirmations(d) {
                tracing::debug!(dir = %d.display(), "collecting confirmations: {e}");
            }
        })
        .await;
        if full {
            let key = self.key_dir.clone();
            blocking(move || {
                if let Err(e) = handoff::collect_orphaned_confirmations(&key) {
                    tracing::debug!(dir = %key.display(), "collecting orphaned confirmations: {e}");
                }
            })
            .await;
        }
        failed
    }

    /// Settles the handed-off packs another run of the cycle carried (the
    /// drain's `riders`) as this step settles its own run's, and tells
    /// their owners at once; the linger starts over. Returns whether
    /// something failed that a retry may fix.
    pub(crate) async fn settle_carried(
        &mut self,
        drain: &mut Drain,
        carried: Vec<(Job, PackOutcome)>,
    ) -> bool {
        let mut failed = false;
        for (job, outcome) in carried {
            failed |= self.settle(&job, outcome);
        }
        self.linger = Linger::default();
        self.report_refusals();
        self.queue(drain.take_confirmable());
        self.tell_owners(drain).await;
        failed | !self.to_confirm.is_empty()
    }

    /// Settles one handed-off pack's outcome: a pack that failed for good
    /// is refused (left in its owner's directory, never tried again).
    /// Returns whether it failed in a way a retry may fix.
    fn settle(&mut self, job: &Job, outcome: PackOutcome) -> bool {
        match outcome {
            PackOutcome::Quarantined { reason } => {
                self.refuse(ref_path(job.dir(), job.pack()), reason)
            }
            PackOutcome::Failed {
                retryable: false,
                reason,
            } => self.refuse(ref_path(job.dir(), job.pack()), reason.to_string()),
            PackOutcome::Failed { .. } => return true,
            _ => {}
        }
        false
    }

    /// Whether another daemon, of another node name, serves the owners
    /// under the key: its record names a live rank directory that is not
    /// this service's. Then this one serves nothing (one node name per
    /// spool root: two would both ship every owner's packs), and says so
    /// once; it serves again once that daemon is gone.
    async fn served_elsewhere(&mut self, drain: &mut Drain) -> bool {
        let (key, own, node) = (
            self.key_dir.clone(),
            self.own_dir.clone(),
            self.node.clone(),
        );
        let other = blocking(move || {
            let rec = handoff::read_shipper(&key).ok()??;
            let dir = key.join(&rec.dir_name);
            if dir == own || rec.node.is_empty() || rec.node == node {
                return None;
            }
            let live = siblings::probe(&dir).is_ok_and(|p| p.owner() == Owner::Live);
            live.then_some((dir, rec.node))
        })
        .await
        .flatten();
        match other {
            Some((dir, other_node)) => {
                if self.reported_other.as_ref() != Some(&dir) {
                    drain.note_error(format!(
                        "another daemon, of node name {other_node:?} ({}), serves the hand-off of \
                         the owners under {}; this one (node name {:?}) ships none of their packs: \
                         give every daemon on one spool root the same lease.node_name (the \
                         node's), or stop one",
                        dir.display(),
                        self.key_dir.display(),
                        self.node
                    ));
                    self.reported_other = Some(dir);
                }
                if self.recorded.take().is_some() {
                    // (its record is the other's now: nothing of ours to remove)
                }
                true
            }
            None => {
                self.reported_other = None;
                false
            }
        }
    }

    /// Writes this service's record (who serves, its node name, what it
    /// refused, what it cannot confirm) when it changed.
    fn record(&mut self) {
        let name = |d: &Path| {
            d.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        let mut refused: Vec<(String, String, String)> = self
            .refused
            .iter()
            .map(|(r, why)| {
                let owner = r
                    .parent()
                    .and_then(Path::parent)
                    .map(name)
                    .unwrap_or_default();
                (owner, name(r), why.clone())
            })
            .collect();
        refused.sort();
        let mut unconfirmed: Vec<(String, u64, String)> = self
            .to_confirm
            .iter()
            .map(|(d, packs)| {
                let why = self.confirm_failing.get(d).cloned().unwrap_or_default();
                (name(d), packs.len() as u64, why)
            })
            .collect();
        unconfirmed.sort();
        let record = handoff::ShipperRecord {
            dir_name: name(&self.own_dir),
            node: self.node.clone(),
            refused,
            refused_more: 0,
            unconfirmed,
        };
        let text = format!("{record:?}");
        if self.recorded.as_deref() == Some(text.as_str()) {
            return;
        }
        // operators read who serves the owners, and what it could not do
        // (`spool status`)
        match handoff::record_shipper(&self.own_dir, &record, &self.access) {
            Ok(()) => self.recorded = Some(text),
            Err(e) => {
                tracing::debug!(dir = %self.own_dir.display(), "recording the node's shipper: {e}")
            }
        }
    }

    /// Refuses `ref_path` for `why`, once; reported at the end of the step
    /// ([`Shipper::report_refusals`]).
    fn refuse(&mut self, ref_path: PathBuf, why: String) {
        if self.refused.contains_key(&ref_path) {
            return;
        }
        self.counts.refused += 1;
        let owner = ref_path
            .parent()
            .and_then(Path::parent)
            .unwrap_or(&self.key_dir)
            .to_path_buf();
        self.unreported
            .entry(owner)
            .or_default()
            .push(ref_path.clone());
        self.refused.insert(ref_path, why);
    }

    /// Reports the step's refusals: each in full up to
    /// [`REPORTED_REFUSALS`] per owner, the rest of an owner's in one line,
    /// so a flood of bad refs is a few lines, not one per ref.
    fn report_refusals(&mut self) {
        for (owner, refs) in std::mem::take(&mut self.unreported) {
            for r in refs.iter().take(REPORTED_REFUSALS) {
                let why = self.refused.get(r).map_or("", String::as_str);
                tracing::warn!(dir = %owner.display(), "refusing the hand-off of {}: {why}; not shipped, left with its owner (adopted, and set aside, once the owner is gone)", r.display());
            }
            if refs.len() > REPORTED_REFUSALS {
                tracing::warn!(dir = %owner.display(), "refusing the hand-off of {} more ref(s) of {} (not shipped, left with its owner); the first ones above say why", refs.len() - REPORTED_REFUSALS, owner.display());
            }
        }
    }

    fn queue(&mut self, indexed: Vec<Job>) {
        for job in indexed {
            self.counts.shipped += 1;
            self.to_confirm
                .entry(job.dir().to_path_buf())
                .or_default()
                .push((job.pack().ordinal, job.pack().id));
        }
    }

    /// Writes the confirmations owed to owners; what cannot be written is
    /// kept for the next step (reported once per owner).
    async fn tell_owners(&mut self, drain: &mut Drain) {
        if self.to_confirm.is_empty() {
            return;
        }
        let todo: Vec<(PathBuf, Vec<Confirmable>)> = self.to_confirm.drain().collect();
        let access = self.access;
        let results = per_owner(todo, move |dir, packs| {
            handoff::confirm(dir, packs, &access).map(|()| lags(dir, packs))
        })
        .await;
        for (dir, packs, r) in results {
            match r {
                Ok(lags) => {
                    self.counts.confirmed += packs.len() as u64;
                    self.confirm_failing.remove(&dir);
                    for lag in lags {
                        self.counts.last_lag_ms = lag;
                        self.counts.max_lag_ms = self.counts.max_lag_ms.max(lag);
                    }
                }
                Err(e) => {
                    if self
                        .confirm_failing
                        .insert(dir.clone(), e.to_string())
                        .is_none()
                    {
                        drain.note_error(format!(
                            "cannot confirm {} shipped pack(s) to the owner of {}: {e}; they stay \
                             with their owner, not shipped again, and are confirmed once it can be \
                             written",
                            packs.len(),
                            dir.display()
                        ));
                    }
                    self.to_confirm.entry(dir).or_default().extend(packs);
                }
            }
        }
    }
}

impl Drop for Shipper {
    fn drop(&mut self) {
        self.stand_down();
    }
}

/// Runs `f` for each owner's directory and its item, the owners at once on
/// the blocking pool (each confirmation or collection ends in an fsync of
/// its own directory: done one owner after the other they would add up).
async fn per_owner<I, T, F>(
    items: impl IntoIterator<Item = (PathBuf, I)>,
    f: F,
) -> Vec<(PathBuf, I, T)>
where
    I: Send + 'static,
    T: Send + 'static,
    F: Fn(&Path, &I) -> T + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let mut set = tokio::task::JoinSet::new();
    for (dir, item) in items {
        let f = f.clone();
        set.spawn_blocking(move || {
            let out = f(&dir, &item);
            (dir, item, out)
        });
    }
    let mut done = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(v) => done.push(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {} // the runtime is shutting down
        }
    }
    done
}

/// How long ago (ms) the owner of `dir` consented to each of `packs`: its
/// ref's age (a ref the owner already removed counts nothing).
fn lags(dir: &Path, packs: &[Confirmable]) -> Vec<u64> {
    packs
        .iter()
        .filter_map(|(ordinal, id)| handoff::consent_age(dir, *ordinal, *id))
        .map(|age| age.as_millis() as u64)
        .collect()
}

/// The ref consenting to `pack` of `dir`.
fn ref_path(dir: &Path, pack: &spool_core::ReadyPack) -> PathBuf {
    dir.join(spool_core::spool::REFS_DIR)
        .join(handoff::ref_name(pack.ordinal, pack.id))
}

/// The live owners under `key` (all but `own`; only those in `only` when
/// given) and what each consented to.
fn look(key: &Path, own: &Path, only: Option<&HashSet<PathBuf>>) -> Vec<Looked> {
    let dirs = match siblings::rank_dirs(key) {
        Ok(d) => d,
        Err(e) => {
            spool_core::warn_throttled!(format!("list owners of {}", key.display()), dir = %key.display(), "listing owners to ship for: {e}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for dir in dirs {
        if dir == own || only.is_some_and(|o| !o.contains(&dir)) {
            continue;
        }
        let Ok(probe) = siblings::probe(&dir) else {
            continue;
        };
        if !matches!(
            probe.owner(),
            Owner::Live | Owner::HeldHere { adopting: false }
        ) {
            continue; // dead, or being adopted: adoption's
        }
        let producer = probe.status.record.as_ref().and_then(|r| r.producer());
        match handoff::list_consented(&dir) {
            Ok(consents) => out.push(Looked {
                source: Origin::of_producer(producer.as_ref()),
                dir,
                consents,
            }),
            Err(e) => {
                spool_core::warn_throttled!(format!("read consents of {}", dir.display()), dir = %dir.display(), "reading what {} consented to: {e}", dir.display())
            }
        }
    }
    out
}
