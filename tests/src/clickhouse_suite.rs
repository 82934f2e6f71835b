//! The ClickHouse catalog's cases against a real engine, run on two
//! (see [`clickhouse_cases!`](crate::clickhouse_cases)):
//! `tests/tests/real_clickhouse.rs` on Debian's ClickHouse 18.16 server
//! (`SPOOL_TEST_CLICKHOUSE_URL`) and `tests/tests/real_chdb.rs` on the
//! current engine (`SPOOL_TEST_CHDB_URL`: PyPI's chdb-core behind
//! ClickHouse's HTTP interface, xtask's `servers/chdb_http.py`), so every
//! kind of statement the catalog sends runs on both: the behavioural suite
//! ([`crate::catalog_suite`]), schema refusals, the migrations from every
//! older schema version, the lease log's trim. The contender processes and
//! the lease timing cases (in `serial`) run on 18.16 only. Each case works
//! in a database of its own, dropped afterwards, pass or fail ([`with_db`]).

use crate::catalog_suite::{self as suite, Fixture};
use crate::server_env;
use crate::servers::fresh_clickhouse;
use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog, Error};
use std::future::Future;
use std::sync::Arc;

/// Runs `case` on a fixture in a fresh database of the server the
/// environment variable `var` names (a `clickhouse://` URL), then drops
/// the database, also when the case panicked.
pub async fn with_db<F, Fut>(var: &str, case: F)
where
    F: FnOnce(Fixture, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(base) = server_env(var) else {
        return;
    };
    let (url, admin) = fresh_clickhouse(&base);
    let u = url.clone();
    let fx = Fixture {
        catalog: spool_catalog::open(&url).unwrap(),
        reopen: Box::new(move || spool_catalog::open(&u).unwrap()),
        url: url.clone(),
    };
    let outcome = tokio::spawn(case(fx, url.clone())).await;
    admin
        .testing_drop_database()
        .await
        .unwrap_or_else(|e| panic!("could not drop the test database of {url}: {e}"));
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The tests of one ClickHouse engine, reached through the environment
/// variable `$var`: one `#[tokio::test]` per case of the behavioural suite
/// and of this module, which between them send every kind of statement the
/// catalog makes. `clickhouse_cases!(timing $var)` adds the contender
/// processes (the calling test binary's `lease-contender`) and the lease
/// timing cases in a module `serial`: they send no statement the others do
/// not, and what they test is the lease's timing on a real server, so they
/// run on the 18.16 server only (the current engine's stand-in serialises
/// its requests, and they would double the real tier's serial chain).
#[macro_export]
macro_rules! clickhouse_cases {
    (timing $var:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn contenders_across_processes() {
            $crate::clickhouse_suite::with_db($var, |fx, url| async move {
                $crate::catalog_suite::contenders_across_processes(
                    fx,
                    &url,
                    env!("CARGO_BIN_EXE_lease-contender"),
                )
                .await
            })
            .await
        }

        mod serial {
            //! Lease timing in real seconds against the real engine.
            $crate::clickhouse_cases!(@each $var, catalog_suite:
                ttl_expiry_takeover_and_latch,
                fence_shuts_inside_the_margin,
            );
        }
    };
    ($var:expr) => {
        $crate::catalog_suite_cases!([$crate::clickhouse_cases] @each $var, catalog_suite:);
        $crate::clickhouse_cases!(@each $var, clickhouse_suite:
            server_version_is_read_and_schema_installs_on_it,
            packs_table_with_other_columns_is_refused,
            a_batch_larger_than_one_statement_is_indexed_whole,
            full_batches_across_clock_seconds_are_indexed,
            async_insert_knob_follows_the_server_version,
            a_packs_table_without_the_clock_default_gets_it,
            dyn_catalog_from_url_is_send_and_sync,
            a_version_2_catalog_is_partitioned_in_place_keeping_rows_and_the_holder,
            trimming_the_lease_log_drops_old_days_and_keeps_every_head,
        );
    };
    (@each $var:expr, catalog_suite: $($case:ident),* $(,)?) => {
        $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
           async fn $case() {
               $crate::clickhouse_suite::with_db($var, |fx, _| $crate::catalog_suite::$case(fx)).await
           } )*
    };
    (@each $var:expr, clickhouse_suite: $($case:ident),* $(,)?) => {
        $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
           async fn $case() {
               $crate::clickhouse_suite::with_db($var, $crate::clickhouse_suite::$case).await
           } )*
    };
}

