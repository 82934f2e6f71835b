//! The sink: the producer side of a spool.
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
//!   on the directory be let go. A release can be retried.
//!   Dropping an unreleased sink releases it (warning if the flush fails).
//! - **Registry.** The sink publishes its slot `(dir, ordinal)` in the
//!   [`Registry`]: at open (attached, the count
//!   carried on from an earlier sink of the same slot), after each staged
//!   pack — after the stage returned, i.e. after the `.ready` link *and* the
//!   directory fsync, so a woken reader's scan sees the pack. Publications
//!   are made under the sink's state lock, so they are in staging order.
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

mod target;
pub use target::{Fullness, StageFailure, StageTarget};

/// The longest the staging thread waits before retrying a refused stage.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);
const FIRST_RETRY_BACKOFF: Duration = Duration::from_millis(20);

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
    /// Hand each staged pack off to the node's shipper ([`crate::handoff`]):
    /// consent to it after its stage, and remove it once the shipper
    /// confirmed its row (a thread watches the confirmations). For a
    /// sink-only producer: with no shipper running the packs wait, and go
    /// with the directory when the producer exits, as without it.
    pub hand_off: bool,
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
            hand_off: false,
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
    /// The SHA-256 of the whole last pack this sink staged (what
    /// `sha256sum` of it prints, and its catalog row's `sha256`).
    pub last_staged_sha256: Option<[u8; 32]>,
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
    /// The sink's `sealed_on_release`.
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
    /// A pack's bytes and their SHA-256, kept for a retried stage.
    Finished(Vec<u8>, [u8; 32]),
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
    /// The trailer checksum of the last pack this sink staged.
    last_sha256: Option<[u8; 32]>,
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
                staged_packs: state.slot_count,
                last_pack: state.last_pack,
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
    /// The hand-off's confirmations thread (`hand_off` only).
    confirmations: Mutex<Option<confirmations::Confirmations>>,
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

    /// Claims a fresh rank directory `<root>/<key>/r<rank>-<incarnation>/`
    /// ([`crate::layout::claim_rank_dir`]) and opens a hand-off sink on it
    /// that owns the claim: the one way to build a sink-only producer in
    /// the layout (`spool produce`, Python's `Sink.claim`). Its packs are
    /// handed off to the node's daemon while it lives ([`crate::handoff`]);
    /// its release waits for the confirmations while they come, then lets
    /// the claim go, leaving what is left to adoption.
    pub fn claim(root: &Path, key: &str, rank: u64, mut config: SinkConfig) -> Result<Sink, Error> {
        config.hand_off = true;
        let claim = crate::layout::claim_rank_dir(root, key, rank, &config.spool.lock)?;
        Sink::open_claimed(claim, config)
    }

    /// Opens the directory of `claim` (a rank directory this process
    /// claimed, e.g. with [`crate::layout::claim_rank_dir`]) and starts a
    /// sink on it that owns the claim, as [`Sink::open`] in mode `Take`
    /// owns the lock it took: dropped after sealing on release, the sink
    /// releases the claim (the directory stays, a dead sibling for the
    /// node's adopter); dropped unsealed, the claim is
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
            Err(Error::InvalidConfig {
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
        let carried = point.read().map_or(0, |p| p.staged_packs);
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
                last_sha256: None,
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
        let confirmations = if shared.config.hand_off {
            Some(confirmations::Confirmations::start(shared.target.clone())?)
        } else {
            None
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
            confirmations: Mutex::new(confirmations),
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
    /// success `sealed_on_release` becomes true; on failure
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
                lock(&shared.state).sealed_on_release = true;
                tracing::debug!(dir = %shared.id.display(), "sink for {} sealed on release", shared.id.display());
                self.wait_confirmed(Instant::now() + crate::handoff::HAND_OFF_RELEASE_WAIT);
                Ok(())
            }
            Err(err) => {
                tracing::warn!(dir = %shared.id.display(), "release of the sink for {} did not seal: {err}", shared.id.display());
                Err(err)
            }
        }
    }

    /// A hand-off sink, sealed: waits while its confirmations thread
    /// removes what the node's shipper confirms, until nothing is waiting,
    /// `deadline`, or [`crate::handoff::STALLED_HAND_OFF`] without a
    /// confirmation (the engine's close waits the same way,
    /// [`Spool::wait_confirmed`]); what is still waiting goes with the
    /// directory to the daemon's adoption once the claim is let go.
    fn wait_confirmed(&self, deadline: Instant) {
        let shared = self.shared();
        if !shared.config.hand_off {
            return;
        }
        let waiting = match crate::handoff::wait_while_confirmations_come(
            deadline,
            Some(crate::handoff::STALLED_HAND_OFF),
            || shared.target.consented_packs(),
        ) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(dir = %shared.id.display(), "counting the packs {} handed off: {e}", shared.id.display());
                return;
            }
        };
        if waiting > 0 {
            tracing::info!(dir = %shared.id.display(), "{waiting} pack(s) of {} handed off and not confirmed yet: they go with the directory to the daemon's adoption", shared.id.display());
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
            last_staged_sha256: state.last_sha256,
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
        // No removal after this: the claim may be let go below.
        if let Some(c) = self
            .confirmations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            c.stop(shared.target.dir());
        }
        let hand_off = shared.config.hand_off;
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
            // A hand-off owner in the layout whose packs were all
            // confirmed leaves nothing to adopt: its empty directory goes.
            Some(claim) if sealed && hand_off => {
                if let Err(err) = claim.release_and_remove_if_empty() {
                    tracing::warn!(dir = %dir.display(), "releasing the claim on {}: {err}", dir.display());
                }
            }
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
            let (bytes, sha256) = match pack.body {
                Body::Writer(writer) => writer.finish_with_sha256(),
                Body::Finished(bytes, sha256) => (bytes, sha256),
            };
            let result = shared.target.stage(config.ordinal, id, &bytes);
            if result.is_ok() && config.hand_off {
                // the pack is durable: consent (a consent lost to a crash
                // only leaves the pack to adoption)
                match shared.target.consent(config.ordinal, id) {
                    Ok(()) => crate::seams::kill_point("after_consent"),
                    Err(err) => {
                        tracing::warn!(dir = %shared.id.display(), "consenting to the hand-off of pack {} failed (it ships when this producer exits): {err}", id.to_hex());
                    }
                }
            }
            state = lock(&shared.state);
            state.in_flight = 0;
            match result {
                Ok(()) => {
                    backoff = FIRST_RETRY_BACKOFF;
                    state.buffered -= charge;
                    state.staged_total += 1;
                    state.slot_count += 1;
                    state.last_pack = Some(id);
                    state.last_sha256 = Some(sha256);
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
                            crate::warn_throttled!(format!("stage into {}", shared.id.display()), dir = %shared.id.display(), "staging pack {} into {} failed (will retry): {err}", id.to_hex(), shared.id.display());
                            state.full = None;
                            state.last_error = Some(err.to_string());
                        }
                    }
                    // Keep the pack (same id, same bytes: a retry is an
                    // idempotent stage) at the front of the queue.
                    state.queue.push_front(SealedPack {
                        id,
                        body: Body::Finished(bytes, sha256),
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
/// publish and the directory fsync.
impl StageTarget for Spool {
    fn dir(&self) -> &Path {
        Spool::dir(self)
    }

    fn consent(&self, ordinal: Option<u32>, id: PackId) -> Result<(), Error> {
        Spool::consent(self, ordinal, id)
    }

    fn prepare_confirmations(&self) -> Result<PathBuf, Error> {
        Spool::prepare_confirmations(self)
    }

    fn release_confirmed(&self) -> Result<usize, Error> {
        Spool::release_confirmed(self)
    }

    fn consented_packs(&self) -> Result<usize, Error> {
        Spool::consented_packs(self)
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
mod confirmations;
#[cfg(any(test, feature = "testing"))]
pub mod fake;

#[cfg(test)]
mod tests;
