//! `cargo xtask fuzz`: the libFuzzer targets of `fuzz/` on demand (never in
//! CI; CI replays the committed corpora through `tests/tests/fuzz_corpus.rs`).
//!
//! Stable toolchain only, so the sanitizer is off (`--sanitizer none`) and
//! `-use_value_profile=1` is on: that is what finds magic numbers and
//! length fields without ASan.
//! New inputs go to a scratch corpus under `target/fuzz/corpus/<target>/`;
//! `--merge` folds the ones that add coverage into the committed
//! `fuzz/corpus/<target>/`. A crash is written straight into the committed
//! corpus as `regress-<hash>`, so the replay test fails until it is fixed.

use anyhow::{bail, Context, Result};
use std::path::Path;

use crate::{cargo, run};

/// The targets, as in `fuzz/Cargo.toml`.
const TARGETS: &[&str] = &[
    "pack_validate",
    "pack_roundtrip",
    "owner_record",
    "catalog_url",
    "store_url",
    "config",
];

/// `cargo xtask fuzz [TARGET...] [--minutes M] [--merge] [--replay FILE]`.
pub fn fuzz(root: &Path, args: &[String]) -> Result<()> {
    let mut minutes = 10u64;
    let mut merge = false;
    let mut replay = None;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minutes" => {
                minutes = it
                    .next()
                    .and_then(|m| m.parse().ok())
                    .context("--minutes takes a whole number of minutes")?
            }
            "--merge" => merge = true,
            "--replay" => replay = Some(it.next().context("--replay takes a file")?.clone()),
            t if TARGETS.contains(&t) => targets.push(t.to_string()),
            other => bail!(
                "unknown argument {other:?}; usage: cargo xtask fuzz [TARGET...] [--minutes M] [--merge] [--replay FILE]; targets: {}",
                TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    crate::cargo_install("fuzz", "cargo-fuzz")?;
    let fuzz_dir = root.join("fuzz");
    let target_dir = root.join("target/fuzz");
    let fuzz_cmd = || {
        let mut c = cargo();
        c.current_dir(&fuzz_dir)
            .env("CARGO_TARGET_DIR", &target_dir)
            .args(["fuzz", "run", "--sanitizer", "none"]);
        c
    };
    if let Some(file) = replay {
        let target = targets
            .first()
            .context("--replay needs the target's name")?;
        return run(fuzz_cmd().arg(target).arg(file));
    }
    let mut summary = Vec::new();
    for t in &targets {
        let scratch = target_dir.join("corpus").join(t);
        std::fs::create_dir_all(&scratch)?;
        let committed = fuzz_dir.join("corpus").join(t);
        let out = fuzz_cmd()
            .arg(t)
            .arg(&scratch)
            .arg(&committed)
            .arg("--")
            .arg(format!("-max_total_time={}", minutes * 60))
            .args([
                "-use_value_profile=1",
                "-rss_limit_mb=2048",
                "-malloc_limit_mb=512",
                "-print_final_stats=1",
            ])
            .arg(format!("-artifact_prefix={}/regress-", committed.display()))
            .output()
            .with_context(|| format!("could not run cargo fuzz for {t}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let runs = log
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map(|n| n.trim().to_string())
            .unwrap_or_else(|| "?".into());
        let verdict = if out.status.success() {
            "no crash".to_string()
        } else {
            let why = log
                .lines()
                .find(|l| l.contains("panicked at") || l.contains("ERROR: libFuzzer"))
                .unwrap_or("see the log");
            format!(
                "CRASH: {why} (input saved as {}/regress-*)",
                committed.display()
            )
        };
        eprintln!("xtask: fuzz {t}: {runs} executions in {minutes} min: {verdict}");
        summary.push(format!("{t}\t{runs}\t{minutes}\t{verdict}"));
        if merge {
            run(fuzz_cmd().arg(t).arg(&committed).arg(&scratch).args([
                "--",
                "-merge=1",
                "-use_value_profile=1",
            ]))?;
        }
    }
    println!("target\texecutions\tminutes\tverdict");
    for line in &summary {
        println!("{line}");
    }
    if summary.iter().any(|l| l.contains("CRASH")) {
        bail!("a fuzz target crashed; the replay test now fails until it is fixed");
    }
    Ok(())
}
