//! The storage service: its runtime, loop, cycle, flush, stop and snapshot
//! (their rules are the crate docs', "The service").
//!
//! - **A bounded stop.** Every call in the loop watches the stop token;
//!   `stop()` then waits at most [`STOP_LOOP_GRACE`] for the loop,
//!   [`STOP_LEASE_GRACE`] for the lease's release tombstone (a claim in
//!   flight is cut; a lease not released lapses after its TTL) and
//!   [`STOP_SHUTDOWN_GRACE`] for blocking tasks.
//! - **A panic stops the work, not the process.** A panic in a cycle (the
//!   loop's or a flush's) is caught: the snapshot's `loop_failed` says
//!   it, every adopted sibling is let go, a flush refuses with
//!   [`Error::LoopFailed`] and the loop does no more work (`spool run`
//!   exits 10); the lease keeper catches its own panic into its state's
//!   `task_failed`.
//! - **The runtime** has `ServiceConfig::runtime_workers` workers (2 by
//!   default); blocking work stays off them (`crate::offload`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use spool_catalog::{LeaseConfig, LeaseKeeper, LeaseScope, LeaseTask};
use spool_core::registry::{AtomicWaker, Reader, Waker};
use spool_core::spool::SpoolConfig;
use spool_core::{RankDirName, Spool};
use spool_lock::LockMode;
use spool_upload::{CancellationToken, Uploader};

use crate::adoption::real_env::{let_go_of_all, Env, HeldSiblings};
use crate::adoption::{Adopter, AdoptionConfig, Pause, StepBudget};
use crate::bound::{Bound, InFlight};
use crate::config::ServiceConfig;
use crate::drain::{Drain, DrainParts, Job, Linger, OpenBundle, PackOutcome, Progress, Stream};
use crate::handoff::Shipper;
use crate::prefix_record::CatalogIdentity;
use crate::snapshot::Snapshot;
use crate::Error;

/// How long stop waits for the loop to end (every call in it watches the
/// stop token, so this is only reached by wedged local I/O).
const STOP_LOOP_GRACE: Duration = Duration::from_secs(1);
/// How long stop lets the lease keeper write its release tombstone.
const STOP_LEASE_GRACE: Duration = Duration::from_millis(500);
/// How long stop waits for blocking tasks when the runtime shuts down.
const STOP_SHUTDOWN_GRACE: Duration = Duration::from_millis(250);

/// A call in flight this long shows in the snapshot's `waiting_on`.
const WAITING_SHOWN_AFTER: Duration = Duration::from_secs(1);

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    /// A retryable failure of own work (counts toward backoff).
    pub failed: bool,
    /// A cancel (deadline, flush or stop) cut it short.
    pub cut_short: bool,
    /// Own ready packs not yet uploaded at its end.
    pub own_left: usize,
    /// Adoption steps taken.
    pub adoption_steps: usize,
    /// Adoption ended the cycle at a gate (no lease, something owed, an
    /// own pack not yet uploaded): the rechecks it has due cannot run
    /// until the gate opens, so they do not cut the loop's wait short (a
    /// past-due recheck would otherwise spin the loop, and defeat its
    /// backoff, for as long as the gate stays shut).
    pub adoption_gated: bool,
}

struct Shared {
    dir: PathBuf,
    stop: CancellationToken,
    wake: tokio::sync::Notify,
    flushes: AtomicUsize,
    cycles: AtomicU64,
    /// No run waits for a bundle to fill (a run until drained: nothing
    /// more is coming that is worth the wait).
    hurry: std::sync::atomic::AtomicBool,
    /// Cancels the own-upload phase of the loop's current cycle (a flush
    /// cuts it so it can run its own cycle by its deadline).
    own_phase: Mutex<Option<CancellationToken>>,
    snapshot: Mutex<Snapshot>,
    /// How many snapshots were published (one at the end of each cycle),
    /// with `published` notified at each.
    publications: Mutex<u64>,
    published: std::sync::Condvar,
    /// What the service waits on now (catalog or store call in flight).
    inflight: InFlight,
    /// The lease keeper's state, once started (its call in flight).
    lease: Mutex<Option<tokio::sync::watch::Receiver<spool_catalog::LeaseState>>>,
    /// Uploaded and indexed, counted live by the drain.
    progress: Arc<Progress>,
    /// The loop (or a flush's cycle) panicked: its message. The service
    /// does no more work; `spool run` exits 10.
    loop_failed: Mutex<Option<String>>,
}

impl Shared {
    /// Why the loop (or the lease keeper's task) failed, if it did.
    fn loop_failed(&self) -> Option<String> {
        if let Some(why) = self
            .loop_failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Some(why);
        }
        let lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        let why = lease.as_ref()?.borrow().task_failed.clone()?;
        Some(format!("the lease keeper's task panicked: {why}"))
    }

    /// Records a caught panic of a cycle.
    fn fail_loop(&self, payload: &(dyn std::any::Any + Send)) -> String {
        let why = format!(
            "the service loop of {} panicked: {}",
            self.dir.display(),
            panic_message(payload)
        );
        tracing::error!(dir = %self.dir.display(), "{why}; the service does no more work (restart it)");
        let mut slot = self.loop_failed.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(why).clone()
    }

    /// The catalog or store call the service (or its lease keeper) has been
    /// waiting on for at least `min`, if any.
    fn waiting_on(&self, min: Duration) -> Option<String> {
        self.inflight.describe(min).or_else(|| {
            let lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
            let st = lease.as_ref()?.borrow().clone();
            let (what, since) = st.in_flight?;
            let waited = since.elapsed();
            (waited >= min).then(|| {
                format!(
                    "catalog {}: {what} (lease {}), waiting for {}",
                    st.server,
                    st.name,
                    crate::bound::human(waited)
                )
            })
        })
    }
}

