//! `spool-mutants [CRATE...] [--shard K/N] [--file GLOB]... [--fresh]
//! [--lock FILE [--chunk N] [--untested | --missed] [--sample N --seed S]]
//! [--timeout SECS] [-- NEXTEST-ARGS...]`: mutation testing with
//! cargo-mutants, on demand (hours on 2 cores; never in CI). `cargo xtask
//! mutants ARGS` installs cargo-mutants when it is missing, builds this
//! binary and runs it at the workspace root (its working directory is the
//! root it scores).
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
//! Builds go to their own target directory per crate,
//! `target/mutants/build-<crate>` (under `$CARGO_TARGET_DIR` when it is
//! set; one per crate, so runs of two crates side by side do not rebuild
//! each other's artifacts), kept
//! between runs so each baseline is incremental; never the workspace's own
//! target directory, whose artifacts the scratch copy's builds would
//! overwrite with mutated code.
//!
//! `--lock FILE` shares the machine: the mutants are listed first (no
//! build), then tested in chunks of `--chunk N` (default 4), each chunk one
//! cargo-mutants run under `flock FILE`, so the lock is held for a few
//! mutants' builds and tests at a time and never for the whole run, and
//! the build and test timeouts never count a wait for the lock. Only the
//! first chunk runs cargo-mutants' unmutated baseline. Before testing, the
//! names in `mutants/<crate>/` whose lines moved (code added above them)
//! are renumbered to this tree's listing, so an outcome stays with its
//! mutant ([`renumber::renumber`]). Each chunk's
//! outcomes are merged into `mutants/<crate>/` as soon as it ends, so an
//! interrupted run keeps what it tested; `--untested` skips the mutants
//! those lists already hold (to resume), `--missed` re-tests only the
//! survivors of `missed.txt` (after adding tests). `--sample N --seed S`
//! tests only a seeded random sample of N of the mutants that would be
//! tested (with `--untested`: of the crate's untested rest), recorded in
//! `mutants/<crate>/sample-<S>.txt` (its first line says N of how many);
//! `score.txt` then gives the exhaustive part (the mutants in no sample)
//! and each sample's score with its 95 % Wilson interval apart, so a
//! sampled figure is never read as an exhaustive one. `--timeout SECS` bounds
//! each test run (default: cargo-mutants' own, from the baseline; with
//! `--lock`, 300 s). Arguments after `--` go to each test run (a nextest filter such
//! as `-E 'test(/adoption/)'`, to run only the tests of the mutated part).
//!
//! Scope ([`SCOPES`]): spool-lock and spool-core whole; spool-service's
//! adoption machine, service loop and drain.
//!
//! - [`cargo_mutants`] runs cargo-mutants once, each mutant of a chunk named
//!   by an exact regex;
//! - [`lists`] keeps the committed outcome lists and merges a run into them;
//! - [`renumber`] makes names whose lines moved follow their mutant;
//! - [`sample`] draws the seeded sample;
//! - [`score`] writes `score.txt`.

#![forbid(unsafe_code)]

mod cargo_mutants;
mod lists;
mod renumber;
mod sample;
mod score;

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

use cargo_mutants::{exact_re, test_mutants};
use lists::{lines_of, merge, OUTCOMES};
use renumber::renumber;
use sample::pick_sample;
use score::score;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = std::env::current_dir().context("finding the working directory")?;
    mutants(&root, &args)
}

/// One crate scored: the files mutated (empty: all) and the files left
/// out, which are test aids compiled only for tests or the `testing`
/// feature (seams, forks, fakes, the cross-process helper binary), not
/// product code.
struct Scope {
    krate: &'static str,
    files: &'static [&'static str],
    exclude: &'static [&'static str],
}

