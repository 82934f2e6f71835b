//! The sink: the producer side of a spool (SPEC §4.3).
//!
//! # What it guarantees
//!
//! - **Producers never wait for a store.** [`Sink::write`] appends a record
//!   to the open pack in memory and returns; sealing a pack (by size, record
//!   count or age) only moves it to the staging queue. Finishing the pack
//!   (footer, trailer, SHA-256) and staging it (write, fsync, link, directory
//!   fsync — [`StageTarget::stage`]) happen on the sink's own thread, one
//!   pack at a time, in seal order.
//! - **Bounded admission, never a silent drop.** Everything not yet staged
//!   (open pack, sealed queue, the pack being staged) counts against
//!   `buffer_bytes`. A record that does not fit is, by the caller's
//!   [`AdmissionPolicy`], either refused at once or waited for until a
//!   deadline; both end in an error that says why: the spool is full
//!   ([`Error::SpoolFull`]: directory, used, budget) or staging is slow or
//!   failing ([`Error::SinkBufferFull`]). While the spool is full the staging
//!   thread keeps retrying the head of its queue (backing off up to
//!   [`MAX_RETRY_BACKOFF`]), so capacity returning as the service drains is
//!   picked up without the producer doing anything.
//! - **Bounded flush.** [`Sink::flush`] seals what the sink holds, wakes the
//!   staging thread out of any backoff, and returns by its deadline: `Ok`
//!   once everything sealed before the call is staged, else
//!   [`Error::FlushTimeout`] saying how many packs and bytes are left and
//!   why. A stage stuck in the filesystem cannot hold a flush past its
//!   deadline (the flush waits on a condition variable, not on the stage).
//! - **Release.** [`Sink::release`] first stops admission (a released sink
//!   admits nothing: [`Error::SinkReleased`]), then flushes within
//!   `release_flush_timeout`. Only if that flush went through does
//!   [`Sink::sealed_on_release`] become true — it is false while attached and
//!   after a failed or timed-out release flush — and only then may the claim
//!   on the directory be let go (SPEC §7.5). A release can be retried.
//!   Dropping an unreleased sink releases it (warning if the flush fails).
//! - **Registry.** The sink publishes its slot `(dir, ordinal)` in the
//!   [`Registry`]: at open (attached, the count
//!   carried on from an earlier sink of the same slot), after each staged
//!   pack — after the stage returned, i.e. after the `.ready` link *and* the
//!   directory fsync, so a woken reader's scan sees the pack — and after
//!   `sealed_on_release` is set. Publications are made under the sink's
//!   state lock, so a late pack publication can never overwrite the
//!   release's `sealed_on_release = true`.
//!
//! # Worker ordinals
//!
//! A sink with `ordinal = Some(k)` stages under `<dir>/w<k>/` and publishes
//! to slot `(dir, Some(k))`; several sinks (one per worker) can feed one
//! rank directory, each with its own ordinal and its own slot.
//!
//! # Seams
//!
//! The sink stages through the [`StageTarget`] trait: the spool directory
//! implements it in production; `MemoryTarget` (compiled for tests and the
//! `testing` feature only) is an in-memory fake that can be full, fail, or
//! hold a stage until released.
//!
//! # Tests
//!
//! In this file: sealing by size, count and age; admission (refuse at once,
//! block until the deadline, block until space returns); a released sink
//! refusing writes; `sealed_on_release` while attached, after a release that
//! went through, after one that timed out, and after a retry; the registry
//! published after the stage returned (a woken reader sees the pack) and
//! after release; ordinals; drop releasing. Liveness bounds (flush and
//! release by their deadlines, blocked admission by its deadline) are in
//! `tests::serial`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::pack::{now_ms, PackId, PackWriter};
use crate::registry::{Publication, Registry};
use crate::spool::{Spool, SpoolConfig};

/// The longest the staging thread waits before retrying a refused stage.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// Why a stage did not happen.
#[derive(Debug)]
pub enum StageFailure {
    /// The spool is over its budget; the stage may succeed later.
    Full(Fullness),
    /// Any other failure (I/O, a vanished directory, a conflict). Retried
    /// with backoff; reported by flush and admission.
    Failed(Error),
}

/// How full a spool said it was when it refused a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fullness {
    /// Bytes in use (including what the budget charges for dead siblings).
    pub used: u64,
    /// The budget (`max_bytes`).
    pub budget: u64,
    /// The part of `used` that dead siblings hold.
    pub dead_sibling_bytes: u64,
}

/// Where a sink stages its packs: the spool directory in production, an
/// in-memory fake in tests.
pub trait StageTarget: Send + Sync + 'static {
    /// The spool directory (the registry id of the sink's slot).
    fn dir(&self) -> &Path;

    /// Stages one finished pack, under `w<ordinal>/` when `ordinal` is set.
    /// Returns only once the pack is durable: published as `<id>.ready` and
    /// its directory fsynced. Staging the same id with the same bytes again
    /// succeeds.
    fn stage(&self, ordinal: Option<u32>, id: PackId, bytes: &[u8]) -> Result<(), StageFailure>;
}

/// What a producer's write does when the sink's buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionPolicy {
    /// Wait up to this long for room, then fail with the reason.
    Block(Duration),
    /// Fail at once with the reason.
    Refuse,
}

/// How a sink opens its spool, seals, admits and releases.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// How [`Sink::open`] opens the spool directory: lock mode (`Take`, or
    /// `HeldByCaller` beside a service in the same process), lock options,
    /// budget. Ignored by [`Sink::start`], whose target is already open.
    pub spool: SpoolConfig,
    /// Worker ordinal: `Some(k)` stages under `w<k>/`.
    pub ordinal: Option<u32>,
    /// Seal a pack once it would reach this many bytes (a record larger
    /// than this gets a pack of its own).
    pub seal_bytes: u64,
    /// Seal a pack once it holds this many records.
    pub seal_records: u64,
    /// Seal a pack this long after its first record.
    pub seal_age: Duration,
    /// What a write does when the buffer is full.
    pub admission: AdmissionPolicy,
    /// At most this many bytes not yet staged are held in memory. A record
    /// is always admitted into an empty buffer, whatever its size.
    pub buffer_bytes: u64,
    /// How long a release's flush may take.
    pub release_flush_timeout: Duration,
    /// The registry to publish into.
    pub registry: Arc<Registry>,
}

impl Default for SinkConfig {
    /// 64 MiB packs, 1 M records, 5 s age, 256 MiB buffer, block 30 s,
    /// 30 s release flush, the process-wide registry.
    fn default() -> Self {
        Self {
            spool: SpoolConfig::default(),
            ordinal: None,
            seal_bytes: 64 << 20,
            seal_records: 1_000_000,
            seal_age: Duration::from_secs(5),
            admission: AdmissionPolicy::Block(Duration::from_secs(30)),
            buffer_bytes: 256 << 20,
            release_flush_timeout: Duration::from_secs(30),
            registry: Registry::global(),
        }
    }
}

