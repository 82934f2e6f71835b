//! The ClickHouse schema: install, verify and migrate (see the crate docs,
//! "Schema versions"), and the trimming of the lease log.
//!
//! Version 3 partitions both tables by UTC day (`sql.rs`: packs by
//! creation day, lease claims by claim day). No `ALTER` changes a table's
//! partitioning, so an unpartitioned table (versions 1 and 2) is replaced
//! by a swap: the partitioned table is built as `<prefix><table>_partitioned_new`
//! (the lease table gets the head of every name copied in first, so no
//! holding and no term is lost), then one `RENAME TABLE` moves the old
//! table aside to `<prefix><table>_unpartitioned` and the new one into its
//! name; then every pack row is copied over (idempotent: rows of one pack
//! collapse). A concurrent migrator's swap fails (the `_unpartitioned`
//! name is taken) and it finds the partitioned table in place. The old
//! tables are kept for the operator to drop.

use super::{ClickHouseCatalog, Mode};
use crate::error::{Error, Result};
use crate::sql::{
    Tables, DAY_MS, INDEXED_AT_DEFAULT, LEASE_PARTITION, LEASE_SCHEMA, PACKS_PARTITION,
    PACKS_SCHEMA, UNPARTITIONED,
};
use crate::SCHEMA_VERSION;
use std::collections::BTreeMap;

