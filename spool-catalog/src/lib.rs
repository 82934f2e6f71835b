//! spool-catalog: the pack index and the lease, on ClickHouse, SQLite or
//! in memory.
//!
//! # What it guarantees
//!
//! - **One row per pack as read.** [`Catalog::index`] writes one row per
//!   pack ([`PackRow`], its columns); indexing the same pack again
//!   (a crash between upload and delete) still reads back as one row
//!   ([`Catalog::get`], [`Catalog::list_range`], [`Catalog::count`],
//!   [`Catalog::referenced_bytes`]: what a sweep of unreferenced store
//!   objects must keep, read consistently on a replicated catalog).
//!   ClickHouse: `ReplacingMergeTree(indexed_at_ms)` read with `FINAL`;
//!   SQLite: a primary key and an upsert; the fake: a map.
//! - **Never misread.** Every operation first makes sure the schema is there
//!   and is the one this build reads ([`Catalog::ensure_schema`], run once
//!   per catalog object): missing tables are created idempotently, a
//!   schema-version row is written, the columns of existing tables are
//!   compared with the expected ones, and a newer schema version or a
//!   table with other columns is refused ([`Error::SchemaVersion`],
//!   [`Error::SchemaMismatch`]) before anything is read or written. Every
//!   install step is idempotent (`CREATE ... IF NOT EXISTS`, a version row
//!   that two installers may both write), so it needs no serialisation.
//! - **Schema versions.** This build writes version 5. Each older version
//!   is migrated in place the first time this build opens it, keeping every
//!   row readable; each step is idempotent, so two services migrating at
//!   once need no lease, and a crash mid-way migrates again on the next
//!   open; then the version row is written.
//!   - 1 → 2: `ordinal` becomes nullable (`None`: a sink without an
//!     ordinal, distinct from `w0/`'s `Some(0)`; old rows keep the ordinal
//!     they were written with). ClickHouse runs `ALTER TABLE <prefix>packs
//!     MODIFY COLUMN ordinal Nullable(UInt32)` (a no-op when repeated),
//!     SQLite rebuilds the packs table in one `BEGIN IMMEDIATE`
//!     transaction, the fake relabels.
//!   - 2 → 3: ClickHouse's tables are partitioned by day ("Bounded
//!     tables" below).
//!   - 3 → 4: the row's `sha256` becomes the SHA-256 of the whole object
//!     (what `sha256sum` of it prints, and S3's `ChecksumSHA256`), and the
//!     trailer's checksum (of every byte before the trailer's hash field)
//!     moves to a column of its own, `trailer_sha256` (spool-core's crate
//!     docs, "Which hash is which"). ClickHouse adds it with `ALTER TABLE ADD
//!     COLUMN trailer_sha256 String DEFAULT sha256` (metadata only: rows
//!     already there read their `sha256` in it), SQLite adds it and copies
//!     `sha256` in, in the install's transaction. Rows written before
//!     carry the trailer's checksum in both columns
//!     ([`PackRow::whole_sha256`] tells them apart); rewriting their
//!     `sha256` would mean reading every object, so they keep it, and
//!     readers check them by the trailer.
//!   - 4 → 5: a row names its pack's byte range in its object,
//!     `object_offset` (the pack is the `bytes` bytes from there), so many
//!     packs can share one object and each still be read with one ranged
//!     GET and checked by its own `sha256`. ClickHouse adds it with `ALTER
//!     TABLE ADD COLUMN object_offset UInt64 DEFAULT 0` (metadata only),
//!     SQLite with `ADD COLUMN ... NOT NULL DEFAULT 0`: every row already
//!     there reads 0, a pack that is its whole object.
//!
//!   Upgrade note: a process of an older version that was already running
//!   reads rows with its old row layout; stop old readers (`spool ls`,
//!   Python) before the first service of a newer version starts on a
//!   ClickHouse catalog, or restart them after.
//! - **At most one holder of a lease term, and a deposed holder writes
//!   nothing.** The lease is an append-only claim log in
//!   `<prefix>lease(name, term, lease_id, holder, acquired_at_ms,
//!   expires_at_ms)`, decided by the catalog's clock
//!   (`toUInt64(now()) * 1000`, whole seconds) and by reading back:
//!   1. read the head of the name (all claims at its highest term; two at
//!      one term mean *contested*: nobody holds it);
//!   2. refuse if it is live and not ours ([`LeaseClaim::Busy`]);
//!   3. append `term + 1` with `expires = now + ttl`;
//!   4. read back the claims at that term: held only if ours is the sole
//!      one ([`LeaseClaim::Held`]), else [`LeaseClaim::Contested`].
//!
//!   Two claimants of one term cannot both read back alone: whichever reads
//!   back second sees the other's row. Each acquisition mints a new
//!   `lease_id` (kept across that holding's renewals, each a fresh claim at
//!   the next term), so a fence of an earlier holding never passes again.
//!   Release appends a tombstone (expires at once). The claim algorithm is
//!   written once (`lease.rs`) over three primitives every backend has.
//! - **The fence.** A lease-gated index insert is one statement,
//!   `INSERT INTO packs (...) SELECT ... WHERE throwIf(<fence> != 1) = 0`,
//!   where the fence says: the head of this name is exactly one claim, it
//!   is our `lease_id`, and it expires later than `now + fence_margin`.
//!   The statement runs with `max_execution_time = fence_margin - 1 s`. A
//!   deposed writer's insert fails before it writes a row (code 395) and
//!   [`Catalog::index`] returns [`Error::Fenced`]; a statement that
//!   succeeds wrote every row, so nothing is read back. SQLite checks the
//!   same fence once per batch inside the batch's `BEGIN IMMEDIATE`
//!   transaction, where no claim can land in between.
//! - **The index insert as fast as a plain one** (measured on
//!   18.16 in BENCHMARKS.md). Unfenced rows go as plain `INSERT INTO packs
//!   (12 columns) VALUES (...), ...` — the fastest shape old and new
//!   servers take — with `indexed_at_ms` left to its column default (the
//!   server clock, filled once per block; a `now()` in `VALUES` would be
//!   parsed row by row). Fenced rows need a `WHERE`, which `VALUES` cannot
//!   carry: they travel as one array literal per column unrolled by
//!   `ARRAY JOIN`. Inserts go as SQL text sent verbatim (never through the
//!   crate's `?` binding), never RowBinary bodies (old servers mishandle
//!   some RowBinary inserts, ClickHouse#37420). `async_insert=1` in the URL
//!   (default off; ClickHouse 22.1 and later, refused on older servers with
//!   [`Error::NotSupportedByServer`]) runs unfenced inserts with
//!   `async_insert=1, wait_for_async_insert=1`.
//!
//! # Safety margin
//!
//! | knob | default | rule |
//! |---|---|---|
//! | `ttl` | 30 s | whole seconds, ≥ 5 s |
//! | `renew_interval` | ttl/3 (10 s) | ≤ ttl/3 |
//! | `fence_margin` | 5 s | whole seconds, ≥ 2 s, `fence_margin + renew_interval + 1 s < ttl` |
//! | fenced insert's `max_execution_time` | fence_margin − 1 s (4 s) | < fence_margin |
//! | latch | 2 × ttl (60 s) | a foreign lease seen live that long after losing |
//!
//! Why it is safe: a fenced insert passes only while our claim has more
//! than `fence_margin` to live by the server's clock, and the server stops
//! it after `max_execution_time < fence_margin`; so the insert lands before
//! our claim lapses, and a rival's claim (which needs ours lapsed) comes
//! after it. Why it stays live: renewing every `renew_interval` keeps our
//! claim `ttl - renew_interval` ahead of now, minus one second of clock
//! resolution, which the last rule keeps above `fence_margin`. With the
//! default 5 s margin the smallest TTL is 10 s. [`LeaseConfig::validate`]
//! refuses configs that break these rules. The local view of a holding is
//! conservative: it ends at send time + ttl − 1 s ([`LeaseGuard::local_deadline`]).
//!
//! Assumptions: one ClickHouse server, or a replicated catalog (below);
//! clocks only matter on the servers, since every time in the log comes
//! from them.
//!
//! # Bounded tables (schema version 3)
//!
//! ClickHouse's tables are partitioned by UTC day: packs by creation day
//! (a re-indexed pack lands in its first row's partition, where the
//! `ReplacingMergeTree` collapses it; an index statement spans at most 64
//! days), claims by claim day. A holder's keeper trims the log every
//! [`LEASE_TRIM_INTERVAL`] ([`Catalog::trim_lease_log`]): days older than
//! yesterday are dropped (`ALTER TABLE ... DROP PARTITION`, 18.16 and
//! current releases alike), after a tombstone at the head term of every
//! name idle since then has been written into today, so the log holds one
//! to two days and no name ever loses its head term. Lease reads use no
//! `FINAL` (the log is a plain `MergeTree`) and read one name's rows of
//! those retained days (the primary key starts with `name`): bounded by
//! the renewals of two days, whatever the catalog's age. Why that is safe:
//! the claim algorithm needs the head term of a name; an active name's head
//! is at most a renew interval old and never in a dropped day; an idle
//! name's head is carried forward before its day goes, and has lapsed long
//! before (a TTL is at most [`MAX_TTL`], an hour, far under the day), so
//! the tombstone changes nobody's holding. Without the carry, a claimant
//! who read the head just before the drop and one who read after it could
//! both append a term that reads back alone. SQLite and the fake delete
//! claims older than [`LEASE_LOG_RETENTION`] except each name's head.
//!
//! Except on a replicated catalog whose server answers a version before
//! 20.4: there `DROP PARTITION` leaves the dropped day's entry in
//! ZooKeeper's `/quorum/last_part` (one entry per partition, naming its
//! last quorum part; measured on 18.16), and every sequentially consistent
//! read then fails with code 289 for good (a ClickHouse bug fixed in 20.4; README.md), so the
//! trim drops nothing there. The log then grows by one row per renewal
//! (ttl/3) of each held lease, plus one per acquisition and release: with
//! the default 30 s TTL, 8,640 rows a day per held name, and lease reads
//! cost one more partition lookup per retained day (a name's rows are a
//! primary-key range in each). Upgrading the servers to 20.4 or later
//! brings the trim back. A day dropped by an older spool is repaired by
//! one quorum row into it (README, "Replicated catalog"), which makes that
//! day's entry name a live part again.
//!
//! Two other schemes were weighed for 18.16 and left:
//!
//! - **Drop, then re-seed.** Drop the day, then write one quorum row into
//!   it (the repair above), so each retained day keeps one row. Between
//!   the two statements every consistent read on every replica fails (the
//!   whole fleet's renewals and claims), and a holder killed between them
//!   leaves the lease wedged for the fleet until someone repairs it. A
//!   trim must never be able to stop every node; rows that grow by a day
//!   can wait for an upgrade.
//! - **A lease held in ZooKeeper / ClickHouse Keeper**, which every
//!   replicated deployment already runs: an ephemeral node per holding and
//!   its version as a fencing token. Liveness would come from the
//!   session, and nothing would grow. What spool's lease is for, though,
//!   is the fence on index inserts: a lease-gated insert is one statement
//!   whose own `WHERE` reads the lease at the replica that writes (the
//!   fence above). A ClickHouse insert cannot read a Keeper node, so a
//!   holder whose session expired mid-insert would write beside its
//!   successor: the fence would move to the readers, which a
//!   `ReplacingMergeTree` cannot do. It would also bring a second system
//!   to reach (a node can see Keeper and not ClickHouse, or the
//!   reverse), a client, its ACLs and chroot, and a second lease for the
//!   one-server and SQLite catalogs, which have no Keeper; ClickHouse
//!   Cloud exposes none. So the lease stays a ClickHouse table everywhere.
//!
//! # Replicated catalog
//!
//! `clickhouse://H1:P1,H2:P2,H3:P3/DB?cluster=NAME` (or the configuration's
//! `catalog.cluster`): the tables are `Replicated*MergeTree` created
//! `ON CLUSTER NAME` (only when one is missing, so a catalog in place opens
//! with a replica down). Every insert (index rows, claims, tombstones, the
//! version row) carries `insert_quorum` (URL `insert_quorum=N`, default 2)
//! and `insert_quorum_timeout` as HTTP parameters (18.16 refuses `INSERT
//! ... SETTINGS`): `Ok` means the row is on a quorum of replicas, and only
//! then does a pack leave its spool. Sequential consistency holds only for
//! quorum inserts that do not overlap: each replica is asked at connect
//! whether `system.settings` has `insert_quorum_parallel` (on by default on
//! current releases, absent on 18.16, which refuses unknown settings), and
//! where it does every quorum insert also carries
//! `insert_quorum_parallel=0`. The schema check refuses replicated tables
//! without a cluster and plain ones with it ([`Error::ReplicatedWithoutCluster`],
//! [`Error::NotReplicated`]), a cluster the server does not list
//! ([`Error::UnknownCluster`]), and a quorum that is not a majority of the
//! cluster's replicas (`system.clusters`, the largest shard) or exceeds them
//! ([`Error::QuorumBelowMajority`], [`Error::QuorumAboveReplicas`]): two
//! quorums of one cluster must share a replica. Every read that decides a claim (the
//! head, the read-back, the fence inside a fenced insert) carries
//! `select_sequential_consistency=1`: it sees every confirmed claim, or
//! fails on a replica that lacks one. So two claimants of one term cannot
//! both read back alone (each claim is confirmed before its read-back, and
//! each read-back sees every confirmed claim), and the fence sees the head
//! a rival's claim needs confirmed. Without a quorum an insert fails
//! (retryable: codes 285, 319; the pack stays in its spool) and a
//! claim fails closed (an error, never `Held`; a renewing holder lets go at
//! its local deadline). A claim whose insert failed may still land once the
//! replicas return (code 319: "unknown status"): it then lives out its TTL
//! as a foreign claim, which costs one TTL of waiting, never a second
//! holder. Clocks: each replica stamps with its own clock, so the fence's
//! argument needs the replicas' clocks within the fence margin of each
//! other (NTP does far better). The URL's hosts are tried in turn: a
//! replica that refuses, stalls past the request timeout or answers that it
//! cannot serve (no ZooKeeper, read-only, not in the quorum) is skipped,
//! each at most once per call; the one that answers is tried first next
//! time, and a request cut by its caller's deadline moves the preference
//! on too.
//!
//! ## Quorum contention (code 286)
//!
//! ClickHouse before current releases' `insert_quorum_parallel` (18.16
//! among them; current releases with it off, as this crate sends it) runs
//! quorum inserts into one table one at a time: while an insert waits for
//! its quorum (the table's one `quorum/status` node in ZooKeeper), any
//! other quorum insert into that table, on any replica, is answered code
//! 286 (`UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE`,
//! [`QUORUM_CONTENTION_CODE`]). A fleet's writers meet it all the time: one
//! table of claims and one of packs take every node's inserts. It is
//! contention, handled as such:
//!
//! - **Tried again, where it was answered.** The statement is sent again
//!   to the same replica after a pause of [`CONTENTION_FIRST_PAUSE`]
//!   doubling up to [`CONTENTION_MAX_PAUSE`], each drawn between half and
//!   the whole of its step so writers that met one pending quorum come
//!   back apart. Another replica would answer the same (the pending quorum
//!   is the table's, shared by all), so it is no reason to fail over nor
//!   to move the preferred replica.
//! - **Safe to repeat.** 286 is answered before anything is written: the
//!   replica checks for a pending quorum before it writes the part, and a
//!   rival that started its quorum between that check and the commit
//!   fails the commit's ZooKeeper transaction, which rolls the part back.
//!   So a retried claim or row lands once (unlike code 319, "unknown
//!   status", after which a claim may still land). A fenced insert is one
//!   statement each try: each try's fence is checked again by the server,
//!   so a holding that lapsed during the pauses writes nothing (code 395,
//!   [`Error::Fenced`]), and the margin argument above holds for each try
//!   as it does for one.
//! - **Bounded by the statement's budget.** All tries of a statement on a
//!   replica share one budget: the request timeout (the URL's, 30 s by
//!   default), the fence margin for a fenced insert. Each try is cut by
//!   what is left of it, and when the next pause would end past it the 286
//!   is returned as the error (retryable: the pack stays in its spool, the
//!   service tries it at its next cycle). A lease claim is cut sooner by
//!   its keeper: a renewal at the holding's local deadline (send time +
//!   ttl − 1 s), an acquisition after one renew interval. So a quorum
//!   stalled longer than a holding has left costs that holding, as a
//!   failed renewal does (the keeper lets go at its local deadline; the
//!   fence has refused its inserts `fence_margin` earlier), and never a
//!   late or doubled claim: a try cut in its pause has nothing in flight,
//!   and one cut mid-request is the timeout case above.
//! - **Counted, not failed.** A 286 that a later try overcomes is no
//!   error: [`Catalog::counters`] counts every 286 answer
//!   ([`CatalogCounters::quorum_contention`]) and the statements that gave
//!   up on one ([`CatalogCounters::quorum_contention_gave_up`]); the
//!   service's snapshot and `/metrics` show them
//!   (`spool_catalog_quorum_contention_total`).
//!
//! # Latch
//!
//! [`LeaseKeeper`] renews every `renew_interval` and acquires when not
//! holding. Once it has held the lease and then sees a foreign lease live for
//! 2 × ttl, it latches ([`LeaseState::latched`]): it never claims again and
//! the service stops its lease-gated work for its lifetime (exit code 7 for
//! the daemon). Its watch channel ([`LeaseKeeper::spawn`]) wakes the
//! service's loop at once.
//!
//! # Backends (chosen by URL, [`open`])
//!
//! - `clickhouse://HOST:PORT/DATABASE[?table_prefix=P&user=U&password=W&async_insert=1]`:
//!   the official `clickhouse` crate (0.15) over HTTP with a `TCP_NODELAY`
//!   client. The server's version is read at connect; the crate's schema
//!   validation (`RowBinaryWithNamesAndTypes`) is on from 23.x and off below
//!   (Debian's 18.16 refuses that format). The SQL stays in the subset
//!   18.16 and current releases both accept: no `DateTime64`/`now64`, no
//!   server-side parameters, no CTEs, `SETTINGS` before `FORMAT`; literals
//!   are quoted by this crate (`sql.rs`), identifiers are checked at parse.
//! - `sqlite:///ABS/PATH.db[?table_prefix=P]` (cargo feature `sqlite`, on
//!   by default): bundled SQLite in WAL mode; the same log and the same
//!   fence, each claim appended only if the head has not moved, in one
//!   `BEGIN IMMEDIATE` transaction.
//! - `memory://` (a fresh catalog) or `memory://NAME` (shared in the
//!   process): the fake, only with the `testing` feature, with switches to
//!   make it unreachable and to move its clock.
//!
//! # Errors
//!
//! [`Error`] names the catalog (credentials removed), what the statement
//! was for and what to do; [`Error::is_retryable`] says whether trying later
//! may help (unreachable, timeouts, 5xx, busy server) or not (auth, schema
//! mismatch, unknown setting, other exceptions).
//!
//! # Tests
//!
//! - Unit tests here: URL parsing, the lease config rules, golden SQL text of
//!   every ClickHouse and SQLite statement (`sql.rs`, `sqlite.rs`), error
//!   classification of ClickHouse exception bodies.
//! - `tests/tests/catalog_fast.rs` (spool-tests): one behavioural suite
//!   (`tests/src/catalog_suite.rs`) against the fake and SQLite; wiremock
//!   playing ClickHouse for exception bodies, auth failures, 5xx, and a
//!   closed port; two contender processes (`lease-contender`) on SQLite;
//!   TTL expiry and the latch in a `serial` module.
//! - `tests/tests/real_clickhouse.rs` and `tests/tests/real_chdb.rs`: the
//!   same suite, the contender processes, the migrations and the lease
//!   log's trim (`tests/src/clickhouse_suite.rs`) against Debian's
//!   ClickHouse 18.16 and against the current engine (chdb-core), each
//!   test in its own database, dropped afterwards (`cargo xtask test`); on
//!   the current engine every statement is also parsed on a cluster
//!   ([`testing::clickhouse_statements`]).
//!
//! # Features
//!
//! - `clickhouse` (default): the production catalog, `clickhouse://`.
//! - `sqlite` (default): the single-node catalog, `sqlite:///ABS/PATH.db`
//!   (bundled SQLite).
//! - `testing`: the `memory://` fake ([`MemoryCatalog`]) and the [`testing`]
//!   seams; never in the `spool` binary of a root build.
//!
//! A URL whose backend is left out is refused with [`Error::BackendNotBuilt`].
#![forbid(unsafe_code)]

