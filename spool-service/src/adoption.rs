//! Adoption of dead siblings — an explicit state machine.
//!
//! A service's own directory is one rank directory of the layout
//! `<spool_root>/<catalog_key>/r<rank>-<incarnation>/`. Its **siblings** are
//! the other rank directories under the same catalog key. When a sibling's
//! owner dies (the kernel drops its flock), the node's adopter — the service
//! holding the node lease — takes the sibling's lock and drains it through
//! its own upload path. This module is that adopter's decision logic, kept
//! apart from every I/O it drives: [`Adopter`] holds one [`Sibling`] record per
//! rank directory it has seen, and [`Adopter::step`] makes exactly **one
//! transition** per call through a small environment trait, [`AdoptionEnv`],
//! which the service implements on the real crates (spool-lock's probes and
//! takes, spool-core's incremental recovery, spool-upload + spool-catalog's
//! round) and the unit tests implement with a scripted fake.
//!
//! # States and transitions
//!
//! ```text
//!              list_siblings (periodic; new rank dirs under the key)
//!                           │
//!                           ▼
//!   ┌──────────────────► Unprobed ◄─────────────── a cut listing lets the
//!   │                       │ probe (non-blocking)    directory go whole
//!   │     ┌─────────────────┼──────────────┬──────────────────┐
//!   │     ▼                 ▼              ▼                  ▼
//!   │  ProbedLive      MarkedBlocked      Dead            NotOurs ──► Blocked*
//!   │  (recheck_at)    (by another;        │ queue
//!   │     │             recheck_at)        ▼
//!   │     └─ probe again when due ──    Queued ──try_adopt──► refused: Live ──► ProbedLive
//!   │        (never if interval is 0)      │  ▲               unadoptable ────► Blocked*
//!   │                                      │  └─ queued again ── ReadOnly ◄── EROFS
//!   │                                      │     when due       (recheck_at)
//!   │                                      ▼ (lock + "adopting" record held from here)
//!   └──────────────────────────────────  Taken
//!                      begin_recovery      │ (sweep .open, list, no hashing)
//!                                          ▼
//!                                     Uploading { remaining }
//!              upload_and_index_round      │ one round per step, through the pipeline
//!                                          │ (validate, upload, index, remove overlap):
//!                                          │ indexed │ owed │ vanished │
//!                                          │ corrupt → quarantined, never uploaded │
//!                                          │ retryable → back of queue   │
//!                                          │ cancelled → front of queue  │
//!                                          │ non-retryable → stays, dir doomed
//!                                          ▼ remaining empty
//!                 doomed, or other files left? ──yes──► mark_blocked + release ──► Blocked*
//!                                          │ no
//!                                          ▼
//!                    release_and_remove_if_empty ──► Drained* { removed }
//!                                                    (kept: a nested live spool)
//!
//!   stop   (any state holding the lock, or Unprobed/Dead/Queued) ──release──► ReleasedOnCancel*
//!   latch  (same)                                                ──release──► ReleasedOnLatch*
//!   * terminal: this adopter never looks at the directory again
//! ```
//!
//! At most one sibling holds a lock at a time (`Taken`, `Uploading`): the
//! active one. The lock, the listing and the remaining packs stay with it
//! between cycles, so a backlog is listed once, and a half-drained sibling is
//! picked up where it was left.
//!
//! There is no validation phase of its own: a round hands its packs to the
//! service's upload pipeline, which validates each (quarantining a corrupt
//! one, never uploading it) a few packs ahead of its uploads. So the store
//! does not idle while a backlog is hashed, and each pack is read from disk
//! for validation just before the upload reads it again (from the page
//! cache).
//!
//! # One step
//!
//! [`Adopter::step`] looks at its [`StepBudget`] first, in this order:
//!
//! 1. **stop** — release every lock held, mark the held, queued and unprobed
//!    siblings `ReleasedOnCancel`; the adopter is inert from then on. A stop
//!    never removes a directory: only the `Drained` transition does, once it
//!    is empty. A successor finishes what a stop cut.
//! 2. **latched** — the same, `ReleasedOnLatch` (a latched service
//!    lets go of every sibling it was adopting at once).
//! 3. **gates** — nothing is done without the node lease, while anything is
//!    owed to the catalog, or while an own ready pack is not yet uploaded
//!    ([`Pause::NoLease`], [`Pause::Owed`], [`Pause::OwnBacklog`]).
//! 4. **yield** — once the cycle has taken a step, a waiting flush
//!    ([`Pause::FlushWaiting`]) or the end of the `adoption_slice`
//!    ([`Pause::SliceOver`]) ends it. The first step of a cycle always runs, so
//!    flushes that keep coming slow adoption down but never stop it, and a
//!    flush waits for at most one step (one probe, one listing or one
//!    round).
//!
//! Then it does the first due piece of work: the periodic discovery listing,
//! the stale staging-copy cleanup that follows it, a due probe, queueing a
//! dead sibling, advancing the active sibling, taking the next queued one —
//! or nothing ([`Pause::Idle`]). [`Adopter::run_cycle`] steps until a pause or
//! until a step ends the cycle (a retryable failure, a cancel, a round that
//! left packs owed).
//!
//! # Policies
//!
//! - Only rank directories directly under this service's catalog key
//!   directory, never its own: [`Adopter`] filters the listing again, whatever
//!   [`AdoptionEnv::list_siblings`] returns.
//! - Live siblings (including a directory this very process holds, a kept
//!   claim) are skipped and probed again every `recheck_interval` (0: never);
//!   they count in `live_siblings` and are not owed. Directories another
//!   service marked blocked are skipped the same way (re-probed, so an
//!   operator clearing the mark is noticed).
//! - **Blocked**: a non-retryable failure on one of its packs (the rest still
//!   go up first), a lock that cannot be taken, a directory that cannot be
//!   opened (another user's), or a drained directory that still holds other
//!   files (quarantined packs, unknown files). Held ones are marked
//!   (`mark_blocked`) and released. Listed in `blocked_siblings`; the reason is
//!   reported once ([`Step::error`], for the service's `last_error`); never
//!   looked at again; not owed; never a reason to back the loop off.
//! - **Read-only** (a take met `EROFS`): listed blocked and not owed, the
//!   reason reported once, never a backoff, like a block; but a remount can
//!   end it, so it is queued for a take again every `recheck_interval` (0:
//!   never), and the reason is not reported again while it stays read-only.
//! - Retryable failures re-queue the pack (back of the queue) and end the
//!   cycle with [`Step::failed`] set, which the loop counts toward its backoff.
//! - A cancelled pack goes back to the **front** of the queue and ends the
//!   cycle "cut short" ([`Step::cut_short`]), not failed. A cut listing
//!   releases the directory whole; it is probed again from the start.
//! - At most one round of a dead spool (`max_round_packs`: the service's
//!   `pipeline_depth`) is out of it and not yet in the catalog: a round
//!   that leaves packs owed ends the cycle
//!   ([`Step::owed`]), and the `owed` gate holds adoption until the service's
//!   drain's backlog is empty.
//! - Drained: release and remove; a directory that cannot be removed because
//!   a nested live spool is inside is kept (`Drained { removed: false }`).
//! - Stale `.creating` staging copies (unheld, older than `staging_max_age`)
//!   under the key are removed after each discovery listing.
//!
//! # What the service must do around it
//!
//! - Owed adopted packs are indexed from the drain's backlog while the
//!   sibling is still held: the `owed` gate keeps the machine from reaching
//!   `Drained`/`Blocked` (and so from releasing) until nothing is owed. After
//!   a stop or latch released a sibling, the service must **not** remove the
//!   files of its still-owed packs: the directory is a successor's now, which
//!   uploads and indexes them again (idempotent).
//! - The budget's `owed` covers own and adopted packs alike; `own_uploaded`
//!   is false while an own ready pack waits (rejected packs do not count).
//! - Every [`Step::error`] goes to `last_error` as is (a blocked sibling's
//!   reason comes exactly once); [`Step::failed`] is the only thing that
//!   counts toward backoff.
//! - A flush sets `flush_waiting` for its whole call; the loop calls
//!   [`Adopter::run_cycle`] (or [`Adopter::begin_cycle`] and
//!   [`Adopter::step`]) and releases the cycle lock when it returns, so the
//!   flush waits for at most one step.
//!
//! # Tests
//!
//! `adoption/tests.rs` (a scripted fake [`AdoptionEnv`]) has one test per
//! transition and per policy above, each named for its rule, and a proptest
//! driving random scripts of environment results that checks the machine
//! never operates on a directory it does not hold (so never adopts a live
//! sibling), never removes a directory with packs left, never uploads while
//! anything is owed or without the lease, never uploads a pack twice, and
//! never loses a pack: after a healing phase every pack of every adoptable
//! sibling is indexed and its directory removed.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use spool_core::{RankDirName, ReadyPack};

