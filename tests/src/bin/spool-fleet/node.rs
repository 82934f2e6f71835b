//! One simulated node inside a host process: its own spool root and node
//! name (`lease.node_name`), its daemon (an engine with no sink, as `spool
//! run` is) and its ranks, each producing packs at the set rate.
//!
//! Ranks are embedded engines ([`RankMode::Engine`]: each rank's own
//! service uploads and indexes its packs and competes for the node's
//! node lease), or engines that hand their packs to the node's daemon
//! ([`RankMode::HandOff`], `service.ship = "daemon"`): the daemon, holding
//! the node's lease, uploads and indexes for every rank, so the node sends
//! one stream of inserts.
//!
//! Every pack a rank sealed is logged (its id, one line, one `write`) to
//! `<scratch>/logs/node-<i>.log` once the sink's flush says it is staged:
//! durable in the spool. The log survives a SIGKILL of the process (the
//! kernel keeps what was written), so the oracle knows every pack that
//! must reach the store and the catalog; a pack staged just before a kill
//! may be missing from the log, never the other way round.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use spool_catalog::Catalog;
use spool_core::sink::SinkConfig;
use spool_service::config::{Config, FlagValue};
use spool_service::{Engine, EngineConfig, Ship, Shipping};

/// How a rank ships its packs (`--ship`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankMode {
    /// An embedded engine: the rank's own service uploads and indexes
    /// (`self`).
    Engine,
    /// An engine handing its packs to the node's daemon (`daemon`).
    HandOff,
}

impl RankMode {
    /// `self` or `daemon`, as `--ship` takes it.
    pub fn parse(s: &str) -> Result<RankMode> {
        match s {
            "self" => Ok(RankMode::Engine),
            "daemon" => Ok(RankMode::HandOff),
            other => anyhow::bail!("--ship {other:?}: expected self or daemon"),
        }
    }

    /// As `--ship` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RankMode::Engine => "self",
            RankMode::HandOff => "daemon",
        }
    }
}

/// Records per pack, and their size: packs of about 4 KiB.
const RECORDS_PER_PACK: u64 = 8;
const RECORD_BYTES: usize = 512;

/// What a node needs to start.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The node's number (its root, name and log are named after it).
    pub id: usize,
    /// The run's scratch directory.
    pub scratch: PathBuf,
    /// Ranks on the node.
    pub ranks: usize,
    /// Packs per second per rank.
    pub rate: f64,
    /// The catalog URL (every node spells it the same: one catalog key).
    pub catalog_url: String,
    /// The store URL.
    pub store_url: String,
    /// Extra configuration (`KEY=VALUE`, as `--set`).
    pub settings: Vec<String>,
    /// How ranks ship.
    pub mode: RankMode,
}

impl NodeSpec {
    /// The node's name (`lease.node_name`).
    pub fn name(&self) -> String {
        format!("node-{:04}", self.id)
    }

    /// The node's spool root.
    pub fn root(&self) -> PathBuf {
        node_root(&self.scratch, self.id)
    }

    /// The node's log of sealed packs.
    pub fn log(&self) -> PathBuf {
        node_log(&self.scratch, self.id)
    }

    /// The spool configuration of the node's engine for `rank` (the
    /// daemon's rank is the node's rank count).
    fn config(&self, rank: usize) -> Result<Config> {
        let mut flags = vec![
            FlagValue::from_set(&format!("spool.root={}", self.root().display()))?,
            FlagValue::from_set(&format!("destination.catalog={}", self.catalog_url))?,
            FlagValue::from_set(&format!("destination.store={}", self.store_url))?,
            FlagValue::from_set(&format!("spool.rank={rank}"))?,
            FlagValue::from_set(&format!("lease.node_name={}", self.name()))?,
        ];
        for s in &self.settings {
            flags.push(FlagValue::from_set(s)?);
        }
        // Hermetic: no SPOOL_* variable of the caller's, no spool.toml; an
        // object store's own variables (`cargo xtask fleet --s3s`) pass.
        let store_env = |k: &str| {
            let store = spool_service::config::PLAIN_ENV.contains(&k)
                || spool_service::config::SECRET_ENV.contains(&k);
            store.then(|| std::env::var(k).ok()).flatten()
        };
        Ok(Config::load_with(None, &flags, &store_env)?)
    }

