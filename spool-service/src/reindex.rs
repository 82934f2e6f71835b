//! Making a catalog whole from its store (`spool reindex`): every object
//! under the store's prefix named like a pack (`<32 hex digits>.pack`, in
//! any layout) is read, validated as the pack its name says (header, every
//! record, footer, trailer, SHA-256), and indexed if the catalog has no row
//! for its id. Every object named like a bundle (`<32 hex digits>.bundle`)
//! is read whole and walked from its end by the packs' own framing (each
//! trailer names its pack's length, so the pack before it ends where this
//! one starts); each pack is validated and indexed the same way, its row
//! naming its range in the bundle. For a catalog that lost rows: a part a
//! single unreplicated server never fsynced, a dropped table, a restored
//! backup.
//!
//! A bundle no row names may be one a sweep is about to delete (`spool
//! sweep`, spool-upload's crate docs, "Bundles"): run the two apart, or a
//! row may come to name a deleted object (its pack is then in a later
//! bundle too, or still in its spool).
//!
//! It never indexes what is not a valid pack (reported, with why), never
//! writes a second row for a pack the catalog has (it asks first, and the
//! catalog keeps one row per id anyway), and never touches the store. A
//! row it writes names the object's key and the pack's own checksums, size
//! and record count; where the pack came from (host, pid, rank directory,
//! ordinal) is not in the object, so the row says `unknown`, 0,
//! `r0-00000000` (the layout's name for packs of no known producer) and
//! none.
//!
//! **Validate, then count.** A pack id counts as met (and later copies of
//! it as present) only once a valid copy of it was found, so a corrupt
//! copy listed first never hides a valid one listed later.
//!
//! **Bounded.** Objects are validated as they stream or from one window of
//! a bundle (bounded memory, [`walk`]), one object at a time; what is kept
//! of an invalid object is one entry (its key, how many packs in it are
//! damaged, the first reason), never one per pack. The catalog is asked
//! about the valid packs in batches of [`BATCH`] rows, at most
//! [`CONCURRENT_GETS`] lookups in flight, and the ones it lacks inserted
//! in one call per batch; the ids met are kept (16 bytes each) for the
//! whole run.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt, TryStreamExt};
use spool_catalog::{Catalog, LeaseGuard, PackRow};
use spool_core::pack::{PackId, PackSummary};
use spool_upload::{Store, MAX_BUNDLE_BYTES};

use crate::Error;

pub mod walk;

pub use walk::{validate_range, BundleWalker};

/// The rank directory a reindexed row names: the layout's name reserved
/// for packs of no known producer (moved in by hand, or found in the
/// store).
const REINDEXED_RANK_DIR: &str = "r0-00000000";

/// Valid packs checked against the catalog, and inserted, per batch.
pub const BATCH: usize = 256;

/// Catalog lookups (`Catalog::get`) in flight at once while a batch is
/// checked: the catalog has no lookup of many ids, and one at a time
/// would cost a round trip per pack.
pub const CONCURRENT_GETS: usize = 16;

/// What a [`reindex`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReindexReport {
    /// Objects listed under the store's prefix.
    pub listed: u64,
    /// Valid packs the catalog already had a row for (left as they are),
    /// and later valid copies of a pack id already met in this listing.
    pub present: u64,
    /// Rows inserted: valid packs the catalog lacked.
    pub inserted: u64,
    /// Objects not named like a pack or a bundle: skipped.
    pub other: u64,
    /// Packs found damaged (in bundles and alone), counted in
    /// [`ReindexReport::invalid`]'s entries.
    pub damaged: u64,
    /// Objects named like a pack or a bundle that are not a valid one or
    /// hold damaged packs: one entry per object, its key and why (for a
    /// bundle: how many damaged packs, and the first one's reason). No row
    /// is written for what is damaged.
    pub invalid: Vec<(String, String)>,
}

/// The valid packs waiting for the catalog, and the ids met.
#[derive(Default)]
struct Pending {
    seen: HashSet<PackId>,
    rows: Vec<PackRow>,
}

impl Pending {
    /// A valid pack found at `key` from `offset`: a candidate row, or a
    /// later copy of a pack met already (present).
    fn found(
        &mut self,
        summary: &PackSummary,
        (key, offset): (&str, u64),
        store_id: &str,
        report: &mut ReindexReport,
    ) {
        if !self.seen.insert(summary.id) {
            report.present += 1;
            return;
        }
        let mut row = row_of(summary, key, store_id);
        row.object_offset = offset;
        self.rows.push(row);
    }
}