pub use crate::cause::Cause;

pub(crate) mod real_env;
#[cfg(test)]
mod tests;

/// What a non-blocking look at a sibling's lock found ([`AdoptionEnv::probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// Someone holds its lock — another process, or this very process (a kept
    /// claim, or any other holding that is not this adopter's).
    Live,
    /// Nobody holds its lock (or it has no lock file) and it is not marked
    /// blocked: adoptable.
    Dead,
    /// Nobody holds it, but its owner record says `blocked: <why>` (another
    /// adopter gave up on it). Skipped until an operator clears the mark.
    MarkedBlocked(String),
    /// The directory or its lock file cannot be opened by this process
    /// (another user's, `EACCES`): it can never be adopted from here.
    NotOurs(Cause),
    /// The directory is gone.
    Vanished,
}

/// Why [`AdoptionEnv::try_adopt`] did not take a sibling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdoptRefusal {
    /// Its lock is held (it came alive, or the lock file was replaced behind a
    /// live owner's back and the directory's own lock is held). Names the
    /// holder when known.
    Live(Cause),
    /// Its owner record says `blocked: <why>`. The service's own env sees
    /// a marked record at the probe ([`ProbeVerdict::MarkedBlocked`]) and
    /// never refuses a take with it; an env that reads the record only at
    /// the take (the tests' fake) does.
    #[cfg_attr(not(test), allow(dead_code))]
    MarkedBlocked(String),
    /// It can never be taken from here: another user's lock file, a held
    /// ancestor spool, an unreadable directory. Blocks the sibling.
    Unadoptable(Cause),
    /// Its filesystem is read-only (`EROFS`): nothing can be taken there
    /// now, but a remount may end it. The sibling is listed blocked, is not
    /// owed, never backs the loop off, and is taken again every
    /// `recheck_interval` (0: never).
    ReadOnly(Cause),
    /// A transient failure (`EMFILE`, `EIO`, ...): try again after backoff.
    Retryable(Cause),
    /// Only shared flocks hold its lock file or directory, and they outlast
    /// a probe's (a reader in group mode, naming its pids): not an owner,
    /// so never a block and never a backoff; taken again on a later pass
    ///.
    HeldShared(Cause),
    /// The directory is gone.
    Vanished,
}

/// Why [`AdoptionEnv::begin_recovery`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryFailure {
    /// The service's cancel (stop) cut it. Nothing was quarantined because of
    /// the cut.
    Cancelled,
    /// A transient failure: the lock is kept and the step is retried later.
    Retryable(Cause),
    /// The directory cannot be opened or read by this process: blocks it.
    Unopenable(Cause),
}

/// What happened to one pack of an adoption round: the drain's answer.
pub use crate::drain::PackOutcome;

/// The I/O the adoption machine drives. The service implements it on the real
/// crates; the tests implement it with a scripted fake.
///
/// Every method that names a directory other than
/// [`probe`](Self::probe) and [`try_adopt`](Self::try_adopt) is called only
/// while this adopter holds that directory's lock (between a successful
/// `try_adopt` and the `release`/`release_and_remove_if_empty` that ends it).
/// The machine calls no method concurrently with another.
pub trait AdoptionEnv: Send {
    /// Monotonic clock.
    fn now(&self) -> Instant;

    /// The rank directories (`r<rank>-<8 hex>`) directly under this
    /// service's catalog key directory, except the service's own; in any
    /// order. Not staging copies (`.<name>.<hex>.creating`), not files. An
    /// error is the listing's failure (named for the log); the machine tries
    /// again at the next discovery interval.
    fn list_siblings(&mut self) -> impl Future<Output = Result<Vec<PathBuf>, String>> + Send;

    /// Removes the staging copies under the key directory whose lock nobody
    /// holds and whose age is above `older_than`; leaves fresh or
    /// held ones. Returns how many it removed. Failures are logged, not
    /// returned.
    fn remove_stale_staging_copies(
        &mut self,
        older_than: Duration,
    ) -> impl Future<Output = usize> + Send;

