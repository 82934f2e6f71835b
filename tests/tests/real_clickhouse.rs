//! spool-catalog against the real ClickHouse server `cargo xtask test`
//! starts (Debian's 18.16, `SPOOL_TEST_CLICKHOUSE_URL`): every case of
//! `spool_tests::clickhouse_suite`: the behavioural suite, schema
//! refusals and migrations, the lease log's trim (which `real_chdb.rs`
//! runs on the current engine too), and the contender processes and lease
//! timing cases in `serial` (here only). Each test works in its own database and drops it
//! afterwards, pass or fail.
#![forbid(unsafe_code)]

spool_tests::clickhouse_cases!("SPOOL_TEST_CLICKHOUSE_URL");
spool_tests::clickhouse_cases!(timing "SPOOL_TEST_CLICKHOUSE_URL");

/// A wrong password, refused by the real server rather than a fake: the
/// catalog's typed `Error::Auth`, final (never retried), naming the server
/// and what to set, never the password; and `spool run --once` given it
/// exits 1 at once (no waiting out its timeout), saying that the destination
/// refuses the run and what to fix, its packs left ready.
#[test]
fn a_wrong_password_is_refused_by_the_real_server_naming_what_to_fix() {
    use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog, Error};
    use spool_tests::{describe, output, ready_under, spool};

    let Some(base) = spool_tests::server_env("SPOOL_TEST_CLICKHOUSE_URL") else {
        return;
    };
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&base).unwrap() else {
        panic!("SPOOL_TEST_CLICKHOUSE_URL is not a clickhouse:// URL: {base}")
    };
    // the server's `default` user has no password: any password is wrong
    let password = "Wr0ngPassw0rd";
    let url = format!(
        "clickhouse://default:{password}@{}/{}",
        t.authority(),
        t.database
    );
    let CatalogUrl::ClickHouse(wrong) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!("a clickhouse:// URL")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt
        .block_on(ClickHouseCatalog::new(wrong).count())
        .unwrap_err();
    assert!(matches!(e, Error::Auth { .. }) && !e.is_retryable(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("refused the credentials") && msg.contains("password= in the catalog URL"),
        "{msg}"
    );
    assert!(!msg.contains(password), "{msg}");

    // a producer died with two packs staged for this destination
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let produced = output(
        spool()
            .args(["produce", "--packs", "2", "--catalog", &url, "--spool-root"])
            .arg(&root),
    );
    assert!(produced.status.success(), "{}", describe(&produced));
    let ready = || {
        let mut r = ready_under(&root);
        r.sort();
        r
    };
    let staged = ready();
    assert_eq!(staged.len(), 2, "{staged:?}");
    let started = std::time::Instant::now();
    let out = output(
        spool()
            .args(["run", "--once", "--timeout", "60", "--lease-ttl", "5"])
            .args(["--catalog", &url, "--spool-root"])
            .arg(&root),
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "a refusal is not waited out: {:?}",
        started.elapsed()
    );
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refuses") && err.contains("refused the credentials"),
        "{all}"
    );
    assert!(err.contains("password= in the catalog URL"), "{all}");
    assert!(!all.contains(password), "the password leaked:\n{all}");
    assert_eq!(ready(), staged, "every pack stays ready");
}
