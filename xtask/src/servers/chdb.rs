//! The current ClickHouse engine for the `real_chdb` tests: PyPI's
//! `chdb-core` (ClickHouse 26.x in-process) behind ClickHouse's HTTP
//! interface, served by `chdb_http.py` beside this file (its docs say what
//! of the interface it serves).
//!
//! Installed into a virtualenv at `target/xtask/chdb-venv` when its stamp
//! file does not name [`CHDB`] (a 180 MB wheel, no compiling), started as
//! `python chdb_http.py --port PORT --path target/xtask/chdb/data` on a free
//! port, logging every statement to `target/xtask/chdb/chdb.log`, and
//! reported ready once `/ping` answers. Every run starts from an empty data
//! directory.
//!
//! Environment for the tests: `SPOOL_TEST_CHDB_URL`
//! (`clickhouse://127.0.0.1:PORT/default`; each test makes and drops its
//! own database, as on the 18.16 server). [`super::ServerProcess`] stops it
//! on drop.

use super::{free_port, http, python_venv, spawn_logged, wait_until, ServerProcess};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The engine's package, pinned: a new release is a new dialect to pass.
const CHDB: &str = "chdb-core==26.9.0";

/// Installs `chdb-core` into its virtualenv unless its stamp names
/// [`CHDB`]; returns the virtualenv's Python.
pub fn install(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target/xtask/chdb-venv");
    let stamp = venv.join(".spool-chdb");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(CHDB) {
        let t = std::time::Instant::now();
        python_venv(&venv, &[CHDB], "chdb-core")?;
        std::fs::write(&stamp, CHDB)?;
        eprintln!(
            "xtask: installed {CHDB} in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(venv.join("bin/python"))
}

/// Installs chdb-core if missing and serves it on a free loopback port.
pub fn start(root: &Path) -> Result<ServerProcess> {
    let python = install(root)?;
    let dir = root.join("target/xtask/chdb");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let port = free_port()?;
    let log = dir.join("chdb.log");
    let child = spawn_logged(
        Command::new(python)
            .arg(root.join("xtask/src/servers/chdb_http.py"))
            .args(["--port", &port.to_string()])
            .arg("--path")
            .arg(dir.join("data")),
        &log,
    )?;
    let process = ServerProcess {
        name: "chdb (ClickHouse's current engine)",
        child,
        env: vec![(
            "SPOOL_TEST_CHDB_URL".into(),
            format!("clickhouse://127.0.0.1:{port}/default"),
        )],
        pid_file: None,
    };
    // From here on, a failure drops `process`, which stops the server.
    let addr = format!("127.0.0.1:{port}");
    wait_until("chdb", &addr, &log, || {
        matches!(http(port, "GET", "/ping", "", b""), Ok((200, _)))
    })?;
    eprintln!(
        "xtask: chdb on {addr}, statements logged to {}",
        log.display()
    );
    Ok(process)
}
