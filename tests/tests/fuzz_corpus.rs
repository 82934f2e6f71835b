//! Replays every committed fuzz input (`fuzz/corpus/<target>/*`, including
//! the regressions a fuzzer once found) through the same bodies the
//! libFuzzer targets run, as ordinary tests: a fixed bug stays fixed in CI
//! without cargo-fuzz. New inputs come from `cargo xtask fuzz`.

#![forbid(unsafe_code)]

#[path = "../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod bodies;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (every target keeps a corpus)", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let files = corpus(target);
    assert!(!files.is_empty(), "the corpus of {target} is empty");
    for file in &files {
        let data = std::fs::read(file).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| bodies::run(target, &data));
        assert!(
            outcome.is_ok(),
            "{target}: input {} fails (reproduce: cargo xtask fuzz {target} --replay {})",
            file.display(),
            file.display()
        );
    }
}

#[test]
fn every_target_has_a_replay_test() {
    assert_eq!(
        bodies::TARGETS,
        &[
            "pack_validate",
            "pack_roundtrip",
            "owner_record",
            "catalog_url",
            "store_url",
            "config"
        ],
        "a new target needs its #[test] below"
    );
}

#[test]
fn pack_validate() {
    replay("pack_validate");
}

#[test]
fn pack_roundtrip() {
    replay("pack_roundtrip");
}

#[test]
fn owner_record() {
    replay("owner_record");
}

#[test]
fn catalog_url() {
    replay("catalog_url");
}

#[test]
fn store_url() {
    replay("store_url");
}

#[test]
fn config() {
    replay("config");
}
