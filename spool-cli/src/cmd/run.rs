//! `spool run`: the daemon — an engine with no sink. It claims
//! its own (empty) rank directory under the destination's catalog key,
//! competes for the node's adopter lease and adopts dead siblings.
//!
//! - Daemon (default): runs until SIGTERM/SIGINT/SIGHUP, then a bounded flush
//!   (`service.stop_flush_timeout`) and a stop; exit 0. A stop lets go of
//!   every adopted sibling whole: what it did not drain stays for the next
//!   service.
//! - `--once`: runs until its own directory and every adoptable sibling is
//!   drained (exit 0), `--timeout` passes (exit 6, saying what is owed), or
//!   a signal (exit 0 after the same bounded stop). Siblings found blocked
//!   make it exit 1, naming them and why.
//! - Either: exit 7 as soon as the lease latched.
//!
//! Progress for `--once`: an indicatif bar on a terminal; plain lines every
//! `--progress-interval` otherwise, JSON lines with `--json`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use spool_catalog::LeaseHolder;
use spool_core::siblings::{self, Owner};
use spool_lock::Purpose;
use spool_service::Snapshot;

use crate::config::{keys, mask_url, parse_duration, ConfigError, ConfigFlags};
use crate::exit::ExitCode;
use crate::metrics::{self, Health};

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

