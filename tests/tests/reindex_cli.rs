//! `spool reindex`, black-box: a catalog that lost rows is made whole from
//! the store (each restored pack reads back with `spool cat`), an object
//! that is not a valid pack is named and gets no row, and a second run
//! writes nothing.
#![forbid(unsafe_code)]

use spool_tests::{describe, indexed_ids, output, spool};

#[test]
fn a_catalog_that_lost_rows_is_made_whole_from_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let staged = spool_tests::produce_ids(&root, 6);
    spool_tests::run_once(&root);
    assert_eq!(indexed_ids(&root), staged);
    // the catalog loses four rows (a part never fsynced, a bad restore)
    let lost: Vec<&String> = staged.iter().take(4).collect();
    let db = rusqlite::Connection::open(root.join(".catalog.db")).unwrap();
    for id in &lost {
        db.execute("DELETE FROM spool_packs WHERE pack_id = ?1", [id])
            .unwrap();
    }
    drop(db);
    assert_eq!(indexed_ids(&root).len(), 2);
    // beside the packs: a file that is no pack, and a corrupt one
    let (_, any) = spool_tests::store_objects(&root).pop_first().unwrap();
    let day = any.parent().unwrap().to_path_buf();
    std::fs::write(day.join("notes.txt"), b"not a pack").unwrap();
    let fake = "01a00000000000000000000000000000";
    std::fs::write(
        day.join(format!("{fake}.pack")),
        b"SPOOLPK\x01 but nothing else",
    )
    .unwrap();

    let dry = output(
        spool()
            .args(["reindex", "--dry-run", "--json", "--spool-root"])
            .arg(&root),
    );
    assert!(dry.status.success(), "{}", describe(&dry));
    let v: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(v["inserted"], 4, "{v}");
    assert_eq!(indexed_ids(&root).len(), 2, "a dry run wrote");

    let out = output(
        spool()
            .args(["reindex", "--json", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["listed"].as_u64(), v["present"].as_u64()),
        (Some(8), Some(2)),
        "{v}"
    );
    assert_eq!(
        (v["inserted"].as_u64(), v["other"].as_u64()),
        (Some(4), Some(1)),
        "{v}"
    );
    let invalid = v["invalid"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{v}");
    assert!(invalid[0]["key"].as_str().unwrap().contains(fake), "{v}");
    assert_eq!(
        indexed_ids(&root),
        staged,
        "every lost row back, nothing else"
    );
    // a restored pack reads back, checksum and all
    let restored = lost[0];
    let cat = output(
        spool()
            .args(["cat", restored, "--records", "--hex", "--spool-root"])
            .arg(&root),
    );
    assert!(cat.status.success(), "{}", describe(&cat));
    // a second run writes nothing
    let again = output(
        spool()
            .args(["reindex", "--json", "--spool-root"])
            .arg(&root),
    );
    let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (v["inserted"].as_u64(), v["present"].as_u64()),
        (Some(0), Some(6)),
        "{v}"
    );
}

/// The embedded catalog file lost whole: `spool reindex` creates it and
/// fills it from the store; `--dry-run` creates nothing (and says there is
/// no catalog); a catalog whose directory is missing is refused, naming it.
#[test]
fn a_lost_embedded_catalog_is_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let staged = spool_tests::produce_ids(&root, 3);
    spool_tests::run_once(&root);
    assert_eq!(indexed_ids(&root), staged);
    for name in [".catalog.db", ".catalog.db-wal", ".catalog.db-shm"] {
        let _ = std::fs::remove_file(root.join(name));
    }

    let dry = output(
        spool()
            .args(["reindex", "--dry-run", "--json", "--spool-root"])
            .arg(&root),
    );
    assert!(!dry.status.success(), "{}", describe(&dry));
    assert!(!root.join(".catalog.db").exists(), "a dry run created it");

    let out = output(
        spool()
            .args(["reindex", "--json", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["inserted"].as_u64(), Some(3), "{v}");
    assert_eq!(indexed_ids(&root), staged);

    let nowhere = tmp.path().join("no-such-dir").join("catalog.db");
    let refused = output(
        spool()
            .args(["reindex", "--spool-root"])
            .arg(&root)
            .arg("--catalog")
            .arg(format!("sqlite://{}", nowhere.display())),
    );
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("no-such-dir"), "{err}");
    assert!(!nowhere.parent().unwrap().exists());
}

/// A reindex into another catalog than the store prefix serves is refused
/// having written nothing; `--take-over` records the new catalog first
/// (an old one lost for good) and then indexes every pack into it.
#[test]
fn a_reindex_into_another_catalog_is_refused_unless_it_takes_the_prefix_over() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let staged = spool_tests::produce_ids(&a, 3);
    spool_tests::run_once(&a);
    spool_tests::produce_ids(&b, 1);
    spool_tests::run_once(&b);
    let b_rows = indexed_ids(&b);
    let store = format!("file://{}/.store", a.display());
    let other = format!("sqlite://{}/.catalog.db", b.display());
    let reindex = |extra: &[&str]| {
        output(
            spool()
                .args(["reindex", "--json", "--store", &store, "--catalog", &other])
                .args(extra)
                .arg("--spool-root")
                .arg(&a),
        )
    };
    let out = reindex(&[]);
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("serves another catalog") && err.contains("--take-over"),
        "{err}"
    );
    assert_eq!(indexed_ids(&b), b_rows, "a refused reindex wrote");

    let out = reindex(&["--take-over"]);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["inserted"], 3, "{v}");
    let mut want = b_rows.clone();
    want.extend(staged);
    assert_eq!(indexed_ids(&b), want);
    // the prefix now serves b's catalog: a's own is refused
    let out = output(
        spool()
            .args(["reindex", "--dry-run", "--json", "--spool-root"])
            .arg(&a),
    );
    assert!(!out.status.success(), "{}", describe(&out));
}
