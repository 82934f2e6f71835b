//! The service's one error type.
//!
//! A variant that wraps another crate's error shows that error's message
//! (`#[error("{0}")]`) and keeps it as its `source`, so a caller walking
//! the chain (the `spool` command's exit codes, `anyhow`) finds the inner
//! typed error itself; none is transparent, which would hide
//! the wrapper's own layer from the chain. Printing a chain therefore
//! skips a link whose message the previous one already ends with (see
//! `spool-cli`'s `exit::message_of`).

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
    Config(#[from] crate::config::ConfigError),
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
    /// The metrics server cannot serve on its address.
    #[error("cannot serve metrics on {addr} (metrics.addr / --metrics-addr): {source}")]
    Metrics {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `spool status` was given a path that is not a directory.
    #[error("{path} is not a directory: give a spool directory, a spool root or a catalog key directory")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A spool-core failure (layout, spool, sink).
    #[error("{0}")]
    Core(#[from] spool_core::Error),
    /// A spool-lock failure.
    #[error("{0}")]
    Lock(#[from] spool_lock::Error),
    /// A spool-upload failure (bad upload configuration).
    #[error("{0}")]
    Upload(#[from] spool_upload::Error),
    /// A spool-catalog failure (bad lease configuration).
    #[error("{0}")]
    Catalog(#[from] spool_catalog::Error),
    /// The store URL names no store this build can open.
    #[error("cannot open the object store {url}: {source}")]
    OpenStore {
        /// The URL, credentials masked.
        url: String,
        /// Why (boxed: it is large).
        source: Box<spool_upload::Error>,
    },
    /// A read of an SQLite catalog that does not exist (a read never makes
    /// one).
    #[error(
        "no catalog at {path}: that SQLite catalog does not exist (is the spool root right, and \
         has a service indexed anything there yet?)"
    )]
    NoCatalogAt {
        /// The database file.
        path: PathBuf,
    },
    /// A local store directory or SQLite catalog file could not be created
    /// with the spool's access mode.
    #[error("cannot create {path} (mode {mode:04o}): {source}")]
    LocalDestination {
        /// The directory or file.
        path: PathBuf,
        /// The mode it was to get.
        mode: u32,
        /// Why.
        source: std::io::Error,
    },
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
         {}",
        flush_cause(last_error.as_deref(), waiting_on.as_deref())
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
        /// The last error recorded, if any.
        last_error: Option<String>,
        /// The catalog or store call in flight at the deadline, if any.
        waiting_on: Option<String>,
    },
    /// A flush of an engine shipping through the node's daemon did not see
    /// every handed-off pack confirmed by its deadline.
    #[error(
        "flush of {dir} did not finish within {timeout:?}: {waiting} handed-off pack(s) not \
         confirmed yet by the node's shipper (a `spool run` on this spool root holding the \
         node lease); with none running they wait here safely and ship once it runs \
         or once this process exits (`spool status` says which)"
    )]
    HandOffTimeout {
        /// The engine's directory.
        dir: PathBuf,
        /// The flush's timeout.
        timeout: Duration,
        /// Packs handed off and not confirmed yet.
        waiting: usize,
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
        /// Why (boxed: spool-core's error is large; a chain walker finds
        /// it as `Box<spool_core::Error>`).
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
    /// Reindexing: listing or reading the store failed (nothing was
    /// indexed for the object it names).
    #[error("reindexing from store {store}: cannot read {key}: {error}")]
    ReindexStore {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The key (or prefix) being read.
        key: String,
        /// Why (in the message, so not also a `source`).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Reindexing: a catalog call failed (rows already inserted stay;
    /// running it again skips them).
    #[error("reindexing into catalog {catalog}: {error}; run it again once the catalog answers (rows already written are skipped)")]
    ReindexCatalog {
        /// The catalog's server, credentials masked.
        catalog: String,
        /// Why (in the message, so not also a `source`).
        error: Box<spool_catalog::Error>,
    },
    /// Sweeping: listing or deleting in the store failed (what was deleted
    /// stays deleted; running it again goes on).
    #[error("sweeping store {store}: {key}: {error}; run it again once the store answers")]
    SweepStore {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The key (or prefix) at hand.
        key: String,
        /// Why (in the message, so not also a `source`).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Sweeping: the catalog could not say which objects rows name
    /// (nothing of that batch was deleted).
    #[error("sweeping against catalog {catalog}: {error}; nothing it could not vouch for was deleted, run it again once the catalog answers")]
    SweepCatalog {
        /// The catalog's server, credentials masked.
        catalog: String,
        /// Why (in the message, so not also a `source`).
        error: Box<spool_catalog::Error>,
    },
    /// Sweeping was cancelled (what was deleted stays deleted).
    #[error("sweeping store {store} was cancelled; run it again to finish")]
    SweepCancelled {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
    },
    /// The store prefix is recorded as serving another catalog (its
    /// prefix record, `prefix_record.rs`): a drain, sweep or reindex here
    /// would mix two catalogs' packs, so nothing was done.
    #[error(
        "store {store} serves another catalog: its record {key} {mismatch}; nothing was \
         uploaded, indexed or deleted. Point this at the catalog that prefix serves, or at \
         another store prefix; if that catalog is gone for good, `spool reindex --take-over` \
         rebuilds this one from the store and records it"
    )]
    PrefixServesAnother {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The record's key.
        key: String,
        /// Who wrote the record, the catalog it names and this process's
        /// (one line per field, joined by `; `), said.
        mismatch: String,
    },
    /// A sweep or a reindex found no prefix record: no spool service has
    /// claimed this prefix for a catalog yet, so nothing vouches that the
    /// catalog given is the one its packs are in.
    #[error(
        "store {store} has no prefix record at {key}: no spool service recorded which catalog \
         this prefix serves, so nothing was deleted. Run a service against this destination once \
         (spool run --once), or rebuild the catalog with `spool reindex --take-over`"
    )]
    NoPrefixRecord {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The record's key.
        key: String,
    },
    /// The prefix record could not be read or written, or is not one spool
    /// writes.
    #[error("store {store}: prefix record {key}: {why}")]
    PrefixRecord {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The record's key.
        key: String,
        /// What failed.
        why: String,
        /// Whether trying again may help (a store call failed) or not (a
        /// record that is not spool's).
        retryable: bool,
    },
    /// A destination's orphan grace leaves no room for one catalog request
    /// (`upload.orphan_grace` against `catalog.request_timeout`).
    #[error(
        "the orphan grace of store {store} ({grace:?}{recorded}) is below {needed:?}, four times \
         catalog.request_timeout ({request_timeout:?}): a row naming a bundle could still land \
         after a sweep may delete that bundle; lower catalog.request_timeout{advice}"
    )]
    GraceTooShort {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
        /// The grace.
        grace: Duration,
        /// `", recorded in its prefix record"`, or nothing for a configured one.
        recorded: &'static str,
        /// The catalog's request bound.
        request_timeout: Duration,
        /// The least grace it needs.
        needed: Duration,
        /// What else to change.
        advice: &'static str,
    },
    /// Reindexing was cancelled (rows already inserted stay).
    #[error("reindexing from store {store} was cancelled; run it again to finish (rows already written are skipped)")]
    ReindexCancelled {
        /// The store, as [`spool_upload::Store::description`] names it.
        store: String,
    },
}

