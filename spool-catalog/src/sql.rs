//! The ClickHouse SQL text, in the subset Debian's 18.16 and current
//! releases both accept. Golden tests below fix every statement.
//!
//! Identifiers (database, table prefix) were checked at URL parse to be
//! `[A-Za-z_][A-Za-z0-9_]*`; string values are quoted by [`quote`].

use crate::lease::{LeaseGuard, NewClaim};
use crate::row::PackRow;

/// The catalog clock in milliseconds (one-second resolution on 18.16).
pub(crate) const NOW_MS: &str = "toUInt64(now()) * 1000";

/// The default of `indexed_at_ms`: the server clock, filled by the server
/// once per inserted block when an insert leaves the column out.
pub(crate) const INDEXED_AT_DEFAULT: &str = NOW_MS;

/// The pack columns a `VALUES` index insert carries: all but
/// `indexed_at_ms`, which the column's default fills.
pub(crate) const PACK_VALUE_COLUMNS: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, trailer_sha256, object_offset";

/// The ClickHouse exception code of `throwIf` (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO):
/// a fenced index insert whose fence was shut.
pub(crate) const FENCE_SHUT_CODE: u32 = 395;

/// The setting that lets quorum inserts overlap (current releases, on by
/// default); sequential consistency needs it off, so a cluster's quorum
/// inserts send it as 0 where the server has it (18.16 does not, and
/// refuses a setting it does not know).
pub(crate) const QUORUM_PARALLEL: &str = "insert_quorum_parallel";

/// The lease columns in table order.
pub(crate) const LEASE_COLUMNS: &str =
    "name, term, lease_id, holder, acquired_at_ms, expires_at_ms";

/// The pack columns in table order.
pub(crate) const PACK_COLUMNS: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset";

/// The pack columns of schema versions 1 to 3 (no `trailer_sha256`): what
/// a packs table made by them holds, copied by the partitioning swap.
pub(crate) const PACK_COLUMNS_V3: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms";

/// The default of `trailer_sha256`: a row written before schema version 4
/// carried the trailer's checksum as its `sha256`, so on such rows the
/// column reads as that value (spool-core's crate docs, "Which hash is
/// which").
pub(crate) const TRAILER_SHA256_DEFAULT: &str = "sha256";

/// The expected columns (name, type) of the packs table.
pub(crate) const PACKS_SCHEMA: &[(&str, &str)] = &[
    ("pack_id", "String"),
    ("object_key", "String"),
    ("store_id", "String"),
    ("sha256", "String"),
    ("bytes", "UInt64"),
    ("records", "UInt64"),
    ("source_host", "String"),
    ("source_pid", "UInt32"),
    ("rank_dir", "String"),
    ("ordinal", "Nullable(UInt32)"),
    ("created_at_ms", "UInt64"),
    ("indexed_at_ms", "UInt64"),
    ("trailer_sha256", "String"),
    ("object_offset", "UInt64"),
];

/// The expected columns (name, type) of the lease table.
pub(crate) const LEASE_SCHEMA: &[(&str, &str)] = &[
    ("name", "String"),
    ("term", "UInt64"),
    ("lease_id", "UUID"),
    ("holder", "String"),
    ("acquired_at_ms", "UInt64"),
    ("expires_at_ms", "UInt64"),
];

/// A ClickHouse string literal: backslash and quote escaped (and the
/// control characters a row never holds, for any other text).
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The literals of a row's first eleven columns (all but `indexed_at_ms`
/// and `trailer_sha256`), in table order, with `ordinal` spelled by the
/// caller.
fn literals(r: &PackRow, ordinal: &str) -> String {
    format!(
        "{}, {}, {}, {}, {}, {}, {}, {}, {}, {ordinal}, {}",
        quote(&r.pack_id),
        quote(&r.object_key),
        quote(&r.store_id),
        quote(&r.sha256),
        r.bytes,
        r.records,
        quote(&r.source_host),
        r.source_pid,
        quote(&r.rank_dir),
        r.created_at_ms,
    )
}

/// The packs table's partition: the UTC day of the pack's creation, so
/// that a re-indexed pack lands in the partition of its first row (a
/// `ReplacingMergeTree` collapses rows only within one partition) and
/// inserts of one day's packs touch one partition.
pub(crate) const PACKS_PARTITION: &str = "intDiv(created_at_ms, 86400000)";

/// The lease table's partition: the UTC day of the claim, by the catalog
/// clock; whole days are dropped by [`Tables::drop_lease_partition`].
pub(crate) const LEASE_PARTITION: &str = "intDiv(acquired_at_ms, 86400000)";

/// One day in milliseconds: the width of a partition.
pub(crate) const DAY_MS: u64 = 86_400_000;

/// What the packs table is renamed to when an unpartitioned one (schema
/// version 2 and before) is replaced by the partitioned layout; its rows
/// are copied over and it is kept for the operator to drop.
pub(crate) const UNPARTITIONED: &str = "_unpartitioned";

/// The name a partitioned table is built under before it is swapped in.
pub(crate) const PARTITIONED_NEW: &str = "_partitioned_new";

/// Table names of one catalog, and the cluster its tables are replicated
/// on (`None`: one server).
#[derive(Clone, Debug)]
pub(crate) struct Tables {
    pub(crate) database: String,
    pub(crate) prefix: String,
    pub(crate) cluster: Option<String>,
}

impl Tables {
    fn t(&self, name: &str) -> String {
        format!("`{}`.`{}{}`", self.database, self.prefix, name)
    }

    /// ` ON CLUSTER name` when replicated, else nothing.
    fn on_cluster(&self) -> String {
        self.cluster
            .as_ref()
            .map_or_else(String::new, |c| format!(" ON CLUSTER {c}"))
    }

