//! s3s-fs (crates.io `s3s-fs` 0.14.1, feature `binary`), a Rust S3 server
//! over a directory, on loopback for the benchmarks only (`cargo xtask
//! bench`; `cargo xtask test` never starts it): unlike moto it is not the
//! bottleneck of a drain, so a drain against it measures the client.
//!
//! Installed when `target/xtask/s3s-fs/bin/s3s-fs` is missing, with
//! `cargo install --locked s3s-fs --version 0.14.1 --features binary --root
//! target/xtask/s3s-fs` in a target directory of its own
//! (`target/xtask/s3s-fs-build`, removed after the install). Started as
//! `s3s-fs --access-key K --secret-key K --host 127.0.0.1 --port PORT DIR`
//! over a fresh `target/xtask/s3s/data` (one subdirectory per bucket: the
//! bucket is made with `mkdir`), logging to `target/xtask/s3s/s3s-fs.log`,
//! and reported ready once it answers HTTP. It checks SigV4 signatures
//! against the key pair it is given.
//!
//! Environment for the benchmarks: `SPOOL_BENCH_S3S_ENDPOINT`
//! (`http://127.0.0.1:PORT`), `SPOOL_BENCH_S3S_BUCKET`,
//! `SPOOL_BENCH_S3S_DATA` (the bucket's directory, where each object is a
//! file) and `SPOOL_BENCH_S3S_KEY` (access key and secret alike).
//! [`super::ServerProcess`] stops it on drop.

use super::{free_port, http, spawn_logged, wait_until, ServerProcess};
use crate::{cargo, run};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

const VERSION: &str = "0.14.1";
const KEY: &str = "spool-bench";

/// Installs s3s-fs if missing and starts it.
pub fn start(root: &Path) -> Result<ServerProcess> {
    let server = install(root)?;
    let dir = root.join("target/xtask/s3s");
    let data = dir.join("data");
    // every run starts from an empty store
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not clear {}", dir.display()))?;
    }
    let port = free_port()?;
    let bucket = format!("spool-bench-{}-{port}", std::process::id());
    std::fs::create_dir_all(data.join(&bucket))
        .with_context(|| format!("could not create {}", data.display()))?;
    let log_path = dir.join("s3s-fs.log");
    let child = spawn_logged(
        Command::new(&server)
            .args(["--access-key", KEY, "--secret-key", KEY])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg(&data)
            .env("RUST_LOG", "warn"),
        &log_path,
    )?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let process = ServerProcess {
        name: "s3s-fs (S3)",
        child,
        env: vec![
            ("SPOOL_BENCH_S3S_ENDPOINT".into(), endpoint.clone()),
            ("SPOOL_BENCH_S3S_BUCKET".into(), bucket.clone()),
            (
                "SPOOL_BENCH_S3S_DATA".into(),
                data.join(&bucket).display().to_string(),
            ),
            ("SPOOL_BENCH_S3S_KEY".into(), KEY.into()),
        ],
        pid_file: None,
    };
    // From here on, a failure drops `process`, which stops the server.
    wait_until(
        "s3s-fs",
        &endpoint,
        &log_path,
        || matches!(http(port, "GET", "/", "", b""), Ok((status, _)) if status > 0),
    )?;
    eprintln!(
        "xtask: s3s-fs on {endpoint}, bucket {bucket} in {}",
        data.display()
    );
    Ok(process)
}

/// The installed binary, installing it first when missing.
fn install(root: &Path) -> Result<std::path::PathBuf> {
    let prefix = root.join("target/xtask/s3s-fs");
    let server = prefix.join("bin/s3s-fs");
    if server.exists() {
        return Ok(server);
    }
    let build = root.join("target/xtask/s3s-fs-build");
    run(cargo()
        .args(["install", "--locked", "s3s-fs", "--version", VERSION])
        .args(["--features", "binary", "--root"])
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", &build))
    .context("installing s3s-fs from crates.io")?;
    // the build directory is only needed once (and is large)
    let _ = std::fs::remove_dir_all(&build);
    if !server.exists() {
        bail!(
            "cargo install s3s-fs succeeded but {} is missing",
            server.display()
        );
    }
    Ok(server)
}
