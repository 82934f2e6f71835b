//! `spool produce`: stage synthetic packs into a spool directory with the
//! real sink (which takes the directory's lock), printing each staged pack's
//! id on its own line as soon as it is durable. For tests, benchmarks and
//! trying a deployment out.
//!
//! Where it stages:
//! - `--dir DIR`: that directory (created and locked if missing);
//! - `--spool-root ROOT`: a fresh rank directory claimed under the layout
//!   for the destination (`--store`, `--catalog`, `--store-id`; embedded
//!   defaults under ROOT when omitted), printed on stderr as
//!   `spool: rank directory DIR`. Without `--serve` it is a sink-only
//!   producer: its packs are handed over by exiting (the directory is then a
//!   dead sibling for a service to adopt). With `--serve` it runs the whole
//!   engine (SPEC §7.5): its own service uploads and indexes as it goes, and
//!   the close at the end ships the tail and removes the directory (exit 6
//!   if it could not drain: the directory stays, unlocked, with its packs).
//!
//! Each pack is `--records` records filling about `--pack-bytes` bytes; the
//! sink seals it by record count and the command flushes it, so a printed id
//! is a pack whose `.ready` file exists and whose directory was fsynced
//! (`--print-sha256` adds its trailer checksum: `ID SHA256`).
//! `--hold` keeps the lock after staging until SIGTERM, SIGINT or SIGHUP (the signals
//! are blocked in every thread and taken with `sigwait` by a thread of
//! their own, so no handler runs in an arbitrary thread). A signal that
//! comes while it is still staging stops it after the pack in flight (one
//! flush, `--timeout`, at the most): it stages no more packs and lets go as
//! it would after the last one, so a stop never waits for the whole run of
//! packs (the torture's stop bound, RELIABILITY.md). The hidden `--pause-before-publish FILE` makes
//! every stage wait before its publish until FILE exists (a test seam; a
//! build without test seams refuses it).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use spool_core::registry::Registry;
use spool_core::sink::{AdmissionPolicy, Sink, SinkConfig};
use spool_core::spool::SpoolConfig;
use spool_service::{Engine, EngineConfig, ServiceConfig};

use crate::exit::ExitCode;

/// The long help of `spool produce` (with examples).
pub const LONG_ABOUT: &str = "\
Stage N synthetic packs with the real sink, printing each pack's id on its
own line as soon as the pack is durable (its .ready file exists and the
directory was fsynced). For trying a deployment out, tests and benchmarks.

Where it stages: --dir DIR (created, already locked, if missing; exit 3,
naming the holder, if someone holds it), or --spool-root ROOT: a fresh rank
directory claimed in the layout for the destination (--store, --catalog,
--store-id; the embedded defaults under ROOT when omitted), named on
stderr. Without --serve that is a sink-only producer: its packs are handed
over by exiting, for a `spool run` daemon to adopt. With --serve the
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
    /// The spool directory (created, locked, if missing).
    #[arg(
        long,
        required_unless_present = "spool_root",
        conflicts_with = "spool_root"
    )]
    pub dir: Option<PathBuf>,
    /// Claim a fresh rank directory under this spool root instead of --dir.
    #[arg(long, value_name = "ROOT")]
    pub spool_root: Option<PathBuf>,
    /// Store URL of the destination (default: file://ROOT/.store).
    #[arg(long, requires = "spool_root", value_name = "URL")]
    pub store: Option<String>,
    /// Catalog URL of the destination (default: sqlite:///ROOT/.catalog.db).
    #[arg(long, requires = "spool_root", value_name = "URL")]
    pub catalog: Option<String>,
    /// The operator's name for the store (part of the catalog key).
    #[arg(long, default_value = spool_core::layout::DEFAULT_STORE_ID, requires = "spool_root")]
    pub store_id: String,
    /// Rank of the claimed directory (default: $RANK, else 0).
    #[arg(long, requires = "spool_root")]
    pub rank: Option<u64>,
    /// Run the whole engine: this process's own service uploads and indexes
    /// its packs as it goes (needs --spool-root).
    #[arg(long, requires = "spool_root")]
    pub serve: bool,
    /// With --serve: lease time-to-live in whole seconds (≥ 5).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub lease_ttl: u64,
    /// With --serve: the service's poll interval in seconds.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub poll_interval: f64,
    /// With --serve: how often a live sibling is probed again, in seconds.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub recheck_interval: f64,
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
    /// Accept a shared (network) filesystem; only for one used by one node.
    #[arg(long)]
    pub allow_shared_filesystem: bool,
    /// Print each pack's SHA-256 (its trailer checksum, 64 hex digits)
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
    /// `--spool-root` without `--serve`: a claimed rank directory, a sink
    /// held by caller.
    Claimed(Sink, spool_lock::Claim),
    /// `--spool-root --serve`: the engine.
    Engine(Box<Engine>),
}

