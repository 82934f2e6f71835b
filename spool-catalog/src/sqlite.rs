//! The embedded single-node catalog: bundled SQLite (`sqlite:///ABS/PATH.db`).
//!
//! Same tables, same claim log, same fence as ClickHouse. Statements take
//! bound parameters; each write runs in a `BEGIN IMMEDIATE` transaction,
//! so a claim is appended only if the head has not moved since the claimant
//! read it, and a fenced batch checks its fence once, in the same
//! transaction as its rows (under the write lock, so no claim can land in
//! between). A batch is one transaction and one cached statement executed
//! per row.
//! The clock is SQLite's `strftime('%s','now')` (whole seconds, like old
//! ClickHouse). Calls run on tokio's blocking pool.

use crate::error::{Error, Result};
use crate::lease::{LeaseGuard, LeaseHead, LeaseRecord, NewClaim};
use crate::row::{check_pack_id, PackRow};
use crate::{Catalog, MAX_KEYS_PER_STATEMENT, SCHEMA_VERSION};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The catalog clock in milliseconds.
const NOW_MS: &str = "(CAST(strftime('%s','now') AS INTEGER) * 1000)";

/// The fence, as in ClickHouse: the head of ?1 is exactly one claim, lease
/// id ?2, expiring later than now + ?3 ms.
pub(crate) fn fence_sql(lease: &str) -> String {
    format!(
        "(SELECT count(*) = 1 AND max(lease_id) = ?2 AND max(expires_at_ms) > {NOW_MS} + ?3 FROM \"{lease}\" WHERE name = ?1 AND term = (SELECT max(term) FROM \"{lease}\" WHERE name = ?1))"
    )
}

/// The packs table of schema version 5 (`ordinal` may be NULL since
/// version 2; `trailer_sha256` since version 4; `object_offset` since
/// version 5, 0 for a pack that is its whole object).
fn create_packs(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}\" (pack_id TEXT NOT NULL PRIMARY KEY, object_key TEXT NOT NULL, store_id TEXT NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL, records INTEGER NOT NULL, source_host TEXT NOT NULL, source_pid INTEGER NOT NULL, rank_dir TEXT NOT NULL, ordinal INTEGER, created_at_ms INTEGER NOT NULL, indexed_at_ms INTEGER NOT NULL, trailer_sha256 TEXT NOT NULL, object_offset INTEGER NOT NULL DEFAULT 0)"
    )
}

/// The migration from schema version 1: SQLite cannot drop a `NOT NULL`
/// in place, so the packs table is rebuilt (rows copied as they are, the
/// time index recreated by the install) inside the install's transaction,
/// straight into the current layout (each row's `sha256`, the trailer's
/// checksum in those versions, copied into `trailer_sha256`).
fn migrate_v1(packs: &str) -> String {
    let cols = PACK_COLUMN_LIST_V3;
    format!(
        "{};\n\
         INSERT INTO \"{packs}__v2\" ({cols}, trailer_sha256) SELECT {cols}, sha256 FROM \"{packs}\";\n\
         DROP TABLE \"{packs}\";\n\
         ALTER TABLE \"{packs}__v2\" RENAME TO \"{packs}\";",
        create_packs(&format!("{packs}__v2"))
    )
}

/// The migration from schema version 3: the packs table gets
/// `trailer_sha256`, filled with each row's `sha256` (the trailer's
/// checksum, in the rows those versions wrote), inside the install's
/// transaction.
fn migrate_v3(packs: &str) -> String {
    format!(
        "ALTER TABLE \"{packs}\" ADD COLUMN trailer_sha256 TEXT NOT NULL DEFAULT '';\n\
         UPDATE \"{packs}\" SET trailer_sha256 = sha256;"
    )
}

/// The migration from schema version 4: the packs table gets
/// `object_offset`, 0 on every row already there (each of those packs is
/// its own object), inside the install's transaction.
fn migrate_v4(packs: &str) -> String {
    format!("ALTER TABLE \"{packs}\" ADD COLUMN object_offset INTEGER NOT NULL DEFAULT 0;")
}

/// Runs `migration` (which adds `column` to the packs table `packs`) inside
/// the install's transaction unless the column is there; whether it ran.
fn add_column_if_missing(
    tx: &rusqlite::Transaction<'_>,
    packs: &str,
    column: &'static str,
    migration: &str,
) -> std::result::Result<bool, Fail> {
    let has: bool = tx
        .query_row(
            &format!("SELECT count(*) FROM pragma_table_info('{packs}') WHERE name = ?1"),
            [column],
            |r| r.get::<_, i64>(0),
        )
        .purpose("look for a column added since")?
        > 0;
    if !has {
        tx.execute_batch(migration)
            .purpose("add a column of a newer schema version")?;
    }
    Ok(!has)
}

