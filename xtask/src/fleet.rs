//! `cargo xtask fleet`: the fleet simulator (`tests/src/bin/spool-fleet`)
//! against a ClickHouse of its own. This side only orchestrates: it builds
//! the binary (`--release`), starts Debian's ClickHouse 18.16 under
//! `target/xtask/fleet-clickhouse/` (the `real_*` tests' set-up,
//! `servers::clickhouse`) — or, with `--replicas N`, ZooKeeper and N
//! replicas of one shard (`servers::replicas`) with `catalog.cluster` set
//! for every engine and the replicas described in the simulator's
//! environment (so `--kill-replica I` can SIGKILL one and start it
//! again) —, runs `spool-fleet run` with the arguments given
//! and the server's URL at the lowest CPU priority (`nice -n 19`: the
//! simulated nodes stand for machines of their own, so they must not
//! starve the server on the cores they share), prints its report and stops
//! the servers.
//!
//! [`ci`] is the short pass of `cargo xtask test` (the real-server tier):
//! 20 nodes x 4 ranks for 30 s, one node SIGKILLed and restarted, on the
//! tier's ClickHouse, failing on any lost or duplicated pack (30 s, not a
//! minute: CI's whole suite has a hard 15-minute budget).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, run, servers, target_dir};

/// `cargo xtask fleet [--debug] [--replicas N] [--s3s] ARGS...` (`--s3s`:
/// the nodes' store is s3s-fs, an object store, so they bundle; ARGS as
/// `spool-fleet run` takes them: `--nodes N --ranks R --rate P --minutes M
/// [--kill K] [--kill-replica I] ...`).
pub fn fleet_cmd(root: &Path, args: &[String]) -> Result<()> {
    let (mut debug, mut replicas, mut rest) = (false, None, Vec::new());
    let mut s3s = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--debug" => debug = true,
            "--s3s" => s3s = true,
            "--replicas" => {
                let n = it.next().and_then(|n| n.parse::<usize>().ok());
                let n = n.filter(|n| (2..=9).contains(n));
                replicas = Some(n.context("--replicas takes a number of replicas, 2 to 9")?);
            }
            _ => rest.push(a),
        }
    }
    let bin = build(root, !debug)?;
    // one server, or ZooKeeper and N replicas of one shard whose catalog
    // tables are replicated `ON CLUSTER` (a row confirmed on a quorum of 2)
    let (servers, url_var) = match replicas {
        None => {
            let one = servers::clickhouse::start_on(root, "fleet-clickhouse", &[])?;
            (vec![one], "SPOOL_TEST_CLICKHOUSE_URL")
        }
        Some(n) => {
            let all = servers::replicas::start_named(root, n, "", &[])?;
            (all, "SPOOL_TEST_CLICKHOUSE_REPLICAS")
        }
    };
    let url = servers.iter().find_map(|s| s.var(url_var));
    // the (first) ClickHouse server's pid: the report gives its CPU time
    let server = servers.iter().find(|s| s.name.starts_with("clickhouse"));
    let (Some(url), Some(server)) = (url, server) else {
        bail!("the ClickHouse set-up names no catalog URL or server");
    };
    // at the lowest priority (nodes stand for machines of their own)
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19"]).arg(&bin);
    cmd.arg("run").args(["--clickhouse", url]);
    cmd.args(["--server-pid", &server.child.id().to_string()]);
    if replicas.is_some() {
        let cluster = servers::replicas::CLUSTER;
        cmd.args(["--set", &format!("catalog.cluster={cluster}")]);
        // the replicas' configs and pids, for `--kill-replica I`
        for s in &servers {
            cmd.envs(s.env.iter().map(|(k, v)| (k, v)));
        }
    }
    // an object store that bundles: s3s-fs, the nodes' credentials in
    // their environment, its bucket's directory for the oracle
    let store = if s3s {
        let s = servers::s3s::start(root)?;
        let var = |k: &str| {
            s.var(k)
                .map(str::to_string)
                .with_context(|| format!("s3s-fs names no {k}"))
        };
        let (endpoint, bucket) = (
            var("SPOOL_BENCH_S3S_ENDPOINT")?,
            var("SPOOL_BENCH_S3S_BUCKET")?,
        );
        let (data, key) = (var("SPOOL_BENCH_S3S_DATA")?, var("SPOOL_BENCH_S3S_KEY")?);
        cmd.args([
            "--store",
            &format!("s3://{bucket}/fleet"),
            "--store-dir",
            &data,
        ]);
        cmd.envs([
            ("AWS_ENDPOINT", endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", key.as_str()),
        ]);
        Some(s)
    } else {
        None
    };
    cmd.arg("--scratch")
        .arg(target_dir(root).join("fleet-data"))
        .args(rest);
    let r = run(&mut cmd);
    drop(store);
    drop(servers);
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
        .args(["--minutes", "0.35", "--kill", "1", "--processes", "2"])
        .args(["--set", "lease.ttl=5s"])
        .arg("--scratch")
        .arg(target_dir(root).join("fleet-ci"));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
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
