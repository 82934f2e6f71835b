//! `spool produce`: stages synthetic packs with the real sink and prints
//! each id once the pack is durable. What it does for a user (where it
//! stages, `--serve`, `--hold`, the exit codes) is [`LONG_ABOUT`]; this
//! file maps the flags to one of three targets: a sink on `--dir`, a
//! sink-only producer claimed in the layout (spool-core's `Sink::claim`,
//! handing each pack off to the node's daemon) or, with `--serve`, an
//! [`Engine`] (spool-service) with its own service.
//!
//! `--hold` blocks the stop signals in every thread before any starts and
//! takes them with `sigwait` on a thread of its own ([`crate::signals`]),
//! so no handler runs in an arbitrary thread; one that comes while staging
//! stops after the pack in flight, so a stop never waits for the whole run
//! (the torture's stop bound, RELIABILITY.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use spool_core::registry::Registry;
use spool_core::sink::{AdmissionPolicy, Sink, SinkConfig};
use spool_core::spool::SpoolConfig;
use spool_service::Engine;

use crate::config::{keys, Config, ConfigError, ConfigFlags, FlagValue};
use crate::exit::ExitCode;

/// The long help of `spool produce` (with examples).
pub const LONG_ABOUT: &str = "\
Stage N synthetic packs with the real sink, printing each pack's id on its
own line as soon as the pack is durable (its .ready file exists and the
directory was fsynced). For trying a deployment out, tests and benchmarks.

Where it stages: --dir DIR (created, already locked, if missing; exit 3,
naming the holder, if someone holds it), or a spool root (--spool-root
ROOT, SPOOL_ROOT, spool.root): a fresh rank directory claimed in the
layout for the destination. The destination, rank and service knobs
resolve as for `spool run` (--store, --catalog, --store-id, --rank, the
SPOOL_* variables, the config file; the embedded defaults under ROOT when
none names a store or catalog), so `spool run` with the same
configuration finds the packs; stderr says where. Without --serve that is a sink-only producer: each pack is handed
off to the node's `spool run` daemon while it lives (with none running, its
packs are adopted once it exits). With --serve the
process runs the whole engine: its own service uploads and indexes as it
goes, and the close ships the tail and removes the directory (exit 6 if it
could not drain: the directory stays, unlocked, with its packs).

Each pack is --records records filling about --pack-bytes bytes. With
--max-bytes (or spool.max_bytes / SPOOL_MAX_BYTES) a stage over the
directory's budget fails with exit 5; under --spool-root what dead sibling
rank directories hold counts against it too. With --hold the lock
is kept after staging until SIGTERM, SIGINT or SIGHUP; one that comes while it
still stages stops it after the pack in flight.

Examples:
  spool produce --dir /tmp/spool-tour --packs 5
  spool produce --spool-root /var/lib/spool --packs 100 --pack-bytes 1048576 --serve
  spool produce --spool-root /var/lib/spool --packs 10   # sink-only; adopt with spool run
  spool produce --dir DIR --packs 1 --hold &              # a live owner, until killed";

/// Arguments of `spool produce`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The spool directory (created, locked, if missing), outside the
    /// layout: no destination, no rank directory.
    #[arg(long, conflicts_with = "spool_root")]
    pub dir: Option<PathBuf>,
    /// Where the layout's rank directory is claimed and, with --serve, where
    /// its packs go: the same flags, SPOOL_* variables and config file as
    /// `spool run` (`spool config show` prints what they resolve to).
    #[command(flatten)]
    pub config: ConfigFlags,
    /// Run the whole engine: this process's own service uploads and indexes
    /// its packs as it goes (needs a spool root).
    #[arg(long)]
    pub serve: bool,
    /// How many packs to stage.
    #[arg(long)]
    pub packs: u64,
    /// Approximate record payload bytes per pack.
    #[arg(long, default_value_t = 4096)]
    pub pack_bytes: u64,
    /// Records per pack.
    #[arg(long, default_value_t = 16)]
    pub records: u64,
    /// Seconds to wait between packs (a steady producer).
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    pub pack_interval: f64,
    /// Worker ordinal: stage under `DIR/w<K>/`.
    #[arg(long)]
    pub ordinal: Option<u32>,
    /// Byte budget of the directory (default: spool.max_bytes /
    /// SPOOL_MAX_BYTES); a stage over it fails with exit code 5, naming the
    /// bytes used, the budget and what dead siblings hold. Bytes, or with
    /// a unit (`64MiB`, `1GB`).
    #[arg(long, value_parser = max_bytes_arg, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
    /// How long each pack's flush may take (and, with --serve, the final
    /// drain), in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Keep the lock (and with --serve the service) after staging until
    /// SIGTERM, SIGINT or SIGHUP.
    #[arg(long)]
    pub hold: bool,
    /// Print each pack's SHA-256 (of the whole pack, as `sha256sum` prints
    /// it and its catalog row carries; 64 hex digits)
    /// after its id on the same line: `ID SHA256`.
    #[arg(long)]
    pub print_sha256: bool,
}

