//! Project automation. `cargo xtask test` is the one test command (README,
//! `.ci/run`); `cargo xtask bench` runs the benchmarks behind BENCHMARKS.md.
//!
//! `test` runs, in order: `cargo fmt --check`, `cargo clippy -D warnings`,
//! the fast tier (every test binary not named `real_*`, on fakes), then the
//! real-server tier: it installs what is missing (Debian packages, Python
//! virtualenvs, npm), starts each server on loopback under `target/xtask/`, runs
//! the `real_*` test binaries with the servers' addresses in the
//! environment, and stops the servers afterwards — also when a step fails.

mod servers;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("test") => test(&root, &args[1..]),
        Some("servers") => servers_cmd(&root, &args[1..]),
        Some("bench") => bench(&root, &args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test [--fast-only] [--real-only] [--no-lint]   fmt, clippy, fast tier, real-server tier\n  \
                 servers up                                    start the real servers and print their env (Ctrl-C stops)\n  \
                 bench [NAME...]                               run the benchmarks (figures for BENCHMARKS.md)"
            );
            std::process::exit(2);
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Runs a command, echoing it, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: $ {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn test(root: &Path, args: &[String]) -> Result<()> {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let (fast, real) = match (has("--fast-only"), has("--real-only")) {
        (true, false) => (true, false),
        (false, true) => (false, true),
        _ => (true, true),
    };
    if !has("--no-lint") {
        run(cargo().args(["fmt", "--all", "--", "--check"]))?;
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    if fast {
        run(cargo().args([
            "nextest",
            "run",
            "--workspace",
            "--locked",
            "--profile",
            "ci",
            "--no-tests=warn",
            "-E",
            "not binary(/^real_/)",
        ]))?;
    }
    if real {
        // Build first, so server start-up is not counted against a cold compile.
        run(cargo().args(["nextest", "run", "--workspace", "--locked", "--no-run"]))?;
        let servers = servers::Servers::start(root)?;
        let mut cmd = cargo();
        cmd.args([
            "nextest",
            "run",
            "--workspace",
            "--locked",
            "--profile",
            "ci",
            "--no-tests=warn",
            "-E",
            "binary(/^real_/)",
        ]);
        cmd.env("SPOOL_REQUIRE_SERVERS", "1");
        for (k, v) in servers.env() {
            cmd.env(k, v);
        }
        let result = run(&mut cmd);
        drop(servers); // stops every server, whatever `result` is
        result?;
    }
    Ok(())
}

fn servers_cmd(root: &Path, args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("up") => {
            let servers = servers::Servers::start(root)?;
            for (k, v) in servers.env() {
                // Quoted for the shell: the GCS service-account key is JSON.
                println!("export {k}='{}'", v.replace('\'', r"'\''"));
            }
            eprintln!("xtask: servers up; press Enter to stop them");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            drop(servers);
            Ok(())
        }
        _ => bail!("usage: cargo xtask servers up"),
    }
}

fn bench(_root: &Path, _args: &[String]) -> Result<()> {
    bail!("no benchmarks yet")
}
