//! The drain: the one path by which a pack leaves a spool directory —
//! validated, uploaded, indexed, then removed — for the service's own
//! directory and for adopted ones alike.
//!
//! A [`Drain`] owns everything that path needs and nothing else: the
//! uploader, the catalog and the fence (the lease that gates every index
//! call in catalog scope), the backlog of packs uploaded and owed to the
//! catalog, the summaries of packs already validated, and the counters the
//! snapshot reads. The service hands it [`Job`]s and reads one
//! [`PackOutcome`] per job back from [`Drain::run`]; the stages themselves
//! (how validation, uploads, index calls and removals overlap) are in
//! `pipeline`, their rules in its module doc.
//!
//! # The backlog
//!
//! A pack whose upload landed and whose index call failed, was cut or
//! could not be fenced is **owed**: its [`Job`] keeps its row and goes into
//! the backlog. Owed jobs go back into the next run marked uploaded, so
//! they reach the catalog through the same index stage (and the same
//! removal after the catalog's `Ok`) as every other pack: there is one
//! index-and-remove path. The service's own work puts the backlog in front
//! of its listing each cycle ([`Drain::own_jobs`]); adoption waits while
//! anything is owed.
//!
//! Every job carries the spool that holds its file, so removal and
//! quarantine never look a directory up. An adopted directory let go of
//! with jobs still owed has them [`forget`](Drain::forget)ed: its files
//! stay for its successor, which uploads them again (the store finds each
//! already there) and indexes them; the drain never removes a file in a
//! directory it no longer holds.
//!
//! # Failures that are not retried
//!
//! A non-retryable upload failure is about the pack (a different object at
//! its key, a pack over the in-flight bound): an own pack is renamed
//! `.rejected`, an adopted one dooms its sibling (blocked once the rest is
//! drained). Or it is about the whole destination (401, 403, a missing
//! bucket, the catalog's credentials: spool-upload's
//! `UploadFailure::destination_wide`): every pack stays ready, the loop
//! only backs off, and the snapshot's `destination_refused` says why until
//! a call lands again.

mod counters;
mod job;
mod linger;
mod pipeline;
mod riders;
mod stage_times;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use spool_catalog::{Catalog, LeaseGuard, LeaseState, PackRow};
use spool_core::pack::now_ms;
use spool_core::{PackId, PackSummary, ReadyPack, Spool};
use spool_upload::{UploadResult, Uploader};
use tokio::sync::watch;

use crate::bound::{human, Bound, Cut, InFlight};
use crate::cause::Cause;
use crate::prefix_record::{self, CatalogIdentity, PrefixRecord};

pub(crate) use counters::{Counters, Progress};
pub use job::PackOutcome;
pub(crate) use job::{Home, Job, Origin};
pub(crate) use linger::Linger;
pub use linger::OpenBundle;
pub(crate) use riders::{Carried, Stream};
pub use stage_times::StageTimes;

/// The longest the index linger grows to while the catalog pushes back.
pub(crate) const MAX_PACE: Duration = Duration::from_secs(5);

/// An index call that took longer than this was slowed by the catalog
/// (ClickHouse delays an insert into a partition with too many active
/// parts by up to a second): the pace grows as on a failure.
pub(crate) const SLOW_INDEX: Duration = Duration::from_millis(500);

