//! The production catalog: ClickHouse over HTTP with the `clickhouse` crate.

use crate::error::{Error, Result};
use crate::lease::{LeaseGuard, LeaseHead, LeaseRecord, NewClaim};
use crate::row::{check_pack_id, PackRow};
use crate::sql::{Tables, FENCE_SHUT_CODE, INDEXED_AT_DEFAULT, LEASE_SCHEMA, PACKS_SCHEMA};
use crate::target::ClickHouseTarget;
use crate::{Catalog, MAX_ROWS_PER_STATEMENT, SCHEMA_VERSION};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Default bound on one request (connect, send, answer).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The first major version whose HTTP interface serves
/// `RowBinaryWithNamesAndTypes` well enough for the crate's validation.
const VALIDATION_FROM_MAJOR: u32 = 23;

/// The first major version with the `async_insert` and
/// `wait_for_async_insert` settings this crate relies on.
const ASYNC_INSERT_FROM_MAJOR: u32 = 22;

/// ClickHouse exception codes that mean "the credentials were refused".
const AUTH_CODES: &[u32] = &[192, 193, 194, 195, 516];
/// Codes that mean the tables are not what this build expects.
const SCHEMA_CODES: &[u32] = &[10, 16, 47, 53, 60, 81];
/// Codes worth retrying: timeouts, overload, network, parts pressure.
const RETRYABLE_CODES: &[u32] = &[
    3, 159, 160, 164, 202, 203, 209, 210, 241, 242, 252, 319, 394, 425, 999,
];

#[derive(clickhouse::Row, serde::Deserialize)]
struct LeaseRow {
    name: String,
    term: u64,
    lease_id: String,
    holder: String,
    acquired_at_ms: u64,
    expires_at_ms: u64,
    now_ms: u64,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct ColumnRow {
    table: String,
    name: String,
    r#type: String,
    default_kind: String,
    default_expression: String,
}

#[derive(clickhouse::Row, serde::Deserialize)]
struct ChPackRow {
    pack_id: String,
    object_key: String,
    store_id: String,
    sha256: String,
    bytes: u64,
    records: u64,
    source_host: String,
    source_pid: u32,
    rank_dir: String,
    ordinal: Option<u32>,
    created_at_ms: u64,
    indexed_at_ms: u64,
}

impl From<ChPackRow> for PackRow {
    fn from(r: ChPackRow) -> PackRow {
        PackRow {
            pack_id: r.pack_id,
            object_key: r.object_key,
            store_id: r.store_id,
            sha256: r.sha256,
            bytes: r.bytes,
            records: r.records,
            source_host: r.source_host,
            source_pid: r.source_pid,
            rank_dir: r.rank_dir,
            ordinal: r.ordinal,
            created_at_ms: r.created_at_ms,
            indexed_at_ms: r.indexed_at_ms,
        }
    }
}

struct Connected {
    client: clickhouse::Client,
    version: String,
}

/// A ClickHouse catalog (`clickhouse://HOST:PORT/DATABASE?...`).
pub struct ClickHouseCatalog {
    target: ClickHouseTarget,
    tables: Tables,
    base: clickhouse::Client,
    request_timeout: Duration,
    connected: OnceCell<Connected>,
    schema_ok: OnceCell<()>,
}

impl std::fmt::Debug for ClickHouseCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseCatalog")
            .field("server", &self.target.redacted())
            .finish_non_exhaustive()
    }
}

