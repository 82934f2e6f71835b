//! spool-catalog: the pack index and the adopter lease, on ClickHouse,
//! SQLite or in memory (SPEC §6).
#![forbid(unsafe_code)]
