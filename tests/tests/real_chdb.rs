//! spool-catalog on the current ClickHouse engine: PyPI's chdb-core behind
//! ClickHouse's HTTP interface (xtask's `servers/chdb_http.py`,
//! `SPOOL_TEST_CHDB_URL`). Every case `real_clickhouse.rs` runs on
//! Debian's 18.16 but the lease timing ones runs here too
//! (`spool_tests::clickhouse_suite`), so a statement the current dialect
//! refuses or reads otherwise turns a test red; what needs a cluster (`ON CLUSTER`, replicated engines, the
//! quorum's settings) cannot run in one process and is parsed instead.
#![forbid(unsafe_code)]

use spool_tests::server_env;
use spool_tests::servers::clickhouse_sql;

spool_tests::clickhouse_cases!("SPOOL_TEST_CHDB_URL");

/// A ClickHouse string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Every statement the catalog sends, on one server and on a cluster,
/// parses on the current engine (`formatQuery`), and every setting a
/// cluster's requests carry is one it knows, with a value it takes. The
/// engine is a current one (so this binary is not pointed at 18.16).
#[test]
fn every_statement_parses_and_every_cluster_setting_is_known() {
    let Some(base) = server_env("SPOOL_TEST_CHDB_URL") else {
        return;
    };
    let version = clickhouse_sql(&base, "SELECT version()");
    let major: u32 = version.split('.').next().unwrap().parse().unwrap();
    assert!(
        major >= 24,
        "SPOOL_TEST_CHDB_URL serves ClickHouse {version}"
    );
    let clustered = format!("{base}?table_prefix=p_&cluster=spool_test");
    for url in [base.clone(), clustered.clone()] {
        let (statements, settings) = spool_catalog::testing::clickhouse_statements(&url).unwrap();
        assert!(statements.len() > 30, "{statements:?}");
        for (name, sql) in statements {
            let (status, body) = spool_tests::servers::try_clickhouse_sql(
                &base,
                &format!("SELECT formatQuery({})", literal(&sql)),
            )
            .unwrap();
            assert_eq!(
                status, 200,
                "{name} does not parse on {version}: {sql}\n{body}"
            );
        }
        assert_eq!(settings.is_empty(), url == base, "{settings:?}");
        if !settings.is_empty() {
            let list: Vec<String> = settings.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let sql = format!("SELECT 1 SETTINGS {}", list.join(", "));
            assert_eq!(clickhouse_sql(&base, &sql).trim(), "1", "{sql}");
        }
    }
    let (statements, _) = spool_catalog::testing::clickhouse_statements(&clustered).unwrap();
    let create = &statements
        .iter()
        .find(|(n, _)| *n == "create_packs")
        .unwrap()
        .1;
    assert!(
        create.contains(" ON CLUSTER spool_test ")
            && create.contains("ReplicatedReplacingMergeTree("),
        "{create}"
    );
    // What the suite's cases never send there runs here: a cluster's
    // connect-time questions (a current replica has the setting
    // `insert_quorum_parallel`; this engine knows no cluster) and the drop
    // after a swap another process won (of a table that is not there).
    let (statements, _) = spool_catalog::testing::clickhouse_statements(&base).unwrap();
    let sql = |name: &str| {
        let sql = &statements.iter().find(|(n, _)| *n == name).unwrap().1;
        clickhouse_sql(&base, sql)
    };
    assert_eq!(sql("select_has_quorum_parallel").trim(), "1");
    assert_eq!(sql("select_cluster_replicas").trim(), "0");
    assert_eq!(sql("drop_partitioned_new"), "");
}
