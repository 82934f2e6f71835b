//! [`ReadyPack`]: a sealed pack a scan or a recovery found (what the
//! spool, its scan and its recovery share).

use std::path::PathBuf;

use crate::pack::PackId;

/// A sealed pack found by a scan or a recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyPack {
    /// `<dir>[/w<k>]/<id>.ready`.
    pub path: PathBuf,
    /// The pack's id (its file name).
    pub id: PackId,
    /// Its size.
    pub bytes: u64,
    /// The worker ordinal whose subdirectory holds it (`None`: the top).
    pub ordinal: Option<u32>,
}