    /// Looks at a sibling's lock without blocking and without taking it in a
    /// way that could make a legitimate take fail. A directory this very
    /// process holds (a kept claim) is [`ProbeVerdict::Live`].
    fn probe(&mut self, dir: &Path) -> impl Future<Output = ProbeVerdict> + Send;

    /// Takes the sibling's lock for adoption (spool-lock's `try_adopt`:
    /// record `adopting`, refused under a held ancestor) and opens it as a
    /// spool. On `Ok` this adopter holds it until `release` or
    /// `release_and_remove_if_empty`.
    fn try_adopt(&mut self, dir: &Path) -> impl Future<Output = Result<(), AdoptRefusal>> + Send;

    /// spool-core's `begin_recovery`: sweeps the dead writer's `.open` files
    /// and lists the ready packs without hashing them (skipping `_refs/` and
    /// nested spools). Cancellable (the service's stop).
    fn begin_recovery(
        &mut self,
        dir: &Path,
    ) -> impl Future<Output = Result<Vec<ReadyPack>, RecoveryFailure>> + Send;

    /// One round of the service's own upload pipeline for these packs
    /// (never more than the machine's `max_round_packs` / `max_round_bytes`,
    /// except one pack above the byte bound sent alone): validate each
    /// (quarantining a corrupt one, which is never uploaded; a cancelled
    /// validation quarantines nothing), upload the valid ones (same uploader,
    /// same cancel), index the uploaded ones in batches (fenced where
    /// lease-gated), remove the indexed files, hand the uploaded-but-unindexed
    /// ones to the drain's backlog. Returns one outcome per pack given, in any
    /// order; a pack missing from the answer is taken as cancelled.
    fn upload_and_index_round(
        &mut self,
        dir: &Path,
        packs: &[ReadyPack],
    ) -> impl Future<Output = Vec<(ReadyPack, PackOutcome)>> + Send;

    /// With every pack of the sibling gone: describes anything else left in
    /// it — ready, quarantined or rejected packs, unknown files — or `None`
    /// when only the lock file, empty subdirectories and nested spools
    /// (subdirectories with an `.owner.lock` of their own) remain. A failure
    /// to look is described too (and so blocks the directory).
    fn other_files(&mut self, dir: &Path) -> impl Future<Output = Option<String>> + Send;

    /// Writes `blocked: <reason>` into the held sibling's owner record
    /// (spool-lock's `mark_blocked`). Best effort: a failure is logged.
    fn mark_blocked(&mut self, dir: &Path, reason: &str) -> impl Future<Output = ()> + Send;

    /// Lets go of the held sibling's lock, leaving the directory as it is.
    /// Best effort: a failure is logged.
    fn release(&mut self, dir: &Path) -> impl Future<Output = ()> + Send;

    /// Lets go of the held sibling's lock and removes the directory if only
    /// its lock file and empty subdirectories remain; returns whether it was
    /// removed (a nested live spool keeps it).
    fn release_and_remove_if_empty(&mut self, dir: &Path) -> impl Future<Output = bool> + Send;
}

/// Knobs of the adoption machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptionConfig {
    /// How often a live (or marked-blocked) sibling is probed again; zero
    /// means never. Default 30 s.
    pub recheck_interval: Duration,
    /// How often the catalog key directory is listed for new siblings.
    pub discovery_interval: Duration,
    /// Staging copies older than this, unheld, are removed (60 s).
    pub staging_max_age: Duration,
    /// How long one adopting cycle may keep stepping (1 s). The service
    /// turns it into [`StepBudget::slice_deadline`].
    pub adoption_slice: Duration,
    /// At most this many packs per round: the uploader's `max_workers`, and
    /// not above the index batch.
    pub max_round_packs: usize,
    /// At most this many bytes per round (the uploader's
    /// `max_in_flight_bytes`); a single larger pack goes alone.
    pub max_round_bytes: u64,
}

impl Default for AdoptionConfig {
    fn default() -> Self {
        Self {
            recheck_interval: Duration::from_secs(30),
            discovery_interval: Duration::from_secs(30),
            staging_max_age: Duration::from_secs(60),
            adoption_slice: Duration::from_secs(1),
            max_round_packs: 4,
            max_round_bytes: 1 << 30,
        }
    }
}

/// What the service tells the machine before each step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepBudget {
    /// The end of this cycle's adoption slice.
    pub slice_deadline: Instant,
    /// A flush is in progress (`flushes_in_progress > 0`): yield at the next
    /// step.
    pub flush_waiting: bool,
    /// `stop()` was called: let go of everything.
    pub stop: bool,
    /// The service latched (a foreign lease outlived 2 × TTL): let go of
    /// everything.
    pub latched: bool,
    /// This service holds the node lease.
    pub lease_held: bool,
    /// Something (own or adopted) is uploaded and not yet indexed.
    pub owed: bool,
    /// Every own ready pack is uploaded.
    pub own_uploaded: bool,
}

/// Why a step did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Nothing is due: no new listing, no probe, no adoptable sibling.
    Idle,
    /// The node lease is not held.
    NoLease,
    /// Something is owed to the catalog.
    Owed,
    /// An own ready pack is not uploaded yet.
    OwnBacklog,
    /// A flush is waiting and the cycle already took its step.
    FlushWaiting,
    /// The adoption slice is over and the cycle already took its step.
    SliceOver,
    /// The adopter was stopped; it does nothing any more.
    Stopped,
    /// The adopter latched; it does nothing any more.
    Latched,
}

/// What one transition was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Listed the key directory: `new` siblings found, `gone` forgotten.
    Discovered {
        /// Siblings seen for the first time (or again after removal).
        new: usize,
        /// Records dropped because their directory vanished.
        gone: usize,
    },
    /// The key directory could not be listed.
    DiscoveryFailed,
    /// Removed this many stale staging copies.
    CleanedStaging(usize),
    /// Probed a sibling's lock.
    Probed(ProbeVerdict),
    /// A dead sibling joined the adoption queue.
    Queued,
    /// `try_adopt` succeeded.
    Took,
    /// `try_adopt` was refused.
    TakeRefused(AdoptRefusal),
    /// `begin_recovery` listed this many ready packs.
    Listed(usize),
    /// `begin_recovery` failed.
    RecoveryFailed(RecoveryFailure),
    /// One upload-and-index round.
    Round(RoundTally),
    /// The sibling was drained and released (`removed`: its directory is gone).
    Drained {
        /// Whether the directory was removed.
        removed: bool,
    },
    /// The sibling was blocked (marked and released if held).
    Blocked,
    /// Stop or latch: let go of this many held siblings and dropped this many
    /// queued ones.
    ReleasedAll {
        /// Locks let go.
        released: usize,
        /// Siblings not held (unprobed, dead, queued) given up.
        dropped: usize,
    },
}