/// The crates scored.
const SCOPES: &[Scope] = &[
    Scope {
        krate: "spool-lock",
        files: &[],
        exclude: &[
            "spool-lock/src/fork_testing.rs",
            "spool-lock/src/seams.rs",
            "spool-lock/src/bin/*",
        ],
    },
    Scope {
        krate: "spool-core",
        files: &[],
        exclude: &["spool-core/src/seams.rs", "spool-core/src/sink/fake.rs"],
    },
    Scope {
        krate: "spool-service",
        files: &[
            // a glob without `/**` matches no file of a directory below
            "spool-service/src/adoption*",
            "spool-service/src/adoption/*",
            "spool-service/src/service*",
            "spool-service/src/drain*",
            "spool-service/src/drain/*",
        ],
        exclude: &[],
    },
];

/// The options (see the module doc), run for each crate asked for.
fn mutants(root: &Path, args: &[String]) -> Result<()> {
    let mut crates = Vec::new();
    let mut shard = None;
    let mut only_files = Vec::new();
    let mut fresh = false;
    let mut lock = None;
    let mut timeout = None;
    let mut chunk = 4usize;
    let mut untested = false;
    let mut only_missed = false;
    let mut sample = None;
    let mut seed = None;
    let mut test_args = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shard" => shard = Some(it.next().context("--shard takes K/N")?.clone()),
            "--file" => only_files.push(it.next().context("--file takes a glob")?.clone()),
            "--fresh" => fresh = true,
            "--lock" => lock = Some(it.next().context("--lock takes a lock file")?.clone()),
            "--timeout" => {
                let t = it.next().context("--timeout takes seconds")?;
                timeout = Some(
                    t.parse::<u64>()
                        .with_context(|| format!("--timeout {t:?}: not a number of seconds"))?,
                );
            }
            "--chunk" => {
                let n = it.next().context("--chunk takes a number of mutants")?;
                chunk = n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--chunk {n:?}: not a positive number"))?;
            }
            "--untested" => untested = true,
            "--missed" => only_missed = true,
            "--sample" => {
                let n = it.next().context("--sample takes a number of mutants")?;
                sample = Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .with_context(|| format!("--sample {n:?}: not a positive number"))?,
                );
            }
            "--seed" => {
                let n = it.next().context("--seed takes a number")?;
                seed = Some(
                    n.parse::<u64>()
                        .with_context(|| format!("--seed {n:?}: not a number"))?,
                );
            }
            "--" => test_args.extend(it.by_ref().cloned()),
            c if SCOPES.iter().any(|s| s.krate == c) => crates.push(c.to_string()),
            other => bail!(
                "unknown argument {other:?}; usage: cargo xtask mutants [CRATE...] [--shard K/N] \
                 [--file GLOB]... [--fresh] [--lock FILE [--chunk N] [--untested | --missed] \
                 [--sample N --seed S]] [--timeout SECS] [-- NEXTEST-ARGS...]; \
                 crates: spool-lock, spool-core, spool-service"
            ),
        }
    }
    if sample.is_some() != seed.is_some() {
        bail!("--sample N and --seed S go together (the seed makes the sample reproducible)");
    }
    if sample.is_some() && lock.is_none() {
        bail!("--sample needs --lock (the sample is drawn from the listed mutants)");
    }
    if crates.is_empty() {
        crates = SCOPES.iter().map(|s| s.krate.to_string()).collect();
    }
    // Under the workspace's target directory (`$CARGO_TARGET_DIR` when
    // set, as when worktrees share one), so every checkout reuses the one
    // warm `mutants/build-<crate>`.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let scratch = target.join("mutants");
    std::fs::create_dir_all(&scratch)?;
    for krate in &crates {
        let scope = SCOPES
            .iter()
            .find(|s| s.krate == krate)
            .context("a crate of SCOPES")?;
        let label = shard.as_deref().unwrap_or("all").replace('/', "-of-");
        let out = scratch.join(krate).join(label);
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)?;
        let keep = root.join("mutants").join(krate);
        if fresh {
            merge(&out, &keep, true)?;
        }
        let files: Vec<&str> = if only_files.is_empty() {
            scope.files.to_vec()
        } else {
            only_files.iter().map(String::as_str).collect()
        };
        let base = |cmd: &mut Command| {
            cmd.args(["mutants", "--package", krate]);
            for f in &files {
                cmd.args(["--file", f]);
            }
            for f in scope.exclude {
                cmd.args(["--exclude", f]);
            }
            if let Some(s) = &shard {
                cmd.args(["--shard", s]);
            }
        };
        let Some(lock) = &lock else {
            let mut cmd = Command::new("cargo-mutants");
            base(&mut cmd);
            if let Some(t) = timeout {
                cmd.args(["--timeout", &t.to_string()]);
            }
            test_mutants(&mut cmd, krate, &scratch, &out, &test_args)?;
            merge(&out.join("mutants.out"), &keep, false)?;
            continue;
        };
        let mut list = Command::new("cargo-mutants");
        base(&mut list);
        list.arg("--list");
        let listed = list
            .output()
            .context("could not run cargo-mutants --list")?;
        if !listed.status.success() {
            bail!(
                "cargo-mutants --list for {krate} failed: {}",
                String::from_utf8_lossy(&listed.stderr)
            );
        }
        let listed_names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let moved = renumber(&keep, &listed_names)?;
        if moved > 0 {
            eprintln!(
                "xtask: {krate}: {moved} mutant names in mutants/{krate}/ renumbered to the lines they moved to"
            );
        }
        let done: Vec<String> = if untested {
            OUTCOMES
                .iter()
                .flat_map(|n| lines_of(&keep.join(n)))
                .collect()
        } else {
            Vec::new()
        };
        let missed = lines_of(&keep.join("missed.txt"));
        let names: Vec<String> = listed_names
            .iter()
            .map(String::as_str)
            .filter(|l| !done.iter().any(|d| d == l))
            .filter(|l| !only_missed || missed.iter().any(|m| m == l))
            .map(str::to_owned)
            .collect();
        let names = match (sample, seed) {
            (Some(n), Some(seed)) if keep.join(format!("sample-{seed}.txt")).exists() => {
                // Resuming a sample drawn before: its members still to test.
                let members = lines_of(&keep.join(format!("sample-{seed}.txt")));
                if members.len().saturating_sub(1) != n {
                    eprintln!(
                        "xtask: {krate}: sample-{seed}.txt holds {} mutants, not {n}; resuming it as it is",
                        members.len().saturating_sub(1)
                    );
                }
                names.into_iter().filter(|m| members.contains(m)).collect()
            }
            (Some(n), Some(seed)) => {
                let picked = pick_sample(&names, n, seed);
                let mut text = format!(
                    "# seed {seed}: {} of {} mutants ({})\n",
                    picked.len(),
                    names.len(),
                    if untested {
                        "the untested ones"
                    } else if only_missed {
                        "the survivors"
                    } else {
                        "all listed"
                    }
                );
                for m in &picked {
                    text.push_str(m);
                    text.push('\n');
                }
                let path = keep.join(format!("sample-{seed}.txt"));
                std::fs::create_dir_all(&keep)?;
                std::fs::write(&path, text)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                picked
            }
            _ => names,
        };
        let chunks: Vec<&[String]> = names.chunks(chunk).collect();
        for (i, part) in chunks.iter().enumerate() {
            eprintln!(
                "xtask: {krate}: chunk {}/{} ({} mutants) under {lock}",
                i + 1,
                chunks.len(),
                part.len()
            );
            let dir = out.join(format!("chunk-{i}"));
            let mut cmd = Command::new("flock");
            cmd.args(["-o", lock, "cargo-mutants"]);
            base(&mut cmd);
            for name in *part {
                cmd.args(["--re", &exact_re(name)]);
            }
            cmd.args(["--timeout", &timeout.unwrap_or(300).to_string()]);
            if i > 0 {
                // The tree is the one the first chunk's baseline passed on.
                cmd.args(["--baseline", "skip"]);
            }
            test_mutants(&mut cmd, krate, &scratch, &dir, &test_args)?;
            merge(&dir.join("mutants.out"), &keep, false)?;
            let score = score(krate, &keep)?;
            std::fs::write(keep.join("score.txt"), &score)?;
        }
        let score = score(krate, &keep)?;
        std::fs::write(keep.join("score.txt"), &score)?;
        print!("{score}");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