    /// The engine of table `name` (unprefixed): `kind(args)` on one server,
    /// `Replicated<kind>('/clickhouse/tables/{shard}/DB/TABLE', '{replica}',
    /// args)` on a cluster (the `shard` and `replica` macros are each
    /// server's own).
    fn engine(&self, name: &str, kind: &str, args: &str) -> String {
        match &self.cluster {
            None => format!("{kind}({args})"),
            Some(_) => {
                let sep = if args.is_empty() { "" } else { ", " };
                format!(
                    "Replicated{kind}('/clickhouse/tables/{{shard}}/{}/{}{name}', '{{replica}}'{sep}{args})",
                    self.database, self.prefix
                )
            }
        }
    }
    pub(crate) fn packs_name(&self) -> String {
        format!("{}packs", self.prefix)
    }
    pub(crate) fn lease_name(&self) -> String {
        format!("{}lease", self.prefix)
    }
    pub(crate) fn packs(&self) -> String {
        self.t("packs")
    }
    pub(crate) fn lease(&self) -> String {
        self.t("lease")
    }
    pub(crate) fn schema(&self) -> String {
        self.t("schema_version")
    }

    pub(crate) fn create_database(&self) -> String {
        format!(
            "CREATE DATABASE IF NOT EXISTS `{}`{}",
            self.database,
            self.on_cluster()
        )
    }

