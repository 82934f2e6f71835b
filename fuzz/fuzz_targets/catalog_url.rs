//! libFuzzer target `catalog_url`: see `spool_fuzz::catalog_url` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("catalog_url", data));
