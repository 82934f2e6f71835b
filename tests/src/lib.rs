//! Harness for the end-to-end tests in `tests/tests/`.
//!
//! Modelled on ripgrep's `tests/util.rs`: a test finds the real `spool`
//! binary next to its own executable, runs it in a scratch directory, and
//! asserts on exit code, stdout and stderr. Real-server tests read the
//! servers' addresses from the environment `cargo xtask test` sets, through
//! [`server_env`]. A test that needs root, a tool or a server asks
//! [`required`], which fails it under `SPOOL_REQUIRE_ALL=1` (`cargo xtask
//! test` sets it) and skips it, saying why, otherwise.
#![forbid(unsafe_code)]

pub mod catalog_suite;
pub mod clickhouse_suite;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use spool_lock::testing::required;

/// The variable naming the `spool` binary the tests run: `cargo xtask
/// test` builds it as README's install does (`-p spool-cli`, no test seam)
/// and sets it; unset, the tests run the workspace build's `spool`, whose
/// library crates carry the `testing` seams spool-tests turns on.
pub const SPOOL_BIN: &str = "SPOOL_BIN";

/// The directory of this build's binaries: `target/<profile>` (a test
/// executable lives in its `deps/`, a helper binary in it).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("an executable lives in a directory");
    match dir.file_name() {
        Some(name) if name == "deps" => dir.parent().expect("deps lives in target/<profile>"),
        _ => dir,
    }
    .to_path_buf()
}

/// Path of the `spool` binary the tests run: [`SPOOL_BIN`]'s, else the
/// one built alongside this test executable.
pub fn spool_bin() -> PathBuf {
    let bin = std::env::var_os(SPOOL_BIN)
        .filter(|v| !v.is_empty())
        .map_or_else(|| build_dir().join("spool"), PathBuf::from);
    assert!(
        bin.exists(),
        "the spool binary is missing at {}: build it first (cargo build --workspace, or as cargo \
         xtask test does, cargo build -p spool-cli, with {SPOOL_BIN} naming a copy)",
        bin.display()
    );
    bin
}

/// A `Command` for the real `spool` binary, with logs quiet unless asked.
pub fn spool() -> Command {
    let mut cmd = Command::new(spool_bin());
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    cmd
}

/// A `Command` for the `spool-with-seams` test helper: the same command as
/// [`spool`], after setting the test seams its leading options ask for
/// (`--pause-before-publish FILE`, `--test-filesystem-type HEX`).
pub fn spool_with_seams(seams: &[&str]) -> Command {
    let bin = build_dir().join("spool-with-seams");
    assert!(
        bin.exists(),
        "the spool-with-seams helper is missing at {}",
        bin.display()
    );
    let mut cmd = Command::new(bin);
    cmd.args(seams);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    cmd
}

/// Runs `cmd`, returning its output; panics with both streams if it could
/// not start.
pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("could not run {cmd:?}: {e}"))
}

/// Formats an `Output` for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Reads a real server's address from the environment variable `var`.
///
/// Returns `None` (after printing why) when it is unset, unless
/// `SPOOL_REQUIRE_ALL=1` (the real-server tier of `cargo xtask test`),
/// which makes it a failure: a missing server never passes silently in CI
/// ([`required`]).
pub fn server_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            required(
                false,
                &format!(
                    "a server ({var} unset; the real-server tier of cargo xtask test starts it)"
                ),
            );
            None
        }
    }
}

/// Whether this process runs as root; else a test that needs it is
/// [`required`] to say so.
pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Whether `program` is a file in one of `PATH`'s directories.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Every `<id>.ready` file directly in `dir`: id → bytes.
pub fn ready_files(dir: &Path) -> std::collections::HashMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".ready")?.to_string();
            Some((id, std::fs::read(e.path()).unwrap()))
        })
        .collect()
}

/// The objects of the embedded store `ROOT/.store` named like a pack
/// (`<id>.pack`, at any depth of the key layout), by pack id.
pub fn store_objects(root: &Path) -> std::collections::BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut std::collections::BTreeMap<String, PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&path, out);
            } else if let Some(id) = e.file_name().to_str().and_then(|n| n.strip_suffix(".pack")) {
                out.insert(id.to_owned(), path);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(&root.join(".store"), &mut out);
    out
}

/// Pack ids of the rows of the embedded catalog `ROOT/.catalog.db`
/// (none before a service made its schema).
pub fn indexed_ids(root: &Path) -> std::collections::BTreeSet<String> {
    let db = rusqlite::Connection::open(root.join(".catalog.db")).unwrap();
    let Ok(mut st) = db.prepare("SELECT pack_id FROM spool_packs") else {
        return Default::default();
    };
    let rows = st
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows
}

/// A child process that is SIGKILLed (and reaped) when dropped unless it
/// already exited: a failing test never leaves a daemon or a lock holder
/// behind. Derefs to the [`std::process::Child`].
#[derive(Debug)]
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub mod http;
pub mod inspect;
pub mod packs;
pub mod proxy;
pub mod servers;
pub mod service;
pub mod upload_suite;

/// Every path under `root` (any depth, links not followed).
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}

/// Whether `path` is the reserve a key directory keeps for a full
/// filesystem (`spool_lock::RESERVE_NAME`), or inside it: what a drained
/// key directory still holds.
pub fn is_reserve(path: &Path) -> bool {
    path.components()
        .any(|c| c.as_os_str() == spool_lock::RESERVE_NAME)
}

/// Every `.ready` file under `root`'s rank directories (any depth; the
/// embedded store's `.store` left out).
pub fn ready_under(root: &Path) -> Vec<PathBuf> {
    walk(root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "ready"))
        .filter(|p| !p.components().any(|c| c.as_os_str() == ".store"))
        .collect()
}

/// `spool produce --packs N --spool-root ROOT` (a sink-only producer that
/// exits): the ids it staged. Panics, saying why, if it failed.
pub fn produce_ids(root: &Path, packs: u32) -> std::collections::BTreeSet<String> {
    let out = output(
        spool()
            .args(["produce", "--packs", &packs.to_string(), "--spool-root"])
            .arg(root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    stdout_lines(&out).into_iter().collect()
}

/// The lines a command printed on stdout.
pub fn stdout_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `spool run --once --timeout 60 --spool-root ROOT`, which must succeed.
pub fn run_once(root: &Path) {
    let out = output(
        spool()
            .args(["run", "--once", "--timeout", "60", "--spool-root"])
            .arg(root),
    );
    assert!(out.status.success(), "{}", describe(&out));
}
