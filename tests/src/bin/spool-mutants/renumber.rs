//! Committed mutant names whose lines moved (code added or removed above
//! them) renamed to this tree's listing, so an outcome stays with its
//! mutant.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

use crate::lists::{lines_of, merge, OUTCOMES};

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
pub fn renumber(keep: &Path, listed: &[String]) -> Result<usize> {
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
