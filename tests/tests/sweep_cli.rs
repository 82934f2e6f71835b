//! `spool sweep`, black-box on the embedded defaults: it refuses a catalog
//! the store prefix does not serve (another root's embedded catalog), and
//! one that does not exist, having created and deleted nothing.
#![forbid(unsafe_code)]

use spool_tests::{describe, output, spool};

#[test]
fn a_sweep_refuses_another_roots_catalog_and_a_missing_one_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for root in [&a, &b] {
        spool_tests::produce_ids(root, 2);
        spool_tests::run_once(root);
    }
    let store = format!("file://{}/.store", a.display());
    let before = spool_tests::store_objects(&a);
    assert_eq!(before.len(), 2);

    // b's catalog against a's store: the prefix serves a's
    let other = format!("sqlite://{}/.catalog.db", b.display());
    let out = output(
        spool()
            .args(["sweep", "--json", "--store", &store, "--catalog", &other])
            .arg("--spool-root")
            .arg(&a),
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("serves another catalog") && err.contains(&other),
        "{err}"
    );
    assert!(
        err.contains("nothing was uploaded, indexed or deleted"),
        "{err}"
    );

    // a catalog that does not exist: refused, and not made
    let missing = tmp.path().join("c").join(".catalog.db");
    std::fs::create_dir_all(missing.parent().unwrap()).unwrap();
    let out = output(
        spool()
            .args(["sweep", "--store", &store, "--catalog"])
            .arg(format!("sqlite://{}", missing.display()))
            .arg("--spool-root")
            .arg(&a),
    );
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(!missing.exists(), "the sweep made a catalog");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not exist"), "{err}");

    // its own catalog: a sweep that finds nothing to delete (a file://
    // store holds no bundles)
    let out = output(spool().args(["sweep", "--json", "--spool-root"]).arg(&a));
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["deleted"], 0, "{v}");
    assert_eq!(spool_tests::store_objects(&a), before);
}