    /// The engine of `rank`: with a sink shipping as `sink` says, else (the
    /// daemon) none, shipping itself.
    fn engine(
        &self,
        rank: usize,
        catalog: &Arc<dyn Catalog>,
        sink: Option<Ship>,
    ) -> Result<Engine> {
        let ship = sink.unwrap_or(Ship::Itself);
        let mut ec: EngineConfig = self
            .config(rank)?
            .engine_config(Duration::from_secs(60), ship)?;
        if let Shipping::Itself(service) = &mut ec.shipping {
            service.catalog = catalog.clone();
            // thousands of engines share two cores: one worker each
            service.runtime_workers = 1;
        }
        if sink.is_some() {
            ec.sinks = vec![SinkConfig {
                seal_records: RECORDS_PER_PACK,
                seal_age: Duration::from_secs(3600),
                ..SinkConfig::default()
            }];
        }
        Engine::start(ec).with_context(|| format!("{}: engine of rank {rank}", self.name()))
    }
}

/// `<scratch>/nodes/node-<i>`.
pub fn node_root(scratch: &Path, id: usize) -> PathBuf {
    scratch.join("nodes").join(format!("node-{id:04}"))
}

/// `<scratch>/logs/node-<i>.log`.
pub fn node_log(scratch: &Path, id: usize) -> PathBuf {
    scratch.join("logs").join(format!("node-{id:04}.log"))
}

/// What a node did, as its host reports it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's number.
    pub id: usize,
    /// Packs sealed and logged.
    pub sealed: u64,
    /// Failed writes or flushes (each one a pack not sealed).
    pub produce_errors: u64,
    /// Ticks that started later than one interval behind schedule.
    pub late_ticks: u64,
    /// Ready packs left in the node's root after the drain.
    pub left_ready: usize,
    /// What did not close cleanly.
    pub problems: Vec<String>,
    /// Holdings of a lease lost while its engine lived (superseded,
    /// lapsed, or not renewed before the local deadline: a renewal that a
    /// stalled catalog held past it), summed over the node's engines as
    /// their snapshots say before they close.
    #[serde(default)]
    pub lease_lapses: u64,
}

/// A running node.
pub struct Node {
    spec: NodeSpec,
    daemon: Engine,
    ranks: Vec<Engine>,
    stop: Arc<AtomicBool>,
    producer: Option<JoinHandle<()>>,
    sealed: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    late: Arc<AtomicU64>,
}