    pub(crate) fn create_schema_table(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {}{} (version UInt32, installed_at_ms UInt64) ENGINE = {} ORDER BY version",
            self.schema(),
            self.on_cluster(),
            self.engine("schema_version", "MergeTree", "")
        )
    }

    pub(crate) fn create_packs(&self) -> String {
        self.create_packs_named("packs")
    }

    /// The packs table under `name` (unprefixed): `packs`, or the name it
    /// is built under before a swap.
    fn create_packs_named(&self, name: &str) -> String {
        let cols: Vec<String> = PACKS_SCHEMA
            .iter()
            .map(|(n, t)| match *n {
                "indexed_at_ms" => format!("{n} {t} DEFAULT {INDEXED_AT_DEFAULT}"),
                "trailer_sha256" => format!("{n} {t} DEFAULT {TRAILER_SHA256_DEFAULT}"),
                "object_offset" => format!("{n} {t} DEFAULT 0"),
                _ => format!("{n} {t}"),
            })
            .collect();
        format!(
            "CREATE TABLE IF NOT EXISTS {}{} ({}) ENGINE = {} PARTITION BY {PACKS_PARTITION} ORDER BY pack_id",
            self.t(name),
            self.on_cluster(),
            cols.join(", "),
            self.engine(name, "ReplacingMergeTree", "indexed_at_ms"),
        )
    }

    pub(crate) fn create_lease(&self) -> String {
        self.create_lease_named("lease")
    }

    fn create_lease_named(&self, name: &str) -> String {
        let cols: Vec<String> = LEASE_SCHEMA
            .iter()
            .map(|(n, t)| format!("{n} {t}"))
            .collect();
        format!(
            "CREATE TABLE IF NOT EXISTS {}{} ({}) ENGINE = {} PARTITION BY {LEASE_PARTITION} ORDER BY (name, term, lease_id)",
            self.t(name),
            self.on_cluster(),
            cols.join(", "),
            self.engine(name, "MergeTree", ""),
        )
    }

    /// Every table of this catalog with its engine and partition key
    /// (empty when unpartitioned), from `system.tables` of the server
    /// asked.
    pub(crate) fn select_tables(&self) -> String {
        format!(
            "SELECT name, engine, partition_key FROM system.tables WHERE database = {} AND startsWith(name, {})",
            quote(&self.database),
            quote(&self.prefix)
        )
    }

    /// `<prefix><table>` built partitioned under its new name, before the
    /// swap (`table` is `packs` or `lease`).
    pub(crate) fn create_partitioned_new(&self, table: &str) -> String {
        let name = format!("{table}{PARTITIONED_NEW}");
        match table {
            "packs" => self.create_packs_named(&name),
            _ => self.create_lease_named(&name),
        }
    }

    /// The swap: the unpartitioned table steps aside (kept, renamed) and
    /// the partitioned one takes its name, in one statement.
    pub(crate) fn swap_partitioned_in(&self, table: &str) -> String {
        format!(
            "RENAME TABLE {} TO {}, {} TO {}",
            self.t(table),
            self.t(&format!("{table}{UNPARTITIONED}")),
            self.t(&format!("{table}{PARTITIONED_NEW}")),
            self.t(table)
        )
    }

    /// Drops a partitioned table left under its new name by a swap that
    /// another process won.
    pub(crate) fn drop_partitioned_new(&self, table: &str) -> String {
        format!(
            "DROP TABLE IF EXISTS {}",
            self.t(&format!("{table}{PARTITIONED_NEW}"))
        )
    }

    /// Copies every row of the unpartitioned packs table into the
    /// partitioned one. Repeating it is harmless: a pack's rows are
    /// collapsed into one by the `ReplacingMergeTree` (same partition,
    /// same `pack_id`), and reads use `FINAL`.
    pub(crate) fn copy_unpartitioned_packs(&self) -> String {
        format!(
            "INSERT INTO {} ({PACK_COLUMNS_V3}) SELECT {PACK_COLUMNS_V3} FROM {}",
            self.packs(),
            self.t(&format!("packs{UNPARTITIONED}"))
        )
    }

    /// Copies the head of every lease name (the claims at its highest
    /// term) from the unpartitioned lease table into the partitioned one
    /// before it is swapped in, so that a live holding stays live and terms
    /// keep rising. Older claims stay in the renamed table.
    pub(crate) fn copy_lease_heads_to_new(&self) -> String {
        format!(
            "INSERT INTO {new} ({LEASE_COLUMNS}) SELECT {LEASE_COLUMNS} FROM {old} WHERE (name, term) IN (SELECT name, max(term) FROM {old} GROUP BY name)",
            new = self.t(&format!("lease{PARTITIONED_NEW}")),
            old = self.lease(),
        )
    }

    /// The lease table's active partitions (`system.parts` of the server
    /// asked; each a UTC day number).
    pub(crate) fn select_lease_partitions(&self) -> String {
        format!(
            "SELECT DISTINCT partition FROM system.parts WHERE database = {} AND table = {} AND active ORDER BY partition",
            quote(&self.database),
            quote(&self.lease_name())
        )
    }

    /// Before old partitions are dropped: a tombstone (expired at once,
    /// stamped now, so in today's partition) at the head term of every
    /// name whose newest claim is older than `cutoff_ms`, so that no name
    /// loses its head term and a claimant goes on from it. Only names idle
    /// since `cutoff_ms` qualify, and their head lapsed long ago (a TTL is
    /// at most [`crate::MAX_TTL`], the cutoff a day back): a tombstone
    /// changes nobody's holding.
    pub(crate) fn carry_idle_lease_heads(&self, cutoff_ms: u64) -> String {
        format!(
            "INSERT INTO {lease} ({LEASE_COLUMNS}) SELECT name, max(term), argMax(lease_id, term), argMax(holder, term), {NOW_MS}, {NOW_MS} FROM {lease} GROUP BY name HAVING max(acquired_at_ms) < {cutoff_ms}",
            lease = self.lease()
        )
    }

    /// Drops one day of the lease log (the caller checked `day` is a
    /// number). On a replicated table the drop goes to every replica
    /// through the replication log.
    pub(crate) fn drop_lease_partition(&self, day: u64) -> String {
        format!("ALTER TABLE {} DROP PARTITION {day}", self.lease())
    }

    /// The migration from schema version 1: `ordinal` becomes nullable
    /// (old rows keep their value). Idempotent: on a column that already is
    /// `Nullable(UInt32)` the server changes nothing (checked on 18.16).
    pub(crate) fn migrate_v1_ordinal(&self) -> String {
        format!(
            "ALTER TABLE {} MODIFY COLUMN ordinal Nullable(UInt32)",
            self.packs()
        )
    }

    /// The migration from schema version 3: the packs table gets
    /// `trailer_sha256`, which reads as `sha256` on every row already there
    /// ([`TRAILER_SHA256_DEFAULT`]: the value old rows carried there). A
    /// metadata-only change on 18.16, replicated by a replicated table
    /// itself; a second run fails (the column exists), which the caller
    /// checks by reading the columns again.
    pub(crate) fn migrate_v3_trailer_sha256(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN trailer_sha256 String DEFAULT {TRAILER_SHA256_DEFAULT}",
            self.packs()
        )
    }

    /// The migration from schema version 4: the packs table gets
    /// `object_offset`, where a pack's bytes start in its object, which
    /// reads as 0 on every row already there (each of those packs is its
    /// own object, so its range is the whole object). Metadata-only, as
    /// [`migrate_v3_trailer_sha256`](Self::migrate_v3_trailer_sha256) is;
    /// a second run fails on the column it added.
    pub(crate) fn migrate_v4_object_offset(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN object_offset UInt64 DEFAULT 0",
            self.packs()
        )
    }

    /// Gives `indexed_at_ms` its default (the server clock) on a packs
    /// table made before it had one. Only the default changes: 18.16 and
    /// later do that in the table's metadata, rewriting no data; repeating
    /// it changes nothing.
    pub(crate) fn set_indexed_at_default(&self) -> String {
        format!(
            "ALTER TABLE {} MODIFY COLUMN indexed_at_ms UInt64 DEFAULT {INDEXED_AT_DEFAULT}",
            self.packs()
        )
    }

    /// Version 1's packs table, frozen (`ordinal UInt32`): the migration
    /// tests create it.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn v1_create_packs(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (pack_id String, object_key String, store_id String, sha256 String, bytes UInt64, records UInt64, source_host String, source_pid UInt32, rank_dir String, ordinal UInt32, created_at_ms UInt64, indexed_at_ms UInt64) ENGINE = ReplacingMergeTree(indexed_at_ms) ORDER BY pack_id",
            self.packs()
        )
    }

    /// Versions 1 and 2's lease table, frozen (unpartitioned): the
    /// migration tests create it.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn v2_create_lease(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (name String, term UInt64, lease_id UUID, holder String, acquired_at_ms UInt64, expires_at_ms UInt64) ENGINE = MergeTree() ORDER BY (name, term, lease_id)",
            self.lease()
        )
    }

    /// Rows as version 1 wrote them (a `None` ordinal cannot be: 0).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn v1_insert(&self, rows: &[PackRow]) -> String {
        let values: Vec<String> = rows
            .iter()
            .map(|r| {
                let ordinal = r.ordinal.unwrap_or(0).to_string();
                format!("({}, {})", literals(r, &ordinal), r.indexed_at_ms)
            })
            .collect();
        format!(
            "INSERT INTO {} ({PACK_COLUMNS_V3}) VALUES {}",
            self.packs(),
            values.join(", ")
        )
    }

    /// Whether the server has the setting `insert_quorum_parallel` (1) or
    /// not (0): asked of each replica of a cluster at connect.
    pub(crate) fn select_has_quorum_parallel() -> String {
        format!(
            "SELECT toUInt64(count()) FROM system.settings WHERE name = {}",
            quote(QUORUM_PARALLEL)
        )
    }

    /// The replicas of the cluster's largest shard (0: no such cluster),
    /// from the server's `system.clusters`.
    pub(crate) fn select_cluster_replicas(cluster: &str) -> String {
        format!(
            "SELECT toUInt64(max(replica_num)) FROM system.clusters WHERE cluster = {}",
            quote(cluster)
        )
    }

    pub(crate) fn select_schema_version(&self) -> String {
        format!("SELECT max(version) FROM {}", self.schema())
    }

    pub(crate) fn insert_schema_version(&self, version: u32) -> String {
        format!(
            "INSERT INTO {} (version, installed_at_ms) SELECT {version}, {NOW_MS}",
            self.schema()
        )
    }

    pub(crate) fn select_columns(&self) -> String {
        format!(
            "SELECT table, name, type, default_kind, default_expression FROM system.columns WHERE database = {} AND table IN ({}, {})",
            quote(&self.database),
            quote(&self.packs_name()),
            quote(&self.lease_name())
        )
    }

    /// The fence as a scalar: 1 when the head of `name` is exactly one
    /// claim, ours, expiring later than now + margin; 0 otherwise.
    pub(crate) fn fence_scalar(&self, guard: &LeaseGuard) -> String {
        let name = quote(&guard.name);
        format!(
            "(SELECT count() = 1 AND any(lease_id) = toUUID({}) AND any(expires_at_ms) > {NOW_MS} + {} FROM {lease} WHERE name = {name} AND term = (SELECT max(term) FROM {lease} WHERE name = {name}))",
            quote(&guard.lease_id.to_string()),
            guard.config.fence_margin.as_millis(),
            lease = self.lease(),
        )
    }

    /// The fence as a `WHERE` condition that fails the statement when it
    /// is shut: `throwIf` raises [`FENCE_SHUT_CODE`] before any row is
    /// written, so a statement that succeeds wrote every row, and no
    /// read-back is needed (18.16 reports no row count for an `INSERT`).
    pub(crate) fn fence_condition(&self, guard: &LeaseGuard) -> String {
        format!("throwIf({} != 1) = 0", self.fence_scalar(guard))
    }

    /// The unfenced index statement: plain `INSERT ... VALUES`, the
    /// fastest shape 18.16 takes (its fast literal parser; measured on
    /// 18.16 at 256 rows ~2.5 ms against ~7 ms for the `ARRAY JOIN` form),
    /// and one that `async_insert` applies to on newer servers.
    /// `indexed_at_ms` is left out: its column default fills the server
    /// clock once per block (a `now()` in `VALUES` would be parsed as an
    /// expression row by row, ~4× slower on 18.16).
    pub(crate) fn index_values(&self, rows: &[PackRow]) -> String {
        let mut sql = format!(
            "INSERT INTO {} ({PACK_VALUE_COLUMNS}) VALUES ",
            self.packs()
        );
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let ordinal = r.ordinal.map_or_else(|| "NULL".into(), |o| o.to_string());
            sql.push('(');
            sql.push_str(&literals(r, &ordinal));
            sql.push_str(", ");
            sql.push_str(&quote(&r.trailer_sha256));
            sql.push_str(&format!(", {})", r.object_offset));
        }
        sql
    }

    /// The fenced index statement: `VALUES` cannot carry a `WHERE`, so this
    /// is `INSERT ... SELECT` over the rows, guarded by
    /// [`fence_condition`](Self::fence_condition) and bounded by
    /// `max_execution_time`. The rows travel as one array literal per
    /// column, unrolled by `ARRAY JOIN`: ClickHouse parses an array of
    /// plain literals in one pass, so 256 rows cost about what one does (a
    /// `UNION ALL` of 256 `SELECT`s took ~60 ms on 18.16, this ~5 ms; an
    /// array of tuples ~150 ms; external data as a multipart body ~9 ms).
    /// `indexed_at_ms` is the server clock, read once in the outer
    /// `SELECT`: 18.16 refuses a `UNION ALL` whose branches read `now()` in
    /// different seconds (code 171), which a per-row clock made possible.
    pub(crate) fn index_fenced(&self, rows: &[PackRow], fence: &LeaseGuard) -> String {
        fn array(rows: &[PackRow], f: impl Fn(&PackRow) -> String) -> String {
            let items: Vec<String> = rows.iter().map(f).collect();
            format!("[{}]", items.join(", "))
        }
        let columns = [
            ("pack_id", array(rows, |r| quote(&r.pack_id))),
            ("object_key", array(rows, |r| quote(&r.object_key))),
            ("store_id", array(rows, |r| quote(&r.store_id))),
            ("sha256", array(rows, |r| quote(&r.sha256))),
            ("bytes", array(rows, |r| r.bytes.to_string())),
            ("records", array(rows, |r| r.records.to_string())),
            ("source_host", array(rows, |r| quote(&r.source_host))),
            ("source_pid", array(rows, |r| r.source_pid.to_string())),
            ("rank_dir", array(rows, |r| quote(&r.rank_dir))),
            (
                "ordinal",
                array(rows, |r| {
                    r.ordinal.map_or_else(|| "NULL".into(), |o| o.to_string())
                }),
            ),
            (
                "created_at_ms",
                array(rows, |r| r.created_at_ms.to_string()),
            ),
            ("trailer_sha256", array(rows, |r| quote(&r.trailer_sha256))),
            (
                "object_offset",
                array(rows, |r| r.object_offset.to_string()),
            ),
        ];
        let arrays: Vec<String> = columns
            .iter()
            .map(|(name, values)| format!("{values} AS {name}_a"))
            .collect();
        let joins: Vec<String> = columns
            .iter()
            .map(|(name, _)| format!("{name}_a AS {name}"))
            .collect();
        format!(
            "INSERT INTO {} ({PACK_COLUMNS}) SELECT pack_id, object_key, store_id, sha256, toUInt64(bytes), toUInt64(records), source_host, toUInt32(source_pid), rank_dir, CAST(ordinal AS Nullable(UInt32)), toUInt64(created_at_ms), {NOW_MS}, trailer_sha256, toUInt64(object_offset) FROM (SELECT {}) ARRAY JOIN {} WHERE {} SETTINGS max_execution_time = {}",
            self.packs(),
            arrays.join(", "),
            joins.join(", "),
            self.fence_condition(fence),
            fence.config.max_execution_time().as_secs()
        )
    }

    pub(crate) fn select_pack(&self, pack_id: &str) -> String {
        format!(
            "SELECT {PACK_COLUMNS} FROM {} FINAL WHERE pack_id = {}",
            self.packs(),
            quote(pack_id)
        )
    }

    /// The current rows of `pack_ids` (as [`select_pack`](Self::select_pack)
    /// reads one).
    pub(crate) fn select_packs(&self, pack_ids: &[String]) -> String {
        let list: Vec<String> = pack_ids.iter().map(|k| quote(k)).collect();
        format!(
            "SELECT {PACK_COLUMNS} FROM {} FINAL WHERE pack_id IN ({})",
            self.packs(),
            list.join(", ")
        )
    }

    pub(crate) fn select_range(&self, from_ms: u64, to_ms: u64) -> String {
        format!(
            "SELECT {PACK_COLUMNS} FROM {} FINAL WHERE created_at_ms >= {from_ms} AND created_at_ms < {to_ms} ORDER BY created_at_ms, pack_id",
            self.packs()
        )
    }

    pub(crate) fn select_count(&self) -> String {
        format!("SELECT count() FROM {} FINAL", self.packs())
    }

    /// For each of `keys` some current row names: the key and the sum of
    /// the `bytes` of the packs whose current row names it. The current
    /// row of a pack is what `FINAL` reads (as [`select_pack`](Self::select_pack)
    /// does): the latest `indexed_at_ms`. The filter on the key is not put
    /// under `FINAL`, where a row replaced by one naming another object
    /// could be read before its replacement is merged in: the inner read
    /// (no `FINAL`) finds every pack any row of which names a key, the
    /// `FINAL` read takes those packs' current rows (by `pack_id`, the
    /// sorting key, which every row of a pack shares), and only then are
    /// the rows grouped by the object they name. Rows naming objects not
    /// asked about come back too (a pack moved away from a key); the caller
    /// keeps only `keys`.
    pub(crate) fn referenced_bytes(&self, keys: &[String]) -> String {
        let list: Vec<String> = keys.iter().map(|k| quote(k)).collect();
        format!(
            "SELECT object_key, toUInt64(sum(bytes)) AS total FROM {packs} FINAL WHERE pack_id IN (SELECT pack_id FROM {packs} WHERE object_key IN ({})) GROUP BY object_key",
            list.join(", "),
            packs = self.packs()
        )
    }

    fn lease_columns() -> &'static str {
        "name, term, toString(lease_id) AS lease_id, holder, acquired_at_ms, expires_at_ms"
    }

    /// The head: every claim at the highest term, with the server clock.
    pub(crate) fn lease_head(&self, name: &str) -> String {
        let name = quote(name);
        format!(
            "SELECT {}, {NOW_MS} AS now_ms FROM {lease} WHERE name = {name} AND term = (SELECT max(term) FROM {lease} WHERE name = {name})",
            Self::lease_columns(),
            lease = self.lease()
        )
    }

    pub(crate) fn select_now() -> String {
        format!("SELECT {NOW_MS}")
    }

    /// One claim, stamped by the server clock.
    pub(crate) fn append_claim(&self, c: &NewClaim) -> String {
        format!(
            "INSERT INTO {} ({LEASE_COLUMNS}) SELECT {}, {}, toUUID({}), {}, {NOW_MS}, {NOW_MS} + {}",
            self.lease(),
            quote(&c.name),
            c.term,
            quote(&c.lease_id.to_string()),
            quote(&c.holder),
            c.ttl_ms
        )
    }

    /// The read-back: every claim at one term.
    pub(crate) fn read_claims(&self, name: &str, term: u64) -> String {
        format!(
            "SELECT {}, {NOW_MS} AS now_ms FROM {} WHERE name = {} AND term = {term} ORDER BY lease_id",
            Self::lease_columns(),
            self.lease(),
            quote(name)
        )
    }

    pub(crate) fn lease_log(&self, name: &str) -> String {
        format!(
            "SELECT {}, {NOW_MS} AS now_ms FROM {} WHERE name = {} ORDER BY term, lease_id",
            Self::lease_columns(),
            self.lease(),
            quote(name)
        )
    }
}

