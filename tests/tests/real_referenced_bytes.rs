//! `Catalog::referenced_bytes` against the real servers `cargo xtask test`
//! starts: the case of `referenced_bytes/case.rs` on Debian's ClickHouse
//! 18.16 (`SPOOL_TEST_CLICKHOUSE_URL`), on the current engine
//! (`SPOOL_TEST_CHDB_URL`) and on the replicated catalog (three 18.16
//! replicas); and on the replicated catalog, a replica that lacks a
//! confirmed row refuses the read rather than calling its object
//! unreferenced. Each test works in its own database and drops it
//! afterwards, pass or fail. The replicated ones run in `serial`, as
//! every test of the shared replicas does.
#![forbid(unsafe_code)]

#[path = "referenced_bytes/case.rs"]
mod case;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_clickhouse_18_16() {
    spool_tests::clickhouse_suite::with_db("SPOOL_TEST_CLICKHOUSE_URL", |fx, _| async move {
        case::referenced_bytes_follows_the_current_row(&*fx.catalog).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_current_engine() {
    spool_tests::clickhouse_suite::with_db("SPOOL_TEST_CHDB_URL", |fx, _| async move {
        case::referenced_bytes_follows_the_current_row(&*fx.catalog).await
    })
    .await
}

mod serial {
    //! On the shared replicas, one test at a time.
    use super::case;
    use spool_catalog::PackRow;
    use spool_tests::servers::{clickhouse_sql, Replicas};
    use std::time::Duration;

    /// Heals the replicas and drops the test database when a test ends,
    /// pass or fail.
    struct Cleanup<'a> {
        replicas: &'a Replicas,
        admin: spool_catalog::ClickHouseCatalog,
        rt: tokio::runtime::Runtime,
    }

    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let healed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.replicas.heal()));
            if healed.is_err() {
                eprintln!("could not heal the replicas");
                return;
            }
            if let Err(e) = self.rt.block_on(self.admin.testing_drop_database()) {
                eprintln!("could not drop the test database: {e}");
            }
        }
    }

    fn setup(replicas: &Replicas) -> (String, Cleanup<'_>) {
        replicas.heal();
        let (url, admin) = replicas.fresh();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        (
            url,
            Cleanup {
                replicas,
                admin,
                rt,
            },
        )
    }

    #[test]
    fn on_the_replicated_catalog() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let c = spool_catalog::open(&url).unwrap();
        cleanup
            .rt
            .block_on(case::referenced_bytes_follows_the_current_row(&*c));
    }

    /// Replica 3 stops fetching the packs table, so it never gets the row
    /// indexed (with the quorum) through the others. Read there, a plain
    /// read would answer that the row's object is unreferenced, and a
    /// sweep would delete a live pack's bytes: the read must fail instead
    /// (`select_sequential_consistency`), and through every replica it
    /// answers the object.
    #[test]
    fn a_replica_that_lacks_a_confirmed_row_refuses_the_read() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let rt = &cleanup.rt;
        let all = spool_catalog::open_with_timeout(&url, Duration::from_secs(5)).unwrap();
        rt.block_on(all.ensure_schema()).unwrap();
        let lagging = replicas.only(&url, 2);
        let behind = spool_catalog::open_with_timeout(&lagging, Duration::from_secs(5)).unwrap();
        rt.block_on(behind.ensure_schema()).unwrap();
        let db = spool_catalog::CatalogUrl::parse(&url)
            .unwrap()
            .database()
            .to_string();
        clickhouse_sql(
            &lagging,
            &format!("SYSTEM STOP FETCHES `{db}`.`spool_packs`"),
        );
        // fetching again before the cleanup heals (pass or fail): a replica
        // with fetches stopped never comes back healthy
        let _fetching = StartFetches(
            lagging.clone(),
            format!("SYSTEM START FETCHES `{db}`.`spool_packs`"),
        );
        let key = "pre/bundle-1.pack".to_string();
        let row = PackRow {
            object_key: key.clone(),
            ..spool_tests::catalog_suite::row(1, 1_795_000_000_001)
        };
        rt.block_on(all.index(std::slice::from_ref(&row), None))
            .unwrap();
        let got = rt.block_on(behind.referenced_bytes(std::slice::from_ref(&key)));
        assert!(
            got.is_err(),
            "a replica without the confirmed row answered {got:?}"
        );
        let got = rt
            .block_on(all.referenced_bytes(std::slice::from_ref(&key)))
            .unwrap();
        assert_eq!(got.get(&key), Some(&row.bytes), "{got:?}");
    }

    /// Sends its statement (`SYSTEM START FETCHES ...`) to its replica when
    /// dropped.
    struct StartFetches(String, String);

    impl Drop for StartFetches {
        fn drop(&mut self) {
            if let Err(e) = spool_tests::servers::try_clickhouse_sql(&self.0, &self.1) {
                eprintln!("could not start fetches again: {e}");
            }
        }
    }
}