/// Lists `store`'s prefix and indexes into `catalog` (rows naming
/// `store_id`, fenced by `fence` where the catalog is lease-gated) every
/// valid pack it lacks; with `dry_run`, counts them and inserts nothing.
/// Checks `cancel` between objects and between the windows of a bundle.
pub async fn reindex(
    catalog: &dyn Catalog,
    store: &Store,
    store_id: &str,
    fence: Option<&LeaseGuard>,
    dry_run: bool,
    cancel: &AtomicBool,
) -> Result<ReindexReport, Error> {
    let cancelled = || {
        cancel
            .load(Ordering::SeqCst)
            .then(|| Error::ReindexCancelled {
                store: store.description().to_string(),
            })
    };
    let mut report = ReindexReport::default();
    let mut pending = Pending::default();
    let mut listing = store.object_store().list(Some(store.prefix()));
    while let Some(meta) = listing.next().await {
        if let Some(e) = cancelled() {
            return Err(e);
        }
        let meta = meta.map_err(|e| Error::ReindexStore {
            store: store.description().to_string(),
            key: store.prefix().to_string(),
            error: e.into(),
        })?;
        if crate::prefix_record::is_record(store, &meta.location) {
            continue; // spool's own record, not a pack
        }
        report.listed += 1;
        let key = meta.location.to_string();
        if bundle_name(&key) {
            if meta.size > MAX_BUNDLE_BYTES {
                let why = format!(
                    "{} bytes, more than the largest bundle spool writes ({MAX_BUNDLE_BYTES} \
                     bytes): not read",
                    meta.size
                );
                tracing::warn!(key, "not indexed: {why}");
                report.invalid.push((key, why));
                continue;
            }
            let mut walker = BundleWalker::new(store, meta.location.clone(), meta.size);
            while let Some(found) = walker.next().await? {
                if let Some(e) = cancelled() {
                    return Err(e);
                }
                for (offset, summary) in &found {
                    pending.found(summary, (&key, *offset), store_id, &mut report);
                }
                if pending.rows.len() >= BATCH {
                    settle(catalog, &mut pending, fence, dry_run, &mut report).await?;
                }
            }
            if let (damaged @ 1.., first) = walker.damaged() {
                let why = format!(
                    "{damaged} damaged pack(s) in the bundle not indexed; the first: {}",
                    first.unwrap_or("unknown")
                );
                tracing::warn!(key, "not indexed: {why}");
                report.damaged += damaged;
                report.invalid.push((key, why));
            }
            continue;
        }
        let Some(id) = pack_id_of(&key) else {
            report.other += 1;
            continue;
        };
        if pending.seen.contains(&id) {
            report.present += 1; // a valid copy was met already
            continue;
        }
        match validate_range(store, &meta.location, None, id).await? {
            Ok(summary) => pending.found(&summary, (&key, 0), store_id, &mut report),
            Err(why) => {
                tracing::warn!(
                    key,
                    "not indexed: the object is not a valid pack {id}: {why}"
                );
                report.damaged += 1;
                report.invalid.push((key, why));
            }
        }
        if pending.rows.len() >= BATCH {
            settle(catalog, &mut pending, fence, dry_run, &mut report).await?;
        }
    }
    settle(catalog, &mut pending, fence, dry_run, &mut report).await?;
    Ok(report)
}

/// Asks the catalog which of the pending rows it has ([`CONCURRENT_GETS`]
/// lookups in flight), counts those present, inserts the others (unless
/// `dry_run`) and empties the batch.
async fn settle(
    catalog: &dyn Catalog,
    pending: &mut Pending,
    fence: Option<&LeaseGuard>,
    dry_run: bool,
    report: &mut ReindexReport,
) -> Result<(), Error> {
    let rows = std::mem::take(&mut pending.rows);
    let known: Vec<bool> = futures::stream::iter(rows.iter().map(|r| known(catalog, &r.pack_id)))
        .buffered(CONCURRENT_GETS)
        .try_collect()
        .await?;
    let mut fresh: Vec<PackRow> = Vec::with_capacity(rows.len());
    for (row, known) in rows.into_iter().zip(known) {
        if known {
            report.present += 1;
        } else {
            fresh.push(row);
        }
    }
    report.inserted += insert(catalog, &mut fresh, fence, dry_run).await?;
    Ok(())
}

/// Whether the catalog has a row for `pack_id`.
async fn known(catalog: &dyn Catalog, pack_id: &str) -> Result<bool, Error> {
    let row = catalog
        .get(pack_id)
        .await
        .map_err(|e| Error::ReindexCatalog {
            catalog: catalog.server(),
            error: Box::new(e),
        })?;
    Ok(row.is_some())
}

/// Whether an object key names a bundle (`.../<32 hex>.bundle`).
fn bundle_name(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or_default();
    name.strip_suffix(spool_upload::BUNDLE_SUFFIX)
        .is_some_and(|hex| PackId::from_hex(hex).is_ok())
}

/// The pack id an object key names (`.../<32 hex>.pack`), if any.
fn pack_id_of(key: &str) -> Option<PackId> {
    let name = key.rsplit('/').next()?;
    PackId::from_hex(name.strip_suffix(".pack")?).ok()
}

/// Inserts `rows` (and empties it): how many.
async fn insert(
    catalog: &dyn Catalog,
    rows: &mut Vec<PackRow>,
    fence: Option<&LeaseGuard>,
    dry_run: bool,
) -> Result<u64, Error> {
    let n = rows.len() as u64;
    if n > 0 && !dry_run {
        catalog
            .index(rows, fence)
            .await
            .map_err(|e| Error::ReindexCatalog {
                catalog: catalog.server(),
                error: Box::new(e),
            })?;
    }
    rows.clear();
    Ok(n)
}

/// The row of a pack found at `key` (see the module doc for what it cannot
/// know).
fn row_of(summary: &PackSummary, key: &str, store_id: &str) -> PackRow {
    PackRow {
        object_offset: 0,
        pack_id: summary.id.to_hex(),
        object_key: key.to_string(),
        store_id: store_id.to_string(),
        sha256: hex::encode(summary.sha256),
        bytes: summary.bytes,
        records: summary.records,
        source_host: "unknown".to_string(),
        source_pid: 0,
        rank_dir: REINDEXED_RANK_DIR.to_string(),
        ordinal: None,
        created_at_ms: summary.created_ms,
        indexed_at_ms: spool_core::pack::now_ms(),
        trailer_sha256: hex::encode(summary.trailer_sha256),
    }
}

#[cfg(test)]
mod tests;