/// Per-outcome counts of one round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundTally {
    /// Uploaded and indexed.
    pub indexed: usize,
    /// Uploaded, owed to the catalog.
    pub owed: usize,
    /// Failed retryably (re-queued at the back).
    pub retryable: usize,
    /// Failed non-retryably (left in place; the directory will be blocked).
    pub non_retryable: usize,
    /// Cut by a cancel (back to the front).
    pub cancelled: usize,
    /// Failed validation: quarantined, never uploaded.
    pub quarantined: usize,
    /// Gone since the listing.
    pub vanished: usize,
}

/// One transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The sibling it concerned, if one.
    pub dir: Option<PathBuf>,
    /// What was done.
    pub action: Action,
    /// Whether the cycle goes on after it, and why not.
    pub flow: Flow,
    /// Something the service records in `last_error` (reported once per
    /// blocked sibling).
    pub error: Option<String>,
}

impl Step {
    fn new(dir: Option<&Path>, action: Action) -> Self {
        Self {
            dir: dir.map(Path::to_path_buf),
            action,
            flow: Flow::Continue,
            error: None,
        }
    }

    /// Whether this step ends the adopting cycle.
    pub fn ends_cycle(&self) -> bool {
        self.flow != Flow::Continue
    }
}

/// What a [`Step`] means for the rest of its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The cycle may take another step.
    Continue,
    /// A retryable failure: the loop counts it toward its backoff. Ends the
    /// cycle. (A round with both retryable failures and cancelled packs is
    /// `Failed`.)
    Failed,
    /// A cancel cut it: the cycle was cut short, not failed. Ends the cycle.
    CutShort,
    /// The round left packs owed to the catalog: adoption waits until nothing
    /// is. Ends the cycle.
    Owed,
}

/// The result of [`Adopter::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// One transition was made.
    Stepped(Step),
    /// Nothing was done.
    Paused(Pause),
}

/// The result of [`Adopter::run_cycle`]: what the loop needs for its backoff,
/// its `last_error` and the flush's wait.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Transitions made.
    pub steps: usize,
    /// A retryable failure happened: count toward backoff.
    pub failed: bool,
    /// A cancel cut the cycle short.
    pub cut_short: bool,
    /// A round left packs owed.
    pub owed: bool,
    /// Why the cycle ended, when it ended on a pause.
    pub paused: Option<Pause>,
    /// Errors to record in `last_error`, oldest first.
    pub errors: Vec<String>,
}

/// How soon a sibling whose take met a lingering shared flock is tried
/// again.
pub const HELD_SHARED_RECHECK: Duration = Duration::from_secs(5);

/// One sibling's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiblingState {
    /// Discovered (or let go after a cut listing); its lock is to be probed.
    Unprobed,
    /// Someone holds its lock; probed again at `recheck_at` (`None`: never).
    ProbedLive {
        /// When to probe again.
        recheck_at: Option<Instant>,
    },
    /// Another adopter marked it blocked; skipped, probed again at
    /// `recheck_at` in case an operator cleared the mark.
    MarkedBlocked {
        /// The mark's reason.
        reason: String,
        /// When to probe again.
        recheck_at: Option<Instant>,
    },
    /// Probed dead: adoptable.
    Dead,
    /// Waiting its turn to be taken.
    Queued,
    /// Lock held (record `adopting`); to be listed.
    Taken,
    /// Listed; validating, uploading and indexing one round per step;
    /// drained when empty.
    Uploading {
        /// Packs still to go up, front first.
        remaining: VecDeque<ReadyPack>,
        /// The first non-retryable pack failure: the directory is blocked
        /// once the rest of its packs went up.
        doomed: Option<String>,
    },
    /// Terminal: drained and released; `removed` unless a nested live spool
    /// kept the directory.
    Drained {
        /// Whether the directory was removed.
        removed: bool,
    },
    /// Blocked by this adopter for now: its take met a read-only filesystem
    /// ([`AdoptRefusal::ReadOnly`]). Listed blocked, not owed; taken again at
    /// `recheck_at` (`None`: never), since a remount can end it.
    ReadOnly {
        /// The take's failure.
        reason: String,
        /// When to take it again.
        recheck_at: Option<Instant>,
    },
    /// Terminal: blocked by this adopter (marked and released if it was
    /// held). Never looked at again, not owed.
    Blocked {
        /// Why.
        reason: String,
    },
    /// Terminal: let go on stop (kept whole for a successor).
    ReleasedOnCancel,
    /// Terminal: let go because the service latched.
    ReleasedOnLatch,
}

impl SiblingState {
    /// Whether this adopter is done with the directory for good.
    #[cfg(test)]
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Drained { .. }
                | Self::Blocked { .. }
                | Self::ReleasedOnCancel
                | Self::ReleasedOnLatch
        )
    }

    /// Whether this adopter holds the directory's lock in this state.
    pub fn holds_lock(&self) -> bool {
        matches!(self, Self::Taken | Self::Uploading { .. })
    }

    /// Whether adoptable work remains in this state (it counts in
    /// `adoption_owed`).
    pub fn is_owed(&self) -> bool {
        matches!(
            self,
            Self::Unprobed
                | Self::Dead
                | Self::Queued
                | Self::Taken
                | Self::Uploading { .. }
                | Self::ReleasedOnCancel
                | Self::ReleasedOnLatch
        )
    }

    /// A short name for logs and snapshots.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Unprobed => "unprobed",
            Self::ProbedLive { .. } => "probed-live",
            Self::MarkedBlocked { .. } => "marked-blocked",
            Self::ReadOnly { .. } => "read-only",
            Self::Dead => "dead",
            Self::Queued => "queued",
            Self::Taken => "taken",
            Self::Uploading { .. } => "uploading",
            Self::Drained { .. } => "drained",
            Self::Blocked { .. } => "blocked",
            Self::ReleasedOnCancel => "released-on-cancel",
            Self::ReleasedOnLatch => "released-on-latch",
        }
    }
}

impl fmt::Display for SiblingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The adopter's record of one rank directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sibling {
    /// The rank directory.
    pub dir: PathBuf,
    /// Where it is in the machine.
    pub state: SiblingState,
    /// Packs of it this adopter uploaded (indexed or owed).
    pub uploaded_packs: u64,
    /// Packs of it quarantined by the validation in its rounds.
    pub quarantined_packs: u64,
}

