//! A host process: runs a group of simulated nodes, all their engines
//! sharing one catalog client ([`crate::catalog::TimedCatalog`]). Started
//! by `spool-fleet run` (never by hand); it prints `up` once every node
//! runs, produces until a line `stop` (or the end of its standard input),
//! drains every node, and prints its [`HostReport`] as one JSON line.

use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use spool_catalog::Catalog;

use crate::catalog::{CallStats, TimedCatalog};
use crate::node::{Node, NodeReport, NodeSpec, RankMode};
use crate::options::value;

/// What a host saw.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct HostReport {
    /// Each node's report.
    pub nodes: Vec<NodeReport>,
    /// The catalog calls of every engine of the host.
    pub calls: CallStats,
}

/// `spool-fleet host --first I --count C --ranks R --rate P --scratch DIR
/// --catalog URL --store URL --phase-seed S --drain-timeout SECS --ship self|daemon
/// [--set KEY=VALUE]...`
pub fn main(args: &[String]) -> Result<()> {
    let mut it = args.iter();
    let (mut first, mut count, mut ranks, mut rate) = (None, None, None, None);
    let (mut scratch, mut catalog, mut store, mut seed, mut drain) =
        (None, None, None, 0u64, 120u64);
    let mut settings = Vec::new();
    let mut mode = RankMode::Engine;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--first" => first = Some(value(&mut it, a)?.parse::<usize>()?),
            "--count" => count = Some(value(&mut it, a)?.parse::<usize>()?),
            "--ranks" => ranks = Some(value(&mut it, a)?.parse::<usize>()?),
            "--rate" => rate = Some(value(&mut it, a)?.parse::<f64>()?),
            "--scratch" => scratch = Some(std::path::PathBuf::from(value(&mut it, a)?)),
            "--catalog" => catalog = Some(value(&mut it, a)?),
            "--store" => store = Some(value(&mut it, a)?),
            "--phase-seed" => seed = value(&mut it, a)?.parse()?,
            "--drain-timeout" => drain = value(&mut it, a)?.parse()?,
            "--set" => settings.push(value(&mut it, a)?),
            "--ship" => mode = RankMode::parse(&value(&mut it, a)?)?,
            other => bail!("host: unknown option {other}"),
        }
    }
    let (
        Some(first),
        Some(count),
        Some(ranks),
        Some(rate),
        Some(scratch),
        Some(catalog_url),
        Some(store_url),
    ) = (first, count, ranks, rate, scratch, catalog, store)
    else {
        bail!("host: --first, --count, --ranks, --rate, --scratch, --catalog and --store are required");
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fleet-catalog")
        .enable_all()
        .build()?;
    let timed = Arc::new(TimedCatalog::new(
        spool_catalog::open(&catalog_url)?,
        rt.handle().clone(),
    ));
    let catalog: Arc<dyn Catalog> = timed.clone();
    let mut nodes = Vec::with_capacity(count);
    for id in first..first + count {
        let spec = NodeSpec {
            id,
            scratch: scratch.clone(),
            ranks,
            rate,
            catalog_url: catalog_url.clone(),
            store_url: store_url.clone(),
            settings: settings.clone(),
            mode,
        };
        nodes.push(Node::start(spec, &catalog, phase(seed, id))?);
    }
    say("up");
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        if line.map_or(true, |l| l.trim() == "stop") {
            break;
        }
    }
    // Every node drains at once (the daemons adopt in parallel).
    let within = Duration::from_secs(drain);
    let reports: Vec<NodeReport> = std::thread::scope(|s| {
        let hs: Vec<_> = nodes
            .into_iter()
            .map(|n| s.spawn(move || n.drain(within)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("a node's drain panicked"))
            .collect()
    });
    let report = HostReport {
        nodes: reports,
        calls: timed.stats(),
    };
    say(&serde_json::to_string(&report)?);
    drop(rt);
    Ok(())
}

/// One line to the coordinator; nothing if it is gone (it reads no more).
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Where in its interval node `id` starts (0..1), spread by a seed so
/// nodes do not all fire at once.
fn phase(seed: u64, id: usize) -> f64 {
    let mut x = seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % 10_000) as f64 / 10_000.0
}