/// Every statement the ClickHouse catalog sends, once each with sample
/// arguments, named after the function that makes it (the cluster's only
/// check on the current engine, which cannot run replicated tables: it
/// parses each one; `crate::testing::clickhouse_statements`).
#[cfg(any(test, feature = "testing"))]
impl Tables {
    pub(crate) fn every_statement(&self) -> Vec<(&'static str, String)> {
        let row = PackRow {
            object_offset: 0,
            pack_id: "0".repeat(32),
            object_key: format!("pre/v1/date=2026-11-29/{}.pack", "0".repeat(32)),
            store_id: "default".into(),
            sha256: "ab".repeat(32),
            bytes: 1,
            records: 1,
            source_host: "node1".into(),
            source_pid: 1,
            rank_dir: "r0-0badcafe".into(),
            ordinal: None,
            created_at_ms: 1_795_965_709_123,
            indexed_at_ms: 0,
            trailer_sha256: "cd".repeat(32),
        };
        let lease_id = uuid::Uuid::nil();
        let guard = LeaseGuard {
            name: "k/node1".into(),
            lease_id,
            holder: "node1 pid 1".into(),
            acquired_term: 1,
            term: 1,
            expires_at_ms: 0,
            config: crate::LeaseConfig::default(),
            claimed_at: tokio::time::Instant::now(),
        };
        let claim = NewClaim {
            name: "k/node1".into(),
            term: 2,
            lease_id,
            holder: "node1 pid 1".into(),
            ttl_ms: 30_000,
        };
        let rows = std::slice::from_ref(&row);
        vec![
            ("create_database", self.create_database()),
            ("create_schema_table", self.create_schema_table()),
            ("create_packs", self.create_packs()),
            ("create_lease", self.create_lease()),
            ("select_tables", self.select_tables()),
            (
                "create_partitioned_new packs",
                self.create_partitioned_new("packs"),
            ),
            (
                "create_partitioned_new lease",
                self.create_partitioned_new("lease"),
            ),
            ("swap_partitioned_in", self.swap_partitioned_in("packs")),
            ("drop_partitioned_new", self.drop_partitioned_new("packs")),
            ("copy_unpartitioned_packs", self.copy_unpartitioned_packs()),
            ("copy_lease_heads_to_new", self.copy_lease_heads_to_new()),
            ("select_lease_partitions", self.select_lease_partitions()),
            (
                "carry_idle_lease_heads",
                self.carry_idle_lease_heads(DAY_MS),
            ),
            ("drop_lease_partition", self.drop_lease_partition(20_000)),
            ("migrate_v1_ordinal", self.migrate_v1_ordinal()),
            (
                "migrate_v3_trailer_sha256",
                self.migrate_v3_trailer_sha256(),
            ),
            ("migrate_v4_object_offset", self.migrate_v4_object_offset()),
            ("set_indexed_at_default", self.set_indexed_at_default()),
            (
                "select_has_quorum_parallel",
                Self::select_has_quorum_parallel(),
            ),
            (
                "select_cluster_replicas",
                Self::select_cluster_replicas("c"),
            ),
            ("select_schema_version", self.select_schema_version()),
            ("insert_schema_version", self.insert_schema_version(1)),
            ("select_columns", self.select_columns()),
            ("index_values", self.index_values(rows)),
            ("index_fenced", self.index_fenced(rows, &guard)),
            ("select_pack", self.select_pack(&row.pack_id)),
            (
                "select_packs",
                self.select_packs(&[row.pack_id.clone(), row.pack_id.clone()]),
            ),
            ("select_range", self.select_range(0, u64::MAX)),
            ("select_count", self.select_count()),
            (
                "referenced_bytes",
                self.referenced_bytes(&[row.object_key.clone(), r"it's \ odd".into()]),
            ),
            ("lease_head", self.lease_head(&guard.name)),
            ("select_now", Self::select_now()),
            ("append_claim", self.append_claim(&claim)),
            ("read_claims", self.read_claims(&guard.name, 1)),
            ("lease_log", self.lease_log(&guard.name)),
            ("v1_create_packs", self.v1_create_packs()),
            ("v2_create_lease", self.v2_create_lease()),
            ("v1_insert", self.v1_insert(rows)),
        ]
    }
}

