//! The options of `spool-fleet run` and how flags are read (what the run,
//! its report and the host processes share).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::node::RankMode;

/// The value after option `flag` in `it`.
pub fn value(it: &mut std::slice::Iter<'_, String>, flag: &str) -> Result<String> {
    it.next()
        .cloned()
        .with_context(|| format!("{flag} needs a value"))
}

/// The run's options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks: usize,
    /// Packs per second per rank.
    pub rate: f64,
    /// How long the ranks produce.
    pub minutes: f64,
    /// Nodes SIGKILLed (and restarted) during the run.
    pub kill: usize,
    /// Catalog replicas (1: one server).
    pub replicas: usize,
    /// The replica (1-based, as the URL lists them; never the first, whose
    /// counters the report reads) SIGKILLed at 30 % of the window and
    /// started again at 60 % (`--kill-replica I`; the replicas as `cargo
    /// xtask fleet --replicas N` describes them in the environment).
    pub kill_replica: Option<usize>,
    /// Host processes for the nodes that are not killed.
    pub processes: usize,
    /// Seed of the kill times and the nodes' phases.
    pub seed: u64,
    /// Scratch directory (spool roots, logs, the `file://` store).
    pub scratch: PathBuf,
    /// The ClickHouse server (`clickhouse://HOST:PORT/...`).
    pub clickhouse: String,
    /// `KEY=VALUE` settings for every engine.
    pub settings: Vec<String>,
    /// How ranks ship (`--ship self|daemon`).
    pub ship: RankMode,
    /// How long a node may take to drain after production stops.
    pub drain_timeout: Duration,
    /// Where to append the report as one JSON line.
    pub json: Option<PathBuf>,
    /// Keep the database and the scratch directory.
    pub keep: bool,
    /// The server's pid, to read its CPU time (`/proc/PID/stat`).
    pub server_pid: Option<u32>,
    /// An object store instead of the `file://` one (`--store URL`, its
    /// credentials in the environment), with the directory where the store
    /// keeps its objects as files under their keys (`--store-dir DIR`:
    /// s3s-fs's bucket directory), which the oracle walks and the report
    /// counts.
    pub store: Option<(String, PathBuf)>,
}

impl Options {
    /// Parses `run`'s arguments.
    pub fn parse(args: &[String]) -> Result<Options> {
        let mut o = Options {
            nodes: 20,
            ranks: 4,
            rate: 0.5,
            minutes: 1.0,
            kill: 0,
            replicas: 1,
            kill_replica: None,
            processes: 4,
            seed: 1,
            scratch: PathBuf::from("target/fleet"),
            clickhouse: std::env::var("SPOOL_TEST_CLICKHOUSE_URL").unwrap_or_default(),
            settings: Vec::new(),
            ship: RankMode::Engine,
            drain_timeout: Duration::from_secs(120),
            json: None,
            keep: false,
            server_pid: None,
            store: None,
        };
        let (mut store_url, mut store_dir) = (None, None);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--nodes" => o.nodes = value(&mut it, a)?.parse()?,
                "--ranks" => o.ranks = value(&mut it, a)?.parse()?,
                "--rate" => o.rate = value(&mut it, a)?.parse()?,
                "--minutes" => o.minutes = value(&mut it, a)?.parse()?,
                "--kill" => o.kill = value(&mut it, a)?.parse()?,
                "--replicas" => o.replicas = value(&mut it, a)?.parse()?,
                "--kill-replica" => o.kill_replica = Some(value(&mut it, a)?.parse()?),
                "--processes" => o.processes = value(&mut it, a)?.parse()?,
                "--seed" => o.seed = value(&mut it, a)?.parse()?,
                "--scratch" => o.scratch = PathBuf::from(value(&mut it, a)?),
                "--clickhouse" => o.clickhouse = value(&mut it, a)?,
                "--set" => o.settings.push(value(&mut it, a)?),
                "--ship" => o.ship = RankMode::parse(&value(&mut it, a)?)?,
                "--drain-timeout" => {
                    o.drain_timeout = Duration::from_secs(value(&mut it, a)?.parse()?)
                }
                "--json" => o.json = Some(PathBuf::from(value(&mut it, a)?)),
                "--keep" => o.keep = true,
                "--server-pid" => o.server_pid = Some(value(&mut it, a)?.parse()?),
                "--store" => store_url = Some(value(&mut it, a)?),
                "--store-dir" => store_dir = Some(PathBuf::from(value(&mut it, a)?)),
                other => bail!("unknown option {other}"),
            }
        }
        if o.clickhouse.is_empty() {
            bail!("no ClickHouse: pass --clickhouse clickhouse://HOST:PORT/db or set SPOOL_TEST_CLICKHOUSE_URL (cargo xtask fleet starts one)");
        }
        if o.replicas != 1 {
            bail!(
                "--replicas {}: this build has no replicated catalog yet; run with one server",
                o.replicas
            );
        }
        if o.nodes == 0 || o.ranks == 0 || o.rate <= 0.0 || o.minutes <= 0.0 || o.processes == 0 {
            bail!("--nodes, --ranks, --rate, --minutes and --processes must be above zero");
        }
        if o.kill_replica.is_some_and(|r| r < 2) {
            bail!("--kill-replica takes a replica number from 2 (the first's counters are the report's)");
        }
        if o.kill > o.nodes {
            bail!("--kill {} is more than --nodes {}", o.kill, o.nodes);
        }
        o.store = match (store_url, store_dir) {
            (Some(url), Some(dir)) => Some((url, dir)),
            (None, None) => None,
            _ => bail!("--store URL and --store-dir DIR go together (the directory where that store keeps its objects)"),
        };
        Ok(o)
    }
}