impl Target {
    fn sink(&self) -> &Sink {
        match self {
            Target::Dir(sink) | Target::Claimed(sink, _) => sink,
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

/// Runs `spool produce`. `config_file` is the global `--config`: the
/// directory's byte budget comes from `--max-bytes`, else `spool.max_bytes`
/// (`SPOOL_MAX_BYTES`, the file).
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    if args.records == 0 {
        anyhow::bail!("--records must be at least 1");
    }
    if args.serve && args.spool_root.is_none() {
        eprintln!("spool: --serve needs --spool-root (the engine claims a rank directory there)");
        return Ok(ExitCode::Usage);
    }
    let timeout = secs("timeout", args.timeout, false)?;
    let pack_interval = secs("pack-interval", args.pack_interval, true)?;
    // Block the stop signals before any thread starts, so every thread
    // inherits the mask and only the sigwait below takes them.
    // A stop signal (SIGTERM, SIGINT, SIGHUP) while staging ends the run
    // after the pack in flight, with the same release as the last pack.
    let signals = crate::signals::spawn_waiter(crate::signals::block_stop_signals()?)?;
    // A stop signal taken while staging: no more packs.
    let mut stopped = None;

    let mut spool = SpoolConfig::default(); // lock mode `take`
    spool.lock.allow_shared_filesystem = args.allow_shared_filesystem;
    // In the layout, dead siblings' packs count against the budget (SPEC
    // §4.2), so a crash-restart loop cannot grow the node's disk use by a
    // budget per incarnation. (With --serve the engine's service spool
    // does the same.)
    spool.charge_dead_siblings = args.spool_root.is_some();
    let cfg = match crate::config::load(config_file, &Default::default()) {
        Ok(cfg) => cfg,
        Err(err) => {
            eprintln!("spool: {err}");
            return Ok(ExitCode::Usage);
        }
    };
    spool.max_bytes = args
        .max_bytes
        .or_else(|| crate::config::keys::MAX_BYTES.get(&cfg));
    // What it creates is private unless spool.mode / spool.group say
    // otherwise (SPEC §1).
    spool.lock.access = match cfg.access() {
        Ok(access) => access,
        Err(err) => {
            eprintln!("spool: {err}");
            return Ok(ExitCode::Usage);
        }
    };
    let sink_config = SinkConfig {
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
    };
    let target = match open_target(&args, sink_config, timeout) {
        Ok(target) => target,
        Err(err) => return Ok(report_open(&err)),
    };
    let sink = target.sink();

    let record_len = (args.pack_bytes / args.records) as usize;
    let mut stdout = std::io::stdout().lock();
    for pack in 0..args.packs {
        {
            // the pack interval, cut short by a stop signal
            let wait = if pack > 0 {
                pack_interval
            } else {
                Duration::ZERO
            };
            if let Ok(signal) = signals.recv_timeout(wait) {
                let dir = sink.dir().display().to_string();
                tracing::info!(dir = %dir, "{signal:?} while staging: {pack} of {} pack(s) staged, letting go of {dir}", args.packs);
                eprintln!("spool: {signal:?} while staging: {pack} of {} pack(s) staged; letting go of {dir}", args.packs);
                stopped = Some(signal);
                break;
            }
        }
        for i in 0..args.records {
            let record = synthetic_record(pack, i, record_len);
            if let Err(err) = sink.write(&record) {
                return report(err, "cannot write a record");
            }
        }
        if let Err(err) = flush_or_refuse(sink, timeout) {
            return Ok(match sink.stats().spool_full {
                Some(full) => {
                    eprintln!(
                        "spool: pack {} of {} refused: the spool is full: {} of {} bytes used, \
                         {} of them by dead siblings (spool directory {}); drain it (spool run) \
                         or raise --max-bytes / spool.max_bytes",
                        pack + 1,
                        args.packs,
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
            });
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
    if let (true, None) = (args.hold, stopped) {
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
fn open_target(args: &Args, sink_config: SinkConfig, timeout: Duration) -> anyhow::Result<Target> {
    let Some(root) = &args.spool_root else {
        let dir = args
            .dir
            .as_ref()
            .context("--dir or --spool-root is required")?;
        return Ok(Target::Dir(Sink::open(dir, sink_config)?));
    };
    if args.serve {
        crate::dest::refuse_memory(
            args.store.as_deref().unwrap_or_default(),
            args.catalog.as_deref().unwrap_or_default(),
        )?;
    }
    spool_lock::create_parents(root, &sink_config.spool.lock.access)
        .with_context(|| format!("cannot create the spool root {}", root.display()))?;
    let opened = crate::dest::open(
        root,
        args.store.as_deref(),
        args.catalog.as_deref(),
        &args.store_id,
        &sink_config.spool.lock.access,
    )?;
    let rank = args.rank.unwrap_or_else(spool_core::layout::rank_from_env);
    let lock = sink_config.spool.lock.clone();
    if args.serve {
        let mut service = ServiceConfig::new(
            root,
            opened.destination,
            opened.store.object_store().clone(),
            opened.catalog,
        );
        service.store_prefix = opened.store.prefix().to_string();
        service.conditional_create = opened.store.conditional_create();
        service.lease_ttl = Duration::from_secs(args.lease_ttl);
        service.poll_interval = secs("poll-interval", args.poll_interval, false)?;
        service.recheck_interval = secs("recheck-interval", args.recheck_interval, true)?;
        service.lock = lock;
        let engine = Engine::start(EngineConfig {
            spool_root: root.clone(),
            rank,
            service,
            sinks: vec![sink_config],
            close_flush_timeout: timeout,
        })?;
        eprintln!("spool: rank directory {}", engine.dir().display());
        return Ok(Target::Engine(Box::new(engine)));
    }
    let key = opened.destination.catalog_key()?;
    let claim = spool_core::layout::claim_rank_dir(root, &key, rank, &lock)?;
    eprintln!("spool: rank directory {}", claim.dir().display());
    let mut config = sink_config;
    config.spool.lock_mode = spool_lock::LockMode::HeldByCaller;
    match Sink::open(claim.dir(), config) {
        Ok(sink) => Ok(Target::Claimed(sink, claim)),
        Err(err) => {
            let _ = claim.release_and_remove_if_empty();
            Err(err.into())
        }
    }
}

/// Lets go of the directory in the right order and picks the exit code.
fn close(target: Target) -> ExitCode {
    match target {
        Target::Dir(sink) => {
            drop(sink);
            ExitCode::Ok
        }
        Target::Claimed(sink, claim) => {
            let sealed = sink.sealed_on_release();
            drop(sink);
            if sealed {
                // Hand the packs over: an unlocked rank directory is a dead
                // sibling (removed at once if nothing was staged).
                if let Err(err) = claim.release_and_remove_if_empty() {
                    eprintln!("spool: releasing the rank directory: {err}");
                    return ExitCode::Other;
                }
            } // else: the dropped claim stays held until exit, with a warning
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
