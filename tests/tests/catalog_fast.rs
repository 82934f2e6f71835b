//! spool-catalog in the fast tier: the behavioural suite on the in-memory
//! fake and on SQLite, wiremock playing ClickHouse (exception bodies, auth
//! failures, 5xx, a stall), a closed port, two contender processes on
//! SQLite, and the lease timing cases in `serial`.
#![forbid(unsafe_code)]

use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog, Error, MemoryCatalog};
use spool_tests::catalog_suite::{self as suite, Fixture};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn memory() -> Fixture {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "fast-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let url = format!("memory://{name}");
    let catalog = spool_catalog::open(&url).unwrap();
    let u = url.clone();
    Fixture {
        catalog,
        reopen: Box::new(move || spool_catalog::open(&u).unwrap()),
        url,
    }
}

fn sqlite() -> (Fixture, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/catalog.db", dir.path().display());
    let catalog = spool_catalog::open(&url).unwrap();
    let u = url.clone();
    (
        Fixture {
            catalog,
            reopen: Box::new(move || spool_catalog::open(&u).unwrap()),
            url: url.clone(),
        },
        dir,
        url,
    )
}

macro_rules! both {
    ($($case:ident),* $(,)?) => {
        mod on_memory {
            use super::*;
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { suite::$case(memory()).await } )*
        }
        mod on_sqlite {
            use super::*;
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { let (fx, _dir, _) = sqlite(); suite::$case(fx).await } )*
        }
    };
}

spool_tests::catalog_suite_cases!([both]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_across_processes_on_sqlite() {
    let (fx, _dir, url) = sqlite();
    suite::contenders_across_processes(fx, &url, env!("CARGO_BIN_EXE_lease-contender")).await;
}

#[tokio::test]
async fn sqlite_table_with_other_columns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    {
        // Somebody else's table under our name.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE spool_packs (pack_id TEXT PRIMARY KEY, size INTEGER)")
            .unwrap();
    }
    let cat = spool_catalog::open(&format!("sqlite://{}", path.display())).unwrap();
    let e = cat.ensure_schema().await.unwrap_err();
    assert!(matches!(e, Error::SchemaMismatch { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("spool_packs") && msg.contains("size INTEGER") && msg.contains("table_prefix"),
        "{msg}"
    );
    // Nothing of ours was left half-installed: no version row.
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'spool_schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0, "the refused install rolled back");
}

#[tokio::test]
async fn sqlite_in_a_missing_directory_says_so() {
    let e = spool_catalog::open("sqlite:///nonexistent-dir-for-spool/c.db")
        .unwrap()
        .count()
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("/nonexistent-dir-for-spool does not exist"),
        "{e}"
    );
}

#[tokio::test]
async fn memory_catalog_switched_off_is_retryable_and_writes_nothing() {
    let m = Arc::new(MemoryCatalog::new());
    let c: Arc<dyn Catalog> = m.clone();
    m.set_reachable(false);
    let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
    assert!(
        matches!(e, Error::Unreachable { .. }) && e.is_retryable(),
        "{e}"
    );
    m.set_reachable(true);
    assert_eq!(c.count().await.unwrap(), 0);
}

#[tokio::test]
async fn memory_clock_moves_the_lease() {
    let m = Arc::new(MemoryCatalog::new());
    let c: Arc<dyn Catalog> = m.clone();
    let cfg = suite::short_lease();
    let spool_catalog::LeaseClaim::Held(g) = c.acquire("n", "a", &cfg).await.unwrap() else {
        panic!("fresh name")
    };
    m.advance_clock(Duration::from_millis(4500));
    assert!(matches!(
        c.index(&[suite::row(1, 1)], Some(&g)).await.unwrap_err(),
        Error::Fenced { .. }
    ));
    m.advance_clock(Duration::from_secs(2));
    assert!(matches!(
        c.acquire("n", "b", &cfg).await.unwrap(),
        spool_catalog::LeaseClaim::Held(_)
    ));
}

#[test]
fn memory_url_needs_no_server_and_other_schemes_are_refused() {
    assert!(spool_catalog::open("memory://").is_ok());
    let e = spool_catalog::open("postgres://h/db").err().unwrap();
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e}");
}

