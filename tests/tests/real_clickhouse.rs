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
