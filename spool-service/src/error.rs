//! The service's one error type.

use std::path::PathBuf;
use std::time::Duration;

/// Every way the service and the engine fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot work.
    #[error("bad service configuration: {why}")]
    InvalidConfig {
        /// What is wrong and what to change.
        why: String,
    },
    /// The `spool` configuration (file, environment, flags) refused a key,
    /// value or file ([`crate::config`]): the message names it, where it
    /// came from and what is allowed.
    #[error("{0}")]
    Config(crate::config::ConfigError),
    /// Adoption is on but the own directory is not a rank directory of the
    /// layout under its own destination's catalog key.
    #[error(
        "{dir} is not a rank directory r<rank>-<8 hex> under the catalog key {key} of this \
         service's destination: adoption there could take another destination's packs; \
         claim a rank directory under <root>/{key}/ or turn adoption off"
    )]
    NotARankDir {
        /// The own directory.
        dir: PathBuf,
        /// The destination's catalog key.
        key: String,
    },
    /// A spool-core failure (layout, spool, sink).
    #[error(transparent)]
    Core(#[from] spool_core::Error),
    /// A spool-lock failure.
    #[error(transparent)]
    Lock(#[from] spool_lock::Error),
    /// A spool-upload failure (bad upload configuration).
    #[error(transparent)]
    Upload(#[from] spool_upload::Error),
    /// A spool-catalog failure (bad lease configuration).
    #[error(transparent)]
    Catalog(#[from] spool_catalog::Error),
    /// The service's own runtime or loop thread could not be made.
    #[error("cannot start the service runtime for {dir}: {source}")]
    Runtime {
        /// The own directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A flush did not drain by its deadline.
    #[error(
        "flush of {dir} did not drain within {timeout:?}: {ready} own ready pack(s) not uploaded, \
         {owed} pack(s) uploaded but not indexed (owed to the catalog), {cycles} cycle(s) run; \
         last error: {last_error}; waiting on: {waiting_on}"
    )]
    FlushTimeout {
        /// The own directory.
        dir: PathBuf,
        /// The flush's timeout.
        timeout: Duration,
        /// Own ready packs left.
        ready: usize,
        /// Packs owed to the catalog.
        owed: usize,
        /// Cycles the service has run.
        cycles: u64,
        /// The last error recorded, or `none`.
        last_error: String,
        /// The catalog or store call in flight at the deadline, or `nothing`.
        waiting_on: String,
    },
    /// The service loop (or its lease keeper) panicked: the service does no
    /// more work. Stop it and start a new one (the daemon exits 10 so its
    /// supervisor restarts it).
    #[error("{why}; the service of {dir} does no more work: stop it and start a new one")]
    LoopFailed {
        /// The own directory.
        dir: PathBuf,
        /// The panic, as reported.
        why: String,
    },
    /// The service was stopped (or never started).
    #[error("the service of {dir} is not running (stopped or not started)")]
    NotRunning {
        /// The own directory.
        dir: PathBuf,
    },
    /// A sink of the engine failed to open; the engine released its claim.
    #[error("engine on {dir}: sink {index} did not open: {source}")]
    Sink {
        /// The rank directory.
        dir: PathBuf,
        /// Which sink (0-based).
        index: usize,
        /// Why (boxed: spool-core's error is large).
        source: Box<spool_core::Error>,
    },
    /// Reading a pack back ([`crate::fetch::fetch_pack`]): the catalog has
    /// no row for it.
    #[error("pack {pack_id} is not in catalog {catalog} (list what is there with `spool ls`)")]
    PackNotIndexed {
        /// The pack's id (hex).
        pack_id: String,
        /// The catalog's server, credentials masked.
        catalog: String,
    },
    /// Reading a pack back: the catalog call failed.
    #[error("cannot read pack {pack_id} from catalog {catalog}: {error}")]
    FetchCatalog {
        /// The pack's id (hex).
        pack_id: String,
        /// The catalog's server, credentials masked.
        catalog: String,
        /// Why (in the message, so not also a `source`: `{:#}` would
        /// print it twice).
        error: Box<spool_catalog::Error>,
    },
    /// Reading a pack back: the catalog lists it, the store has no object
    /// at its key.
    #[error(
        "the catalog lists pack {pack_id}, but store {store} has no object at key {key} (is the \
         store given the one this catalog indexes?)"
    )]
    PackNotInStore {
        /// The pack's id (hex).
        pack_id: String,
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The row's object key.
        key: String,
    },
    /// Reading a pack back: reading the object, or writing it out, failed
    /// (nothing is known about the pack itself).
    #[error("cannot read pack {pack_id} from store {store} at key {key}: {error}")]
    FetchStore {
        /// The pack's id (hex).
        pack_id: String,
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The row's object key.
        key: String,
        /// Why: the store's error, or the output's I/O error (in the
        /// message, so not also a `source`).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Reading a pack back: the object fails the pack's validation, or
    /// does not match its catalog row's SHA-256 and size. Do not use it.
    #[error(
        "pack {pack_id} read back from store {store} at key {key} does not match its checksum: \
         {why}"
    )]
    PackMismatch {
        /// The pack's id (hex).
        pack_id: String,
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The row's object key.
        key: String,
        /// What is wrong.
        why: String,
        /// Where in the object, when the problem has a place.
        offset: Option<u64>,
    },
}

impl From<crate::config::ConfigError> for Error {
    fn from(e: crate::config::ConfigError) -> Self {
        Error::Config(e)
    }
}