/// How a [`Drain`] is put together (see `StorageService::start`).
pub(crate) struct DrainParts {
    /// The uploader (its store and limits).
    pub(crate) uploader: Uploader,
    /// The catalog rows go to.
    pub(crate) catalog: Arc<dyn Catalog>,
    /// The store's id, written into every row.
    pub(crate) store_id: String,
    /// This host's name (the source of the own directory's packs).
    pub(crate) host: String,
    /// At most this many rows per index call.
    pub(crate) index_batch: usize,
    /// At most this many packs of one run out of their spool and not yet in
    /// the catalog.
    pub(crate) pipeline_depth: usize,
    /// How long an index batch waits for more uploads to land, and the
    /// least spacing of two index calls that are not full batches.
    pub(crate) index_linger: Duration,
    /// Catalog scope: every index call is fenced by the lease, and nothing
    /// moves without it.
    pub(crate) fenced: bool,
    /// The lease keeper's state, when there is one.
    pub(crate) lease: Option<watch::Receiver<LeaseState>>,
    /// The service's own directory.
    pub(crate) own: Arc<Spool>,
    /// Shared with the snapshot, which reads it live.
    pub(crate) progress: Arc<Progress>,
    /// The slot saying what the service waits on now.
    pub(crate) inflight: InFlight,
    /// This destination's catalog as the store prefix's record must name
    /// it (`prefix_record.rs`).
    pub(crate) identity: CatalogIdentity,
}

/// The drain (see the module doc).
pub(crate) struct Drain {
    uploader: Uploader,
    catalog: Arc<dyn Catalog>,
    store_id: String,
    host: String,
    index_batch: usize,
    pipeline_depth: usize,
    index_linger: Duration,
    fenced: bool,
    lease: Option<watch::Receiver<LeaseState>>,
    own: Arc<Spool>,
    /// Jobs uploaded and owed to the catalog.
    backlog: Vec<Job>,
    /// Packs validated and not yet indexed, by id.
    summaries: HashMap<PackId, PackSummary>,
    /// Handed-off packs indexed whose owners are not yet told.
    confirmable: Vec<Job>,
    /// Runs a linger holds back, riding along this cycle's other runs.
    riders: riders::Riders,
    /// When the last index call started (across runs): the next one that
    /// is not a full batch waits until `pace` after it.
    last_index: Option<std::time::Instant>,
    /// The linger in force: `index_linger`, doubled (up to [`MAX_PACE`])
    /// each time the catalog pushes back, halved back toward it on each
    /// quick answer (see `drain/pipeline.rs`).
    pace: Duration,
    counters: Counters,
    inflight: InFlight,
    identity: CatalogIdentity,
    /// The store prefix's record, once read (or written) and found to name
    /// this catalog: nothing is uploaded before. Its grace is the
    /// destination's (the staleness of owed rows naming bundles).
    record: Option<PrefixRecord>,
}

impl Drain {
    /// A drain with an empty backlog.
    pub(crate) fn new(p: DrainParts) -> Drain {
        Drain {
            uploader: p.uploader,
            catalog: p.catalog,
            store_id: p.store_id,
            host: p.host,
            index_batch: p.index_batch,
            pipeline_depth: p.pipeline_depth,
            index_linger: p.index_linger,
            fenced: p.fenced,
            lease: p.lease,
            own: p.own,
            backlog: Vec::new(),
            summaries: HashMap::new(),
            confirmable: Vec::new(),
            riders: riders::Riders::default(),
            last_index: None,
            pace: p.index_linger,
            counters: Counters::new(p.progress),
            inflight: p.inflight,
            identity: p.identity,
            record: None,
        }
    }

    /// The destination's orphan grace: the prefix record's once read, else
    /// the configured one (nothing was uploaded yet then).
    pub(crate) fn orphan_grace(&self) -> Duration {
        self.record.as_ref().map_or(
            self.uploader.config().orphan_grace,
            PrefixRecord::orphan_grace,
        )
    }

