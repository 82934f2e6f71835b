//! A server process of the integration tier and what starting one takes:
//! spawning with a log, a free port, a Python virtualenv, a bare HTTP
//! request, waiting until it answers; [`ServerProcess`] stops it on drop
//! (SIGTERM, then SIGKILL after 5 s).

use crate::run;
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A started server process, stopped on drop.
pub struct ServerProcess {
    /// Human name for messages.
    pub name: &'static str,
    /// The child process.
    pub child: Child,
    /// Environment variables the tests read to reach it.
    pub env: Vec<(String, String)>,
    /// Where the server writes its pid when it has one: a test that killed
    /// the server and started it again from its config leaves the new
    /// process there, and the drop stops that one too.
    pub pid_file: Option<PidFile>,
}

/// A server's pid file, and what the command line of the process it names
/// contains (a pid file may outlive its process, and a pid be reused).
pub struct PidFile {
    /// The file.
    pub path: std::path::PathBuf,
    /// E.g. `clickhouse-server`.
    pub program: &'static str,
}

impl ServerProcess {
    /// The value of one of its [`env`](Self::env) variables.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some((pid, program)) = self
            .pid_file
            .as_ref()
            .and_then(|f| Some((std::fs::read_to_string(&f.path).ok()?, f.program)))
            .and_then(|(p, program)| Some((p.trim().parse::<u32>().ok()?, program)))
            .filter(|(p, _)| *p != self.child.id())
        {
            // restarted by a test: no child of ours, so alive while /proc
            // shows that server under its pid (a pid file may outlive it)
            let alive = || {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(program))
            };
            if alive() {
                stop(pid, alive);
                eprintln!("xtask: stopped {} (restarted as pid {pid})", self.name);
            }
        }
        let child = &mut self.child;
        let stopped = stop(child.id(), || matches!(child.try_wait(), Ok(None)));
        eprintln!(
            "xtask: {} {}",
            if stopped { "stopped" } else { "killed" },
            self.name
        );
        let _ = self.child.wait();
    }
}

/// SIGTERM to `pid`, then SIGKILL if it is still `alive` 5 s later;
/// whether SIGTERM was obeyed.
fn stop(pid: u32, mut alive: impl FnMut() -> bool) -> bool {
    let signal = |sig: &str| Command::new("kill").args([sig, &pid.to_string()]).status();
    let _ = signal("-TERM");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let obeyed = !alive();
    if !obeyed {
        let _ = signal("-KILL");
    }
    obeyed
}

/// Spawns `cmd` with no standard input and its standard output and error
/// into a new file at `log`.
pub fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<Child> {
    let file = std::fs::File::create(log)
        .with_context(|| format!("could not create {}", log.display()))?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("could not start {:?}", cmd.get_program()))
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

/// Makes a Python virtualenv at `venv` and pip-installs `packages` into it
/// (`what` names them in messages). On a fresh Debian machine without
/// `ensurepip`, installs apt's `python3-venv` first.
pub fn python_venv(venv: &Path, packages: &[&str], what: &str) -> Result<()> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let made = Command::new(&python)
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .with_context(|| format!("could not run {python} (install python3)"))?;
    if !made.success() {
        // Debian's python3 lacks ensurepip until python3-venv is installed.
        eprintln!("xtask: {python} -m venv failed; installing python3-venv with apt-get");
        let _ = std::fs::remove_dir_all(venv);
        crate::apt_install(&["python3-venv", "python3-pip"], || {
            crate::dpkg_installed("python3-venv") && crate::dpkg_installed("python3-pip")
        })?;
        run(Command::new(&python).args(["-m", "venv"]).arg(venv))?;
    }
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages))
    .with_context(|| format!("installing {what} into {} (needs PyPI)", venv.display()))
}

/// One HTTP/1.1 request to `127.0.0.1:port` with `body` (sent with
/// `content_type` when non-empty); returns the status (0 if unparsable) and
/// the response as text.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, out))
}

/// Polls `ready` every 100 ms until it holds, failing after 30 s with a
/// message naming `name`, `addr` and its `log`.
pub fn wait_until(
    name: &str,
    addr: &str,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            anyhow::bail!(
                "{name} did not answer on {addr} within 30 s; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
