//! One cargo-mutants run with the options every run shares, and the
//! regex that names exactly one mutant (how a chunk lists its mutants).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// Runs one cargo-mutants command (`mutants --package …` already on it)
/// with the options every run shares, its output under `out`.
pub fn test_mutants(
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
pub fn exact_re(name: &str) -> String {
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