struct Core {
    drain: Drain,
    /// The siblings held for adoption.
    held: HeldSiblings,
    adopter: Option<Adopter>,
    key_dir: PathBuf,
    lock: spool_lock::LockOptions,
    adoption_slice: Duration,
    lease_task: Option<LeaseTask>,
    own_left: usize,
    /// Where this directory's sinks publish (the snapshot's `staged`).
    registry: Arc<spool_core::registry::Registry>,
    /// Ships live sink-only owners' consented packs (with adoption on:
    /// the node lease makes this service the node's shipper).
    shipper: Option<Shipper>,
    /// Owners the registry said changed since the last hand-off step.
    dirty_owners: HashSet<PathBuf>,
    /// The next hand-off step looks at every owner.
    rescan_owners: bool,
    /// The own packs' bundle linger.
    own_linger: Linger,
}

/// The storage service. Owns its tokio runtime; its API is
/// synchronous (call it from plain threads, not from inside a runtime).
pub struct StorageService {
    config: ServiceConfig,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
    core: Option<Arc<tokio::sync::Mutex<Core>>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The own directory's spool, once started (the engine's sinks stage
    /// through it: one account per directory).
    own: Option<Arc<Spool>>,
}

impl std::fmt::Debug for StorageService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageService")
            .field("dir", &self.shared.dir)
            .field("running", &self.task.is_some())
            .finish()
    }
}

/// The construction check: with adoption on, `dir` must be a
/// layout rank directory under its destination's catalog key.
pub(crate) fn check_rank_dir(config: &ServiceConfig) -> Result<PathBuf, Error> {
    let dir = std::path::absolute(&config.dir).map_err(|source| Error::Runtime {
        dir: config.dir.clone(),
        source,
    })?;
    let dir = dir.canonicalize().unwrap_or(dir);
    if !config.adopt {
        return Ok(dir);
    }
    let key = config.destination.catalog_key()?;
    let name_ok = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(RankDirName::parse)
        .is_some();
    let parent_ok = dir
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n.to_str() == Some(key.as_str()));
    if name_ok && parent_ok {
        Ok(dir)
    } else {
        Err(Error::NotARankDir { dir, key })
    }
}

