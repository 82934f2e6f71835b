//! The outcome lists committed under `mutants/<crate>/` (one mutant name
//! a line, sorted) and how a run's lists merge into them.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The outcome lists, in the order of cargo-mutants' file names.
pub const OUTCOMES: [&str; 4] = ["caught.txt", "missed.txt", "timeout.txt", "unviable.txt"];

/// The non-empty lines of `path`, trimmed (none when it cannot be read).
pub fn lines_of(path: &Path) -> Vec<String> {
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
pub fn merge(run: &Path, keep: &Path, fresh: bool) -> Result<()> {
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
