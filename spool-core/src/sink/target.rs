//! Where a sink stages its packs ([`StageTarget`]) and why a stage did not
//! happen: what the sink, its confirmations watcher and the targets (the
//! spool directory, the in-memory fake) share.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::pack::PackId;

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

    /// Consents to the hand-off of staged pack `id` ([`crate::handoff`]);
    /// a target with no hand-off does nothing.
    fn consent(&self, ordinal: Option<u32>, id: PackId) -> Result<(), Error> {
        let _ = (ordinal, id);
        Ok(())
    }

    /// Removes the consented packs the node's shipper confirmed; how many.
    fn release_confirmed(&self) -> Result<usize, Error> {
        Ok(0)
    }

    /// Creates the directory where the node's shipper confirms this
    /// target's packs, and returns it (to be watched).
    fn prepare_confirmations(&self) -> Result<PathBuf, Error> {
        Ok(crate::handoff::confirmations_dir(self.dir()))
    }

    /// How many packs this target consented to hand off and has not
    /// removed yet ([`crate::Spool::consented_packs`]).
    fn consented_packs(&self) -> Result<usize, Error> {
        Ok(0)
    }
}
