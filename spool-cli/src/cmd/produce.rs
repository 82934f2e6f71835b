//! `spool produce`: stage synthetic packs into a spool directory with the
//! real sink (which takes the directory's lock), printing each staged pack's
//! id on its own line as soon as it is durable. For tests, benchmarks and
//! trying a deployment out.
//!
//! Each pack is `--records` records filling about `--pack-bytes` bytes; the
//! sink seals it by record count and the command flushes it, so a printed id
//! is a pack whose `.ready` file exists and whose directory was fsynced.
//! `--hold` keeps the lock after staging until SIGTERM or SIGINT (the signals
//! are blocked in every thread and taken with `sigwait`, so no handler runs
//! in an arbitrary thread). The hidden `--pause-before-publish FILE` makes
//! every stage wait before its publish until FILE exists (a test seam; a
//! build without test seams refuses it).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use spool_core::registry::Registry;
use spool_core::sink::{AdmissionPolicy, Sink, SinkConfig};
use spool_core::spool::SpoolConfig;

use crate::exit::ExitCode;

/// The long help of `spool produce` (with examples).
pub const LONG_ABOUT: &str = "\
Stage N synthetic packs into a spool directory with the real sink, which
takes the directory's lock (exit 3, naming the holder, if someone holds it;
the directory is created, already locked, if missing). Each pack's id is
printed on its own line as soon as the pack is durable (its .ready file
exists and the directory was fsynced). For trying a deployment out, tests
and benchmarks.

Each pack is --records records filling about --pack-bytes bytes. With
--max-bytes a stage over the budget fails with exit 5. With --hold the lock
is kept after staging until SIGTERM or SIGINT.

Examples:
  spool produce --dir /tmp/spool-tour --packs 5
  spool produce --dir /var/lib/spool/3f2a9c01b7de/r7-00000000 --packs 100 --pack-bytes 1048576
  spool produce --dir DIR --packs 1 --hold &   # a live owner, until killed";

/// Arguments of `spool produce`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool directory (created, locked, if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// How many packs to stage.
    #[arg(long)]
    pub packs: u64,
    /// Approximate record payload bytes per pack.
    #[arg(long, default_value_t = 4096)]
    pub pack_bytes: u64,
    /// Records per pack.
    #[arg(long, default_value_t = 16)]
    pub records: u64,
    /// Worker ordinal: stage under `DIR/w<K>/`.
    #[arg(long)]
    pub ordinal: Option<u32>,
    /// Byte budget of the directory; a stage over it fails with exit code 5.
    #[arg(long)]
    pub max_bytes: Option<u64>,
    /// How long each pack's flush may take, in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Keep the lock after staging until SIGTERM or SIGINT.
    #[arg(long)]
    pub hold: bool,
    /// Accept a shared (network) filesystem; only for one used by one node.
    #[arg(long)]
    pub allow_shared_filesystem: bool,
    /// Test seam: pause every stage before its publish until FILE exists.
    #[arg(long, hide = true, value_name = "FILE")]
    pub pause_before_publish: Option<PathBuf>,
}

/// Runs `spool produce`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.records == 0 {
        anyhow::bail!("--records must be at least 1");
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!("--timeout must be a positive number of seconds");
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    if let Some(file) = &args.pause_before_publish {
        spool_core::spool::set_pause_before_publish(Some(file))
            .context("--pause-before-publish")?;
    }
    // Block the stop signals before any thread starts, so every thread
    // inherits the mask and only the sigwait below takes them.
    let signals = if args.hold {
        Some(block_stop_signals()?)
    } else {
        None
    };

    let mut spool = SpoolConfig::default(); // lock mode `take`
    spool.lock.allow_shared_filesystem = args.allow_shared_filesystem;
    spool.max_bytes = args.max_bytes;
    let config = SinkConfig {
        spool,
        ordinal: args.ordinal,
        seal_bytes: u64::MAX,
        seal_records: args.records,
        seal_age: Duration::from_secs(24 * 3600),
        admission: AdmissionPolicy::Refuse,
        buffer_bytes: u64::MAX,
        release_flush_timeout: timeout,
        registry: Registry::global(),
    };
    let sink = match Sink::open(&args.dir, config) {
        Ok(sink) => sink,
        Err(err) => return report(err, "cannot open the sink"),
    };

    let record_len = (args.pack_bytes / args.records) as usize;
    let mut stdout = std::io::stdout().lock();
    for pack in 0..args.packs {
        for i in 0..args.records {
            let record = synthetic_record(pack, i, record_len);
            if let Err(err) = sink.write(&record) {
                return report(err, "cannot write a record");
            }
        }
        if let Err(err) = sink.flush(timeout) {
            let code = if sink.stats().spool_full.is_some() {
                ExitCode::Full
            } else {
                ExitCode::Other
            };
            eprintln!("spool: {err}");
            return Ok(code);
        }
        let id = sink
            .stats()
            .last_staged
            .context("a flushed pack has an id")?;
        writeln!(stdout, "{}", id.to_hex()).context("writing to stdout")?;
        stdout.flush().context("flushing stdout")?;
    }
    if let Err(err) = sink.release() {
        return report(err, "release");
    }
    if let Some(signals) = signals {
        tracing::info!(dir = %sink.dir().display(), "holding the lock on {} until SIGTERM or SIGINT", sink.dir().display());
        eprintln!(
            "spool: holding the lock on {} until SIGTERM or SIGINT",
            sink.dir().display()
        );
        let signal = signals.wait().context("waiting for SIGTERM/SIGINT")?;
        tracing::info!("{signal:?}: letting go of {}", sink.dir().display());
    }
    drop(sink);
    Ok(ExitCode::Ok)
}

/// One record: pack number, record number, then a deterministic filler.
fn synthetic_record(pack: u64, i: u64, len: usize) -> Vec<u8> {
    let mut record = Vec::with_capacity(len.max(16));
    record.extend_from_slice(&pack.to_le_bytes());
    record.extend_from_slice(&i.to_le_bytes());
    let seed = (pack.wrapping_mul(31) ^ i) as u8;
    record.extend((0..len.saturating_sub(16)).map(|k| seed.wrapping_add(k as u8)));
    record
}

fn block_stop_signals() -> anyhow::Result<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block()
        .context("blocking SIGTERM/SIGINT for --hold")?;
    Ok(set)
}

/// Prints `err` and picks its exit code: 3 owned by another process, 4
/// shared filesystem, 5 spool full, else 1.
fn report(err: spool_core::Error, what: &str) -> anyhow::Result<ExitCode> {
    let code = match &err {
        spool_core::Error::Lock(lock) if lock.is_owned_by_another() => ExitCode::Owned,
        spool_core::Error::Lock(lock) if lock.is_shared_filesystem() => ExitCode::SharedFilesystem,
        spool_core::Error::Full { .. } | spool_core::Error::SpoolFull { .. } => ExitCode::Full,
        _ => ExitCode::Other,
    };
    eprintln!("spool: {what}: {err}");
    Ok(code)
}
