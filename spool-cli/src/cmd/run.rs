//! `spool run`: the daemon — an engine with no sink, run by
//! spool-service's [`spool_service::Engine::run`] (whose module doc says
//! when a run ends and what it reports). This file maps the command line to
//! a [`RunPlan`], presents the looks (progress, `/metrics`, `/healthz`) and
//! the report, and maps its [`RunEnd`] to an exit code:
//!
//! - Daemon (default): runs until SIGTERM/SIGINT/SIGHUP, then a bounded flush
//!   (`service.stop_flush_timeout`) and a stop; exit 0.
//! - `--once`: until drained (exit 0), `--timeout` (exit 6, saying what is
//!   owed), a refusing destination or blocked siblings (exit 1, naming
//!   them and why), or a signal (exit 0 after the same bounded stop).
//! - Either: exit 7 as soon as the lease latched, 10 when the loop failed.
//!
//! Progress for `--once`: an indicatif bar on a terminal; plain lines every
//! `--progress-interval` otherwise, JSON lines with `--json`.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use spool_service::{RunEnd, RunPlan, Snapshot};

use crate::config::{keys, mask_url, parse_duration, ConfigError, ConfigFlags};
use crate::exit::ExitCode;
use spool_service::metrics;
use spool_service::Health;

/// Arguments of `spool run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub config: ConfigFlags,
    /// Drain once: stop when the own directory and every adoptable sibling
    /// are drained (exit 0) instead of running until a signal.
    #[arg(long)]
    pub once: bool,
    /// With --once: give up after this long (exit 6, saying what is owed).
    /// Default: `service.once_timeout` (10 min).
    #[arg(long, value_name = "SECS", requires = "once")]
    pub timeout: Option<String>,
    /// With --once, while another live service holds the node's adopter
    /// lease: wait (within the timeout) until that service has shipped the
    /// dead siblings too, instead of exiting once the own directory is
    /// drained.
    #[arg(long, requires = "once")]
    pub wait_for_siblings: bool,
    /// Print JSON lines on stdout (start, progress, result).
    #[arg(long)]
    pub json: bool,
    /// With --once, how often a progress line is printed when stderr is not
    /// a terminal (or with --json).
    #[arg(long, value_name = "SECS", default_value = "2s")]
    pub progress_interval: String,
}

/// Runs `spool run`.
pub fn run(args: Args, config_file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let cfg = crate::config::load(config_file, &args.config)?;
    cfg.spool_root()?;
    // `--once` never waits without bound: --timeout, else service.once_timeout
    let timeout = match &args.timeout {
        Some(t) => Some(parse_duration(t).ok_or_else(|| {
            ConfigError(format!(
                "--timeout {t:?}: expected a duration (seconds, or \"500ms\", \"30s\", \"2m\")"
            ))
        })?),
        None => args.once.then(|| keys::ONCE_TIMEOUT.get(&cfg)),
    };
    let progress_every = parse_duration(&args.progress_interval)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ConfigError(format!(
                "--progress-interval {:?}: expected a positive duration",
                args.progress_interval
            ))
        })?;
    // `service.ship` is for producers' engines: set in a shared file it does
    // not stop the daemon; a flag for spool run itself is a usage error.
    cfg.daemon_ships_itself()?;
    let stop_flush = keys::STOP_FLUSH_TIMEOUT.get(&cfg);
    let plan = match timeout {
        Some(t) => RunPlan::until_drained(t, stop_flush).wait_for_siblings(args.wait_for_siblings),
        None => RunPlan::until_stopped(stop_flush),
    };
    // Before any thread: every thread inherits the blocked mask.
    let signals = crate::signals::spawn_waiter(crate::signals::block_stop_signals()?)?;
    let published = metrics::Published::new();
    let server = match keys::METRICS_ADDR.get(&cfg) {
        Some(addr) => Some(metrics::server::Server::start(addr, published.clone())?),
        None => None,
    };
    let (key, _) = cfg.key_dir()?;
    let engine = crate::engine::start(&cfg, Vec::new(), Duration::ZERO, true)?;
    let out = Output { json: args.json };
    started(&out, &cfg, &engine, &key, args.once, server.as_ref())?;

    let dir = engine.dir().to_path_buf();
    let mut health = Health::new(keys::UNHEALTHY_AFTER.get(&cfg));
    let mut progress = plan
        .is_until_drained()
        .then(|| Progress::new(&out, progress_every));
    let mut told_holder = false;
    let report = engine.run(&plan, |look| {
        let snap = look.snapshot();
        let unhealthy = health.judge(snap);
        if let Some(why) = published.publish(snap, unhealthy) {
            tracing::warn!(dir = %dir.display(), "unhealthy: {why}");
        }
        if let Some(p) = progress.as_mut() {
            p.tick(snap, look.owed_packs().unwrap_or(0));
        }
        if let (true, false, Some(h)) = (args.once, told_holder, look.other_shipper()) {
            told_holder = true;
            out.event(
                json!({"event": "lease_held_elsewhere", "holder": h.as_str(), "host": h.host(), "pid": h.pid()}),
                || format!(
                    "spool run: the node lease is held by {h}: that service adopts the dead \
                     siblings; this run {}",
                    if args.wait_for_siblings {
                        "ships its own directory and waits (--wait-for-siblings, within --timeout) until they are shipped"
                    } else {
                        "ships only its own directory (--wait-for-siblings to wait for the rest)"
                    }
                ),
            );
        }
        signals.try_recv().ok().map(|sig| format!("{sig:?}"))
    })?;
    if let Some(p) = progress.take() {
        p.finish();
    }
    let code = exit_code(report.end());
    let message = report.message();
    let snap = report.snapshot();
    if server.is_some()
        && matches!(
            code,
            ExitCode::LeaseLost | ExitCode::Deadline | ExitCode::LoopFailed
        )
    {
        // let the last state (latched, owed) be scraped; a signal cuts it short
        let _ = signals.recv_timeout(keys::METRICS_LINGER.get(&cfg));
    }
    drop(server);
    out.event(
        json!({
            "event": "done",
            "exit_code": code as u8,
            "message": message,
            "elapsed_s": report.elapsed().as_secs_f64(),
            "snapshot": snap.to_json(),
        }),
        || message.clone(),
    );
    Ok(code)
}

