//! The production catalog: ClickHouse over HTTP with the `clickhouse` crate.
//! The schema and its migrations are in `clickhouse/schema.rs`.

mod schema;

use crate::error::{Error, Result};
use crate::lease::{LeaseGuard, LeaseHead, LeaseRecord, NewClaim};
use crate::redact::foreign_text;
use crate::row::{check_pack_id, PackRow};
use crate::sql::{Tables, DAY_MS, FENCE_SHUT_CODE, QUORUM_PARALLEL};
use crate::target::ClickHouseTarget;
use crate::{Catalog, CatalogCounters, MAX_KEYS_PER_STATEMENT, MAX_ROWS_PER_STATEMENT};
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

use crate::catalog::DEFAULT_REQUEST_TIMEOUT;

/// The first major version whose HTTP interface serves
/// `RowBinaryWithNamesAndTypes` well enough for the crate's validation.
const VALIDATION_FROM_MAJOR: u32 = 23;

/// The first major version with the `async_insert` and
/// `wait_for_async_insert` settings this crate relies on.
const ASYNC_INSERT_FROM_MAJOR: u32 = 22;

/// How long a request waits for its answer before the replica is named in
/// a warning (once per replica per minute, `spool_core::throttle`): a
/// replica that accepts and does not answer is otherwise silent for the
/// whole request timeout, at start too (the version read).
const SLOW_NOTICE: Duration = Duration::from_secs(2);

/// ClickHouse exception codes that mean "the credentials were refused".
const AUTH_CODES: &[u32] = &[192, 193, 194, 195, 516];
/// Codes that mean the tables are not what this build expects.
const SCHEMA_CODES: &[u32] = &[10, 16, 47, 53, 60, 81];
/// Codes worth retrying: timeouts, overload, network, parts pressure, and
/// a replicated catalog's passing states (no ZooKeeper, a read-only
/// replica, too few live replicas for the quorum, an earlier quorum write
/// not yet satisfied, a replica not in the quorum).
const RETRYABLE_CODES: &[u32] = &[
    3, 159, 160, 164, 202, 203, 209, 210, 225, 241, 242, 252, 285, 286, 289, 319, 394, 425, 999,
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

/// One object and the bytes of the packs whose current row names it.
#[derive(clickhouse::Row, serde::Deserialize)]
struct ReferencedRow {
    object_key: String,
    total: u64,
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
    trailer_sha256: String,
    object_offset: u64,
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
            trailer_sha256: r.trailer_sha256,
            object_offset: r.object_offset,
            ordinal: r.ordinal,
            created_at_ms: r.created_at_ms,
            indexed_at_ms: r.indexed_at_ms,
        }
    }
}

/// A replica's client once its version was read (validation on from 23.x).
struct Connected {
    client: clickhouse::Client,
    /// Whether the replica has the setting `insert_quorum_parallel` (asked
    /// of `system.settings` on a cluster; `false` on one server, where no
    /// quorum is asked for).
    quorum_parallel: bool,
}

/// One server of the URL: its client and, once read, its version.
struct Replica {
    base: clickhouse::Client,
    /// `HOST:PORT`, for messages.
    label: String,
    connected: OnceCell<Connected>,
    /// Its "no answer yet" warnings ([`SLOW_NOTICE`]).
    slow: Quiet,
    /// Its "failed; trying the next one" warnings.
    failed: Quiet,
}

/// A warning that can come back on every request, shown at most once per
/// [`QUIET_FOR`] (the rule spool-core's `throttle` keeps for the spool's
/// warnings; this crate links no spool crate): [`Quiet::admit`] says
/// whether to show it now at `warn` and how many were not shown since, the
/// caller logs the rest at `debug`.
#[derive(Debug, Default)]
struct Quiet {
    last: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
}

/// How long a replica's repeated warning stays quiet after it was shown.
const QUIET_FOR: Duration = Duration::from_secs(60);

impl Quiet {
    /// `Some(unshown)` when the warning is shown now, `None` while it was
    /// shown less than [`QUIET_FOR`] ago.
    fn admit(&self) -> Option<u64> {
        let now = std::time::Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &mut *last {
            Some((at, unshown)) if now.duration_since(*at) < QUIET_FOR => {
                *unshown += 1;
                None
            }
            other => {
                let unshown = other.map_or(0, |(_, n)| n);
                *other = Some((now, 0));
                Some(unshown)
            }
        }
    }
}

