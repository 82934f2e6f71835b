//! Black-box tests of the engine through `spool produce --spool-root`
//! (the embedded and sink-only deployments): the real binary on
//! embedded defaults (`ROOT/.store`, `ROOT/.catalog.db`).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use spool_catalog::Catalog;
use spool_tests::{describe, output, spool};

fn ids(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The rank directory the command reported on stderr.
fn rank_dir(out: &Output) -> PathBuf {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("spool: rank directory "))
        .unwrap_or_else(|| panic!("no rank directory reported\n{}", describe(out)));
    PathBuf::from(line)
}

fn ready(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".ready").map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `spool produce --spool-root ROOT ARGS...` to completion.
fn produce(root: &Path, args: &[&str]) -> Output {
    output(
        spool()
            .args(["produce", "--spool-root"])
            .arg(root)
            .args(args),
    )
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn catalog(root: &Path) -> std::sync::Arc<dyn Catalog> {
    spool_catalog::open(&format!("sqlite://{}", root.join(".catalog.db").display())).unwrap()
}

#[test]
fn a_serving_producer_uploads_indexes_and_removes_its_rank_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let out = produce(root, &["--packs", "4", "--serve", "--rank", "7"]);
    assert!(out.status.success(), "{}", describe(&out));
    let staged = ids(&out);
    assert_eq!(staged.len(), 4);
    let dir = rank_dir(&out);
    assert!(
        dir.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("r7-"),
        "{}",
        dir.display()
    );
    assert!(!dir.exists(), "a clean close removes the rank directory");
    let cat = catalog(root);
    for id in &staged {
        let row = block_on(cat.get(id)).unwrap().expect("indexed");
        assert!(
            root.join(".store").join(&row.object_key).exists(),
            "{} is in the store",
            row.object_key
        );
    }
}

#[test]
fn a_sink_only_producer_hands_its_packs_over_by_exiting() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let out = produce(root, &["--packs", "3"]);
    assert!(out.status.success(), "{}", describe(&out));
    let dir = rank_dir(&out);
    let mut staged = ids(&out);
    let mut left = ready(&dir);
    staged.sort();
    left.sort();
    assert_eq!(
        staged, left,
        "every staged pack stays in its rank directory"
    );
    let owner = spool_lock::read_owner(&dir).unwrap();
    assert!(!owner.held, "the directory is a dead sibling now");
    assert_eq!(
        block_on(catalog(root).count()).unwrap(),
        0,
        "nothing indexed"
    );
}

#[test]
fn a_serving_producer_with_the_store_down_exits_6_and_keeps_its_packs_unlocked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // An S3 endpoint nobody listens on: every upload fails, retryably.
    let out = output(
        spool()
            .args(["produce", "--spool-root"])
            .arg(root)
            .args(["--store", "s3://nobody-home", "--packs", "2", "--serve"])
            .args(["--timeout", "2"])
            .env("AWS_ENDPOINT", "http://127.0.0.1:9")
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "x"),
    );
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let dir = rank_dir(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was not drained"), "{}", describe(&out));
    assert_eq!(ready(&dir).len(), 2, "{}", describe(&out));
    assert!(!spool_lock::read_owner(&dir).unwrap().held);
}

#[test]
fn the_embedded_defaults_are_never_taken_for_rank_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // A sink-only producer leaves a dead sibling; a serving producer on the
    // same destination then runs beside it with the store and catalog under
    // the same root.
    let first = produce(root, &["--packs", "2"]);
    assert!(first.status.success(), "{}", describe(&first));
    let second = produce(root, &["--packs", "1", "--serve"]);
    assert!(second.status.success(), "{}", describe(&second));
    // every line but the one naming the destination
    let err = String::from_utf8_lossy(&second.stderr);
    let err: Vec<_> = err
        .lines()
        .filter(|l| !l.starts_with("spool produce: shipping to store "))
        .collect();
    let err = err.join("\n");
    assert!(
        !err.contains("flat") && !err.contains(".store") && !err.contains(".catalog.db"),
        "the embedded store and catalog are not spool directories\n{}",
        describe(&second)
    );
    assert!(!root.join(".store").join(".owner.lock").exists());
}

#[test]
fn dir_and_spool_root_are_exclusive_and_serve_needs_a_root() {
    let tmp = tempfile::tempdir().unwrap();
    let out = output(
        spool()
            .args(["produce", "--packs", "1", "--dir"])
            .arg(tmp.path().join("d"))
            .arg("--spool-root")
            .arg(tmp.path()),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let out = output(
        spool()
            .args(["produce", "--packs", "1", "--serve", "--dir"])
            .arg(tmp.path().join("d")),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    // a destination flag means nothing outside the layout, and produce
    // serves no metrics: refused, not ignored
    for flag in [
        ["--store", "file:///tmp/elsewhere"],
        ["--catalog", "sqlite:///tmp/elsewhere.db"],
        ["--store-id", "other"],
        ["--rank", "3"],
        ["--metrics-addr", "127.0.0.1:0"],
    ] {
        let out = output(
            spool()
                .args(["produce", "--packs", "1", "--dir"])
                .arg(tmp.path().join("d"))
                .args(flag),
        );
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag[0]),
            "{flag:?}: {}",
            describe(&out)
        );
    }
    assert!(
        !tmp.path().join("d").exists(),
        "a refused command leaves no trace"
    );
}
