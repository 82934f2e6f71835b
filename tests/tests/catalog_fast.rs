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

both!(
    index_get_list_count,
    hostile_text_round_trips,
    reindex_reads_one_row,
    lease_lifecycle,
    fence_and_reacquire,
    contested_term_has_at_most_one_holder,
    newer_schema_version_refused,
    migration_from_v1_keeps_rows,
);

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

    /// On a server new enough (22.x), `async_insert=1` sends the unfenced
    /// index insert with `async_insert=1` and `wait_for_async_insert=1`;
    /// a fenced one (an `INSERT ... SELECT`, which async inserts do not
    /// cover) and every other statement go without them. On 18.16 the knob
    /// is refused at connect, naming the version and the knob.
    #[tokio::test]
    async fn async_insert_settings_are_sent_only_where_they_exist() {
        use wiremock::matchers::query_param;
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT version()"))
            .respond_with(version_answer("22.3.1.1"))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_string_contains("SELECT max(version)"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(2u32.to_le_bytes().to_vec()))
            .mount(&server)
            .await;
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
        Mock::given(method("POST"))
            .and(body_string_contains("FROM system.columns"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(cols))
            .mount(&server)
            .await;
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
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200))
            .with_priority(10)
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