/// What a statement needs of a replicated catalog (nothing on one
/// server): the settings travel as HTTP query parameters, the only way
/// 18.16 takes them on an `INSERT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A plain read (the pack index, the schema, the clock).
    Plain,
    /// An insert confirmed only once `insert_quorum` replicas have it
    /// (`insert_quorum`, `insert_quorum_timeout`).
    Quorum,
    /// A read that decides a lease claim: it sees every row written with
    /// the quorum, and fails on a replica that lacks one
    /// (`select_sequential_consistency=1`).
    Consistent,
    /// A fenced insert: a quorum insert whose fence reads consistently.
    QuorumConsistent,
    /// DDL `ON CLUSTER`: waits for the replicas at most the request timeout
    /// (`distributed_ddl_task_timeout`).
    Ddl,
}

/// `UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE`: a quorum insert arrived while
/// an earlier quorum insert into the same table (anyone's) still waits for
/// its quorum. Contention, not a failure: retried on the same replica
/// (crate docs, "Quorum contention").
pub const QUORUM_CONTENTION_CODE: u32 = 286;

/// The first pause before a statement answered [`QUORUM_CONTENTION_CODE`]
/// is sent again; each further pause doubles, up to
/// [`CONTENTION_MAX_PAUSE`], and each is drawn between half and the whole
/// of its step (jitter: writers that met one pending quorum do not all
/// come back together).
pub const CONTENTION_FIRST_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause between two tries of a statement answered
/// [`QUORUM_CONTENTION_CODE`].
pub const CONTENTION_MAX_PAUSE: Duration = Duration::from_millis(400);

/// Whether `e` is a replica's answer that an earlier quorum insert is not
/// satisfied yet ([`QUORUM_CONTENTION_CODE`]).
fn is_contention(e: &Error) -> bool {
    matches!(
        e,
        Error::Server {
            code: Some(QUORUM_CONTENTION_CODE),
            ..
        }
    )
}

/// The pause after the `tries`-th contention answer (1-based): the
/// doubling step, jittered down to no less than half of it.
fn contention_pause(tries: u32) -> Duration {
    let step = CONTENTION_FIRST_PAUSE
        .saturating_mul(1 << tries.saturating_sub(1).min(8))
        .min(CONTENTION_MAX_PAUSE);
    // any random bits do: a fresh v4 UUID's
    let r = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    step / 2 + step / 2 * r / 1000
}

/// ClickHouse exception codes after which another replica may do better:
/// the network, ZooKeeper, a read-only (detached from ZooKeeper) replica,
/// one that lacks a part the quorum has.
const REPLICA_CODES: &[u32] = &[209, 210, 225, 242, 289, 999];

/// Whether `e`, from one replica, is worth trying the next one for.
fn fails_over(e: &Error) -> bool {
    match e {
        Error::Unreachable { .. } | Error::Timeout { .. } | Error::Protocol { .. } => true,
        Error::Server {
            code: None,
            retryable,
            ..
        } => *retryable,
        Error::Server { code: Some(c), .. } => REPLICA_CODES.contains(c),
        _ => false,
    }
}

/// Moves the catalog's preferred replica past `index` unless the attempt
/// on it was marked done: a request cut by its caller's deadline (a
/// stalled replica) leaves the next request to the next replica.
struct Attempt<'a> {
    preferred: &'a AtomicUsize,
    index: usize,
    replicas: usize,
    done: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.preferred.compare_exchange(
                self.index,
                (self.index + 1) % self.replicas,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }
}

