//! `cargo xtask mutants [CRATE...] [--shard K/N] [--file GLOB]... [--fresh]
//! [--lock FILE [--chunk N] [--untested | --missed] [--sample N --seed S]]
//! [--timeout SECS] [-- NEXTEST-ARGS...]`: mutation testing with
//! cargo-mutants, on demand (hours on 2 cores; never in CI).
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
//! mutant ([`renumber`]). Each chunk's
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
//! Scope: spool-lock and spool-core whole; spool-service's adoption
//! machine, service loop and upload pipeline (the files the issue asks to
//! be scored).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::{cargo, run};

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
            "spool-service/src/adoption*",
            "spool-service/src/service*",
            "spool-service/src/pipeline*",
        ],
        exclude: &[],
    },
];

/// The outcome lists, in the order of cargo-mutants' file names.
const OUTCOMES: [&str; 4] = ["caught.txt", "missed.txt", "timeout.txt", "unviable.txt"];

/// `cargo xtask mutants [CRATE...] [--shard K/N] [--file GLOB]... [--fresh]
/// [--lock FILE] [--timeout SECS] [-- NEXTEST-ARGS...]`.
pub fn mutants(root: &Path, args: &[String]) -> Result<()> {
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
    if Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("xtask: installing cargo-mutants from crates.io");
        run(cargo().args(["install", "--locked", "cargo-mutants"]))?;
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

/// Runs one cargo-mutants command (`mutants --package …` already on it)
/// with the options every run shares, its output under `out`.
fn test_mutants(
    cmd: &mut Command,
    krate: &str,
    scratch: &Path,
    out: &Path,
    test_args: &[String],
) -> Result<()> {
    std::fs::create_dir_all(out)?;
    cmd.args(["--test-tool", "nextest", "--jobs", "1"])
        .arg("--output")
        .arg(out)
        .env("TMPDIR", scratch)
        .env("CARGO_TARGET_DIR", scratch.join(format!("build-{krate}")));
    if !test_args.is_empty() {
        cmd.arg("--").args(test_args);
    }
    eprintln!("xtask: $ {cmd:?}");
    // Exit 2 (missed mutants) and 3 (timeouts) are results, not failures.
    let status = cmd.status().context("could not run cargo-mutants")?;
    if !matches!(status.code(), Some(0 | 2 | 3)) {
        bail!(
            "cargo-mutants for {krate} failed: {status} (its log: {})",
            out.display()
        );
    }
    Ok(())
}

/// A regex matching exactly one mutant name (cargo-mutants' `--re` is
/// matched against `file:line:col: description`).
fn exact_re(name: &str) -> String {
    let mut re = String::from("^");
    for c in name.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            re.push('\\');
        }
        re.push(c);
    }
    re.push('$');
    re
}