impl StorageService {
    /// Checks the configuration and builds the runtime; nothing is opened
    /// until [`start`](Self::start).
    pub fn new(config: ServiceConfig) -> Result<StorageService, Error> {
        let dir = check_rank_dir(&config)?;
        config.upload.validate()?;
        if config.poll_interval.is_zero() {
            return Err(Error::InvalidConfig {
                why: "poll_interval must be above zero".into(),
            });
        }
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            stop: CancellationToken::new(),
            wake: tokio::sync::Notify::new(),
            flushes: AtomicUsize::new(0),
            hurry: std::sync::atomic::AtomicBool::new(false),
            cycles: AtomicU64::new(0),
            own_phase: Mutex::new(None),
            snapshot: Mutex::new(Snapshot::default()),
            publications: Mutex::new(0),
            published: std::sync::Condvar::new(),
            inflight: InFlight::default(),
            lease: Mutex::new(None),
            progress: Arc::default(),
            loop_failed: Mutex::new(None),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.runtime_workers.max(1))
            .thread_name("spool-service")
            .enable_all()
            .build()
            .map_err(|source| Error::Runtime {
                dir: dir.clone(),
                source,
            })?;
        Ok(StorageService {
            config: ServiceConfig { dir, ..config },
            shared,
            runtime: Some(runtime),
            core: None,
            task: None,
            own: None,
        })
    }

    /// The own directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.shared.dir
    }

    /// The own directory's spool once [`start`](Self::start)ed: its budget
    /// and account are the directory's. An [`Engine`](crate::Engine) stages
    /// every sink through it.
    pub fn spool(&self) -> Option<&Arc<Spool>> {
        self.own.as_ref()
    }

    /// Opens the own directory (lock per `lock_mode`), sweeps dead writers'
    /// temp files and lists its packs without hashing them (each is
    /// validated before its upload), starts the lease keeper where needed,
    /// owes a look at the siblings and kicks the loop. Bounded: no store or
    /// catalog call is made here.
    pub fn start(&mut self) -> Result<(), Error> {
        let cfg = &self.config;
        let spool_cfg = SpoolConfig {
            lock_mode: cfg.lock_mode,
            lock: cfg.lock.clone(),
            max_bytes: cfg.max_bytes,
            // In the layout (adoption on: the construction check made sure
            // it is a rank directory), dead siblings count against the
            // budget, so a crash-restart loop cannot grow the node's disk
            // use by a budget per incarnation.
            charge_dead_siblings: cfg.max_bytes.is_some() && cfg.adopt,
        };
        let spool = Arc::new(Spool::open(&cfg.dir, &spool_cfg)?);
        let own_spool = spool.clone();
        let rec = spool.begin_recovery()?;
        if !rec.swept.is_empty() {
            tracing::info!(dir = %cfg.dir.display(), swept = rec.swept.len(), "swept dead writers' temp files");
        }
        let uploader = Uploader::new(cfg.store.clone(), cfg.upload.clone())?;
        let key = cfg.destination.catalog_key()?;
        let key_dir = cfg.dir.parent().map(PathBuf::from).unwrap_or_default();
        let rt = self.runtime.as_ref().expect("runtime until stop");
        let lease_needed = cfg.adopt || cfg.lease_scope == LeaseScope::Catalog;
        let lease_task = if lease_needed {
            let name = cfg.lease_scope.lease_name(&key, &cfg.node_name);
            let holder = spool_catalog::LeaseHolder::new(
                &spool_lock::host_name(),
                std::process::id(),
                &cfg.dir,
            );
            let keeper = LeaseKeeper::new(
                cfg.catalog.clone(),
                name,
                holder,
                LeaseConfig::new(cfg.lease_ttl)?,
            )?
            .latch_without_holding(cfg.lease_scope == LeaseScope::Catalog);
            let _g = rt.enter();
            Some(keeper.spawn())
        } else {
            None
        };
        let adopter = cfg.adopt.then(|| {
            let mut a = Adopter::new(
                AdoptionConfig {
                    recheck_interval: cfg.recheck_interval,
                    discovery_interval: cfg.recheck_interval.max(Duration::from_secs(1)),
                    staging_max_age: cfg.staging_max_age,
                    adoption_slice: cfg.adoption_slice,
                    // one adoption step hands the pipeline up to
                    // pipeline_depth packs (adoption's bound), and about two
                    // rounds' worth of bytes so a step of large packs stays
                    // near the adoption slice
                    max_round_packs: cfg.pipeline_depth.max(1),
                    max_round_bytes: cfg.upload.max_in_flight_bytes.saturating_mul(2),
                },
                key_dir.clone(),
                cfg.dir.clone(),
            );
            a.owe_look();
            a
        });
        let shipper = cfg.adopt.then(|| {
            Shipper::new(
                &key_dir,
                &cfg.dir,
                cfg.registry.clone(),
                cfg.lock.access,
                cfg.node_name.clone(),
            )
        });
        let drain = Drain::new(DrainParts {
            uploader,
            catalog: cfg.catalog.clone(),
            store_id: cfg.destination.store_id.clone(),
            host: spool_lock::host_name(),
            index_batch: cfg.index_batch,
            pipeline_depth: cfg.pipeline_depth,
            index_linger: cfg.index_linger,
            fenced: cfg.lease_scope == LeaseScope::Catalog,
            lease: lease_task.as_ref().map(|t| t.subscribe()),
            own: spool.clone(),
            progress: self.shared.progress.clone(),
            inflight: self.shared.inflight.clone(),
            identity: CatalogIdentity::of(&cfg.destination, &cfg.node_name),
        });
        let core = Arc::new(tokio::sync::Mutex::new(Core {
            drain,
            held: HashMap::new(),
            adopter,
            key_dir,
            lock: cfg.lock.clone(),
            adoption_slice: cfg.adoption_slice,
            lease_task,
            own_left: 0,
            registry: cfg.registry.clone(),
            shipper,
            dirty_owners: HashSet::new(),
            rescan_owners: true,
            own_linger: Linger::default(),
        }));
        *self.shared.lease.lock().unwrap_or_else(|e| e.into_inner()) =
            core.try_lock().ok().and_then(|c| c.drain.lease_receiver());
        let aw = Arc::new(AtomicWaker::new());
        let reader = cfg.registry.register_waker(Waker::Async(aw.clone()));
        let task = rt.spawn(run_loop(
            core.clone(),
            self.shared.clone(),
            reader,
            aw,
            cfg.poll_interval,
            cfg.max_backoff,
        ));
        self.core = Some(core);
        self.task = Some(task);
        self.own = Some(own_spool);
        tracing::info!(dir = %self.shared.dir.display(), "storage service started on {}", self.shared.dir.display());
        Ok(())
    }

    /// Runs cycles without adoption until drained (every own ready
    /// pack uploaded and indexed, nothing owed) or `timeout`. `Ok(true)`:
    /// drained; `Ok(false)`: the service is stopping or latched and will
    /// not drain; `Err(FlushTimeout)` at the deadline, saying what is owed.
    pub fn flush(&self, timeout: Duration) -> Result<bool, Error> {
        let (Some(rt), Some(core)) = (self.runtime.as_ref(), self.core.as_ref()) else {
            return Err(Error::NotRunning {
                dir: self.shared.dir.clone(),
            });
        };
        let deadline = Instant::now() + timeout;
        let shared = self.shared.clone();
        shared.flushes.fetch_add(1, Ordering::SeqCst);
        struct Done<'a>(&'a AtomicUsize);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _done = Done(&shared.flushes);
        if let Some(t) = shared
            .own_phase
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            t.cancel();
        }
        let core = core.clone();
        let timeout_err = |c: Option<&Core>| {
            let snap = shared
                .snapshot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            Error::FlushTimeout {
                dir: shared.dir.clone(),
                timeout,
                ready: c.map(|c| c.own_left).unwrap_or(snap.deferred as usize),
                owed: c
                    .map(|c| c.drain.owed())
                    .unwrap_or(snap.pending_index as usize),
                cycles: shared.cycles.load(Ordering::SeqCst),
                last_error: snap.last_error,
                waiting_on: shared.waiting_on(Duration::ZERO),
            }
        };
        let failed = |why: String| Error::LoopFailed {
            dir: shared.dir.clone(),
            why,
        };
        if let Some(why) = shared.loop_failed() {
            return Err(failed(why));
        }
        rt.block_on(async {
            use futures::FutureExt;
            let tdl = tokio::time::Instant::from_std(deadline);
            let Ok(mut c) = tokio::time::timeout_at(tdl, core.lock()).await else {
                return Err(shared
                    .loop_failed()
                    .map(failed)
                    .unwrap_or_else(|| timeout_err(None)));
            };
            if let Some(why) = shared.loop_failed() {
                return Err(failed(why));
            }
            loop {
                let cycle =
                    std::panic::AssertUnwindSafe(c.run_cycle(&shared, deadline, CycleMode::Flush))
                        .catch_unwind()
                        .await;
                let out = match cycle {
                    Ok(out) => out,
                    Err(panic) => {
                        let why = shared.fail_loop(panic.as_ref());
                        c.let_go_of_siblings().await;
                        c.publish(&shared);
                        return Err(failed(why));
                    }
                };
                if c.own_left == 0 && c.drain.owed() == 0 && !out.cut_short {
                    return Ok(true);
                }
                if shared.stop.is_cancelled() || c.latched() {
                    return Ok(false);
                }
                if Instant::now() >= deadline {
                    return Err(timeout_err(Some(&c)));
                }
                if out.failed || !c.drain.may_work() {
                    let nap = tokio::time::Instant::now() + Duration::from_millis(50);
                    tokio::time::sleep_until(nap.min(tdl)).await;
                }
            }
        })
    }

    /// Stops promptly: cancels uploads, index calls, listings, validation
    /// and adoption; lets go of every adopted lock (their packs stay for a
    /// successor); releases the lease. Never removes a directory that holds
    /// packs. With lock mode `Take` the own directory's lock is released
    /// (and the directory removed if empty). Idempotent.
    pub fn stop(&mut self) -> Result<(), Error> {
        // Let go of this handle first: a `Take`-mode claim is released
        // below only from the last reference to the spool.
        self.own = None;
        let Some(rt) = self.runtime.take() else {
            return Ok(());
        };
        let started = Instant::now();
        self.shared.stop.cancel();
        self.shared.wake.notify_one();
        // Every catalog and store call watches the stop token, so the loop
        // ends at once; what does not (a wedged filesystem) is abandoned
        // after STOP_LOOP_GRACE, its adopted locks kept until exit.
        let loop_dl = tokio::time::Instant::from_std(started + STOP_LOOP_GRACE);
        if let Some(task) = self.task.take() {
            if rt
                .block_on(async { tokio::time::timeout_at(loop_dl, task).await })
                .is_err()
            {
                tracing::warn!(dir = %self.shared.dir.display(), "the service loop did not end within {:?} of stop; abandoned (what it held is let go at exit){}", STOP_LOOP_GRACE,
                    self.shared.inflight.describe(Duration::ZERO).map(|w| format!("; it was waiting on {w}")).unwrap_or_default());
            }
        }
        if let Some(core) = self.core.take() {
            let lease = rt
                .block_on(async { tokio::time::timeout_at(loop_dl, core.lock()).await })
                .ok()
                .and_then(|mut c| c.lease_task.take());
            if let Some(lease) = lease {
                // a tombstone if the catalog answers in time; else the lease
                // lapses on its own after its TTL
                if rt
                    .block_on(async { tokio::time::timeout(STOP_LEASE_GRACE, lease.stop()).await })
                    .is_err()
                {
                    tracing::warn!(dir = %self.shared.dir.display(), "the lease was not released within {STOP_LEASE_GRACE:?} of stop (catalog {} not answering): it lapses after its TTL", self.config.catalog.server());
                }
            }
            if let Ok(core) = Arc::try_unwrap(core) {
                let core = core.into_inner();
                if self.config.lock_mode == LockMode::Take {
                    if let Ok(spool) = Arc::try_unwrap(core.drain.into_own()) {
                        if let Some(claim) = spool.into_claim() {
                            match claim.release_and_remove_if_empty() {
                                Ok(removed) => {
                                    tracing::info!(dir = %self.shared.dir.display(), removed, "released own directory")
                                }
                                Err(e) => {
                                    tracing::warn!(dir = %self.shared.dir.display(), "releasing own directory: {e}")
                                }
                            }
                        }
                    }
                }
            }
        }
        rt.shutdown_timeout(STOP_SHUTDOWN_GRACE);
        tracing::info!(dir = %self.shared.dir.display(), "storage service stopped");
        Ok(())
    }

    /// Runs never wait for a bundle to fill from now on (a run until
    /// drained: `spool run --once`).
    pub(crate) fn skip_bundle_linger(&self) {
        self.shared.hurry.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }

    /// Waits until more than `seen` snapshots have been published (each
    /// cycle, the loop's or a flush's, publishes one at its end) or
    /// `timeout` passes, and returns how many have been. A caller that
    /// follows the service (`spool run --once`) wakes at the end of each
    /// cycle instead of polling on an interval of its own; `0` published
    /// means no cycle has ended yet, so the [`snapshot`](Self::snapshot)
    /// is still the empty one of a service that has not looked at
    /// anything.
    pub fn wait_published(&self, seen: u64, timeout: Duration) -> u64 {
        let count = self
            .shared
            .publications
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (count, _) = self
            .shared
            .published
            .wait_timeout_while(count, timeout, |n| *n <= seen)
            .unwrap_or_else(|e| e.into_inner());
        *count
    }

    /// A cheap copy of the counters: `uploaded` and `indexed` live,
    /// the rest as of the last cycle.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        s.cycles = self.shared.cycles.load(Ordering::SeqCst);
        s.open_bundle = s.open_bundle.aged_now();
        s.uploaded = self.shared.progress.uploaded();
        s.indexed = self.shared.progress.indexed();
        s.waiting_on = self.shared.waiting_on(WAITING_SHOWN_AFTER);
        s.loop_failed = self.shared.loop_failed();
        if let Some(rx) = self
            .shared
            .lease
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            let st = rx.borrow();
            s.lease_renewals = st.renewals;
            s.max_renewal_gap = st.max_renewal_gap;
            s.lease_losses = st.losses;
        }
        s.catalog = self.config.catalog.counters();
        s
    }
}

