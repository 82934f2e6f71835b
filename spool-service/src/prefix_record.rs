//! The prefix record: which catalog a store prefix serves, and that
//! destination's orphan grace, kept in the store itself at
//! `<prefix>/_spool/destination` ([`RECORD_KEY`]).
//!
//! **Why the store holds it.** A sweep deletes from a store on the word of
//! a catalog, and a reindex writes a catalog from a store: both are only
//! as right as the pairing. Two nodes on their own embedded catalogs with
//! one S3 prefix, or a ClickHouse URL with a typo in its database, pair a
//! prefix with a catalog that never indexed its packs. The store is the
//! one place every process of a destination reads before it writes there,
//! so the first drain to a prefix records its catalog there (a conditional
//! create: of two first drains, one record wins and the other drain reads
//! it), and every later drain, sweep and reindex compares its own catalog
//! with it and refuses on a mismatch, having done nothing.
//!
//! **What names a catalog.** Its fields as spelled, credentials removed
//! (spool-core's `Destination`: the catalog URL, database, table prefix),
//! like the catalog key; for an SQLite catalog, a file on one node, the
//! node's name as well (two nodes' `sqlite:///var/lib/spool/.catalog.db`
//! are two catalogs). Two spellings of one server are two catalogs here
//! too: the second is refused (packs delayed, never mixed) until the
//! operator spells it as recorded.
//!
//! **The grace.** How old a bundle must be before a sweep reads it, and
//! how long after a bundle's PUT a drain may still index rows naming it
//! (half of it): a time bound every process of the destination must agree
//! on, so it is the record's, not each process's setting. It is refused
//! below four times the catalog's request bound
//! ([`spool_catalog::Catalog::request_timeout`]): an index call a drain
//! starts at half the grace then ends (or is abandoned) well before a
//! sweep may read the bundle. The sweep measures a bundle's age by the
//! store's own clock ([`store_now`]), the drain by its monotonic clock
//! since the PUT returned: no host's wall clock enters either.
//!
//! **Taking a prefix over.** A catalog lost for good (a deleted embedded
//! `.catalog.db`) is rebuilt by `spool reindex --take-over`, which records
//! the catalog it writes ([`take_over`]) before it indexes anything.
//!
//! A record is at most [`MAX_RECORD_BYTES`], JSON; anything else at the key
//! is refused, never overwritten but by a take-over.

use std::time::{Duration, SystemTime};

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use spool_core::Destination;
use spool_upload::Store;

use crate::Error;

/// The record's key under a store's prefix.
pub const RECORD_KEY: &str = "_spool/destination";

/// The key a sweep writes to read the store's clock ([`store_now`]).
pub const CLOCK_KEY: &str = "_spool/clock";

/// The largest record read.
pub const MAX_RECORD_BYTES: u64 = 64 << 10;

/// The record format this build writes and reads.
const FORMAT: u32 = 1;

/// The record as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stored {
    spool_prefix_record: u32,
    catalog: Vec<String>,
    store_id: String,
    orphan_grace_ms: u64,
    written_by: String,
    written_at_ms: u64,
}

/// A catalog as a prefix record names it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogIdentity(Vec<String>);

impl CatalogIdentity {
    /// The catalog of `destination` on node `node` (see the module docs).
    pub fn of(destination: &Destination, node: &str) -> CatalogIdentity {
        let url = spool_core::layout::strip_credentials(&destination.catalog_url);
        let mut lines = vec![
            format!("catalog {url}"),
            format!("database {}", destination.database),
            format!("table_prefix {}", destination.table_prefix),
        ];
        if url.starts_with("sqlite:") {
            lines.push(format!("node {node}"));
        }
        CatalogIdentity(lines)
    }

    fn shown(lines: &[String]) -> String {
        lines.join("; ")
    }
}

/// A prefix record read from (or written to) a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRecord(Stored);

impl PrefixRecord {
    /// The destination's orphan grace (see the module docs).
    pub fn orphan_grace(&self) -> Duration {
        Duration::from_millis(self.0.orphan_grace_ms)
    }

    /// Who wrote it: host and pid.
    pub fn written_by(&self) -> &str {
        &self.0.written_by
    }
}

/// The record's key in `store`.
pub fn record_key(store: &Store) -> Path {
    under(store, RECORD_KEY)
}

/// Whether `key` is one of spool's own records under whatever prefix
/// (a path part `_spool`): for counting a store's objects.
pub fn is_record_key(key: &str) -> bool {
    key.split('/').any(|part| part == "_spool")
}

