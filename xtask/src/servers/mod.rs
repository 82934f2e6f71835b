//! The real servers of the integration tier: each is installed if missing,
//! started on loopback with its state under `target/xtask/<name>/`, and
//! stopped when [`Servers`] is dropped (SIGTERM, then SIGKILL after 5 s).

pub mod azurite;
pub mod chdb;
pub mod clickhouse;
pub mod gcs;
pub mod moto;
mod process;
pub mod replicas;
pub mod s3s;
pub mod zookeeper;

use anyhow::{Context, Result};
use std::path::Path;

pub use process::{free_port, http, python_venv, spawn_logged, wait_until, PidFile, ServerProcess};

/// Every real server the `real_*` tests need.
pub struct Servers {
    processes: Vec<ServerProcess>,
}

impl Servers {
    /// Installs (if missing) and starts every server.
    pub fn start(root: &Path) -> Result<Servers> {
        // The replicated catalog (a JVM and three servers) starts on its
        // own thread beside the others, so it adds little to the start.
        // On a failure the ones already up are dropped (and so stopped)
        // with the partly built vector, and the thread's when it ends.
        let at = root.to_path_buf();
        let replicated = std::thread::spawn(move || replicas::start(&at));
        // chdb's engine loads for about a second: on its own thread too.
        let at = root.to_path_buf();
        let current = std::thread::spawn(move || chdb::start(&at));
        let mut processes = vec![
            clickhouse::start(root)?,
            moto::start(root)?,
            azurite::start(root)?,
            gcs::start(root)?,
        ];
        let replicated = replicated
            .join()
            .map_err(|_| anyhow::anyhow!("starting the replicated ClickHouse panicked"))?
            .context("starting ZooKeeper and the ClickHouse replicas")?;
        processes.extend(replicated);
        processes.push(
            current
                .join()
                .map_err(|_| anyhow::anyhow!("starting chdb panicked"))?
                .context("starting chdb (ClickHouse's current engine)")?,
        );
        Ok(Servers { processes })
    }

    /// Installs what [`Servers::start`] runs and is missing (Debian's
    /// ClickHouse and ZooKeeper, moto, Azurite, fake-gcs-server, chdb-core), starting
    /// nothing: `cargo xtask test` does it on a thread of its own while
    /// the fast tier builds and runs, so a fresh machine's downloads
    /// overlap the compile.
    pub fn install(root: &Path) -> Result<()> {
        clickhouse::install_if_missing()?;
        zookeeper::install_if_missing()?;
        moto::install(root)?;
        azurite::install(root)?;
        gcs::install(root)?;
        chdb::install(root)?;
        Ok(())
    }

    /// The environment the tests read to reach the servers.
    pub fn env(&self) -> Vec<(String, String)> {
        self.processes
            .iter()
            .flat_map(|p| p.env.iter().cloned())
            .collect()
    }
}
