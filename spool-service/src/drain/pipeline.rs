//! The upload pipeline: validation, upload, index and
//! removal overlap instead of running in rounds.
//!
//! ```text
//!  jobs ─▶ validate ─▶ validated ─▶ upload workers ─▶ uploaded ─▶ index call ─▶ remove
//!          (blocking   (at most      (≤ max_workers,   (a batch    (one in       (blocking
//!           pool, one   small_pack_   small packs ≤     closes at   flight,       pool, after
//!           task)       workers       small_pack_       index_batch fenced where  the catalog
//!                                     workers; ≤ max_   or linger)  lease-gated)  answered Ok)
//!                                     in_flight_bytes)
//! ```
//!
//! [`Drain::run`] runs a list of [`Job`]s through these stages in
//! one select loop: each stage is refilled the moment a slot frees, so the
//! store never idles while a pack is hashed or a batch is indexed, and no
//! pack waits for the slowest of a round. The service's own packs (one
//! pipeline per cycle, over everything listed) and adoption's (one per
//! adoption step, over up to `pipeline_depth` packs of one sibling) go
//! through this same code.
//!
//! The rules it keeps:
//! - **Validated before uploaded.** A pack is uploaded only once it is
//!   validated, own and adopted packs alike: a pack that goes up in one
//!   PUT ([`spool_upload::Uploader::validates_whole`]) is validated by the
//!   uploader from the very bytes it holds for the PUT, before it sends
//!   them (one read and one hash of the file, not two); any other is
//!   validated by this pipeline a few packs ahead of its upload. A corrupt
//!   one is quarantined and never uploaded. A pack whose bytes changed
//!   after validation is caught by the upload's hash and quarantined too.
//! - **Removed only after its row is confirmed.** A file is removed only
//!   after the catalog answered `Ok` to the statement carrying its row.
//! - **At most `pipeline_depth` packs, and twice `max_in_flight_bytes`,
//!   out of the spool and not in the catalog.** No upload starts while
//!   `pipeline_depth` packs of this run (4096 by default: a few bundles of
//!   small packs) are uploading, uploaded or being indexed, nor while it
//!   would take their bytes past twice `max_in_flight_bytes` (512 MiB;
//!   one pack always may go), nor once one is owed (a pack becomes owed
//!   only when uploads have halted). That is what a crash can cost a
//!   successor: it uploads those packs again (a pack alone: the store's
//!   conditional create finds it already there, one request and a ranged
//!   read of its trailer; bundled packs: in a fresh bundle, one request
//!   per bundle) and indexes them.
//! - **Concurrency fits the pack size**: packs of at most 16 MiB
//!   ([`SMALL_PACK_BYTES`]) are latency-bound (a transfer is mostly round
//!   trips, and one connection seldom fills the store's side), so up to
//!   `small_pack_workers` (16) of them are in flight, their bytes within
//!   `max_in_flight_bytes`; larger ones `max_workers` (4), each multipart one with
//!   `part_concurrency` parts in flight.
//! - **Memory is bounded by `max_in_flight_bytes`**: the packs in upload at
//!   once sum to at most that (one pack larger than it is refused by the
//!   uploader at once, reading nothing).
//! - **A cancel cuts every stage** (stop, a flush cutting the loop, the
//!   cycle's deadline): validation sees the cancel flag, every upload and its
//!   retries see the token, the index call runs under the [`Bound`]; nothing
//!   new starts. Packs uploaded and not indexed join the backlog (owed,
//!   indexed first next cycle); the rest stay ready.
//! - **Trouble halts, it does not spin.** A retryable upload failure or a
//!   refusal of the destination stops new uploads (the store is in
//!   trouble: the loop backs off); a failed, refused or cut index call
//!   stops the pipeline (the rest of what was uploaded is owed).
//!
//! # Bundles
//!
//! Packs the uploader bundles (smaller than `upload.bundle_bytes`, not to
//! `file://`: spool-upload's crate docs, "Bundles") go up many to one
//! object. The stage sits between validation and upload: validated packs
//! queue until a bundle's worth is there (validation of bundled packs is
//! the upload's own, from the bytes it sends, so they pass straight
//! through), and a bundle closes, in list order, when the next pack would
//! take it past `bundle_bytes` or goes alone, when it holds as many packs
//! as the depth leaves room for, or when no more packs can come in this
//! run. A bundle of one pack goes up as that pack alone, at its own key.
//! Up to `small_pack_workers` bundles are in flight, within
//! `max_in_flight_bytes`. Then each pack is a job as any other: its row
//! names the bundle and its offset, it joins the index batches, its file
//! is removed after its row's `Ok`.
//!
//! - **`pipeline_depth` counts packs, bundled or not**: a bundle holds at
//!   most what the depth leaves room for, so a crash still costs a
//!   successor at most `pipeline_depth` packs uploaded again (in one
//!   bundle, one request, instead of one each).
//! - **The linger** (`upload.bundle_linger`, 1 s): a run's packs are fixed
//!   when it starts, so a trickle is made to wait before the run, not in
//!   it. The service's own packs and the hand-off's (every live owner's
//!   together) each wait while all of them are small packs not yet
//!   uploaded, under `bundle_bytes` together, and the oldest was first
//!   seen less than the linger ago; the loop wakes when it ends
//!   (`drain/linger.rs`). While handed-off packs wait, each hand-off
//!   step lists every live owner, not only those that changed: the
//!   waiting packs of a quiet owner stay in the run and keep their age,
//!   whatever another owner's trickle does. A flush, a stop's last flush
//!   and a run until drained (`spool run --once`) never wait; adoption
//!   steps never wait (a backlog fills its bundles). The snapshot's
//!   `open_bundle` shows what waits. The linger is the latency a bundle
//!   adds to a pack of a trickle, and what it saves: a node sealing 4
//!   packs/s puts one object a second instead of four.
//! - **One stream per node.** Packs a linger holds back ride in front of
//!   the cycle's next run, whoever's it is (`drain/riders.rs`): the own
//!   packs waiting go with the hand-off's run, and both with an adoption
//!   step's, so the node's daemon puts every live owner's packs and an
//!   adopted sibling's in the same bundles, and a sibling's last partial
//!   bundle fills with them. Siblings are still taken one at a time (the
//!   adopter holds at most one), so two dead siblings' tails go in two
//!   bundles: at most one object more per dead sibling, once.
//! - **An owed row naming a bundle is indexed only within half of the
//!   destination's grace after the bundle's PUT returned** (the store
//!   prefix's record's grace, `prefix_record.rs`; measured on this
//!   process's monotonic clock). An older one (a catalog down that long)
//!   is not indexed: its pack goes up again in a fresh bundle. The sweep
//!   (`spool sweep`) reads a bundle only once it is the grace old by the
//!   store's clock, so no index call naming it can still be in flight
//!   then (the sweep module docs give the whole argument).
//!
//! # The index linger
//!
//! This is the one statement of the rule (`service.index_linger`); the
//! other docs point here. A batch of uploaded packs goes to the catalog
//! at once when it is full (`index_batch` rows) or the pipeline is at its
//! depth; else at once when no upload is in flight (nothing more is
//! coming soon), or one linger after its oldest pack landed. And a run of
//! own or handed-off packs (a trickle, not an adoption step's piece of a
//! backlog) never sends a batch that is not full sooner than one linger
//! after the last index call: a steady trickle makes at most one insert
//! per linger (the shipper serving many owners included) without capping
//! a backlog's throughput.
//!
//! The linger in force (the snapshot's `index_pace`) is `index_linger`,
//! doubled up to [`MAX_PACE`] (5 s) each time the catalog pushes back (a
//! failed call, or one slower than [`SLOW_INDEX`]), halved back toward
//! `index_linger` on each quick answer.
//!
//! `index_linger` defaults to 50 ms
//! ([`ServiceConfig::index_linger`](crate::ServiceConfig::index_linger)), and
//! to 0 when the configuration names a local catalog (`sqlite://`,
//! `memory://`) and no source sets the key (`config/resolve.rs`): the
//! linger and the spacing spare a shared server (ClickHouse) many small
//! inserts, while a local commit costs about as much alone as batched, and
//! one commit in flight already lets the next batch form.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_catalog::{LeaseGuard, PackRow};
use spool_core::{PackId, PackSummary, ReadyPack, Spool};
use spool_upload::{UploadItem, UploadResult, SMALL_PACK_BYTES};
use tokio::task::JoinSet;

