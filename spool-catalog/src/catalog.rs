//! The [`Catalog`] trait every backend implements, what it counts, the
//! schema and lease-log constants, and the lease's claim algorithm, which
//! the trait's `acquire`, `renew` and `release` run over three primitives
//! every backend provides (`read_lease_head`, `append_claim`,
//! `read_claims`).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::lease::{LeaseClaim, LeaseConfig, LeaseGuard, LeaseHead, LeaseRecord, NewClaim};
use crate::row::PackRow;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 5;

/// How far back the lease log keeps claims other than each name's head:
/// ClickHouse drops whole days older than yesterday, so it keeps at least
/// this and less than twice it.
pub const LEASE_LOG_RETENTION: std::time::Duration = std::time::Duration::from_secs(86_400);

/// How often a holder's keeper trims the lease log
/// ([`Catalog::trim_lease_log`]).
pub const LEASE_TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3_600);

/// Most rows one index statement carries; larger batches are split (each
/// statement fenced on its own).
pub const MAX_ROWS_PER_STATEMENT: usize = 256;

/// Most object keys one statement of [`Catalog::referenced_bytes`] asks
/// about; a longer list is split into statements of this many keys.
pub const MAX_KEYS_PER_STATEMENT: usize = 500;

/// Default bound on one request of a networked catalog (connect, send,
/// answer); [`crate::open_with_timeout`] sets another.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a catalog counted since it was opened (cheap to read: a few
/// atomics). Backends that count nothing report zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CatalogCounters {
    /// Contention answers of a replicated catalog (ClickHouse code 286: an
    /// earlier quorum insert into the same table not satisfied yet), each
    /// tried again on the same replica; not failures (crate docs, "Quorum
    /// contention").
    pub quorum_contention: u64,
    /// Statements that met contention until the end of their budget and
    /// returned it (retryable): a stalled quorum, not a busy one.
    pub quorum_contention_gave_up: u64,
}

/// A pack catalog with its lease. Usable as `Arc<dyn Catalog>`.
///
/// Every method makes sure the schema is in place first (once per object).
#[async_trait]
pub trait Catalog: Send + Sync {
    /// The catalog as messages name it (credentials removed).
    fn server(&self) -> String;

    /// Creates missing tables and the schema-version row; refuses a newer
    /// version or tables with other columns. Idempotent.
    async fn ensure_schema(&self) -> Result<()>;

    /// Writes one row per pack (re-indexing replaces). With a fence, the
    /// rows land only while `fence` is the sole, live head of its lease
    /// with more than its fence margin to go; otherwise nothing is written
    /// and [`Error::Fenced`](crate::Error::Fenced) is returned. `Ok` means every pack of `rows` is
    /// in the catalog.
    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()>;

    /// The row of one pack.
    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>>;

    /// Rows with `from_ms <= created_at_ms < to_ms`, by creation time then id.
    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>>;

    /// Number of packs (one per id).
    async fn count(&self) -> Result<u64>;

    /// For each of `object_keys`, the sum of `bytes` over the packs whose
    /// current row (the one row per `pack_id` that [`get`](Self::get),
    /// [`list_range`](Self::list_range) and [`count`](Self::count) read:
    /// the latest indexed) names that object: what a sweep of unreferenced
    /// store objects must keep. A key is in the map exactly when some
    /// current row names it (even if its packs' bytes sum to 0); a key no
    /// current row names is absent. A pack re-indexed under another object
    /// counts only under its new one. Keys are compared byte for byte;
    /// repeated keys are answered once; no keys, no request. Lists longer
    /// than [`MAX_KEYS_PER_STATEMENT`] are split into several statements
    /// (each answers its keys as of its own read).
    ///
    /// What it cannot see: a row not written yet. A pack whose object is
    /// uploaded and whose row is still on its way (an index statement in
    /// flight, or a pack still in its spool) names no object here, so a
    /// sweep must also spare objects younger than that.
    ///
    /// A replicated ClickHouse catalog reads with
    /// `select_sequential_consistency=1` (as the lease's reads do), not
    /// as a plain read: a replica that has not yet received a confirmed
    /// row would otherwise answer that its object is unreferenced, and the
    /// sweep would delete a live pack's bytes. A lagging replica fails the
    /// read instead (and the next replica is tried).
    ///
    /// A catalog that does not provide it (a wrapper that does not forward
    /// it) keeps this default, which answers
    /// [`Error::Unsupported`](crate::Error::Unsupported) rather than an
    /// empty map: "nothing is referenced" is never answered by default.
    async fn referenced_bytes(&self, object_keys: &[String]) -> Result<HashMap<String, u64>> {
        let _ = object_keys;
        Err(Error::Unsupported {
            server: self.server(),
            purpose: "read referenced bytes",
        })
    }

    /// The current rows (as [`get`](Self::get) reads them) of each of
    /// `pack_ids` that has one, by pack id, read **consistently**: on a
    /// replicated ClickHouse with `select_sequential_consistency=1`, so a
    /// confirmed row is never missed (a lagging replica fails the read and
    /// the next one is tried). What a sweep proves a bundle spare with
    /// (spool-service's `sweep` module docs): a pack no row names is never
    /// taken for one another object holds. Ids are checked as
    /// [`get`](Self::get) checks them; repeated ids are answered once; no
    /// ids, no request. Lists longer than [`MAX_KEYS_PER_STATEMENT`] are
    /// split into several statements.
    ///
    /// A catalog that does not provide it (a wrapper that does not forward
    /// it) keeps this default, which answers
    /// [`Error::Unsupported`](crate::Error::Unsupported): "no rows" is never
    /// answered by default.
    async fn current_rows(&self, pack_ids: &[String]) -> Result<HashMap<String, PackRow>> {
        let _ = pack_ids;
        Err(Error::Unsupported {
            server: self.server(),
            purpose: "read current rows consistently",
        })
    }

