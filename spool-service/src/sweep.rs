//! Reclaiming the bytes no row points to (`spool sweep`): bundles no row
//! names, once they are `upload.orphan_grace` old.
//!
//! Such a bundle comes from a crash (or a cut) between its PUT and the
//! index of its rows: its packs stay in their spool and go up again, in
//! another bundle, whose rows the catalog then holds; or from a PUT whose
//! answer was lost (each attempt of a bundle goes to a fresh key). The
//! sweep lists the store's prefix, takes every object named like a bundle
//! (`<32 hex>.bundle`) whose store timestamp is older than the grace, asks
//! the catalog which of them current rows name
//! ([`Catalog::referenced_bytes`]), and deletes the ones none names.
//!
//! **Why it never races an index call.** A bundle's key is fresh at every
//! PUT, so its store timestamp is when it was written, and nothing ever
//! finds it "already there" and indexes it later. A drain indexes rows
//! naming a bundle only within half of `orphan_grace` after its PUT
//! returned (an older owed row is uploaded again instead:
//! `drain/pipeline.rs`, "Bundles"), so once a bundle is `orphan_grace` old
//! no index call naming it can still start, and one started before then
//! has had half the grace to end (a catalog request is bounded at 30 s by
//! default; the grace is an hour). A clock skew between this host and the
//! store's below half the grace keeps this true. A row the catalog holds
//! is always seen: the catalog's read is a consistent one on a replicated
//! ClickHouse.
//!
//! **What it only counts.** A bundle some row names is kept whole; the
//! bytes in it no current row names (a pack indexed again from a later
//! bundle) are reported as orphaned. A pack alone at its own key
//! (`<id>.pack`) that no row names is counted, never deleted: its key is
//! the pack's forever, so an upload that finds it there indexes it at any
//! later time and its age says nothing about that.
//!
//! **Bounded.** One pass examines at most `limit` objects older than the
//! grace (the rest wait for the next pass), asks the catalog about at most
//! [`spool_catalog::MAX_KEYS_PER_STATEMENT`] keys per statement, and checks
//! `cancel` between objects. `spool reindex` must not run at the same time
//! (it may write rows naming a bundle the sweep is deleting).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use spool_catalog::Catalog;
use spool_upload::Store;

use crate::Error;

/// What a [`sweep`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Objects listed under the store's prefix.
    pub listed: u64,
    /// Bundles younger than the grace: left alone.
    pub young: u64,
    /// Bundles old enough that some row names: kept.
    pub kept: u64,
    /// Bundles old enough that no row names: deleted (or, in a dry run,
    /// to delete).
    pub deleted: u64,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Bytes in kept bundles that no current row names.
    pub orphaned_bytes: u64,
    /// Packs alone at their own key, old enough, that no row names:
    /// counted, never deleted (see the module docs).
    pub stray_packs: u64,
    /// Their bytes.
    pub stray_pack_bytes: u64,
    /// The pass stopped at its limit: more old objects wait for the next.
    pub truncated: bool,
}

/// An old object the catalog is asked about.
struct Candidate {
    key: Path,
    size: u64,
    bundle: bool,
}

/// Sweeps `store`'s prefix against `catalog` (see the module docs):
/// deletes the bundles older than `grace` that no row names (with
/// `dry_run`, only counts them), at most `limit` old objects per pass.
pub async fn sweep(
    catalog: &dyn Catalog,
    store: &Store,
    grace: Duration,
    (limit, dry_run): (usize, bool),
    cancel: &AtomicBool,
) -> Result<SweepReport, Error> {
    let store_error = |key: &str, error: object_store::Error| Error::SweepStore {
        store: store.description().to_string(),
        key: key.to_string(),
        error: error.into(),
    };
    let cutoff = SystemTime::now() - grace;
    let mut report = SweepReport::default();
    let mut batch: Vec<Candidate> = Vec::new();
    let mut examined = 0usize;
    let mut listing = store.object_store().list(Some(store.prefix()));
    while let Some(meta) = listing.next().await {
        if cancel.load(Ordering::SeqCst) {
            return Err(Error::SweepCancelled {
                store: store.description().to_string(),
            });
        }
        let meta = meta.map_err(|e| store_error(store.prefix().as_ref(), e))?;
        report.listed += 1;
        let name = meta.location.filename().unwrap_or_default();
        let bundle = name.ends_with(spool_upload::BUNDLE_SUFFIX);
        if !bundle && !name.ends_with(".pack") {
            continue;
        }
        if SystemTime::from(meta.last_modified) > cutoff {
            report.young += u64::from(bundle);
            continue;
        }
        if examined == limit {
            report.truncated = true;
            break;
        }
        examined += 1;
        batch.push(Candidate {
            key: meta.location,
            size: meta.size,
            bundle,
        });
        if batch.len() >= spool_catalog::MAX_KEYS_PER_STATEMENT {
            settle(catalog, store, &mut batch, dry_run, &mut report).await?;
        }
    }
    settle(catalog, store, &mut batch, dry_run, &mut report).await?;
    Ok(report)
}

/// Asks the catalog about `batch` (and empties it), then deletes what no
/// row names and counts the rest.
async fn settle(
    catalog: &dyn Catalog,
    store: &Store,
    batch: &mut Vec<Candidate>,
    dry_run: bool,
    report: &mut SweepReport,
) -> Result<(), Error> {
    if batch.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = batch.iter().map(|c| c.key.to_string()).collect();
    let named: HashMap<String, u64> =
        catalog
            .referenced_bytes(&keys)
            .await
            .map_err(|e| Error::SweepCatalog {
                catalog: catalog.server(),
                error: Box::new(e),
            })?;
    for c in batch.drain(..) {
        match (named.get(c.key.as_ref()), c.bundle) {
            (Some(&bytes), true) => {
                report.kept += 1;
                report.orphaned_bytes += c.size.saturating_sub(bytes);
            }
            (Some(_), false) => {}
            (None, false) => {
                report.stray_packs += 1;
                report.stray_pack_bytes += c.size;
            }
            (None, true) => {
                if !dry_run {
                    match store.object_store().delete(&c.key).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => {
                            return Err(Error::SweepStore {
                                store: store.description().to_string(),
                                key: c.key.to_string(),
                                error: e.into(),
                            })
                        }
                    }
                    tracing::info!(key = %c.key, bytes = c.size, "deleted a bundle no row names");
                }
                report.deleted += 1;
                report.deleted_bytes += c.size;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