/// The bytes of the packs naming each of `keys` objects (bound as ?1 to
/// ?`keys`), one row per key some row names; a pack's row is its current
/// one (the primary key and the upsert keep one per `pack_id`).
fn referenced_bytes_sql(packs: &str, keys: usize) -> String {
    let marks: Vec<String> = (1..=keys).map(|i| format!("?{i}")).collect();
    format!(
        "SELECT object_key, sum(bytes) FROM \"{packs}\" WHERE object_key IN ({}) GROUP BY object_key",
        marks.join(", ")
    )
}

/// How long a statement waits for another connection's write lock: a
/// statement's bound ([`Catalog::request_timeout`]).
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The pack columns in table order.
const PACK_COLUMN_LIST: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset";

/// The pack columns of schema versions 1 to 3 (no `trailer_sha256`).
const PACK_COLUMN_LIST_V3: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms";

struct Statements {
    schema: String,
    packs: String,
    lease: String,
    create: String,
    create_index: String,
    fence_open: String,
    now: String,
    upsert: String,
    append_claim: String,
    head: String,
    claims: String,
    log: String,
    trim: String,
}

impl Statements {
    fn new(prefix: &str) -> Statements {
        let schema = format!("{prefix}schema_version");
        let packs = format!("{prefix}packs");
        let lease = format!("{prefix}lease");
        let create = format!(
            "CREATE TABLE IF NOT EXISTS \"{schema}\" (version INTEGER NOT NULL, installed_at_ms INTEGER NOT NULL);\n\
             {};\n\
             CREATE TABLE IF NOT EXISTS \"{lease}\" (name TEXT NOT NULL, term INTEGER NOT NULL, lease_id TEXT NOT NULL, holder TEXT NOT NULL, acquired_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, PRIMARY KEY (name, term, lease_id));",
            create_packs(&packs)
        );
        let create_index = format!(
            "CREATE INDEX IF NOT EXISTS \"{packs}_by_created\" ON \"{packs}\" (created_at_ms)"
        );
        let cols = PACK_COLUMN_LIST;
        let upsert_tail = "ON CONFLICT(pack_id) DO UPDATE SET object_key = excluded.object_key, store_id = excluded.store_id, sha256 = excluded.sha256, bytes = excluded.bytes, records = excluded.records, source_host = excluded.source_host, source_pid = excluded.source_pid, rank_dir = excluded.rank_dir, ordinal = excluded.ordinal, created_at_ms = excluded.created_at_ms, indexed_at_ms = excluded.indexed_at_ms, trailer_sha256 = excluded.trailer_sha256, object_offset = excluded.object_offset";
        // The fence is read once per batch inside its `BEGIN IMMEDIATE`
        // transaction: no other writer can append a claim until it commits.
        let fence_open = format!("SELECT {} = 1", fence_sql(&lease));
        // The clock is read once per batch, not per row, and bound as ?12.
        let now = format!("SELECT {NOW_MS}");
        let upsert = format!(
            "INSERT INTO \"{packs}\" ({cols}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) {upsert_tail}"
        );
        let append_claim = format!(
            "INSERT INTO \"{lease}\" (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT ?1, ?2, ?3, ?4, {NOW_MS}, {NOW_MS} + ?5 WHERE (SELECT coalesce(max(term), 0) FROM \"{lease}\" WHERE name = ?1) = ?2 - 1"
        );
        let lcols = "name, term, lease_id, holder, acquired_at_ms, expires_at_ms";
        let head = format!(
            "SELECT {lcols} FROM \"{lease}\" WHERE name = ?1 AND term = (SELECT max(term) FROM \"{lease}\" WHERE name = ?1) ORDER BY lease_id"
        );
        let claims = format!(
            "SELECT {lcols} FROM \"{lease}\" WHERE name = ?1 AND term = ?2 ORDER BY lease_id"
        );
        let log =
            format!("SELECT {lcols} FROM \"{lease}\" WHERE name = ?1 ORDER BY term, lease_id");
        // Claims older than ?1 ms before now go, but never a name's head term.
        let trim = format!(
            "DELETE FROM \"{lease}\" WHERE acquired_at_ms < {NOW_MS} - ?1 AND term < (SELECT max(term) FROM \"{lease}\" AS l WHERE l.name = \"{lease}\".name)"
        );
        Statements {
            schema,
            packs,
            lease,
            create,
            create_index,
            fence_open,
            now,
            upsert,
            append_claim,
            head,
            claims,
            log,
            trim,
        }
    }
}

