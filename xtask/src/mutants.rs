//! `cargo xtask mutants [CRATE...] [--shard K/N] [--file GLOB]... [--fresh]`:
//! mutation testing with cargo-mutants, on demand (hours on 2 cores; never
//! in CI).
//!
//! Each crate's outcomes are committed under `mutants/<crate>/`:
//! `caught.txt`, `missed.txt`, `timeout.txt`, `unviable.txt` (one mutant
//! name a line, sorted) and `score.txt`, so the next run can be compared
//! with `git diff`. A run *merges* its outcomes into those lists (a mutant
//! it tested moves to the list of its new outcome), so a crate can be
//! scored shard by shard across sessions (`--shard 3/8`), or a few files
//! re-tested after new tests (`--file spool-lock/src/lock.rs`). `--fresh`
//! empties the lists first. `mutants/<crate>/equivalent.txt` (written by a
//! person) lists the survivors judged equivalent, one mutant name per line
//! followed by ` # why`, and is left out of the adjusted score.
//!
//! Builds go to their own target directory, `target/mutants/build`, kept
//! between runs so each baseline is incremental; never the workspace's own
//! target directory, whose artifacts the scratch copy's builds would
//! overwrite with mutated code.
//!
//! Scope: spool-lock and spool-core whole; spool-service's adoption
//! machine and service loop (the files the issue asks to be scored).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
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

/// The outcome lists, in the order of cargo-mutants' file names.
const OUTCOMES: [&str; 4] = ["caught.txt", "missed.txt", "timeout.txt", "unviable.txt"];

/// `cargo xtask mutants [CRATE...] [--shard K/N] [--file GLOB]... [--fresh]`.
pub fn mutants(root: &Path, args: &[String]) -> Result<()> {
    let mut crates = Vec::new();
    let mut shard = None;
    let mut only_files = Vec::new();
    let mut fresh = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shard" => shard = Some(it.next().context("--shard takes K/N")?.clone()),
            "--file" => only_files.push(it.next().context("--file takes a glob")?.clone()),
            "--fresh" => fresh = true,
            c if SCOPES.iter().any(|(name, _)| *name == c) => crates.push(c.to_string()),
            other => bail!(
                "unknown argument {other:?}; usage: cargo xtask mutants [CRATE...] [--shard K/N] \
                 [--file GLOB]... [--fresh]; crates: spool-lock, spool-core, spool-service"
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
        let scope = SCOPES
            .iter()
            .find(|(c, _)| c == krate)
            .map(|(_, f)| *f)
            .unwrap_or(&[]);
        let label = shard.as_deref().unwrap_or("all").replace('/', "-of-");
        let out = scratch.join(krate).join(label);
        let _ = std::fs::remove_dir_all(&out);
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
        .env("TMPDIR", &scratch)
        .env("CARGO_TARGET_DIR", scratch.join("build"));
        let files: Vec<&str> = if only_files.is_empty() {
            scope.to_vec()
        } else {
            only_files.iter().map(String::as_str).collect()
        };
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
        merge(&out.join("mutants.out"), &keep, fresh)?;
        let score = score(krate, &keep)?;
        std::fs::write(keep.join("score.txt"), &score)?;
        print!("{score}");
    }
    Ok(())
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Merges one run's outcome lists (`run`) into the committed ones
/// (`keep`): every mutant the run tested is filed under its new outcome
/// only.
fn merge(run: &Path, keep: &Path, fresh: bool) -> Result<()> {
    std::fs::create_dir_all(keep)?;
    let mut outcome: BTreeMap<String, usize> = BTreeMap::new();
    if !fresh {
        for (i, name) in OUTCOMES.iter().enumerate() {
            for m in lines_of(&keep.join(name)) {
                outcome.insert(m, i);
            }
        }
    }
    for (i, name) in OUTCOMES.iter().enumerate() {
        for m in lines_of(&run.join(name)) {
            outcome.insert(m, i);
        }
    }
    for (i, name) in OUTCOMES.iter().enumerate() {
        let list: Vec<&str> = outcome
            .iter()
            .filter(|(_, o)| **o == i)
            .map(|(m, _)| m.as_str())
            .collect();
        let mut text = list.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        std::fs::write(keep.join(name), text)
            .with_context(|| format!("cannot write {}", keep.join(name).display()))?;
    }
    Ok(())
}

/// The score text of the committed lists under `keep`.
fn score(krate: &str, keep: &Path) -> Result<String> {
    let counts: Vec<usize> = OUTCOMES
        .iter()
        .map(|n| lines_of(&keep.join(n)).len())
        .collect();
    let equivalent: Vec<String> = lines_of(&keep.join("equivalent.txt"))
        .into_iter()
        .filter_map(|l| l.split(" # ").next().map(|m| m.trim().to_string()))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let missed = lines_of(&keep.join("missed.txt"));
    let judged = missed.iter().filter(|m| equivalent.contains(m)).count();
    let (caught, missed_n, timeout) = (counts[0], counts[1], counts[2]);
    // A timeout counts as caught (the mutant hung the tests), as
    // cargo-mutants itself reads it.
    let viable = caught + missed_n + timeout;
    let pct = |c: usize, v: usize| {
        if v == 0 {
            100.0
        } else {
            100.0 * c as f64 / v as f64
        }
    };
    Ok(format!(
        "crate: {krate}\ncaught: {caught}\nmissed: {missed_n}\ntimeout: {timeout}\nunviable: {}\n\
         score (caught + timeout) / viable: {:.1} %\n\
         score without the {judged} survivors judged equivalent: {:.1} %\n",
        counts[3],
        pct(caught + timeout, viable),
        pct(caught + timeout, viable - judged),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_moves_each_mutant_it_tested_to_its_new_outcome() {
        let tmp = std::env::temp_dir().join(format!("xtask-mutants-{}", std::process::id()));
        let (run, keep) = (tmp.join("run"), tmp.join("keep"));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(keep.join("missed.txt"), "a\nb\n").unwrap();
        std::fs::write(keep.join("caught.txt"), "c\n").unwrap();
        std::fs::write(run.join("caught.txt"), "a\n").unwrap();
        std::fs::write(run.join("missed.txt"), "d\n").unwrap();
        merge(&run, &keep, false).unwrap();
        assert_eq!(lines_of(&keep.join("caught.txt")), ["a", "c"]);
        assert_eq!(lines_of(&keep.join("missed.txt")), ["b", "d"]);
        std::fs::write(keep.join("equivalent.txt"), "b # same behaviour\n").unwrap();
        let s = score("x", &keep).unwrap();
        assert!(s.contains("(caught + timeout) / viable: 50.0 %"), "{s}");
        assert!(s.contains("judged equivalent: 66.7 %"), "{s}");
        merge(&run, &keep, true).unwrap();
        assert_eq!(lines_of(&keep.join("caught.txt")), ["a"]);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