#[derive(clickhouse::Row, serde::Deserialize)]
struct ColumnRow {
    table: String,
    name: String,
    r#type: String,
    default_kind: String,
    default_expression: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct TableRow {
    name: String,
    engine: String,
    partition_key: String,
}

/// A column a schema migration adds to the packs table.
struct ColumnStep {
    /// Its name.
    column: &'static str,
    /// What the `ALTER` does (its error's and its log's words).
    what: &'static str,
    /// What rows already there read in it.
    done: &'static str,
}

/// Engine and partition key of each table of the catalog, by name.
type Layout = BTreeMap<String, (String, String)>;

fn squash(e: &str) -> String {
    e.split_whitespace().collect()
}

impl ClickHouseCatalog {
    /// The catalog's tables as the server asked sees them.
    async fn layout(&self) -> Result<Layout> {
        let rows: Vec<TableRow> = self
            .fetch_all(
                "read the catalog's tables",
                Mode::Plain,
                &self.tables.select_tables(),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.name, (r.engine, r.partition_key)))
            .collect())
    }

    /// The database and the schema-version table, if missing.
    async fn create_database_and_version_table(&self) -> Result<()> {
        let t = &self.tables;
        self.execute(
            "create the catalog database",
            Mode::Ddl,
            &t.create_database(),
        )
        .await?;
        self.execute(
            "create the schema-version table",
            Mode::Ddl,
            &t.create_schema_table(),
        )
        .await
    }

    pub(super) async fn install_or_verify(&self) -> Result<()> {
        let t = &self.tables;
        let server = self.target.redacted();
        if let Some(cluster) = &t.cluster {
            self.check_quorum(cluster).await?;
        }
        let prefixed = |n: &str| format!("{}{n}", t.prefix);
        let before = self.layout().await?;
        // On a cluster a `CREATE ... ON CLUSTER` waits for every replica:
        // it is sent only when a table is missing, so a catalog in place
        // opens with a replica down.
        let complete = ["schema_version", "packs", "lease"]
            .iter()
            .all(|n| before.contains_key(&prefixed(n)));
        if !complete && self.read_only {
            let missing: Vec<String> = ["schema_version", "packs", "lease"]
                .iter()
                .map(|n| prefixed(n))
                .filter(|n| !before.contains_key(n))
                .map(|n| format!("`{}`.`{n}`", t.database))
                .collect();
            return Err(Error::NoCatalog {
                server,
                missing: format!("no table {}", missing.join(", ")),
            });
        }
        if !complete {
            self.create_database_and_version_table().await?;
        }
        let found: u32 = self
            .fetch_one(
                "read the schema version",
                Mode::Plain,
                &t.select_schema_version(),
            )
            .await?;
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaVersion {
                server,
                found,
                expected: SCHEMA_VERSION,
                advice: "it was written by a newer spool; upgrade this spool, or point it at another database or table_prefix",
            });
        }
        if found < SCHEMA_VERSION && self.read_only {
            return Err(Error::SchemaVersion {
                server,
                found,
                expected: SCHEMA_VERSION,
                advice: "a read does not migrate it: run a service against it (spool run --once) to migrate it first",
            });
        }
        if !complete {
            self.execute("create the packs table", Mode::Ddl, &t.create_packs())
                .await?;
        }
        if found == 1 {
            // Version 1 → 2: `ordinal` becomes nullable; idempotent, so a
            // concurrent or interrupted migration is simply run again.
            self.execute(
                "migrate the packs table from schema version 1 (nullable ordinal)",
                Mode::Plain,
                &t.migrate_v1_ordinal(),
            )
            .await?;
            tracing::info!(server = %server, "migrated the packs table from schema version 1 (nullable ordinal)");
        }
        if !complete {
            self.execute("create the lease table", Mode::Ddl, &t.create_lease())
                .await?;
        }
        let mut cols: Vec<ColumnRow> = self
            .fetch_all("read the table columns", Mode::Plain, &t.select_columns())
            .await?;
        let packs = t.packs_name();
        // (only on tables an older spool made: a version row says so)
        if (1..SCHEMA_VERSION).contains(&found) {
            // Version 3 → 4: the trailer's checksum gets a column of its
            // own (old rows read their `sha256` there).
            let step = ColumnStep {
                column: "trailer_sha256",
                what: "migrate the packs table from schema version 3 (trailer_sha256)",
                done: "trailer_sha256 added, rows already there read their sha256 in it",
            };
            cols = self
                .add_column(cols, step, &t.migrate_v3_trailer_sha256())
                .await?;
            // Version 4 → 5: a row names the byte range of its pack in its
            // object; rows already there read offset 0 (each is its own
            // object).
            let step = ColumnStep {
                column: "object_offset",
                what: "migrate the packs table from schema version 4 (object_offset)",
                done: "object_offset added, rows already there read 0 (a whole object)",
            };
            cols = self
                .add_column(cols, step, &t.migrate_v4_object_offset())
                .await?;
        }
        // `indexed_at_ms` must default to the server clock: the unfenced
        // `VALUES` insert leaves it out. Tables made before it had one get
        // it (a metadata-only change, idempotent).
        let has_default = cols.iter().any(|c| {
            c.table == packs
                && c.name == "indexed_at_ms"
                && c.default_kind == "DEFAULT"
                && squash(&c.default_expression) == squash(INDEXED_AT_DEFAULT)
        });
        let mut by_table: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for c in cols {
            by_table
                .entry(c.table)
                .or_default()
                .insert(c.name, c.r#type);
        }
        for (table, expected) in [
            (t.packs_name(), PACKS_SCHEMA),
            (t.lease_name(), LEASE_SCHEMA),
        ] {
            check_columns(&server, &table, expected, by_table.get(&table))?;
        }
        let layout = if complete {
            before
        } else {
            self.layout().await?
        };
        self.check_engines_and_partitions(&layout).await?;
        if found < SCHEMA_VERSION
            && self
                .layout()
                .await?
                .contains_key(&prefixed(&format!("packs{UNPARTITIONED}")))
        {
            self.execute(
                "copy the pack rows into the partitioned packs table",
                Mode::Plain,
                &t.copy_unpartitioned_packs(),
            )
            .await?;
            tracing::info!(server = %server, "copied the pack rows into the partitioned packs table; {}packs{UNPARTITIONED} is kept for the operator to drop", t.prefix);
        }
        if !has_default {
            self.execute(
                "give indexed_at_ms its default (the server clock)",
                Mode::Plain,
                &t.set_indexed_at_default(),
            )
            .await?;
            tracing::info!(server = %server, table = %packs, "gave indexed_at_ms its default (the server clock)");
        }
        if found < SCHEMA_VERSION {
            self.execute(
                "write the schema-version row",
                Mode::Quorum,
                &t.insert_schema_version(SCHEMA_VERSION),
            )
            .await?;
        }
        Ok(())
    }

    /// Adds `step`'s column to the packs table with `alter` unless `cols`
    /// (the tables' columns as read) already has it, and returns the columns
    /// as they are now. A concurrent migrator's `ALTER` fails on the column
    /// the other added: the columns are read again and only a column still
    /// missing is an error.
    async fn add_column(
        &self,
        cols: Vec<ColumnRow>,
        step: ColumnStep,
        alter: &str,
    ) -> Result<Vec<ColumnRow>> {
        let t = &self.tables;
        let packs = t.packs_name();
        let has = |cols: &[ColumnRow]| {
            cols.iter()
                .any(|c| c.table == packs && c.name == step.column)
        };
        if has(&cols) {
            return Ok(cols);
        }
        let added = self.execute(step.what, Mode::Plain, alter).await;
        let cols = self
            .fetch_all("read the table columns", Mode::Plain, &t.select_columns())
            .await?;
        match added {
            Ok(()) => {
                let server = self.target.redacted();
                tracing::info!(server = %server, table = %packs, "{}: {}", step.what, step.done);
            }
            Err(e) if !has(&cols) => return Err(e),
            Err(_) => {}
        }
        Ok(cols)
    }

    /// Each table's engine matches the catalog's (replicated exactly when
    /// it names a cluster), and its partition key is spool's: a table made
    /// unpartitioned is partitioned now, another key is refused.
    async fn check_engines_and_partitions(&self, layout: &Layout) -> Result<()> {
        let t = &self.tables;
        let server = self.target.redacted();
        let prefixed = |n: &str| format!("{}{n}", t.prefix);
        for (table, key) in [("packs", PACKS_PARTITION), ("lease", LEASE_PARTITION)] {
            let name = prefixed(table);
            let (engine, partition_key) = layout.get(&name).cloned().unwrap_or_default();
            // A clustered and a one-server spool never share tables: the
            // one would wait for a quorum, the other not.
            match (&t.cluster, engine.starts_with("Replicated")) {
                (Some(cluster), false) => {
                    return Err(Error::NotReplicated {
                        server,
                        table: name,
                        engine,
                        cluster: cluster.clone(),
                    })
                }
                (None, true) => {
                    return Err(Error::ReplicatedWithoutCluster {
                        server,
                        table: name,
                        engine,
                    })
                }
                _ => {}
            }
            if partition_key.is_empty() {
                self.partition(table, layout).await?;
            } else if squash(&partition_key) != squash(key) {
                return Err(Error::SchemaMismatch {
                    server,
                    detail: format!(
                        "table {name} is partitioned by {partition_key}, this spool expects {key}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Refuses an `insert_quorum` that is not a majority of the cluster's
    /// replicas (two claimants could each be confirmed by a quorum that
    /// lacks the other's claim) or that no insert could reach.
    async fn check_quorum(&self, cluster: &str) -> Result<()> {
        let replicas: u64 = self
            .fetch_one(
                "count the cluster's replicas",
                Mode::Plain,
                &Tables::select_cluster_replicas(cluster),
            )
            .await?;
        let server = self.target.redacted();
        let cluster = cluster.to_string();
        let insert_quorum = self.target.insert_quorum;
        let replicas = u32::try_from(replicas).unwrap_or(u32::MAX);
        if replicas == 0 {
            return Err(Error::UnknownCluster { server, cluster });
        }
        if u64::from(insert_quorum) * 2 <= u64::from(replicas) {
            return Err(Error::QuorumBelowMajority {
                server,
                cluster,
                insert_quorum,
                replicas,
                majority: replicas / 2 + 1,
            });
        }
        if insert_quorum > replicas {
            return Err(Error::QuorumAboveReplicas {
                server,
                cluster,
                insert_quorum,
                replicas,
            });
        }
        Ok(())
    }

    /// Replaces the unpartitioned `table` (`packs` or `lease`) by a
    /// partitioned one (the module docs); `Ok` also when another process
    /// swapped first.
    async fn partition(&self, table: &'static str, layout: &Layout) -> Result<()> {
        let t = &self.tables;
        let server = self.target.redacted();
        let swapped = async {
            self.execute(
                "build the partitioned table",
                Mode::Plain,
                &t.create_partitioned_new(table),
            )
            .await?;
            if table == "lease" {
                self.execute(
                    "copy the head of every lease into the partitioned lease table",
                    Mode::Plain,
                    &t.copy_lease_heads_to_new(),
                )
                .await?;
            }
            self.execute(
                "swap the partitioned table in",
                Mode::Plain,
                &t.swap_partitioned_in(table),
            )
            .await
        }
        .await;
        match swapped {
            Ok(()) => {
                tracing::info!(server = %server, table, "partitioned the table by day; the old one is kept as {}{table}{UNPARTITIONED}", t.prefix);
                Ok(())
            }
            Err(e) => {
                let name = format!("{}{table}", t.prefix);
                let now = self.layout().await?;
                let done = now.get(&name).is_some_and(|(_, k)| !k.is_empty());
                if done && layout.contains_key(&name) {
                    // Another process swapped first: its table is in place.
                    self.execute(
                        "drop the partitioned table another process's swap left",
                        Mode::Plain,
                        &t.drop_partitioned_new(table),
                    )
                    .await?;
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Drops the days of the lease log older than yesterday (by the catalog
    /// clock), after carrying the head term of every name idle since then
    /// into today (`sql.rs`, `carry_idle_lease_heads`). Returns how many
    /// days were dropped.
    ///
    /// Not on a replicated catalog whose server is older than
    /// [`QUORUM_SAFE_DROP_FROM`]: there a `DROP PARTITION` leaves the
    /// dropped day's entry in ZooKeeper's `/quorum/last_part` (one entry per
    /// partition, naming its last quorum part), and every sequentially
    /// consistent read then fails with code 289 for good (a ClickHouse bug
    /// fixed in 20.4). The lease log then keeps every day (the crate
    /// docs, "Bounded tables").
    pub(super) async fn trim_lease_days(&self) -> Result<u64> {
        let t = &self.tables;
        self.ready().await?;
        if t.cluster.is_some() {
            let version = self.server_version().await?;
            if !version_at_least(&version, QUORUM_SAFE_DROP_FROM) {
                tracing::debug!(server = %self.target.redacted(), %version, "the lease log is not trimmed on a replicated catalog before ClickHouse 20.4");
                return Ok(0);
            }
        }
        let now_ms: u64 = self
            .fetch_one("read the server clock", Mode::Plain, &Tables::select_now())
            .await?;
        let today = now_ms / DAY_MS;
        let partitions: Vec<String> = self
            .fetch_all(
                "list the lease log's days",
                Mode::Plain,
                &t.select_lease_partitions(),
            )
            .await?;
        let old: Vec<u64> = partitions
            .iter()
            .filter_map(|p| p.trim_matches('\'').parse::<u64>().ok())
            .filter(|d| d + 1 < today)
            .collect();
        if old.is_empty() {
            return Ok(0);
        }
        self.execute(
            "carry the head of idle leases into today",
            Mode::Quorum,
            &t.carry_idle_lease_heads((today - 1) * DAY_MS),
        )
        .await?;
        for day in &old {
            self.execute(
                "drop a day of the lease log",
                Mode::Plain,
                &t.drop_lease_partition(*day),
            )
            .await?;
        }
        tracing::info!(server = %self.target.redacted(), days = old.len(), "dropped old days of the lease log");
        Ok(old.len() as u64)
    }
}

#[cfg(any(test, feature = "testing"))]
impl ClickHouseCatalog {
    /// Test seam: writes a schema-version row (to test refusals); see
    /// [`crate::testing::set_schema_version`].
    pub async fn testing_set_schema_version(&self, version: u32) -> Result<()> {
        // The highest version row wins; tests only ever raise it.
        self.ready().await?;
        self.execute(
            "write a schema version (test)",
            Mode::Plain,
            &self.tables.insert_schema_version(version),
        )
        .await
    }

    /// Test seam: the catalog as a version-1 build made it; see
    /// [`crate::testing::create_v1`].
    pub async fn testing_create_v1(&self, rows: &[crate::PackRow]) -> Result<()> {
        let t = &self.tables;
        self.create_database_and_version_table().await?;
        self.execute(
            "create the v1 packs table (test)",
            Mode::Plain,
            &t.v1_create_packs(),
        )
        .await?;
        self.execute(
            "create the unpartitioned lease table (test)",
            Mode::Plain,
            &t.v2_create_lease(),
        )
        .await?;
        self.execute(
            "write the v1 schema-version row (test)",
            Mode::Plain,
            &t.insert_schema_version(1),
        )
        .await?;
        if !rows.is_empty() {
            self.execute("insert v1 rows (test)", Mode::Plain, &t.v1_insert(rows))
                .await?;
        }
        Ok(())
    }

    /// Test seam: the highest schema-version row (0: none), unchecked.
    pub async fn testing_schema_version(&self) -> Result<u32> {
        self.fetch_one(
            "read the schema version (test)",
            Mode::Plain,
            &self.tables.select_schema_version(),
        )
        .await
    }
}

/// The first release whose `DROP PARTITION` also clears the partition's
/// entry of a replicated table's `/quorum/last_part` (a ClickHouse bug fixed in 20.4; README.md).
pub(super) const QUORUM_SAFE_DROP_FROM: (u32, u32) = (20, 4);

/// Whether `version` (`SELECT version()`, `MAJOR.MINOR...`) is at least
/// `(major, minor)`; an unreadable version is not.
pub(super) fn version_at_least(version: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

fn check_columns(
    server: &str,
    table: &str,
    expected: &[(&str, &str)],
    found: Option<&BTreeMap<String, String>>,
) -> Result<()> {
    let want: BTreeMap<String, String> = expected
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    let Some(found) = found else {
        return Err(Error::SchemaMismatch {
            server: server.to_string(),
            detail: format!("table {table} is missing after it was created"),
        });
    };
    if *found != want {
        let show = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::SchemaMismatch {
            server: server.to_string(),
            detail: format!(
                "table {table} has columns ({}), this spool expects ({})",
                show(found),
                show(&want)
            ),
        });
    }
    Ok(())
}