impl Drop for StorageService {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Resolves once the registry's inbox names a directory `wanted` accepts
/// (the own directory, whose sinks published; with a shipper, the key
/// directory or an owner under it), with every such directory named; a
/// wake naming only others (another service's sinks in this process)
/// drains the inbox and keeps waiting, so the loop looks only at what
/// changed, or on its poll interval.
async fn registry_wake(
    reader: &Reader,
    aw: &AtomicWaker,
    wanted: impl Fn(&std::path::Path) -> bool,
) -> HashSet<PathBuf> {
    futures::future::poll_fn(|cx| loop {
        aw.register(cx.waker());
        if !reader.is_armed() {
            return Poll::Pending;
        }
        let dirty: HashSet<PathBuf> = reader
            .take_dirty()
            .into_iter()
            .filter(|d| wanted(d))
            .collect();
        if !dirty.is_empty() {
            return Poll::Ready(dirty);
        }
    })
    .await
}

/// Resolves once the lease keeper acquires the lease where it held none,
/// so work that waited on the lease (adoption; in catalog scope all of it)
/// runs as soon as the lease is there, not a poll interval later; never
/// without a lease keeper, nor while the lease is held.
async fn lease_acquired(
    lease: &mut Option<tokio::sync::watch::Receiver<spool_catalog::LeaseState>>,
) {
    if let Some(rx) = lease {
        if !rx.borrow_and_update().held() && rx.wait_for(|s| s.held()).await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await
}

/// Resolves once the lease keeper latches; never without a lease keeper.
async fn latched(lease: &mut Option<tokio::sync::watch::Receiver<spool_catalog::LeaseState>>) {
    if let Some(rx) = lease {
        if rx.wait_for(|s| s.latched).await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await
}

async fn run_loop(
    core: Arc<tokio::sync::Mutex<Core>>,
    shared: Arc<Shared>,
    reader: Reader,
    aw: Arc<AtomicWaker>,
    poll: Duration,
    max_backoff: Duration,
) {
    let mut backoff = Duration::ZERO;
    let (mut lease, ships) = {
        let c = core.lock().await;
        (c.drain.lease_receiver(), c.shipper.is_some())
    };
    let own = shared.dir.clone();
    let key = own.parent().map(PathBuf::from).unwrap_or_default();
    let wanted = |d: &std::path::Path| {
        d == own.as_path() || (ships && (d == key.as_path() || d.parent() == Some(key.as_path())))
    };
    let mut acquired = lease.clone();
    let mut latch_seen = false;
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        if shared.loop_failed().is_some() {
            // a flush's cycle (or the lease keeper) failed: no more work
            let mut c = core.lock().await;
            c.let_go_of_siblings().await;
            c.publish(&shared);
            return;
        }
        let (out, next_due) = {
            use futures::FutureExt;
            let mut c = core.lock().await;
            let cycle = std::panic::AssertUnwindSafe(c.run_cycle(
                &shared,
                Instant::now() + Duration::from_secs(3600),
                CycleMode::Loop,
            ))
            .catch_unwind()
            .await;
            let out = match cycle {
                Ok(out) => out,
                Err(panic) => {
                    // A panicked loop is never silent. Every
                    // adopted lock is let go; the own claim is the engine's.
                    shared.fail_loop(panic.as_ref());
                    c.let_go_of_siblings().await;
                    c.publish(&shared);
                    return;
                }
            };
            let next_due = c
                .adopter
                .as_ref()
                .filter(|_| !out.adoption_gated)
                .and_then(|a| a.next_due());
            let next_due = [next_due, c.bundle_due()].into_iter().flatten().min();
            (out, next_due)
        };
        backoff = if out.failed {
            (backoff * 2).clamp(poll.min(Duration::from_millis(100)), max_backoff)
        } else {
            Duration::ZERO
        };
        let mut wait = if backoff.is_zero() { poll } else { backoff };
        if out.adoption_steps > 0 && backoff.is_zero() {
            wait = Duration::ZERO; // more adoption work may be due
        }
        if let Some(due) = next_due {
            wait = wait.min(due.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            _ = shared.wake.notified() => {}
            dirty = registry_wake(&reader, &aw, wanted), if backoff.is_zero() => {
                core.lock().await.note_dirty(dirty);
            }
            // The latch wakes the loop, which lets go of every
            // sibling at once, however long its backoff or poll interval.
            _ = latched(&mut lease), if !latch_seen => latch_seen = true,
            // work gated on the lease (adoption; in catalog scope all of
            // it) goes ahead as soon as the lease is held
            _ = lease_acquired(&mut acquired) => {}
            _ = tokio::time::sleep(wait) => core.lock().await.rescan_owners = true,
        }
    }
    let mut c = core.lock().await;
    c.shutdown(&shared).await;
}

/// What became of one own pack of a run (`Core::settle_own`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnSettled {
    /// Out of the own backlog: indexed, owed, set aside, or gone.
    Done,
    /// Cut by the run's cancel; still ready.
    Cancelled,
    /// Failed in a way a retry may fix; still ready.
    Failed,
}

/// What a cycle does after its own packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CycleMode {
    /// The loop's cycle: own packs, then reconcile, then adopt.
    Loop,
    /// A flush's cycle: own packs (and the backlog) only.
    Flush,
}

impl Core {
    fn latched(&self) -> bool {
        self.drain.lease_state().is_some_and(|s| s.latched)
    }