    /// The bound on one request to this catalog: how long a statement this
    /// process sent may still be running at the server after it was sent
    /// (a destination's orphan grace must leave room for it: spool-service's
    /// `destination` module docs). A local catalog (SQLite) answers
    /// within its busy timeout; the default is [`DEFAULT_REQUEST_TIMEOUT`].
    fn request_timeout(&self) -> Duration {
        DEFAULT_REQUEST_TIMEOUT
    }

    /// Lease primitive: the claims at the name's highest term and the
    /// catalog clock.
    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead>;

    /// Lease primitive: appends one claim stamped with the catalog clock.
    async fn append_claim(&self, claim: &NewClaim) -> Result<()>;

    /// Lease primitive: every claim at one term (the read-back).
    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>>;

    /// The whole claim log of a name, by term (for operators and tests).
    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>>;

    /// Bounds the claim log: removes claims older than
    /// [`LEASE_LOG_RETENTION`] (by the catalog clock) while keeping the head
    /// term of every name, so that terms keep rising. A holder's keeper
    /// calls it every [`LEASE_TRIM_INTERVAL`]. Returns how many days
    /// (ClickHouse) or claims (SQLite, the fake) went. A backend without a
    /// log of its own (a wrapper) keeps this default, which trims nothing.
    async fn trim_lease_log(&self) -> Result<u64> {
        Ok(0)
    }

    /// What this catalog counted so far ([`CatalogCounters`]). A backend
    /// that counts nothing (SQLite, the fake) keeps this default; a
    /// wrapper forwards its inner catalog's.
    fn counters(&self) -> CatalogCounters {
        CatalogCounters::default()
    }

    /// Acquires `name` for `holder` with a new lease id.
    async fn acquire(&self, name: &str, holder: &str, config: &LeaseConfig) -> Result<LeaseClaim> {
        claim(self, name, holder, config, None).await
    }

    /// Renews a holding (a fresh claim at the next term, same lease id).
    async fn renew(&self, guard: &LeaseGuard) -> Result<LeaseClaim> {
        claim(self, &guard.name, &guard.holder, &guard.config, Some(guard)).await
    }

    /// Releases a holding with a tombstone; `false` if it was not the head.
    async fn release(&self, guard: &LeaseGuard) -> Result<bool> {
        release(self, guard).await
    }
}

/// The claim algorithm, shared by every backend: read the head; refuse if it
/// is live and not ours; append `term + 1`; read back: held only if ours is
/// the sole claim at that term.
pub(crate) async fn claim<C: Catalog + ?Sized>(
    catalog: &C,
    name: &str,
    holder: &str,
    config: &LeaseConfig,
    renewing: Option<&LeaseGuard>,
) -> Result<LeaseClaim> {
    config.validate()?;
    let claimed_at = Instant::now();
    let head = catalog.read_lease_head(name).await?;
    let lease_id = match renewing {
        Some(g) => {
            // A renewal continues a holding that is ours, alone and live.
            match head.live_holder() {
                Some(h) if h.lease_id == g.lease_id => g.lease_id,
                Some(h) => {
                    return Ok(LeaseClaim::Busy {
                        holder: h.holder.clone(),
                        term: h.term,
                        expires_in: Duration::from_millis(h.expires_at_ms - head.now_ms),
                    })
                }
                None if head.claims.len() > 1 => {
                    return Ok(LeaseClaim::Contested { term: head.term() })
                }
                None => return Ok(LeaseClaim::Lapsed { term: head.term() }),
            }
        }
        None => {
            if let Some(h) = head.live_holder() {
                return Ok(LeaseClaim::Busy {
                    holder: h.holder.clone(),
                    term: h.term,
                    expires_in: Duration::from_millis(h.expires_at_ms - head.now_ms),
                });
            }
            Uuid::new_v4()
        }
    };
    let term = head.term() + 1;
    catalog
        .append_claim(&NewClaim {
            name: name.to_string(),
            term,
            lease_id,
            holder: holder.to_string(),
            ttl_ms: config.ttl.as_millis() as u64,
        })
        .await?;
    crate::seams::kill_point("lease_claim");
    let back = catalog.read_claims(name, term).await?;
    match back.as_slice() {
        [ours] if ours.lease_id == lease_id => Ok(LeaseClaim::Held(LeaseGuard {
            name: name.to_string(),
            lease_id,
            holder: holder.to_string(),
            acquired_term: renewing.map_or(term, |g| g.acquired_term),
            term,
            expires_at_ms: ours.expires_at_ms,
            config: *config,
            claimed_at,
        })),
        _ => Ok(LeaseClaim::Contested { term }),
    }
}

/// Release: a tombstone claim (expiring at once) on top of our own live
/// head. Returns whether one was written (nothing to do if the head is not
/// ours any more).
pub(crate) async fn release<C: Catalog + ?Sized>(catalog: &C, guard: &LeaseGuard) -> Result<bool> {
    let head = catalog.read_lease_head(&guard.name).await?;
    match head.live_holder() {
        Some(h) if h.lease_id == guard.lease_id => {
            catalog
                .append_claim(&NewClaim {
                    name: guard.name.clone(),
                    term: h.term + 1,
                    lease_id: guard.lease_id,
                    holder: guard.holder.clone(),
                    ttl_ms: 0,
                })
                .await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}
