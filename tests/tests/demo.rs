//! `spool demo` end to end: real producer processes, one SIGKILLed, the
//! daemon adopting its directory, every pack read back ("spool demo
//! passes in CI and reports 0 lost").
#![forbid(unsafe_code)]

use spool_tests::{describe, output, spool};

#[test]
fn the_demo_loses_nothing_and_the_daemon_adopts_the_killed_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let out = output(spool().arg("demo").arg("--dir").arg(tmp.path()).args([
        "--ranks",
        "3",
        "--packs",
        "12",
        "--pack-bytes",
        "8192",
        "--json",
    ]));
    assert!(out.status.success(), "{}", describe(&out));
    let result: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", describe(&out)));
    assert_eq!(result["lost"], 0, "{result:#}");
    assert_eq!(result["left_in_spool"], 0, "{result:#}");
    assert_eq!(result["daemon_exit_code"], 0, "{result:#}");
    assert_eq!(result["victim_dir_removed"], true, "{result:#}");
    let produced = result["produced"].as_u64().unwrap();
    assert!(produced >= 2 * 12 + 6, "{result:#}");
    assert_eq!(result["uploaded"], produced, "{result:#}");
    assert_eq!(result["indexed"], produced, "{result:#}");
    // the hand-off shipped packs while their producers lived, and the
    // SIGKILLed rank left packs the daemon had not confirmed, adopted
    assert!(
        result["handed_off"].as_u64().unwrap() >= 2 * 12,
        "{result:#}"
    );
    assert!(result["adopted"].as_u64().unwrap() >= 1, "{result:#}");
    assert_eq!(
        result["daemon"]["snapshot"]["adopted_packs"], result["adopted"],
        "{result:#}"
    );
    let ranks = result["ranks"].as_array().unwrap();
    assert_eq!(ranks.iter().filter(|r| r["killed"] == true).count(), 1);
    // Without --keep the scratch directory is gone.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn the_demos_table_reports_zero_lost() {
    let tmp = tempfile::tempdir().unwrap();
    // The caller's own destination never reaches the demo's processes: they
    // all run on the embedded one in the scratch directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = output(
        spool()
            .arg("demo")
            .arg("--dir")
            .arg(tmp.path())
            .args(["--ranks", "2", "--packs", "6", "--keep"])
            .env(
                "SPOOL_STORE",
                format!("file://{}/store", elsewhere.path().display()),
            )
            .env(
                "SPOOL_CATALOG",
                format!("sqlite://{}/catalog.db", elsewhere.path().display()),
            ),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "{}",
        describe(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lost = text
        .lines()
        .find(|l| l.starts_with("packs lost"))
        .unwrap_or_else(|| panic!("no 'packs lost' line\n{}", describe(&out)));
    assert_eq!(lost.split_whitespace().last(), Some("0"), "{lost}");
    // --keep keeps the store and catalog for a look around.
    let kept: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    assert_eq!(kept.len(), 1);
    assert!(kept[0].path().join("root").join(".catalog.db").exists());
}
