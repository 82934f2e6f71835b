//! The fault torture's proxies (`--faults`): one `fault-proxy` process
//! (tests/src/bin/fault-proxy.rs, the fault proxy of spool-tests driven
//! over stdin) in front of moto and one in front of ClickHouse, and the
//! seeded schedule of fault windows the scheduler opens on them.
//!
//! A window lasts 0.3–2.5 s and is one of: refused connections, a stall
//! (the request received whole, never answered), a stall mid-request-body
//! (the proxy stops reading), a stall mid-response, latency (0.1–3 s per
//! request: on ClickHouse that reaches into the lease's fence margin), a
//! cut mid-request-body, a cut mid-response, or a 503 / 500 / 403 burst
//! (the proxy answers itself). When it ends the rules are cleared;
//! connections already stalled stay stalled until their client gives up.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Rng;

/// The kinds of fault window, as counted and printed.
pub const KINDS: &[&str] = &[
    "refuse",
    "stall",
    "stall-request",
    "stall-response",
    "latency",
    "cut-request",
    "cut-response",
    "503",
    "500",
    "403",
];

/// A running `fault-proxy` child in front of one server.
pub struct FaultProxy {
    /// What it fronts (`s3`, `clickhouse`), for messages.
    pub name: &'static str,
    /// Its loopback port.
    pub port: u16,
    child: Child,
    stdin: ChildStdin,
    acks: Receiver<String>,
    /// Requests hit, by the proxy's event kind.
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The open window: its kind and end.
    window: Option<(&'static str, Instant)>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FaultProxy {
    /// Starts `bin` (the run's copy of `fault-proxy`) in front of
    /// `127.0.0.1:upstream`.
    pub fn start(bin: &Path, name: &'static str, upstream: u16) -> Result<FaultProxy> {
        let mut child = Command::new(bin)
            .arg(format!("127.0.0.1:{upstream}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} (built?)", bin.display()))?;
        let stdin = child.stdin.take().context("fault-proxy stdin")?;
        let stdout = child.stdout.take().context("fault-proxy stdout")?;
        let (tx, acks) = channel();
        let hits: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        {
            let hits = Arc::clone(&hits);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.strip_prefix("fault ") {
                        let kind = rest.split_whitespace().next().unwrap_or("?").to_string();
                        *hits
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(kind)
                            .or_default() += 1;
                    } else if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut p = FaultProxy {
            name,
            port: 0,
            child,
            stdin,
            acks,
            hits,
            window: None,
        };
        let first = p
            .acks
            .recv_timeout(Duration::from_secs(10))
            .with_context(|| format!("fault-proxy for {name} did not say where it listens"))?;
        let addr = first
            .strip_prefix("listening ")
            .with_context(|| format!("fault-proxy for {name} said {first:?}"))?;
        p.port = crate::port_of(addr)?;
        Ok(p)
    }

    /// Sends one command and waits for its `ok`.
    fn send(&mut self, cmd: &str) -> Result<()> {
        writeln!(self.stdin, "{cmd}")
            .with_context(|| format!("fault-proxy for {} went away", self.name))?;
        self.stdin.flush()?;
        match self.acks.recv_timeout(Duration::from_secs(5)) {
            Ok(a) if a == "ok" => Ok(()),
            Ok(a) => bail!("fault-proxy for {}: `{cmd}`: {a}", self.name),
            Err(_) => bail!(
                "fault-proxy for {} did not answer `{cmd}` within 5 s",
                self.name
            ),
        }
    }

    /// Ends the open window (if any) once it is due, or at once with
    /// `now_anyway`.
    pub fn tick(&mut self, now_anyway: bool) -> Result<()> {
        if let Some((_, end)) = self.window {
            if now_anyway || Instant::now() >= end {
                self.window = None;
                self.send("clear")?;
            }
        }
        Ok(())
    }

    /// Whether a window is open.
    pub fn busy(&self) -> bool {
        self.window.is_some()
    }

    /// Opens a window of a seeded kind; returns its kind.
    pub fn open(&mut self, rng: &mut Rng) -> Result<&'static str> {
        let kind = *rng.pick(KINDS);
        // the write of a catalog row or of an object: what has a body
        let body = if self.name == "s3" { "PUT" } else { "POST" };
        let bytes = rng.below(3000);
        let cmd = match kind {
            "refuse" => "refuse".to_string(),
            "stall" => "rule stall".to_string(),
            "stall-request" => format!("rule stall-request {bytes} method {body}"),
            "stall-response" => format!("rule stall-response {}", rng.below(200)),
            "latency" => format!("rule delay {}", 100 + rng.below(2900)),
            "cut-request" => format!("rule cut-request {bytes} method {body}"),
            "cut-response" => format!("rule cut-response {}", rng.below(400)),
            status => format!("rule status {status}"),
        };
        self.send(&cmd)?;
        let secs = rng.between(0.3, 2.5);
        self.window = Some((kind, Instant::now() + Duration::from_secs_f64(secs)));
        Ok(kind)
    }

    /// Requests the proxy hit so far, by event kind.
    pub fn hits(&self) -> BTreeMap<String, u64> {
        self.hits.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