    /// When a run held back for its bundle to fill goes anyway.
    fn bundle_due(&self) -> Option<Instant> {
        let shipped = self.shipper.as_ref().and_then(|s| s.linger().due());
        [self.own_linger.due(), shipped].into_iter().flatten().min()
    }

    /// What waits for a bundle now, the own packs' and the hand-off's.
    fn open_bundle(&self) -> OpenBundle {
        let own = self.own_linger.open();
        let shipped = self
            .shipper
            .as_ref()
            .map(|s| s.linger().open())
            .unwrap_or_default();
        OpenBundle {
            packs: own.packs + shipped.packs,
            bytes: own.bytes + shipped.bytes,
            age: own.age.max(shipped.age),
            since: [own.since, shipped.since].into_iter().flatten().min(),
        }
    }

    /// One cycle: own packs in rounds, each round indexed or
    /// owed, indexed files removed; reconcile; then adopt.
    async fn run_cycle(
        &mut self,
        shared: &Shared,
        deadline: Instant,
        mode: CycleMode,
    ) -> CycleOutcome {
        shared.cycles.fetch_add(1, Ordering::SeqCst);
        let token = shared.stop.child_token();
        *shared.own_phase.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.clone());
        let flag = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (token, flag) = (token.clone(), flag.clone());
            tokio::spawn(async move {
                let dl = tokio::time::Instant::from_std(deadline);
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = tokio::time::sleep_until(dl) => token.cancel(),
                }
                flag.store(true, Ordering::SeqCst);
            })
        };
        let bound = Bound::new(deadline, token.clone());
        let linger = mode == CycleMode::Loop && !shared.hurry.load(Ordering::SeqCst);
        let mut out = self.own_work(&bound, &flag, linger).await;
        *shared.own_phase.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if mode == CycleMode::Loop && !token.is_cancelled() {
            let spool = self.drain.own().clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || spool.reconcile()).await {
                self.drain.note_error(format!("reconcile: {e}"));
            }
        }
        if mode == CycleMode::Loop && !token.is_cancelled() {
            out.failed |= self.hand_off(&bound, &flag).await;
        }
        watcher.abort();
        if mode == CycleMode::Loop {
            let (steps, failed, gated) = self.adopt(shared, deadline).await;
            out.adoption_steps = steps;
            out.failed |= failed;
            out.adoption_gated = gated;
        }
        out.failed |= self.settle_carried().await;
        self.publish(shared);
        out
    }

    /// The cycle's own work: the backlog, then every ready pack of the
    /// own directory, through the drain; with `linger`, small packs wait
    /// for a bundle's worth (the drain's docs, "Bundles").
    async fn own_work(
        &mut self,
        bound: &Bound,
        flag: &Arc<AtomicBool>,
        linger: bool,
    ) -> CycleOutcome {
        let cancel = &bound.cancel;
        let mut out = CycleOutcome::default();
        let spool = self.drain.own().clone();
        let f = flag.clone();
        let listing = std::time::Instant::now();
        let listed = tokio::task::spawn_blocking(move || spool.scan(&f)).await;
        self.drain.count_listing(listing.elapsed());
        let ready = match listed {
            Ok(Ok(r)) => r,
            Ok(Err(spool_core::Error::Cancelled)) | Err(_) => {
                out.cut_short = true;
                return out;
            }
            Ok(Err(e)) => {
                self.drain.note_error(format!("scanning: {e}"));
                out.failed = true;
                return out;
            }
        };
        let owed_before = self.drain.owed_ids();
        self.own_left = ready
            .iter()
            .filter(|p| !owed_before.contains(&p.id))
            .count();
        if !self.drain.may_work() {
            // nothing moves without the lease
            out.failed |= self.drain.owed() > 0;
            return out;
        }
        let jobs = self.drain.own_jobs(ready);
        if linger && self.drain.hold_for_bundle(&mut self.own_linger, &jobs) {
            // nothing owed among them (the backlog is empty); they ride
            // along the cycle's other runs, if any
            self.drain.park(Stream::Own, jobs);
            return out;
        }
        let mut left = self.own_left;
        for (job, outcome) in self.drain.run(jobs, bound, flag).await {
            if owed_before.contains(&job.pack().id) {
                continue; // owed before this run: not counted in own_left
            }
            match self.settle_own(&job, outcome).await {
                OwnSettled::Done => left -= 1,
                OwnSettled::Cancelled => out.cut_short |= cancel.is_cancelled(),
                OwnSettled::Failed => out.failed = true,
            }
        }
        // the catalog down is a retryable failure of own work too
        out.failed |= self.drain.owed() > 0;
        self.own_left = left;
        out.own_left = left;
        out
    }

    /// Settles an own pack's outcome: a pack that failed for good is
    /// renamed `.rejected` (a person decides), and counts as done once
    /// renamed.
    async fn settle_own(&mut self, job: &Job, outcome: PackOutcome) -> OwnSettled {
        match outcome {
            PackOutcome::Indexed
            | PackOutcome::Owed
            | PackOutcome::Quarantined { .. }
            | PackOutcome::Vanished => OwnSettled::Done,
            PackOutcome::Cancelled => OwnSettled::Cancelled,
            // a refusal of the whole destination is retryable too: it
            // never sets a pack aside; the loop backs off and tries again
            PackOutcome::Failed {
                retryable: true, ..
            } => OwnSettled::Failed,
            PackOutcome::Failed {
                retryable: false,
                reason,
            } => {
                if self.drain.reject(job, reason.to_string()).await {
                    OwnSettled::Done
                } else {
                    OwnSettled::Failed
                }
            }
        }
    }

    /// Ends the cycle's riders (the drain's `riders`): the packs another
    /// run carried go back to their stream, their lingers start over.
    /// Returns whether something failed that a retry may fix.
    async fn settle_carried(&mut self) -> bool {
        let mut failed = false;
        let mut handed_off = Vec::new();
        for (stream, job, outcome) in self.drain.end_cycle() {
            match stream {
                Stream::HandOff => handed_off.push((job, outcome)),
                Stream::Own => {
                    self.own_linger = Linger::default();
                    failed |= self.settle_own(&job, outcome).await == OwnSettled::Failed;
                }
            }
        }
        if let (Some(shipper), false) = (self.shipper.as_mut(), handed_off.is_empty()) {
            failed |= shipper.settle_carried(&mut self.drain, handed_off).await;
        }
        failed
    }

    /// Notes which directories the registry said changed: owners for the
    /// next hand-off step (the key directory: a new owner, so all of them).
    fn note_dirty(&mut self, dirty: HashSet<PathBuf>) {
        let Some(shipper) = &self.shipper else { return };
        for d in dirty {
            if shipper.rescans_for(&d) {
                self.rescan_owners = true;
            } else if shipper.concerns(&d) {
                self.dirty_owners.insert(d);
            }
        }
    }

    /// The cycle's hand-off step, while this service holds the node's
    /// node lease (the node's shipper): see `handoff`. Returns whether
    /// something failed that a retry may fix.
    async fn hand_off(&mut self, bound: &Bound, flag: &Arc<AtomicBool>) -> bool {
        let Some(shipper) = self.shipper.as_mut() else {
            return false;
        };
        let lease = self.drain.lease_state();
        if !lease.as_ref().is_some_and(|s| s.held() && !s.latched) {
            shipper.stand_down();
            return false;
        }
        // While packs wait for their bundle, every step looks at every
        // owner: a step over only the owners that changed would leave the
        // waiting packs of the others out of the run, and restart their
        // linger, so a steady trickle from one owner would hold the rest
        // back for as long as it lasts.
        let lingering = shipper.linger().due().is_some();
        let only = if std::mem::take(&mut self.rescan_owners) || lingering {
            self.dirty_owners.clear();
            None
        } else {
            Some(std::mem::take(&mut self.dirty_owners))
        };
        shipper.ship(&mut self.drain, only, bound, flag).await
    }

    /// One adoption slice: (steps taken, a retryable failure, ended at a
    /// gate: no lease, something owed, own backlog).
    async fn adopt(&mut self, shared: &Shared, deadline: Instant) -> (usize, bool, bool) {
        let Some(mut adopter) = self.adopter.take() else {
            return (0, false, false);
        };
        let lease = self.drain.lease_state();
        let lease_held = lease.as_ref().is_some_and(|s| s.held());
        let latched = lease.as_ref().is_some_and(|s| s.latched);
        let slice_deadline = Instant::now() + self.adoption_slice;
        let own_uploaded = self.own_left == 0;
        let token = shared.stop.child_token();
        let flag = Arc::new(AtomicBool::new(shared.stop.is_cancelled()));
        let watcher = {
            let (t, f) = (token.clone(), flag.clone());
            tokio::spawn(async move {
                t.cancelled().await;
                f.store(true, Ordering::SeqCst);
            })
        };
        let mut env = Env {
            drain: &mut self.drain,
            held: &mut self.held,
            key_dir: self.key_dir.clone(),
            own_dir: shared.dir.clone(),
            lock: self.lock.clone(),
            bound: Bound::new(deadline, token),
            cancel_flag: flag,
        };
        let report = adopter
            .run_cycle(&mut env, |e: &Env<'_>| StepBudget {
                slice_deadline,
                flush_waiting: shared.flushes.load(Ordering::SeqCst) > 0,
                stop: shared.stop.is_cancelled(),
                latched,
                lease_held,
                owed: e.drain.owed() > 0,
                own_uploaded,
            })
            .await;
        watcher.abort();
        for e in report.errors {
            self.drain.note_error(e);
        }
        self.adopter = Some(adopter);
        let gated = matches!(
            report.paused,
            Some(Pause::NoLease | Pause::Owed | Pause::OwnBacklog)
        );
        (report.steps, report.failed, gated)
    }

    async fn shutdown(&mut self, shared: &Shared) {
        if let Some(mut adopter) = self.adopter.take() {
            let token = shared.stop.clone();
            let mut env = Env {
                drain: &mut self.drain,
                held: &mut self.held,
                key_dir: self.key_dir.clone(),
                own_dir: shared.dir.clone(),
                lock: self.lock.clone(),
                bound: Bound::new(Instant::now(), token),
                cancel_flag: Arc::new(AtomicBool::new(true)),
            };
            let b = StepBudget {
                slice_deadline: Instant::now(),
                flush_waiting: false,
                stop: true,
                latched: false,
                lease_held: false,
                owed: false,
                own_uploaded: true,
            };
            let _ = adopter.step(&mut env, &b).await;
            self.adopter = Some(adopter);
        }
        self.let_go_of_siblings().await;
        self.publish(shared);
    }

    /// Lets go of every adopted sibling whole (stop, or a failed loop):
    /// their packs stay for a successor.
    async fn let_go_of_siblings(&mut self) {
        let_go_of_all(&mut self.drain, &mut self.held).await;
    }

    fn publish(&self, shared: &Shared) {
        let c = self.drain.counters();
        let lease = self.drain.lease_state();
        let ad = self
            .adopter
            .as_ref()
            .map(|a| a.snapshot())
            .unwrap_or_default();
        let usage = self.drain.own().usage();
        // Every sink of this directory publishes its sealed-pack count into
        // its own slot: staged is their sum.
        let staged: u64 = self
            .registry
            .points_of(&shared.dir)
            .iter()
            .filter_map(|p| p.read())
            .map(|p| p.staged_packs)
            .sum();
        let snap = Snapshot {
            staged,
            uploaded: c.uploaded(),
            indexed: c.indexed(),
            pending_index: self.drain.owed() as u64,
            index_pace: self.drain.pace(),
            upload_failures: c.upload_failures(),
            stage_times: c.stage_times(),
            cancelled_uploads: c.cancelled_uploads(),
            deferred: self.own_left as u64,
            quarantined: c.quarantined(),
            bundles: c.bundles(),
            bundled_packs: c.bundled_packs(),
            orphaned_bytes: c.orphaned_bytes(),
            open_bundle: self.open_bundle(),
            rejected: c.rejected(),
            adopted_spools: ad.adopted_spools,
            adopted_packs: ad.adopted_packs,
            adoption_owed: ad.adoption_owed,
            hand_off: self
                .shipper
                .as_ref()
                .map(Shipper::counts)
                .unwrap_or_default(),
            live_siblings: ad.live_siblings,
            blocked_siblings: ad.blocked_siblings.iter().map(|b| b.dir.clone()).collect(),
            sibling_bytes: usage.dead_sibling_bytes,
            cycles: shared.cycles.load(Ordering::SeqCst),
            lease_held: lease.as_ref().is_some_and(|s| s.held()),
            lease_holder: lease.as_ref().and_then(|s| s.foreign_holder.clone()),
            latched: lease.as_ref().is_some_and(|s| s.latched),
            lease_renewals: lease.as_ref().map_or(0, |s| s.renewals),
            max_renewal_gap: lease.as_ref().and_then(|s| s.max_renewal_gap),
            lease_losses: lease.as_ref().map_or(0, |s| s.losses),
            // read live by `snapshot()` from the catalog itself
            catalog: Default::default(),
            // the lease keeper's failure talking to the catalog counts too (a
            // daemon that cannot get the lease says why)
            last_error: c.last_error().map(str::to_string).or_else(|| {
                lease
                    .as_ref()
                    .and_then(|s| s.last_error.as_ref())
                    .map(|e| format!("lease: {e}"))
            }),
            waiting_on: None,
            loop_failed: None,
            destination_refused: c.refused().map(str::to_string).or_else(|| {
                lease.as_ref().and_then(|s| {
                    s.refused
                        .as_ref()
                        .map(|e| format!("catalog {} refuses the lease: {e}", s.server))
                })
            }),
        };
        *shared.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = snap;
        *shared
            .publications
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
        shared.published.notify_all();
    }
}

/// The message of a caught panic (a `&str` or `String` payload).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    let text = payload.downcast_ref::<String>().map(String::as_str);
    text.or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
pub(crate) mod tests;