#[cfg(test)]
mod tests {
    //! Golden SQL: any change to a statement's text shows here first.
    use super::*;
    use crate::lease::LeaseConfig;
    use std::time::Duration;
    use uuid::Uuid;

    fn tables() -> Tables {
        Tables {
            database: "spooldb".into(),
            prefix: "p_".into(),
            cluster: None,
        }
    }

    fn guard() -> LeaseGuard {
        LeaseGuard {
            name: "0123456789ab/node1".into(),
            lease_id: Uuid::parse_str("0e3c1a52-6e7a-4c1e-9a7e-1b2c3d4e5f60").unwrap(),
            holder: "node1 pid 42".into(),
            acquired_term: 7,
            term: 9,
            expires_at_ms: 0,
            config: LeaseConfig::default(),
            claimed_at: tokio::time::Instant::now(),
        }
    }

    fn row(id: char) -> PackRow {
        PackRow {
            object_offset: 0,
            pack_id: id.to_string().repeat(32),
            object_key: format!("pre/v1/date=2026-11-29/{}.pack", id.to_string().repeat(32)),
            store_id: "default".into(),
            sha256: "ab".repeat(32),
            bytes: 1048576,
            records: 1000,
            source_host: "node1".into(),
            source_pid: 4242,
            rank_dir: "r0-0badcafe".into(),
            ordinal: Some(0),
            created_at_ms: 1795965709123,
            indexed_at_ms: 0,
            trailer_sha256: "cd".repeat(32),
        }
    }