/// `n` of `names` (all of them if fewer), drawn by a partial
/// Fisher-Yates shuffle seeded with `seed` (splitmix64), returned in the
/// listing's order: the same seed over the same listing picks the same
/// mutants.
fn pick_sample(names: &[String], n: usize, seed: u64) -> Vec<String> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut idx: Vec<usize> = (0..names.len()).collect();
    let n = n.min(names.len());
    for i in 0..n {
        let j = i + (next() % (idx.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut picked = idx[..n].to_vec();
    picked.sort_unstable();
    picked.into_iter().map(|i| names[i].clone()).collect()
}

/// The 95 % Wilson score interval of `k` successes in `n` trials, in
/// percent.
fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 100.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let d = 1.0 + z * z / n;
    let c = (p + z * z / (2.0 * n)) / d;
    let h = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / d;
    (100.0 * (c - h).max(0.0), 100.0 * (c + h).min(1.0))
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

/// A mutant's file and description (what stays when its line moves).
type NameKey<'a> = (&'a str, &'a str);

/// A mutant name split into its place and what it does:
/// `file:line:col: description` gives `((file, description), (line, col))`.
fn name_parts(name: &str) -> Option<(NameKey<'_>, (u32, u32))> {
    let mut it = name.splitn(3, ':');
    let (file, line, rest) = (it.next()?, it.next()?, it.next()?);
    let (col, what) = rest.split_once(": ")?;
    Some(((file, what), (line.parse().ok()?, col.parse().ok()?)))
}

/// How far (in lines) a renamed mutant may have moved to be paired with
/// its new name when the counts of a file's and description's mutants
/// differ.
const MAX_SHIFT: u32 = 12;

/// Renames the mutants of the committed lists under `keep` whose lines
/// moved (code added or removed above them) to their names in `listed`
/// (this tree's listing), so an outcome stays with its mutant: a name no
/// longer listed is matched with the listed names of the same file and
/// description that no list holds yet — in order when both are as many,
/// else by the smallest shift of at most [`MAX_SHIFT`] lines in the same
/// column. A stale name whose counterpart (same file, description and
/// column, within [`MAX_SHIFT`] lines) already has an outcome under its
/// new name is a duplicate: dropped from the outcome lists and
/// `equivalent.txt`, renamed in the samples. Rewrites the outcome lists,
/// the samples and `equivalent.txt`; returns how many names changed.
fn renumber(keep: &Path, listed: &[String]) -> Result<usize> {
    use std::collections::BTreeSet;
    let mut files: Vec<std::path::PathBuf> = OUTCOMES.iter().map(|n| keep.join(n)).collect();
    if let Ok(dir) = std::fs::read_dir(keep) {
        for e in dir.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("sample-") && n.ends_with(".txt") {
                files.push(e.path());
            }
        }
    }
    files.push(keep.join("equivalent.txt"));
    let name_of =
        |line: &str| -> String { line.split(" # ").next().unwrap_or("").trim().to_owned() };
    let known: BTreeSet<String> = files
        .iter()
        .flat_map(|f| lines_of(f))
        .filter(|l| !l.starts_with('#'))
        .map(|l| name_of(&l))
        .collect();
    let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    type Group<'a> = BTreeMap<NameKey<'a>, Vec<((u32, u32), &'a str)>>;
    let mut stale: Group = BTreeMap::new();
    let mut fresh: Group = BTreeMap::new();
    for name in &known {
        if !listed_set.contains(name.as_str()) {
            if let Some((key, at)) = name_parts(name) {
                stale.entry(key).or_default().push((at, name));
            }
        }
    }
    for name in listed {
        if !known.contains(name) {
            if let Some((key, at)) = name_parts(name) {
                fresh.entry(key).or_default().push((at, name));
            }
        }
    }
    // Names that have an outcome already, by place: where a stale name's
    // counterpart was tested afresh, the stale one is a duplicate.
    let mut tested: Group = BTreeMap::new();
    for name in listed {
        if known.contains(name) {
            if let Some((key, at)) = name_parts(name) {
                tested.entry(key).or_default().push((at, name));
            }
        }
    }
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    // Stale names whose mutant has an outcome under its new name: dropped
    // from the outcome lists, renamed in the samples.
    let mut duplicate: BTreeMap<String, String> = BTreeMap::new();
    for (key, mut old) in stale {
        let mut new = fresh.remove(&key).unwrap_or_default();
        old.sort_unstable();
        new.sort_unstable();
        let twins = tested.get(&key).cloned().unwrap_or_default();
        // Pair by the smallest shift, same column, at most MAX_SHIFT lines,
        // nearest first, against the untested names and the tested ones
        // (a stale name nearest a tested one is its duplicate).
        let targets: Vec<((u32, u32), &str, bool)> = new
            .iter()
            .map(|&(at, n)| (at, n, false))
            .chain(twins.iter().map(|&(at, n)| (at, n, true)))
            .collect();
        let mut pairs: Vec<(u32, usize, usize)> = Vec::new();
        for (i, ((ol, oc), _)) in old.iter().enumerate() {
            for (j, ((nl, nc), _, _)) in targets.iter().enumerate() {
                if oc == nc && ol.abs_diff(*nl) <= MAX_SHIFT {
                    pairs.push((ol.abs_diff(*nl), i, j));
                }
            }
        }
        pairs.sort_unstable();
        let (mut old_done, mut target_done) = (vec![false; old.len()], vec![false; targets.len()]);
        let (mut moved, mut twinned) = (Vec::new(), Vec::new());
        for (_, i, j) in pairs {
            if !old_done[i] && !target_done[j] {
                old_done[i] = true;
                target_done[j] = true;
                let (_, name, is_twin) = targets[j];
                let pair = (old[i].1.to_owned(), name.to_owned());
                if is_twin {
                    twinned.push(pair);
                } else {
                    moved.push(pair);
                }
            }
        }
        let unpaired = old_done.iter().filter(|d| !**d).count();
        if unpaired > 0 && twinned.is_empty() && old.len() == new.len() {
            // As many stale as untested names, not all within reach by
            // column and shift (a line reformatted): pair them in order.
            moved = old
                .iter()
                .zip(&new)
                .map(|((_, o), (_, n))| ((*o).to_owned(), (*n).to_owned()))
                .collect();
        } else if unpaired > 0 {
            eprintln!(
                "xtask: {}: {unpaired} of {} mutants '{}' no longer listed have no counterpart within {MAX_SHIFT} lines: left as they are (re-test them)",
                key.0,
                old.len(),
                key.1,
            );
        }
        map.extend(moved);
        duplicate.extend(twinned);
    }
    if map.is_empty() && duplicate.is_empty() {
        return Ok(0);
    }
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        // Samples and judgements keep a duplicate under its new name.
        let is_sample = f.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            n.starts_with("sample-") || n == "equivalent.txt"
        });
        let mut out = String::new();
        for line in text.lines() {
            let name = name_of(line);
            let renamed = match (map.get(&name), duplicate.get(&name)) {
                _ if line.starts_with('#') => None,
                (Some(new), _) => Some(new),
                (None, Some(twin)) if is_sample => Some(twin),
                (None, Some(_)) => continue,
                (None, None) => None,
            };
            match renamed {
                Some(new) => {
                    out.push_str(new);
                    out.push_str(&line.trim_end()[name.len()..]);
                }
                None => out.push_str(line),
            }
            out.push('\n');
        }
        std::fs::write(f, out).with_context(|| format!("cannot write {}", f.display()))?;
    }
    // The outcome lists stay sorted.
    merge(&keep.join("no-run"), keep, false)?;
    Ok(map.len() + duplicate.len())
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

