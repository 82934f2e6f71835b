//! The crash oracle, run once every node drained: every pack a rank
//! sealed (its node's log) is in the store and in the catalog, the
//! catalog reads one row per pack, every row's pack is in the store, and
//! no ready pack is left in any node's spool root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::node::count_ready;
use crate::server::Server;

/// What the oracle found.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// Packs the ranks logged as sealed.
    pub logged: usize,
    /// Objects in the store.
    pub stored: usize,
    /// Rows the catalog reads (`Catalog::list_range`, one per pack as read).
    pub indexed: usize,
    /// Logged packs missing from the store or the catalog.
    pub lost: usize,
    /// Pack ids the catalog reads more than once.
    pub duplicated: usize,
    /// Catalog rows whose pack is not in the store.
    pub indexed_not_stored: usize,
    /// Packs shipped but not logged (staged just before a kill).
    pub unlogged: usize,
    /// Rows stored in the packs table (no `FINAL`): re-indexed packs not
    /// yet merged away count more than once.
    pub physical_rows: u64,
    /// Ready packs left in the nodes' spool roots.
    pub left_ready: usize,
    /// A few lost pack ids, for the report.
    pub examples: Vec<String>,
}

impl Verdict {
    /// Nothing lost, nothing duplicated, nothing left behind.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.indexed_not_stored == 0
            && self.left_ready == 0
    }
}

/// Checks the run in `scratch` against the catalog at `catalog_url`.
pub fn check(
    scratch: &Path,
    store_dir: &Path,
    catalog_url: &str,
    server: &Server,
    database: &str,
) -> Result<Verdict> {
    let mut logged = BTreeSet::new();
    for e in std::fs::read_dir(scratch.join("logs"))?.flatten() {
        let text = std::fs::read_to_string(e.path())?;
        logged.extend(text.lines().filter(|l| l.len() == 32).map(String::from));
    }
    let mut stored = BTreeSet::new();
    walk_store(store_dir, &mut stored)?;
    let catalog = spool_catalog::open(catalog_url)?;
    let rows = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(catalog.list_range(0, u64::MAX))
        .context("listing the catalog")?;
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        *seen.entry(r.pack_id.as_str()).or_default() += 1;
    }
    let lost: Vec<&String> = logged
        .iter()
        .filter(|id| !stored.contains(*id) || !seen.contains_key(id.as_str()))
        .collect();
    let (physical_rows, _) = server.rows(
        &format!("{database}.{}packs", spool_catalog::DEFAULT_TABLE_PREFIX),
        "pack_id",
    )?;
    Ok(Verdict {
        logged: logged.len(),
        stored: stored.len(),
        indexed: seen.len(),
        lost: lost.len(),
        duplicated: seen.values().filter(|n| **n > 1).count(),
        indexed_not_stored: seen.keys().filter(|id| !stored.contains(**id)).count(),
        unlogged: seen.keys().filter(|id| !logged.contains(**id)).count(),
        physical_rows,
        left_ready: count_ready(&scratch.join("nodes")),
        examples: lost.into_iter().take(5).cloned().collect(),
    })
}

/// Pack ids in the store's directory (`<id>.pack` objects anywhere
/// below, and the packs of each `<id>.bundle`, found from its end by each
/// pack's own trailer).
fn walk_store(dir: &Path, out: &mut BTreeSet<String>) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_dir() {
            walk_store(&p, out)?;
        } else if let Some(id) = name.strip_suffix(".pack") {
            out.insert(id.to_string());
        } else if name.ends_with(".bundle") {
            let bytes = std::fs::read(&p)?;
            out.extend(bundled_ids(&bytes).with_context(|| format!("bundle {}", p.display()))?);
        }
    }
    Ok(())
}

/// The ids of the packs back to back in `bytes`, last first.
fn bundled_ids(bytes: &[u8]) -> Result<Vec<String>> {
    spool_core::pack::bundled_packs(bytes)
        .into_iter()
        .map(|found| Ok(found?.1.id.to_string()))
        .collect()
}