mod catalog;
#[cfg(feature = "clickhouse")]
mod clickhouse;
mod error;
mod holder;
mod keeper;
mod lease;
#[cfg(any(test, feature = "testing"))]
mod memory;
mod redact;
mod row;
mod seams;
#[cfg(feature = "clickhouse")]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod target;

use std::sync::Arc;

pub use crate::catalog::{
    Catalog, CatalogCounters, DEFAULT_REQUEST_TIMEOUT, LEASE_LOG_RETENTION, LEASE_TRIM_INTERVAL,
    MAX_KEYS_PER_STATEMENT, MAX_ROWS_PER_STATEMENT, SCHEMA_VERSION,
};
#[cfg(feature = "clickhouse")]
pub use crate::clickhouse::{
    ClickHouseCatalog, CONTENTION_FIRST_PAUSE, CONTENTION_MAX_PAUSE, QUORUM_CONTENTION_CODE,
};
pub use crate::error::{Error, Result};
pub use crate::holder::LeaseHolder;
pub use crate::keeper::{LeaseKeeper, LeaseState, LeaseTask};
pub use crate::lease::{
    catalog_lease_name, LeaseClaim, LeaseConfig, LeaseGuard, LeaseHead, LeaseRecord, LeaseScope,
    NewClaim, CLOCK_RESOLUTION, DEFAULT_FENCE_MARGIN, DEFAULT_TTL, MAX_TTL, MIN_TTL,
};
#[cfg(any(test, feature = "testing"))]
pub use crate::memory::MemoryCatalog;
pub use crate::redact::mask_url;
pub use crate::row::PackRow;
#[cfg(feature = "sqlite")]
pub use crate::sqlite::SqliteCatalog;
pub use crate::target::{
    CatalogUrl, ClickHouseTarget, DEFAULT_CLICKHOUSE_PORT, DEFAULT_INSERT_QUORUM,
    DEFAULT_TABLE_PREFIX, MAX_REPLICAS,
};

