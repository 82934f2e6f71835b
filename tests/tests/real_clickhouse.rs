//! spool-catalog against the real ClickHouse server `cargo xtask test`
//! starts (`SPOOL_TEST_CLICKHOUSE_URL`): the behavioural suite, contender
//! processes, schema refusals, and the lease timing cases in `serial`.
//! Each test works in its own database and drops it afterwards, pass or fail.
#![forbid(unsafe_code)]

use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog, Error};
use spool_tests::catalog_suite::{self as suite, Fixture};
use spool_tests::server_env;
use spool_tests::servers::fresh_clickhouse;
use std::future::Future;
use std::sync::Arc;

/// Runs `case` on a fixture in its own database, then drops the database,
/// also when the case panicked.
async fn with_db<F, Fut>(case: F)
where
    F: FnOnce(Fixture, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(base) = server_env("SPOOL_TEST_CLICKHOUSE_URL") else {
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

macro_rules! suite_cases {
    ($($case:ident),* $(,)?) => {
        $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
           async fn $case() { with_db(|fx, _| suite::$case(fx)).await } )*
    };
}

suite_cases!(
    index_get_list_count,
    reindex_reads_one_row,
    lease_lifecycle,
    fence_and_reacquire,
    contested_term_has_at_most_one_holder,
    newer_schema_version_refused,
    migration_from_v1_keeps_rows,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_across_processes() {
    with_db(|fx, url| async move {
        suite::contenders_across_processes(fx, &url, env!("CARGO_BIN_EXE_lease-contender")).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_version_is_read_and_schema_installs_on_it() {
    with_db(|fx, url| async move {
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
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packs_table_with_other_columns_is_refused() {
    with_db(|_fx, url| async move {
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
        assert!(msg.contains("spool_packs") && msg.contains("size UInt64"), "{msg}");
        assert!(msg.contains(&db) && !e.is_retryable(), "{msg}");
        // And it stays refused for every operation.
        let e = c.index(&[suite::row(1, 1)], None).await.unwrap_err();
        assert!(matches!(e, Error::SchemaMismatch { .. }), "{e}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_one_statement_is_indexed_whole() {
    with_db(|fx, _| async move {
        let rows: Vec<_> = (0..600).map(|n| suite::row(n, 1_000 + n)).collect();
        fx.catalog.index(&rows, None).await.unwrap();
        assert_eq!(fx.catalog.count().await.unwrap(), 600);
        let cfg = suite::short_lease();
        let spool_catalog::LeaseClaim::Held(g) =
            fx.catalog.acquire("big", "a", &cfg).await.unwrap()
        else {
            panic!("fresh name")
        };
        let more: Vec<_> = (600..900).map(|n| suite::row(n, 1_000 + n)).collect();
        fx.catalog.index(&more, Some(&g)).await.unwrap();
        assert_eq!(fx.catalog.count().await.unwrap(), 900);
    })
    .await
}

/// Full 256-row batches back to back for 3 s, so second boundaries fall
/// inside index statements: the server clock must be read once per
/// statement (18.16 refused a `UNION ALL` whose branches read `now()` in
/// different seconds, code 171; `cargo xtask bench` found it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_batches_across_clock_seconds_are_indexed() {
    with_db(|fx, _| async move {
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
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dyn_catalog_from_url_is_send_and_sync() {
    with_db(|fx, _| async move {
        let c: Arc<dyn Catalog> = fx.catalog.clone();
        let h = tokio::spawn(async move { c.count().await.unwrap() });
        assert_eq!(h.await.unwrap(), 0);
    })
    .await
}

mod serial {
    //! Lease timing in real seconds against the real server.
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ttl_expiry_takeover_and_latch() {
        with_db(|fx, _| suite::ttl_expiry_takeover_and_latch(fx)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fence_shuts_inside_the_margin() {
        with_db(|fx, _| suite::fence_shuts_inside_the_margin(fx)).await
    }
}