/// The score text of the committed lists under `keep`: every mutant
/// tested, then the exhaustive part (the mutants of no sample) and each
/// sample (`sample-<seed>.txt`) apart.
fn score(krate: &str, keep: &Path) -> Result<String> {
    let lists: Vec<Vec<String>> = OUTCOMES.iter().map(|n| lines_of(&keep.join(n))).collect();
    let mut samples: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(keep)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_else(|_| Vec::new());
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(seed) = name
            .strip_prefix("sample-")
            .and_then(|n| n.strip_suffix(".txt"))
        {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let head = text.lines().next().unwrap_or("").trim_start_matches("# ");
            let members = lines_of(&path)
                .into_iter()
                .filter(|l| !l.starts_with('#'))
                .collect();
            samples.push((seed.to_string(), head.to_string(), members));
        }
    }
    let in_sample = |m: &String| samples.iter().any(|(_, _, s)| s.contains(m));
    let mut text = tally(krate, &lists, keep, "every mutant tested")?;
    if !samples.is_empty() {
        let exhaustive: Vec<Vec<String>> = lists
            .iter()
            .map(|l| l.iter().filter(|m| !in_sample(m)).cloned().collect())
            .collect();
        text.push_str(&tally(
            krate,
            &exhaustive,
            keep,
            "exhaustive part (in no sample)",
        )?);
        for (seed, head, members) in &samples {
            let of = |i: usize| lists[i].iter().filter(|m| members.contains(m)).count();
            let (caught, missed, timeout, unviable) = (of(0), of(1), of(2), of(3));
            let untested = members.len() - caught - missed - timeout - unviable;
            let viable = caught + missed + timeout;
            let (lo, hi) = wilson(caught + timeout, viable);
            text.push_str(&format!(
                "sample {seed} ({head}): caught {caught}, missed {missed}, timeout {timeout}, \
                 unviable {unviable}, not tested yet {untested}; \
                 score {:.1} % of {viable} viable, 95 % Wilson interval {lo:.1}-{hi:.1} %\n",
                if viable == 0 {
                    0.0
                } else {
                    100.0 * (caught + timeout) as f64 / viable as f64
                },
            ));
        }
    }
    Ok(text)
}

