//! spool-service: the storage service — drains its own spool directory into
//! store and catalog, flushes and stops on deadlines, adopts dead siblings
//! through an explicit state machine (SPEC §7).
//!
//! # Adoption
//!
//! [`adoption`] is the adoption state machine of SPEC §7.3, written apart
//! from the crates it drives: an [`adoption::Adopter`] keeps one record per
//! sibling rank directory under the service's catalog key and makes one
//! transition per [`adoption::Adopter::step`] (probe, queue, take, list,
//! validate one pack, upload and index one round, drain or block; release
//! everything on stop or latch) through the [`adoption::AdoptionEnv`] trait.
//! The service implements that trait on spool-lock (probe, `try_adopt`,
//! `mark_blocked`, release), spool-core (`begin_recovery`,
//! `continue_recovery`) and its own upload path (spool-upload + spool-catalog,
//! one round at a time); it tells the machine before each step, in a
//! [`adoption::StepBudget`], whether a flush or stop is waiting, whether it
//! holds the adopter lease, whether anything is owed to the catalog and
//! whether its own ready packs are all uploaded. The machine's
//! [`adoption::CycleReport`] says whether the cycle failed (backoff), was cut
//! short (cancel) or left packs owed, and which errors go into `last_error`;
//! [`adoption::Adopter::snapshot`] gives the adoption fields of the snapshot
//! (`adopted_spools`, `adopted_packs`, `adoption_owed`, `live_siblings`,
//! `blocked_siblings`). Its states, transitions, policies and tests are
//! documented in the module.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adoption;
