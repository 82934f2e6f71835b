//! libFuzzer target `owner_record`: see `spool_fuzz::owner_record` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("owner_record", data));
