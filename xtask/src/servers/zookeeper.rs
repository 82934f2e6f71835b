//! Debian's ZooKeeper (`zookeeper` 3.8) standalone on loopback: the
//! coordination the replicated ClickHouse catalog of `replicas.rs` needs.
//!
//! Installed with apt when `/usr/share/zookeeper/bin/zkServer.sh` is
//! missing (it brings a JRE where none is present), configured under
//! `target/xtask/<name>/` (`zoo.cfg`: data directory, a free client port on
//! 127.0.0.1, no admin server, a 500 ms tick so a killed replica's session
//! lapses within seconds, the `ruok` command allowed) and started in the
//! foreground (`zkServer.sh start-foreground` execs `java`, so the child is
//! the server) with a small heap. Reported ready once `ruok` answers
//! `imok`. [`super::ServerProcess`] stops it on drop.

use super::{free_port, spawn_logged, wait_until, ServerProcess};
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ZK_SERVER: &str = "/usr/share/zookeeper/bin/zkServer.sh";

/// A started ZooKeeper: its process (not yet known to answer) and port.
pub struct ZooKeeper {
    /// The server.
    pub process: ServerProcess,
    /// Its client port on 127.0.0.1.
    pub port: u16,
}

/// Installs ZooKeeper if missing and starts it under
/// `<root>/target/xtask/<name>`, without waiting for it (see [`wait`]).
pub fn launch(root: &Path, name: &str) -> Result<ZooKeeper> {
    install_if_missing()?;
    let dir = root.join("target/xtask").join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("data"))
        .with_context(|| format!("could not create {}", dir.display()))?;
    let port = free_port()?;
    let d = dir.display();
    std::fs::write(
        dir.join("zoo.cfg"),
        format!(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={d}/data\nclientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\nmaxSessionTimeout=10000\n"
        ),
    )?;
    let child = spawn_logged(
        Command::new(ZK_SERVER)
            .args(["start-foreground", &format!("{d}/zoo.cfg")])
            .env("ZOOCFGDIR", &dir)
            .env("ZOO_LOG_DIR", &dir)
            .env(
                "JVMFLAGS",
                "-Xmx96m -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            ),
        &dir.join("zookeeper.log"),
    )?;
    Ok(ZooKeeper {
        process: ServerProcess {
            name: "zookeeper",
            child,
            env: vec![("SPOOL_TEST_ZOOKEEPER".into(), format!("127.0.0.1:{port}"))],
            pid_file: None,
        },
        port,
    })
}

/// Waits until the ZooKeeper of `root`'s `name` answers `ruok` (30 s).
pub fn wait(root: &Path, name: &str, port: u16) -> Result<()> {
    let log = root.join("target/xtask").join(name).join("zookeeper.log");
    wait_until("zookeeper", &format!("127.0.0.1:{port}"), &log, || {
        ruok(port).unwrap_or(false)
    })
}

fn ruok(port: u16) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"ruok")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out == "imok")
}

/// Installs Debian's zookeeper when it is missing.
pub fn install_if_missing() -> Result<()> {
    crate::apt_install(&["zookeeper"], || Path::new(ZK_SERVER).exists())
}