/// A ClickHouse catalog (`clickhouse://HOST:PORT[,HOST:PORT...]/DATABASE?...`).
pub struct ClickHouseCatalog {
    target: ClickHouseTarget,
    tables: Tables,
    replicas: Vec<Replica>,
    /// The replica tried first (the last one that answered).
    preferred: AtomicUsize,
    request_timeout: Duration,
    /// Opened to read only: the schema is verified, never created or
    /// migrated ([`crate::open_existing`]).
    read_only: bool,
    schema_ok: OnceCell<()>,
    /// Contention answers ([`QUORUM_CONTENTION_CODE`]) received, and
    /// statements that gave up on one at the end of their budget.
    contention: AtomicU64,
    contention_gave_up: AtomicU64,
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

/// Maps the crate's error to ours, naming the server and the purpose. The
/// server's own words (and the transport's) go in as [`foreign_text`]:
/// escaped, bounded, `secrets` masked.
pub(crate) fn error_from_clickhouse(
    server: &str,
    purpose: &'static str,
    secrets: &[&str],
    e: clickhouse::error::Error,
) -> Error {
    use clickhouse::error::Error as E;
    let server = server.to_string();
    let foreign = |text: &str| foreign_text(text.trim(), secrets);
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
                detail: foreign(&detail),
            }
        }
        E::BadResponse(message) => {
            let (code, status) = parse_bad_response(&message);
            let message = foreign(&message);
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
            detail: foreign(&other.to_string()),
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
        let replicas = target
            .http_urls()
            .into_iter()
            .zip(&target.hosts)
            .map(|(url, (h, p))| {
                let mut base = clickhouse::Client::with_http_client(http.clone())
                    .with_url(url)
                    .with_validation(false)
                    // Index statements carry their rows as SQL text.
                    .with_setting("max_query_size", (16 << 20).to_string());
                if let Some(u) = &target.user {
                    base = base.with_user(u.clone());
                }
                if let Some(p) = &target.password {
                    base = base.with_password(p.clone());
                }
                Replica {
                    base,
                    label: format!("{h}:{p}"),
                    connected: OnceCell::new(),
                    slow: Quiet::default(),
                    failed: Quiet::default(),
                }
            })
            .collect();
        let tables = Tables {
            database: target.database.clone(),
            prefix: target.table_prefix.clone(),
            cluster: target.cluster.clone(),
        };
        ClickHouseCatalog {
            target,
            tables,
            replicas,
            preferred: AtomicUsize::new(0),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            read_only: false,
            schema_ok: OnceCell::new(),
            contention: AtomicU64::new(0),
            contention_gave_up: AtomicU64::new(0),
        }
    }

    /// The same catalog with another per-request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same catalog opened to read only: a missing database or table is
    /// [`Error::NoCatalog`], an older schema is refused, nothing is created
    /// or migrated.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The version of the server that answers (`SELECT version()`).
    pub async fn server_version(&self) -> Result<String> {
        self.fetch_one("read the server version", Mode::Plain, "SELECT version()")
            .await
    }

    /// What no text from a server may show: the URL's password.
    fn secrets(&self) -> Vec<&str> {
        self.target.password.as_deref().into_iter().collect()
    }

    /// The server as errors name it: the catalog, and the replica when the
    /// URL names several.
    fn server_of(&self, r: &Replica) -> String {
        if self.replicas.len() > 1 {
            format!("{} (replica {})", self.target.redacted(), r.label)
        } else {
            self.target.redacted()
        }
    }

    /// Runs one request on one replica under the timeout, classifying
    /// failures.
    async fn run<T>(
        &self,
        r: &Replica,
        purpose: &'static str,
        timeout: Duration,
        fut: impl Future<Output = clickhouse::error::Result<T>>,
    ) -> Result<T> {
        let mut fut = std::pin::pin!(fut);
        let mut left = timeout;
        // A server that accepts and does not answer is named once it is
        // late, not only when the timeout runs out (see `SLOW_NOTICE`).
        if timeout > SLOW_NOTICE {
            left = timeout - SLOW_NOTICE;
            if let Ok(answer) = tokio::time::timeout(SLOW_NOTICE, &mut fut).await {
                return self.answered(r, purpose, timeout, answer);
            }
            let then = if self.replicas.len() > 1 {
                "then tries the next replica"
            } else {
                "then gives up on this request"
            };
            let server = self.server_of(r);
            let msg = format!(
                "no answer yet to \"{purpose}\" after {SLOW_NOTICE:?}: waits up to {timeout:?} in all, {then}"
            );
            match r.slow.admit() {
                Some(unshown) => tracing::warn!(unshown, %server, "{msg}"),
                None => tracing::debug!(%server, "{msg}"),
            }
        }
        match tokio::time::timeout(left, fut).await {
            Ok(answer) => self.answered(r, purpose, timeout, answer),
            Err(_) => Err(Error::Timeout {
                server: self.server_of(r),
                purpose,
                after: timeout,
            }),
        }
    }

    /// A replica's answer as this crate's result.
    fn answered<T>(
        &self,
        r: &Replica,
        purpose: &'static str,
        timeout: Duration,
        answer: clickhouse::error::Result<T>,
    ) -> Result<T> {
        answer.map_err(|e| {
            match error_from_clickhouse(&self.server_of(r), purpose, &self.secrets(), e) {
                Error::Timeout {
                    server, purpose, ..
                } => Error::Timeout {
                    server,
                    purpose,
                    after: timeout,
                },
                other => other,
            }
        })
    }

    /// The replica's client, its version read (and checked) on first use.
    async fn connect<'r>(&self, r: &'r Replica) -> Result<&'r Connected> {
        r.connected
            .get_or_try_init(|| async {
                let version: String = self
                    .run(
                        r,
                        "read the server version",
                        self.request_timeout,
                        r.base.query_raw("SELECT version()").fetch_one::<String>(),
                    )
                    .await?;
                let major: u32 = version
                    .split('.')
                    .next()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(0);
                if self.target.async_insert && major < ASYNC_INSERT_FROM_MAJOR {
                    return Err(Error::NotSupportedByServer {
                        server: self.server_of(r),
                        version,
                        knob: "async_insert=1",
                        feature: "asynchronous inserts (settings async_insert, wait_for_async_insert)",
                        since: "22.1",
                    });
                }
                let validation = major >= VALIDATION_FROM_MAJOR;
                // Asked of the server rather than decided by its version:
                // the setting's presence is what the server accepts, on
                // every build (backports, vendors' builds) alike.
                let quorum_parallel = match self.target.cluster {
                    None => false,
                    Some(_) => {
                        let found: u64 = self
                            .run(
                                r,
                                "ask the server for the setting insert_quorum_parallel",
                                self.request_timeout,
                                r.base
                                    .query_raw(&Tables::select_has_quorum_parallel())
                                    .fetch_one::<u64>(),
                            )
                            .await?;
                        found > 0
                    }
                };
                tracing::debug!(server = %self.server_of(r), %version, validation, quorum_parallel, "connected to ClickHouse");
                Ok(Connected {
                    client: r.base.clone().with_validation(validation),
                    quorum_parallel,
                })
            })
            .await
    }

    /// The replica's client with the settings `mode` needs on a cluster
    /// ([`Self::mode_settings`]).
    fn with_mode(&self, connected: &Connected, mode: Mode) -> clickhouse::Client {
        self.mode_settings(connected.quorum_parallel, mode)
            .into_iter()
            .fold(connected.client.clone(), |c, (name, value)| {
                c.with_setting(name, value)
            })
    }

    /// The settings a request in `mode` carries on a cluster (none on one
    /// server): a quorum insert also sends `insert_quorum_parallel=0` where
    /// the replica has that setting (`quorum_parallel`: sequential
    /// consistency holds only for quorum inserts that do not overlap), and
    /// never where it has not.
    fn mode_settings(&self, quorum_parallel: bool, mode: Mode) -> Vec<(&'static str, String)> {
        if self.target.cluster.is_none() {
            return Vec::new();
        }
        let mut quorum = Vec::new();
        if quorum_parallel {
            quorum.push((QUORUM_PARALLEL, "0".to_string()));
        }
        quorum.push(("insert_quorum", self.target.insert_quorum.to_string()));
        // The server gives up a second before the client would, so the
        // answer names the quorum (code 319), not a timeout.
        quorum.push((
            "insert_quorum_timeout",
            self.request_timeout
                .saturating_sub(Duration::from_secs(1))
                .max(Duration::from_secs(1))
                .as_millis()
                .to_string(),
        ));
        let consistent = ("select_sequential_consistency", "1".to_string());
        match mode {
            Mode::Plain => Vec::new(),
            Mode::Quorum => quorum,
            Mode::Consistent => vec![consistent],
            Mode::QuorumConsistent => {
                quorum.push(consistent);
                quorum
            }
            Mode::Ddl => vec![(
                "distributed_ddl_task_timeout",
                self.request_timeout.as_secs().max(1).to_string(),
            )],
        }
    }

    /// Runs `f` on the preferred replica; when it refuses, stalls past the
    /// request timeout or answers that it cannot serve ([`fails_over`]),
    /// on the next one, each at most once: at most one request timeout per
    /// replica. The replica that answers becomes the preferred one.
    async fn on_replicas<T, F, Fut>(&self, purpose: &'static str, mode: Mode, f: F) -> Result<T>
    where
        F: Fn(clickhouse::Client) -> Fut,
        Fut: Future<Output = clickhouse::error::Result<T>>,
    {
        self.on_replicas_within(purpose, mode, self.request_timeout, f)
            .await
    }

    /// [`Self::on_replicas`] with another bound on each request.
    async fn on_replicas_within<T, F, Fut>(
        &self,
        purpose: &'static str,
        mode: Mode,
        timeout: Duration,
        f: F,
    ) -> Result<T>
    where
        F: Fn(clickhouse::Client) -> Fut,
        Fut: Future<Output = clickhouse::error::Result<T>>,
    {
        let n = self.replicas.len();
        let start = self.preferred.load(Ordering::SeqCst) % n;
        let mut last = None;
        for k in 0..n {
            let index = (start + k) % n;
            let r = &self.replicas[index];
            let mut attempt = Attempt {
                preferred: &self.preferred,
                index,
                replicas: n,
                done: false,
            };
            let answer = self.on_replica(r, purpose, mode, timeout, &f).await;
            match answer {
                Ok(v) => {
                    attempt.done = true;
                    if k > 0 {
                        self.preferred.store(index, Ordering::SeqCst);
                        tracing::info!(server = %self.server_of(r), "failed over to this replica");
                    }
                    return Ok(v);
                }
                Err(e) if n > 1 && fails_over(&e) => {
                    match r.failed.admit() {
                        Some(unshown) => {
                            tracing::warn!(unshown, error = %e, "replica failed; trying the next one")
                        }
                        None => tracing::debug!(error = %e, "replica failed; trying the next one"),
                    }
                    last = Some(e);
                }
                Err(e) => {
                    attempt.done = true;
                    return Err(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Unreachable {
            server: self.target.redacted(),
            purpose,
            detail: "no replica".into(),
        }))
    }

    /// Runs `f` on replica `r` within `budget`; a contention answer
    /// ([`QUORUM_CONTENTION_CODE`]) is tried again on the same replica
    /// after a jittered pause ([`contention_pause`]) while the next try
    /// still starts within the budget, every try bounded by what is left
    /// of it; past that the answer is returned as is (retryable).
    async fn on_replica<T, F, Fut>(
        &self,
        r: &Replica,
        purpose: &'static str,
        mode: Mode,
        budget: Duration,
        f: &F,
    ) -> Result<T>
    where
        F: Fn(clickhouse::Client) -> Fut,
        Fut: Future<Output = clickhouse::error::Result<T>>,
    {
        let deadline = Instant::now() + budget;
        let mut tries = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match self.connect(r).await {
                Ok(c) => self.run(r, purpose, left, f(self.with_mode(c, mode))).await,
                Err(e) => Err(e),
            };
            match answer {
                Err(e) if is_contention(&e) => {
                    self.contention.fetch_add(1, Ordering::Relaxed);
                    tries += 1;
                    let pause = contention_pause(tries);
                    if Instant::now() + pause >= deadline {
                        self.contention_gave_up.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, tries, "an earlier quorum insert stayed unsatisfied for the whole budget");
                        return Err(e);
                    }
                    tracing::debug!(server = %self.server_of(r), tries, ?pause, "quorum contention; trying again");
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    /// Runs one statement that returns nothing.
    async fn execute(&self, purpose: &'static str, mode: Mode, sql: &str) -> Result<()> {
        self.on_replicas(purpose, mode, |c| async move {
            c.query_raw(sql).execute().await
        })
        .await
    }

    /// Runs one query and reads every row.
    async fn fetch_all<R>(&self, purpose: &'static str, mode: Mode, sql: &str) -> Result<Vec<R>>
    where
        R: clickhouse::RowOwned + clickhouse::RowRead,
    {
        self.on_replicas(purpose, mode, |c| async move {
            c.query_raw(sql).fetch_all::<R>().await
        })
        .await
    }

    /// Runs one query and reads its one row.
    async fn fetch_one<R>(&self, purpose: &'static str, mode: Mode, sql: &str) -> Result<R>
    where
        R: clickhouse::RowOwned + clickhouse::RowRead,
    {
        self.on_replicas(purpose, mode, |c| async move {
            c.query_raw(sql).fetch_one::<R>().await
        })
        .await
    }

    async fn ready(&self) -> Result<()> {
        self.schema_ok
            .get_or_try_init(|| self.install_or_verify())
            .await
            .map(|_| ())
    }

    async fn fetch_lease(
        &self,
        purpose: &'static str,
        mode: Mode,
        sql: &str,
    ) -> Result<(Vec<LeaseRecord>, u64)> {
        self.ready().await?;
        let rows: Vec<LeaseRow> = self.fetch_all(purpose, mode, sql).await?;
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

    /// Test seam: drops the whole database this catalog lives in (on every
    /// replica of its cluster).
    #[cfg(any(test, feature = "testing"))]
    pub async fn testing_drop_database(&self) -> Result<()> {
        let on_cluster = self
            .target
            .cluster
            .as_ref()
            .map_or_else(String::new, |c| format!(" ON CLUSTER {c}"));
        let sql = format!(
            "DROP DATABASE IF EXISTS `{}`{on_cluster}",
            self.target.database
        );
        self.execute("drop the test database", Mode::Ddl, &sql)
            .await
    }

    /// Test seam: runs one insert as is, with the cluster's quorum.
    #[cfg(any(test, feature = "testing"))]
    pub async fn testing_execute_with_quorum(&self, sql: &str) -> Result<()> {
        self.execute("run a test insert with the quorum", Mode::Quorum, sql)
            .await
    }

    /// Test seam: runs one statement as is.
    #[cfg(any(test, feature = "testing"))]
    pub async fn testing_execute(&self, sql: &str) -> Result<()> {
        self.execute("run a test statement", Mode::Plain, sql).await
    }

    /// Test seam: every statement this catalog sends, once each with
    /// sample arguments (see [`crate::testing::clickhouse_statements`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn testing_statements(&self) -> Vec<(&'static str, String)> {
        self.tables.every_statement()
    }

    /// Test seam: the unfenced index statement this catalog sends for
    /// `rows` (see [`crate::testing::clickhouse_index_statement`]).
    #[cfg(any(test, feature = "testing"))]
    pub fn testing_index_statement(&self, rows: &[PackRow]) -> String {
        self.tables.index_values(rows)
    }

    /// Test seam: every setting this catalog's requests carry on its
    /// cluster, over all kinds of request, on a server that has
    /// `insert_quorum_parallel` (none on one server).
    #[cfg(any(test, feature = "testing"))]
    pub fn testing_cluster_settings(&self) -> Vec<(&'static str, String)> {
        let mut all: Vec<(&'static str, String)> = Vec::new();
        for mode in [
            Mode::Plain,
            Mode::Quorum,
            Mode::Consistent,
            Mode::QuorumConsistent,
            Mode::Ddl,
        ] {
            for s in self.mode_settings(true, mode) {
                if !all.contains(&s) {
                    all.push(s);
                }
            }
        }
        all
    }
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
        self.ready().await?;
        for chunk in statements(rows) {
            match fence {
                None => {
                    let sql = self.tables.index_values(chunk);
                    let async_insert = self.target.async_insert;
                    self.on_replicas("index packs", Mode::Quorum, |c| {
                        let sql = &sql;
                        async move {
                            let mut q = c.query_raw(sql);
                            if async_insert {
                                q = q
                                    .with_setting("async_insert", "1")
                                    .with_setting("wait_for_async_insert", "1");
                            }
                            q.execute().await
                        }
                    })
                    .await?;
                }
                Some(g) => {
                    let sql = self.tables.index_fenced(chunk, g);
                    let done = self
                        .on_replicas_within(
                            "index packs (fenced)",
                            Mode::QuorumConsistent,
                            g.config.fence_margin,
                            |c| {
                                let sql = &sql;
                                async move { c.query_raw(sql).execute().await }
                            },
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
        self.ready().await?;
        let rows: Vec<ChPackRow> = self
            .fetch_all(
                "read a pack row",
                Mode::Plain,
                &self.tables.select_pack(pack_id),
            )
            .await?;
        Ok(rows.into_iter().next().map(PackRow::from))
    }

    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        self.ready().await?;
        let rows: Vec<ChPackRow> = self
            .fetch_all(
                "list pack rows by time",
                Mode::Plain,
                &self.tables.select_range(from_ms, to_ms),
            )
            .await?;
        Ok(rows.into_iter().map(PackRow::from).collect())
    }

    async fn count(&self) -> Result<u64> {
        self.ready().await?;
        self.fetch_one("count packs", Mode::Plain, &self.tables.select_count())
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
        self.ready().await?;
        let mut out = HashMap::new();
        for chunk in keys.chunks(MAX_KEYS_PER_STATEMENT) {
            // Consistent on a cluster (nothing more on one server): a
            // replica that lacks a confirmed row would call its object
            // unreferenced (see the trait's docs).
            let rows: Vec<ReferencedRow> = self
                .fetch_all(
                    "read referenced bytes",
                    Mode::Consistent,
                    &self.tables.referenced_bytes(chunk),
                )
                .await?;
            // The statement also answers objects its keys' packs moved to;
            // their totals cover only those packs, so only the chunk's own
            // keys are kept (another chunk answers the rest whole).
            let asked: HashSet<&str> = chunk.iter().map(String::as_str).collect();
            for r in rows {
                if asked.contains(r.object_key.as_str()) {
                    out.insert(r.object_key, r.total);
                }
            }
        }
        Ok(out)
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
        self.ready().await?;
        let mut out = HashMap::new();
        for chunk in ids.chunks(MAX_KEYS_PER_STATEMENT) {
            // Consistent on a cluster, as `referenced_bytes`: a replica
            // lacking a confirmed row would call its pack unindexed.
            let rows: Vec<ChPackRow> = self
                .fetch_all(
                    "read current pack rows",
                    Mode::Consistent,
                    &self.tables.select_packs(chunk),
                )
                .await?;
            for r in rows {
                let row = PackRow::from(r);
                out.insert(row.pack_id.clone(), row);
            }
        }
        Ok(out)
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        let (claims, mut now_ms) = self
            .fetch_lease(
                "read the lease head",
                Mode::Consistent,
                &self.tables.lease_head(name),
            )
            .await?;
        if claims.is_empty() {
            now_ms = self
                .fetch_one("read the server clock", Mode::Plain, &Tables::select_now())
                .await?;
        }
        Ok(LeaseHead { claims, now_ms })
    }

    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        self.ready().await?;
        self.execute(
            "append a lease claim",
            Mode::Quorum,
            &self.tables.append_claim(claim),
        )
        .await
    }

    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        Ok(self
            .fetch_lease(
                "read back lease claims",
                Mode::Consistent,
                &self.tables.read_claims(name, term),
            )
            .await?
            .0)
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        Ok(self
            .fetch_lease(
                "read the lease log",
                Mode::Plain,
                &self.tables.lease_log(name),
            )
            .await?
            .0)
    }

    async fn trim_lease_log(&self) -> Result<u64> {
        self.trim_lease_days().await
    }

    fn counters(&self) -> CatalogCounters {
        CatalogCounters {
            quorum_contention: self.contention.load(Ordering::Relaxed),
            quorum_contention_gave_up: self.contention_gave_up.load(Ordering::Relaxed),
        }
    }
}

/// Most days (partitions) one index statement touches: the server refuses
/// an insert block over `max_partitions_per_insert_block` (100).
const MAX_DAYS_PER_STATEMENT: usize = 64;

/// Splits rows into index statements of at most
/// [`MAX_ROWS_PER_STATEMENT`] rows and [`MAX_DAYS_PER_STATEMENT`] creation
/// days, in order.
fn statements(rows: &[PackRow]) -> Vec<&[PackRow]> {
    let mut out = Vec::new();
    let (mut start, mut days) = (0, BTreeSet::new());
    for (i, r) in rows.iter().enumerate() {
        let day = r.created_at_ms / DAY_MS;
        if i - start == MAX_ROWS_PER_STATEMENT
            || (!days.contains(&day) && days.len() == MAX_DAYS_PER_STATEMENT)
        {
            out.push(&rows[start..i]);
            start = i;
            days.clear();
        }
        days.insert(day);
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

#[cfg(test)]
mod tests;