use super::stage_times::{Busy, StageClock};
use super::{Drain, Home, Job, PackOutcome, MAX_PACE, SLOW_INDEX};
use crate::bound::{human, Bound, Cut};
use crate::cause::Cause;

/// At most this many bytes of small packs are validated by one blocking
/// task (one task per pack would cost more than hashing a small pack).
const VALIDATION_CHUNK_BYTES: u64 = 8 << 20;

/// How many of the jobs at the front of the input (each `(bytes, validated
/// elsewhere)`, in order) the next validation task takes: at most `room`,
/// none validated elsewhere, and at most [`VALIDATION_CHUNK_BYTES`] in all
/// (the bound included), except that the first job goes alone whatever its
/// size.
fn chunk_len(front: impl IntoIterator<Item = (u64, bool)>, room: usize) -> usize {
    let mut n = 0;
    let mut bytes = 0u64;
    for (size, elsewhere) in front {
        if n == room || elsewhere || (n > 0 && bytes + size > VALIDATION_CHUNK_BYTES) {
            break;
        }
        bytes += size;
        n += 1;
    }
    n
}

/// The most bytes of packs of one run out of their spool and not yet in
/// the catalog: twice `max_in_flight_bytes` (512 MiB by default), as
/// adoption bounds a step's bytes. `pipeline_depth` bounds the packs; this
/// keeps a large depth (made for small packs, which go up in bundles)
/// from letting thousands of large packs out at once, which a crash would
/// make a successor upload again.
fn unindexed_bound(max_in_flight: u64) -> u64 {
    max_in_flight.saturating_mul(2)
}

