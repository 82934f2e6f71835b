//! The replicated catalog against the three ClickHouse 18.16 replicas and
//! ZooKeeper that `cargo xtask test` starts (`SPOOL_TEST_CLICKHOUSE_REPLICAS`,
//! `_CLUSTER`, `_REPLICA_CONFIGS`): tables created `ON CLUSTER` as
//! replicated; indexing with any one replica killed, and no confirmed row
//! lost when one dies; `spool run --once` adopting and draining with a
//! replica killed; with two down an insert fails and a lease claim
//! fails closed; a claim through a replica that lags fails closed; the
//! URL's failover past a host that refuses or stalls; the lease surviving
//! its trim, and a catalog wedged by a dropped day repaired; an insert
//! behind an unsatisfied quorum (code 286) waiting within its budget. The tests
//! kill and stall the shared replicas, so they run one at a time (module
//! `serial`); each heals the replicas and drops its database, pass or fail.
#![forbid(unsafe_code)]

use spool_catalog::{LeaseClaim, PackRow};
use spool_tests::catalog_suite as suite;
use spool_tests::servers::{clickhouse_sql, try_clickhouse_sql, Replicas};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Heals the replicas and drops the test database on every replica when a
/// test ends, pass or fail.
struct Cleanup<'a> {
    replicas: &'a Replicas,
    admin: spool_catalog::ClickHouseCatalog,
    rt: tokio::runtime::Runtime,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // never a second panic while a failed test unwinds
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The replicas (healed), a fresh database's URL, and its cleanup.
fn setup(replicas: &Replicas) -> (String, Cleanup<'_>) {
    replicas.heal();
    let (url, admin) = replicas.fresh();
    (
        url,
        Cleanup {
            replicas,
            admin,
            rt: runtime(),
        },
    )
}

/// `count` rows created at distinct times from `from`.
fn rows(from: u64, count: u64) -> Vec<PackRow> {
    (from..from + count)
        .map(|n| suite::row(n, 1_795_000_000_000 + n))
        .collect()
}

/// The database a catalog URL names.
fn database_of(url: &str) -> String {
    spool_catalog::CatalogUrl::parse(url)
        .unwrap()
        .database()
        .to_string()
}

/// The pack ids replica `i` holds (its own rows, no quorum asked).
fn ids_on(replicas: &Replicas, url: &str, i: usize) -> Option<Vec<String>> {
    let db = database_of(url);
    match try_clickhouse_sql(
        &replicas.only(url, i),
        &format!("SELECT DISTINCT pack_id FROM `{db}`.`spool_packs` ORDER BY pack_id FORMAT TSV"),
    ) {
        Ok((200, body)) => Some(body.lines().map(str::to_string).collect()),
        _ => None,
    }
}

mod serial {
    use super::*;

