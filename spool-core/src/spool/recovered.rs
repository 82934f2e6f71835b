//! What a recovery reports ([`RecoveryReport`], [`RecoveryStep`],
//! [`SetAside`]) and an incremental one in progress ([`Recovery`]): the
//! types the spool's recovery (`recovery.rs`) fills and its callers read.

use std::collections::VecDeque;
use std::path::PathBuf;

use super::ready::ReadyPack;
use crate::pack::{PackId, PackSummary};

/// A pack set aside by recovery (or by [`Spool::quarantine`](super::Spool::quarantine)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Its new path (`<id>.quarantined` or `<id>.rejected`).
    pub path: PathBuf,
    /// Its id.
    pub id: PackId,
    /// Why.
    pub reason: String,
}

/// What [`Spool::recover`](super::Spool::recover) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Temp files of dead writers that were removed.
    pub swept: Vec<PathBuf>,
    /// Packs that failed validation, now `<id>.quarantined`.
    pub quarantined: Vec<SetAside>,
    /// Packs that validated, still `<id>.ready`.
    pub valid: Vec<ReadyPack>,
}

/// One step of an incremental recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryStep {
    /// The pack validated.
    Valid(ReadyPack, PackSummary),
    /// The pack failed and was quarantined.
    Quarantined(SetAside),
}

/// An incremental recovery in progress ([`Spool::begin_recovery`](super::Spool::begin_recovery)): the
/// listing of ready packs still to validate. Memory is one entry per pack
/// listed, never their bytes.
#[derive(Debug)]
pub struct Recovery {
    /// Temp files swept by `begin_recovery`.
    pub swept: Vec<PathBuf>,
    /// `.ready` entries that were not regular files (symlinks), quarantined
    /// by `begin_recovery`.
    pub set_aside: Vec<SetAside>,
    pub(super) pending: VecDeque<ReadyPack>,
    pub(super) finished: bool,
}

impl Recovery {
    /// Packs still to validate.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }
    /// Whether the last step ran (the account is rebuilt).
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}