/// The exit code of a run's end.
fn exit_code(end: &RunEnd) -> ExitCode {
    match end {
        RunEnd::Drained | RunEnd::LeftToShipper(_) | RunEnd::Stopped(_) => ExitCode::Ok,
        RunEnd::Blocked | RunEnd::Refused(_) => ExitCode::Other,
        RunEnd::Deadline(_) => ExitCode::Deadline,
        RunEnd::LoopFailed(_) => ExitCode::LoopFailed,
        RunEnd::Latched => ExitCode::LeaseLost,
    }
}

/// The `started` event: the claimed directory and the destination.
fn started(
    out: &Output,
    cfg: &crate::config::Config,
    engine: &spool_service::Engine,
    key: &str,
    once: bool,
    server: Option<&metrics::server::Server>,
) -> anyhow::Result<()> {
    out.event(
        json!({
            "event": "started",
            "dir": engine.dir(),
            "catalog_key": key,
            "store": mask_url(&cfg.store_url()?),
            "catalog": mask_url(&cfg.catalog_url()?),
            "once": once,
            "metrics_addr": server.as_ref().map(|s| s.addr.to_string()),
            "pid": std::process::id(),
        }),
        || {
            format!(
                "spool run: claimed {} (catalog key {key}); store {}; catalog {}{}",
                engine.dir().display(),
                mask_url(&cfg.store_url().unwrap_or_default()),
                mask_url(&cfg.catalog_url().unwrap_or_default()),
                server
                    .as_ref()
                    .map(|s| format!("; metrics on http://{}/metrics", s.addr))
                    .unwrap_or_default()
            )
        },
    );
    Ok(())
}

/// Where human and JSON output go.
struct Output {
    json: bool,
}

impl Output {
    /// A JSON line on stdout with `--json`, else the human line on stderr
    /// (`done` goes to stdout when it is a success).
    fn event(&self, v: Value, human: impl FnOnce() -> String) {
        if self.json {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{v}");
            let _ = o.flush();
        } else if v["event"] == "done" && v["exit_code"] == 0 {
            // a closed stdout never stops (or panics) the daemon
            let _ = writeln!(std::io::stdout().lock(), "spool run: {}", human());
        } else if v["event"] == "done" {
            eprintln!("spool run: {}", human());
        } else {
            eprintln!("{}", human());
        }
    }
}

/// Progress of `--once`.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    json: bool,
    every: Duration,
    last_line: Option<Instant>,
}

impl Progress {
    fn new(out: &Output, every: Duration) -> Progress {
        let tty = !out.json && std::io::stderr().is_terminal();
        let bar = tty.then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} packs drained  {msg}",
                )
                .expect("a valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            bar,
            json: out.json,
            every,
            last_line: None,
        }
    }

    fn tick(&mut self, s: &Snapshot, owed: u64) {
        let drained = s.indexed;
        if let Some(b) = &self.bar {
            b.set_length(drained + owed);
            b.set_position(drained);
            b.set_message(format!(
                "{owed} owed, {} sibling(s) adopted, {} live, {} blocked",
                s.adopted_spools,
                s.live_siblings,
                s.blocked_siblings.len()
            ));
            return;
        }
        if self.last_line.is_some_and(|t| t.elapsed() < self.every) {
            return;
        }
        self.last_line = Some(Instant::now());
        if self.json {
            // a closed stdout never stops (or panics) the daemon
            let _ = writeln!(
                std::io::stdout().lock(),
                "{}",
                json!({"event": "progress", "drained_packs": drained, "owed_packs": owed,
                       "snapshot": s.to_json()})
            );
        } else {
            eprintln!(
                "spool run: {drained} pack(s) drained, {owed} owed ({} uploaded awaiting the catalog), {} sibling(s) adopted, {} live, {} blocked",
                s.pending_index,
                s.adopted_spools,
                s.live_siblings,
                s.blocked_siblings.len()
            );
        }
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