/// Who blocked a sibling listed in [`AdoptionSnapshot::blocked_siblings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockedBy {
    /// This adopter.
    Us,
    /// Another adopter (its owner record says so); skipped here.
    Another,
}

/// A sibling nobody will adopt until a person acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedSibling {
    /// The rank directory.
    pub dir: PathBuf,
    /// Why.
    pub reason: String,
    /// Who decided.
    pub by: BlockedBy,
}

/// The adoption part of the service's snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdoptionSnapshot {
    /// Siblings fully drained by this adopter.
    pub adopted_spools: u64,
    /// Packs of siblings uploaded by this adopter (indexed at once or owed).
    pub adopted_packs: u64,
    /// Adoptable work is not done: a look at the siblings is owed, or a
    /// sibling is unprobed, dead, queued, being adopted, or was let go by a
    /// stop or latch with its packs.
    pub adoption_owed: bool,
    /// Siblings whose last probe found them live.
    pub live_siblings: usize,
    /// Siblings nobody will adopt until a person acts.
    pub blocked_siblings: Vec<BlockedSibling>,
    /// The sibling being adopted, if any.
    pub adopting: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Running,
    Stopped,
    Latched,
}

#[derive(Debug, Clone, Copy)]
enum Work {
    Discover,
    CleanStaging,
    Probe(usize),
    Queue(usize),
    Advance(usize),
    Take(usize),
}

/// The adoption state machine of one service.
#[derive(Debug)]
pub struct Adopter {
    config: AdoptionConfig,
    key_dir: PathBuf,
    own_dir: PathBuf,
    siblings: Vec<Sibling>,
    mode: Mode,
    discovery_owed: bool,
    next_discovery: Option<Instant>,
    staging_due: bool,
    steps_this_cycle: usize,
    adopted_spools: u64,
    adopted_packs: u64,
    /// Read-only siblings whose reason was reported already (once per
    /// stretch of read-only takes; a successful take forgets it).
    read_only_reported: std::collections::HashSet<PathBuf>,
}

impl Adopter {
    /// An adopter for the service whose own rank directory is `own_dir`,
    /// directly under the catalog key directory `key_dir`. A look at the
    /// siblings is owed from the start (`start()` owes one).
    pub fn new(config: AdoptionConfig, key_dir: PathBuf, own_dir: PathBuf) -> Self {
        Self {
            config,
            key_dir,
            own_dir,
            siblings: Vec::new(),
            mode: Mode::Running,
            discovery_owed: true,
            next_discovery: None,
            staging_due: false,
            steps_this_cycle: 0,
            adopted_spools: 0,
            adopted_packs: 0,
            read_only_reported: Default::default(),
        }
    }

    /// The machine's knobs.
    #[cfg(test)]
    pub fn config(&self) -> &AdoptionConfig {
        &self.config
    }

    /// Every sibling record, in discovery order.
    #[cfg(test)]
    pub fn siblings(&self) -> &[Sibling] {
        &self.siblings
    }

    /// The record of one directory.
    #[cfg(test)]
    pub fn sibling(&self, dir: &Path) -> Option<&Sibling> {
        self.siblings.iter().find(|s| s.dir == dir)
    }

    /// Makes the next step list the key directory (a hint that a sibling may
    /// have appeared or died).
    pub fn owe_look(&mut self) {
        self.discovery_owed = true;
    }

    /// Starts a new adopting cycle: its first step runs whatever the
    /// flush/slice signals say.
    pub fn begin_cycle(&mut self) {
        self.steps_this_cycle = 0;
    }

    /// When something becomes due on the clock (a discovery listing or a
    /// recheck), for the loop's wait; `None` once stopped or latched.
    pub fn next_due(&self) -> Option<Instant> {
        if self.mode != Mode::Running {
            return None;
        }
        let rechecks = self.siblings.iter().filter_map(|s| match &s.state {
            SiblingState::ProbedLive { recheck_at } => *recheck_at,
            SiblingState::MarkedBlocked { recheck_at, .. } => *recheck_at,
            SiblingState::ReadOnly { recheck_at, .. } => *recheck_at,
            _ => None,
        });
        self.next_discovery.into_iter().chain(rechecks).min()
    }

    /// The adoption part of the snapshot.
    pub fn snapshot(&self) -> AdoptionSnapshot {
        let blocked_siblings = self
            .siblings
            .iter()
            .filter_map(|s| match &s.state {
                SiblingState::Blocked { reason } | SiblingState::ReadOnly { reason, .. } => {
                    Some(BlockedSibling {
                        dir: s.dir.clone(),
                        reason: reason.clone(),
                        by: BlockedBy::Us,
                    })
                }
                SiblingState::MarkedBlocked { reason, .. } => Some(BlockedSibling {
                    dir: s.dir.clone(),
                    reason: reason.clone(),
                    by: BlockedBy::Another,
                }),
                _ => None,
            })
            .collect();
        AdoptionSnapshot {
            adopted_spools: self.adopted_spools,
            adopted_packs: self.adopted_packs,
            adoption_owed: (self.mode == Mode::Running && self.discovery_owed)
                || self.siblings.iter().any(|s| s.state.is_owed()),
            live_siblings: self
                .siblings
                .iter()
                .filter(|s| matches!(s.state, SiblingState::ProbedLive { .. }))
                .count(),
            blocked_siblings,
            adopting: self
                .siblings
                .iter()
                .find(|s| s.state.holds_lock())
                .map(|s| s.dir.clone()),
        }
    }

    /// Runs one adopting cycle: [`begin_cycle`](Self::begin_cycle), then
    /// steps, asking `budget` before each (it may read the environment, e.g.
    /// the service state an implementation carries), until a pause or a step
    /// that ends the cycle.
    pub async fn run_cycle<E, F>(&mut self, env: &mut E, mut budget: F) -> CycleReport
    where
        E: AdoptionEnv,
        F: FnMut(&E) -> StepBudget + Send,
    {
        self.begin_cycle();
        let mut report = CycleReport::default();
        loop {
            let b = budget(env);
            match self.step(env, &b).await {
                StepOutcome::Paused(p) => {
                    report.paused = Some(p);
                    return report;
                }
                StepOutcome::Stepped(s) => {
                    report.steps += 1;
                    report.failed |= s.flow == Flow::Failed;
                    report.cut_short |= s.flow == Flow::CutShort;
                    report.owed |= s.flow == Flow::Owed;
                    let ends = s.ends_cycle();
                    report.errors.extend(s.error);
                    if ends {
                        return report;
                    }
                }
            }
        }
    }

