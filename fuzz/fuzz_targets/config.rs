//! libFuzzer target `config`: see `spool_fuzz::config` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_fuzz::run("config", data));