fn max_bytes_arg(s: &str) -> Result<u64, String> {
    match crate::config::parse_bytes(s) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "{s:?} is not a byte budget: a positive number of bytes, optionally with a unit (KiB, MiB, GiB, KB, MB, GB)"
        )),
    }
}

/// Where the sink stages, and what owns the directory.
enum Target {
    /// `--dir`: the sink took the directory's lock itself.
    Dir(Sink),
    /// `--spool-root` without `--serve`: a claimed rank directory, the
    /// sink owning the claim (spool-core's `Sink::claim`).
    Claimed(Sink),
    /// `--spool-root --serve`: the engine.
    Engine(Box<Engine>),
}

impl Target {
    fn sink(&self) -> &Sink {
        match self {
            Target::Dir(sink) | Target::Claimed(sink) => sink,
            Target::Engine(engine) => &engine.sinks()[0],
        }
    }
}

fn secs(name: &str, value: f64, zero_ok: bool) -> anyhow::Result<Duration> {
    if value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0)) {
        Ok(Duration::from_secs_f64(value))
    } else {
        anyhow::bail!("--{name} must be a positive number of seconds (got {value})")
    }
}

/// Where `spool produce` stages.
enum Place {
    /// `--dir DIR`: a plain directory outside the layout.
    Dir(PathBuf),
    /// A rank directory claimed under this spool root, for the configured
    /// destination.
    Root(PathBuf),
}

/// Resolves the configuration: the global `--config`, the `SPOOL_*`
/// variables and the flags, `--max-bytes` among them (`spool.max_bytes`).
fn load(args: &Args, config_file: Option<&Path>) -> Result<Config, ConfigError> {
    let mut flags = args.config.values()?;
    if let Some(bytes) = args.max_bytes {
        flags.push(FlagValue::new(&keys::MAX_BYTES.key, bytes.to_string()));
    }
    Config::load(config_file, &flags)
}

/// Where to stage, or a usage error saying what is wrong.
fn place(args: &Args, cfg: &Config) -> Result<Place, String> {
    if args.config.metrics_addr.is_some() {
        return Err(
            "--metrics-addr: spool produce serves no metrics (spool run does); leave it out".into(),
        );
    }
    let Some(dir) = &args.dir else {
        return cfg.spool_root().map(Place::Root).map_err(|_| {
            "no spool directory: give --dir DIR, or a spool root for a rank directory in the \
             layout (--spool-root ROOT, SPOOL_ROOT, or spool.root in the config file)"
                .to_string()
        });
    };
    if args.serve {
        return Err(
            "--serve needs a spool root (--spool-root ROOT): the engine claims a rank \
                    directory there; --dir stages outside the layout, with no destination"
                .into(),
        );
    }
    let f = &args.config;
    let layout_only = [
        ("--store", f.store.is_some()),
        ("--catalog", f.catalog.is_some()),
        ("--store-id", f.store_id.is_some()),
        ("--rank", f.rank.is_some()),
    ];
    if let Some((flag, _)) = layout_only.iter().find(|(_, given)| *given) {
        return Err(format!(
            "{flag} is for a rank directory in the layout (--spool-root ROOT); --dir {} stages \
             outside it, with no destination",
            dir.display()
        ));
    }
    Ok(Place::Dir(dir.clone()))
}