/// How a run ended.
enum End {
    Drained,
    /// Own directory drained; another live service holds the adopter lease
    /// and adopts the rest.
    LeftToHolder(LeaseHolder),
    Timeout,
    /// The store or catalog refuses the destination for good (`--once`).
    Refused(String),
    Latched,
    /// The service loop panicked.
    LoopFailed(String),
    Signal(nix::sys::signal::Signal),
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
    if keys::SHIP.get(&cfg) == spool_service::Ship::Daemon {
        return Err(ConfigError(
            "service.ship = \"daemon\" is for producers' engines (they hand their packs to the \
             node's `spool run`); spool run is that daemon and ships itself: leave the key out \
             (or set it to \"self\") for spool run"
                .into(),
        )
        .into());
    }
    // Before any thread: every thread inherits the blocked mask.
    let signals = crate::signals::spawn_waiter(crate::signals::block_stop_signals()?)?;
    let status = metrics::shared();
    let server = match keys::METRICS_ADDR.get(&cfg) {
        Some(addr) => Some(metrics::server::Server::start(addr, status.clone())?),
        None => None,
    };
    let (key, key_dir) = cfg.key_dir()?;
    let engine = crate::engine::start(&cfg, Vec::new(), Duration::ZERO)?;
    let out = Output { json: args.json };
    out.event(
        json!({
            "event": "started",
            "dir": engine.dir(),
            "catalog_key": key,
            "store": mask_url(&cfg.store_url()?),
            "catalog": mask_url(&cfg.catalog_url()?),
            "once": args.once,
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

    let started = Instant::now();
    let mut health = Health::new(keys::UNHEALTHY_AFTER.get(&cfg));
    let mut progress = args.once.then(|| Progress::new(&out, progress_every));
    let mut told_holder = false;
    let node_scope = keys::LEASE_SCOPE.get(&cfg) == spool_catalog::LeaseScope::Node;
    // Snapshots the service has published (one per cycle): until one has,
    // the snapshot is that of a service that has looked at nothing yet.
    let mut published = 0;
    let end = loop {
        let snap = service(&engine).snapshot();
        let unhealthy = health.judge(&snap);
        {
            let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
            if unhealthy.is_some() && st.unhealthy.is_none() {
                tracing::warn!(dir = %engine.dir().display(), "unhealthy: {}", unhealthy.as_deref().unwrap_or(""));
            }
            st.snapshot = snap.clone();
            st.unhealthy = unhealthy;
        }
        if snap.latched {
            break End::Latched;
        }
        if let Some(why) = &snap.loop_failed {
            break End::LoopFailed(why.clone());
        }
        if let Some(p) = progress.as_mut() {
            p.tick(&snap, &key_dir, engine.dir());
        }
        // node scope only: in catalog scope nothing moves without the lease
        // (a foreign holder there ends in the latch, exit 7)
        let other = node_scope.then(|| other_adopter(&snap)).flatten();
        if args.once && !told_holder {
            if let Some(h) = &other {
                told_holder = true;
                out.event(
                    json!({"event": "lease_held_elsewhere", "holder": h.as_str(), "host": h.host(), "pid": h.pid()}),
                    || format!(
                        "spool run: the node's adopter lease is held by {h}: that service adopts the dead \
                         siblings; this run {}",
                        if args.wait_for_siblings {
                            "ships its own directory and waits (--wait-for-siblings, within --timeout) until they are shipped"
                        } else {
                            "ships only its own directory (--wait-for-siblings to wait for the rest)"
                        }
                    ),
                );
            }
        }
        let looked = published > 0;
        if args.once && looked && drained(&snap) {
            break End::Drained;
        }
        // Siblings only the lease holder may adopt are not owed to this run.
        if args.once && looked && own_drained(&snap) && !snap.latched {
            if let Some(h) = &other {
                if !args.wait_for_siblings {
                    break End::LeftToHolder(h.clone());
                }
                if Backlog::scan_with_adopting(&key_dir, engine.dir()).packs() == 0 {
                    break End::Drained;
                }
            }
        }
        // A store or catalog that refuses the destination for good (bad
        // credentials, a missing bucket) is no reason for `--once` to wait
        // out its timeout: it says so at once; every pack stays ready.
        if args.once {
            if let Some(why) = &snap.destination_refused {
                break End::Refused(why.clone());
            }
        }
        if timeout.is_some_and(|t| started.elapsed() >= t) {
            break End::Timeout;
        }
        if let Ok(sig) = signals.try_recv() {
            break End::Signal(sig);
        }
        // Woken at the end of each cycle, so a drain is seen the moment it
        // is done; at the latest after 100 ms for a signal, the timeout,
        // progress and health.
        published = service(&engine).wait_published(published, Duration::from_millis(100));
    };
    if let Some(p) = progress.take() {
        p.finish();
    }
    let dir = engine.dir().to_path_buf();
    let (code, message) = match end {
        End::Signal(sig) => {
            tracing::info!(dir = %dir.display(), "{sig:?}: flushing (at most {:?}) and stopping", keys::STOP_FLUSH_TIMEOUT.get(&cfg));
            if let Err(e) = engine.flush(keys::STOP_FLUSH_TIMEOUT.get(&cfg)) {
                tracing::warn!(dir = %dir.display(), "last flush before the stop: {e}");
            }
            let snap = close(engine);
            let backlog = Backlog::scan(&key_dir, &dir);
            (
                ExitCode::Ok,
                format!(
                    "{sig:?}: stopped; {} pack(s) uploaded and indexed by this run; {}",
                    snap.indexed,
                    backlog.left_for_next()
                ),
            )
        }
        End::Drained => {
            let snap = close(engine);
            if snap.blocked_siblings.is_empty() {
                (
                    ExitCode::Ok,
                    format!(
                        "drained: {} pack(s) uploaded and indexed, {} sibling director{} adopted, {} live sibling(s) left alone",
                        snap.indexed,
                        snap.adopted_spools,
                        if snap.adopted_spools == 1 { "y" } else { "ies" },
                        snap.live_siblings
                    ),
                )
            } else {
                (ExitCode::Other, blocked_message(&snap))
            }
        }
        End::LeftToHolder(h) => {
            let backlog = Backlog::scan_with_adopting(&key_dir, &dir);
            let snap = close(engine);
            (
                ExitCode::Ok,
                format!(
                    "own directory drained: {} pack(s) uploaded and indexed by this run; the node's \
                     adopter lease is held by {h}, which adopts the dead siblings ({})",
                    snap.indexed,
                    backlog.describe()
                ),
            )
        }
        End::Timeout => {
            let backlog = Backlog::scan(&key_dir, &dir);
            let snap = close(engine);
            (
                ExitCode::Deadline,
                format!(
                    "not drained within {}: {} own ready pack(s) not uploaded, {} pack(s) uploaded \
                     but not indexed (owed to the catalog), adoption {}; {}; {} pack(s) indexed by \
                     this run; {}{}. Nothing is lost: the packs stay \
                     in their spool directories for the next run",
                    crate::config::Value::Secs(timeout.unwrap_or_default()),
                    snap.deferred,
                    snap.pending_index,
                    if snap.adoption_owed { "owed" } else { "not owed" },
                    backlog.describe(),
                    snap.indexed,
                    cause(&snap),
                    node_scope
                        .then(|| other_adopter(&snap))
                        .flatten()
                        .map(|h| format!("; the adopter lease is held by {h}"))
                        .unwrap_or_default()
                ),
            )
        }
        End::Refused(why) => {
            let backlog = Backlog::scan(&key_dir, &dir);
            let snap = close(engine);
            (
                ExitCode::Other,
                format!(
                    "the destination refuses this run: {why}. Fix the credentials, bucket or \
                     database it names, then run again; nothing is lost: {}; {} pack(s) indexed by \
                     this run",
                    backlog.describe(),
                    snap.indexed,
                ),
            )
        }
        End::LoopFailed(why) => {
            let snap = close(engine);
            (
                ExitCode::LoopFailed,
                format!(
                    "{why}: stopped after letting go of every adopted sibling ({} pack(s) indexed by \
                     this run); nothing is lost, the packs stay in their spool directories. \
                     Restart spool run (exit code 10 tells a supervisor to)",
                    snap.indexed
                ),
            )
        }
        End::Latched => {
            let snap = close(engine);
            (
                ExitCode::LeaseLost,
                format!(
                    "lease lost (latched): a foreign lease{} outlived 2 x TTL, so this process \
                     stopped all lease-gated work and let go of every sibling it was adopting; \
                     find the other writer (lease scope {:?}), then run again",
                    snap.lease_holder
                        .as_ref()
                        .map(|h| format!(" held by {h}"))
                        .unwrap_or_default(),
                    keys::LEASE_SCOPE.get(&cfg)
                ),
            )
        }
    };
    let snap = status
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .snapshot
        .clone();
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
            "elapsed_s": started.elapsed().as_secs_f64(),
            "snapshot": snapshot_json(&snap),
        }),
        || message.clone(),
    );
    Ok(code)
}

