//! moto's S3 server (PyPI `moto[s3]==5.2.5`) on loopback for the `real_*`
//! tests.
//!
//! Installed into a virtualenv at `target/xtask/moto-venv` when its
//! `moto_server` is missing (`python3 -m venv`, then pip; on a fresh Debian
//! machine without `ensurepip`, apt's `python3-venv` first). Started as
//! `moto_server -H 127.0.0.1 -p PORT` on a free port, logging to
//! `target/xtask/moto/moto.log`, and reported ready once it answers HTTP.
//! One bucket is created for the whole run (moto checks no signatures, so a
//! plain `PUT /BUCKET` does it); each test uses its own prefix in it.
//!
//! Environment for the tests: `SPOOL_TEST_S3_ENDPOINT` (`http://127.0.0.1:PORT`),
//! `SPOOL_TEST_S3_BUCKET`, and the `AWS_*` variables
//! `AmazonS3Builder::from_env` reads (endpoint, `AWS_ALLOW_HTTP=true`,
//! region, dummy keys). [`super::ServerProcess`] stops it on drop.

use super::{free_port, http, python_venv, spawn_logged, wait_until, ServerProcess};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

const MOTO: &str = "moto[s3]==5.2.5";

/// Installs moto if missing and starts it.
pub fn start(root: &Path) -> Result<ServerProcess> {
    start_in(root, "moto")
}

/// Installs moto into its virtualenv if missing; returns its server.
pub fn install(root: &Path) -> Result<std::path::PathBuf> {
    let venv = root.join("target/xtask/moto-venv");
    let server = venv.join("bin/moto_server");
    if !server.exists() {
        python_venv(&venv, &[MOTO, "flask", "flask-cors"], "moto")?;
    }
    Ok(server)
}

/// [`start`] logging under `<root>/target/xtask/<name>` (the torture's
/// own, beside a server `cargo xtask servers up` may run).
pub fn start_in(root: &Path, name: &str) -> Result<ServerProcess> {
    let server = install(root)?;
    let dir = root.join("target/xtask").join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let port = free_port()?;
    let child = spawn_logged(
        Command::new(&server).args(["-H", "127.0.0.1", "-p", &port.to_string()]),
        &dir.join("moto.log"),
    )?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let bucket = format!("spool-test-{}-{}", std::process::id(), port);
    let process = ServerProcess {
        name: "moto (S3)",
        child,
        env: vec![
            ("SPOOL_TEST_S3_ENDPOINT".into(), endpoint.clone()),
            ("SPOOL_TEST_S3_BUCKET".into(), bucket.clone()),
            ("AWS_ENDPOINT".into(), endpoint.clone()),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID".into(), "spool-test".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "spool-test".into()),
            ("AWS_BUCKET".into(), bucket.clone()),
        ],
        pid_file: None,
    };
    // From here on, a failure drops `process`, which stops the server.
    wait_until(
        "moto",
        &endpoint,
        &dir.join("moto.log"),
        || matches!(http(port, "GET", "/", "", b""), Ok((status, _)) if status > 0),
    )?;
    let (status, _) = http(port, "PUT", &format!("/{bucket}"), "", b"")?;
    if status != 200 {
        bail!("creating bucket {bucket} on moto at {endpoint} answered HTTP {status}");
    }
    eprintln!("xtask: moto S3 server on {endpoint}, bucket {bucket}");
    Ok(process)
}
