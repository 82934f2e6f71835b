//! Azurite (npm `azurite@3.37.0`, Microsoft's Azure Storage emulator) on
//! loopback for the `az://` smoke tests.
//!
//! Installed with npm into `target/xtask/azurite` when its `azurite-blob`
//! is missing (it declares Node ≥ 22 but runs on Node 20). Started with
//! in-memory persistence and telemetry off (with telemetry on it sometimes
//! ignored SIGTERM; [`super::ServerProcess`] falls back to SIGKILL after
//! 5 s). One container per run is created with a SharedKey-signed request
//! (anonymous creation gets 403) by `azurite-create-container.js`, run with
//! the same node, so xtask needs no HMAC code of its own.
//!
//! Environment for the tests: `SPOOL_TEST_AZURE_ENDPOINT`
//! (`http://127.0.0.1:PORT/devstoreaccount1`), `SPOOL_TEST_AZURE_CONTAINER`;
//! the account is the emulator's well-known `devstoreaccount1` and key.

use super::{free_port, spawn_logged, wait_until, ServerProcess};
use crate::run;
use anyhow::{Context, Result};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

const AZURITE: &str = "azurite@3.37.0";
const CREATE_CONTAINER: &str = include_str!("azurite-create-container.js");

/// Installs Azurite into `target/xtask/azurite` if missing; returns its
/// blob service's binary.
pub fn install(root: &Path) -> Result<std::path::PathBuf> {
    let dir = root.join("target/xtask/azurite");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let bin = dir.join("node_modules/.bin/azurite-blob");
    if !bin.exists() {
        run(Command::new("npm").current_dir(&dir).args([
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            AZURITE,
        ]))
        .context("installing Azurite with npm (needs node, npm and the npm registry)")?;
    }
    Ok(bin)
}

/// Installs Azurite if missing and starts its blob service.
pub fn start(root: &Path) -> Result<ServerProcess> {
    let bin = install(root)?;
    let dir = root.join("target/xtask/azurite");
    let script = dir.join("create-container.js");
    std::fs::write(&script, CREATE_CONTAINER)
        .with_context(|| format!("could not write {}", script.display()))?;
    let port = free_port()?;
    let child = spawn_logged(
        Command::new(&bin)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args(["--inMemoryPersistence", "--disableTelemetry", "--silent"])
            .current_dir(&dir),
        &dir.join("azurite.log"),
    )?;
    let container = format!("spooltest{port}");
    let process = ServerProcess {
        name: "Azurite (Azure blob)",
        child,
        env: vec![
            (
                "SPOOL_TEST_AZURE_ENDPOINT".into(),
                format!("http://127.0.0.1:{port}/devstoreaccount1"),
            ),
            ("SPOOL_TEST_AZURE_CONTAINER".into(), container.clone()),
        ],
        pid_file: None,
    };
    let log = dir.join("azurite.log");
    wait_until("Azurite", &format!("127.0.0.1:{port}"), &log, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    run(Command::new("node")
        .arg(&script)
        .arg(port.to_string())
        .arg(&container))
    .with_context(|| format!("creating container {container} on Azurite"))?;
    eprintln!("xtask: Azurite blob service on 127.0.0.1:{port}, container {container}");
    Ok(process)
}