/// The SQLite catalog.
pub struct SqliteCatalog {
    path: PathBuf,
    sql: Arc<Statements>,
    conn: Arc<Mutex<Option<Connection>>>,
    /// Opened to read only: the file and its tables must exist; nothing is
    /// created or migrated ([`crate::open_existing`]).
    read_only: bool,
}

impl std::fmt::Debug for SqliteCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCatalog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The expected columns (name, declared type with its `NOT NULL`).
const PACKS_COLUMNS: &[(&str, &str)] = &[
    ("pack_id", "TEXT NOT NULL"),
    ("object_key", "TEXT NOT NULL"),
    ("store_id", "TEXT NOT NULL"),
    ("sha256", "TEXT NOT NULL"),
    ("bytes", "INTEGER NOT NULL"),
    ("records", "INTEGER NOT NULL"),
    ("source_host", "TEXT NOT NULL"),
    ("source_pid", "INTEGER NOT NULL"),
    ("rank_dir", "TEXT NOT NULL"),
    ("ordinal", "INTEGER"),
    ("created_at_ms", "INTEGER NOT NULL"),
    ("indexed_at_ms", "INTEGER NOT NULL"),
    ("trailer_sha256", "TEXT NOT NULL"),
    ("object_offset", "INTEGER NOT NULL"),
];
const LEASE_COLUMNS: &[(&str, &str)] = &[
    ("name", "TEXT NOT NULL"),
    ("term", "INTEGER NOT NULL"),
    ("lease_id", "TEXT NOT NULL"),
    ("holder", "TEXT NOT NULL"),
    ("acquired_at_ms", "INTEGER NOT NULL"),
    ("expires_at_ms", "INTEGER NOT NULL"),
];

fn row_to_pack(r: &rusqlite::Row<'_>) -> rusqlite::Result<PackRow> {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<PackRow> {
        Ok(PackRow {
            pack_id: r.get(0)?,
            object_key: r.get(1)?,
            store_id: r.get(2)?,
            sha256: r.get(3)?,
            bytes: unsigned(r, 4)?,
            records: unsigned(r, 5)?,
            source_host: r.get(6)?,
            source_pid: unsigned(r, 7)?,
            rank_dir: r.get(8)?,
            ordinal: match r.get::<_, Option<i64>>(9)? {
                None => None,
                Some(_) => Some(unsigned(r, 9)?),
            },
            created_at_ms: unsigned(r, 10)?,
            indexed_at_ms: unsigned(r, 11)?,
            trailer_sha256: r.get(12)?,
            object_offset: unsigned(r, 13)?,
        })
    }
    read(r).map_err(|e| {
        // name the row, so an operator can find and fix (or delete) it
        let id = match r.get_ref(0) {
            Ok(rusqlite::types::ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
            _ => "(not text)".to_owned(),
        };
        // (ToSqlConversionFailure: the one variant without a feature that
        // displays just its message)
        rusqlite::Error::ToSqlConversionFailure(
            format!("the row of pack_id {id:?} is garbage ({e}); fix or delete that row").into(),
        )
    })
}

/// Column `idx` as an unsigned integer of type `T`: a negative or too
/// large value is an error, never wrapped around.
fn unsigned<T: TryFrom<i64>>(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let v: i64 = r.get(idx)?;
    if v < 0 {
        return Err(rusqlite::Error::IntegralValueOutOfRange(idx, v));
    }
    T::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v))
}

fn row_to_claim(r: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseRecord> {
    let id: String = r.get(2)?;
    Ok(LeaseRecord {
        name: r.get(0)?,
        term: r.get::<_, i64>(1)? as u64,
        lease_id: uuid::Uuid::parse_str(&id).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, Box::new(e))
        })?,
        holder: r.get(3)?,
        acquired_at_ms: r.get::<_, i64>(4)? as u64,
        expires_at_ms: r.get::<_, i64>(5)? as u64,
    })
}

/// What a blocking call reports: a rusqlite error with its purpose, or one
/// of ours.
enum Fail {
    Sql(&'static str, rusqlite::Error),
    Ours(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Ours(e)
    }
}

trait Purpose<T> {
    fn purpose(self, p: &'static str) -> std::result::Result<T, Fail>;
}

impl<T> Purpose<T> for rusqlite::Result<T> {
    fn purpose(self, p: &'static str) -> std::result::Result<T, Fail> {
        self.map_err(|e| Fail::Sql(p, e))
    }
}

impl SqliteCatalog {
    /// A catalog in this file (created on first use), tables named with
    /// `table_prefix`.
    pub fn new(path: PathBuf, table_prefix: &str) -> Result<SqliteCatalog> {
        Ok(SqliteCatalog {
            path,
            sql: Arc::new(Statements::new(table_prefix)),
            conn: Arc::new(Mutex::new(None)),
            read_only: false,
        })
    }