    /// Makes at most one transition (see the module docs for the order in
    /// which the budget and the due work are looked at).
    pub async fn step<E: AdoptionEnv>(&mut self, env: &mut E, budget: &StepBudget) -> StepOutcome {
        match self.mode {
            Mode::Stopped => return StepOutcome::Paused(Pause::Stopped),
            Mode::Latched => return StepOutcome::Paused(Pause::Latched),
            Mode::Running => {}
        }
        if budget.stop {
            let step = self.release_all(env, Mode::Stopped).await;
            return self.counted(step);
        }
        if budget.latched {
            let step = self.release_all(env, Mode::Latched).await;
            return self.counted(step);
        }
        if !budget.lease_held {
            return StepOutcome::Paused(Pause::NoLease);
        }
        if budget.owed {
            return StepOutcome::Paused(Pause::Owed);
        }
        if !budget.own_uploaded {
            return StepOutcome::Paused(Pause::OwnBacklog);
        }
        let now = env.now();
        if self.steps_this_cycle > 0 {
            if budget.flush_waiting {
                return StepOutcome::Paused(Pause::FlushWaiting);
            }
            if now >= budget.slice_deadline {
                return StepOutcome::Paused(Pause::SliceOver);
            }
        }
        let Some(work) = self.next_work(now) else {
            return StepOutcome::Paused(Pause::Idle);
        };
        let step = match work {
            Work::Discover => self.discover(env, now).await,
            Work::CleanStaging => {
                self.staging_due = false;
                let n = env
                    .remove_stale_staging_copies(self.config.staging_max_age)
                    .await;
                if n > 0 {
                    tracing::info!(key_dir = %self.key_dir.display(), removed = n,
                        "removed stale staging copies under {}", self.key_dir.display());
                }
                Step::new(None, Action::CleanedStaging(n))
            }
            Work::Probe(i) => self.probe(env, i, now).await,
            Work::Queue(i) => {
                self.siblings[i].state = SiblingState::Queued;
                Step::new(Some(&self.siblings[i].dir), Action::Queued)
            }
            Work::Take(i) => self.take(env, i, now).await,
            Work::Advance(i) => self.advance(env, i).await,
        };
        self.counted(step)
    }

    fn counted(&mut self, step: Step) -> StepOutcome {
        self.steps_this_cycle += 1;
        StepOutcome::Stepped(step)
    }

    fn recheck_at(&self, now: Instant) -> Option<Instant> {
        (!self.config.recheck_interval.is_zero()).then(|| now + self.config.recheck_interval)
    }

    fn next_work(&self, now: Instant) -> Option<Work> {
        if self.discovery_owed || self.next_discovery.is_some_and(|t| now >= t) {
            return Some(Work::Discover);
        }
        if self.staging_due {
            return Some(Work::CleanStaging);
        }
        let due = |at: &Option<Instant>| at.is_some_and(|t| now >= t);
        if let Some(i) = self.siblings.iter().position(|s| match &s.state {
            SiblingState::Unprobed => true,
            SiblingState::ProbedLive { recheck_at } => due(recheck_at),
            SiblingState::MarkedBlocked { recheck_at, .. } => due(recheck_at),
            _ => false,
        }) {
            return Some(Work::Probe(i));
        }
        // A read-only sibling due again is queued for a take, like a dead
        // one (a take, not a probe, is what met EROFS).
        if let Some(i) = self.position(|s| match s {
            SiblingState::Dead => true,
            SiblingState::ReadOnly { recheck_at, .. } => due(recheck_at),
            _ => false,
        }) {
            return Some(Work::Queue(i));
        }
        if let Some(i) = self.position(SiblingState::holds_lock) {
            return Some(Work::Advance(i));
        }
        self.position(|s| matches!(s, SiblingState::Queued))
            .map(Work::Take)
    }

    fn position(&self, pred: impl Fn(&SiblingState) -> bool) -> Option<usize> {
        self.siblings.iter().position(|s| pred(&s.state))
    }

    /// Whether `dir` is a sibling of ours: a rank directory directly under
    /// the key directory, not our own.
    fn is_sibling_dir(&self, dir: &Path) -> bool {
        dir != self.own_dir
            && dir.parent() == Some(self.key_dir.as_path())
            && dir
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(RankDirName::parse)
                .is_some()
    }

    async fn discover<E: AdoptionEnv>(&mut self, env: &mut E, now: Instant) -> Step {
        self.discovery_owed = false;
        self.next_discovery = Some(now + self.config.discovery_interval);
        let listed = match env.list_siblings().await {
            Ok(listed) => listed,
            Err(e) => {
                // Not a reason to back the loop off: our own uploads are not
                // affected. Tried again at the next discovery interval.
                let msg = format!(
                    "cannot list sibling spool directories under {}: {e} (tried again in {:?})",
                    self.key_dir.display(),
                    self.config.discovery_interval
                );
                tracing::warn!(key_dir = %self.key_dir.display(), "{msg}");
                let mut step = Step::new(None, Action::DiscoveryFailed);
                step.error = Some(msg);
                return step;
            }
        };
        self.staging_due = true;
        let listed: Vec<PathBuf> = listed
            .into_iter()
            .filter(|d| self.is_sibling_dir(d))
            .collect();
        let before = self.siblings.len();
        // Forget what vanished (never a directory we hold: nobody else can
        // remove it while it is locked, and we keep working on it).
        self.siblings
            .retain(|s| s.state.holds_lock() || listed.contains(&s.dir));
        let gone = before - self.siblings.len();
        let mut new = 0;
        for dir in listed {
            match self.siblings.iter_mut().find(|s| s.dir == dir) {
                // A removed directory that is back (`r<rank>-00000000`, packs
                // moved in by hand again) is a new sibling.
                Some(s) if s.state == (SiblingState::Drained { removed: true }) => {
                    *s = new_sibling(dir);
                    new += 1;
                }
                Some(_) => {}
                None => {
                    tracing::debug!(dir = %dir.display(), "discovered sibling spool directory {}", dir.display());
                    self.siblings.push(new_sibling(dir));
                    new += 1;
                }
            }
        }
        Step::new(None, Action::Discovered { new, gone })
    }