/// A point-in-time view of a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkStats {
    /// Packs this sink staged (not counting earlier sinks of its slot).
    pub staged_packs: u64,
    /// The id of the last pack staged into this sink's slot.
    pub last_staged: Option<PackId>,
    /// Packs sealed (or being staged) but not staged yet.
    pub pending_packs: u64,
    /// Bytes not yet staged (open pack included).
    pub buffered_bytes: u64,
    /// How full the spool was if the last stage was refused as full.
    pub spool_full: Option<Fullness>,
    /// The last stage failure other than "full", until a stage succeeds.
    pub last_error: Option<String>,
    /// Whether the sink was released (admits nothing).
    pub released: bool,
    /// SPEC §4.3's `sealed_on_release`.
    pub sealed_on_release: bool,
}

struct OpenPack {
    writer: PackWriter,
    opened: Instant,
}

struct SealedPack {
    id: PackId,
    body: Body,
    /// Bytes this pack charges against the buffer.
    charge: u64,
}

/// A sealed pack is finished (footer, trailer, hash) on the staging thread,
/// not the producer's; a pack whose stage failed keeps its finished bytes
/// for the retry.
enum Body {
    Writer(PackWriter),
    Finished(Vec<u8>),
}

struct State {
    open: Option<OpenPack>,
    queue: VecDeque<SealedPack>,
    /// Bytes of the pack the stager holds right now (0 when idle).
    in_flight: u64,
    /// Everything not staged: open + queue + in flight.
    buffered: u64,
    /// Packs ever sealed by this sink, and how many of them are staged.
    sealed_total: u64,
    staged_total: u64,
    /// The slot's counter (carried on from earlier sinks of the slot).
    slot_count: u64,
    last_pack: Option<PackId>,
    full: Option<Fullness>,
    last_error: Option<String>,
    released: bool,
    sealed_on_release: bool,
    /// A flush is waiting: stage now, skip backoff.
    urgent: bool,
    shutdown: bool,
}

impl State {
    fn seal(&mut self) -> bool {
        match self.open.take() {
            Some(open) if open.writer.record_count() > 0 => {
                let charge = open.writer.finished_len() as u64;
                // The open pack was charged its record bytes as they came;
                // from now on it is charged what it will weigh finished.
                self.buffered = self.buffered - open.writer.bytes_len() as u64 + charge;
                self.queue.push_back(SealedPack {
                    id: open.writer.id(),
                    body: Body::Writer(open.writer),
                    charge,
                });
                self.sealed_total += 1;
                true
            }
            Some(open) => {
                self.buffered -= open.writer.bytes_len() as u64;
                false
            }
            None => false,
        }
    }

    fn cause(&self) -> String {
        if let Some(full) = self.full {
            format!(
                "the spool is full: {} of {} bytes used, {} of them by dead siblings",
                full.used, full.budget, full.dead_sibling_bytes
            )
        } else if let Some(err) = &self.last_error {
            format!("the last stage failed: {err}")
        } else if self.in_flight > 0 {
            "a stage is in progress".to_string()
        } else {
            "staging is behind".to_string()
        }
    }
}

struct Shared {
    target: Arc<dyn StageTarget>,
    /// The registry id: the spool directory, canonical.
    id: PathBuf,
    config: SinkConfig,
    state: Mutex<State>,
    /// Signalled when the stager has work (a seal, a flush, shutdown).
    work: Condvar,
    /// Signalled when the stager made progress (a pack staged or failed).
    progress: Condvar,
}

fn lock(mutex: &Mutex<State>) -> MutexGuard<'_, State> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn publish(&self, state: &State) {
        self.config.registry.publish(
            &self.id,
            self.config.ordinal,
            Publication {
                sealed_packs: state.slot_count,
                last_pack: state.last_pack,
                sealed_on_release: state.sealed_on_release,
            },
        );
    }
}

/// A producer's handle on a spool directory. `Send + Sync`: producers on
/// several threads can share one sink. See the module docs.
pub struct Sink {
    /// `None` only inside `drop`, once the staging thread is gone.
    shared: Option<Arc<Shared>>,
    stager: Mutex<Option<JoinHandle<()>>>,
    /// The spool [`Sink::open`] opened: if it holds the claim (`take`
    /// mode), the claim is released when the sink is dropped after sealing
    /// on release, and kept until process exit otherwise.
    spool: Option<Arc<Spool>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("dir", &self.shared().id)
            .field("ordinal", &self.shared().config.ordinal)
            .finish()
    }
}

impl Sink {
    /// Opens the spool directory `dir` per `config.spool` (node-local
    /// check, owner lock per mode, accounting walk) and starts a sink on it.
    pub fn open(dir: &Path, config: SinkConfig) -> Result<Sink, Error> {
        let spool = Arc::new(Spool::open(dir, &config.spool)?);
        let mut sink = Sink::start(spool.clone(), config)?;
        sink.spool = Some(spool);
        Ok(sink)
    }

    /// Opens the directory of `claim` (a rank directory this process
    /// claimed, e.g. with [`crate::layout::claim_rank_dir`]) and starts a
    /// sink on it that owns the claim, as [`Sink::open`] in mode `Take`
    /// owns the lock it took: dropped after sealing on release, the sink
    /// releases the claim (the directory stays, a dead sibling for the
    /// node's adopter, SPEC §1 "sink-only"); dropped unsealed, the claim is
    /// kept until the process exits. A failed open releases the claim.
    pub fn open_claimed(claim: spool_lock::Claim, config: SinkConfig) -> Result<Sink, Error> {
        let spool = Arc::new(Spool::open_claimed(claim, &config.spool)?);
        match Sink::start(spool.clone(), config) {
            Ok(mut sink) => {
                sink.spool = Some(spool);
                Ok(sink)
            }
            Err(err) => {
                if let Some(claim) = Arc::try_unwrap(spool).ok().and_then(Spool::into_claim) {
                    let _ = claim.release_and_remove_if_empty();
                }
                Err(err)
            }
        }
    }

