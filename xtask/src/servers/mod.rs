//! The real servers of the integration tier: each is installed if missing,
//! started on loopback with its state under `target/xtask/<name>/`, and
//! stopped when [`Servers`] is dropped (SIGTERM, then SIGKILL after 5 s).

pub mod azurite;
pub mod clickhouse;
pub mod moto;

use anyhow::Result;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// A started server process, stopped on drop.
pub struct ServerProcess {
    /// Human name for messages.
    pub name: &'static str,
    /// The child process.
    pub child: Child,
    /// Environment variables the tests read to reach it.
    pub env: Vec<(String, String)>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                eprintln!("xtask: stopped {}", self.name);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!(
            "xtask: killed {} (SIGTERM not obeyed within 5 s)",
            self.name
        );
    }
}

/// Every real server the `real_*` tests need.
pub struct Servers {
    processes: Vec<ServerProcess>,
}

impl Servers {
    /// Installs (if missing) and starts every server.
    pub fn start(root: &Path) -> Result<Servers> {
        // Started in order; on a failure the ones already up are dropped
        // (and so stopped) with the partly built vector.
        let processes = vec![
            clickhouse::start(root)?,
            moto::start(root)?,
            azurite::start(root)?,
        ];
        Ok(Servers { processes })
    }

    /// The environment the tests read to reach the servers.
    pub fn env(&self) -> Vec<(String, String)> {
        self.processes
            .iter()
            .flat_map(|p| p.env.iter().cloned())
            .collect()
    }
}

/// Picks a free loopback TCP port (never 9000, ClickHouse's native port).
pub fn free_port() -> Result<u16> {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if port != 9000 {
            return Ok(port);
        }
    }
}