/// What a [`Error::FlushTimeout`] says of its cause: the call it waited on,
/// the last failure, or that nothing failed (the work did not fit).
fn flush_cause(last_error: Option<&str>, waiting_on: Option<&str>) -> String {
    match (waiting_on, last_error) {
        (Some(w), Some(e)) => format!("waiting on {w}; last error: {e}"),
        (Some(w), None) => format!("waiting on {w}"),
        (None, Some(e)) => format!("last error: {e}"),
        (None, None) => "no store or catalog call failed or was waiting at the deadline: the \
                         work did not fit in the timeout (a longer one drains it)"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(last_error: Option<&str>, waiting_on: Option<&str>) -> String {
        Error::FlushTimeout {
            dir: PathBuf::from("/spool/r0-aa"),
            timeout: Duration::from_secs(1),
            ready: 2,
            owed: 3,
            cycles: 4,
            last_error: last_error.map(String::from),
            waiting_on: waiting_on.map(String::from),
        }
        .to_string()
    }

    #[test]
    fn a_flush_timeout_says_its_cause_and_never_none() {
        let w = "catalog ch:8123: indexing 3 pack(s), waiting for 1 s";
        let e = "store s3://b refuses this destination: 403";
        let both = timeout(Some(e), Some(w));
        assert!(both.contains(w) && both.contains(e), "{both}");
        assert!(timeout(None, Some(w)).ends_with(&format!("waiting on {w}")));
        assert!(timeout(Some(e), None).ends_with(&format!("last error: {e}")));
        let neither = timeout(None, None);
        assert!(
            neither.contains("no store or catalog call failed"),
            "{neither}"
        );
        for m in [both, neither] {
            assert!(!m.contains("none") && !m.contains("nothing"), "{m}");
        }
    }
}