    /// Reads (or writes) the store prefix's record before the first upload
    /// and refuses one naming another catalog. `Err(Some(cause))`: nothing
    /// may go up (reported as a refusal of the destination, the loop backs
    /// off); `Err(None)`: cut by the deadline or a cancel.
    async fn settle_prefix(&mut self, bound: &Bound) -> Result<(), Option<Cause>> {
        if self.record.is_some() {
            return Ok(());
        }
        let store = self.uploader.store().clone();
        let settled = bound
            .run(prefix_record::settle(
                &store,
                &self.identity,
                &self.store_id,
                self.uploader.config().orphan_grace,
                self.catalog.request_timeout(),
            ))
            .await;
        match settled {
            Ok(Ok(record)) => {
                if record.orphan_grace() != self.uploader.config().orphan_grace {
                    tracing::info!(store = %store.description(),
                        "the destination's orphan grace is {:?} (its prefix record's; upload.orphan_grace {:?} is not used)",
                        record.orphan_grace(), self.uploader.config().orphan_grace);
                }
                self.record = Some(record);
                Ok(())
            }
            Ok(Err(e)) if prefix_record::retryable(&e) => {
                self.counters.count_upload_failure();
                self.note_error(e.to_string());
                Err(Some(Cause::new(e)))
            }
            Ok(Err(e)) => {
                let msg = format!(
                    "store {} refuses this destination ({e}); uploads to it stop and back off, \
                     every pack stays ready and goes up on its own once the cause is fixed",
                    store.description()
                );
                if self.counters.store_refuses(msg.clone()) {
                    tracing::error!(dir = %self.own.dir().display(), "{msg}");
                }
                Err(Some(Cause::new(e)))
            }
            Err(_) => Err(None),
        }
    }

    /// The index linger in force (the snapshot's `index_pace`): the
    /// configured one, or longer while the catalog pushes back.
    pub(crate) fn pace(&self) -> Duration {
        self.pace
    }

    /// The own directory's spool.
    pub(crate) fn own(&self) -> &Arc<Spool> {
        &self.own
    }

    /// The lease keeper's state now, when there is a lease keeper.
    pub(crate) fn lease_state(&self) -> Option<LeaseState> {
        self.lease.as_ref().map(|rx| rx.borrow().clone())
    }

    /// A receiver of the lease keeper's state, when there is one.
    pub(crate) fn lease_receiver(&self) -> Option<watch::Receiver<LeaseState>> {
        self.lease.clone()
    }

    /// The guard to fence with, when fenced: `Err` when the lease is not held.
    fn fence(&self) -> Result<Option<LeaseGuard>, String> {
        if !self.fenced {
            return Ok(None);
        }
        match self.lease_state() {
            Some(s) if s.held() && !s.latched => Ok(s.guard),
            _ => Err("the catalog-scope lease is not held: nothing is indexed without it".into()),
        }
    }

    /// Whether own work may run (catalog scope needs the lease).
    pub(crate) fn may_work(&self) -> bool {
        self.fence().is_ok()
    }

    /// One listing of the own directory took `took` (the snapshot's
    /// stage times).
    pub(crate) fn count_listing(&mut self, took: Duration) {
        self.counters.count_listing(took);
    }

    /// What the snapshot reports.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// How many packs are owed to the catalog.
    pub(crate) fn owed(&self) -> usize {
        self.backlog.len()
    }

    /// Logs `e` and keeps it as the last error.
    pub(crate) fn note_error(&mut self, e: impl Into<String>) {
        let e = e.into();
        tracing::warn!(dir = %self.own.dir().display(), "{e}");
        self.counters.note_error(e);
    }

    /// The object keys the owed rows name.
    #[cfg(test)]
    pub(crate) fn backlog_keys(&self) -> Vec<String> {
        self.backlog
            .iter()
            .filter_map(|j| j.row().map(|r| r.object_key.clone()))
            .collect()
    }

    /// The ids of the packs owed to the catalog.
    pub(crate) fn owed_ids(&self) -> HashSet<PackId> {
        self.backlog.iter().map(|j| j.pack().id).collect()
    }

    /// This cycle's own work: the backlog (owed, marked uploaded) first,
    /// then every listed pack of the own directory not already owed.
    pub(crate) fn own_jobs(&mut self, listed: Vec<ReadyPack>) -> Vec<Job> {
        let owed = self.owed_ids();
        let mut jobs = std::mem::take(&mut self.backlog);
        let source = Origin::this_process(&self.host);
        jobs.extend(
            listed
                .into_iter()
                .filter(|p| !owed.contains(&p.id))
                .map(|p| Job::new(p, self.own.clone(), source.clone())),
        );
        jobs
    }

