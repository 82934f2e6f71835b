//! `cargo xtask mutants [CRATE...]`: mutation testing with cargo-mutants,
//! on demand (hours on 2 cores; never in CI). Each crate's outcome is
//! committed under `mutants/<crate>/` (`caught.txt`, `missed.txt`,
//! `timeout.txt`, `unviable.txt`, `score.txt`) so the next run can be
//! compared with `git diff`; `mutants/<crate>/equivalent.txt` (written by
//! a person) lists the survivors judged equivalent, one mutant name per
//! line followed by ` # why`, and is left out of the adjusted score.
//!
//! Scope: spool-lock and spool-core whole; spool-service's adoption
//! machine and service loop (the files the issue asks to be scored).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

use crate::{cargo, run};

/// The crates scored, and the files of each that are mutated (empty: all).
const SCOPES: &[(&str, &[&str])] = &[
    ("spool-lock", &[]),
    ("spool-core", &[]),
    (
        "spool-service",
        &["spool-service/src/adoption*", "spool-service/src/service*"],
    ),
];

/// `cargo xtask mutants [CRATE...] [--shard K/N]`.
pub fn mutants(root: &Path, args: &[String]) -> Result<()> {
    let mut crates = Vec::new();
    let mut shard = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shard" => shard = Some(it.next().context("--shard takes K/N")?.clone()),
            c if SCOPES.iter().any(|(name, _)| *name == c) => crates.push(c.to_string()),
            other => bail!(
                "unknown argument {other:?}; usage: cargo xtask mutants [CRATE...] [--shard K/N]; crates: spool-lock, spool-core, spool-service"
            ),
        }
    }
    if crates.is_empty() {
        crates = SCOPES.iter().map(|(c, _)| c.to_string()).collect();
    }
    if Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("xtask: installing cargo-mutants from crates.io");
        run(cargo().args(["install", "--locked", "cargo-mutants"]))?;
    }
    let scratch = root.join("target/mutants");
    for krate in &crates {
        let files = SCOPES
            .iter()
            .find(|(c, _)| c == krate)
            .map(|(_, f)| *f)
            .unwrap_or(&[]);
        let out = scratch.join(krate);
        std::fs::create_dir_all(&out)?;
        let mut cmd = cargo();
        cmd.args([
            "mutants",
            "--package",
            krate,
            "--test-tool",
            "nextest",
            "--jobs",
            "1",
        ])
        .arg("--output")
        .arg(&out)
        .env("TMPDIR", &scratch);
        for f in files {
            cmd.args(["--file", f]);
        }
        if let Some(s) = &shard {
            cmd.args(["--shard", s]);
        }
        eprintln!("xtask: $ {cmd:?}");
        // Exit 2 (missed mutants) and 3 (timeouts) are results, not failures.
        let status = cmd.status().context("could not run cargo mutants")?;
        if !matches!(status.code(), Some(0 | 2 | 3)) {
            bail!("cargo mutants for {krate} failed: {status}");
        }
        let keep = root.join("mutants").join(krate);
        std::fs::create_dir_all(&keep)?;
        let read = |name: &str| -> Vec<String> {
            std::fs::read_to_string(out.join("mutants.out").join(name))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        };
        let mut counts = Vec::new();
        for name in ["caught.txt", "missed.txt", "timeout.txt", "unviable.txt"] {
            let mut lines = read(name);
            lines.sort();
            std::fs::write(keep.join(name), lines.join("\n") + "\n")?;
            counts.push(lines.len());
        }
        let equivalent: Vec<String> = std::fs::read_to_string(keep.join("equivalent.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(" # ").next())
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let missed = read("missed.txt");
        let judged = missed.iter().filter(|m| equivalent.contains(m)).count();
        let (caught, missed_n, timeout) = (counts[0], counts[1], counts[2]);
        let viable = caught + missed_n + timeout;
        let pct = |c: usize, v: usize| {
            if v == 0 {
                100.0
            } else {
                100.0 * c as f64 / v as f64
            }
        };
        let score = format!(
            "crate: {krate}\ncaught: {caught}\nmissed: {missed_n}\ntimeout: {timeout}\nunviable: {}\n\
             score (caught / viable): {:.1} %\nscore without the {judged} survivors judged equivalent: {:.1} %\n",
            counts[3],
            pct(caught, viable),
            pct(caught, viable - judged),
        );
        std::fs::write(keep.join("score.txt"), &score)?;
        print!("{score}");
    }
    Ok(())
}