/// One score block over `lists` (the four outcome lists).
fn tally(krate: &str, lists: &[Vec<String>], keep: &Path, what: &str) -> Result<String> {
    let counts: Vec<usize> = lists.iter().map(Vec::len).collect();
    let equivalent: Vec<String> = lines_of(&keep.join("equivalent.txt"))
        .into_iter()
        .filter_map(|l| l.split(" # ").next().map(|m| m.trim().to_string()))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let judged = lists[1].iter().filter(|m| equivalent.contains(m)).count();
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
        "crate: {krate} ({what})\ncaught: {caught}\nmissed: {missed_n}\ntimeout: {timeout}\nunviable: {}\n\
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

    #[test]
    fn a_seeded_sample_is_reproducible_distinct_and_in_listing_order() {
        let names: Vec<String> = (0..200).map(|i| format!("m{i:03}")).collect();
        let a = pick_sample(&names, 30, 7);
        assert_eq!(a, pick_sample(&names, 30, 7));
        assert_ne!(a, pick_sample(&names, 30, 8));
        assert_eq!(a.len(), 30);
        let mut sorted = a.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, a, "distinct and in the listing's order");
        // Not just the front of the list: the draw spreads over it.
        assert!(a.iter().any(|m| m.as_str() >= "m100"), "{a:?}");
        assert_eq!(pick_sample(&names[..5], 30, 7), names[..5].to_vec());
        let (lo, hi) = wilson(9, 10);
        assert!(
            (lo - 59.6).abs() < 0.1 && (hi - 98.2).abs() < 0.1,
            "{lo} {hi}"
        );
        assert_eq!(wilson(0, 0), (0.0, 100.0));
    }

    #[test]
    fn a_samples_score_is_reported_apart_from_the_exhaustive_part() {
        let keep = std::env::temp_dir().join(format!("xtask-sample-{}", std::process::id()));
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(keep.join("caught.txt"), "a\nb\ns1\ns2\ns3\n").unwrap();
        std::fs::write(keep.join("missed.txt"), "c\ns4\n").unwrap();
        std::fs::write(
            keep.join("sample-5.txt"),
            "# seed 5: 5 of 40 mutants\ns1\ns2\ns3\ns4\ns5\n",
        )
        .unwrap();
        let s = score("x", &keep).unwrap();
        assert!(
            s.contains("(every mutant tested)\ncaught: 5\nmissed: 2"),
            "{s}"
        );
        assert!(
            s.contains("(exhaustive part (in no sample))\ncaught: 2\nmissed: 1"),
            "{s}"
        );
        assert!(
            s.contains("sample 5 (seed 5: 5 of 40 mutants): caught 3, missed 1, timeout 0, unviable 0, not tested yet 1; score 75.0 % of 4 viable"),
            "{s}"
        );
        std::fs::remove_dir_all(&keep).unwrap();
    }

    #[test]
    fn names_whose_lines_moved_are_renumbered_in_every_list() {
        let keep = std::env::temp_dir().join(format!("xtask-renumber-{}", std::process::id()));
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(
            keep.join("caught.txt"),
            "a.rs:10:5: replace | with & in f\na.rs:3:1: replace g -> bool with true\n",
        )
        .unwrap();
        std::fs::write(
            keep.join("missed.txt"),
            "a.rs:20:9: replace | with & in f\n",
        )
        .unwrap();
        std::fs::write(
            keep.join("sample-1.txt"),
            "# seed 1: 1 of 9 mutants\na.rs:20:9: replace | with & in f\n",
        )
        .unwrap();
        std::fs::write(
            keep.join("equivalent.txt"),
            "# header\na.rs:20:9: replace | with & in f # same bits\n",
        )
        .unwrap();
        // Two lines added above line 10; g did not move; h is new.
        let listed: Vec<String> = [
            "a.rs:3:1: replace g -> bool with true",
            "a.rs:12:5: replace | with & in f",
            "a.rs:22:9: replace | with & in f",
            "a.rs:30:1: replace h -> bool with true",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(renumber(&keep, &listed).unwrap(), 2);
        assert_eq!(
            lines_of(&keep.join("caught.txt")),
            [
                "a.rs:12:5: replace | with & in f",
                "a.rs:3:1: replace g -> bool with true"
            ]
        );
        assert_eq!(
            lines_of(&keep.join("missed.txt")),
            ["a.rs:22:9: replace | with & in f"]
        );
        assert_eq!(
            lines_of(&keep.join("sample-1.txt"))[1],
            "a.rs:22:9: replace | with & in f"
        );
        assert_eq!(
            lines_of(&keep.join("equivalent.txt")),
            ["# header", "a.rs:22:9: replace | with & in f # same bits"]
        );
        assert_eq!(renumber(&keep, &listed).unwrap(), 0, "nothing moved since");
        std::fs::remove_dir_all(&keep).unwrap();
    }

    #[test]
    fn unequal_groups_pair_by_the_nearest_shift_and_tested_twins_drop_stale_names() {
        let keep =
            std::env::temp_dir().join(format!("xtask-renumber-shift-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&keep);
        std::fs::create_dir_all(&keep).unwrap();
        // Every `|` → `^` of f moved one line down (a line added at 15):
        // 20, 40 and 50 are stale; 40's new name 41 was tested afresh
        // already (a duplicate); 30 is new code; nothing is within reach
        // of 90, whose code is gone.
        std::fs::write(
            keep.join("caught.txt"),
            "a.rs:20:9: replace | with ^ in f\na.rs:40:9: replace | with ^ in f\na.rs:41:9: replace | with ^ in f\na.rs:90:9: replace | with ^ in f\n",
        )
        .unwrap();
        std::fs::write(
            keep.join("missed.txt"),
            "a.rs:50:9: replace | with ^ in f\n",
        )
        .unwrap();
        std::fs::write(
            keep.join("sample-2.txt"),
            "# seed 2: 2 of 9 mutants\na.rs:40:9: replace | with ^ in f\na.rs:50:9: replace | with ^ in f\n",
        )
        .unwrap();
        let listed: Vec<String> = [
            "a.rs:21:9: replace | with ^ in f",
            "a.rs:30:9: replace | with ^ in f",
            "a.rs:41:9: replace | with ^ in f",
            "a.rs:51:9: replace | with ^ in f",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(renumber(&keep, &listed).unwrap(), 3);
        assert_eq!(
            lines_of(&keep.join("caught.txt")),
            [
                "a.rs:21:9: replace | with ^ in f",
                "a.rs:41:9: replace | with ^ in f",
                "a.rs:90:9: replace | with ^ in f"
            ]
        );
        assert_eq!(
            lines_of(&keep.join("missed.txt")),
            ["a.rs:51:9: replace | with ^ in f"]
        );
        assert_eq!(
            lines_of(&keep.join("sample-2.txt"))[1..],
            [
                "a.rs:41:9: replace | with ^ in f",
                "a.rs:51:9: replace | with ^ in f"
            ]
        );
        std::fs::remove_dir_all(&keep).unwrap();
    }

    #[test]
    fn a_chunk_names_each_mutant_by_an_exact_regex() {
        let name = "spool-lock/src/record.rs:174:67: replace > with >= in OwnerRecord::parse";
        assert_eq!(
            exact_re(name),
            "^spool\\-lock/src/record\\.rs:174:67: replace > with >= in OwnerRecord::parse$"
        );
        assert_eq!(
            exact_re("a.rs:1:2: replace f -> Option<(bool, Fd)> with Ok(vec![0])"),
            "^a\\.rs:1:2: replace f \\-> Option<\\(bool, Fd\\)> with Ok\\(vec!\\[0\\]\\)$"
        );
    }
}
