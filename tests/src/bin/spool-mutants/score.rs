//! `score.txt`: the tally of the committed lists, the exhaustive part and
//! each sample apart with its 95 % Wilson interval.

use anyhow::Result;
use std::path::Path;

use crate::lists::{lines_of, OUTCOMES};

/// The score text of the committed lists under `keep`: every mutant
/// tested, then the exhaustive part (the mutants of no sample) and each
/// sample (`sample-<seed>.txt`) apart.
pub fn score(krate: &str, keep: &Path) -> Result<String> {
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

/// The 95 % Wilson score interval of `k` successes in `n` trials, in
/// percent.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
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
