//! What `spool status` asks the node's running daemon: its open bundle
//! (the small packs waiting for a bundle to fill, `upload.bundle_linger`),
//! read from the gauges of its `/metrics` (`metrics.addr`). The spool
//! directory cannot say which of its ready packs wait for a bundle; only
//! the process draining them knows.
//!
//! A probe like the rest of `spool status`: one HTTP/1.0 `GET`, the whole
//! exchange within [`ASK_TIMEOUT`] (a daemon that accepts and never
//! answers, or drips, costs the command at most that), at most
//! [`MAX_ANSWER_BYTES`] read; any trouble is a [`Daemon::NoAnswer`] saying
//! what went wrong, never an error of the command.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The whole exchange with the daemon: connect, ask, read the answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// The most of an answer read (a `/metrics` page is a few KiB).
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The daemon's open bundle, as its gauges say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpenBundleGauges {
    /// Small packs waiting for their bundle to fill.
    pub packs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How long the oldest of them has waited, in milliseconds.
    pub age_ms: u64,
}

/// What asking the daemon gave.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Daemon {
    /// It answered with its gauges.
    Answered {
        /// Where it was asked.
        addr: String,
        /// Its open bundle (all zero: none open).
        open_bundle: OpenBundleGauges,
    },
    /// It did not answer in time, or not with its gauges.
    NoAnswer {
        /// Where it was asked.
        addr: String,
        /// What went wrong.
        why: String,
    },
    /// It was not asked: where it serves could not be read.
    NotAsked {
        /// Why not.
        why: String,
    },
}

impl Daemon {
    /// One line for people: the open bundle, or why there is no answer.
    pub fn text(&self) -> String {
        match self {
            Daemon::Answered { addr, open_bundle: b } if b.packs == 0 => {
                format!("no open bundle (the daemon's metrics at {addr})")
            }
            Daemon::Answered { addr, open_bundle: b } => format!(
                "open bundle of {} pack(s), {}, the oldest waiting {:.2} s (the daemon's metrics at {addr})",
                b.packs,
                indicatif::BinaryBytes(b.bytes),
                b.age_ms as f64 / 1000.0
            ),
            Daemon::NoAnswer { addr, why } => format!(
                "no answer from the daemon's metrics at {addr} ({why}); is `spool run` running with this metrics.addr?"
            ),
            Daemon::NotAsked { why } => format!("not asked ({why})"),
        }
    }
}

/// Asks the daemon serving `/metrics` at `addr` for its open bundle.
pub fn ask(addr: SocketAddr) -> Daemon {
    match fetch_metrics(addr).and_then(|page| open_bundle(&page)) {
        Ok(open_bundle) => Daemon::Answered {
            addr: addr.to_string(),
            open_bundle,
        },
        Err(why) => Daemon::NoAnswer {
            addr: addr.to_string(),
            why,
        },
    }
}

/// The body of `GET /metrics` at `addr`, within [`ASK_TIMEOUT`].
fn fetch_metrics(addr: SocketAddr) -> Result<String, String> {
    let deadline = Instant::now() + ASK_TIMEOUT;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer within {ASK_TIMEOUT:?}"))
    };
    let timed_out = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("no answer within {ASK_TIMEOUT:?}")
        }
        _ => e.to_string(),
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?).map_err(timed_out)?;
    stream.set_write_timeout(Some(left()?)).map_err(timed_out)?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(timed_out)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        stream.set_read_timeout(Some(left()?)).map_err(timed_out)?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(timed_out(e)),
        }
        if answer.len() > MAX_ANSWER_BYTES {
            return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or("an answer that is not HTTP")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("it answered `{status}`"));
    }
    Ok(body.to_string())
}

/// The open bundle's gauges in a `/metrics` page.
fn open_bundle(page: &str) -> Result<OpenBundleGauges, String> {
    let gauge = |name: &str| -> Result<u64, String> {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                format!("its metrics have no `{name}`: not a spool daemon of this version")
            })
    };
    Ok(OpenBundleGauges {
        packs: gauge("spool_open_bundle_packs")?,
        bytes: gauge("spool_open_bundle_bytes")?,
        age_ms: gauge("spool_open_bundle_age_milliseconds")?,
    })
}

#[cfg(test)]
mod tests;
