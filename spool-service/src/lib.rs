//! spool-service: the storage service — drains its own spool directory into
//! store and catalog, flushes and stops on deadlines, adopts dead siblings
//! through an explicit state machine.
//!
//! # The service
//!
//! [`StorageService`] serves one rank directory. It owns a two-thread tokio
//! runtime, so a producer with no runtime can embed it; every public method
//! is synchronous (do not call them from inside another tokio runtime).
//!
//! - **Construction** ([`StorageService::new`], `check_rank_dir`): with
//!   adoption on, the directory must be a layout rank directory
//!   `r<rank>-<8 hex>` directly under the catalog key of the configured
//!   [`spool_core::Destination`] — otherwise adopting its siblings could ship
//!   another destination's packs ([`Error::NotARankDir`]).
//! - **Start**: opens the own spool (lock mode `Take`, or `HeldByCaller`
//!   when an engine claimed it), runs spool-core's `begin_recovery` (sweeps
//!   dead writers' `.open` files, lists without hashing), spawns the lease
//!   keeper (node scope: only when adopting; catalog scope: always), owes a
//!   look at the siblings and spawns the loop. It makes no store or catalog
//!   call, so it returns promptly whatever the backlog or the stores.
//! - **Cycle** (`run_cycle(deadline, CycleMode)`): scan own ready packs;
//!   run them, behind the packs owed to the catalog (the backlog, marked
//!   uploaded), through the **drain** (`drain.rs`, its stages in
//!   `drain/pipeline.rs`), whose stages overlap: validate each pack
//!   once (a corrupt one is quarantined, never uploaded), upload with
//!   `max_workers` at once within `max_in_flight_bytes`, index in batches
//!   (paced by the index linger: `drain/pipeline.rs`, "The index linger";
//!   fenced in catalog scope) or owe them, remove what is indexed; at
//!   most `pipeline_depth` packs out and not indexed. A non-retryable
//!   failure renames the pack `<id>.rejected`; a retryable one stops new
//!   uploads and counts toward the backoff. Then reconcile, then
//!   adopt through `adoption::Adopter::run_cycle` with a
//!   `adoption::StepBudget` built from the flush count, the stop token,
//!   the lease state, the drain's backlog and the own packs left.
//! - **Loop**: one task; waits on the stop token, an explicit wake, the
//!   registry (an `AtomicWaker` reader registered in
//!   [`ServiceConfig::registry`]: a wake whose dirty set names the own
//!   directory runs a cycle, one naming only other directories does not;
//!   ignored while backing off), the lease
//!   keeper (its latch; and each acquisition of the lease, so work gated on
//!   it starts the moment the lease is held, not a poll interval later) and the poll interval (or
//!   the backoff, doubling up to `max_backoff` on own retryable failures
//!   only; a blocked sibling never backs it off). Each cycle publishes its
//!   snapshot and wakes [`StorageService::wait_published`]'s callers.
//! - **Flush**: marks itself in progress (the adopter yields after its
//!   current step), cancels the loop's own-upload phase, takes the core
//!   (bounded by its deadline) and runs cycles without adoption, each cut at
//!   the deadline by a cancel token. `Ok(true)` when drained (no own
//!   ready pack, nothing owed), `Err(Error::FlushTimeout)` naming what is
//!   left, `Ok(false)` when stopping or latched.
//! - **Stop**: cancels the stop token (uploads, index calls, scans,
//!   validation, adoption all watch it), joins the loop, whose last act is
//!   an adoption step with `stop` set (every adopted lock let go, siblings
//!   kept whole), releases the lease, and with lock mode `Take` releases the
//!   own lock, removing the directory only if empty.
//! - **Snapshot**: [`Snapshot`], a plain struct published after each cycle
//!   (`uploaded` and `indexed` are read live).
//!   `staged` is the sum of the sealed-pack counters the directory's sinks
//!   publish in the registry (every worker ordinal). A latch
//!   wakes the loop at once (it watches the lease keeper's state), so the
//!   snapshot shows it and the siblings are let go whatever the backoff.
//!
//! # Tests
//!
//! In this crate (`tests.rs`, memory catalog, fault-scripting store, real
//! temp directories and locks): the construction check; own packs drained
//! by a flush and the dir removable; a 403 pack `.rejected` while the other
//! goes up; the catalog down leaves packs owed and the flush error says so;
//! a dead sibling adopted and removed with every pack in store and catalog
//! while a live sibling and another destination's directory are untouched;
//! in `serial`: start bounded and flush by its deadline with the store
//! stalled, stop prompt during a stalled upload, a registry notify waking
//! the loop long before a 30 s poll interval. The adoption machine's own
//! tests are described in `adoption.rs`.
//!
//! In `spool-tests` (`tests/tests/service_adoption.rs`, the real service
//! with real child processes, over the fakes; set-up in
//! `tests/src/service.rs`): the blocked policy three ways — a pack over the
//! in-flight bound, a different object already at a key, and root's
//! sibling seen by a service running as `nobody` in a child process
//! (`service-helper`) — each listed in `blocked_siblings` with its packs in
//! place, the rest of its packs indexed, not owed, the loop at its poll
//! rate, a flush back at once; an own pack refused for good set aside as
//! `.rejected` while adoption proceeds; two destinations on one root never
//! adopting each other's directories, and the construction check refusing
//! a directory outside the layout or under another key; `staged` counting
//! two sinks' packs and not a third directory's. In `serial`: live siblings
//! (a `spool-core-helper` child with ready packs and a stage paused before
//! its publish, and a kept claim of this process) left exactly as they
//! were and counted in `live_siblings`, the child adopted within the
//! recheck interval once SIGKILLed; a store cut mid-adoption keeping the
//! directory while a flush returns on time, the loop finishing once the
//! store returns; stop during a stalled adoption round prompt, the
//! directory whole and unlocked, a successor finishing; a flush never
//! adopting yet running a cycle while the loop idles in its backoff;
//! back-to-back flushes from two threads not stopping the adoption of a
//! sibling whose holder is SIGKILLed; a flush beside 64 sparse 64 MiB packs
//! being validated returning drained within ~1 s, and stop during the
//! validation of 16 sparse 256 MiB packs prompt with the directory whole
//! and unlocked; a latch (a foreign lease outliving 2 × TTL while adopting
//! with a 60 s backoff) letting go of the sibling within seconds, every
//! pack still in it. In `tests/tests/real_service.rs` (ClickHouse + moto,
//! each behind the fault proxy): the catalog cut at the first upload leaves
//! the first sibling's round owed and held, the second whole and untaken,
//! adoption owed, a flush timing out naming 3 owed packs; with the catalog
//! back both are adopted and every pack reads back byte-equal.
//!
//! Not done: a flush waits for the adoption step in flight, i.e. one whole
//! pack's validation rather than one 8 MiB chunk of it (cutting it would
//! restart that pack's hashing, so back-to-back flushes could starve a
//! backlog of very large packs: a resumable validation in spool-core would
//! fix both).
//!
//! # The engine
//!
//! [`Engine`] (module [`engine`]) is how a producer embeds all
//! this and what `spool run` is with no sink: claim a fresh rank directory
//! under the layout → start a service on it (`HeldByCaller`) → open sinks on
//! it (`HeldByCaller`, the service's registry). [`Engine::close`] releases in
//! reverse — seal the sinks, flush and stop the service, release the claim
//! (removing the directory if empty) — and keeps the claim until process
//! exit when a sink did not seal. A failed start undoes what was done and
//! opens no sink. Tests: `engine_tests.rs` (order, clean close, store down,
//! unsealed sink, failed service, failed sink, a daemon engine adopting),
//! and `tests/tests/engine_cli.rs` through `spool produce --spool-root`.
//!
//! # Adoption
//!
//! `adoption.rs` is the adoption state machine (crate-private), written apart
//! from the crates it drives: an `adoption::Adopter` keeps one record per
//! sibling rank directory under the service's catalog key and makes one
//! transition per `adoption::Adopter::step` (probe, queue, take, list,
//! validate, upload and index one round, drain or block; release
//! everything on stop or latch) through the `adoption::AdoptionEnv` trait.
//! The service implements that trait on spool-lock (probe, `try_adopt`,
//! `mark_blocked`, release), spool-core (`begin_recovery`: sweep and list)
//! and its drain (spool-upload + spool-catalog, one round of up
//! to `pipeline_depth` packs per step, through its pipeline, which
//! validates each pack a few ahead of its upload); it tells the machine
//! before each step, in a
//! `adoption::StepBudget`, whether a flush or stop is waiting, whether it
//! holds the node lease, whether anything is owed to the catalog and
//! whether its own ready packs are all uploaded. The machine's
//! `adoption::CycleReport` says whether the cycle failed (backoff), was cut
//! short (cancel) or left packs owed, and which errors go into `last_error`;
//! `adoption::Adopter::snapshot` gives the adoption fields of the snapshot
//! (`adopted_spools`, `adopted_packs`, `adoption_owed`, `live_siblings`,
//! `blocked_siblings`). Its states, transitions, policies and tests are
//! documented in the module.
//!
//! # Features
//!
//! The store and catalog backends pass through, all on by default: `aws`,
//! `gcp`, `azure` (spool-upload's `s3://`, `gs://`, `az://`; `file://` and
//! `memory://` are always there) and `clickhouse`, `sqlite` (spool-catalog's).
//! With `default-features = false` an embedder picks what it uses, e.g.
//! `features = ["aws", "clickhouse"]`; a URL whose backend is left out is
//! refused naming the feature.
#![forbid(unsafe_code)]

mod adoption;
mod bound;
mod cause;
pub mod config;
mod drain;
pub mod engine;
mod error;
pub mod fetch;
mod handoff;
mod health;
pub mod metrics;
mod offload;
pub mod prefix_record;
pub mod reindex;
mod run;
mod service;
mod ship;
mod snapshot;
pub mod status;
pub mod sweep;

pub use config::ServiceConfig;
pub use drain::{OpenBundle, StageTimes};
pub use engine::{CloseReport, Engine, EngineConfig, HandOffConfig, Shipping};
pub use error::Error;
pub use handoff::HandOffCounts;
pub use health::Health;
pub use run::{Look, RunEnd, RunPlan, RunReport};
pub use service::{CycleOutcome, StorageService};
pub use ship::Ship;
pub use snapshot::{Field, FieldKind, FieldValue, Snapshot, FIELDS};