impl Node {
    /// Starts the daemon, then each rank, then the producer thread.
    pub fn start(spec: NodeSpec, catalog: &Arc<dyn Catalog>, phase: f64) -> Result<Node> {
        std::fs::create_dir_all(spec.root())?;
        let daemon = spec.engine(spec.ranks, catalog, None)?;
        let ship = match spec.mode {
            RankMode::Engine => Ship::Itself,
            RankMode::HandOff => Ship::Daemon,
        };
        let ranks = (0..spec.ranks)
            .map(|r| spec.engine(r, catalog, Some(ship)))
            .collect::<Result<Vec<_>>>()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(spec.log())
            .with_context(|| format!("opening {}", spec.log().display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (sealed, errors, late) = (Arc::default(), Arc::default(), Arc::default());
        let sinks: Vec<_> = ranks.iter().map(|e| e.sinks()[0].clone()).collect();
        let producer = {
            let (stop, sealed, errors, late) = (
                stop.clone(),
                Arc::clone(&sealed),
                Arc::clone(&errors),
                Arc::clone(&late),
            );
            let interval = Duration::from_secs_f64(1.0 / spec.rate);
            std::thread::Builder::new()
                .name(format!("produce-{}", spec.id))
                .spawn(move || {
                    produce(sinks, log, interval, phase, &stop, &sealed, &errors, &late)
                })?
        };
        Ok(Node {
            spec,
            daemon,
            ranks,
            stop,
            producer: Some(producer),
            sealed,
            errors,
            late,
        })
    }

    /// Stops producing, closes the ranks (each drains its own packs), lets
    /// the daemon adopt what dead ranks left until no ready pack is left in
    /// the node's root (or `within` ran out), then closes the daemon.
    pub fn drain(mut self, within: Duration) -> NodeReport {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(p) = self.producer.take() {
            let _ = p.join();
        }
        let lapses = |e: &Engine| e.service().map_or(0, |s| s.snapshot().lease_losses);
        let mut lease_lapses: u64 = self.ranks.iter().map(lapses).sum();
        let mut problems = Vec::new();
        for r in std::mem::take(&mut self.ranks) {
            let rep = r.close();
            // A hand-off rank leaves what its daemon has not confirmed yet
            // to that daemon's adoption: not drained, and no problem.
            let undrained = !rep.drained && self.spec.mode == RankMode::Engine;
            if undrained || !rep.problems.is_empty() {
                problems.push(format!(
                    "rank {}: drained {} {:?}",
                    rep.dir.display(),
                    rep.drained,
                    rep.problems
                ));
            }
        }
        let deadline = Instant::now() + within;
        let root = self.spec.root();
        let mut left = count_ready(&root);
        while left > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            left = count_ready(&root);
        }
        lease_lapses += lapses(&self.daemon);
        let rep = self.daemon.close();
        if !rep.problems.is_empty() {
            problems.push(format!("daemon: {:?}", rep.problems));
        }
        NodeReport {
            id: self.spec.id,
            sealed: self.sealed.load(Ordering::SeqCst),
            produce_errors: self.errors.load(Ordering::SeqCst),
            late_ticks: self.late.load(Ordering::SeqCst),
            left_ready: count_ready(&root),
            problems,
            lease_lapses,
        }
    }
}

/// The producer thread of a node: each rank seals one pack per interval
/// (ranks spread over the interval, the node's `phase` of it first) and
/// logs its id once staged.
#[allow(clippy::too_many_arguments)]
fn produce(
    sinks: Vec<Arc<spool_core::sink::Sink>>,
    mut log: std::fs::File,
    interval: Duration,
    phase: f64,
    stop: &AtomicBool,
    sealed: &AtomicU64,
    errors: &AtomicU64,
    late: &AtomicU64,
) {
    let record = vec![0x5au8; RECORD_BYTES];
    let n = sinks.len().max(1) as f64;
    let start = Instant::now() + interval.mul_f64(phase);
    let mut tick: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        for (r, sink) in sinks.iter().enumerate() {
            let due = start + interval.mul_f64(tick as f64 + r as f64 / n);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - due > interval {
                late.fetch_add(1, Ordering::Relaxed);
            }
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let before = sink.stats().staged_packs;
            let wrote = (0..RECORDS_PER_PACK).try_for_each(|_| sink.write(&record));
            let flushed = wrote.and_then(|()| sink.flush(Duration::from_secs(30)));
            let stats = sink.stats();
            match (flushed, stats.last_staged) {
                (Ok(()), Some(id)) if stats.staged_packs > before => {
                    // one write: a SIGKILL never leaves half a line
                    if log.write_all(format!("{id}\n").as_bytes()).is_ok() {
                        sealed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        tick += 1;
    }
}

/// Ready packs anywhere under `root` (the node's rank directories).
pub fn count_ready(root: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(root) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                count_ready(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "ready"))
            }
        })
        .sum()
}