    /// Starts a sink staging into `target`: checks the config, publishes the
    /// slot as attached, and starts the staging thread.
    pub fn start(target: Arc<dyn StageTarget>, config: SinkConfig) -> Result<Sink, Error> {
        let dir = target.dir().to_path_buf();
        let bad = |why: &str| {
            Err(Error::SinkConfig {
                dir: dir.clone(),
                why: why.to_string(),
            })
        };
        if config.seal_bytes == 0 {
            return bad("seal_bytes must be at least 1");
        }
        if config.seal_records == 0 {
            return bad("seal_records must be at least 1");
        }
        if config.buffer_bytes == 0 {
            return bad("buffer_bytes must be at least 1");
        }
        if config.seal_age.is_zero() {
            return bad("seal_age must be longer than zero");
        }
        let id = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        let point = config.registry.get_or_create(&id, config.ordinal);
        let carried = point.read().map_or(0, |p| p.sealed_packs);
        let last_pack = point.read().and_then(|p| p.last_pack);
        let shared = Arc::new(Shared {
            target,
            id,
            config,
            state: Mutex::new(State {
                open: None,
                queue: VecDeque::new(),
                in_flight: 0,
                buffered: 0,
                sealed_total: 0,
                staged_total: 0,
                slot_count: carried,
                last_pack,
                full: None,
                last_error: None,
                released: false,
                sealed_on_release: false,
                urgent: false,
                shutdown: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
        });
        shared.publish(&lock(&shared.state));
        let name = match shared.config.ordinal {
            Some(k) => format!("spool-sink-w{k}"),
            None => "spool-sink".to_string(),
        };
        let for_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || stager(&for_thread))
            .map_err(|source| Error::SinkThread {
                dir: dir.clone(),
                source,
            })?;
        tracing::debug!(dir = %dir.display(), ordinal = ?shared.config.ordinal, "sink for {} started", dir.display());
        Ok(Sink {
            shared: Some(shared),
            stager: Mutex::new(Some(handle)),
            spool: None,
        })
    }

    fn shared(&self) -> &Shared {
        self.shared
            .as_ref()
            .expect("a sink's state lives until it is dropped")
    }

    /// The spool directory this sink stages into (canonical).
    pub fn dir(&self) -> &Path {
        &self.shared().id
    }

    /// The sink's worker ordinal.
    pub fn ordinal(&self) -> Option<u32> {
        self.shared().config.ordinal
    }

    /// What a [`Sink::write`] does when the buffer is full.
    pub fn admission(&self) -> AdmissionPolicy {
        self.shared().config.admission
    }

    /// Appends one record. Returns once it is in the sink's buffer (not
    /// staged: see [`Sink::flush`]); when the buffer is full, waits or
    /// refuses per the [`AdmissionPolicy`].
    pub fn write(&self, record: &[u8]) -> Result<(), Error> {
        self.write_with(record, self.shared().config.admission)
    }

    /// [`Sink::write`] with this call's own [`AdmissionPolicy`] instead of
    /// the configured one. A caller that must not wait while it holds
    /// something (the Python binding holds the GIL) tries with
    /// [`AdmissionPolicy::Refuse`] first and only blocks, having let go,
    /// when that refuses.
    pub fn write_with(&self, record: &[u8], admission: AdmissionPolicy) -> Result<(), Error> {
        let shared = self.shared();
        let config = &shared.config;
        // A record costs its length prefix and its bytes.
        let cost = record.len() as u64 + 4;
        let mut state = lock(&shared.state);
        let deadline = match admission {
            AdmissionPolicy::Block(timeout) => Some(Instant::now() + timeout),
            AdmissionPolicy::Refuse => None,
        };
        loop {
            if state.released {
                return Err(Error::SinkReleased {
                    dir: shared.id.clone(),
                });
            }
            if state.buffered == 0 || state.buffered + cost <= config.buffer_bytes {
                break;
            }
            let now = Instant::now();
            match deadline {
                Some(deadline) if now < deadline => {
                    // Make sure what we hold is on its way while we wait.
                    shared.work.notify_one();
                    state = shared
                        .progress
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                _ => return Err(self.not_admitted(&state)),
            }
        }

        // Seal first if this record would take the open pack past seal_bytes.
        let would_exceed = state.open.as_ref().is_some_and(|open| {
            open.writer.record_count() > 0
                && open.writer.finished_len() as u64 + cost > config.seal_bytes
        });
        if would_exceed && state.seal() {
            shared.work.notify_one();
        }
        let first = state.open.is_none();
        let open = state.open.get_or_insert_with(|| {
            let writer = PackWriter::new(PackId::generate(), now_ms());
            OpenPack {
                writer,
                opened: Instant::now(),
            }
        });
        let before = open.writer.bytes_len() as u64;
        open.writer.push_record(record);
        let grew = open.writer.bytes_len() as u64 - before;
        let reached = open.writer.finished_len() as u64 >= config.seal_bytes
            || open.writer.record_count() >= config.seal_records;
        let header = if first { before } else { 0 };
        state.buffered += grew + header;
        if reached {
            state.seal();
            shared.work.notify_one();
        } else if first {
            // Arm the stager's age timer for this pack.
            shared.work.notify_one();
        }
        Ok(())
    }

    fn not_admitted(&self, state: &State) -> Error {
        let shared = self.shared();
        match state.full {
            Some(full) => Error::SpoolFull {
                dir: shared.id.clone(),
                used: full.used,
                budget: full.budget,
                dead_sibling_bytes: full.dead_sibling_bytes,
                buffered: state.buffered,
                buffer_bytes: shared.config.buffer_bytes,
            },
            None => Error::SinkBufferFull {
                dir: shared.id.clone(),
                buffered: state.buffered,
                buffer_bytes: shared.config.buffer_bytes,
                cause: state.cause(),
            },
        }
    }

    /// Seals what the sink holds and waits until every pack sealed so far is
    /// staged, or until `timeout` passes ([`Error::FlushTimeout`]). Returns
    /// by its deadline whatever the filesystem does.
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        let shared = self.shared();
        let deadline = Instant::now() + timeout;
        let mut state = lock(&shared.state);
        state.seal();
        let target = state.sealed_total;
        state.urgent = true;
        shared.work.notify_one();
        while state.staged_total < target {
            let now = Instant::now();
            if now >= deadline {
                let packs = target - state.staged_total;
                return Err(Error::FlushTimeout {
                    dir: shared.id.clone(),
                    timeout,
                    packs,
                    bytes: state.buffered,
                    cause: state.cause(),
                });
            }
            state = shared
                .progress
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    /// Stops admission, then flushes within `release_flush_timeout`. On
    /// success `sealed_on_release` becomes true and is published; on failure
    /// it stays false, the error says what was left, and the release may be
    /// retried. A sink already sealed on release returns `Ok` at once.
    pub fn release(&self) -> Result<(), Error> {
        let shared = self.shared();
        {
            let mut state = lock(&shared.state);
            if state.sealed_on_release {
                return Ok(());
            }
            state.released = true;
        }
        // Producers blocked in admission see `released` and return.
        shared.progress.notify_all();
        match self.flush(shared.config.release_flush_timeout) {
            Ok(()) => {
                let mut state = lock(&shared.state);
                state.sealed_on_release = true;
                shared.publish(&state);
                tracing::debug!(dir = %shared.id.display(), "sink for {} sealed on release", shared.id.display());
                Ok(())
            }
            Err(err) => {
                tracing::warn!(dir = %shared.id.display(), "release of the sink for {} did not seal: {err}", shared.id.display());
                Err(err)
            }
        }
    }

    /// True only after a release whose flush went through.
    pub fn sealed_on_release(&self) -> bool {
        lock(&self.shared().state).sealed_on_release
    }

    /// A point-in-time view of the sink.
    pub fn stats(&self) -> SinkStats {
        let state = lock(&self.shared().state);
        SinkStats {
            staged_packs: state.staged_total,
            last_staged: state.last_pack,
            pending_packs: state.sealed_total - state.staged_total,
            buffered_bytes: state.buffered,
            spool_full: state.full,
            last_error: state.last_error.clone(),
            released: state.released,
            sealed_on_release: state.sealed_on_release,
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let shared = self.shared();
        if !lock(&shared.state).sealed_on_release {
            // release() logs its own failure.
            let _ = self.release();
        }
        let (idle, sealed) = {
            let mut state = lock(&shared.state);
            state.shutdown = true;
            (
                state.in_flight == 0 && state.queue.is_empty(),
                state.sealed_on_release,
            )
        };
        shared.work.notify_all();
        let handle = self
            .stager
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(handle) = handle else { return };
        if !idle {
            // The thread makes one last attempt at what it holds and exits
            // on its own; a drop does not wait on a stuck stage. The spool
            // (and its claim, if it has one) stays with the thread.
            return;
        }
        let _ = handle.join();
        // The thread is gone; drop our share of the target so the spool is
        // ours alone, then let go of its claim only if the sink sealed.
        drop(self.shared.take());
        let Some(spool) = self.spool.take() else {
            return;
        };
        let Ok(spool) = Arc::try_unwrap(spool) else {
            return;
        };
        let dir = spool.dir().to_path_buf();
        match spool.into_claim() {
            Some(claim) if sealed => {
                if let Err(err) = claim.release() {
                    tracing::warn!(dir = %dir.display(), "releasing the claim on {}: {err}", dir.display());
                }
            }
            // Not sealed: dropping the claim keeps the lock until this
            // process exits (spool-lock warns, naming the directory), so
            // the next process adopts what is left.
            other => drop(other),
        }
    }
}

/// The staging thread: seals by age, finishes and stages packs in order,
/// retries refused stages with backoff, publishes after each stage.
fn stager(shared: &Shared) {
    let config = &shared.config;
    let mut backoff = FIRST_RETRY_BACKOFF;
    let mut state = lock(&shared.state);
    loop {
        // Seal by age.
        if let Some(open) = &state.open {
            if open.writer.record_count() > 0 && open.opened.elapsed() >= config.seal_age {
                state.seal();
            }
        }
        if let Some(pack) = state.queue.pop_front() {
            let charge = pack.charge;
            state.in_flight = charge;
            drop(state);
            let id = pack.id;
            let bytes = match pack.body {
                Body::Writer(writer) => writer.finish(),
                Body::Finished(bytes) => bytes,
            };
            let result = shared.target.stage(config.ordinal, id, &bytes);
            state = lock(&shared.state);
            state.in_flight = 0;
            match result {
                Ok(()) => {
                    backoff = FIRST_RETRY_BACKOFF;
                    state.buffered -= charge;
                    state.staged_total += 1;
                    state.slot_count += 1;
                    state.last_pack = Some(id);
                    state.full = None;
                    state.last_error = None;
                    // After the stage returned: the pack is linked and its
                    // directory fsynced, so a woken reader's scan sees it.
                    shared.publish(&state);
                    shared.progress.notify_all();
                    continue;
                }
                Err(failure) => {
                    match failure {
                        StageFailure::Full(full) => {
                            let Fullness { used, budget, .. } = full;
                            if state.full.is_none() {
                                tracing::warn!(dir = %shared.id.display(), "spool directory {} is full ({used} of {budget} bytes): pack {} waits in the sink", shared.id.display(), id.to_hex());
                            }
                            state.full = Some(full);
                        }
                        StageFailure::Failed(err) => {
                            tracing::warn!(dir = %shared.id.display(), "staging pack {} into {} failed (will retry): {err}", id.to_hex(), shared.id.display());
                            state.full = None;
                            state.last_error = Some(err.to_string());
                        }
                    }
                    // Keep the pack (same id, same bytes: a retry is an
                    // idempotent stage) at the front of the queue.
                    state.queue.push_front(SealedPack {
                        id,
                        body: Body::Finished(bytes),
                        charge,
                    });
                    shared.progress.notify_all();
                    if state.shutdown {
                        let lost = state.queue.len();
                        tracing::error!(dir = %shared.id.display(), "sink for {} stopped with {lost} pack(s) ({} bytes) not staged: {}", shared.id.display(), state.buffered, state.cause());
                        return;
                    }
                    if !state.urgent {
                        state = shared
                            .work
                            .wait_timeout(state, backoff)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                        backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                    } else {
                        // A flush is waiting: retry after a short pause, not
                        // a spin.
                        state.urgent = false;
                        state = shared
                            .work
                            .wait_timeout(state, FIRST_RETRY_BACKOFF)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                    }
                    continue;
                }
            }
        }
        state.urgent = false;
        if state.shutdown {
            return;
        }
        // Nothing to stage: sleep until work or the open pack's age.
        let wait = state
            .open
            .as_ref()
            .filter(|open| open.writer.record_count() > 0)
            .map(|open| config.seal_age.saturating_sub(open.opened.elapsed()));
        state = match wait {
            Some(wait) => {
                shared
                    .work
                    .wait_timeout(state, wait)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            }
            None => shared
                .work
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        };
    }
}

/// The production target: the spool directory. `stage` returns after the
/// publish and the directory fsync (SPEC §4.2).
impl StageTarget for Spool {
    fn dir(&self) -> &Path {
        Spool::dir(self)
    }

    fn stage(&self, ordinal: Option<u32>, id: PackId, bytes: &[u8]) -> Result<(), StageFailure> {
        match Spool::stage(self, ordinal, id, bytes) {
            Ok(_) => Ok(()),
            Err(Error::Full {
                used,
                budget,
                dead_sibling_bytes,
                ..
            }) => Err(StageFailure::Full(Fullness {
                used,
                budget,
                dead_sibling_bytes,
            })),
            Err(err) => Err(StageFailure::Failed(err)),
        }
    }
}

/// An in-memory [`StageTarget`] for tests: can be full, fail, or hold
/// stages at a gate. Compiled only for tests and the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub mod fake {
    use super::*;

    /// One pack the fake staged.
    #[derive(Debug, Clone)]
    pub struct Staged {
        /// The sink's ordinal.
        pub ordinal: Option<u32>,
        /// The pack id.
        pub id: PackId,
        /// The pack's bytes.
        pub bytes: Vec<u8>,
    }

    #[derive(Default)]
    struct Inner {
        staged: Vec<Staged>,
        budget: Option<u64>,
        fail: Option<String>,
        gate_closed: bool,
        /// Stages currently inside `stage` (waiting at the gate or not).
        entered: u64,
        attempts: u64,
    }

    /// The fake. `dir` is only a name (nothing touches the filesystem).
    pub struct MemoryTarget {
        dir: PathBuf,
        inner: Mutex<Inner>,
        gate: Condvar,
    }

    impl MemoryTarget {
        /// A fake with no budget, no failure, gate open.
        pub fn new(dir: impl Into<PathBuf>) -> Arc<MemoryTarget> {
            Arc::new(MemoryTarget {
                dir: dir.into(),
                inner: Mutex::new(Inner::default()),
                gate: Condvar::new(),
            })
        }

        fn inner(&self) -> MutexGuard<'_, Inner> {
            self.inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Refuse stages that would take the staged total past `budget`.
        pub fn set_budget(&self, budget: Option<u64>) {
            self.inner().budget = budget;
        }

        /// Fail every stage with this message (`None`: stop failing).
        pub fn set_failure(&self, message: Option<&str>) {
            self.inner().fail = message.map(str::to_string);
        }

        /// Close the gate: stages block inside `stage` until it opens.
        pub fn close_gate(&self) {
            self.inner().gate_closed = true;
        }

        /// Open the gate.
        pub fn open_gate(&self) {
            self.inner().gate_closed = false;
            self.gate.notify_all();
        }

        /// What was staged, in order.
        pub fn staged(&self) -> Vec<Staged> {
            self.inner().staged.clone()
        }

        /// Stages inside `stage` right now.
        pub fn entered(&self) -> u64 {
            self.inner().entered
        }

        /// Calls of `stage` so far.
        pub fn attempts(&self) -> u64 {
            self.inner().attempts
        }

        /// Bytes staged.
        pub fn used(&self) -> u64 {
            self.inner()
                .staged
                .iter()
                .map(|s| s.bytes.len() as u64)
                .sum()
        }
    }

    impl StageTarget for MemoryTarget {
        fn dir(&self) -> &Path {
            &self.dir
        }

        fn stage(
            &self,
            ordinal: Option<u32>,
            id: PackId,
            bytes: &[u8],
        ) -> Result<(), StageFailure> {
            let mut inner = self.inner();
            inner.attempts += 1;
            inner.entered += 1;
            while inner.gate_closed {
                inner = self
                    .gate
                    .wait(inner)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            inner.entered -= 1;
            if let Some(message) = &inner.fail {
                return Err(StageFailure::Failed(Error::Io {
                    op: "stage",
                    path: self.dir.join(id.to_hex()),
                    source: std::io::Error::other(message.clone()),
                }));
            }
            let used: u64 = inner.staged.iter().map(|s| s.bytes.len() as u64).sum();
            if let Some(budget) = inner.budget {
                if used + bytes.len() as u64 > budget {
                    return Err(StageFailure::Full(Fullness {
                        used,
                        budget,
                        dead_sibling_bytes: 0,
                    }));
                }
            }
            if let Some(existing) = inner.staged.iter().find(|s| s.id == id) {
                assert_eq!(existing.bytes, bytes, "a re-stage carries the same bytes");
                return Ok(());
            }
            inner.staged.push(Staged {
                ordinal,
                id,
                bytes: bytes.to_vec(),
            });
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::MemoryTarget;
    use super::*;
    use crate::registry::Waker;

    const DIR: &str = "/nonexistent/spool/key/r0-0000abcd";

    /// What an empty pack weighs finished (header, footer, trailer).
    fn overhead() -> u64 {
        PackWriter::new(PackId::generate(), 0).finished_len() as u64
    }

    fn config(registry: &Arc<Registry>) -> SinkConfig {
        SinkConfig {
            spool: SpoolConfig::default(),
            ordinal: None,
            seal_bytes: 1 << 20,
            seal_records: 1_000,
            seal_age: Duration::from_secs(3600),
            admission: AdmissionPolicy::Refuse,
            buffer_bytes: 16 << 20,
            release_flush_timeout: Duration::from_secs(10),
            registry: registry.clone(),
        }
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn open(target: &Arc<MemoryTarget>, config: SinkConfig) -> Sink {
        Sink::start(target.clone(), config).expect("sink starts")
    }

    /// A fresh registry, an open fake, and a sink on it with `adjust`ed
    /// settings.
    fn sink_with(adjust: impl FnOnce(&mut SinkConfig)) -> (Arc<Registry>, Arc<MemoryTarget>, Sink) {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        let mut config = config(&registry);
        adjust(&mut config);
        let sink = open(&target, config);
        (registry, target, sink)
    }

    #[test]
    fn open_claimed_owns_the_claim_released_after_sealing_kept_when_not() {
        let root = tempfile::tempdir().unwrap();
        let key = "0123456789ab";
        let opts = spool_lock::LockOptions::default();
        let registry = Arc::new(Registry::new());
        // Sealed on release: the drop lets go of the claim, the pack stays.
        let claim = crate::layout::claim_rank_dir(root.path(), key, 0, &opts).unwrap();
        let dir = claim.dir().to_path_buf();
        let sink = Sink::open_claimed(claim, config(&registry)).unwrap();
        assert!(spool_lock::held_by_this_process(&dir).unwrap());
        sink.write(b"one").unwrap();
        sink.release().unwrap();
        drop(sink);
        assert!(!spool_lock::read_owner(&dir).unwrap().held, "released");
        assert!(!spool_lock::held_claims().contains(&dir));
        let ready = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "ready"))
            .count();
        assert_eq!(ready, 1, "the pack stays for the adopter");
        // Not sealed (its spool refuses every stage): the claim is kept.
        let claim = crate::layout::claim_rank_dir(root.path(), key, 1, &opts).unwrap();
        let dir = claim.dir().to_path_buf();
        let mut cfg = config(&registry);
        cfg.spool.max_bytes = Some(8);
        cfg.release_flush_timeout = Duration::from_millis(100);
        let sink = Sink::open_claimed(claim, cfg).unwrap();
        sink.write(b"too big for the budget").unwrap();
        assert!(sink.release().is_err());
        drop(sink);
        assert!(
            spool_lock::held_claims().contains(&dir),
            "an unsealed sink keeps its claim until exit"
        );
    }

    #[test]
    fn seals_by_record_count() {
        let (_, target, sink) = sink_with(|c| {
            c.seal_records = 3;
        });
        for i in 0..7u8 {
            sink.write(&[i; 10]).unwrap();
        }
        wait_for("two full packs staged", || target.staged().len() == 2);
        assert_eq!(
            sink.stats().pending_packs,
            0,
            "the seventh record is still open"
        );
        sink.flush(Duration::from_secs(10)).unwrap();
        let staged = target.staged();
        assert_eq!(staged.len(), 3);
        let one_record = overhead() + 4 + 10;
        assert_eq!(staged[0].bytes.len() as u64, one_record + 2 * 14);
        assert_eq!(staged[2].bytes.len() as u64, one_record);
    }

    #[test]
    fn seals_by_size_without_exceeding_it() {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        // Room for exactly three 100-byte records per pack.
        let seal_bytes = overhead() + 3 * 104;
        let sink = open(
            &target,
            SinkConfig {
                seal_bytes,
                ..config(&registry)
            },
        );
        for _ in 0..9 {
            sink.write(&[7; 100]).unwrap();
        }
        wait_for("three packs", || target.staged().len() == 3);
        // Two records, then one that would not fit beside them: the open
        // pack is sealed before it.
        sink.write(&[1; 100]).unwrap();
        sink.write(&[1; 100]).unwrap();
        sink.write(&[1; 105]).unwrap();
        sink.flush(Duration::from_secs(10)).unwrap();
        let staged = target.staged();
        assert_eq!(staged.len(), 5);
        assert!(staged.iter().all(|s| s.bytes.len() as u64 <= seal_bytes));
        // A record larger than seal_bytes gets a pack of its own.
        sink.write(&vec![2; seal_bytes as usize]).unwrap();
        wait_for("the oversized pack", || target.staged().len() == 6);
    }

    #[test]
    fn a_released_sink_admits_nothing() {
        let (_, target, sink) = sink_with(|_| {});
        sink.write(b"one").unwrap();
        sink.release().unwrap();
        let err = sink.write(b"two").unwrap_err();
        assert!(matches!(err, Error::SinkReleased { .. }), "{err}");
        assert!(err.to_string().contains(DIR), "{err}");
        assert_eq!(
            target.staged().len(),
            1,
            "what it held was staged on release"
        );
    }

    #[test]
    fn sealed_on_release_only_after_a_release_whose_flush_went_through() {
        let (registry, _, sink) = sink_with(|_| {});
        let point = registry.get_or_create(Path::new(DIR), None);
        assert!(!sink.sealed_on_release(), "false while attached");
        assert_eq!(point.read().map(|p| p.sealed_on_release), Some(false));
        sink.write(b"record").unwrap();
        sink.flush(Duration::from_secs(10)).unwrap();
        assert!(!sink.sealed_on_release(), "a flush is not a release");
        sink.release().unwrap();
        assert!(sink.sealed_on_release());
        let published = point.read().unwrap();
        assert!(published.sealed_on_release);
        assert_eq!(published.sealed_packs, 1);
        sink.release().unwrap();
        assert!(sink.sealed_on_release(), "a second release changes nothing");
    }

    #[test]
    fn a_release_whose_stage_fails_does_not_seal() {
        let (registry, target, sink) = sink_with(|c| {
            c.release_flush_timeout = Duration::from_millis(200);
        });
        sink.write(b"record").unwrap();
        target.set_failure(Some("disk on fire"));
        let err = sink.release().unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::FlushTimeout { packs: 1, .. }),
            "{text}"
        );
        assert!(text.contains("disk on fire"), "{text}");
        assert!(!sink.sealed_on_release());
        let point = registry.get_or_create(Path::new(DIR), None);
        assert_eq!(point.read().map(|p| p.sealed_on_release), Some(false));
        assert!(matches!(sink.write(b"x"), Err(Error::SinkReleased { .. })));
        // The failure clears: a retried release goes through.
        target.set_failure(None);
        sink.release().unwrap();
        assert!(sink.sealed_on_release());
        assert_eq!(target.staged().len(), 1);
    }

    #[test]
    fn registry_is_published_only_after_the_stage_returned() {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        let reader = registry.register_waker(Waker::current_thread());
        let sink = open(
            &target,
            SinkConfig {
                seal_records: 1,
                ..config(&registry)
            },
        );
        let point = registry.get_or_create(Path::new(DIR), None);
        reader.take_dirty();
        target.close_gate();
        sink.write(b"held at the gate").unwrap();
        wait_for("the stage to be in progress", || target.entered() == 1);
        assert!(
            reader.take_dirty().is_empty(),
            "nothing published mid-stage"
        );
        assert_eq!(point.read().unwrap().last_pack, None);
        target.open_gate();
        // A woken reader drains, then reads the point, then looks for the pack.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let dirty = reader.take_dirty();
            if dirty.contains(Path::new(DIR)) {
                let published = point.read().unwrap();
                let last = published.last_pack.expect("a pack was published");
                assert!(
                    target.staged().iter().any(|s| s.id == last),
                    "the woken reader finds the published pack staged"
                );
                assert_eq!(published.sealed_packs, 1);
                break;
            }
            assert!(Instant::now() < deadline, "never woken");
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }

    #[test]
    fn ordinals_get_their_own_slots_and_carry_the_count_over() {
        let (registry, target, w3) = sink_with(|c| {
            c.ordinal = Some(3);
            c.seal_records = 1;
        });
        let w5 = open(
            &target,
            SinkConfig {
                ordinal: Some(5),
                seal_records: 1,
                ..config(&registry)
            },
        );
        w3.write(b"a").unwrap();
        w3.write(b"b").unwrap();
        w5.write(b"c").unwrap();
        w3.flush(Duration::from_secs(10)).unwrap();
        w5.flush(Duration::from_secs(10)).unwrap();
        let ordinals: Vec<_> = target.staged().iter().map(|s| s.ordinal).collect();
        assert_eq!(ordinals.iter().filter(|o| **o == Some(3)).count(), 2);
        assert_eq!(ordinals.iter().filter(|o| **o == Some(5)).count(), 1);
        let slots = registry.points_of(Path::new(DIR));
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[0].read().unwrap().sealed_packs, 2);
        assert_eq!(slots[1].read().unwrap().sealed_packs, 1);
        drop(w3);
        // A new sink on the same slot continues the counter, attached again.
        let again = open(
            &target,
            SinkConfig {
                ordinal: Some(3),
                seal_records: 1,
                ..config(&registry)
            },
        );
        let point = registry.get_or_create(Path::new(DIR), Some(3));
        assert_eq!(point.read().unwrap().sealed_packs, 2);
        assert!(!point.read().unwrap().sealed_on_release);
        again.write(b"d").unwrap();
        again.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(point.read().unwrap().sealed_packs, 3);
    }

    #[test]
    fn dropping_an_unreleased_sink_releases_it() {
        let (registry, target, sink) = sink_with(|_| {});
        sink.write(b"tail").unwrap();
        drop(sink);
        assert_eq!(target.staged().len(), 1, "the tail was sealed and staged");
        let point = registry.get_or_create(Path::new(DIR), None);
        assert!(point.read().unwrap().sealed_on_release);
    }

    #[test]
    fn concurrent_producers_lose_nothing() {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        let sink = Arc::new(open(
            &target,
            SinkConfig {
                seal_records: 7,
                buffer_bytes: 4096,
                admission: AdmissionPolicy::Block(Duration::from_secs(30)),
                ..config(&registry)
            },
        ));
        let producers: Vec<_> = (0..4u8)
            .map(|p| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..250u32 {
                        let mut record = vec![p];
                        record.extend_from_slice(&i.to_le_bytes());
                        sink.write(&record).unwrap();
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        sink.flush(Duration::from_secs(30)).unwrap();
        let mut seen = vec![Vec::new(); 4];
        for staged in target.staged() {
            crate::pack::validate_bytes(&staged.bytes, Some(staged.id)).expect("a valid pack");
            let mut reader = crate::PackReader::new(&staged.bytes[..]).unwrap();
            while let Some(record) = reader.next_record().unwrap() {
                let i = u32::from_le_bytes(record[1..5].try_into().unwrap());
                seen[record[0] as usize].push(i);
            }
        }
        for (p, order) in seen.iter().enumerate() {
            assert_eq!(
                *order,
                (0..250).collect::<Vec<u32>>(),
                "producer {p}: every record once, in order"
            );
        }
        assert_eq!(sink.stats().buffered_bytes, 0);
    }

    #[test]
    fn bad_configs_are_refused() {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        for bad in [
            SinkConfig {
                seal_bytes: 0,
                ..config(&registry)
            },
            SinkConfig {
                seal_records: 0,
                ..config(&registry)
            },
            SinkConfig {
                buffer_bytes: 0,
                ..config(&registry)
            },
            SinkConfig {
                seal_age: Duration::ZERO,
                ..config(&registry)
            },
        ] {
            let err = Sink::start(target.clone(), bad).unwrap_err();
            assert!(matches!(err, Error::SinkConfig { .. }), "{err}");
        }
    }

    /// The sink on a real spool directory.
    mod on_disk {
        use super::*;
        use crate::lk::LockMode;
        use std::sync::atomic::AtomicBool;

        fn real_config(registry: &Arc<Registry>) -> SinkConfig {
            SinkConfig {
                seal_records: 1,
                ..config(registry)
            }
        }

        #[test]
        fn an_ordinal_stages_valid_packs_under_its_worker_directory() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("r0-00000001");
            let registry = Arc::new(Registry::new());
            let sink = Sink::open(
                &dir,
                SinkConfig {
                    ordinal: Some(4),
                    ..real_config(&registry)
                },
            )
            .unwrap();
            sink.write(b"hello").unwrap();
            sink.flush(Duration::from_secs(10)).unwrap();
            let id = sink.stats().last_staged.unwrap();
            let path = dir.join("w4").join(format!("{}.ready", id.to_hex()));
            crate::spool::validate_file(&path, id, &AtomicBool::new(false)).unwrap();
            assert!(!dir.join(format!("{}.ready", id.to_hex())).exists());
            let point = registry.get_or_create(sink.dir(), Some(4));
            assert_eq!(point.read().unwrap().last_pack, Some(id));
        }

        #[test]
        fn a_woken_readers_scan_sees_every_published_pack() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("r0-00000001");
            let registry = Arc::new(Registry::new());
            let sink = Sink::open(&dir, real_config(&registry)).unwrap();
            let id = sink.dir().to_path_buf();
            let reader = registry.register_waker(Waker::current_thread());
            let producer = {
                let sink = Arc::new(sink);
                let s = sink.clone();
                (
                    std::thread::spawn(move || {
                        for i in 0..50u32 {
                            s.write(&i.to_le_bytes()).unwrap();
                        }
                        s.flush(Duration::from_secs(30)).unwrap();
                    }),
                    sink,
                )
            };
            let point = registry.get_or_create(&id, None);
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut checked = 0;
            loop {
                reader.take_dirty();
                let published = point.read().unwrap();
                if let Some(last) = published.last_pack {
                    let ready = crate::spool::scan_dir(&id, &AtomicBool::new(false)).unwrap();
                    assert!(
                        ready.iter().any(|p| p.id == last),
                        "published pack {} is not in the scan",
                        last.to_hex()
                    );
                    assert!(ready.len() as u64 >= published.sealed_packs);
                    checked += 1;
                }
                if published.sealed_packs == 50 {
                    break;
                }
                assert!(Instant::now() < deadline, "never saw all 50 packs");
                std::thread::park_timeout(Duration::from_secs(5));
            }
            assert!(checked > 0);
            producer.0.join().unwrap();
        }

        #[test]
        fn the_claim_is_let_go_only_after_sealing_on_release() {
            let tmp = tempfile::tempdir().unwrap();
            let registry = Arc::new(Registry::new());

            // Sealed: the claim is released with the sink.
            let sealed = tmp.path().join("r0-00000001");
            let sink = Sink::open(&sealed, real_config(&registry)).unwrap();
            sink.write(b"x").unwrap();
            sink.release().unwrap();
            drop(sink);
            Spool::open(&sealed, &SpoolConfig::default()).expect("the claim was let go");

            // Not sealed (the spool is full): the claim is kept.
            let kept = tmp.path().join("r0-00000002");
            let spool = SpoolConfig {
                max_bytes: Some(10),
                ..SpoolConfig::default()
            };
            let sink = Sink::open(
                &kept,
                SinkConfig {
                    spool,
                    release_flush_timeout: Duration::from_millis(100),
                    ..real_config(&registry)
                },
            )
            .unwrap();
            sink.write(b"x").unwrap();
            assert!(sink.release().is_err());
            assert!(!sink.sealed_on_release());
            drop(sink);
            let err = Spool::open(&kept, &SpoolConfig::default()).unwrap_err();
            assert!(matches!(err, Error::Lock(_)), "{err}");
        }

        #[test]
        fn held_by_caller_stages_beside_the_callers_claim() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("r0-00000001");
            let registry = Arc::new(Registry::new());
            let owner = Spool::open(&dir, &SpoolConfig::default()).unwrap();
            let spool = SpoolConfig {
                lock_mode: LockMode::HeldByCaller,
                ..SpoolConfig::default()
            };
            let sink = Sink::open(
                &dir,
                SinkConfig {
                    spool,
                    ..real_config(&registry)
                },
            )
            .unwrap();
            sink.write(b"x").unwrap();
            sink.release().unwrap();
            drop(sink);
            assert_eq!(owner.scan(&AtomicBool::new(false)).unwrap().len(), 1);
        }
    }

    /// Liveness bounds: run one at a time (nextest `serial` group).
    mod serial {
        use super::*;

        const BOUND: Duration = Duration::from_secs(1);

        /// A target that is full, and a sink whose buffer holds one pack.
        fn full_sink(admission: AdmissionPolicy) -> (Arc<MemoryTarget>, Sink) {
            let registry = Arc::new(Registry::new());
            let target = MemoryTarget::new(DIR);
            target.set_budget(Some(0));
            let sink = open(
                &target,
                SinkConfig {
                    seal_records: 1,
                    buffer_bytes: 2 * (overhead() + 104),
                    admission,
                    // The drop at the end releases against a full spool.
                    release_flush_timeout: Duration::from_millis(100),
                    ..config(&registry)
                },
            );
            (target, sink)
        }

        fn fill(target: &MemoryTarget, sink: &Sink) {
            sink.write(&[0; 100]).unwrap();
            sink.write(&[0; 100]).unwrap();
            wait_for("a refused stage", || {
                target.attempts() > 0 && sink.stats().spool_full.is_some()
            });
        }

        #[test]
        fn seals_by_age() {
            let (_, target, sink) = sink_with(|c| {
                c.seal_age = Duration::from_millis(100);
            });
            let start = Instant::now();
            sink.write(b"lonely").unwrap();
            wait_for("the age seal", || target.staged().len() == 1);
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(100), "sealed early: {took:?}");
            assert!(
                took < Duration::from_millis(100) + BOUND,
                "sealed late: {took:?}"
            );
        }

        #[test]
        fn refuse_returns_at_once_naming_dir_used_and_budget() {
            let (target, sink) = full_sink(AdmissionPolicy::Refuse);
            fill(&target, &sink);
            let start = Instant::now();
            let err = sink.write(&[0; 100]).unwrap_err();
            assert!(start.elapsed() < BOUND, "refused at once");
            let text = err.to_string();
            assert!(
                matches!(
                    err,
                    Error::SpoolFull {
                        used: 0,
                        budget: 0,
                        ..
                    }
                ),
                "{text}"
            );
            assert!(
                text.contains(DIR) && text.contains("0 of 0 bytes used"),
                "{text}"
            );
            assert_eq!(target.staged().len(), 0);
        }

        #[test]
        fn write_with_refuse_returns_at_once_whatever_the_configured_policy() {
            let (target, sink) = full_sink(AdmissionPolicy::Block(Duration::from_secs(30)));
            fill(&target, &sink);
            let start = Instant::now();
            let err = sink
                .write_with(&[0; 100], AdmissionPolicy::Refuse)
                .unwrap_err();
            assert!(
                start.elapsed() < BOUND,
                "refused at once: {:?}",
                start.elapsed()
            );
            assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
            // ...and a block of its own waits its own deadline, not 30 s.
            let wait = Duration::from_millis(300);
            let start = Instant::now();
            let err = sink
                .write_with(&[0; 100], AdmissionPolicy::Block(wait))
                .unwrap_err();
            let took = start.elapsed();
            assert!(took >= wait && took < wait + BOUND, "took {took:?}");
            assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
        }

        #[test]
        fn block_returns_by_its_deadline_with_the_error() {
            let wait = Duration::from_millis(300);
            let (target, sink) = full_sink(AdmissionPolicy::Block(wait));
            fill(&target, &sink);
            let start = Instant::now();
            let err = sink.write(&[0; 100]).unwrap_err();
            let took = start.elapsed();
            assert!(took >= wait && took < wait + BOUND, "took {took:?}");
            assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
        }

        #[test]
        fn block_admits_once_space_returns() {
            let (target, sink) = full_sink(AdmissionPolicy::Block(Duration::from_secs(30)));
            fill(&target, &sink);
            let t = target.clone();
            let freer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                t.set_budget(None);
            });
            sink.write(&[0; 100])
                .expect("admitted once the spool had room");
            freer.join().unwrap();
            sink.flush(Duration::from_secs(10)).unwrap();
            assert_eq!(target.staged().len(), 3);
        }

        #[test]
        fn flush_returns_by_its_deadline_while_a_stage_hangs() {
            let (_, target, sink) = sink_with(|_| {});
            target.close_gate();
            sink.write(b"stuck").unwrap();
            let timeout = Duration::from_millis(300);
            let start = Instant::now();
            let err = sink.flush(timeout).unwrap_err();
            let took = start.elapsed();
            assert!(took >= timeout && took < timeout + BOUND, "took {took:?}");
            assert!(matches!(err, Error::FlushTimeout { packs: 1, .. }), "{err}");
            assert!(err.to_string().contains("in progress"), "{err}");
            target.open_gate();
            sink.flush(Duration::from_secs(10)).unwrap();
        }

        #[test]
        fn release_times_out_by_its_deadline_and_does_not_seal() {
            let registry = Arc::new(Registry::new());
            let target = MemoryTarget::new(DIR);
            let timeout = Duration::from_millis(300);
            let sink = open(
                &target,
                SinkConfig {
                    release_flush_timeout: timeout,
                    ..config(&registry)
                },
            );
            target.close_gate();
            sink.write(b"stuck").unwrap();
            let start = Instant::now();
            assert!(sink.release().is_err());
            let took = start.elapsed();
            assert!(took >= timeout && took < timeout + BOUND, "took {took:?}");
            assert!(!sink.sealed_on_release(), "false after a timed-out release");
            target.open_gate();
            sink.release().unwrap();
            assert!(sink.sealed_on_release());
        }

        #[test]
        fn flush_retries_a_full_spool_without_waiting_out_the_backoff() {
            let (target, sink) = full_sink(AdmissionPolicy::Refuse);
            fill(&target, &sink);
            // Let the backoff grow to its cap.
            std::thread::sleep(MAX_RETRY_BACKOFF * 2);
            target.set_budget(None);
            let start = Instant::now();
            sink.flush(Duration::from_secs(10)).unwrap();
            assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
            assert_eq!(target.staged().len(), 2);
        }
    }
}