/// The service of `spool run`'s engine (it ships itself: `service.ship =
/// "daemon"` is refused before the engine starts).
fn service(engine: &spool_service::Engine) -> &spool_service::StorageService {
    engine
        .service()
        .expect("spool run's engine ships itself, so it has a service")
}

/// Stops the service and releases the claim; the last snapshot first.
fn close(engine: spool_service::Engine) -> Snapshot {
    let snap = service(&engine).snapshot();
    let report = engine.close();
    for p in &report.problems {
        tracing::warn!(dir = %report.dir.display(), "closing {}: {p}", report.dir.display());
    }
    snap
}

/// What the service last failed on and what it waits for, as a timeout
/// message says it: never "last error: none" while a call is in flight.
fn cause(s: &Snapshot) -> String {
    match (&s.last_error, &s.waiting_on) {
        (Some(e), Some(w)) => format!("last error: {e}; waiting on: {w}"),
        (Some(e), None) => format!("last error: {e}"),
        (None, Some(w)) => format!("waiting on: {w}"),
        (None, None) => "no store or catalog call failed or was in flight".into(),
    }
}

/// Drained for `--once`: nothing own left, nothing owed, no adoption owed.
fn drained(s: &Snapshot) -> bool {
    own_drained(s) && !s.adoption_owed
}

/// No own ready pack left and nothing owed to the catalog.
fn own_drained(s: &Snapshot) -> bool {
    s.deferred == 0 && s.pending_index == 0
}

/// Another live service holds the adopter lease (this one does not).
fn other_adopter(s: &Snapshot) -> Option<LeaseHolder> {
    if s.lease_held {
        return None;
    }
    let holder = s.lease_holder.clone()?;
    // Another *live* service only while its own rank directory is held (the
    // product's one liveness rule, the flock): a holder on this host that
    // was SIGKILLed leaves a lease that runs out within its TTL, and this
    // run waits for that and adopts, as before. A holder elsewhere cannot
    // be probed from here: its lease is taken at its word. Held by this
    // very process (this run is adopting the dead holder's directory, or
    // its adoption is probing it right now) is not another live service.
    if let (Some(dir), true) = (holder.dir(), holder.host() == spool_lock::host_name()) {
        // Twice, a moment apart: a probe of this process's adoption holds
        // the lock for an instant and may be closed before it is seen.
        let live = || siblings::probe(Path::new(dir)).is_ok_and(|p| p.owner() == Owner::Live);
        if !(live() && {
            std::thread::sleep(Duration::from_millis(50));
            live()
        }) {
            return None;
        }
    }
    Some(holder)
}

