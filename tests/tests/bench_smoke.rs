//! Exercises `spool-bench`, the binary behind `cargo xtask bench`, at its
//! smoke size (a few MiB, no servers): the `core`, `upload-file` and
//! `service-drain-rss` cases
//! run, append their figures, and `report --write` splices the tables into
//! a BENCHMARKS.md-shaped file between its markers. Nothing about the
//! figures themselves is asserted: throughput is only benchmarked.
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        spool_tests::describe(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `spool-bench report --results RESULTS --write DOC`.
fn report(bin: &Path, results: &Path, doc: &Path) {
    run(Command::new(bin)
        .args(["report", "--results"])
        .arg(results)
        .arg("--write")
        .arg(doc));
}

#[test]
fn the_benchmark_binary_runs_its_serverless_cases_and_writes_its_tables() {
    let bin = Path::new(env!("CARGO_BIN_EXE_spool-bench"));
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results.jsonl");
    // the core case compares with `openssl` and `sha256sum`
    let with_core = spool_tests::required(
        spool_tests::on_path("openssl") && spool_tests::on_path("sha256sum"),
        "openssl and sha256sum, for the core case",
    );
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--smoke", "--scratch"])
        .arg(tmp.path().join("scratch"))
        .arg("--results")
        .arg(&results);
    if with_core {
        cmd.arg("core");
    }
    cmd.args(["upload-file", "service-drain-rss"]);
    let printed = run(&mut cmd);
    assert!(
        printed.contains("drain 2 × 1 MiB to file://, Own"),
        "{printed}"
    );
    assert!(printed.contains("peak RSS draining 0.1 GiB"), "{printed}");

    let lines = std::fs::read_to_string(&results).unwrap();
    for line in lines.lines() {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(f["ours"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(f["size"], "Smoke", "{line}");
    }

    let doc = tmp.path().join("BENCHMARKS.md");
    std::fs::write(
        &doc,
        "# Benchmarks\n<!-- bench:machine:begin -->\nold\n<!-- bench:machine:end -->\n\
         <!-- bench:core:begin -->\nold\n<!-- bench:core:end -->\n\
         <!-- bench:service:begin -->\nold\n<!-- bench:service:end -->\n\
         <!-- bench:upload:begin -->\nold\n<!-- bench:upload:end -->\nkept\n",
    )
    .unwrap();
    report(bin, &results, &doc);
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(
        text.contains("| drain 4 × 16 KiB to file://, Own"),
        "{text}"
    );
    assert!(text.contains("| peak RSS draining 0.1 GiB"), "{text}");
    assert!(
        text.ends_with("<!-- bench:upload:end -->\nkept\n"),
        "{text}"
    );
    // Not every group ran: the machine section is left to the run that
    // measured the others; each table carries its own machine lines.
    assert!(
        text.contains("<!-- bench:machine:begin -->\nold\n"),
        "{text}"
    );
    assert!(
        text.contains("This group measured on its own:\n\n- measured: "),
        "{text}"
    );
    assert!(text.contains("`nproc` = "), "{text}");
    if with_core {
        assert!(text.contains("| stage 4 KiB packs"), "{text}");
        assert!(text.contains("| validate a backlog"), "{text}");
        assert!(!text.contains("<!-- bench:core:begin -->\nold\n"), "{text}");
    }

    // Every group measured (one figure each, relabelled from this run's):
    // the machine section is rewritten and the tables carry no machine lines.
    let one = lines.lines().next().unwrap();
    let mut all = String::new();
    let mut markers = String::from(
        "# Benchmarks\n<!-- bench:machine:begin -->\nold\n<!-- bench:machine:end -->\n",
    );
    for group in [
        "core", "upload", "catalog", "service", "s3s", "backlog", "reindex", "python",
    ] {
        let mut f: serde_json::Value = serde_json::from_str(one).unwrap();
        f["group"] = group.into();
        all.push_str(&format!("{f}\n"));
        markers.push_str(&format!(
            "<!-- bench:{group}:begin -->\nold\n<!-- bench:{group}:end -->\n"
        ));
    }
    std::fs::write(&results, all).unwrap();
    std::fs::write(&doc, markers).unwrap();
    report(bin, &results, &doc);
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(!text.contains("\nold\n"), "{text}");
    assert!(!text.contains("measured on its own"), "{text}");
    assert!(
        text.contains("<!-- bench:machine:begin -->\n- measured: "),
        "{text}"
    );
}
