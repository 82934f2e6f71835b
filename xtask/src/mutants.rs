//! `cargo xtask mutants ARGS`: mutation testing with cargo-mutants, on
//! demand (hours on 2 cores; never in CI). Installs cargo-mutants when it
//! is missing, builds `tests/src/bin/spool-mutants` (the bookkeeping:
//! chunks, renumbering, the outcome lists under `mutants/<crate>/`; its
//! module doc describes every option) and runs it at the workspace root
//! with the arguments as given. With `--lock FILE` the build runs under
//! `flock FILE` too, as each of the binary's chunks does.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;

use crate::{cargo, run, target_dir};

/// `cargo xtask mutants ARGS` (the binary's options).
pub fn mutants(root: &Path, args: &[String]) -> Result<()> {
    crate::cargo_install("mutants", "cargo-mutants")?;
    let lock = args
        .windows(2)
        .take_while(|w| w[0] != "--")
        .find(|w| w[0] == "--lock")
        .map(|w| w[1].clone());
    let mut build = match &lock {
        Some(lock) => {
            let mut flock = Command::new("flock");
            flock
                .arg(lock)
                .arg(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            flock
        }
        None => cargo(),
    };
    build.args(["build", "-p", "spool-tests", "--bin", "spool-mutants"]);
    run(&mut build).context("building spool-mutants")?;
    run(Command::new(target_dir(root).join("debug/spool-mutants"))
        .args(args)
        .current_dir(root))
}