fn blocked_message(snap: &Snapshot) -> String {
    let list: Vec<String> = snap
        .blocked_siblings
        .iter()
        .map(|d| {
            let why = spool_lock::read_owner(d)
                .ok()
                .and_then(|o| o.record)
                .and_then(|r| match r.purpose {
                    Purpose::Blocked(why) => Some(why),
                    _ => None,
                })
                .unwrap_or_else(|| "see the service's last error".into());
            format!("{}: {why}", d.display())
        })
        .collect();
    format!(
        "{} sibling director{} blocked; their packs stay where they are until a person acts: {}. \
         Fix the cause, then `spool unblock DIR` and run again",
        list.len(),
        if list.len() == 1 { "y is" } else { "ies are" },
        list.join("; ")
    )
}

/// The snapshot as JSON.
pub fn snapshot_json(s: &Snapshot) -> Value {
    json!({
        "staged": s.staged,
        "uploaded": s.uploaded,
        "indexed": s.indexed,
        "pending_index": s.pending_index,
        "upload_failures": s.upload_failures,
        "cancelled_uploads": s.cancelled_uploads,
        "deferred": s.deferred,
        "quarantined": s.quarantined,
        "rejected": s.rejected,
        "adopted_spools": s.adopted_spools,
        "adopted_packs": s.adopted_packs,
        "adoption_owed": s.adoption_owed,
        "hand_off": hand_off_json(&s.hand_off),
        "live_siblings": s.live_siblings,
        "blocked_siblings": s.blocked_siblings,
        "sibling_bytes": s.sibling_bytes,
        "cycles": s.cycles,
        "lease_held": s.lease_held,
        "lease_holder": s.lease_holder.as_ref().map(|h| h.as_str()),
        "latched": s.latched,
        "last_error": s.last_error,
        "waiting_on": s.waiting_on,
        "destination_refused": s.destination_refused,
        "loop_failed": s.loop_failed,
        "stage_ms": stage_json(&s.stage_times),
    })
}