    /// The same catalog opened to read only: a missing file or table is
    /// [`Error::NoCatalog`], an older schema is refused, nothing is created
    /// or migrated.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Runs `f` on the connection (opened, schema checked, on first use) on
    /// the blocking pool.
    async fn call<T: Send + 'static>(
        &self,
        purpose: &'static str,
        f: impl FnOnce(&mut Connection, &Statements) -> std::result::Result<T, Fail> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        let sql = self.sql.clone();
        let path = self.path.clone();
        let read_only = self.read_only;
        let shown = self.path.display().to_string();
        let joined = tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                let c = open_and_install(&path, &sql, read_only)?;
                *guard = Some(c);
            }
            let c = guard.as_mut().expect("opened above");
            f(c, &sql)
        })
        .await;
        match joined {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Fail::Ours(e))) => Err(e),
            Ok(Err(Fail::Sql(p, source))) => Err(Error::Sqlite {
                path: shown,
                purpose: p,
                source,
            }),
            Err(e) => Err(Error::Protocol {
                server: shown,
                purpose,
                detail: format!("the blocking task failed: {e}"),
            }),
        }
    }
}

fn open_and_install(
    path: &std::path::Path,
    s: &Statements,
    read_only: bool,
) -> std::result::Result<Connection, Fail> {
    let shown = path.display().to_string();
    if let Some(parent) = path.parent() {
        if !parent.is_dir() {
            return Err(Fail::Ours(Error::InvalidUrl {
                url: format!("sqlite://{shown}"),
                reason: format!(
                    "directory {} does not exist; create it first",
                    parent.display()
                ),
            }));
        }
    }
    let no_catalog = |missing: String| {
        Fail::Ours(Error::NoCatalog {
            server: shown.clone(),
            missing,
        })
    };
    if read_only && !path.is_file() {
        return Err(no_catalog("no such file".into()));
    }
    let mut c = if read_only {
        // never created: a file removed since the check above is an error
        Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    } else {
        Connection::open(path)
    }
    .purpose("open the database file")?;
    c.busy_timeout(SQLITE_BUSY_TIMEOUT)
        .purpose("set the busy timeout")?;
    c.pragma_update(None, "journal_mode", "WAL")
        .purpose("switch to WAL")?;
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .purpose("begin the schema install")?;
    let have_schema: bool = tx
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [&s.schema],
            |r| r.get::<_, i64>(0),
        )
        .purpose("look for the schema-version table")?
        > 0;
    let found: u32 = if have_schema {
        tx.query_row(
            &format!("SELECT coalesce(max(version), 0) FROM \"{}\"", s.schema),
            [],
            |r| r.get::<_, i64>(0),
        )
        .purpose("read the schema version")? as u32
    } else {
        0
    };
    if found > SCHEMA_VERSION {
        return Err(Fail::Ours(Error::SchemaVersion {
            server: shown,
            found,
            expected: SCHEMA_VERSION,
            advice: "it was written by a newer spool; upgrade this spool, or point it at another file or table_prefix",
        }));
    }
    if read_only && !have_schema {
        return Err(no_catalog(format!("no table {}", s.schema)));
    }
    if read_only && found < SCHEMA_VERSION {
        return Err(Fail::Ours(Error::SchemaVersion {
            server: shown,
            found,
            expected: SCHEMA_VERSION,
            advice: "a read does not migrate it: run a service against it (spool run --once) to migrate it first",
        }));
    }
    if found == 1 {
        let have_packs: bool = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [&s.packs],
                |r| r.get::<_, i64>(0),
            )
            .purpose("look for the packs table")?
            > 0;
        if have_packs {
            tx.execute_batch(&migrate_v1(&s.packs))
                .purpose("migrate the packs table from schema version 1 (nullable ordinal)")?;
            tracing::info!(path = %shown, "migrated the catalog from schema version 1 to {SCHEMA_VERSION}");
        }
    }
    if !read_only {
        tx.execute_batch(&s.create).purpose("create the tables")?;
    }
    // only a table an older spool made (a version row says so) is migrated
    if (1..SCHEMA_VERSION).contains(&found) {
        if add_column_if_missing(&tx, &s.packs, "trailer_sha256", &migrate_v3(&s.packs))? {
            tracing::info!(path = %shown, "migrated the packs table from schema version 3: trailer_sha256 added, filled with each row's sha256");
        }
        if add_column_if_missing(&tx, &s.packs, "object_offset", &migrate_v4(&s.packs))? {
            tracing::info!(path = %shown, "migrated the packs table from schema version 4: object_offset added, 0 on every row (a whole object)");
        }
    }
    for (table, want) in [(&s.packs, PACKS_COLUMNS), (&s.lease, LEASE_COLUMNS)] {
        let mut st = tx
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .purpose("read the table columns")?;
        let mut got: Vec<(String, String)> = st
            .query_map([], |r| {
                let not_null = if r.get::<_, i64>(3)? != 0 {
                    " NOT NULL"
                } else {
                    ""
                };
                Ok((
                    r.get::<_, String>(1)?,
                    format!("{}{not_null}", r.get::<_, String>(2)?),
                ))
            })
            .purpose("read the table columns")?
            .collect::<rusqlite::Result<_>>()
            .purpose("read the table columns")?;
        got.sort();
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        want.sort();
        if got != want {
            let show = |v: &[(String, String)]| {
                v.iter()
                    .map(|(n, t)| format!("{n} {t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(Fail::Ours(Error::SchemaMismatch {
                server: shown,
                detail: format!(
                    "table {table} has columns ({}), this spool expects ({})",
                    show(&got),
                    show(&want)
                ),
            }));
        }
    }
    if !read_only {
        tx.execute_batch(&s.create_index)
            .purpose("create the time index")?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            &format!(
                "INSERT INTO \"{}\" (version, installed_at_ms) VALUES (?1, {NOW_MS})",
                s.schema
            ),
            [SCHEMA_VERSION],
        )
        .purpose("write the schema-version row")?;
    }
    tx.commit().purpose("commit the schema install")?;
    Ok(c)
}