    /// Whether the run of `jobs` should wait for more small packs to share
    /// its bundle (see [`Linger::hold`]), by `linger`'s clock.
    pub(crate) fn hold_for_bundle(&self, linger: &mut Linger, jobs: &[Job]) -> bool {
        linger.hold(jobs, &self.uploader, std::time::Instant::now())
    }

    /// Parks `jobs`, a run of `stream` its linger holds back, to ride in
    /// front of the next run of this cycle (see `drain/riders.rs`).
    pub(crate) fn park(&mut self, stream: Stream, jobs: Vec<Job>) {
        self.riders.park(stream, jobs);
    }

    /// Runs `jobs` through the pipeline (`drain/pipeline.rs`), with the
    /// riders parked this cycle in front of them. Returns one outcome per
    /// job of `jobs`; the riders' wait for [`Drain::end_cycle`].
    pub(crate) async fn run(
        &mut self,
        jobs: Vec<Job>,
        bound: &Bound,
        flag: &Arc<AtomicBool>,
    ) -> Vec<(Job, PackOutcome)> {
        if jobs.is_empty() {
            return Vec::new();
        }
        if let Err(cause) = self.settle_prefix(bound).await {
            // nothing went up in this drain yet: nothing is owed either
            return jobs
                .into_iter()
                .map(|j| {
                    let outcome = match &cause {
                        Some(reason) => PackOutcome::Failed {
                            retryable: true,
                            reason: reason.clone(),
                        },
                        None => PackOutcome::Cancelled,
                    };
                    (j, outcome)
                })
                .collect();
        }
        let all = self.riders.board(jobs);
        let done = self.run_pipeline(all, bound, flag).await;
        self.riders.alight(done)
    }

    /// Ends a cycle: drops the riders no run took (their streams list them
    /// again) and returns what became of those a run carried.
    pub(crate) fn end_cycle(&mut self) -> Vec<Carried> {
        self.riders.end_cycle()
    }

    /// The own directory's spool, the drain done with (stop releases its
    /// claim from the last reference).
    pub(crate) fn into_own(self) -> Arc<Spool> {
        self.own
    }