    /// A replicated catalog of schema version 4 (no `object_offset`) is
    /// migrated in place by the first version-5 open: the column reaches
    /// every replica, the rows already there read offset 0 (a whole
    /// object), and a row indexed since keeps its offset.
    #[test]
    fn a_version_4_replicated_catalog_gets_object_offset_on_every_replica() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let (statements, _) = spool_catalog::testing::clickhouse_statements(&url).unwrap();
        let statement = |name: &str| {
            statements
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("no statement {name}"))
                .1
                .clone()
        };
        // the tables as version 4 made them: today's, less the column
        for name in ["create_database", "create_schema_table", "create_lease"] {
            clickhouse_sql(&url, &statement(name));
        }
        let v4_packs = statement("create_packs").replace(", object_offset UInt64 DEFAULT 0", "");
        assert!(!v4_packs.contains("object_offset"), "{v4_packs}");
        clickhouse_sql(&url, &v4_packs);
        let db = database_of(&url);
        let old = suite::row(7, 1_795_000_000_007);
        clickhouse_sql(
            &url,
            &format!(
                "INSERT INTO `{db}`.`spool_packs` (pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, trailer_sha256) VALUES ('{}', '{}', 'default', '{}', {}, {}, 'node-a', 4242, 'r0-0badcafe', NULL, {}, '{}')",
                old.pack_id, old.object_key, old.sha256, old.bytes, old.records, old.created_at_ms, old.trailer_sha256
            ),
        );
        clickhouse_sql(
            &url,
            &format!("INSERT INTO `{db}`.`spool_schema_version` (version, installed_at_ms) VALUES (4, 0)"),
        );

        let catalog = spool_catalog::open(&url).unwrap();
        let got = cleanup
            .rt
            .block_on(catalog.get(&old.pack_id))
            .unwrap()
            .unwrap();
        assert_eq!(got.object_offset, 0, "{got:?}");
        assert_eq!(
            cleanup
                .rt
                .block_on(spool_catalog::testing::schema_version(&url))
                .unwrap(),
            spool_catalog::SCHEMA_VERSION
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for i in 0..replicas.len() {
            loop {
                let cols = clickhouse_sql(
                    &replicas.only(&url, i),
                    &format!("SELECT count() FROM system.columns WHERE database = '{db}' AND table = 'spool_packs' AND name = 'object_offset' FORMAT TSV"),
                );
                if cols.trim() == "1" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {i} has no object_offset"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let bundled = PackRow {
            object_offset: 4096,
            ..suite::row(8, 1_795_000_000_008)
        };
        cleanup
            .rt
            .block_on(catalog.index(std::slice::from_ref(&bundled), None))
            .unwrap();
        let back = cleanup
            .rt
            .block_on(catalog.get(&bundled.pack_id))
            .unwrap()
            .unwrap();
        assert_eq!(back.object_offset, 4096);
    }

    /// The tables are created once, `ON CLUSTER`, as replicated and
    /// partitioned on every replica; a row indexed through one replica
    /// (confirmed by the quorum) is on the others.
    #[test]
    fn tables_are_created_on_cluster_as_replicated_on_every_replica() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let catalog = spool_catalog::open(&url).unwrap();
        let batch = rows(0, 5);
        cleanup.rt.block_on(catalog.index(&batch, None)).unwrap();
        let db = database_of(&url);
        for i in 0..replicas.len() {
            let tables = clickhouse_sql(
                &replicas.only(&url, i),
                &format!("SELECT name, engine, partition_key FROM system.tables WHERE database = '{db}' ORDER BY name FORMAT TSV"),
            );
            assert_eq!(
                tables,
                "spool_lease\tReplicatedMergeTree\tintDiv(acquired_at_ms, 86400000)\nspool_packs\tReplicatedReplacingMergeTree\tintDiv(created_at_ms, 86400000)\nspool_schema_version\tReplicatedMergeTree\t\n",
                "replica {i}"
            );
        }
        // Confirmed on a quorum of two at once; on all three soon after.
        let on_now = (0..replicas.len())
            .filter(|i| ids_on(&replicas, &url, *i).is_some_and(|v| v.len() == 5))
            .count();
        assert!(on_now >= 2, "a confirmed row is on {on_now} replicas");
        let deadline = Instant::now() + Duration::from_secs(20);
        while (0..replicas.len()).any(|i| ids_on(&replicas, &url, i).map(|v| v.len()) != Some(5)) {
            assert!(
                Instant::now() < deadline,
                "rows did not reach every replica"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// With any one replica killed, indexing goes on (the catalog fails
    /// over past it), and after each batch every confirmed row is on both
    /// live replicas; then killing any one replica loses no confirmed row:
    /// the two others hold every one.
    #[test]
    fn indexing_goes_on_with_any_one_replica_killed_and_no_confirmed_row_is_lost() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let catalog = spool_catalog::open_with_timeout(&url, Duration::from_secs(5)).unwrap();
        cleanup.rt.block_on(catalog.ensure_schema()).unwrap();
        let mut confirmed: Vec<String> = Vec::new();
        for victim in 0..replicas.len() {
            replicas.kill(victim);
            let batch = rows(100 * victim as u64, 20);
            let started = Instant::now();
            cleanup
                .rt
                .block_on(catalog.index(&batch, None))
                .unwrap_or_else(|e| panic!("replica {victim} down: {e}"));
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{:?}",
                started.elapsed()
            );
            confirmed.extend(batch.iter().map(|r| r.pack_id.clone()));
            confirmed.sort();
            for live in (0..replicas.len()).filter(|i| *i != victim) {
                let held = ids_on(&replicas, &url, live).unwrap();
                assert!(
                    batch.iter().all(|r| held.contains(&r.pack_id)),
                    "replica {live} lacks a row confirmed while {victim} was down"
                );
            }
            replicas.restart(victim);
        }
        // Every replica catches up; then no single death loses a row.
        let deadline = Instant::now() + Duration::from_secs(30);
        while (0..replicas.len()).any(|i| ids_on(&replicas, &url, i).as_ref() != Some(&confirmed)) {
            assert!(Instant::now() < deadline, "replicas did not catch up");
            std::thread::sleep(Duration::from_millis(200));
        }
        for victim in 0..replicas.len() {
            replicas.kill(victim);
            for live in (0..replicas.len()).filter(|i| *i != victim) {
                assert_eq!(ids_on(&replicas, &url, live).as_ref(), Some(&confirmed));
            }
            let count = cleanup.rt.block_on(catalog.count()).unwrap();
            assert_eq!(count, confirmed.len() as u64, "read through the failover");
            replicas.restart(victim);
        }
    }

    /// `spool run --once` with the replicated catalog and a replica killed
    /// (the first the URL names, so every statement fails over) adopts a
    /// dead producer's directory and drains it: the node lease is claimed
    /// and the rows confirmed on the two live replicas, within a bound.
    /// (Any one replica: the indexing test above.)
    #[test]
    fn spool_run_once_adopts_and_drains_with_a_replica_killed() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let catalog = spool_catalog::open_with_timeout(&url, Duration::from_secs(5)).unwrap();
        cleanup.rt.block_on(catalog.ensure_schema()).unwrap();
        let victim = 0;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("spool");
        std::fs::create_dir(&root).unwrap();
        let store = format!("file://{}", tmp.path().join("store").display());
        let args = |cmd: &mut std::process::Command| {
            cmd.arg("--spool-root").arg(&root);
            cmd.args(["--catalog", &url, "--store", &store]);
        };
        let mut show = spool_tests::spool();
        show.args(["config", "show", "--json"]);
        args(&mut show);
        let out = spool_tests::output(&mut show);
        assert!(out.status.success(), "{}", spool_tests::describe(&out));
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let dead =
            std::path::Path::new(shown["derived"]["key_dir"].as_str().unwrap()).join("r7-0000abcd");
        std::fs::create_dir_all(dead.parent().unwrap()).unwrap();
        let out = spool_tests::output(
            spool_tests::spool()
                .args(["produce", "--packs", "3", "--pack-bytes", "2048", "--dir"])
                .arg(&dead),
        );
        assert!(out.status.success(), "{}", spool_tests::describe(&out));
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        replicas.kill(victim);
        let started = Instant::now();
        let mut run = spool_tests::spool();
        run.args(["run", "--once", "--timeout", "60"]);
        args(&mut run);
        let out = spool_tests::output(&mut run);
        let took = started.elapsed();
        let text = spool_tests::describe(&out);
        assert!(out.status.success(), "replica {victim} down: {text}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 sibling directory adopted"),
            "replica {victim} down: {text}"
        );
        assert!(took < Duration::from_secs(20), "{took:?}: {text}");
        assert!(!dead.exists(), "replica {victim} down: {text}");
        for id in &ids {
            let row = cleanup.rt.block_on(catalog.get(id)).unwrap();
            assert!(row.is_some(), "{id} not indexed with replica {victim} down");
        }
        replicas.restart(victim);
    }

    /// With two of three replicas down the quorum cannot be had: an index
    /// insert fails (retryable: the pack stays in its spool) and a lease
    /// claim and a renewal fail closed (an error, never `Held`), each within
    /// a bound; a row of the failed insert is never read as confirmed. Once
    /// the replicas are back, both go through.
    /// The lease survives its trim on 18.16: a lease-log day written with
    /// the quorum three days back is not dropped by the holder's trim (a
    /// `DROP PARTITION` there leaves ZooKeeper's `/quorum/last_part` naming
    /// a dropped part, a ClickHouse bug fixed in 20.4), so sequentially consistent
    /// reads go on and the lease is claimed again. A catalog an older
    /// spool wedged that way (code 289) is repaired by the README's step:
    /// one quorum row into the dropped day.
    #[test]
    fn the_lease_survives_its_trim_and_a_wedged_catalog_is_repaired() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let rt = &cleanup.rt;
        let catalog = spool_catalog::open_with_timeout(&url, Duration::from_secs(5)).unwrap();
        let cfg = suite::short_lease();
        let held = rt
            .block_on(catalog.acquire("node-a", "a pid 1", &cfg))
            .unwrap();
        let LeaseClaim::Held(guard) = held else {
            panic!("{held:?}")
        };
        let db = database_of(&url);
        let day: u64 = clickhouse_sql(
            &replicas.only(&url, 0),
            "SELECT intDiv(toUInt64(now()) * 1000, 86400000) - 3 FORMAT TSV",
        )
        .trim()
        .parse()
        .unwrap();
        // The README's repair step, and how a back-dated claim is written.
        let into_day = format!(
            "INSERT INTO `{db}`.`spool_lease` (name, term, lease_id, holder, acquired_at_ms, expires_at_ms) SELECT '', 0, generateUUIDv4(), 'repair', {ms}, {ms}",
            ms = day * 86_400_000
        );
        rt.block_on(cleanup.admin.testing_execute_with_quorum(&into_day))
            .unwrap();
        assert_eq!(
            rt.block_on(catalog.trim_lease_log()).unwrap(),
            0,
            "nothing dropped on 18.16"
        );
        let again = rt.block_on(catalog.renew(&guard)).unwrap();
        let LeaseClaim::Held(guard) = again else {
            panic!("{again:?}")
        };
        // a fresh claim after the trim: released, then taken by another
        // holder, which reads the log consistently and appends a new term
        assert!(rt.block_on(catalog.release(&guard)).unwrap());
        let fresh = rt
            .block_on(catalog.acquire("node-a", "b pid 2", &cfg))
            .unwrap();
        let LeaseClaim::Held(guard) = fresh else {
            panic!("no fresh claim after the trim: {fresh:?}")
        };
        let days = clickhouse_sql(
            &replicas.only(&url, 0),
            &format!("SELECT count() FROM `{db}`.`spool_lease` WHERE intDiv(acquired_at_ms, 86400000) = {day} FORMAT TSV"),
        );
        assert_eq!(days.trim(), "1", "the old day is kept");

        // As an older spool trimmed: the day dropped, every consistent
        // read fails (code 289) ...
        clickhouse_sql(
            &replicas.only(&url, 0),
            &format!("ALTER TABLE `{db}`.`spool_lease` DROP PARTITION {day}"),
        );
        let wedged = rt.block_on(catalog.renew(&guard));
        let Err(e) = &wedged else {
            panic!("a wedged catalog renewed: {wedged:?}")
        };
        assert!(e.to_string().contains("289"), "{e}");
        // ... until one quorum row lands in that day again.
        rt.block_on(cleanup.admin.testing_execute_with_quorum(&into_day))
            .unwrap();
        let healed = rt.block_on(catalog.renew(&guard)).unwrap();
        assert!(matches!(healed, LeaseClaim::Held(_)), "{healed:?}");
        let another = rt
            .block_on(catalog.acquire("node-b", "c pid 3", &cfg))
            .unwrap();
        assert!(
            matches!(another, LeaseClaim::Held(_)),
            "no fresh claim once repaired: {another:?}"
        );
    }

    #[test]
    fn with_two_replicas_down_an_insert_fails_and_a_lease_claim_fails_closed() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let catalog = spool_catalog::open_with_timeout(&url, Duration::from_secs(3)).unwrap();
        let rt = &cleanup.rt;
        rt.block_on(catalog.ensure_schema()).unwrap();
        let cfg = suite::short_lease();
        let held = rt
            .block_on(catalog.acquire("node-a", "a pid 1", &cfg))
            .unwrap();
        let LeaseClaim::Held(guard) = held else {
            panic!("{held:?}")
        };
        replicas.kill(1);
        replicas.kill(2);
        let started = Instant::now();
        let e = rt
            .block_on(catalog.index(&rows(0, 3), None))
            .expect_err("an insert without its quorum");
        assert!(e.is_retryable(), "{e}");
        let claim = rt.block_on(catalog.acquire("node-b", "b pid 2", &cfg));
        assert!(
            !matches!(claim, Ok(LeaseClaim::Held(_))),
            "a claim without its quorum: {claim:?}"
        );
        let renewal = rt.block_on(catalog.renew(&guard));
        assert!(
            !matches!(renewal, Ok(LeaseClaim::Held(_))),
            "a renewal without its quorum: {renewal:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "bounded: {:?}",
            started.elapsed()
        );
        // Sequentially consistent, the survivor shows no unconfirmed row.
        let db = database_of(&url);
        let consistent = try_clickhouse_sql(
            &replicas.only(&url, 0),
            &format!(
                "SELECT count() FROM `{db}`.`spool_packs` SETTINGS select_sequential_consistency = 1 FORMAT TSV"
            ),
        )
        .unwrap();
        assert!(
            consistent.0 != 200 || consistent.1.trim() == "0",
            "an unconfirmed row read as confirmed: {consistent:?}"
        );
        replicas.heal();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match rt.block_on(catalog.index(&rows(0, 3), None)) {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "after healing: {e}"),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // The claim that failed may land once the quorum is back (code 319
        // says its status is unknown): then it lives out its TTL as
        // anyone's foreign claim, and the next acquisition follows it.
        let deadline = Instant::now() + cfg.ttl + Duration::from_secs(15);
        loop {
            match rt.block_on(catalog.acquire("node-b", "b pid 2", &cfg)) {
                Ok(LeaseClaim::Held(_)) => break,
                other => assert!(Instant::now() < deadline, "after healing: {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The reads that decide a claim see every confirmed claim. Replica 3
    /// stops fetching, so it never gets the claim node A makes through
    /// the others: node B, whose URL names replica 3 alone, would read no
    /// claim there and take the lease beside A. It must fail closed
    /// (`select_sequential_consistency`: a replica that lacks a confirmed
    /// part refuses the read), and A's renewal goes on holding.
    #[test]
    fn a_claim_through_a_lagging_replica_fails_closed() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let rt = &cleanup.rt;
        let a = spool_catalog::open_with_timeout(&url, Duration::from_secs(3)).unwrap();
        rt.block_on(a.ensure_schema()).unwrap();
        let db = database_of(&url);
        let lagging = replicas.only(&url, 2);
        clickhouse_sql(
            &lagging,
            &format!("SYSTEM STOP FETCHES `{db}`.`spool_lease`"),
        );
        let cfg = suite::short_lease();
        let held = rt.block_on(a.acquire("node", "a pid 1", &cfg)).unwrap();
        let LeaseClaim::Held(guard) = held else {
            panic!("{held:?}")
        };
        let b = spool_catalog::open_with_timeout(&lagging, Duration::from_secs(3)).unwrap();
        let claim = rt.block_on(b.acquire("node", "b pid 2", &cfg));
        assert!(
            !matches!(claim, Ok(LeaseClaim::Held(_))),
            "a claim decided on a replica that lacks the holder's claim: {claim:?}"
        );
        let renewal = rt.block_on(a.renew(&guard));
        assert!(
            matches!(renewal, Ok(LeaseClaim::Held(_))),
            "the holder lost its lease to a claim through a lagging replica: {renewal:?}"
        );
        clickhouse_sql(
            &lagging,
            &format!("SYSTEM START FETCHES `{db}`.`spool_lease`"),
        );
    }

    /// The URL's first host refuses connections, or accepts and never
    /// answers: the catalog moves on to the next (the stall costs one
    /// request timeout, once), and later calls go straight to a live one.
    #[test]
    fn the_url_fails_over_past_a_host_that_refuses_or_stalls() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let rt = &cleanup.rt;
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = held.clone();
        std::thread::spawn(move || {
            for s in silent.incoming().flatten() {
                keep.lock().unwrap().push(s);
            }
        });
        let authority = |url: &str| {
            url.split("://")
                .nth(1)
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string()
        };
        let all = authority(&url);
        for (first, what) in [(closed_port, "refuses"), (silent_port, "stalls")] {
            let with_first = url.replacen(&all, &format!("127.0.0.1:{first},{all}"), 1);
            let catalog =
                spool_catalog::open_with_timeout(&with_first, Duration::from_secs(2)).unwrap();
            let started = Instant::now();
            rt.block_on(catalog.index(&rows(first as u64, 2), None))
                .unwrap_or_else(|e| panic!("first host {what}: {e}"));
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{what}: {:?}",
                started.elapsed()
            );
            let started = Instant::now();
            let n = rt.block_on(catalog.count()).unwrap();
            assert!(n >= 2, "{n}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{what}: the next call goes straight to a live replica ({:?})",
                started.elapsed()
            );
        }
        // A stalled replica (SIGSTOP) first in line: the same.
        replicas.stall(0);
        let catalog = spool_catalog::open_with_timeout(&url, Duration::from_secs(2)).unwrap();
        let started = Instant::now();
        rt.block_on(catalog.count()).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );
        replicas.resume(0);
    }

    /// ClickHouse 18.16 runs quorum inserts into one table one at a time:
    /// while one waits for its quorum, the next is answered code 286. With
    /// the other two replicas' fetches stopped, a first insert through
    /// replica 1 waits for its quorum; a second insert meets 286 and is
    /// tried again on the same replica (counted, not failed) until fetches
    /// resume and the first's quorum is met, then lands. With the quorum
    /// stalled past a statement's budget, the statement gives up with the
    /// 286 (retryable) at its budget, not later.
    #[test]
    fn an_insert_behind_an_unsatisfied_quorum_waits_for_it_within_its_budget() {
        let Some(replicas) = spool_tests::servers::replicas() else {
            return;
        };
        let (url, cleanup) = setup(&replicas);
        let rt = &cleanup.rt;
        let db = database_of(&url);
        let first =
            spool_catalog::open_with_timeout(&replicas.only(&url, 0), Duration::from_secs(30))
                .unwrap();
        let first: Arc<dyn spool_catalog::Catalog> = first;
        rt.block_on(first.ensure_schema()).unwrap();
        let fetches = |verb: &str| {
            for i in 1..replicas.len() {
                clickhouse_sql(
                    &replicas.only(&url, i),
                    &format!("SYSTEM {verb} FETCHES `{db}`.`spool_packs`"),
                );
            }
        };
        // fetches started again however the test ends (before the cleanup
        // heals: a replica that fetches nothing never comes back healthy)
        struct Restart<F: Fn(&str)>(F);
        impl<F: Fn(&str)> Drop for Restart<F> {
            fn drop(&mut self) {
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.0)("START")));
            }
        }
        let _restart = Restart(fetches);
        // the packs table's quorum node: there while an insert waits for it
        let quorum_pending = || {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let sql = format!("SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/tables/01/{db}/spool_packs/quorum' AND name = 'status' FORMAT TSV");
                if clickhouse_sql(&replicas.only(&url, 0), &sql).trim() == "1" {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the first insert's quorum never pended"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        let index_in_background = |c: &Arc<dyn spool_catalog::Catalog>, n: u64| {
            let c = c.clone();
            rt.spawn(async move { c.index(&rows(n, 1), None).await })
        };

        // a quorum met while the second insert waits on it
        fetches("STOP");
        let a = index_in_background(&first, 0);
        quorum_pending();
        let second: Arc<dyn spool_catalog::Catalog> =
            spool_catalog::open_with_timeout(&url, Duration::from_secs(20)).unwrap();
        rt.block_on(second.ensure_schema()).unwrap();
        let started = Instant::now();
        let b = index_in_background(&second, 1);
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            !b.is_finished(),
            "the second insert did not wait for the quorum: {:?}",
            rt.block_on(b)
        );
        assert!(
            second.counters().quorum_contention >= 1,
            "{:?}",
            second.counters()
        );
        fetches("START");
        rt.block_on(a).unwrap().unwrap();
        rt.block_on(b).unwrap().unwrap_or_else(|e| {
            panic!("the second insert, tried again once the quorum was met: {e}")
        });
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert_eq!(second.counters().quorum_contention_gave_up, 0);
        assert_eq!(rt.block_on(second.count()).unwrap(), 2);

        // a quorum stalled past the budget: given up at the budget
        fetches("STOP");
        let a = index_in_background(&first, 2);
        quorum_pending();
        let budget = Duration::from_secs(3);
        let third = spool_catalog::open_with_timeout(&url, budget).unwrap();
        rt.block_on(third.ensure_schema()).unwrap();
        let started = Instant::now();
        let given_up = rt.block_on(third.index(&rows(3, 1), None));
        let took = started.elapsed();
        match &given_up {
            Err(
                e @ spool_catalog::Error::Server {
                    code: Some(286), ..
                },
            ) => {
                assert!(e.is_retryable(), "{e}")
            }
            other => panic!("expected code 286 at the budget: {other:?}"),
        }
        assert!(
            took >= budget / 2 && took <= budget + Duration::from_secs(1),
            "gave up after {took:?} of a {budget:?} budget"
        );
        let counted = third.counters();
        assert!(
            counted.quorum_contention >= 2 && counted.quorum_contention_gave_up == 1,
            "{counted:?}"
        );
        fetches("START");
        rt.block_on(a).unwrap().unwrap();
    }
}