    /// `every_statement` (what the current engine parses, on one server
    /// and on a cluster) lists every statement this file makes: a new one
    /// left out of it turns this red.
    #[test]
    fn every_statement_names_each_statement_maker() {
        // Names and fragments of statements, not statements.
        let not_statements = [
            "quote",
            "packs_name",
            "lease_name",
            "packs",
            "lease",
            "schema",
            "fence_scalar",
            "fence_condition",
        ];
        let makers: std::collections::BTreeSet<&str> = include_str!("sql.rs")
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub(crate) fn "))
            .filter(|l| l.ends_with("-> String {"))
            .map(|l| l.split(['(', '<']).next().unwrap())
            .filter(|n| !not_statements.contains(n))
            .collect();
        let listed: std::collections::BTreeSet<&str> = tables()
            .every_statement()
            .iter()
            .map(|(n, _)| n.split(' ').next().unwrap())
            .collect();
        assert_eq!(makers, listed);
        assert!(makers.len() > 30, "{makers:?}");
    }

    #[test]
    fn golden_quote() {
        assert_eq!(quote(r"it's a \ path"), r"'it\'s a \\ path'");
        assert_eq!(quote("a\nb"), r"'a\nb'");
        // Every character a literal could break on, and non-ASCII kept.
        assert_eq!(
            quote("q' b\\ t\t n\n r\r z\0 \\' ?? é 🦀"),
            r"'q\' b\\ t\t n\n r\r z\0 \\\' ?? é 🦀'"
        );
    }

    #[test]
    fn golden_schema() {
        let t = tables();
        assert_eq!(
            t.create_database(),
            "CREATE DATABASE IF NOT EXISTS `spooldb`"
        );
        assert_eq!(
            t.create_schema_table(),
            "CREATE TABLE IF NOT EXISTS `spooldb`.`p_schema_version` (version UInt32, installed_at_ms UInt64) ENGINE = MergeTree() ORDER BY version"
        );
        assert_eq!(
            t.create_packs(),
            "CREATE TABLE IF NOT EXISTS `spooldb`.`p_packs` (pack_id String, object_key String, store_id String, sha256 String, bytes UInt64, records UInt64, source_host String, source_pid UInt32, rank_dir String, ordinal Nullable(UInt32), created_at_ms UInt64, indexed_at_ms UInt64 DEFAULT toUInt64(now()) * 1000, trailer_sha256 String DEFAULT sha256, object_offset UInt64 DEFAULT 0) ENGINE = ReplacingMergeTree(indexed_at_ms) PARTITION BY intDiv(created_at_ms, 86400000) ORDER BY pack_id"
        );
        assert_eq!(
            t.set_indexed_at_default(),
            "ALTER TABLE `spooldb`.`p_packs` MODIFY COLUMN indexed_at_ms UInt64 DEFAULT toUInt64(now()) * 1000"
        );
        assert_eq!(
            t.migrate_v1_ordinal(),
            "ALTER TABLE `spooldb`.`p_packs` MODIFY COLUMN ordinal Nullable(UInt32)"
        );
        assert_eq!(
            t.migrate_v3_trailer_sha256(),
            "ALTER TABLE `spooldb`.`p_packs` ADD COLUMN trailer_sha256 String DEFAULT sha256"
        );
        assert_eq!(
            t.create_lease(),
            "CREATE TABLE IF NOT EXISTS `spooldb`.`p_lease` (name String, term UInt64, lease_id UUID, holder String, acquired_at_ms UInt64, expires_at_ms UInt64) ENGINE = MergeTree() PARTITION BY intDiv(acquired_at_ms, 86400000) ORDER BY (name, term, lease_id)"
        );
        assert_eq!(
            t.insert_schema_version(1),
            "INSERT INTO `spooldb`.`p_schema_version` (version, installed_at_ms) SELECT 1, toUInt64(now()) * 1000"
        );
        assert_eq!(
            t.select_columns(),
            "SELECT table, name, type, default_kind, default_expression FROM system.columns WHERE database = 'spooldb' AND table IN ('p_packs', 'p_lease')"
        );
    }