mod clickhouse_faults {
    //! wiremock playing ClickHouse: what a real server cannot be made to do.
    use super::*;
    use wiremock::matchers::{body_string_contains, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    fn catalog_for(server: &MockServer, creds: &str) -> ClickHouseCatalog {
        let addr = server.address();
        let url = format!(
            "clickhouse://{creds}{}:{}/spooldb?table_prefix=t_",
            addr.ip(),
            addr.port()
        );
        let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
            unreachable!()
        };
        ClickHouseCatalog::new(t).with_request_timeout(Duration::from_millis(800))
    }

    /// `SELECT version()` answered in RowBinary: a LEB128 length, the bytes.
    fn version_answer(v: &str) -> ResponseTemplate {
        let mut body = vec![v.len() as u8];
        body.extend_from_slice(v.as_bytes());
        ResponseTemplate::new(200).set_body_bytes(body)
    }

    #[tokio::test]
    async fn old_server_wrong_password() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(500).set_body_string(
                "Code: 193, e.displayText() = DB::Exception: Wrong password for user default, e.what() = DB::Exception\n",
            ))
            .mount(&server)
            .await;
        let c = catalog_for(&server, "default:hunter2@");
        let e = c.count().await.unwrap_err();
        assert!(matches!(e, Error::Auth { .. }) && !e.is_retryable(), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("{}", server.address().port())),
            "{msg}"
        );
        assert!(msg.contains("read the server version"), "{msg}");
        assert!(msg.contains("password= in the catalog URL"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }

    #[tokio::test]
    async fn new_server_authentication_failed_401() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(401)
                    .insert_header("X-ClickHouse-Exception-Code", "516")
                    .set_body_string("Code: 516. DB::Exception: bob: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED) (version 24.8.1.1)\n"),
            )
            .mount(&server)
            .await;
        let e = catalog_for(&server, "bob:pw@")
            .ensure_schema()
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Auth { .. }) && !e.is_retryable(), "{e}");
    }

    #[tokio::test]
    async fn exception_mid_install_names_the_statement() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT version()"))
            .respond_with(version_answer("18.16.1"))
            .mount(&server)
            .await;
        // No table yet (an empty RowBinary answer).
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.tables"))
            .respond_with(ResponseTemplate::new(200))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("CREATE DATABASE"))
            .respond_with(ResponseTemplate::new(500).set_body_string(
                "Code: 497, e.displayText() = DB::Exception: default: Not enough privileges to execute CREATE DATABASE\n",
            ))
            .mount(&server)
            .await;
        let c = catalog_for(&server, "");
        assert_eq!(c.server_version().await.unwrap(), "18.16.1");
        let e = c.ensure_schema().await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Server {
                    code: Some(497),
                    retryable: false,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("create the catalog database"), "{e}");
    }

    #[tokio::test]
    async fn unknown_setting_is_not_retryable() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(500).set_body_string(
                "Code: 115, e.displayText() = DB::Exception: Unknown setting max_query_size_x, e.what() = DB::Exception\n",
            ))
            .mount(&server)
            .await;
        let e = catalog_for(&server, "").count().await.unwrap_err();
        assert!(
            matches!(e, Error::UnknownSetting { .. }) && !e.is_retryable(),
            "{e}"
        );
        assert!(e.to_string().contains("not supported"), "{e}");
    }

    #[tokio::test]
    async fn bare_503_and_a_stall_are_retryable() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(503))
            .mount(&server)
            .await;
        let e = catalog_for(&server, "").count().await.unwrap_err();
        assert!(e.is_retryable(), "{e}");

        let slow = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(version_answer("18.16.1").set_delay(Duration::from_secs(5)))
            .mount(&slow)
            .await;
        let started = std::time::Instant::now();
        let e = catalog_for(&slow, "").count().await.unwrap_err();
        assert!(
            matches!(e, Error::Timeout { .. }) && e.is_retryable(),
            "{e}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    /// A RowBinary string: LEB128 length, bytes.
    fn rb_string(out: &mut Vec<u8>, s: &str) {
        let mut n = s.len();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// The `system.columns` answer of a catalog as this spool makes it.
    fn columns_answer() -> Vec<u8> {
        let mut cols = Vec::new();
        let packs = [
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
        let lease = [
            ("name", "String"),
            ("term", "UInt64"),
            ("lease_id", "UUID"),
            ("holder", "String"),
            ("acquired_at_ms", "UInt64"),
            ("expires_at_ms", "UInt64"),
        ];
        for (table, list) in [("t_packs", &packs[..]), ("t_lease", &lease[..])] {
            for (name, ty) in list {
                let (kind, expr) = if *name == "indexed_at_ms" {
                    ("DEFAULT", "toUInt64(now()) * 1000")
                } else {
                    ("", "")
                };
                for s in [table, name, ty, kind, expr] {
                    rb_string(&mut cols, s);
                }
            }
        }
        cols
    }

    /// On a server new enough (22.x), `async_insert=1` sends the unfenced
    /// index insert with `async_insert=1` and `wait_for_async_insert=1`;
    /// a fenced one (an `INSERT ... SELECT`, which async inserts do not
    /// cover) and every other statement go without them. On 18.16 the knob
    /// is refused at connect, naming the version and the knob.
    #[tokio::test]
    async fn async_insert_settings_are_sent_only_where_they_exist() {
        use wiremock::matchers::query_param;
        let server = catalog_in_place("22.3.1.1", true, 0, false).await;
        Mock::given(method("POST"))
            .and(body_string_contains(
                "INSERT INTO `spooldb`.`t_packs` (pack_id",
            ))
            .and(query_param("async_insert", "1"))
            .and(query_param("wait_for_async_insert", "1"))
            .respond_with(ResponseTemplate::new(200))
            .expect(1)
            .named("the unfenced insert, with the async settings")
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(query_param("async_insert", "1"))
            .respond_with(ResponseTemplate::new(500).set_body_string(
                "Code: 62. DB::Exception: async_insert sent with a statement it does not apply to",
            ))
            .with_priority(6)
            .mount(&server)
            .await;
        let addr = server.address();
        let url = format!(
            "clickhouse://{}:{}/spooldb?table_prefix=t_&async_insert=1",
            addr.ip(),
            addr.port()
        );
        let c = spool_catalog::open(&url).unwrap();
        c.index(&[suite::row(1, 1), suite::row(2, 2)], None)
            .await
            .unwrap();
        server.verify().await;

        let old = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT version()"))
            .respond_with(version_answer("18.16.1"))
            .mount(&old)
            .await;
        let url = format!(
            "clickhouse://{}:{}/spooldb?async_insert=true",
            old.address().ip(),
            old.address().port()
        );
        let e = spool_catalog::open(&url)
            .unwrap()
            .index(&[suite::row(1, 1)], None)
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::NotSupportedByServer { .. }) && !e.is_retryable(),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("ClickHouse 18.16.1") && msg.contains("async_insert=1"),
            "{msg}"
        );
        let requests = old.received_requests().await.unwrap();
        assert_eq!(requests.len(), 1, "only the version was asked");
    }

    /// A mock of a catalog as this spool makes it, in place: `version`,
    /// whether `system.settings` has `insert_quorum_parallel`, the replicas
    /// `system.clusters` counts, the tables' engines (`Replicated` prefixed
    /// or not). Every other statement succeeds.
    async fn catalog_in_place(
        version: &str,
        has_quorum_parallel: bool,
        replicas: u64,
        replicated: bool,
    ) -> MockServer {
        let server = MockServer::start().await;
        let u64_answer =
            |n: u64| ResponseTemplate::new(200).set_body_bytes(n.to_le_bytes().to_vec());
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT version()"))
            .respond_with(version_answer(version))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.settings"))
            .respond_with(u64_answer(u64::from(has_quorum_parallel)))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.clusters"))
            .respond_with(u64_answer(replicas))
            .mount(&server)
            .await;
        let engine = |e: &str| {
            if replicated {
                format!("Replicated{e}")
            } else {
                e.to_string()
            }
        };
        let mut tables = Vec::new();
        for (name, e, key) in [
            (
                "t_lease",
                engine("MergeTree"),
                "intDiv(acquired_at_ms, 86400000)",
            ),
            (
                "t_packs",
                engine("ReplacingMergeTree"),
                "intDiv(created_at_ms, 86400000)",
            ),
            ("t_schema_version", engine("MergeTree"), ""),
        ] {
            for s in [name, &e, key] {
                rb_string(&mut tables, s);
            }
        }
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.tables"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(tables))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT max(version)"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_bytes(spool_catalog::SCHEMA_VERSION.to_le_bytes().to_vec()),
            )
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.columns"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(columns_answer()))
            .mount(&server)
            .await;
        // As every release does: a setting the server lacks is refused.
        if !has_quorum_parallel {
            Mock::given(method("POST"))
                .and(wiremock::matchers::query_param("insert_quorum_parallel", "0"))
                .respond_with(ResponseTemplate::new(500).set_body_string(
                    "Code: 115, e.displayText() = DB::Exception: Unknown setting insert_quorum_parallel, e.what() = DB::Exception\n",
                ))
                .with_priority(1)
                .mount(&server)
                .await;
        }
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200))
            .with_priority(10)
            .mount(&server)
            .await;
        server
    }

    fn url_of(server: &MockServer, params: &str) -> String {
        let a = server.address();
        format!(
            "clickhouse://u:hunter2@{}:{}/spooldb?table_prefix=t_{params}",
            a.ip(),
            a.port()
        )
    }

    /// The settings (HTTP query parameters) sent with each statement whose
    /// text starts with `INSERT`.
    async fn insert_settings(
        server: &MockServer,
    ) -> Vec<std::collections::BTreeMap<String, String>> {
        server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| {
                String::from_utf8_lossy(&r.body).starts_with("INSERT")
                    || r.url
                        .query_pairs()
                        .any(|(k, v)| k == "query" && v.starts_with("INSERT"))
            })
            .map(|r| {
                r.url
                    .query_pairs()
                    .filter(|(k, _)| k != "query")
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .collect()
    }

    /// A replicated catalog's quorum inserts (index rows, a lease claim, a
    /// fenced index insert) carry `insert_quorum` on every release and
    /// `insert_quorum_parallel=0` exactly where `system.settings` has it:
    /// a current release (which enables it by default) gets it, 18.16
    /// (which refuses it) never does.
    #[tokio::test]
    async fn quorum_inserts_disable_parallel_quorum_where_the_server_has_it() {
        for (version, has_it) in [("18.16.1", false), ("22.8.21.38", true)] {
            let server = catalog_in_place(version, has_it, 3, true).await;
            let c = spool_catalog::open(&url_of(&server, "&cluster=spool_cluster")).unwrap();
            c.index(&[suite::row(1, 1)], None).await.unwrap();
            let sent = insert_settings(&server).await;
            assert_eq!(sent.len(), 1, "{version}: {sent:?}");
            for s in &sent {
                assert_eq!(
                    s.get("insert_quorum").map(String::as_str),
                    Some("2"),
                    "{version}: {s:?}"
                );
                let parallel = s.get("insert_quorum_parallel").map(String::as_str);
                assert_eq!(parallel, has_it.then_some("0"), "{version}: {s:?}");
            }
            // Asked once, at connect, of the one replica.
            let asked = server
                .received_requests()
                .await
                .unwrap()
                .iter()
                .filter(|r| String::from_utf8_lossy(&r.body).contains("FROM system.settings"))
                .count();
            assert_eq!(asked, 1, "{version}");
        }
    }

    /// The statements of the lease carry each generation's settings too:
    /// a claim's append is a quorum insert (`insert_quorum_parallel=0`
    /// exactly where the server has the setting), the head read and the
    /// read-back of a term's claims ask `select_sequential_consistency=1`,
    /// and a fenced index insert asks both, on 18.16 and on a current
    /// release alike.
    #[tokio::test]
    async fn lease_statements_carry_each_generations_settings() {
        for (version, has_it) in [("18.16.1", false), ("22.8.21.38", true)] {
            let server = catalog_in_place(version, has_it, 3, true).await;
            let c = spool_catalog::open(&url_of(&server, "&cluster=spool_cluster")).unwrap();
            let claim = spool_catalog::NewClaim {
                name: "node-a".into(),
                term: 7,
                lease_id: uuid::Uuid::from_u128(7),
                holder: "h".into(),
                ttl_ms: 30_000,
            };
            c.append_claim(&claim).await.unwrap();
            // the answers are empty: only what was asked matters here
            let _ = c.read_lease_head("node-a").await;
            let _ = c.read_claims("node-a", 7).await;
            let guard = spool_catalog::LeaseGuard {
                name: "node-a".into(),
                lease_id: claim.lease_id,
                holder: "h".into(),
                acquired_term: 7,
                term: 7,
                expires_at_ms: u64::MAX,
                config: spool_catalog::LeaseConfig::default(),
                claimed_at: tokio::time::Instant::now(),
            };
            c.index(&[suite::row(1, 1)], Some(&guard)).await.unwrap();
            let sent = statements_and_settings(&server).await;
            let of = |needle: &str| -> Vec<&std::collections::BTreeMap<String, String>> {
                sent.iter()
                    .filter(|(q, _)| q.contains(needle))
                    .map(|(_, s)| s)
                    .collect()
            };
            let quorum = |s: &std::collections::BTreeMap<String, String>| {
                s.get("insert_quorum").map(String::as_str) == Some("2")
                    && s.get("insert_quorum_parallel").map(String::as_str) == has_it.then_some("0")
            };
            let consistent = |s: &std::collections::BTreeMap<String, String>| {
                s.get("select_sequential_consistency").map(String::as_str) == Some("1")
            };
            let appends = of("INSERT INTO `spooldb`.`t_lease`");
            assert_eq!(appends.len(), 1, "{version}: {sent:?}");
            assert!(appends.iter().all(|s| quorum(s)), "{version}: {appends:?}");
            let reads: Vec<_> = sent
                .iter()
                .filter(|(q, _)| q.starts_with("SELECT") && q.contains("FROM `spooldb`.`t_lease`"))
                .map(|(_, s)| s)
                .collect();
            assert!(reads.len() >= 2, "{version}: {sent:?}");
            assert!(reads.iter().all(|s| consistent(s)), "{version}: {reads:?}");
            let fenced = of("INSERT INTO `spooldb`.`t_packs`");
            assert_eq!(fenced.len(), 1, "{version}: {sent:?}");
            assert!(
                fenced.iter().all(|s| quorum(s) && consistent(s)),
                "{version}: {fenced:?}"
            );
        }
    }

    /// Each statement's text and its settings (HTTP query parameters).
    async fn statements_and_settings(
        server: &MockServer,
    ) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
        server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| {
                let mut settings = std::collections::BTreeMap::new();
                let mut query = String::from_utf8_lossy(&r.body).into_owned();
                for (k, v) in r.url.query_pairs() {
                    if k == "query" {
                        query = format!("{v}{query}");
                    } else {
                        settings.insert(k.into_owned(), v.into_owned());
                    }
                }
                (query, settings)
            })
            .collect()
    }

    /// One server's catalog (no cluster) sends no quorum settings at all,
    /// and never asks `system.settings`.
    #[tokio::test]
    async fn one_server_sends_no_quorum_settings() {
        let server = catalog_in_place("22.8.21.38", true, 0, false).await;
        let c = spool_catalog::open(&url_of(&server, "")).unwrap();
        c.index(&[suite::row(1, 1)], None).await.unwrap();
        let sent = insert_settings(&server).await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(
            !sent[0].keys().any(|k| k.starts_with("insert_quorum")),
            "{sent:?}"
        );
    }

    /// A clustered and a one-server spool never share tables: replicated
    /// tables without `catalog.cluster` are refused, as are plain tables
    /// with it, each naming the setting; nothing is inserted.
    #[tokio::test]
    async fn clustered_and_one_server_spools_never_share_tables() {
        let server = catalog_in_place("18.16.1", false, 3, true).await;
        let c = spool_catalog::open(&url_of(&server, "")).unwrap();
        let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
        assert!(
            matches!(e, Error::ReplicatedWithoutCluster { .. }) && !e.is_retryable(),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("catalog.cluster is not set")
                && msg.contains("table t_packs is ReplicatedReplacingMergeTree"),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");
        assert!(insert_settings(&server).await.is_empty());

        let server = catalog_in_place("18.16.1", false, 3, false).await;
        let c = spool_catalog::open(&url_of(&server, "&cluster=spool_cluster")).unwrap();
        let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
        assert!(matches!(e, Error::NotReplicated { .. }), "{e}");
        assert!(e.to_string().contains("unset catalog.cluster"), "{e}");
        assert!(insert_settings(&server).await.is_empty());
    }

    /// A quorum that is not a majority of the cluster's replicas, more
    /// than it has, or a cluster the server does not know is refused at
    /// the schema check, naming the numbers; nothing is inserted.
    #[tokio::test]
    async fn a_quorum_below_a_majority_is_refused() {
        for (replicas, quorum, ok, needle) in [
            (3, 2, true, ""),
            (2, 2, true, ""),
            (5, 3, true, ""),
            (4, 2, false, "insert_quorum=2 is not a majority of the 4 replicas of cluster spool_cluster (it must be more than 4/2); raise insert_quorum in the catalog URL to at least 3"),
            (5, 2, false, "at least 3"),
            (2, 3, false, "insert_quorum=3 is more than the 2 replicas"),
            (0, 2, false, "the cluster spool_cluster (catalog.cluster) is not in the server's system.clusters"),
        ] {
            let server = catalog_in_place("18.16.1", false, replicas, true).await;
            let url = url_of(&server, &format!("&cluster=spool_cluster&insert_quorum={quorum}"));
            let done = spool_catalog::open(&url).unwrap().index(&[suite::row(1, 1)], None).await;
            match (ok, done) {
                (true, Ok(())) => {}
                (false, Err(e)) => {
                    assert!(!e.is_retryable() && e.to_string().contains(needle), "{replicas}/{quorum}: {e}");
                    assert!(insert_settings(&server).await.is_empty());
                }
                (_, other) => panic!("{replicas} replicas, quorum {quorum}: {other:?}"),
            }
        }
    }

    /// A hostile server's exception body (ANSI escapes, a forged log line
    /// after a newline, megabytes, the URL's password echoed back, raw
    /// and percent-encoded) reaches spool's error escaped, bounded and
    /// masked; it is still classified by its code.
    #[tokio::test]
    async fn a_hostile_exception_body_is_escaped_bounded_and_masked() {
        let server = MockServer::start().await;
        let body = format!(
            "Code: 241, e.displayText() = DB::Exception: Memory limit for p@ss:w0rd (p%40ss%3Aw0rd)\x1b[2J\x1b[31m\n2026-12-06T07:00:00Z INFO spool: catalog healthy{}",
            "A".repeat(4 << 20)
        );
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(500).set_body_string(body.clone()))
            .mount(&server)
            .await;
        let e = catalog_for(&server, "bob:p%40ss%3Aw0rd@")
            .count()
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Server {
                    code: Some(241),
                    ..
                }
            ) && e.is_retryable(),
            "{e}"
        );
        let msg = e.to_string();
        assert!(!msg.contains("w0rd"), "{msg}");
        assert!(!msg.contains(['\x1b', '\n', '\r']), "{msg}");
        assert!(
            msg.contains("\\u{1b}[2J\\u{1b}[31m\\n2026-12-06T07:00:00Z INFO"),
            "{msg}"
        );
        assert!(msg.contains(&format!("… ({} bytes)", body.len())), "{msg}");
        assert!(msg.len() < 1024, "{} bytes", msg.len());
    }

    #[tokio::test]
    async fn closed_port_is_unreachable_and_retryable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let c = spool_catalog::open(&format!("clickhouse://127.0.0.1:{port}/db")).unwrap();
        let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
        assert!(
            matches!(e, Error::Unreachable { .. }) && e.is_retryable(),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("127.0.0.1:{port}")) && msg.contains("will retry"),
            "{msg}"
        );
    }
}

mod serial {
    //! Lease timing in real seconds, generous margins.
    use super::*;

    /// The SQLite and the in-memory catalog side by side: the scenario
    /// mostly waits out TTLs, so the two share the serial group's time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ttl_expiry_takeover_and_latch_on_sqlite_and_memory() {
        let (fx, _dir, _) = sqlite();
        tokio::join!(
            suite::ttl_expiry_takeover_and_latch(fx),
            suite::ttl_expiry_takeover_and_latch(memory())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fence_shuts_inside_the_margin_on_sqlite() {
        let (fx, _dir, _) = sqlite();
        suite::fence_shuts_inside_the_margin(fx).await;
    }
}
