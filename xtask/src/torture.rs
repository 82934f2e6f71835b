//! `cargo xtask torture`: builds the torture binary
//! (`tests/src/bin/spool-torture`, RELIABILITY.md "Crash torture") with
//! `spool-with-seams` and `fault-proxy` beside it, starts the servers a
//! variant needs when `cargo xtask servers up`'s environment is not set
//! (`--store s3`: moto, `--catalog clickhouse`: ClickHouse), and runs it with
//! the arguments as given. `cargo xtask test` runs its CI passes (`ci`,
//! `ci-disk`, `ci-faults`, `ci-lease-netns-replicas`: their seeds and lengths are the
//! binary's).
//!
//! The two-node pass (`--lease-netns`) starts a ClickHouse of its own on
//! its bridge's address once it has made the bridge: it runs
//! `xtask servers clickhouse --listen ADDR` ([`own_clickhouse`]; this
//! binary's path is in `SPOOL_TORTURE_XTASK`).

use crate::servers::{self, ServerProcess};
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The prefix of a two-node pass's ClickHouse state directory under
/// `<root>/target/xtask` (the serving xtask's pid follows).
const CLICKHOUSE_DIR: &str = "lease-netns-clickhouse-";

/// Builds `spool` and the test helper binaries (`spool-with-seams`,
/// `fault-proxy`, `spool-torture`) as the tests' build does
/// ([`crate::build_tests`]); returns the torture's command, with this
/// xtask's path in its environment.
fn build(root: &Path) -> Result<Command> {
    crate::build_tests()?;
    let mut cmd = Command::new(crate::target_dir(root).join("debug/spool-torture"));
    cmd.env(
        "SPOOL_TORTURE_XTASK",
        std::env::current_exe().context("finding the xtask binary")?,
    );
    Ok(cmd)
}

/// `cargo xtask torture ARGS` (the binary's options; see its docs).
pub fn torture_cmd(root: &Path, args: &[String]) -> Result<()> {
    let mut cmd = build(root)?;
    let given = |flag: &str, value: &str| args.windows(2).any(|w| w[0] == flag && w[1] == value);
    let unset = |var: &str| std::env::var_os(var).is_none();
    let netns = args.iter().any(|a| a == "--lease-netns");
    // servers started here live until the torture ends
    let mut started: Vec<ServerProcess> = Vec::new();
    if !netns && given("--store", "s3") && unset("SPOOL_TEST_S3_ENDPOINT") {
        started.push(servers::moto::start_in(root, "torture-moto").context(
            "starting moto for --store s3 (or run `cargo xtask servers up` and export the \
             SPOOL_TEST_S3_* it prints)",
        )?);
    }
    if !netns && given("--catalog", "clickhouse") && unset("SPOOL_TEST_CLICKHOUSE_HTTP") {
        started.push(
            servers::clickhouse::start_on(root, "torture-clickhouse", &[]).context(
                "starting ClickHouse for --catalog clickhouse (or run `cargo xtask servers up` \
                 and export the SPOOL_TEST_CLICKHOUSE_* it prints)",
            )?,
        );
    }
    for s in &started {
        cmd.envs(s.env.iter().map(|(k, v)| (k, v)));
    }
    crate::run(cmd.args(args))
}

/// One of CI's short passes (`cargo xtask test`): `ci` (crash, after the
/// fast tier), `ci-disk` (root; skipped, saying why, otherwise),
/// `ci-faults` (on the real tier's servers, their variables in `env`),
/// `ci-lease-netns[-replicas]` (two nodes: root and network namespaces; skipped,
/// saying why, otherwise).
pub fn ci(root: &Path, pass: &str, env: &[(String, String)]) -> Result<()> {
    crate::run(build(root)?.arg(pass).envs(env.iter().map(|(k, v)| (k, v))))
}

/// `xtask servers clickhouse --listen ADDR [--replicas N]`: a ClickHouse
/// of a two-node pass, listening on 127.0.0.1 and `ADDR` (its bridge's),
/// its state under `target/xtask/lease-netns-clickhouse-<pid>`; with
/// `--replicas N`, ZooKeeper and N replicas of one shard instead
/// (`servers::replicas`), their state under
/// `target/xtask/lease-netns-clickhouse-<pid>-*`. Prints the environment
/// like `servers up`, stops the servers and removes their state when stdin
/// closes. State that a killed earlier pass left is removed first.
pub fn own_clickhouse(root: &Path, args: &[String]) -> Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (addr, replicas) = match args[..] {
        ["--listen", addr] => (addr, None),
        ["--listen", addr, "--replicas", n] => (addr, n.parse::<usize>().ok().filter(|n| *n >= 2)),
        _ => bail!("usage: xtask servers clickhouse --listen ADDR [--replicas N]"),
    };
    if args.len() == 4 && replicas.is_none() {
        bail!("--replicas takes a number of replicas, 2 or more");
    }
    let dir = root.join("target/xtask");
    sweep_stale(&dir);
    let name = format!("{CLICKHOUSE_DIR}{}", std::process::id());
    let extra = [addr.to_string()];
    let (servers, states) = match replicas {
        None => (
            vec![servers::clickhouse::start_on(root, &name, &extra)?],
            vec![RemoveOnDrop(dir.join(&name))],
        ),
        Some(n) => {
            let prefix = format!("{name}-");
            let mut states = vec![RemoveOnDrop(dir.join(format!("{prefix}zookeeper")))];
            states.extend(
                (1..=n).map(|i| RemoveOnDrop(dir.join(format!("{prefix}clickhouse-r{i}")))),
            );
            (
                servers::replicas::start_named(root, n, &prefix, &extra)?,
                states,
            )
        }
    };
    for (k, v) in servers.iter().flat_map(|s| &s.env) {
        println!("export {k}='{v}'");
    }
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(servers);
    drop(states);
    Ok(())
}

/// A directory removed (whole) on drop.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("xtask: could not remove {}: {e}", self.0.display());
            }
        }
    }
}

/// Removes the ClickHouse state directories of earlier passes under `dir`
/// whose process is gone (a pass killed before its own cleanup ran).
fn sweep_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for d in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(pid) = name
            .as_deref()
            .and_then(|n| n.strip_prefix(CLICKHOUSE_DIR))
            .and_then(|p| p.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            drop(RemoveOnDrop(d));
        }
    }
}