/// Splits a ClickHouse error body into its exception code and, when the
/// crate reported only a status line, the HTTP status.
fn parse_bad_response(msg: &str) -> (Option<u32>, Option<u16>) {
    let code = msg.find("Code: ").and_then(|i| {
        let digits: String = msg[i + 6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    });
    let status = msg
        .get(..3)
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .filter(|_| msg.len() == 3 || msg.as_bytes()[3] == b' ');
    (code, status)
}

/// Maps the crate's error to ours, naming the server and the purpose.
pub(crate) fn error_from_clickhouse(
    server: &str,
    purpose: &'static str,
    e: clickhouse::error::Error,
) -> Error {
    use clickhouse::error::Error as E;
    let server = server.to_string();
    match e {
        E::TimedOut => Error::Timeout {
            server,
            purpose,
            after: DEFAULT_REQUEST_TIMEOUT,
        },
        E::Network(inner) => {
            let mut detail = inner.to_string();
            let mut src = std::error::Error::source(&*inner);
            while let Some(s) = src {
                detail.push_str(": ");
                detail.push_str(&s.to_string());
                src = s.source();
            }
            Error::Unreachable {
                server,
                purpose,
                detail,
            }
        }
        E::BadResponse(message) => {
            let (code, status) = parse_bad_response(&message);
            let message = message.trim().to_string();
            match (code, status) {
                (Some(c), _) if AUTH_CODES.contains(&c) => Error::Auth {
                    server,
                    purpose,
                    message,
                },
                (None, Some(401 | 403)) => Error::Auth {
                    server,
                    purpose,
                    message,
                },
                (Some(115), _) => Error::UnknownSetting {
                    server,
                    purpose,
                    message,
                },
                (Some(c), _) if SCHEMA_CODES.contains(&c) => Error::SchemaMismatch {
                    server,
                    detail: format!(
                        "the statement to {purpose} does not fit the tables: {message}"
                    ),
                },
                (Some(c), _) => Error::Server {
                    server,
                    purpose,
                    code: Some(c),
                    message,
                    retryable: RETRYABLE_CODES.contains(&c),
                },
                // No ClickHouse exception: a proxy or an overloaded server.
                (None, s) => Error::Server {
                    server,
                    purpose,
                    code: None,
                    retryable: s.is_none_or(|s| s >= 500 || s == 429),
                    message,
                },
            }
        }
        other => Error::Protocol {
            server,
            purpose,
            detail: other.to_string(),
        },
    }
}

impl ClickHouseCatalog {
    /// A catalog for this target; nothing is contacted until first use.
    pub fn new(target: ClickHouseTarget) -> ClickHouseCatalog {
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        // Small inserts otherwise stall ~40 ms on Nagle + delayed ACK.
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                // Under the server's keep-alive (3 s on old releases).
                .pool_idle_timeout(Duration::from_millis(2500))
                .build(connector);
        let mut base = clickhouse::Client::with_http_client(http)
            .with_url(target.http_url())
            .with_validation(false)
            // Index statements carry their rows as SQL text.
            .with_setting("max_query_size", (16 << 20).to_string());
        if let Some(u) = &target.user {
            base = base.with_user(u.clone());
        }
        if let Some(p) = &target.password {
            base = base.with_password(p.clone());
        }
        let tables = Tables {
            database: target.database.clone(),
            prefix: target.table_prefix.clone(),
        };
        ClickHouseCatalog {
            target,
            tables,
            base,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connected: OnceCell::new(),
            schema_ok: OnceCell::new(),
        }
    }

    /// The same catalog with another per-request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The server's version (`SELECT version()`), reading it if not yet known.
    pub async fn server_version(&self) -> Result<String> {
        Ok(self.connect().await?.version.clone())
    }

    /// Runs one request under the timeout, classifying failures.
    async fn run<T>(
        &self,
        purpose: &'static str,
        timeout: Duration,
        fut: impl Future<Output = clickhouse::error::Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(
                match error_from_clickhouse(&self.target.redacted(), purpose, e) {
                    Error::Timeout {
                        server, purpose, ..
                    } => Error::Timeout {
                        server,
                        purpose,
                        after: timeout,
                    },
                    other => other,
                },
            ),
            Err(_) => Err(Error::Timeout {
                server: self.target.redacted(),
                purpose,
                after: timeout,
            }),
        }
    }

    async fn connect(&self) -> Result<&Connected> {
        self.connected
            .get_or_try_init(|| async {
                let version: String = self
                    .run(
                        "read the server version",
                        self.request_timeout,
                        self.base.query_raw("SELECT version()").fetch_one::<String>(),
                    )
                    .await?;
                let major: u32 = version
                    .split('.')
                    .next()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(0);
                if self.target.async_insert && major < ASYNC_INSERT_FROM_MAJOR {
                    return Err(Error::NotSupportedByServer {
                        server: self.target.redacted(),
                        version,
                        knob: "async_insert=1",
                        feature: "asynchronous inserts (settings async_insert, wait_for_async_insert)",
                        since: "22.1",
                    });
                }
                let validation = major >= VALIDATION_FROM_MAJOR;
                tracing::debug!(server = %self.target.redacted(), %version, validation, "connected to ClickHouse");
                Ok(Connected {
                    client: self.base.clone().with_validation(validation),
                    version,
                })
            })
            .await
    }

    async fn client(&self) -> Result<&clickhouse::Client> {
        self.ready().await?;
        Ok(&self.connect().await?.client)
    }

    async fn execute(&self, purpose: &'static str, sql: &str) -> Result<()> {
        let client = &self.connect().await?.client;
        self.run(
            purpose,
            self.request_timeout,
            client.query_raw(sql).execute(),
        )
        .await
    }

    async fn ready(&self) -> Result<()> {
        self.schema_ok
            .get_or_try_init(|| self.install_or_verify())
            .await
            .map(|_| ())
    }

    async fn install_or_verify(&self) -> Result<()> {
        let t = &self.tables;
        let server = self.target.redacted();
        self.execute("create the catalog database", &t.create_database())
            .await?;
        self.execute("create the schema-version table", &t.create_schema_table())
            .await?;
        let client = &self.connect().await?.client;
        let found: u32 = self
            .run(
                "read the schema version",
                self.request_timeout,
                client
                    .query_raw(&t.select_schema_version())
                    .fetch_one::<u32>(),
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
        self.execute("create the packs table", &t.create_packs())
            .await?;
        if found == 1 {
            // Version 1 → 2: `ordinal` becomes nullable; idempotent, so a
            // concurrent or interrupted migration is simply run again.
            self.execute(
                "migrate the packs table from schema version 1 (nullable ordinal)",
                &t.migrate_v1_ordinal(),
            )
            .await?;
            tracing::info!(server = %server, "migrated the catalog from schema version 1 to {SCHEMA_VERSION}");
        }
        self.execute("create the lease table", &t.create_lease())
            .await?;
        let cols: Vec<ColumnRow> = self
            .run(
                "read the table columns",
                self.request_timeout,
                client
                    .query_raw(&t.select_columns())
                    .fetch_all::<ColumnRow>(),
            )
            .await?;
        let packs = t.packs_name();
        // `indexed_at_ms` must default to the server clock: the unfenced
        // `VALUES` insert leaves it out. Tables made before it had one get
        // it (a metadata-only change, idempotent).
        let squash = |e: &str| e.split_whitespace().collect::<String>();
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
        if !has_default {
            self.execute(
                "give indexed_at_ms its default (the server clock)",
                &t.set_indexed_at_default(),
            )
            .await?;
            tracing::info!(server = %server, table = %packs, "gave indexed_at_ms its default (the server clock)");
        }
        if found < SCHEMA_VERSION {
            self.execute(
                "write the schema-version row",
                &t.insert_schema_version(SCHEMA_VERSION),
            )
            .await?;
        }
        Ok(())
    }

    async fn fetch_lease(
        &self,
        purpose: &'static str,
        sql: &str,
    ) -> Result<(Vec<LeaseRecord>, u64)> {
        let client = self.client().await?;
        let rows: Vec<LeaseRow> = self
            .run(
                purpose,
                self.request_timeout,
                client.query_raw(sql).fetch_all::<LeaseRow>(),
            )
            .await?;
        let now = rows.first().map_or(0, |r| r.now_ms);
        let recs = rows
            .into_iter()
            .map(|r| {
                Ok(LeaseRecord {
                    lease_id: uuid::Uuid::parse_str(&r.lease_id).map_err(|e| Error::Protocol {
                        server: self.target.redacted(),
                        purpose,
                        detail: format!("lease_id {:?} is not a UUID: {e}", r.lease_id),
                    })?,
                    name: r.name,
                    term: r.term,
                    holder: r.holder,
                    acquired_at_ms: r.acquired_at_ms,
                    expires_at_ms: r.expires_at_ms,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((recs, now))
    }

    /// Test seam: drops the whole database this catalog lives in.
    #[cfg(any(test, feature = "testing"))]
    pub async fn testing_drop_database(&self) -> Result<()> {
        let sql = format!("DROP DATABASE IF EXISTS `{}`", self.target.database);
        self.execute("drop the test database", &sql).await
    }

    /// Test seam: runs one statement as is.
    #[cfg(any(test, feature = "testing"))]
    pub async fn testing_execute(&self, sql: &str) -> Result<()> {
        self.execute("run a test statement", sql).await
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

#[async_trait]
impl Catalog for ClickHouseCatalog {
    fn server(&self) -> String {
        self.target.redacted()
    }

    async fn ensure_schema(&self) -> Result<()> {
        self.ready().await
    }

    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        for r in rows {
            r.validate()?;
        }
        let client = self.client().await?;
        for chunk in rows.chunks(MAX_ROWS_PER_STATEMENT) {
            match fence {
                None => {
                    let mut q = client.query_raw(&self.tables.index_values(chunk));
                    if self.target.async_insert {
                        q = q
                            .with_setting("async_insert", "1")
                            .with_setting("wait_for_async_insert", "1");
                    }
                    self.run("index packs", self.request_timeout, q.execute())
                        .await?;
                }
                Some(g) => {
                    let sql = self.tables.index_fenced(chunk, g);
                    let done = self
                        .run(
                            "index packs (fenced)",
                            g.config.fence_margin,
                            client.query_raw(&sql).execute(),
                        )
                        .await;
                    match done {
                        Err(Error::Server {
                            code: Some(FENCE_SHUT_CODE),
                            ..
                        }) => {
                            return Err(Error::Fenced {
                                server: self.server(),
                                name: g.name.clone(),
                                lease_id: g.lease_id,
                                margin: g.config.fence_margin,
                                packs: chunk.len(),
                            })
                        }
                        other => other?,
                    }
                }
            }
        }
        Ok(())
    }

    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>> {
        check_pack_id(pack_id)?;
        let client = self.client().await?;
        let rows: Vec<ChPackRow> = self
            .run(
                "read a pack row",
                self.request_timeout,
                client
                    .query_raw(&self.tables.select_pack(pack_id))
                    .fetch_all::<ChPackRow>(),
            )
            .await?;
        Ok(rows.into_iter().next().map(PackRow::from))
    }

    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        let client = self.client().await?;
        let rows: Vec<ChPackRow> = self
            .run(
                "list pack rows by time",
                self.request_timeout,
                client
                    .query_raw(&self.tables.select_range(from_ms, to_ms))
                    .fetch_all::<ChPackRow>(),
            )
            .await?;
        Ok(rows.into_iter().map(PackRow::from).collect())
    }

    async fn count(&self) -> Result<u64> {
        let client = self.client().await?;
        self.run(
            "count packs",
            self.request_timeout,
            client
                .query_raw(&self.tables.select_count())
                .fetch_one::<u64>(),
        )
        .await
    }

    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        let (claims, mut now_ms) = self
            .fetch_lease("read the lease head", &self.tables.lease_head(name))
            .await?;
        if claims.is_empty() {
            let client = self.client().await?;
            now_ms = self
                .run(
                    "read the server clock",
                    self.request_timeout,
                    client.query_raw(&Tables::select_now()).fetch_one::<u64>(),
                )
                .await?;
        }
        Ok(LeaseHead { claims, now_ms })
    }

    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        let client = self.client().await?;
        self.run(
            "append a lease claim",
            self.request_timeout,
            client.query_raw(&self.tables.append_claim(claim)).execute(),
        )
        .await
    }

    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        Ok(self
            .fetch_lease(
                "read back lease claims",
                &self.tables.read_claims(name, term),
            )
            .await?
            .0)
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        Ok(self
            .fetch_lease("read the lease log", &self.tables.lease_log(name))
            .await?
            .0)
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
            &self.tables.insert_schema_version(version),
        )
        .await
    }

    /// Test seam: the catalog as a version-1 build made it; see
    /// [`crate::testing::create_v1`].
    pub async fn testing_create_v1(&self, rows: &[PackRow]) -> Result<()> {
        let t = &self.tables;
        self.execute("create the catalog database", &t.create_database())
            .await?;
        self.execute("create the schema-version table", &t.create_schema_table())
            .await?;
        self.execute("create the v1 packs table (test)", &t.v1_create_packs())
            .await?;
        self.execute("create the lease table", &t.create_lease())
            .await?;
        self.execute(
            "write the v1 schema-version row (test)",
            &t.insert_schema_version(1),
        )
        .await?;
        if !rows.is_empty() {
            self.execute("insert v1 rows (test)", &t.v1_insert(rows))
                .await?;
        }
        Ok(())
    }

    /// Test seam: the highest schema-version row (0: none), unchecked.
    pub async fn testing_schema_version(&self) -> Result<u32> {
        let client = &self.connect().await?.client;
        self.run(
            "read the schema version (test)",
            self.request_timeout,
            client
                .query_raw(&self.tables.select_schema_version())
                .fetch_one::<u32>(),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_responses_are_classified() {
        let s = "clickhouse://h:1/db?table_prefix=p_";
        let bad = |m: &str| {
            error_from_clickhouse(
                s,
                "count packs",
                clickhouse::error::Error::BadResponse(m.into()),
            )
        };
        let e = bad("Code: 193, e.displayText() = DB::Exception: Wrong password for user default, e.what() = DB::Exception");
        assert!(matches!(e, Error::Auth { .. }) && !e.is_retryable(), "{e}");
        assert!(e.to_string().contains(s) && e.to_string().contains("count packs"));
        let e = bad(
            "Code: 516. DB::Exception: default: Authentication failed. (AUTHENTICATION_FAILED)",
        );
        assert!(matches!(e, Error::Auth { .. }), "{e}");
        let e = bad("401 Unauthorized");
        assert!(matches!(e, Error::Auth { .. }), "{e}");
        let e = bad("Code: 115, e.displayText() = DB::Exception: Unknown setting async_insert");
        assert!(
            matches!(e, Error::UnknownSetting { .. }) && !e.is_retryable(),
            "{e}"
        );
        let e = bad("Code: 60, e.displayText() = DB::Exception: Table db.p_packs doesn't exist.");
        assert!(
            matches!(e, Error::SchemaMismatch { .. }) && !e.is_retryable(),
            "{e}"
        );
        let e = bad("Code: 252, e.displayText() = DB::Exception: Too many parts (300)");
        assert!(e.is_retryable(), "{e}");
        let e = bad("Code: 62, e.displayText() = DB::Exception: Syntax error");
        assert!(matches!(e, Error::Server { code: Some(62), .. }) && !e.is_retryable());
        let e = bad("503 Service Unavailable");
        assert!(e.is_retryable(), "{e}");
        let e = bad("<html>bad gateway</html>");
        assert!(e.is_retryable(), "{e}");
        let e = bad("404 Not Found");
        assert!(!e.is_retryable(), "{e}");
    }
}