    /// The handed-off packs indexed since the last call: their owners are
    /// to be told (`crate::handoff`).
    pub(crate) fn take_confirmable(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.confirmable)
    }

    /// Drops the owed jobs of `dir`, a directory let go of: its files stay
    /// for whoever takes it next (see the module doc).
    pub(crate) fn forget(&mut self, dir: &Path) {
        let (gone, kept) = std::mem::take(&mut self.backlog)
            .into_iter()
            .partition(|j| j.dir() == dir);
        self.backlog = kept;
        for job in gone {
            self.summaries.remove(&job.pack().id);
        }
    }

    /// Renames an own pack that failed for good to `<id>.rejected` (a
    /// person decides) and counts it; false when the rename failed.
    pub(crate) async fn reject(&mut self, job: &Job, why: String) -> bool {
        let Home::Spool(spool) = job.home() else {
            return false; // never touched in a live owner's directory
        };
        let (spool, pack) = (spool.clone(), job.pack().clone());
        match tokio::task::spawn_blocking(move || spool.reject(&pack, &why)).await {
            Ok(Ok(aside)) => {
                tracing::error!(dir = %job.dir().display(), pack = %aside.path.display(),
                    "pack failed non-retryably; renamed .rejected (a person decides): {}", aside.reason);
                self.counters.count_rejected();
                true
            }
            _ => false,
        }
    }

    /// Renames a corrupt pack of `spool` to `<id>.quarantined` (kept,
    /// counted, reported by `spool verify`). The reason is the corruption
    /// found (by validation, or by the upload's hash).
    async fn quarantine(&mut self, job: &Job, why: String) {
        self.summaries.remove(&job.pack().id);
        let Home::Spool(spool) = job.home() else {
            // a live owner's file is never renamed: its owner keeps it
            // (adoption quarantines it once the owner is gone)
            self.note_error(format!(
                "consented pack {} is not a valid pack ({why}): not shipped, left with its owner",
                job.pack().path.display()
            ));
            return;
        };
        let (spool, p) = (spool.clone(), job.pack().clone());
        match tokio::task::spawn_blocking(move || spool.quarantine(&p, &why)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.note_error(format!(
                "quarantining corrupt pack {}: {e}",
                job.pack().path.display()
            )),
            Err(_) => self.note_error(format!(
                "quarantining corrupt pack {}: the task failed",
                job.pack().path.display()
            )),
        }
        self.counters.count_quarantined();
    }

    /// The catalog row of `job`, uploaded as `result`.
    fn row(&self, result: &UploadResult, summary: &PackSummary, job: &Job) -> PackRow {
        PackRow {
            object_offset: result.offset,
            pack_id: summary.id.to_hex(),
            object_key: result.key.to_string(),
            store_id: self.store_id.clone(),
            sha256: hex::encode(summary.sha256),
            bytes: summary.bytes,
            records: summary.records,
            source_host: job.source().host().to_string(),
            source_pid: job.source().pid(),
            rank_dir: job
                .dir()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ordinal: job.pack().ordinal,
            created_at_ms: summary.created_ms,
            indexed_at_ms: now_ms(),
            trailer_sha256: hex::encode(summary.trailer_sha256),
        }
    }

    /// Counts one upload's answer and says what a failure means: a refusal
    /// of the whole destination is reported once (and shown in the
    /// snapshot) until an upload lands again.
    fn count_upload(&mut self, r: &UploadResult, store: &str) {
        match r.outcome.failure() {
            None => self.counters.count_uploaded(),
            Some(f) if f.cancelled => self.counters.count_cancelled_upload(),
            Some(f) if f.destination_wide() => {
                self.counters.count_upload_failure();
                let msg = format!(
                    "store {store} refuses this destination ({}); uploads to it stop and back \
                     off, every pack stays ready and goes up on its own once the cause is fixed",
                    f.error
                );
                if self.counters.store_refuses(msg.clone()) {
                    tracing::error!(dir = %self.own.dir().display(), "{msg}");
                }
            }
            Some(f) => {
                self.counters.count_upload_failure();
                let msg = format!("upload of {} failed: {}", r.item.path.display(), f.error);
                self.note_error(msg);
            }
        }
    }

    /// Says why an index call (`what`, to `server`) left its packs owed:
    /// the catalog's error (`Err`; a refusal of the destination is kept
    /// for the snapshot) or the cut (`Ok`; a stop's cut says nothing).
    fn note_index_failure(
        &mut self,
        server: &str,
        what: &str,
        why: Result<Cut, spool_catalog::Error>,
    ) {
        match why {
            Err(e) => {
                if catalog_refuses(&e) {
                    self.counters
                        .catalog_refuses(format!("catalog {server} refuses this destination: {e}"));
                }
                self.note_error(format!(
                    "{what} into {server} failed (owed, indexed again next cycle): {e}"
                ));
            }
            Ok(Cut::Deadline(waited)) => self.note_error(format!(
                "catalog {server} did not answer within {} while {what} (the deadline of this \
                 flush or cycle): owed, indexed again next cycle",
                human(waited)
            )),
            Ok(Cut::Cancelled) => {}
        }
    }
}

/// A catalog failure that refuses the whole destination (credentials,
/// permission, schema, an unknown setting), not one batch: a retryable
/// failure or a fence is not one.
fn catalog_refuses(e: &spool_catalog::Error) -> bool {
    !e.is_retryable()
        && !matches!(
            e,
            spool_catalog::Error::Fenced { .. } | spool_catalog::Error::InvalidRow { .. }
        )
}