/// The answer of one index call, with the batch it carried.
type Indexed = (Vec<Job>, Result<Result<(), spool_catalog::Error>, Cut>);

/// The stages' state during one [`Drain::run`] run.
struct Stages {
    input: VecDeque<Job>,
    validating: JoinSet<Vec<(Job, Result<PackSummary, spool_core::Error>)>>,
    /// Jobs being validated now.
    validating_jobs: usize,
    validated: VecDeque<Job>,
    /// The bytes of the packs in `validated`.
    validated_bytes: u64,
    /// Each task uploads one pack, or one bundle of them.
    uploads: JoinSet<Vec<(Job, UploadResult)>>,
    /// Packs in the uploads in flight.
    uploading_packs: usize,
    /// When each upload in flight started.
    upload_started: HashMap<PackId, Instant>,
    upload_bytes: u64,
    uploaded: Vec<Job>,
    /// When the oldest pack of `uploaded` arrived (the linger counts from it).
    uploaded_since: Option<Instant>,
    indexing: JoinSet<Indexed>,
    /// Packs in the index call in flight, and when it started.
    indexing_packs: usize,
    /// Their bytes.
    indexing_bytes: u64,
    indexing_since: Option<Instant>,
    removals: JoinSet<Vec<(PathBuf, spool_core::Error)>>,
    /// No new upload starts (store trouble, a cancel, a failed index).
    uploads_halted: bool,
    /// No new index call starts (a failed index, a cancel).
    index_halted: bool,
    /// Uploads a cancel cut.
    cut_uploads: usize,
    done: Vec<(Job, PackOutcome)>,
}

impl Stages {
    /// Packs out of the spool (uploading or uploaded) and not yet indexed.
    /// Owed packs need no count: a pack is owed only after a failed or cut
    /// index call, a fence that cannot be had or a cancel, and each of those
    /// halts new uploads for the rest of the run.
    fn unindexed(&self) -> usize {
        self.uploading_packs + self.uploaded.len() + self.indexing_packs
    }

    /// The bytes of the packs counted by [`Stages::unindexed`].
    fn unindexed_bytes(&self) -> u64 {
        let uploaded: u64 = self.uploaded.iter().map(|j| j.pack().bytes).sum();
        self.upload_bytes + uploaded + self.indexing_bytes
    }

    /// Whether `size` more bytes may leave the spool: within
    /// [`unindexed_bound`] of `max_in_flight` (any one pack when none is
    /// out, so a pack over it is not stuck).
    fn bytes_allow(&self, size: u64, max_in_flight: u64) -> bool {
        let out = self.unindexed_bytes();
        out == 0 || out + size <= unindexed_bound(max_in_flight)
    }

    fn push_validated(&mut self, job: Job) {
        self.validated_bytes += job.pack().bytes;
        self.validated.push_back(job);
    }

    fn pop_validated(&mut self) -> Option<Job> {
        let job = self.validated.pop_front()?;
        self.validated_bytes -= job.pack().bytes;
        Some(job)
    }

    /// Whether more packs may yet join `validated` in this run.
    fn more_coming(&self) -> bool {
        !self.input.is_empty() || self.validating_jobs > 0
    }

    /// Counts `job` as uploading from now; its upload item.
    fn start_upload(&mut self, job: &Job) -> UploadItem {
        let size = job.pack().bytes;
        self.upload_bytes += size;
        self.uploading_packs += 1;
        self.upload_started.insert(job.pack().id, Instant::now());
        UploadItem {
            path: job.pack().path.clone(),
            pack_id: job.pack().id,
            size,
        }
    }

    fn idle(&self) -> bool {
        self.validating.is_empty() && self.uploads.is_empty() && self.indexing.is_empty()
    }