#[async_trait]
impl Catalog for SqliteCatalog {
    fn server(&self) -> String {
        self.path.display().to_string()
    }

    async fn ensure_schema(&self) -> Result<()> {
        self.call("check the schema", |_, _| Ok(())).await
    }

    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        for r in rows {
            r.validate()?;
        }
        let rows = rows.to_vec();
        let fence = fence.cloned();
        let server = self.server();
        self.call("index packs", move |c, s| {
            // One transaction per batch: the fence (when given) is checked
            // once, under the write lock, then every row is one execution
            // of one cached statement.
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .purpose("begin an index transaction")?;
            if let Some(g) = &fence {
                let open: bool = tx
                    .prepare_cached(&s.fence_open)
                    .purpose("prepare the fence check")?
                    .query_row(
                        params![
                            g.name,
                            g.lease_id.to_string(),
                            g.config.fence_margin.as_millis() as i64
                        ],
                        |r| r.get(0),
                    )
                    .purpose("check the fence")?;
                if !open {
                    // Dropping the transaction rolls back (nothing written).
                    return Err(Fail::Ours(Error::Fenced {
                        server,
                        name: g.name.clone(),
                        lease_id: g.lease_id,
                        margin: g.config.fence_margin,
                        packs: rows.len(),
                    }));
                }
            }
            let now: i64 = tx
                .prepare_cached(&s.now)
                .purpose("prepare the clock read")?
                .query_row([], |r| r.get(0))
                .purpose("read the catalog clock")?;
            {
                let mut st = tx
                    .prepare_cached(&s.upsert)
                    .purpose("prepare the index insert")?;
                for r in &rows {
                    st.execute(params![
                        r.pack_id,
                        r.object_key,
                        r.store_id,
                        r.sha256,
                        r.bytes as i64,
                        r.records as i64,
                        r.source_host,
                        r.source_pid as i64,
                        r.rank_dir,
                        r.ordinal.map(i64::from),
                        r.created_at_ms as i64,
                        now,
                        r.trailer_sha256,
                        r.object_offset as i64,
                    ])
                    .purpose("insert a pack row")?;
                }
            }
            tx.commit().purpose("commit the index transaction")?;
            Ok(())
        })
        .await
    }

    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>> {
        check_pack_id(pack_id)?;
        let id = pack_id.to_string();
        self.call("read a pack row", move |c, s| {
            c.query_row(
                &format!("SELECT * FROM \"{}\" WHERE pack_id = ?1", s.packs),
                [id],
                row_to_pack,
            )
            .optional()
            .purpose("read a pack row")
        })
        .await
    }

    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        self.call("list pack rows by time", move |c, s| {
            let mut st = c
                .prepare_cached(&format!(
                    "SELECT * FROM \"{}\" WHERE created_at_ms >= ?1 AND created_at_ms < ?2 ORDER BY created_at_ms, pack_id",
                    s.packs
                ))
                .purpose("list pack rows by time")?;
            let rows = st
                .query_map(params![from_ms as i64, to_ms.min(i64::MAX as u64) as i64], row_to_pack)
                .purpose("list pack rows by time")?
                .collect::<rusqlite::Result<Vec<_>>>()
                .purpose("list pack rows by time")?;
            Ok(rows)
        })
        .await
    }

    async fn count(&self) -> Result<u64> {
        self.call("count packs", |c, s| {
            c.query_row(&format!("SELECT count(*) FROM \"{}\"", s.packs), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .purpose("count packs")
        })
        .await
    }

    async fn referenced_bytes(&self, object_keys: &[String]) -> Result<HashMap<String, u64>> {
        let keys: Vec<String> = object_keys
            .iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .cloned()
            .collect();
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        self.call("read referenced bytes", move |c, s| {
            // One read transaction: every statement reads one snapshot.
            // The primary key makes each pack one row (its latest), so a
            // sum over the rows naming a key is over current rows only.
            let tx = c.transaction().purpose("begin a referenced-bytes read")?;
            let mut out = HashMap::new();
            for chunk in keys.chunks(MAX_KEYS_PER_STATEMENT) {
                let mut st = tx
                    .prepare(&referenced_bytes_sql(&s.packs, chunk.len()))
                    .purpose("read referenced bytes")?;
                let rows = st
                    .query_map(rusqlite::params_from_iter(chunk), |r| {
                        Ok((r.get::<_, String>(0)?, unsigned::<u64>(r, 1)?))
                    })
                    .purpose("read referenced bytes")?;
                for row in rows {
                    let (key, bytes) = row.purpose("read referenced bytes")?;
                    out.insert(key, bytes);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn current_rows(&self, pack_ids: &[String]) -> Result<HashMap<String, PackRow>> {
        let ids: Vec<String> = pack_ids
            .iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .cloned()
            .collect();
        for id in &ids {
            check_pack_id(id)?;
        }
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        self.call("read current pack rows", move |c, s| {
            // One read transaction: every statement reads one snapshot.
            let tx = c.transaction().purpose("begin a pack-row read")?;
            let mut out = HashMap::new();
            for chunk in ids.chunks(MAX_KEYS_PER_STATEMENT) {
                let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("?{i}")).collect();
                let mut st = tx
                    .prepare(&format!(
                        "SELECT * FROM \"{}\" WHERE pack_id IN ({})",
                        s.packs,
                        marks.join(", ")
                    ))
                    .purpose("read current pack rows")?;
                let rows = st
                    .query_map(rusqlite::params_from_iter(chunk), row_to_pack)
                    .purpose("read current pack rows")?;
                for row in rows {
                    let row = row.purpose("read current pack rows")?;
                    out.insert(row.pack_id.clone(), row);
                }
            }
            Ok(out)
        })
        .await
    }

    fn request_timeout(&self) -> Duration {
        SQLITE_BUSY_TIMEOUT
    }

    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        let name = name.to_string();
        self.call("read the lease head", move |c, s| {
            let tx = c.transaction().purpose("begin a lease read")?;
            let claims = {
                let mut st = tx.prepare_cached(&s.head).purpose("read the lease head")?;
                let v = st
                    .query_map([&name], row_to_claim)
                    .purpose("read the lease head")?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .purpose("read the lease head")?;
                v
            };
            let now_ms = tx
                .query_row(&format!("SELECT {NOW_MS}"), [], |r| r.get::<_, i64>(0))
                .purpose("read the clock")? as u64;
            Ok(LeaseHead { claims, now_ms })
        })
        .await
    }

    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        let claim = claim.clone();
        self.call("append a lease claim", move |c, s| {
            // Inserts nothing if the head moved since the claimant read it;
            // the read-back then finds no claim of ours.
            c.execute(
                &s.append_claim,
                params![
                    claim.name,
                    claim.term as i64,
                    claim.lease_id.to_string(),
                    claim.holder,
                    claim.ttl_ms as i64
                ],
            )
            .purpose("append a lease claim")?;
            Ok(())
        })
        .await
    }

    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        let name = name.to_string();
        self.call("read back lease claims", move |c, s| {
            let mut st = c
                .prepare_cached(&s.claims)
                .purpose("read back lease claims")?;
            let v = st
                .query_map(params![name, term as i64], row_to_claim)
                .purpose("read back lease claims")?
                .collect::<rusqlite::Result<Vec<_>>>()
                .purpose("read back lease claims")?;
            Ok(v)
        })
        .await
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        let name = name.to_string();
        self.call("read the lease log", move |c, s| {
            let mut st = c.prepare_cached(&s.log).purpose("read the lease log")?;
            let v = st
                .query_map([name], row_to_claim)
                .purpose("read the lease log")?
                .collect::<rusqlite::Result<Vec<_>>>()
                .purpose("read the lease log")?;
            Ok(v)
        })
        .await
    }

    async fn trim_lease_log(&self) -> Result<u64> {
        let keep = crate::LEASE_LOG_RETENTION.as_millis() as i64;
        self.call("trim the lease log", move |c, s| {
            let n = c.execute(&s.trim, [keep]).purpose("trim the lease log")?;
            Ok(n as u64)
        })
        .await
    }
}

#[cfg(any(test, feature = "testing"))]
impl SqliteCatalog {
    /// Test seam: the file as a version-1 build made it (its frozen DDL,
    /// version row and rows); see [`crate::testing::create_v1`].
    pub async fn testing_create_v1(&self, rows: &[PackRow]) -> Result<()> {
        let (s, shown) = (self.sql.clone(), self.path.display().to_string());
        let fail = |purpose: &'static str| {
            let shown = shown.clone();
            move |source| Error::Sqlite {
                path: shown,
                purpose,
                source,
            }
        };
        let c = Connection::open(&self.path).map_err(fail("open (test)"))?;
        c.execute_batch(&format!(
            "CREATE TABLE \"{schema}\" (version INTEGER NOT NULL, installed_at_ms INTEGER NOT NULL);\n\
             CREATE TABLE \"{packs}\" (pack_id TEXT NOT NULL PRIMARY KEY, object_key TEXT NOT NULL, store_id TEXT NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL, records INTEGER NOT NULL, source_host TEXT NOT NULL, source_pid INTEGER NOT NULL, rank_dir TEXT NOT NULL, ordinal INTEGER NOT NULL, created_at_ms INTEGER NOT NULL, indexed_at_ms INTEGER NOT NULL);\n\
             CREATE TABLE \"{lease}\" (name TEXT NOT NULL, term INTEGER NOT NULL, lease_id TEXT NOT NULL, holder TEXT NOT NULL, acquired_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, PRIMARY KEY (name, term, lease_id));\n\
             CREATE INDEX \"{packs}_by_created\" ON \"{packs}\" (created_at_ms);\n\
             INSERT INTO \"{schema}\" (version, installed_at_ms) VALUES (1, 0);",
            schema = s.schema,
            packs = s.packs,
            lease = s.lease,
        ))
        .map_err(fail("create the v1 schema (test)"))?;
        for r in rows {
            c.execute(
                &format!(
                    "INSERT INTO \"{}\" ({PACK_COLUMN_LIST_V3}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    s.packs
                ),
                params![
                    r.pack_id,
                    r.object_key,
                    r.store_id,
                    r.sha256,
                    r.bytes as i64,
                    r.records as i64,
                    r.source_host,
                    r.source_pid as i64,
                    r.rank_dir,
                    r.ordinal.map_or(0, i64::from),
                    r.created_at_ms as i64,
                    r.indexed_at_ms as i64,
                ],
            )
            .map_err(fail("insert a v1 row (test)"))?;
        }
        Ok(())
    }

    /// Test seam: the highest schema-version row (0: none), unchecked.
    pub async fn testing_schema_version(&self) -> Result<u32> {
        let shown = self.path.display().to_string();
        let c = Connection::open(&self.path).map_err(|source| Error::Sqlite {
            path: shown.clone(),
            purpose: "open (test)",
            source,
        })?;
        c.query_row(
            &format!(
                "SELECT coalesce(max(version), 0) FROM \"{}\"",
                self.sql.schema
            ),
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|v| v as u32)
        .map_err(|source| Error::Sqlite {
            path: shown,
            purpose: "read the schema version (test)",
            source,
        })
    }

    /// Test seam: writes a schema-version row (to test refusals); see
    /// [`crate::testing::set_schema_version`].
    pub async fn testing_set_schema_version(&self, version: u32) -> Result<()> {
        self.call("write a schema version (test)", move |c, s| {
            c.execute(
                &format!(
                    "INSERT INTO \"{}\" (version, installed_at_ms) VALUES (?1, 0)",
                    s.schema
                ),
                [version],
            )
            .purpose("write a schema version (test)")?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A catalog file as schema version `version` left it: its version row,
    /// its packs table (`create_packs`) and one row (`insert`), in a fresh
    /// directory; returns the directory and the file.
    fn old_file(version: u32, create_packs: &str, insert: &str) -> (PathBuf, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("spool-sqlite-v{version}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("catalog.db");
        let _ = std::fs::remove_file(&path);
        Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "CREATE TABLE \"spool_schema_version\" (version INTEGER NOT NULL, installed_at_ms INTEGER NOT NULL);\n\
                 {create_packs};\n\
                 INSERT INTO \"spool_schema_version\" VALUES ({version}, 0);\n\
                 {insert};"
            ))
            .unwrap();
        (dir, path)
    }

    /// A file as schema version 3 left it (no `trailer_sha256`) gets the
    /// column on open, each row's `sha256` (then the trailer's checksum)
    /// copied in, and the version row 4; opening it again changes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_3_file_gets_trailer_sha256_from_each_rows_sha256() {
        let v3_packs = create_packs("spool_packs")
            .replace(", trailer_sha256 TEXT NOT NULL", "")
            .replace(", object_offset INTEGER NOT NULL DEFAULT 0", "");
        assert!(!v3_packs.contains("trailer"));
        let old_sha = "ab".repeat(32);
        let (dir, path) = old_file(
            3,
            &v3_packs,
            &format!(
                "INSERT INTO \"spool_packs\" ({PACK_COLUMN_LIST_V3}) VALUES ('{id}', 'k', 'default', '{old_sha}', 1, 1, 'h', 1, 'r0-0badcafe', NULL, 5, 6)",
                id = "a".repeat(32),
            ),
        );
        for _ in 0..2 {
            let cat = SqliteCatalog::new(path.clone(), "spool_").unwrap();
            let row = cat.get(&"a".repeat(32)).await.unwrap().unwrap();
            assert_eq!((&row.sha256, &row.trailer_sha256), (&old_sha, &old_sha));
            assert!(!row.whole_sha256());
            assert_eq!(row.object_offset, 0);
            assert_eq!(cat.testing_schema_version().await.unwrap(), SCHEMA_VERSION);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file as schema version 4 left it (no `object_offset`) gets the
    /// column on open, 0 on every row (each of those packs is its whole
    /// object), and the version row 5; opening it again changes nothing,
    /// and a row indexed since keeps the offset it was given.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_version_4_file_gets_object_offset_zero_on_every_row() {
        let v4_packs =
            create_packs("spool_packs").replace(", object_offset INTEGER NOT NULL DEFAULT 0", "");
        assert!(!v4_packs.contains("object_offset"));
        let (dir, path) = old_file(
            4,
            &v4_packs,
            &format!(
                "INSERT INTO \"spool_packs\" ({PACK_COLUMN_LIST_V3}, trailer_sha256) VALUES ('{id}', 'k', 'default', '{sha}', 1, 1, 'h', 1, 'r0-0badcafe', NULL, 5, 6, '{sha}')",
                id = "a".repeat(32),
                sha = "ab".repeat(32),
            ),
        );
        for _ in 0..2 {
            let cat = SqliteCatalog::new(path.clone(), "spool_").unwrap();
            let row = cat.get(&"a".repeat(32)).await.unwrap().unwrap();
            assert_eq!(row.object_offset, 0);
            assert_eq!(cat.testing_schema_version().await.unwrap(), SCHEMA_VERSION);
            let mut bundled = row.clone();
            bundled.pack_id = "b".repeat(32);
            bundled.object_offset = 4096;
            cat.index(std::slice::from_ref(&bundled), None)
                .await
                .unwrap();
            let back = cat.get(&bundled.pack_id).await.unwrap().unwrap();
            assert_eq!(back.object_offset, 4096);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn golden_sqlite_referenced_bytes() {
        assert_eq!(
            referenced_bytes_sql("spool_packs", 3),
            "SELECT object_key, sum(bytes) FROM \"spool_packs\" WHERE object_key IN (?1, ?2, ?3) GROUP BY object_key"
        );
    }

    #[test]
    fn golden_sqlite_fence_and_claim() {
        let s = Statements::new("spool_");
        assert_eq!(
            fence_sql("spool_lease"),
            "(SELECT count(*) = 1 AND max(lease_id) = ?2 AND max(expires_at_ms) > (CAST(strftime('%s','now') AS INTEGER) * 1000) + ?3 FROM \"spool_lease\" WHERE name = ?1 AND term = (SELECT max(term) FROM \"spool_lease\" WHERE name = ?1))"
        );
        assert_eq!(
            s.append_claim,
            "INSERT INTO \"spool_lease\" (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT ?1, ?2, ?3, ?4, (CAST(strftime('%s','now') AS INTEGER) * 1000), (CAST(strftime('%s','now') AS INTEGER) * 1000) + ?5 WHERE (SELECT coalesce(max(term), 0) FROM \"spool_lease\" WHERE name = ?1) = ?2 - 1"
        );
        assert_eq!(
            s.fence_open,
            format!("SELECT {} = 1", fence_sql("spool_lease"))
        );
        assert!(s.upsert.starts_with(
            "INSERT INTO \"spool_packs\" (pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256, object_offset) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT(pack_id) DO UPDATE SET object_key = excluded.object_key,"
        ));
        assert!(s.upsert.ends_with(
            "trailer_sha256 = excluded.trailer_sha256, object_offset = excluded.object_offset"
        ));
        assert_eq!(
            s.now,
            "SELECT (CAST(strftime('%s','now') AS INTEGER) * 1000)"
        );
    }
}