/// Runs `spool produce`. `config_file` is the global `--config`; the
/// destination, the rank, the byte budget and the service's knobs resolve
/// from it, the `SPOOL_*` variables and the flags as for `spool run`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    if args.records == 0 {
        anyhow::bail!("--records must be at least 1");
    }
    let timeout = secs("timeout", args.timeout, false)?;
    let pack_interval = secs("pack-interval", args.pack_interval, true)?;
    let usage = |err: &dyn std::fmt::Display| {
        eprintln!("spool: {err}");
        Ok(ExitCode::Usage)
    };
    let cfg = match load(&args, config_file) {
        Ok(cfg) => cfg,
        Err(err) => return usage(&err),
    };
    let place = match place(&args, &cfg) {
        Ok(place) => place,
        Err(err) => return usage(&err),
    };
    // What it creates is private unless spool.mode / spool.group say
    // otherwise.
    let lock = match cfg.lock_options() {
        Ok(lock) => lock,
        Err(err) => return usage(&err),
    };
    if let Place::Root(root) = &place {
        spool_lock::create_parents(root, &lock.access)
            .with_context(|| format!("cannot create the spool root {}", root.display()))?;
        match crate::engine::destination_line(&cfg) {
            Ok(line) => eprintln!(
                "spool produce: {} {line}",
                match (args.serve, keys::SHIP.get(&cfg)) {
                    (true, spool_service::Ship::Itself) => "shipping to",
                    (true, spool_service::Ship::Daemon) =>
                        "engine with its packs handed off to the node's daemon (service.ship = daemon), staging for",
                    (false, _) => "staging for",
                }
            ),
            Err(err) => return usage(&crate::exit::message_of(&err)),
        }
    }
    // With --hold, block the stop signals (SIGTERM, SIGINT, SIGHUP) before
    // any thread starts, so every thread inherits the mask and only the
    // sigwait below takes them: one while staging ends the run after the
    // pack in flight, with the same release as the last pack. Without
    // --hold each of them ends the process at once, as a kill does (its
    // directory is then a dead sibling to adopt).
    let signals = if args.hold {
        let set = crate::signals::block_stop_signals().context("--hold")?;
        Some(crate::signals::spawn_waiter(set).context("--hold")?)
    } else {
        None
    };
    // A stop signal taken while staging: no more packs.
    let mut stopped = None;

    let sink_config = sink_config(&args, &cfg, &place, lock);
    let target = match open_target(&args, &cfg, &place, sink_config, timeout) {
        Ok(target) => target,
        Err(err) => return Ok(report_open(&err)),
    };
    let sink = target.sink();

    let record_len = (args.pack_bytes / args.records) as usize;
    let mut stdout = std::io::stdout().lock();
    for pack in 0..args.packs {
        if let Some(rx) = &signals {
            // the pack interval, cut short by a stop signal
            let wait = if pack > 0 {
                pack_interval
            } else {
                Duration::ZERO
            };
            if let Ok(signal) = rx.recv_timeout(wait) {
                let dir = sink.dir().display().to_string();
                tracing::info!(dir = %dir, "{signal:?} while staging: {pack} of {} pack(s) staged, letting go of {dir}", args.packs);
                eprintln!("spool: {signal:?} while staging: {pack} of {} pack(s) staged; letting go of {dir}", args.packs);
                stopped = Some(signal);
                break;
            }
        } else if pack > 0 && !pack_interval.is_zero() {
            std::thread::sleep(pack_interval);
        }
        for i in 0..args.records {
            let record = synthetic_record(pack, i, record_len);
            if let Err(err) = sink.write(&record) {
                return report(err, "cannot write a record");
            }
        }
        if let Err(err) = flush_or_refuse(sink, timeout) {
            return Ok(refused(sink, &err, pack, args.packs));
        }
        let stats = sink.stats();
        let id = stats.last_staged.context("a flushed pack has an id")?;
        if args.print_sha256 {
            let sha = stats
                .last_staged_sha256
                .context("a flushed pack has a checksum")?;
            writeln!(stdout, "{} {}", id.to_hex(), hex::encode(sha))
        } else {
            writeln!(stdout, "{}", id.to_hex())
        }
        .context("writing to stdout")?;
        stdout.flush().context("flushing stdout")?;
    }
    if let Target::Engine(_) = &target {
        // The engine's close releases the sink itself, after this wait.
    } else if let Err(err) = sink.release() {
        return report(err, "release");
    }
    if let (Some(signals), None) = (signals, stopped) {
        let dir = sink.dir().display().to_string();
        tracing::info!(dir = %dir, "holding the lock on {dir} until SIGTERM, SIGINT or SIGHUP");
        eprintln!("spool: holding the lock on {dir} until SIGTERM, SIGINT or SIGHUP");
        let signal = signals
            .recv()
            .context("waiting for SIGTERM/SIGINT/SIGHUP: the signal thread ended")?;
        tracing::info!(dir = %dir, "{signal:?}: letting go of {dir}");
    }
    Ok(close(target))
}