    /// Which stages have an operation in flight (for the stage clock).
    fn busy(&self) -> Busy {
        Busy {
            validate: !self.validating.is_empty(),
            upload: !self.uploads.is_empty(),
            index: !self.indexing.is_empty(),
            remove: !self.removals.is_empty(),
        }
    }
}

impl Drain {
    /// Runs `jobs` through validation, upload, index and removal, all
    /// overlapping (see the module doc), under `bound` (its cancel cuts
    /// every stage; `flag` is the same cancel for validation). Returns one
    /// outcome per job.
    pub(super) async fn run_pipeline(
        &mut self,
        jobs: Vec<Job>,
        bound: &Bound,
        flag: &Arc<AtomicBool>,
    ) -> Vec<(Job, PackOutcome)> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let cfg = self.uploader.config().clone();
        let workers = cfg.max_workers.max(1);
        let small_workers = cfg.small_pack_workers.max(workers);
        let depth = self.pipeline_depth.max(1);
        let batch_max = self.index_batch.max(1);
        // An adoption step is a piece of a backlog: its batches go as they
        // close. Own packs and hand-offs come as a trickle: paced.
        let paced = !jobs
            .iter()
            .any(|j| matches!(j.home(), Home::Spool(s) if !Arc::ptr_eq(s, &self.own)));
        let store = self.uploader.store().description().to_string();
        let server = self.catalog.server();
        let started = Instant::now();
        // owed jobs go straight to the index stage, but for a bundle
        // near its sweep's grace ("Bundles"): its packs go up again
        let jobs = jobs
            .into_iter()
            .map(|j| self.unless_stale(j))
            .collect::<Vec<_>>();
        let (owed, fresh): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.row().is_some());
        let mut clock = StageClock::start();
        let mut st = Stages {
            input: fresh.into(),
            validating: JoinSet::new(),
            validating_jobs: 0,
            validated: VecDeque::new(),
            validated_bytes: 0,
            uploads: JoinSet::new(),
            uploading_packs: 0,
            upload_started: HashMap::new(),
            upload_bytes: 0,
            uploaded_since: (!owed.is_empty()).then(Instant::now),
            uploaded: owed,
            indexing: JoinSet::new(),
            indexing_packs: 0,
            indexing_bytes: 0,
            indexing_since: None,
            removals: JoinSet::new(),
            uploads_halted: false,
            index_halted: false,
            cut_uploads: 0,
            done: Vec::new(),
        };
        loop {
            if bound.cancel.is_cancelled() {
                st.uploads_halted = true;
                st.index_halted = true;
            }
            // Fed and started until nothing more moves: a backlog of small
            // packs starts its bundles together (each is read on a blocking
            // thread of its own), not one per wake-up of this loop.
            let limits = (workers, small_workers);
            loop {
                let before = (st.input.len(), st.uploads.len());
                self.feed_validation(&mut st, (small_workers, cfg.bundle_limit()), flag);
                self.start_uploads(&mut st, limits, depth, cfg.max_in_flight_bytes, bound);
                if (st.input.len(), st.uploads.len()) == before {
                    break;
                }
            }
            let index_due = self.index_due(&st, (batch_max, depth), paced);
            if index_due.is_some_and(|d| Instant::now() >= d)
                && st.indexing.is_empty()
                && !st.index_halted
            {
                self.start_index(&mut st, batch_max, bound);
            }
            let index_due = self.index_due(&st, (batch_max, depth), paced);
            clock.tick(st.busy(), self.counters.stage_times_mut());
            self.show_waiting(&st, &store, &server);
            if st.idle() && (st.uploaded.is_empty() || st.index_halted) {
                // Nothing in flight and nothing could start: what was
                // uploaded and cannot be indexed now is owed.
                for job in std::mem::take(&mut st.uploaded) {
                    self.owe(&mut st, job);
                }
                break;
            }
            let linger_armed = index_due.filter(|_| st.indexing.is_empty() && !st.index_halted);
            let linger_sleep = async move {
                match linger_armed {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(joined) = st.validating.join_next(), if !st.validating.is_empty() => {
                    let checked = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    st.validating_jobs -= checked.len();
                    for (job, r) in checked {
                        self.validated(&mut st, job, r).await;
                    }
                }
                Some(joined) = st.uploads.join_next(), if !st.uploads.is_empty() => {
                    let results = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    let stored = results.iter().filter(|(_, r)| r.outcome.is_stored()).count();
                    if results.len() > 1 && stored > 0 {
                        self.counters.count_bundle(stored);
                    }
                    for (job, r) in results {
                        self.upload_done(&mut st, job, r, &store).await;
                    }
                }
                Some(joined) = st.indexing.join_next(), if !st.indexing.is_empty() => {
                    let answer = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    self.index_done(&mut st, answer, &server);
                }
                Some(joined) = st.removals.join_next(), if !st.removals.is_empty() => {
                    self.removals_done(joined);
                }
                _ = linger_sleep => {}
                _ = bound.cancel.cancelled(), if !st.uploads_halted || !st.index_halted => {}
            }
        }
        self.inflight.set(None);
        while let Some(joined) = st.removals.join_next().await {
            self.removals_done(joined);
        }
        clock.tick(Busy::default(), self.counters.stage_times_mut());
        st.validated_bytes = 0;
        for job in st.validated.drain(..).chain(st.input.drain(..)) {
            st.done.push((job, PackOutcome::Cancelled));
        }
        if st.cut_uploads > 0 && Instant::now() >= bound.deadline {
            self.note_error(format!(
                "store {store} did not finish uploading {} pack(s) within {} (the deadline of \
                 this flush or cycle): they stay ready and go up next cycle",
                st.cut_uploads,
                human(started.elapsed())
            ));
        }
        st.done
    }

    /// When the uploaded packs' batch may go to the catalog (`None`: none
    /// is uploaded), by the index linger's rule (module docs, "The index
    /// linger"); `paced` for a run of own or handed-off packs.
    fn index_due(&self, st: &Stages, limits: (usize, usize), paced: bool) -> Option<Instant> {
        let linger = self.pace;
        let (batch_max, depth) = limits;
        let since = st.uploaded_since.filter(|_| !st.uploaded.is_empty())?;
        if st.uploaded.len() >= batch_max || st.unindexed() >= depth {
            return Some(since);
        }
        let landed = if st.uploads.is_empty() {
            since
        } else {
            since + linger
        };
        Some(match self.last_index.filter(|_| paced) {
            Some(last) => landed.max(last + linger),
            None => landed,
        })
    }

    /// Starts validating the next jobs while fewer than `ahead` are
    /// validated or validating, or while at most `bundle_bytes` are
    /// validated (a bundle's worth and one pack more, which says the
    /// bundle is full, wait for the upload); jobs validated elsewhere go
    /// straight through.
    fn feed_validation(
        &mut self,
        st: &mut Stages,
        (ahead, bundle_bytes): (usize, u64),
        flag: &Arc<AtomicBool>,
    ) {
        if st.uploads_halted {
            return;
        }
        while st.validated.len() + st.validating_jobs < ahead || st.validated_bytes <= bundle_bytes
        {
            let Some(front) = st.input.front() else {
                return;
            };
            if self.validated_elsewhere(front) {
                let job = st.input.pop_front().expect("front exists");
                st.push_validated(job);
                continue;
            }
            if st.validated.len() + st.validating_jobs >= ahead {
                return; // only packs validated elsewhere fill a bundle's worth
            }
            if !st.validating.is_empty() {
                return; // one validation task at a time
            }
            let room = ahead - st.validated.len() - st.validating_jobs;
            let n = chunk_len(
                st.input
                    .iter()
                    .map(|j| (j.pack().bytes, self.validated_elsewhere(j))),
                room,
            );
            let chunk: Vec<Job> = st.input.drain(..n).collect();
            st.validating_jobs += chunk.len();
            let flag = flag.clone();
            st.validating.spawn_blocking(move || {
                chunk
                    .into_iter()
                    .map(|job| {
                        let r = spool_core::spool::validate_file(
                            &job.pack().path,
                            job.pack().id,
                            &flag,
                        );
                        (job, r)
                    })
                    .collect()
            });
        }
    }

    /// Whether `job` needs no validation task of the pipeline: this service
    /// validated it before, its upload validates it from the very bytes it
    /// sends (one read, one hash; a bundle's packs always), or its upload
    /// refuses it unread by its size from `stat` (over
    /// `max_in_flight_bytes`: hashing it first would only stall every pack
    /// behind it before the same refusal).
    fn validated_elsewhere(&self, job: &Job) -> bool {
        self.summaries.contains_key(&job.pack().id)
            || self.uploader.bundles(job.pack().bytes)
            || self.uploader.validates_whole(job.pack().bytes)
            || self.uploader.refuses_unread(job.pack().bytes)
    }

    /// One job's validation answer.
    async fn validated(
        &mut self,
        st: &mut Stages,
        job: Job,
        r: Result<PackSummary, spool_core::Error>,
    ) {
        match r {
            Ok(s) => {
                self.summaries.insert(job.pack().id, s);
                st.push_validated(job);
            }
            Err(e) => {
                let outcome = self.not_valid(&job, e).await;
                st.done.push((job, outcome));
            }
        }
    }

    /// What a validation that failed with `e` makes of `job`, wherever it
    /// ran (the pipeline's own, or [`Drain::validate_now`] after an
    /// upload that found the pack stored): a cut validation is not done, a
    /// corrupt pack is quarantined, any other error (the file cannot be
    /// read) is reported and the file left in place.
    async fn not_valid(&mut self, job: &Job, e: spool_core::Error) -> PackOutcome {
        match e {
            spool_core::Error::Cancelled => PackOutcome::Cancelled,
            e if e.is_corrupt() => {
                let reason = e.to_string();
                self.quarantine(job, reason.clone()).await;
                PackOutcome::Quarantined { reason }
            }
            spool_core::Error::PackRead { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                PackOutcome::Vanished
            }
            e => {
                self.note_error(format!("reading {}: {e}", job.pack().path.display()));
                PackOutcome::Failed {
                    retryable: true,
                    reason: Cause::new(e),
                }
            }
        }
    }

    /// Starts uploads while a worker is free, the bytes fit and fewer than
    /// `depth` packs are out and not indexed. `(workers, small)`: how many
    /// uploads may be in flight when the next pack is larger than
    /// [`SMALL_PACK_BYTES`], and when it is not.
    fn start_uploads(
        &mut self,
        st: &mut Stages,
        (workers, small): (usize, usize),
        depth: usize,
        max_bytes: u64,
        bound: &Bound,
    ) {
        while !st.uploads_halted && st.unindexed() < depth {
            let Some(front) = st.validated.front() else {
                return;
            };
            let size = front.pack().bytes;
            if self.uploader.bundles(size) {
                if st.uploads.len() >= small {
                    return;
                }
                if !self.start_bundle(st, depth, max_bytes, bound) {
                    return;
                }
                continue;
            }
            let limit = if size <= SMALL_PACK_BYTES {
                small
            } else {
                workers
            };
            if st.uploads.len() >= limit {
                return;
            }
            // a pack above the bound alone is refused by the uploader at once
            if !st.uploads.is_empty() && st.upload_bytes + size > max_bytes {
                return;
            }
            if !st.bytes_allow(size, max_bytes) {
                return;
            }
            let job = st.pop_validated().expect("front exists");
            let item = st.start_upload(&job);
            let (uploader, cancel) = (self.uploader.clone(), bound.cancel.clone());
            st.uploads.spawn(async move {
                let r = uploader.upload_one(item, &cancel).await;
                vec![(job, r)]
            });
        }
    }

    /// Starts one bundle's upload from the front of `validated` (the
    /// module docs, "Bundles"): the packs that go in a bundle, in order,
    /// while they fit in `bundle_bytes`, the depth and the in-flight
    /// bytes. Closed when the next pack would not fit or goes alone, at
    /// the depth, or when no more packs can come in this run; otherwise it
    /// waits for them and returns `false` (so does a bundle over the
    /// in-flight bytes while others are in flight). A bundle of one pack
    /// goes up as that pack alone, at its own key.
    fn start_bundle(
        &mut self,
        st: &mut Stages,
        depth: usize,
        max_bytes: u64,
        bound: &Bound,
    ) -> bool {
        let target = self.uploader.config().bundle_limit();
        let room = depth - st.unindexed();
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut closed = false;
        for job in &st.validated {
            let size = job.pack().bytes;
            if n == room || !self.uploader.bundles(size) || bytes + size > target {
                closed = true;
                break;
            }
            n += 1;
            bytes += size;
        }
        // Nothing in flight can bring more packs (the feed ran just
        // before): waiting would end the run with the bundle unsent.
        let stuck = st.uploads.is_empty() && st.validating.is_empty();
        let closed = closed || n == room || !st.more_coming() || stuck;
        if !closed || (!st.uploads.is_empty() && st.upload_bytes + bytes > max_bytes) {
            return false;
        }
        if !st.bytes_allow(bytes, max_bytes) {
            return false;
        }
        let jobs: Vec<Job> = (0..n).filter_map(|_| st.pop_validated()).collect();
        let items: Vec<UploadItem> = jobs.iter().map(|j| st.start_upload(j)).collect();
        let (uploader, cancel) = (self.uploader.clone(), bound.cancel.clone());
        st.uploads.spawn(async move {
            let results = if items.len() == 1 {
                let item = items.into_iter().next().expect("one item");
                vec![uploader.upload_one(item, &cancel).await]
            } else {
                uploader.upload_bundle(items, &cancel).await
            };
            jobs.into_iter().zip(results).collect()
        });
        true
    }

    /// One upload's answer: counted, then uploaded (towards the index),
    /// quarantined, not done, or failed.
    async fn upload_done(&mut self, st: &mut Stages, job: Job, r: UploadResult, store: &str) {
        st.upload_bytes -= job.pack().bytes;
        st.uploading_packs -= 1;
        st.upload_started.remove(&job.pack().id);
        self.count_upload(&r, store);
        let UploadResult { outcome, .. } = &r;
        let spool_upload::UploadOutcome::Failed(f) = outcome else {
            let known = r.summary.clone();
            let summary = match known.or_else(|| self.summaries.get(&job.pack().id).cloned()) {
                Some(s) => s,
                // `validates_whole` promises a summary with every stored
                // outcome; should an upload come back without one, the
                // row's summary is read here (the object is in the store)
                None => match self.validate_now(&job).await {
                    Ok(s) => s,
                    Err(e) => {
                        let outcome = self.not_valid(&job, e).await;
                        st.done.push((job, outcome));
                        return;
                    }
                },
            };
            let row = self.row(&r, &summary, &job);
            let job = job.uploaded(row);
            if st.index_halted {
                self.owe(st, job);
            } else {
                st.uploaded_since.get_or_insert_with(Instant::now);
                st.uploaded.push(job);
            }
            return;
        };
        if f.cancelled {
            st.cut_uploads += 1;
            st.done.push((job, PackOutcome::Cancelled));
        } else if f.corrupt {
            // Its bytes changed since they were validated: the upload hashed
            // them and aborted, nothing is stored.
            let reason = f.error.to_string();
            self.quarantine(&job, reason.clone()).await;
            st.done.push((job, PackOutcome::Quarantined { reason }));
        } else {
            // a refusal of the whole destination is not this pack's fault:
            // retried, never set aside
            let retryable = f.retryable || f.destination_wide();
            if retryable {
                st.uploads_halted = true;
            }
            let spool_upload::UploadOutcome::Failed(f) = r.outcome else {
                unreachable!("a failure was matched above")
            };
            let reason = Cause::new(f.error);
            st.done
                .push((job, PackOutcome::Failed { retryable, reason }));
        }
    }

    /// Validates one job's file now, on the blocking pool.
    async fn validate_now(&self, job: &Job) -> Result<PackSummary, spool_core::Error> {
        let (path, id) = (job.pack().path.clone(), job.pack().id);
        tokio::task::spawn_blocking(move || {
            let never = AtomicBool::new(false);
            spool_core::spool::validate_file(&path, id, &never)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// Sends the next batch (at most `batch_max` of what is uploaded) to the
    /// catalog, fenced where lease-gated; without the lease it is owed.
    fn start_index(&mut self, st: &mut Stages, batch_max: usize, bound: &Bound) {
        let fence: Option<LeaseGuard> = match self.fence() {
            Ok(f) => f,
            Err(e) => {
                self.note_error(e);
                st.index_halted = true;
                st.uploads_halted = true;
                return; // what is uploaded becomes owed when the run ends
            }
        };
        let n = st.uploaded.len().min(batch_max);
        let mut batch: Vec<Job> = Vec::with_capacity(n);
        for job in st.uploaded.drain(..n).collect::<Vec<_>>() {
            match self.unless_stale(job) {
                job if job.row().is_some() => batch.push(job),
                job => st.input.push_front(job),
            }
        }
        if batch.is_empty() {
            st.uploaded_since = (!st.uploaded.is_empty()).then(Instant::now);
            return;
        }
        st.uploaded_since = (!st.uploaded.is_empty()).then(Instant::now);
        let rows: Vec<PackRow> = batch.iter().filter_map(|j| j.row().cloned()).collect();
        st.indexing_packs = batch.len();
        st.indexing_bytes = batch.iter().map(|j| j.pack().bytes).sum();
        st.indexing_since = Some(Instant::now());
        self.last_index = st.indexing_since;
        let (catalog, bound) = (self.catalog.clone(), bound.clone());
        st.indexing.spawn(async move {
            spool_core::seams::kill_point("before_index");
            let answer = bound.run(catalog.index(&rows, fence.as_ref())).await;
            (batch, answer)
        });
    }

    /// `job`, or `job` to upload again when its row names a bundle
    /// uploaded more than half of `orphan_grace` ago: a sweep may delete
    /// such a bundle once it is `orphan_grace` old and no row names it, so
    /// no row may name it from then on (the module docs, "Bundles").
    fn unless_stale(&mut self, job: Job) -> Job {
        let limit = self.orphan_grace() / 2;
        if !job.bundled_before(limit) {
            return job;
        }
        let key = job.row().map(|r| r.object_key.clone()).unwrap_or_default();
        tracing::warn!(pack = %job.pack().path.display(), bundle = %key,
            "a bundle uploaded more than {limit:?} ago was never indexed: its pack goes up again");
        self.counters.count_orphaned(job.pack().bytes);
        self.summaries.remove(&job.pack().id);
        job.not_uploaded()
    }

    /// The catalog's answer to one batch: indexed (then removed) or owed.
    fn index_done(&mut self, st: &mut Stages, (batch, answer): Indexed, server: &str) {
        st.indexing_packs = 0;
        st.indexing_bytes = 0;
        let took = st.indexing_since.take().map(|t| t.elapsed());
        self.adapt_pace(matches!(answer, Ok(Ok(()))) && took.is_some_and(|t| t < SLOW_INDEX));
        let what = format!("indexing {} pack(s)", batch.len());
        let why = match answer {
            Ok(Ok(())) => {
                spool_core::seams::kill_point("after_index");
                self.counters.count_indexed(batch.len());
                let mut files = Vec::with_capacity(batch.len());
                for job in batch {
                    self.summaries.remove(&job.pack().id);
                    match job.home() {
                        Home::Spool(spool) => files.push((spool.clone(), job.pack().clone())),
                        // its owner removes it, once told
                        Home::Owner(_) => self.confirmable.push(job.clone()),
                    }
                    st.done.push((job, PackOutcome::Indexed));
                }
                // Removed only now, after the catalog's Ok; one
                // directory fsync per spool directory of the batch
                st.removals.spawn_blocking(move || {
                    let mut by_spool: Vec<(Arc<Spool>, Vec<ReadyPack>)> = Vec::new();
                    for (spool, pack) in files {
                        match by_spool.iter_mut().find(|(s, _)| Arc::ptr_eq(s, &spool)) {
                            Some((_, packs)) => packs.push(pack),
                            None => by_spool.push((spool, vec![pack])),
                        }
                    }
                    by_spool
                        .into_iter()
                        .flat_map(|(spool, packs)| spool.remove_all(&packs))
                        .collect()
                });
                return;
            }
            Ok(Err(e)) => Err(e),
            Err(cut) => Ok(cut),
        };
        self.note_index_failure(server, &what, why);
        st.index_halted = true;
        st.uploads_halted = true;
        for job in batch {
            self.owe(st, job);
        }
    }

    /// Adapts the linger in force to the catalog's last answer: back
    /// toward `index_linger` (halved) after a quick one, doubled (up to
    /// [`MAX_PACE`]) after a failure or a slow one, so a server that pushes
    /// back (too many parts, a delayed insert, a timeout) gets fewer,
    /// larger inserts until it keeps up again.
    fn adapt_pace(&mut self, quick: bool) {
        let was = self.pace;
        self.pace = if quick {
            (self.pace / 2).max(self.index_linger)
        } else {
            let ceiling = MAX_PACE.max(self.index_linger);
            (self.pace.max(Duration::from_millis(10)) * 2)
                .min(ceiling)
                .max(self.index_linger)
        };
        if self.pace > was {
            tracing::info!(dir = %self.own.dir().display(), "the catalog pushes back: index calls at most one per {:?} for now (index_linger {:?})", self.pace, self.index_linger);
        }
    }

    /// `job`, uploaded, is owed to the catalog: into the backlog.
    fn owe(&mut self, st: &mut Stages, job: Job) {
        self.backlog.push(job.clone());
        st.done.push((job, PackOutcome::Owed));
    }

    fn removals_done(
        &mut self,
        joined: Result<Vec<(PathBuf, spool_core::Error)>, tokio::task::JoinError>,
    ) {
        match joined {
            Ok(failed) => {
                for (path, e) in failed {
                    self.note_error(format!("removing indexed pack {}: {e}", path.display()));
                }
            }
            Err(e) => self.note_error(format!("removing indexed packs: the task failed: {e}")),
        }
    }

    /// The snapshot's `waiting_on`: the index call in flight, else the
    /// oldest upload in flight.
    fn show_waiting(&self, st: &Stages, store: &str, server: &str) {
        let shown = if let Some(since) = st.indexing_since {
            Some((
                format!("catalog {server}: indexing {} pack(s)", st.indexing_packs),
                since,
            ))
        } else {
            st.upload_started.values().min().map(|since| {
                (
                    format!("store {store}: uploading {} pack(s)", st.uploads.len()),
                    *since,
                )
            })
        };
        self.inflight.set(shown);
    }
}

#[cfg(test)]
mod tests;