/// The server's version is read, and the schema installs on it (twice:
/// the second open finds it in place).
pub async fn server_version_is_read_and_schema_installs_on_it(fx: Fixture, url: String) {
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let c = ClickHouseCatalog::new(t);
    let v = c.server_version().await.unwrap();
    assert!(
        v.split('.').next().unwrap().parse::<u32>().is_ok(),
        "version {v:?}"
    );
    fx.catalog.ensure_schema().await.unwrap();
    c.ensure_schema().await.unwrap();
    assert_eq!(c.count().await.unwrap(), 0);
}

/// A packs table with other columns is refused, naming the table, its
/// columns and the database, and stays refused for every operation.
pub async fn packs_table_with_other_columns_is_refused(_fx: Fixture, url: String) {
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let db = t.database.clone();
    let c = ClickHouseCatalog::new(t);
    c.testing_execute(&format!("CREATE DATABASE IF NOT EXISTS `{db}`"))
        .await
        .unwrap();
    c.testing_execute(&format!(
        "CREATE TABLE `{db}`.`spool_packs` (pack_id String, size UInt64) ENGINE = MergeTree() ORDER BY pack_id"
    ))
    .await
    .unwrap();
    let e = c.ensure_schema().await.unwrap_err();
    assert!(matches!(e, Error::SchemaMismatch { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("spool_packs") && msg.contains("size UInt64"),
        "{msg}"
    );
    assert!(msg.contains(&db) && !e.is_retryable(), "{msg}");
    // And it stays refused for every operation.
    let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
    assert!(matches!(e, Error::SchemaMismatch { .. }), "{e}");
}

/// A batch of more rows than one index statement holds is indexed whole,
/// unfenced and fenced.
pub async fn a_batch_larger_than_one_statement_is_indexed_whole(fx: Fixture, _url: String) {
    let rows: Vec<_> = (0..600).map(|n| suite::row(n, 1_000 + n)).collect();
    fx.catalog.index(&rows, None).await.unwrap();
    assert_eq!(fx.catalog.count().await.unwrap(), 600);
    let cfg = suite::short_lease();
    let spool_catalog::LeaseClaim::Held(g) = fx.catalog.acquire("big", "a", &cfg).await.unwrap()
    else {
        panic!("fresh name")
    };
    let more: Vec<_> = (600..900).map(|n| suite::row(n, 1_000 + n)).collect();
    fx.catalog.index(&more, Some(&g)).await.unwrap();
    assert_eq!(fx.catalog.count().await.unwrap(), 900);
}

/// Full 256-row batches back to back for 3 s, so second boundaries fall
/// inside index statements: the server clock must be read once per
/// statement (18.16 refused a `UNION ALL` whose branches read `now()` in
/// different seconds, code 171; `cargo xtask bench` found it).
pub async fn full_batches_across_clock_seconds_are_indexed(fx: Fixture, _url: String) {
    let t = std::time::Instant::now();
    let mut n = 0u64;
    while t.elapsed() < std::time::Duration::from_secs(3) {
        let rows: Vec<_> = (n..n + 256).map(|k| suite::row(k, 1_000 + k)).collect();
        fx.catalog
            .index(&rows, None)
            .await
            .unwrap_or_else(|e| panic!("batch from row {n} after {:?}: {e}", t.elapsed()));
        n += 256;
    }
    assert_eq!(fx.catalog.count().await.unwrap(), n);
}

/// `async_insert=1` asks for settings 18.16 does not have: refused at
/// connect with the server's version and the knob named, before anything
/// is written; on a server that has them (22.1 and later) the unfenced
/// index runs with them.
pub async fn async_insert_knob_follows_the_server_version(fx: Fixture, url: String) {
    let c = spool_catalog::open(&format!("{url}&async_insert=1")).unwrap();
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let version = ClickHouseCatalog::new(t).server_version().await.unwrap();
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    let rows = [suite::row(1, 1_000), suite::row(2, 2_000)];
    if major < 22 {
        let e = c.index(&rows, None).await.unwrap_err();
        assert!(
            matches!(e, Error::NotSupportedByServer { .. }) && !e.is_retryable(),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("ClickHouse {version}"))
                && msg.contains("async_insert=1")
                && msg.contains("22.1"),
            "{msg}"
        );
        assert!(matches!(
            c.ensure_schema().await.unwrap_err(),
            Error::NotSupportedByServer { .. }
        ));
        assert_eq!(fx.catalog.count().await.unwrap(), 0, "nothing was written");
    } else {
        c.index(&rows, None).await.unwrap();
        assert_eq!(fx.catalog.count().await.unwrap(), 2);
    }
}

/// A packs table made before `indexed_at_ms` had its default (the schema-2
/// DDL of earlier builds) gets it on open, keeps its rows, and rows indexed
/// afterwards carry the server clock, not 0; it gets `trailer_sha256`
/// (schema version 4) too, which its old rows read as their `sha256`.
pub async fn a_packs_table_without_the_clock_default_gets_it(fx: Fixture, url: String) {
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let db = t.database.clone();
    let c = ClickHouseCatalog::new(t);
    for sql in [
        format!("CREATE DATABASE IF NOT EXISTS `{db}`"),
        format!("CREATE TABLE `{db}`.`spool_schema_version` (version UInt32, installed_at_ms UInt64) ENGINE = MergeTree() ORDER BY version"),
        format!("INSERT INTO `{db}`.`spool_schema_version` VALUES (2, 0)"),
        format!("CREATE TABLE `{db}`.`spool_packs` (pack_id String, object_key String, store_id String, sha256 String, bytes UInt64, records UInt64, source_host String, source_pid UInt32, rank_dir String, ordinal Nullable(UInt32), created_at_ms UInt64, indexed_at_ms UInt64) ENGINE = ReplacingMergeTree(indexed_at_ms) ORDER BY pack_id"),
        format!("INSERT INTO `{db}`.`spool_packs` VALUES ('{}', 'k', 'default', '{}', 1, 1, 'h', 1, 'r0-0badcafe', NULL, 500, 777)", suite::row(1, 500).pack_id, suite::row(1, 500).sha256),
    ] {
        c.testing_execute(&sql).await.unwrap();
    }
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let r = suite::row(2, 1_000);
    fx.catalog
        .index(std::slice::from_ref(&r), None)
        .await
        .unwrap();
    let got = fx.catalog.get(&r.pack_id).await.unwrap().unwrap();
    // The server clock has whole seconds; loopback, so within a minute.
    assert!(
        got.indexed_at_ms + 60_000 > before && got.indexed_at_ms < before + 60_000,
        "indexed_at_ms {} is the server clock (client {before})",
        got.indexed_at_ms
    );
    let old = fx.catalog.get(&suite::row(1, 500).pack_id).await.unwrap();
    let old = old.expect("old rows kept");
    assert_eq!(old.indexed_at_ms, 777, "old rows kept as they were");
    // the column version 4 added reads as the old row's sha256 (then
    // the trailer's checksum); a new row keeps both hashes apart
    assert_eq!(old.trailer_sha256, old.sha256);
    assert!(!old.whole_sha256() && got.whole_sha256(), "{got:?}");
    assert_eq!(got.trailer_sha256, r.trailer_sha256);
    // Opening again changes nothing and still stamps the clock.
    let again = (fx.reopen)();
    let r3 = suite::row(3, 1_500);
    again.index(std::slice::from_ref(&r3), None).await.unwrap();
    assert!(again.get(&r3.pack_id).await.unwrap().unwrap().indexed_at_ms > 0);
}

/// The catalog `open` returns is a `Send + Sync` trait object.
pub async fn dyn_catalog_from_url_is_send_and_sync(fx: Fixture, _url: String) {
    let c: Arc<dyn Catalog> = fx.catalog.clone();
    let h = tokio::spawn(async move { c.count().await.unwrap() });
    assert_eq!(h.await.unwrap(), 0);
}

/// The frozen DDL of schema version 2 (unpartitioned tables), for the
/// migration test.
fn v2_catalog(db: &str) -> Vec<String> {
    vec![
        format!("CREATE DATABASE IF NOT EXISTS `{db}`"),
        format!("CREATE TABLE `{db}`.`spool_schema_version` (version UInt32, installed_at_ms UInt64) ENGINE = MergeTree() ORDER BY version"),
        format!("CREATE TABLE `{db}`.`spool_packs` (pack_id String, object_key String, store_id String, sha256 String, bytes UInt64, records UInt64, source_host String, source_pid UInt32, rank_dir String, ordinal Nullable(UInt32), created_at_ms UInt64, indexed_at_ms UInt64 DEFAULT toUInt64(now()) * 1000) ENGINE = ReplacingMergeTree(indexed_at_ms) ORDER BY pack_id"),
        format!("CREATE TABLE `{db}`.`spool_lease` (name String, term UInt64, lease_id UUID, holder String, acquired_at_ms UInt64, expires_at_ms UInt64) ENGINE = MergeTree() ORDER BY (name, term, lease_id)"),
        format!("INSERT INTO `{db}`.`spool_schema_version` (version, installed_at_ms) SELECT 2, toUInt64(now()) * 1000"),
    ]
}

/// A version-2 catalog (unpartitioned tables, packs over several days, a
/// live lease holder with a long log) is migrated in place by the first
/// open: both tables come out partitioned by day, every pack row reads
/// back, the holder still holds (its renewal goes on at the next term, a
/// rival is told it is busy), the old tables stay beside them, and a
/// second open changes nothing.
pub async fn a_version_2_catalog_is_partitioned_in_place_keeping_rows_and_the_holder(
    _fx: Fixture,
    url: String,
) {
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let db = t.database.clone();
    let admin = ClickHouseCatalog::new(t);
    for sql in v2_catalog(&db) {
        admin.testing_execute(&sql).await.unwrap();
    }
    // Three days of packs, two rows for one of them (a re-index).
    let day = 86_400_000u64;
    let rows: Vec<_> = (0..6)
        .map(|n| suite::row(n, 1_795_000_000_000 + (n % 3) * day))
        .collect();
    let old = spool_catalog::open(&url).unwrap();
    // Written as a version-2 build would: plain VALUES into the old table.
    for r in rows.iter().chain([&rows[0]]) {
        admin
            .testing_execute(&format!(
                "INSERT INTO `{db}`.`spool_packs` (pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms) VALUES ('{}', '{}', 'default', '{}', {}, {}, 'h', 1, 'r0-0badcafe', NULL, {})",
                r.pack_id, r.object_key, r.sha256, r.bytes, r.records, r.created_at_ms
            ))
            .await
            .unwrap();
    }
    // A holder with a long log: terms 1..=40, the head live for a minute.
    let id = "0e3c1a52-6e7a-4c1e-9a7e-1b2c3d4e5f60";
    admin
        .testing_execute(&format!(
            "INSERT INTO `{db}`.`spool_lease` SELECT 'k/node1', number + 1, toUUID('{id}'), 'node1 pid 1', toUInt64(now()) * 1000 - 1000 * (40 - number), if(number = 39, toUInt64(now()) * 1000 + 60000, 0) FROM system.numbers LIMIT 40"
        ))
        .await
        .unwrap();
    old.ensure_schema().await.unwrap();
    let tables = crate::servers::clickhouse_sql(
        &url,
        &format!("SELECT name, partition_key FROM system.tables WHERE database = '{db}' ORDER BY name FORMAT TSV"),
    );
    assert_eq!(
        tables,
        "spool_lease\tintDiv(acquired_at_ms, 86400000)\nspool_lease_unpartitioned\t\nspool_packs\tintDiv(created_at_ms, 86400000)\nspool_packs_unpartitioned\t\nspool_schema_version\t\n"
    );
    assert_eq!(old.count().await.unwrap(), 6);
    for r in &rows {
        let got = old.get(&r.pack_id).await.unwrap().unwrap();
        assert_eq!(
            (&got.sha256, got.created_at_ms),
            (&r.sha256, r.created_at_ms)
        );
    }
    assert_eq!(old.list_range(0, u64::MAX).await.unwrap().len(), 6);
    let parts = crate::servers::clickhouse_sql(
        &url,
        &format!("SELECT count(DISTINCT partition) FROM system.parts WHERE database = '{db}' AND table = 'spool_packs' AND active FORMAT TSV"),
    );
    assert_eq!(parts.trim(), "3", "one partition per day");
    // The head came over: the holder is still live, a rival is busy.
    let head = old.read_lease_head("k/node1").await.unwrap();
    assert_eq!(head.term(), 40);
    assert_eq!(
        head.live_holder().map(|h| h.holder.as_str()),
        Some("node1 pid 1")
    );
    let rival = old
        .acquire("k/node1", "node2 pid 2", &suite::short_lease())
        .await
        .unwrap();
    assert!(
        matches!(rival, spool_catalog::LeaseClaim::Busy { term: 40, .. }),
        "{rival:?}"
    );
    assert_eq!(
        spool_catalog::testing::schema_version(&url).await.unwrap(),
        spool_catalog::SCHEMA_VERSION
    );
    // A second open (another process) changes nothing.
    let again = spool_catalog::open(&url).unwrap();
    again.ensure_schema().await.unwrap();
    assert_eq!(again.count().await.unwrap(), 6);
    assert_eq!(again.read_lease_head("k/node1").await.unwrap().term(), 40);
}

/// The lease log is bounded: days older than yesterday are dropped, but
/// never a name's head term (an idle name's head is carried into today as
/// a tombstone, so the next claim goes on from it); recent days and live
/// holdings are untouched; a trim with nothing old does nothing.
pub async fn trimming_the_lease_log_drops_old_days_and_keeps_every_head(fx: Fixture, url: String) {
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let db = t.database.clone();
    let c = &fx.catalog;
    c.ensure_schema().await.unwrap();
    assert_eq!(c.trim_lease_log().await.unwrap(), 0, "nothing old yet");
    let admin = ClickHouseCatalog::new(t);
    let day = 86_400_000u64;
    // "idle": terms 1..=5, five and four days ago, never since.
    // "busy": terms 1..=3 three days ago, 4 yesterday, 5 live now.
    let claim = |name: &str, term: u64, ago_ms: u64, ttl_ms: u64| {
        format!(
            "INSERT INTO `{db}`.`spool_lease` SELECT '{name}', {term}, generateUUIDv4(), '{name} pid {term}', toUInt64(now()) * 1000 - {ago_ms}, toUInt64(now()) * 1000 - {ago_ms} + {ttl_ms}"
        )
    };
    for (name, term, ago) in [
        ("idle", 1, 5 * day),
        ("idle", 2, 5 * day),
        ("idle", 3, 4 * day),
        ("idle", 4, 4 * day),
        ("idle", 5, 4 * day),
        ("busy", 1, 3 * day),
        ("busy", 2, 3 * day),
        ("busy", 3, 3 * day),
        ("busy", 4, day), // yesterday at this very time, whatever the hour
    ] {
        admin
            .testing_execute(&claim(name, term, ago, 30_000))
            .await
            .unwrap();
    }
    let busy = c
        .acquire("busy", "busy pid 5", &suite::short_lease())
        .await
        .unwrap();
    let spool_catalog::LeaseClaim::Held(g) = busy else {
        panic!("{busy:?}")
    };
    assert_eq!(g.term, 5);
    let dropped = c.trim_lease_log().await.unwrap();
    assert!(
        (3..=4).contains(&dropped),
        "days 5, 4 and 3 back (and 2 when yesterday is more than a day back): {dropped}"
    );
    let busy_log: Vec<u64> = c
        .lease_log("busy")
        .await
        .unwrap()
        .iter()
        .map(|r| r.term)
        .collect();
    assert_eq!(busy_log, vec![4, 5], "yesterday and today stay");
    let idle_log = c.lease_log("idle").await.unwrap();
    assert_eq!(idle_log.len(), 1, "{idle_log:?}");
    assert_eq!(idle_log[0].term, 5, "the head term was carried");
    assert_eq!(
        idle_log[0].expires_at_ms, idle_log[0].acquired_at_ms,
        "as a tombstone"
    );
    // The holding is untouched: its renewal and its fence go on.
    let spool_catalog::LeaseClaim::Held(g2) = c.renew(&g).await.unwrap() else {
        panic!("renewal after the trim")
    };
    assert_eq!(g2.term, 6);
    c.index(&[suite::row(1, 1_000)], Some(&g2)).await.unwrap();
    // The idle name's next claim goes on from its head.
    let next = c
        .acquire("idle", "new pid 9", &suite::short_lease())
        .await
        .unwrap();
    assert!(
        matches!(next, spool_catalog::LeaseClaim::Held(ref h) if h.term == 6),
        "{next:?}"
    );
    assert_eq!(
        c.trim_lease_log().await.unwrap(),
        0,
        "a second trim finds nothing old"
    );
}
