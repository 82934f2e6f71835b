//! libFuzzer target `pack_validate`: see `spool_fuzz::pack_validate` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("pack_validate", data));