    #[test]
    fn golden_schema_on_a_cluster() {
        let t = Tables {
            cluster: Some("spool_cluster".into()),
            ..tables()
        };
        assert_eq!(
            t.create_database(),
            "CREATE DATABASE IF NOT EXISTS `spooldb` ON CLUSTER spool_cluster"
        );
        assert_eq!(
            t.create_schema_table(),
            "CREATE TABLE IF NOT EXISTS `spooldb`.`p_schema_version` ON CLUSTER spool_cluster (version UInt32, installed_at_ms UInt64) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/spooldb/p_schema_version', '{replica}') ORDER BY version"
        );
        assert!(t.create_packs().ends_with(") ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/spooldb/p_packs', '{replica}', indexed_at_ms) PARTITION BY intDiv(created_at_ms, 86400000) ORDER BY pack_id"), "{}", t.create_packs());
        assert!(t.create_packs().starts_with(
            "CREATE TABLE IF NOT EXISTS `spooldb`.`p_packs` ON CLUSTER spool_cluster ("
        ));
        assert!(t.create_lease().ends_with(") ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/spooldb/p_lease', '{replica}') PARTITION BY intDiv(acquired_at_ms, 86400000) ORDER BY (name, term, lease_id)"), "{}", t.create_lease());
    }

    #[test]
    fn golden_partitioning_and_trim() {
        let t = tables();
        assert_eq!(
            t.select_tables(),
            "SELECT name, engine, partition_key FROM system.tables WHERE database = 'spooldb' AND startsWith(name, 'p_')"
        );
        assert!(t
            .create_partitioned_new("packs")
            .starts_with("CREATE TABLE IF NOT EXISTS `spooldb`.`p_packs_partitioned_new` ("));
        assert!(t
            .create_partitioned_new("lease")
            .starts_with("CREATE TABLE IF NOT EXISTS `spooldb`.`p_lease_partitioned_new` ("));
        assert_eq!(
            t.swap_partitioned_in("lease"),
            "RENAME TABLE `spooldb`.`p_lease` TO `spooldb`.`p_lease_unpartitioned`, `spooldb`.`p_lease_partitioned_new` TO `spooldb`.`p_lease`"
        );
        assert_eq!(
            t.copy_lease_heads_to_new(),
            "INSERT INTO `spooldb`.`p_lease_partitioned_new` (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT name, term, lease_id, holder, acquired_at_ms, expires_at_ms FROM `spooldb`.`p_lease` WHERE (name, term) IN (SELECT name, max(term) FROM `spooldb`.`p_lease` GROUP BY name)"
        );
        assert_eq!(
            t.copy_unpartitioned_packs(),
            format!("INSERT INTO `spooldb`.`p_packs` ({PACK_COLUMNS_V3}) SELECT {PACK_COLUMNS_V3} FROM `spooldb`.`p_packs_unpartitioned`")
        );
        assert_eq!(
            t.carry_idle_lease_heads(86_400_000),
            "INSERT INTO `spooldb`.`p_lease` (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT name, max(term), argMax(lease_id, term), argMax(holder, term), toUInt64(now()) * 1000, toUInt64(now()) * 1000 FROM `spooldb`.`p_lease` GROUP BY name HAVING max(acquired_at_ms) < 86400000"
        );
        assert_eq!(
            t.drop_lease_partition(20791),
            "ALTER TABLE `spooldb`.`p_lease` DROP PARTITION 20791"
        );
        assert_eq!(
            t.select_lease_partitions(),
            "SELECT DISTINCT partition FROM system.parts WHERE database = 'spooldb' AND table = 'p_lease' AND active ORDER BY partition"
        );
    }

    #[test]
    fn golden_lease_statements() {
        let t = tables();
        assert_eq!(
            t.lease_head("0123456789ab/node1"),
            "SELECT name, term, toString(lease_id) AS lease_id, holder, acquired_at_ms, expires_at_ms, toUInt64(now()) * 1000 AS now_ms FROM `spooldb`.`p_lease` WHERE name = '0123456789ab/node1' AND term = (SELECT max(term) FROM `spooldb`.`p_lease` WHERE name = '0123456789ab/node1')"
        );
        let claim = NewClaim {
            name: "0123456789ab/node1".into(),
            term: 8,
            lease_id: guard().lease_id,
            holder: "node1 pid 42".into(),
            ttl_ms: 30000,
        };
        assert_eq!(
            t.append_claim(&claim),
            "INSERT INTO `spooldb`.`p_lease` (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT '0123456789ab/node1', 8, toUUID('0e3c1a52-6e7a-4c1e-9a7e-1b2c3d4e5f60'), 'node1 pid 42', toUInt64(now()) * 1000, toUInt64(now()) * 1000 + 30000"
        );
        let tombstone = NewClaim { ttl_ms: 0, ..claim };
        assert!(t
            .append_claim(&tombstone)
            .ends_with("toUInt64(now()) * 1000, toUInt64(now()) * 1000 + 0"));
        assert_eq!(
            t.read_claims("0123456789ab/node1", 8),
            "SELECT name, term, toString(lease_id) AS lease_id, holder, acquired_at_ms, expires_at_ms, toUInt64(now()) * 1000 AS now_ms FROM `spooldb`.`p_lease` WHERE name = '0123456789ab/node1' AND term = 8 ORDER BY lease_id"
        );
    }

