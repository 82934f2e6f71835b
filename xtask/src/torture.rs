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
use std::path::Path;
use std::process::Command;

/// The prefix of a two-node pass's ClickHouse state directory under
/// `<root>/target/xtask` (the serving xtask's pid follows).
const CLICKHOUSE_DIR: &str = "lease-netns-clickhouse-";

/// Builds `spool` and the test helper binaries (`spool-with-seams`,
/// `fault-proxy`, `spool-torture`) as the tests' build does
/// ([`crate::build_tests`]); returns the torture's command, with this
/// xtask's path and the `spool` that ships (`SPOOL_BIN`) in its
/// environment.
fn build(root: &Path) -> Result<Command> {
    crate::build_tests()?;
    let mut cmd = Command::new(crate::target_dir(root).join("debug/spool-torture"));
    cmd.env("SPOOL_BIN", crate::shipped_spool(root));
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
/// fast tier), `ci-disk` (root; skipped, saying why, otherwise, and failed
/// under `SPOOL_REQUIRE_ALL=1`, as `cargo xtask test` sets),
/// `ci-faults` (on the real tier's servers, their variables in `env`),
/// `ci-lease-netns[-replicas]` (two nodes: root and network namespaces; as
/// `ci-disk` when they are missing).
pub fn ci(root: &Path, pass: &str, env: &[(String, String)]) -> Result<()> {
    crate::run(build(root)?.arg(pass).envs(env.iter().map(|(k, v)| (k, v))))
}

/// `xtask servers clickhouse --listen ADDR [--replicas N]`: a two-node
/// pass's ClickHouse (or ZooKeeper and N replicas of one shard), listening
/// on 127.0.0.1 and `ADDR`, its state in `target/xtask/<CLICKHOUSE_DIR><pid>*`.
/// Prints the environment like `servers up`, and stops the servers and
/// removes their state when stdin closes (a killed earlier pass's, first).
pub fn own_clickhouse(root: &Path, args: &[String]) -> Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (addr, replicas) = match args[..] {
        ["--listen", addr] => (addr, None),
        ["--listen", addr, "--replicas", n] => match n.parse::<usize>() {
            Ok(n) if n >= 2 => (addr, Some(n)),
            _ => bail!("--replicas takes a number of replicas, 2 or more"),
        },
        _ => bail!("usage: xtask servers clickhouse --listen ADDR [--replicas N]"),
    };
    let dir = root.join("target/xtask");
    remove_state(&dir, |pid| !Path::new(&format!("/proc/{pid}")).exists());
    let name = format!("{CLICKHOUSE_DIR}{}", std::process::id());
    let extra = [addr.to_string()];
    let started = match replicas {
        None => servers::clickhouse::start_on(root, &name, &extra).map(|s| vec![s]),
        Some(n) => servers::replicas::start_named(root, n, &format!("{name}-"), &extra),
    };
    let served = started.map(|servers| {
        for (k, v) in servers.iter().flat_map(|s| &s.env) {
            println!("export {k}='{v}'");
        }
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        drop(servers); // stopped before their state goes
    });
    remove_state(&dir, |pid| pid == std::process::id());
    served
}

/// Removes the state directories of two-node passes under `dir` (named
/// `lease-netns-clickhouse-<pid>` and `...-<pid>-*`) whose pid `doomed`
/// says.
fn remove_state(dir: &Path, doomed: impl Fn(u32) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for d in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let pid = name
            .as_deref()
            .and_then(|n| n.strip_prefix(CLICKHOUSE_DIR))
            .and_then(|p| p.split('-').next()?.parse::<u32>().ok());
        if pid.is_some_and(&doomed) {
            if let Err(e) = std::fs::remove_dir_all(&d) {
                eprintln!("xtask: could not remove {}: {e}", d.display());
            }
        }
    }
}
