//! `cargo xtask fleet`: the fleet simulator (`tests/src/bin/spool-fleet`)
//! against a ClickHouse of its own. This side only orchestrates: it builds
//! the binary (`--release`), starts Debian's ClickHouse 18.16 under
//! `target/xtask/fleet-clickhouse/` (the `real_*` tests' set-up,
//! `servers::clickhouse`), runs `spool-fleet run` with the arguments given
//! and the server's URL, prints its report and stops the server.
//!
//! [`ci`] is the short pass of `cargo xtask test` (the real-server tier):
//! 20 nodes x 4 ranks for 30 s, one node SIGKILLed and restarted, on the
//! tier's ClickHouse, failing on any lost or duplicated pack (30 s, not a
//! minute: CI's whole suite has a hard 15-minute budget).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{cargo, run, servers, target_dir};

/// `cargo xtask fleet [--debug] ARGS...` (ARGS as `spool-fleet run` takes
/// them: `--nodes N --ranks R --rate P --minutes M [--kill K] ...`).
pub fn fleet_cmd(root: &Path, args: &[String]) -> Result<()> {
    let debug = args.iter().any(|a| a == "--debug");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--debug").collect();
    let bin = build(root, !debug)?;
    let clickhouse = servers::clickhouse::start_on(root, "fleet-clickhouse", &[])?;
    let url = clickhouse
        .var("SPOOL_TEST_CLICKHOUSE_URL")
        .context("the ClickHouse set-up names no SPOOL_TEST_CLICKHOUSE_URL")?
        .to_string();
    let mut cmd = Command::new(&bin);
    cmd.arg("run")
        .args(["--clickhouse", &url])
        .args(["--server-pid", &clickhouse.child.id().to_string()])
        .arg("--scratch")
        .arg(target_dir(root).join("fleet-data"))
        .args(args);
    let r = run(&mut cmd);
    drop(clickhouse);
    r
}

/// The short pass of `cargo xtask test`, on the real-server tier's
/// ClickHouse (its variables in `env`): 20 nodes x 4 ranks, one pack per
/// rank every 2 s, for 30 s, one node killed. The lease TTL is the
/// shortest the lease allows (5 s) so the killed node's successor adopts
/// its dead ranks within the pass.
pub fn ci(root: &Path, env: &[(String, String)]) -> Result<()> {
    let bin = build(root, false)?;
    let mut cmd = Command::new(&bin);
    cmd.arg("run")
        .args(["--nodes", "20", "--ranks", "4", "--rate", "0.5"])
        .args(["--minutes", "0.5", "--kill", "1", "--processes", "2"])
        .args(["--set", "lease.ttl=5s"])
        .arg("--scratch")
        .arg(target_dir(root).join("fleet-ci"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd).context("the fleet simulator's short pass failed (its report is above)")
}

/// Builds `spool-fleet` (with `--release` when `release`; else as the
/// tests' build does, [`crate::build_tests`]) and returns its path.
fn build(root: &Path, release: bool) -> Result<std::path::PathBuf> {
    if !release {
        crate::build_tests()?;
        return Ok(target_dir(root).join("debug/spool-fleet"));
    }
    let release_build = ["build", "--locked", "--release", "-p", "spool-tests"];
    run(cargo().args(release_build).args(["--bin", "spool-fleet"]))?;
    Ok(target_dir(root).join("release/spool-fleet"))
}