/// `rel` (slash-separated) under `store`'s prefix.
fn under(store: &Store, rel: &str) -> Path {
    rel.split('/')
        .fold(store.prefix().clone(), |p, part| p.join(part))
}

/// Whether `key` is one of spool's own records under `store`'s prefix
/// (`_spool/...`): never a pack, never swept or reindexed.
pub fn is_record(store: &Store, key: &Path) -> bool {
    key.prefix_match(&under(store, "_spool")).is_some()
}

fn record_error(store: &Store, why: String, retryable: bool) -> Error {
    Error::PrefixRecord {
        store: store.description().to_string(),
        key: record_key(store).to_string(),
        why,
        retryable,
    }
}

/// A store call on the record failed: retryable as spool-upload
/// classifies the store's answer (a 403 is not, a timeout is).
fn store_failed(store: &Store, verb: &str, e: &object_store::Error) -> Error {
    record_error(
        store,
        format!("cannot {verb} it: {e}"),
        spool_upload::retryable::is_retryable(e),
    )
}

/// Whether trying again later may help with `e`, a failure of [`settle`]
/// or [`check`]: a store that did not answer, not a refusal.
pub fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::PrefixRecord {
            retryable: true,
            ..
        }
    )
}

/// The record of `store`'s prefix, `None` when there is none.
pub async fn read(store: &Store) -> Result<Option<PrefixRecord>, Error> {
    let key = record_key(store);
    let os = store.object_store();
    let meta = match os.head(&key).await {
        Ok(m) => m,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_failed(store, "read", &e)),
    };
    if meta.size > MAX_RECORD_BYTES {
        return Err(record_error(
            store,
            format!(
                "{} bytes, more than a record ({MAX_RECORD_BYTES}): not spool's; move it away",
                meta.size
            ),
            false,
        ));
    }
    let bytes = match os.get(&key).await {
        Ok(g) => g.bytes().await,
        Err(e) => Err(e),
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_failed(store, "read", &e)),
    };
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(record_error(
            store,
            format!("more than {MAX_RECORD_BYTES} bytes: not spool's; move it away"),
            false,
        ));
    }
    let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| {
        record_error(
            store,
            format!("not a spool prefix record ({e}); move it away"),
            false,
        )
    })?;
    if stored.spool_prefix_record != FORMAT {
        return Err(record_error(
            store,
            format!(
                "format {} (this spool reads {FORMAT}): written by another spool version",
                stored.spool_prefix_record
            ),
            false,
        ));
    }
    Ok(Some(PrefixRecord(stored)))
}

/// The least grace a catalog with this request bound needs.
fn needed(request_timeout: Duration) -> Duration {
    request_timeout.saturating_mul(4)
}

/// Refuses `grace` when it leaves no room for one catalog request.
fn check_grace(
    store: &Store,
    grace: Duration,
    recorded: bool,
    request_timeout: Duration,
) -> Result<(), Error> {
    if grace >= needed(request_timeout) {
        return Ok(());
    }
    Err(Error::GraceTooShort {
        store: store.description().to_string(),
        grace,
        recorded: if recorded {
            ", recorded in its prefix record"
        } else {
            ""
        },
        request_timeout,
        needed: needed(request_timeout),
        advice: if recorded {
            " (the record's grace is the destination's: every process reads it)"
        } else {
            ", or raise upload.orphan_grace"
        },
    })
}

/// `record`, refused unless it names `ours` and its grace leaves room for
/// `request_timeout`.
fn accept(
    store: &Store,
    record: PrefixRecord,
    ours: &CatalogIdentity,
    request_timeout: Duration,
) -> Result<PrefixRecord, Error> {
    compare(store, &record, ours)?;
    check_grace(store, record.orphan_grace(), true, request_timeout)?;
    Ok(record)
}

/// Refuses `record` unless it names `ours`.
fn compare(store: &Store, record: &PrefixRecord, ours: &CatalogIdentity) -> Result<(), Error> {
    if record.0.catalog == ours.0 {
        return Ok(());
    }
    Err(Error::PrefixServesAnother {
        store: store.description().to_string(),
        key: record_key(store).to_string(),
        mismatch: format!(
            "(written by {}) names [{}], this one is [{}]",
            record.0.written_by,
            CatalogIdentity::shown(&record.0.catalog),
            CatalogIdentity::shown(&ours.0)
        ),
    })
}