    async fn probe<E: AdoptionEnv>(&mut self, env: &mut E, i: usize, now: Instant) -> Step {
        let dir = self.siblings[i].dir.clone();
        let probe = env.probe(&dir).await;
        let mut step = Step::new(Some(&dir), Action::Probed(probe.clone()));
        match probe {
            ProbeVerdict::Live => {
                tracing::debug!(dir = %dir.display(), "sibling spool directory {} is live; left alone", dir.display());
                self.siblings[i].state = SiblingState::ProbedLive {
                    recheck_at: self.recheck_at(now),
                };
            }
            ProbeVerdict::Dead => self.siblings[i].state = SiblingState::Dead,
            ProbeVerdict::MarkedBlocked(reason) => {
                self.siblings[i].state = SiblingState::MarkedBlocked {
                    reason,
                    recheck_at: self.recheck_at(now),
                };
            }
            ProbeVerdict::NotOurs(reason) => {
                step.error = Some(self.block_unheld(i, reason));
            }
            ProbeVerdict::Vanished => {
                self.siblings.remove(i);
            }
        }
        step
    }

    async fn take<E: AdoptionEnv>(&mut self, env: &mut E, i: usize, now: Instant) -> Step {
        let dir = self.siblings[i].dir.clone();
        match env.try_adopt(&dir).await {
            Ok(()) => {
                self.read_only_reported.remove(&dir);
                tracing::info!(dir = %dir.display(), "adopting dead spool directory {}", dir.display());
                self.siblings[i].state = SiblingState::Taken;
                Step::new(Some(&dir), Action::Took)
            }
            Err(refusal) => {
                let mut step = Step::new(Some(&dir), Action::TakeRefused(refusal.clone()));
                match refusal {
                    AdoptRefusal::Live(_) => {
                        self.siblings[i].state = SiblingState::ProbedLive {
                            recheck_at: self.recheck_at(now),
                        }
                    }
                    AdoptRefusal::HeldShared(why) => {
                        // A later pass takes it once the reader lets go:
                        // re-checked even when live siblings never are.
                        let again = if self.config.recheck_interval.is_zero() {
                            HELD_SHARED_RECHECK
                        } else {
                            self.config.recheck_interval.min(HELD_SHARED_RECHECK)
                        };
                        self.siblings[i].state = SiblingState::ProbedLive {
                            recheck_at: Some(now + again),
                        };
                        step.error = Some(why.to_string());
                    }
                    AdoptRefusal::MarkedBlocked(reason) => {
                        self.siblings[i].state = SiblingState::MarkedBlocked {
                            reason,
                            recheck_at: self.recheck_at(now),
                        }
                    }
                    AdoptRefusal::Unadoptable(reason) => {
                        step.error = Some(self.block_unheld(i, reason));
                    }
                    AdoptRefusal::ReadOnly(reason) => {
                        step.error = self.read_only(i, reason, now);
                    }
                    AdoptRefusal::Retryable(reason) => {
                        step.flow = Flow::Failed;
                        step.error = Some(format!(
                            "cannot take dead spool directory {} for adoption: {reason} (retried after backoff)",
                            dir.display()
                        ));
                    }
                    AdoptRefusal::Vanished => {
                        self.siblings.remove(i);
                    }
                }
                step
            }
        }
    }

    async fn advance<E: AdoptionEnv>(&mut self, env: &mut E, i: usize) -> Step {
        let dir = self.siblings[i].dir.clone();
        let state = std::mem::replace(&mut self.siblings[i].state, SiblingState::Taken);
        match state {
            SiblingState::Taken => match env.begin_recovery(&dir).await {
                Ok(packs) => {
                    let n = packs.len();
                    tracing::info!(dir = %dir.display(), packs = n, "listed dead spool directory {}: {n} ready packs", dir.display());
                    self.siblings[i].state = SiblingState::Uploading {
                        remaining: packs.into(),
                        doomed: None,
                    };
                    Step::new(Some(&dir), Action::Listed(n))
                }
                Err(failure) => {
                    let mut step = Step::new(Some(&dir), Action::RecoveryFailed(failure.clone()));
                    match failure {
                        RecoveryFailure::Cancelled => {
                            // A cut listing lets the directory go whole; it
                            // is looked at again from the start.
                            env.release(&dir).await;
                            self.siblings[i].state = SiblingState::Unprobed;
                            step.flow = Flow::CutShort;
                        }
                        RecoveryFailure::Retryable(reason) => {
                            self.siblings[i].state = SiblingState::Taken;
                            step.flow = Flow::Failed;
                            step.error = Some(format!(
                                "cannot list adopted spool directory {}: {reason} (retried after backoff)",
                                dir.display()
                            ));
                        }
                        RecoveryFailure::Unopenable(reason) => {
                            step.error = Some(self.block_held(env, i, reason).await);
                        }
                    }
                    step
                }
            },
            SiblingState::Uploading { remaining, doomed } if remaining.is_empty() => {
                self.finish(env, i, doomed).await
            }
            SiblingState::Uploading { remaining, doomed } => {
                self.round(env, i, remaining, doomed).await
            }
            other => unreachable!("advance() on a sibling in state {other}"),
        }
    }

    async fn round<E: AdoptionEnv>(
        &mut self,
        env: &mut E,
        i: usize,
        mut remaining: VecDeque<ReadyPack>,
        mut doomed: Option<String>,
    ) -> Step {
        let dir = self.siblings[i].dir.clone();
        let mut batch = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = remaining.front() {
            let fits = batch.len() < self.config.max_round_packs.max(1)
                && (batch.is_empty() || bytes + p.bytes <= self.config.max_round_bytes);
            if !fits {
                break;
            }
            bytes += p.bytes;
            batch.extend(remaining.pop_front());
        }
        let mut answers = env.upload_and_index_round(&dir, &batch).await;
        let mut tally = RoundTally::default();
        let mut front = Vec::new();
        let mut back = Vec::new();
        for pack in batch {
            let outcome = answers
                .iter()
                .position(|(p, _)| p.id == pack.id)
                .map(|k| answers.swap_remove(k).1)
                .unwrap_or(PackOutcome::Cancelled);
            match outcome {
                PackOutcome::Indexed => {
                    tally.indexed += 1;
                    self.count_uploaded(i);
                }
                PackOutcome::Owed => {
                    tally.owed += 1;
                    self.count_uploaded(i);
                }
                PackOutcome::Failed {
                    retryable: true,
                    reason,
                } => {
                    tracing::warn!(dir = %dir.display(), pack = %pack.id,
                        "upload of {} from adopted spool directory {} failed, will retry: {reason}",
                        pack.path.display(), dir.display());
                    tally.retryable += 1;
                    back.push(pack);
                }
                PackOutcome::Failed {
                    retryable: false,
                    reason,
                } => {
                    tracing::warn!(dir = %dir.display(), pack = %pack.id,
                        "upload of {} from adopted spool directory {} failed for good: {reason}",
                        pack.path.display(), dir.display());
                    tally.non_retryable += 1;
                    if doomed.is_none() {
                        doomed = Some(format!(
                            "pack {} cannot be uploaded: {reason}",
                            pack.path.display()
                        ));
                    }
                }
                PackOutcome::Cancelled => {
                    tally.cancelled += 1;
                    front.push(pack);
                }
                PackOutcome::Quarantined { reason } => {
                    tracing::warn!(dir = %dir.display(), pack = %pack.id,
                        "quarantined corrupt pack {} of adopted spool directory {}: {reason}",
                        pack.path.display(), dir.display());
                    tally.quarantined += 1;
                    self.siblings[i].quarantined_packs += 1;
                }
                PackOutcome::Vanished => {
                    tracing::info!(dir = %dir.display(), pack = %pack.id,
                        "pack {} of adopted spool directory {} is gone since the listing",
                        pack.path.display(), dir.display());
                    tally.vanished += 1;
                }
            }
        }
        for pack in front.into_iter().rev() {
            remaining.push_front(pack);
        }
        remaining.extend(back);
        self.siblings[i].state = SiblingState::Uploading { remaining, doomed };
        let mut step = Step::new(Some(&dir), Action::Round(tally));
        step.flow = if tally.retryable > 0 {
            Flow::Failed
        } else if tally.cancelled > 0 {
            Flow::CutShort
        } else if tally.owed > 0 {
            Flow::Owed
        } else {
            Flow::Continue
        };
        step
    }