    #[test]
    fn golden_fence() {
        let scalar = "(SELECT count() = 1 AND any(lease_id) = toUUID('0e3c1a52-6e7a-4c1e-9a7e-1b2c3d4e5f60') AND any(expires_at_ms) > toUInt64(now()) * 1000 + 5000 FROM `spooldb`.`p_lease` WHERE name = '0123456789ab/node1' AND term = (SELECT max(term) FROM `spooldb`.`p_lease` WHERE name = '0123456789ab/node1'))";
        assert_eq!(tables().fence_scalar(&guard()), scalar);
        assert_eq!(
            tables().fence_condition(&guard()),
            format!("throwIf({scalar} != 1) = 0")
        );
    }

    #[test]
    fn golden_index_unfenced_values() {
        let t = tables();
        let head = "INSERT INTO `spooldb`.`p_packs` (pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, trailer_sha256, object_offset) VALUES ";
        let (a, c) = ("a".repeat(32), "c".repeat(32));
        let sha = "ab".repeat(32);
        assert_eq!(
            t.index_values(&[row('a')]),
            format!("{head}('{a}', 'pre/v1/date=2026-11-29/{a}.pack', 'default', '{sha}', 1048576, 1000, 'node1', 4242, 'r0-0badcafe', 0, 1795965709123, 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd', 0)")
        );
        // A sink without an ordinal travels as NULL (never as 0, which is
        // `w0/`); hostile text is quoted.
        let none = PackRow {
            ordinal: None,
            source_host: r"h'o\st".into(),
            object_offset: 65536,
            ..row('c')
        };
        assert_eq!(
            t.index_values(&[row('a'), none]),
            format!("{head}('{a}', 'pre/v1/date=2026-11-29/{a}.pack', 'default', '{sha}', 1048576, 1000, 'node1', 4242, 'r0-0badcafe', 0, 1795965709123, 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd', 0), ('{c}', 'pre/v1/date=2026-11-29/{c}.pack', 'default', '{sha}', 1048576, 1000, 'h\\'o\\\\st', 4242, 'r0-0badcafe', NULL, 1795965709123, 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd', 65536)")
        );
    }

    #[test]
    fn golden_index_fenced() {
        let t = tables();
        let head = "INSERT INTO `spooldb`.`p_packs` (pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset) SELECT pack_id, object_key, store_id, sha256, toUInt64(bytes), toUInt64(records), source_host, toUInt32(source_pid), rank_dir, CAST(ordinal AS Nullable(UInt32)), toUInt64(created_at_ms), toUInt64(now()) * 1000, trailer_sha256, toUInt64(object_offset) FROM (SELECT ";
        let joins = ") ARRAY JOIN pack_id_a AS pack_id, object_key_a AS object_key, store_id_a AS store_id, sha256_a AS sha256, bytes_a AS bytes, records_a AS records, source_host_a AS source_host, source_pid_a AS source_pid, rank_dir_a AS rank_dir, ordinal_a AS ordinal, created_at_ms_a AS created_at_ms, trailer_sha256_a AS trailer_sha256, object_offset_a AS object_offset";
        let none = PackRow {
            ordinal: None,
            object_offset: 65536,
            ..row('c')
        };
        let fenced = t.index_fenced(&[row('a'), none], &guard());
        let (a, c) = ("a".repeat(32), "c".repeat(32));
        assert_eq!(
            fenced,
            format!(
                "{head}['{a}', '{c}'] AS pack_id_a, ['pre/v1/date=2026-11-29/{a}.pack', 'pre/v1/date=2026-11-29/{c}.pack'] AS object_key_a, ['default', 'default'] AS store_id_a, ['abababababababababababababababababababababababababababababababab', 'abababababababababababababababababababababababababababababababab'] AS sha256_a, [1048576, 1048576] AS bytes_a, [1000, 1000] AS records_a, ['node1', 'node1'] AS source_host_a, [4242, 4242] AS source_pid_a, ['r0-0badcafe', 'r0-0badcafe'] AS rank_dir_a, [0, NULL] AS ordinal_a, [1795965709123, 1795965709123] AS created_at_ms_a, ['cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd', 'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd'] AS trailer_sha256_a, [0, 65536] AS object_offset_a{joins} WHERE {} SETTINGS max_execution_time = 4",
                tables().fence_condition(&guard())
            )
        );
        // The margin and its execution bound follow the config.
        let mut g = guard();
        g.config = LeaseConfig {
            ttl: Duration::from_secs(6),
            renew_interval: Duration::from_secs(2),
            fence_margin: Duration::from_secs(2),
        };
        let s = t.index_fenced(&[row('a')], &g);
        assert!(s.contains("> toUInt64(now()) * 1000 + 2000 FROM"), "{s}");
        assert!(
            s.ends_with(") != 1) = 0 SETTINGS max_execution_time = 1"),
            "{s}"
        );
    }

    #[test]
    fn golden_reads() {
        let t = tables();
        assert_eq!(
            t.select_pack(&"a".repeat(32)),
            "SELECT pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset FROM `spooldb`.`p_packs` FINAL WHERE pack_id = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'"
        );
        assert_eq!(
            t.select_range(10, 20),
            "SELECT pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset FROM `spooldb`.`p_packs` FINAL WHERE created_at_ms >= 10 AND created_at_ms < 20 ORDER BY created_at_ms, pack_id"
        );
        assert_eq!(
            t.select_count(),
            "SELECT count() FROM `spooldb`.`p_packs` FINAL"
        );
        assert_eq!(
            t.referenced_bytes(&["pre/a.pack".into(), r"pre/it's a \ key".into()]),
            r"SELECT object_key, toUInt64(sum(bytes)) AS total FROM `spooldb`.`p_packs` FINAL WHERE pack_id IN (SELECT pack_id FROM `spooldb`.`p_packs` WHERE object_key IN ('pre/a.pack', 'pre/it\'s a \\ key')) GROUP BY object_key"
        );
        assert_eq!(
            Tables::select_has_quorum_parallel(),
            "SELECT toUInt64(count()) FROM system.settings WHERE name = 'insert_quorum_parallel'"
        );
        assert_eq!(
            Tables::select_cluster_replicas("spool_cluster"),
            "SELECT toUInt64(max(replica_num)) FROM system.clusters WHERE cluster = 'spool_cluster'"
        );
    }
}
