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
//! none. Objects are validated as they stream (bounded memory), one at a
//! time; rows are inserted in batches.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use spool_catalog::{Catalog, LeaseGuard, PackRow};
use spool_core::pack::{PackId, PackSummary};
use spool_upload::Store;

use crate::Error;

/// The rank directory a reindexed row names: the layout's name reserved
/// for packs of no known producer (moved in by hand, or found in the
/// store).
const REINDEXED_RANK_DIR: &str = "r0-00000000";

/// Rows inserted per catalog call.
const BATCH: usize = 256;

/// What a [`reindex`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReindexReport {
    /// Objects listed under the store's prefix.
    pub listed: u64,
    /// Packs the catalog already had a row for (left as they are), and
    /// later copies of a pack id already seen in this listing.
    pub present: u64,
    /// Rows inserted: valid packs the catalog lacked.
    pub inserted: u64,
    /// Objects not named like a pack: skipped.
    pub other: u64,
    /// Objects named like a pack that are not a valid one: their key and
    /// why. No row is written for them.
    pub invalid: Vec<(String, String)>,
}

/// Lists `store`'s prefix and indexes into `catalog` (rows naming
/// `store_id`, fenced by `fence` where the catalog is lease-gated) every
/// valid pack it lacks; with `dry_run`, counts them and inserts nothing.
/// Checks `cancel` between objects.
pub async fn reindex(
    catalog: &dyn Catalog,
    store: &Store,
    store_id: &str,
    fence: Option<&LeaseGuard>,
    dry_run: bool,
    cancel: &AtomicBool,
) -> Result<ReindexReport, Error> {
    let mut report = ReindexReport::default();
    let mut seen = std::collections::HashSet::new();
    let mut rows: Vec<PackRow> = Vec::new();
    let mut listing = store.object_store().list(Some(store.prefix()));
    while let Some(meta) = listing.next().await {
        if cancel.load(Ordering::SeqCst) {
            return Err(Error::ReindexCancelled {
                store: store.description().to_string(),
            });
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
            let packs = read_bundle(store, &meta.location).await?;
            for found in packs {
                let (offset, summary) = match found {
                    Ok(p) => p,
                    Err(why) => {
                        tracing::warn!(key, "not indexed: the rest of the bundle: {why}");
                        report.invalid.push((key.clone(), why));
                        continue;
                    }
                };
                if !seen.insert(summary.id) || known(catalog, summary.id).await? {
                    report.present += 1;
                    continue;
                }
                let mut row = row_of(&summary, &key, store_id);
                row.object_offset = offset;
                rows.push(row);
            }
            if rows.len() >= BATCH {
                report.inserted += insert(catalog, &mut rows, fence, dry_run).await?;
            }
            continue;
        }
        let Some(id) = pack_id_of(&key) else {
            report.other += 1;
            continue;
        };
        if !seen.insert(id) {
            report.present += 1; // another copy of a pack met already
            continue;
        }
        if known(catalog, id).await? {
            report.present += 1;
            continue;
        }
        match validate_object(store, &meta.location, id).await? {
            Ok(summary) => rows.push(row_of(&summary, &key, store_id)),
            Err(why) => {
                tracing::warn!(
                    key,
                    "not indexed: the object is not a valid pack {id}: {why}"
                );
                report.invalid.push((key, why));
            }
        }
        if rows.len() >= BATCH {
            report.inserted += insert(catalog, &mut rows, fence, dry_run).await?;
        }
    }
    report.inserted += insert(catalog, &mut rows, fence, dry_run).await?;
    Ok(report)
}

/// Whether the catalog has a row for `id`.
async fn known(catalog: &dyn Catalog, id: PackId) -> Result<bool, Error> {
    let row = catalog
        .get(&id.to_hex())
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

/// Reads the bundle at `key` whole and walks it from its end (see the
/// module doc): each pack with its offset and summary, last first; where
/// the framing breaks, why, and nothing before it.
async fn read_bundle(
    store: &Store,
    key: &object_store::path::Path,
) -> Result<Vec<Result<(u64, PackSummary), String>>, Error> {
    let bytes = store
        .object_store()
        .get(key)
        .await
        .map_err(|e| Error::ReindexStore {
            store: store.description().to_string(),
            key: key.to_string(),
            error: e.into(),
        })?
        .bytes()
        .await
        .map_err(|e| Error::ReindexStore {
            store: store.description().to_string(),
            key: key.to_string(),
            error: e.into(),
        })?;
    let walked = tokio::task::spawn_blocking(move || walk_bundle(&bytes)).await;
    Ok(walked.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())))
}

/// The packs of a bundle's bytes, from its end (see [`read_bundle`]), each
/// validated.
fn walk_bundle(bytes: &[u8]) -> Vec<Result<(u64, PackSummary), String>> {
    let never = AtomicBool::new(false);
    spool_core::pack::bundled_packs(bytes)
        .into_iter()
        .map(|found| {
            let (range, trailer) = found.map_err(|e| e.to_string())?;
            let start = range.start as u64;
            spool_core::pack::validate(&bytes[range], Some(trailer.id), &never)
                .map(|summary| (start, summary))
                .map_err(|e| format!("pack {} at {start}: {e}", trailer.id))
        })
        .collect()
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

/// Streams the object at `key` through the pack's validation, expecting
/// `id`: `Ok(Ok(summary))` for a valid pack, `Ok(Err(why))` for anything
/// else, `Err` when the store could not be read.
async fn validate_object(
    store: &Store,
    key: &object_store::path::Path,
    id: PackId,
) -> Result<Result<PackSummary, String>, Error> {
    let store_error = |error: Box<dyn std::error::Error + Send + Sync>| Error::ReindexStore {
        store: store.description().to_string(),
        key: key.to_string(),
        error,
    };
    let got = store
        .object_store()
        .get(key)
        .await
        .map_err(|e| store_error(e.into()))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
    let check = tokio::task::spawn_blocking(move || {
        let mut reader = Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        };
        spool_core::pack::validate(&mut reader, Some(id), &AtomicBool::new(false))
    });
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let item = chunk.map(|b| b.to_vec()).map_err(std::io::Error::other);
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break; // the validation stopped (a bad pack), or the read failed
        }
    }
    drop(tx);
    match check.await {
        Ok(Ok(summary)) => Ok(Ok(summary)),
        Ok(Err(spool_core::Error::CorruptPack { problem, .. })) => Ok(Err(problem.to_string())),
        Ok(Err(e)) => Err(store_error(e.into())),
        Err(e) => Err(store_error(e.to_string().into())),
    }
}

/// A blocking reader over the chunks an async stream sends.
struct Chunks {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(Ok(c)) => {
                    self.chunk = c;
                    self.at = 0;
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