/// Test seams (feature `testing`): reach past the [`Catalog`] trait to the
/// backend a URL names. A feature only adds; it never changes the trait.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    /// The backend a URL names, reached past the trait.
    enum Backend {
        #[cfg(feature = "clickhouse")]
        ClickHouse(Box<ClickHouseCatalog>),
        #[cfg(feature = "sqlite")]
        Sqlite(SqliteCatalog),
        Memory(Arc<MemoryCatalog>),
    }

    /// The backend of `url`; `None` for an unnamed `memory://` (a fresh
    /// fake nobody else can reach); a backend this build lacks is refused.
    fn backend(url: &str) -> Result<Option<Backend>> {
        // Used only by the arms of a backend this build leaves out.
        #[allow(unused_variables)]
        let not_built = |reason: &str| Error::BackendNotBuilt {
            url: redact::mask_url(url),
            reason: reason.into(),
        };
        Ok(Some(match CatalogUrl::parse(url)? {
            #[cfg(feature = "clickhouse")]
            CatalogUrl::ClickHouse(t) => Backend::ClickHouse(Box::new(ClickHouseCatalog::new(t))),
            #[cfg(not(feature = "clickhouse"))]
            CatalogUrl::ClickHouse(_) => {
                return Err(not_built(
                    "this build has no ClickHouse catalog (cargo feature `clickhouse` is off)",
                ))
            }
            #[cfg(feature = "sqlite")]
            CatalogUrl::Sqlite { path, table_prefix } => {
                Backend::Sqlite(SqliteCatalog::new(path, &table_prefix)?)
            }
            #[cfg(not(feature = "sqlite"))]
            CatalogUrl::Sqlite { .. } => {
                return Err(not_built(
                    "this build has no SQLite catalog (cargo feature `sqlite` is off)",
                ))
            }
            CatalogUrl::Memory { name: Some(n) } => Backend::Memory(MemoryCatalog::shared(&n)),
            CatalogUrl::Memory { name: None } => return Ok(None),
        }))
    }

    /// Creates the catalog at `url` as a version-1 build did — the frozen
    /// version-1 DDL, its version row, and `rows` written as version 1
    /// wrote them (`ordinal` NOT NULL: a `None` is refused) — without
    /// touching it through this build's schema check, so the migration is
    /// tested on a real old catalog. Nothing else may use the catalog
    /// first (the fake: a fresh `memory://NAME`).
    pub async fn create_v1(url: &str, rows: &[PackRow]) -> Result<()> {
        if let Some(r) = rows.iter().find(|r| r.ordinal.is_none()) {
            return Err(Error::InvalidRow {
                pack_id: r.pack_id.clone(),
                reason: "schema version 1 has no \"no ordinal\"".into(),
            });
        }
        match backend(url)? {
            #[cfg(feature = "clickhouse")]
            Some(Backend::ClickHouse(c)) => c.testing_create_v1(rows).await,
            #[cfg(feature = "sqlite")]
            Some(Backend::Sqlite(c)) => c.testing_create_v1(rows).await,
            Some(Backend::Memory(c)) => c.testing_create_v1(rows),
            None => Ok(()),
        }
    }

    /// The highest schema-version row of the catalog at `url`, read
    /// without the schema check (0: none).
    pub async fn schema_version(url: &str) -> Result<u32> {
        match backend(url)? {
            #[cfg(feature = "clickhouse")]
            Some(Backend::ClickHouse(c)) => c.testing_schema_version().await,
            #[cfg(feature = "sqlite")]
            Some(Backend::Sqlite(c)) => c.testing_schema_version().await,
            Some(Backend::Memory(c)) => Ok(c.testing_schema_version()),
            None => Ok(0),
        }
    }

    /// Named texts: statements, or settings with their values.
    pub type Named = Vec<(&'static str, String)>;

    /// Every statement the ClickHouse catalog at `url` sends (its database,
    /// table prefix and cluster), once each with sample arguments, named
    /// after what makes it; and every setting its requests carry on its
    /// cluster (none without one). The current engine, which runs no
    /// replicated table, parses them (`tests/tests/real_chdb.rs`).
    #[cfg(feature = "clickhouse")]
    pub fn clickhouse_statements(url: &str) -> Result<(Named, Named)> {
        match CatalogUrl::parse(url)? {
            CatalogUrl::ClickHouse(t) => {
                let c = ClickHouseCatalog::new(t);
                Ok((c.testing_statements(), c.testing_cluster_settings()))
            }
            _ => Err(Error::InvalidUrl {
                url: redact::mask_url(url),
                reason: "not a clickhouse:// URL".into(),
            }),
        }
    }

    /// The unfenced index statement the ClickHouse catalog at `url` sends
    /// for `rows`, as text (the catalog bench times it bare).
    #[cfg(feature = "clickhouse")]
    pub fn clickhouse_index_statement(url: &str, rows: &[PackRow]) -> Result<String> {
        match CatalogUrl::parse(url)? {
            CatalogUrl::ClickHouse(t) => {
                Ok(ClickHouseCatalog::new(t).testing_index_statement(rows))
            }
            _ => Err(Error::InvalidUrl {
                url: redact::mask_url(url),
                reason: "not a clickhouse:// URL".into(),
            }),
        }
    }

    /// Writes a schema-version row into the catalog at `url` (the refusal
    /// of a newer schema is tested with it).
    pub async fn set_schema_version(url: &str, version: u32) -> Result<()> {
        match backend(url)? {
            #[cfg(feature = "clickhouse")]
            Some(Backend::ClickHouse(c)) => c.testing_set_schema_version(version).await,
            #[cfg(feature = "sqlite")]
            Some(Backend::Sqlite(c)) => c.testing_set_schema_version(version).await,
            Some(Backend::Memory(c)) => c.testing_set_schema_version(version).await,
            None => Ok(()),
        }
    }

    /// A catalog whose `index()` panics (the message names it as on
    /// purpose) and which passes every other call to the catalog inside:
    /// a bug in the service loop, for the tests of a panicked loop.
    pub struct PanicOnIndex(pub Arc<dyn Catalog>);

    #[async_trait::async_trait]
    impl Catalog for PanicOnIndex {
        fn server(&self) -> String {
            self.0.server()
        }
        async fn ensure_schema(&self) -> crate::Result<()> {
            self.0.ensure_schema().await
        }
        async fn index(
            &self,
            _rows: &[crate::PackRow],
            _fence: Option<&crate::LeaseGuard>,
        ) -> crate::Result<()> {
            panic!("index() exploded on purpose");
        }
        async fn get(&self, pack_id: &str) -> crate::Result<Option<crate::PackRow>> {
            self.0.get(pack_id).await
        }
        async fn list_range(&self, from_ms: u64, to_ms: u64) -> crate::Result<Vec<crate::PackRow>> {
            self.0.list_range(from_ms, to_ms).await
        }
        async fn count(&self) -> crate::Result<u64> {
            self.0.count().await
        }
        async fn referenced_bytes(
            &self,
            object_keys: &[String],
        ) -> crate::Result<std::collections::HashMap<String, u64>> {
            self.0.referenced_bytes(object_keys).await
        }
        async fn current_rows(
            &self,
            pack_ids: &[String],
        ) -> crate::Result<std::collections::HashMap<String, crate::PackRow>> {
            self.0.current_rows(pack_ids).await
        }
        fn request_timeout(&self) -> std::time::Duration {
            self.0.request_timeout()
        }
        async fn read_lease_head(&self, name: &str) -> crate::Result<crate::LeaseHead> {
            self.0.read_lease_head(name).await
        }
        async fn append_claim(&self, claim: &crate::NewClaim) -> crate::Result<()> {
            self.0.append_claim(claim).await
        }
        async fn read_claims(
            &self,
            name: &str,
            term: u64,
        ) -> crate::Result<Vec<crate::LeaseRecord>> {
            self.0.read_claims(name, term).await
        }
        async fn lease_log(&self, name: &str) -> crate::Result<Vec<crate::LeaseRecord>> {
            self.0.lease_log(name).await
        }
        async fn trim_lease_log(&self) -> crate::Result<u64> {
            self.0.trim_lease_log().await
        }
    }

    pub use crate::seams::set_kill_hook;

    static PANIC_ON_INDEX: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    /// From now on, every catalog [`open`](crate::open) makes in this
    /// process is wrapped in [`PanicOnIndex`] (the `spool-with-seams`
    /// helper's `--panic-on-index`).
    pub fn panic_on_index() {
        PANIC_ON_INDEX.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// `catalog`, wrapped in [`PanicOnIndex`] if [`panic_on_index`] was
    /// called.
    pub(crate) fn seamed(catalog: Arc<dyn Catalog>) -> Arc<dyn Catalog> {
        if PANIC_ON_INDEX.load(std::sync::atomic::Ordering::SeqCst) {
            Arc::new(PanicOnIndex(catalog))
        } else {
            catalog
        }
    }
}

/// Opens the catalog a URL names. Nothing is contacted until the first
/// operation. ClickHouse requests are bounded by
/// [`DEFAULT_REQUEST_TIMEOUT`] each ([`open_with_timeout`] sets another).
pub fn open(url: &str) -> Result<Arc<dyn Catalog>> {
    open_with_timeout(url, DEFAULT_REQUEST_TIMEOUT)
}

/// [`open`] with another bound on one request (ClickHouse: connect, send,
/// answer; the embedded and fake catalogs answer locally and ignore it).
/// A caller's own deadline still cuts a call sooner: this only bounds each
/// statement.
pub fn open_with_timeout(
    url: &str,
    request_timeout: std::time::Duration,
) -> Result<Arc<dyn Catalog>> {
    let catalog = open_backend(url, request_timeout)?;
    #[cfg(any(test, feature = "testing"))]
    let catalog = testing::seamed(catalog);
    Ok(catalog)
}

/// [`open_with_timeout`] for a reader (`spool ls`, `cat`, `sweep`,
/// `reindex --dry-run`, `status`): the catalog must exist. A missing
/// ClickHouse database or table, or a missing SQLite file or table, is
/// [`Error::NoCatalog`] at the first call, and nothing is ever created or
/// migrated (a typo in a URL never makes an empty catalog a sweep would
/// read as "nothing indexed").
pub fn open_existing(url: &str, request_timeout: std::time::Duration) -> Result<Arc<dyn Catalog>> {
    let catalog = open_backend_as(url, request_timeout, true)?;
    #[cfg(any(test, feature = "testing"))]
    let catalog = testing::seamed(catalog);
    Ok(catalog)
}

/// The backend `url` names, unwrapped.
fn open_backend(url: &str, request_timeout: std::time::Duration) -> Result<Arc<dyn Catalog>> {
    open_backend_as(url, request_timeout, false)
}

/// The backend `url` names, unwrapped, to read only or not.
fn open_backend_as(
    url: &str,
    request_timeout: std::time::Duration,
    read_only: bool,
) -> Result<Arc<dyn Catalog>> {
    match CatalogUrl::parse(url)? {
        #[cfg(feature = "clickhouse")]
        CatalogUrl::ClickHouse(t) => {
            let c = ClickHouseCatalog::new(t).with_request_timeout(request_timeout);
            Ok(Arc::new(if read_only { c.read_only() } else { c }))
        }
        #[cfg(not(feature = "clickhouse"))]
        CatalogUrl::ClickHouse(_) => Err(Error::BackendNotBuilt {
            // (the request bound is the ClickHouse client's alone)
            url: {
                let _ = (request_timeout, read_only);
                redact::mask_url(url)
            },
            reason: "this build has no ClickHouse catalog (cargo feature `clickhouse` is off)"
                .into(),
        }),
        #[cfg(feature = "sqlite")]
        CatalogUrl::Sqlite { path, table_prefix } => {
            let c = SqliteCatalog::new(path, &table_prefix)?;
            Ok(Arc::new(if read_only { c.read_only() } else { c }))
        }
        #[cfg(not(feature = "sqlite"))]
        CatalogUrl::Sqlite { .. } => Err(Error::BackendNotBuilt {
            url: redact::mask_url(url),
            reason: "this build has no SQLite catalog (cargo feature `sqlite` is off)".into(),
        }),
        #[cfg(any(test, feature = "testing"))]
        CatalogUrl::Memory { name } => Ok(match name {
            Some(n) => MemoryCatalog::shared(&n),
            None => Arc::new(MemoryCatalog::new()),
        }),
        #[cfg(not(any(test, feature = "testing")))]
        CatalogUrl::Memory { .. } => Err(Error::BackendNotBuilt {
            url: redact::mask_url(url),
            reason:
                "this build has no test seams: memory:// is the test fake (cargo feature `testing`)"
                    .into(),
        }),
    }
}