/// The sink `spool produce` stages through: one pack per flush, refusing
/// (never waiting) when the spool is full.
fn sink_config(
    args: &Args,
    cfg: &Config,
    place: &Place,
    lock: spool_lock::LockOptions,
) -> SinkConfig {
    let spool = SpoolConfig {
        lock,
        max_bytes: keys::MAX_BYTES.get(cfg),
        // In the layout, dead siblings' packs count against the budget,
        // so a crash-restart loop cannot grow the node's disk
        // use by a budget per incarnation. (With --serve the engine's
        // service spool does the same.)
        charge_dead_siblings: matches!(place, Place::Root(_)),
        ..SpoolConfig::default() // lock mode `take`
    };
    SinkConfig {
        spool,
        ordinal: args.ordinal,
        seal_bytes: u64::MAX,
        seal_records: args.records,
        seal_age: Duration::from_secs(24 * 3600),
        admission: AdmissionPolicy::Refuse,
        buffer_bytes: u64::MAX,
        // Every pack was flushed (within --timeout) before the release; a
        // flush that failed (a full spool) is not waited out a second time.
        release_flush_timeout: Duration::ZERO,
        registry: Registry::global(),
        // A sink-only producer in the layout hands each pack to the node's
        // shipper while it lives (with none, its packs go when it exits).
        hand_off: matches!(place, Place::Root(_)) && !args.serve,
    }
}

/// Says why pack `pack` (of `packs`) was refused, and picks the exit code.
fn refused(sink: &Sink, err: &dyn std::fmt::Display, pack: u64, packs: u64) -> ExitCode {
    match sink.stats().spool_full {
        Some(full) => {
            eprintln!(
                "spool: pack {} of {} refused: the spool is full: {} of {} bytes used, \
                         {} of them by dead siblings (spool directory {}); drain it (spool run) \
                         or raise --max-bytes / spool.max_bytes",
                pack + 1,
                packs,
                full.used,
                full.budget,
                full.dead_sibling_bytes,
                sink.dir().display()
            );
            ExitCode::Full
        }
        None => {
            eprintln!("spool: {err}");
            ExitCode::Other
        }
    }
}

/// Flushes within `timeout`, but gives up at the first stage refused for a
/// full budget (the producer's choice here is to refuse, exit 5, not to
/// wait for capacity to come back).
fn flush_or_refuse(sink: &Sink, timeout: Duration) -> Result<(), spool_core::Error> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match sink.flush(left.min(Duration::from_millis(50))) {
            Ok(()) => return Ok(()),
            Err(err) if left.is_zero() || sink.stats().spool_full.is_some() => return Err(err),
            Err(_) => {}
        }
    }
}

/// Opens the sink where the arguments say (see the module docs).
fn open_target(
    args: &Args,
    cfg: &Config,
    place: &Place,
    sink_config: SinkConfig,
    timeout: Duration,
) -> anyhow::Result<Target> {
    if let Place::Dir(dir) = place {
        return Ok(Target::Dir(Sink::open(dir, sink_config)?));
    }
    if args.serve {
        let engine = crate::engine::start(cfg, vec![sink_config], timeout, false)?;
        eprintln!("spool: rank directory {}", engine.dir().display());
        return Ok(Target::Engine(Box::new(engine)));
    }
    let sink = cfg.claim_sink(sink_config)?;
    eprintln!("spool: rank directory {}", sink.dir().display());
    Ok(Target::Claimed(sink))
}

/// Lets go of the directory in the right order and picks the exit code.
fn close(target: Target) -> ExitCode {
    match target {
        Target::Dir(sink) => {
            drop(sink);
            ExitCode::Ok
        }
        Target::Claimed(sink) => {
            // sealed, the sink lets go of its claim (the directory a dead
            // sibling to adopt, removed at once if nothing is left); else
            // the claim stays held until exit, with a warning
            drop(sink);
            ExitCode::Ok
        }
        Target::Engine(engine) => {
            let report = engine.close();
            for problem in &report.problems {
                eprintln!("spool: {}: {problem}", report.dir.display());
            }
            if report.drained && report.sealed {
                ExitCode::Ok
            } else {
                eprintln!(
                    "spool: {} was not drained; its packs stay there for a service to adopt",
                    report.dir.display()
                );
                ExitCode::Deadline
            }
        }
    }
}

/// The exit code and message of a failed open.
fn report_open(err: &anyhow::Error) -> ExitCode {
    eprintln!(
        "spool: cannot open the sink: {}",
        crate::exit::message_of(err)
    );
    crate::exit::exit_code_of(err)
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

/// Prints `err` and picks its exit code ([`crate::exit::exit_code_of`]: 3
/// owned by another process, 4 shared filesystem, 5 spool full, else 1).
fn report(err: spool_core::Error, what: &str) -> anyhow::Result<ExitCode> {
    let err = anyhow::Error::new(err);
    eprintln!("spool: {what}: {}", crate::exit::message_of(&err));
    Ok(crate::exit::exit_code_of(&err))
}
