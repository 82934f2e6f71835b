//! libFuzzer target `pack_roundtrip`: see `spool_fuzz::pack_roundtrip` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("pack_roundtrip", data));