    fn count_uploaded(&mut self, i: usize) {
        self.adopted_packs += 1;
        self.siblings[i].uploaded_packs += 1;
    }

    /// The Uploading → Drained | Blocked transition, once no pack remains.
    async fn finish<E: AdoptionEnv>(
        &mut self,
        env: &mut E,
        i: usize,
        doomed: Option<String>,
    ) -> Step {
        let dir = self.siblings[i].dir.clone();
        if let Some(reason) = doomed {
            let mut step = Step::new(Some(&dir), Action::Blocked);
            step.error = Some(self.block_held(env, i, reason).await);
            return step;
        }
        if let Some(left) = env.other_files(&dir).await {
            let mut step = Step::new(Some(&dir), Action::Blocked);
            let reason = format!("every ready pack was shipped, but it still holds {left}");
            step.error = Some(self.block_held(env, i, reason).await);
            return step;
        }
        let removed = env.release_and_remove_if_empty(&dir).await;
        if removed {
            tracing::info!(dir = %dir.display(), "adopted spool directory {} drained and removed", dir.display());
        } else {
            tracing::info!(dir = %dir.display(),
                "adopted spool directory {} drained and released; kept, since a nested spool is inside",
                dir.display());
        }
        self.siblings[i].state = SiblingState::Drained { removed };
        self.adopted_spools += 1;
        Step::new(Some(&dir), Action::Drained { removed })
    }

    /// Blocks a held sibling: mark, release, record. Returns the message for
    /// `last_error`.
    async fn block_held<E: AdoptionEnv>(
        &mut self,
        env: &mut E,
        i: usize,
        reason: impl fmt::Display,
    ) -> String {
        let dir = self.siblings[i].dir.clone();
        env.mark_blocked(&dir, &reason.to_string()).await;
        env.release(&dir).await;
        self.block_unheld(i, reason)
    }

    /// Blocks a sibling this adopter does not hold. Returns the message for
    /// `last_error`.
    fn block_unheld(&mut self, i: usize, reason: impl fmt::Display) -> String {
        let s = &mut self.siblings[i];
        let msg = format!(
            "sibling spool directory {} is blocked from adoption: {reason}; its packs stay in place. \
             Fix the cause, then clear the mark (the next take of the directory rewrites its owner record) \
             for a service to adopt it",
            s.dir.display()
        );
        tracing::warn!(dir = %s.dir.display(), "{msg}");
        s.state = SiblingState::Blocked {
            reason: reason.to_string(),
        };
        msg
    }

    /// A take met a read-only filesystem: the sibling waits in
    /// [`SiblingState::ReadOnly`] for its next take. The reason is reported
    /// (returned, and logged as a warning) the first time only, not at each
    /// recheck while the filesystem stays read-only.
    fn read_only(&mut self, i: usize, reason: impl fmt::Display, now: Instant) -> Option<String> {
        let recheck_at = self.recheck_at(now);
        let s = &mut self.siblings[i];
        s.state = SiblingState::ReadOnly {
            reason: reason.to_string(),
            recheck_at,
        };
        if !self.read_only_reported.insert(s.dir.clone()) {
            tracing::debug!(dir = %s.dir.display(), "sibling spool directory {} is still read-only: {reason}", s.dir.display());
            return None;
        }
        let again = match self.config.recheck_interval {
            d if d.is_zero() => {
                "never taken again by this service (recheck_interval is 0)".to_string()
            }
            d => format!("taken again every {d:?} (recheck_interval)"),
        };
        let msg = format!(
            "sibling spool directory {} is on a read-only filesystem and cannot be adopted: {reason}; \
             its packs stay in place and it is {again}. Remount it read-write for a service to adopt it",
            s.dir.display()
        );
        tracing::warn!(dir = %s.dir.display(), "{msg}");
        Some(msg)
    }

    async fn release_all<E: AdoptionEnv>(&mut self, env: &mut E, mode: Mode) -> Step {
        self.mode = mode;
        let (mut released, mut dropped) = (0, 0);
        for s in &mut self.siblings {
            if s.state.holds_lock() {
                env.release(&s.dir).await;
                tracing::info!(dir = %s.dir.display(),
                    "let go of adopted spool directory {} ({}); what is left in it stays for the next adopter",
                    s.dir.display(), if mode == Mode::Stopped { "stop" } else { "latched" });
                released += 1;
            } else if matches!(
                s.state,
                SiblingState::Unprobed | SiblingState::Dead | SiblingState::Queued
            ) {
                dropped += 1;
            } else {
                continue;
            }
            s.state = if mode == Mode::Stopped {
                SiblingState::ReleasedOnCancel
            } else {
                SiblingState::ReleasedOnLatch
            };
        }
        Step::new(None, Action::ReleasedAll { released, dropped })
    }
}

fn new_sibling(dir: PathBuf) -> Sibling {
    Sibling {
        dir,
        state: SiblingState::Unprobed,
        uploaded_packs: 0,
        quarantined_packs: 0,
    }
}