fn stored(ours: &CatalogIdentity, store_id: &str, grace: Duration) -> Stored {
    Stored {
        spool_prefix_record: FORMAT,
        catalog: ours.0.clone(),
        store_id: store_id.to_string(),
        orphan_grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        written_by: format!("{} pid {}", spool_lock::host_name(), std::process::id()),
        written_at_ms: spool_core::pack::now_ms(),
    }
}

async fn write(store: &Store, record: &Stored, mode: PutMode) -> object_store::Result<()> {
    let body = serde_json::to_vec_pretty(record).expect("a record serializes");
    let opts = PutOptions {
        mode,
        ..PutOptions::default()
    };
    store
        .object_store()
        .put_opts(&record_key(store), PutPayload::from(body), opts)
        .await
        .map(|_| ())
}

/// What a drain does before its first upload: reads the record of
/// `store`'s prefix, or creates it naming `ours` (with `grace`, refused
/// below what `request_timeout` needs), then refuses a record naming
/// another catalog. Returns the record in force: its grace is the
/// destination's.
pub async fn settle(
    store: &Store,
    ours: &CatalogIdentity,
    store_id: &str,
    grace: Duration,
    request_timeout: Duration,
) -> Result<PrefixRecord, Error> {
    let record = match read(store).await? {
        Some(r) => r,
        None => {
            check_grace(store, grace, false, request_timeout)?;
            let new = stored(ours, store_id, grace);
            // a store without a conditional create writes over a record
            // another first drain wrote in the same instant: the one read
            // back below is the one every later reader sees
            let mode = if store.conditional_create() {
                PutMode::Create
            } else {
                PutMode::Overwrite
            };
            match write(store, &new, mode).await {
                Ok(()) => {
                    tracing::info!(store = %store.description(), key = %record_key(store),
                        "recorded which catalog this store prefix serves");
                }
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(store_failed(store, "write", &e)),
            }
            read(store)
                .await?
                .ok_or_else(|| record_error(store, "written, then not found".into(), true))?
        }
    };
    accept(store, record, ours, request_timeout)
}

/// What a sweep and a reindex do first: the record of `store`'s prefix,
/// refused when there is none, when it names another catalog than
/// `ours`, or when its grace leaves no room for `request_timeout`.
pub async fn check(
    store: &Store,
    ours: &CatalogIdentity,
    request_timeout: Duration,
) -> Result<PrefixRecord, Error> {
    let record = read(store).await?.ok_or_else(|| Error::NoPrefixRecord {
        store: store.description().to_string(),
        key: record_key(store).to_string(),
    })?;
    accept(store, record, ours, request_timeout)
}

/// `spool reindex --take-over`: records `ours` as the catalog `store`'s
/// prefix serves, over whatever record is there (its grace kept, else
/// `grace`).
pub async fn take_over(
    store: &Store,
    ours: &CatalogIdentity,
    store_id: &str,
    grace: Duration,
    request_timeout: Duration,
) -> Result<PrefixRecord, Error> {
    let grace = match read(store).await {
        Ok(Some(old)) => old.orphan_grace(),
        _ => grace,
    };
    check_grace(store, grace, false, request_timeout)?;
    let new = stored(ours, store_id, grace);
    write(store, &new, PutMode::Overwrite)
        .await
        .map_err(|e| store_failed(store, "write", &e))?;
    tracing::warn!(store = %store.description(), key = %record_key(store),
        "this store prefix now serves {}", CatalogIdentity::shown(&ours.0));
    Ok(PrefixRecord(new))
}

/// The store's clock now: writes [`CLOCK_KEY`] and reads back the time the
/// store stamped it with (what a sweep measures a bundle's age against,
/// so no host's clock enters it).
pub async fn store_now(store: &Store) -> Result<SystemTime, Error> {
    let key = under(store, CLOCK_KEY);
    let os = store.object_store();
    let body = PutPayload::from(format!(
        "{} pid {}\n",
        spool_lock::host_name(),
        std::process::id()
    ));
    let failed = |e: object_store::Error| Error::PrefixRecord {
        store: store.description().to_string(),
        key: key.to_string(),
        why: format!("cannot read the store's clock: {e}"),
        retryable: true,
    };
    os.put(&key, body).await.map_err(failed)?;
    let meta = os.head(&key).await.map_err(failed)?;
    Ok(SystemTime::from(meta.last_modified))
}

#[cfg(test)]
pub(crate) mod tests;
