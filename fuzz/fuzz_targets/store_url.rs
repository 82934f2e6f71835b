//! libFuzzer target `store_url`: see `spool_fuzz::store_url` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("store_url", data));