/// Where the drains' time went, in milliseconds per stage (busy stages
/// overlap; `idle` is time with nothing in flight).
fn stage_json(t: &spool_service::StageTimes) -> Value {
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    json!({
        "list": ms(t.list),
        "validate": ms(t.validate),
        "upload": ms(t.upload),
        "index": ms(t.index),
        "remove": ms(t.remove),
        "idle": ms(t.idle),
    })
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

/// Ready packs still on disk in dead (unheld, or adopted by this process)
/// and not blocked rank directories under the catalog key, the own one
/// included: what `--once` still has to drain. A read-only walk by name,
/// for progress and messages; it never counts a live owner's directory.
#[derive(Debug, Default)]
struct Backlog {
    dirs: Vec<(PathBuf, u64)>,
}

impl Backlog {
    fn scan(key_dir: &Path, own: &Path) -> Backlog {
        Backlog::scan_inner(key_dir, own, false)
    }

    /// [`Backlog::scan`], also counting directories another process holds
    /// as an adoption (what the lease holder is still shipping).
    fn scan_with_adopting(key_dir: &Path, own: &Path) -> Backlog {
        Backlog::scan_inner(key_dir, own, true)
    }

    fn scan_inner(key_dir: &Path, own: &Path, adopting: bool) -> Backlog {
        let mut dirs = Vec::new();
        let Ok(all) = siblings::rank_dirs(key_dir) else {
            return Backlog::default();
        };
        for dir in all {
            if dir != own {
                let Ok(probe) = siblings::probe(&dir) else {
                    continue;
                };
                // With `adopting`, a sibling another live service holds to
                // adopt it is counted too (the lease holder drains it).
                let adopted_elsewhere = adopting
                    && matches!(
                        probe.status.record.as_ref().map(|r| &r.purpose),
                        Some(Purpose::Adopting)
                    );
                match probe.owner() {
                    Owner::Live if !adopted_elsewhere => continue, // never counted by anyone else
                    Owner::Blocked(_) => continue,
                    Owner::Live | Owner::Dead | Owner::HeldHere { .. } | Owner::NotOurs(_) => {}
                }
            }
            let packs = count_ready(&dir);
            if packs > 0 {
                dirs.push((dir, packs));
            }
        }
        dirs.sort();
        Backlog { dirs }
    }

    fn packs(&self) -> u64 {
        self.dirs.iter().map(|(_, n)| n).sum()
    }

    fn describe(&self) -> String {
        if self.dirs.is_empty() {
            return "no ready pack left in a dead rank directory".into();
        }
        let list: Vec<String> = self
            .dirs
            .iter()
            .map(|(d, n)| format!("{} ({n})", d.display()))
            .collect();
        format!(
            "{} ready pack(s) left in {} rank director{}: {}",
            self.packs(),
            self.dirs.len(),
            if self.dirs.len() == 1 { "y" } else { "ies" },
            list.join(", ")
        )
    }

    fn left_for_next(&self) -> String {
        if self.dirs.is_empty() {
            "nothing left to drain".into()
        } else {
            format!("{}, kept for the next run", self.describe())
        }
    }
}

/// `<id>.ready` files in a rank directory and its `w<ordinal>/` subdirectories.
fn count_ready(dir: &Path) -> u64 {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".ready") {
            n += 1;
        } else if name.starts_with('w') && e.file_type().is_ok_and(|t| t.is_dir()) {
            n += count_ready(&e.path());
        }
    }
    n
}

/// Progress of `--once`.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    json: bool,
    every: Duration,
    last_line: Option<Instant>,
    last_scan: Option<(Instant, u64)>,
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
            last_scan: None,
        }
    }

    fn tick(&mut self, s: &Snapshot, key_dir: &Path, own: &Path) {
        // the disk walk at most every 500 ms
        let owed = match self.last_scan {
            Some((at, n)) if at.elapsed() < Duration::from_millis(500) => n,
            _ => {
                let n = Backlog::scan(key_dir, own).packs();
                self.last_scan = Some((Instant::now(), n));
                n
            }
        };
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
                json!({
                            "event": "progress",
                            "drained_packs": drained,
                            "owed_packs": owed,
                            "pending_index": s.pending_index,
                            "adopted_spools": s.adopted_spools,
                            "live_siblings": s.live_siblings,
                            "blocked_siblings": s.blocked_siblings.len(),
                            "adoption_owed": s.adoption_owed,
                "hand_off": hand_off_json(&s.hand_off),
                        })
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

/// The hand-off figures of a snapshot (run's JSON events and summary).
fn hand_off_json(h: &spool_service::HandOffCounts) -> Value {
    json!({
        "owners": h.owners,
        "waiting": h.waiting,
        "shipped": h.shipped,
        "confirmed": h.confirmed,
        "refused": h.refused,
        "unconfirmed": h.unconfirmed,
        "last_lag_ms": h.last_lag_ms,
        "max_lag_ms": h.max_lag_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_counts_ready_packs_of_dead_dirs_only() {
        let key = tempfile::tempdir().unwrap();
        let own = key.path().join("r0-0000000a");
        let dead = key.path().join("r1-0000000b");
        std::fs::create_dir_all(dead.join("w2")).unwrap();
        std::fs::create_dir_all(&own).unwrap();
        for p in [
            dead.join("a.ready"),
            dead.join("w2/b.ready"),
            dead.join("c.quarantined"),
            own.join("d.ready"),
        ] {
            std::fs::write(p, b"x").unwrap();
        }
        std::fs::create_dir_all(key.path().join("not-a-rank")).unwrap();
        std::fs::write(key.path().join("not-a-rank/e.ready"), b"x").unwrap();
        let b = Backlog::scan(key.path(), &own);
        assert_eq!(b.packs(), 3, "{b:?}");
        assert!(b.describe().contains("r1-0000000b (2)"), "{}", b.describe());
    }
}
