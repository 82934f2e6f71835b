//! Reclaiming the bytes no row points to (`spool sweep`): the one
//! operation of spool that deletes from a store, held to the strictest
//! rule. Once a pack has left every spool its object may be its only
//! copy, so **an object is deleted only when its own bytes prove it a
//! spare copy**:
//!
//! 1. its key is exactly spool's key for a bundle
//!    (`<prefix>/v2/<spread>/date=<day>/<bundle id>.bundle`, re-derived
//!    from the id: spool-upload's `bundle_key`); anything else under the
//!    prefix (another tool's `x.bundle`, a `<32 hex>.bundle` elsewhere, a
//!    pack alone at its own key, spool's own `_spool/` records) is never
//!    deleted;
//! 2. it is at least the destination's grace old by the **store's** clock
//!    (the grace is the prefix record's, `prefix_record.rs`; the store's
//!    now is read by writing `_spool/clock`); a dry run, which deletes
//!    nothing, uses this host's clock instead;
//! 3. no current row names it (read consistently:
//!    [`Catalog::referenced_bytes`]);
//! 4. it walks as spool packs from its end to byte 0, every pack valid
//!    (spool-core's `bundled_packs` and `validate`), within
//!    [`MAX_PROVABLE_BYTES`];
//! 5. every pack in it has a current row (read consistently:
//!    [`Catalog::current_rows`]) naming **another** object, with the same
//!    size and trailer checksum, and that other object exists and holds,
//!    at the row's range, a trailer naming the same pack and checksum (one
//!    ranged read each).
//!
//! A bundle that fails 4 or 5 is kept whatever its age and reported: packs
//! no row names make it **unindexed** (`N packs in K bundles have no row
//! here: run spool reindex`: a catalog that lost rows, or another
//! catalog's bundle); the rest make it **unproven** (with the first
//! reason). Before anything, the prefix record must name this catalog
//! (`prefix_record::check`): a sweep against another node's catalog, or a
//! typo'd one, is refused having done nothing, and a catalog that does not
//! exist is refused when opened (a read never creates one).
//!
//! **Why the grace is still there.** Proof by content makes a lost row, a
//! foreign catalog or a skewed clock harmless: a pack no row names keeps
//! its bundle. One case needs time: a bundle whose packs were indexed
//! again from a later bundle (a successor's upload after a crash) while
//! an index call naming the first is still on its way. A drain indexes
//! rows naming a bundle only within half of the grace after its PUT
//! returned (`drain/pipeline.rs`, "Bundles"), and the grace is at least
//! four catalog request bounds, so by the time a sweep may read a bundle
//! no such call can still land. If one did, nothing is lost either: the
//! row would name a deleted object, and the later bundle, which then no
//! row names, is kept by rule 5 (the copy its packs' rows name is gone).
//!
//! **What it only counts.** A bundle some row names is kept whole; the
//! bytes in it no current row names are reported as orphaned. A pack
//! alone at its own key (`<id>.pack`) that no row names is counted, never
//! deleted: its key is the pack's forever, so an upload that finds it
//! there indexes it at any later time.
//!
//! **Bounded.** One pass examines at most `limit` objects older than the
//! grace, asks the catalog about at most
//! [`spool_catalog::MAX_KEYS_PER_STATEMENT`] keys per statement, reads one
//! candidate bundle at a time (at most [`MAX_PROVABLE_BYTES`]), and checks
//! `cancel` between objects. `spool reindex` may run beside it: a row it
//! writes names an object that exists, and a bundle whose packs it is
//! indexing has no row naming another copy, so the sweep keeps it.

mod proof;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use spool_catalog::Catalog;
use spool_core::pack::PackId;
use spool_upload::Store;

use crate::prefix_record::{self, CatalogIdentity};
use crate::Error;

pub use proof::MAX_PROVABLE_BYTES;

/// Most kept bundles a report names with their reason.
const MAX_NAMED: usize = 10;

/// What a [`sweep`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Objects listed under the store's prefix.
    pub listed: u64,
    /// The destination's grace (the prefix record's).
    pub grace: Duration,
    /// Whose clock measured the bundles' ages: `"store"`, or `"local"`
    /// for a dry run.
    pub clock: &'static str,
    /// Bundles younger than the grace: left alone.
    pub young: u64,
    /// Bundles old enough that some row names: kept.
    pub kept: u64,
    /// Bundles proven spare: deleted (or, in a dry run, to delete).
    pub deleted: u64,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Bytes in kept bundles that no current row names.
    pub orphaned_bytes: u64,
    /// Bundles no row names holding packs no row names either: kept, for
    /// `spool reindex`.
    pub unindexed_bundles: u64,
    /// The packs in them no row names.
    pub unindexed_packs: u64,
    /// Bundles no row names that could not be proven spare for another
    /// reason (they do not walk as spool packs, a pack's row names a copy
    /// that is not there): kept.
    pub unproven: u64,
    /// Up to [`MAX_NAMED`] kept bundles no row names, with why.
    pub kept_why: Vec<(String, String)>,
    /// Objects under the prefix outside spool's layout: never touched.
    pub foreign: u64,
    /// Packs alone at their own key, old enough, that no row names:
    /// counted, never deleted (see the module docs).
    pub stray_packs: u64,
    /// Their bytes.
    pub stray_pack_bytes: u64,
    /// The pass stopped at its limit: more old objects wait for the next.
    pub truncated: bool,
}

/// What an object's key says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Exactly spool's key for the bundle of this id.
    Bundle(PackId),
    /// Exactly spool's key for this pack alone.
    Pack,
    /// Anything else (spool's own records included): never touched.
    Foreign,
}

/// What `key` is under `store`'s prefix (see [`Kind`]).
fn kind_of(store: &Store, key: &Path) -> Kind {
    let Some(name) = key.filename() else {
        return Kind::Foreign;
    };
    if let Some(hex) = name.strip_suffix(spool_upload::BUNDLE_SUFFIX) {
        if let Ok(id) = PackId::from_hex(hex) {
            if spool_upload::bundle_key(store.prefix(), &id) == *key {
                return Kind::Bundle(id);
            }
        }
    } else if let Some(hex) = name.strip_suffix(".pack") {
        if let Ok(id) = PackId::from_hex(hex) {
            if spool_upload::object_key(store.prefix(), &id) == *key {
                return Kind::Pack;
            }
        }
    }
    Kind::Foreign
}

/// An old object the catalog is asked about.
struct Candidate {
    key: Path,
    size: u64,
    bundle: bool,
}

/// Sweeps `store`'s prefix against `catalog`, which must be the one its
/// prefix record names (`ours`; see the module docs): deletes the bundles
/// proven spare (with `dry_run`, only counts them), at most `limit` old
/// objects per pass.
pub async fn sweep(
    catalog: &dyn Catalog,
    store: &Store,
    ours: &CatalogIdentity,
    (limit, dry_run): (usize, bool),
    cancel: &AtomicBool,
) -> Result<SweepReport, Error> {
    // the catalog first: one that does not exist is refused as such
    catalog
        .ensure_schema()
        .await
        .map_err(|e| catalog_error(catalog, e))?;
    let record = prefix_record::check(store, ours, catalog.request_timeout()).await?;
    let grace = record.orphan_grace();
    let (now, clock) = if dry_run {
        (SystemTime::now(), "local")
    } else {
        (prefix_record::store_now(store).await?, "store")
    };
    let cutoff = now.checked_sub(grace).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut report = SweepReport {
        grace,
        clock,
        ..SweepReport::default()
    };
    let mut batch: Vec<Candidate> = Vec::new();
    let mut examined = 0usize;
    let mut listing = store.object_store().list(Some(store.prefix()));
    while let Some(meta) = listing.next().await {
        if cancel.load(Ordering::SeqCst) {
            return Err(cancelled(store));
        }
        let meta = meta.map_err(|e| store_error(store, store.prefix().as_ref(), e))?;
        report.listed += 1;
        let bundle = match kind_of(store, &meta.location) {
            Kind::Bundle(_) => true,
            Kind::Pack => false,
            Kind::Foreign => {
                report.foreign += u64::from(!prefix_record::is_record(store, &meta.location));
                continue;
            }
        };
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
            settle(catalog, store, &mut batch, dry_run, &mut report, cancel).await?;
        }
    }
    settle(catalog, store, &mut batch, dry_run, &mut report, cancel).await?;
    Ok(report)
}

fn store_error(store: &Store, key: &str, error: object_store::Error) -> Error {
    Error::SweepStore {
        store: store.description().to_string(),
        key: key.to_string(),
        error: error.into(),
    }
}

fn catalog_error(catalog: &dyn Catalog, error: spool_catalog::Error) -> Error {
    Error::SweepCatalog {
        catalog: catalog.server(),
        error: Box::new(error),
    }
}

fn cancelled(store: &Store) -> Error {
    Error::SweepCancelled {
        store: store.description().to_string(),
    }
}

/// Asks the catalog about `batch` (and empties it), then proves and
/// deletes the bundles no row names, and counts the rest.
async fn settle(
    catalog: &dyn Catalog,
    store: &Store,
    batch: &mut Vec<Candidate>,
    dry_run: bool,
    report: &mut SweepReport,
    cancel: &AtomicBool,
) -> Result<(), Error> {
    if batch.is_empty() {
        return Ok(());
    }
    let keys: Vec<String> = batch.iter().map(|c| c.key.to_string()).collect();
    let named: HashMap<String, u64> = catalog
        .referenced_bytes(&keys)
        .await
        .map_err(|e| catalog_error(catalog, e))?;
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
                if cancel.load(Ordering::SeqCst) {
                    return Err(cancelled(store));
                }
                match proof::prove_spare(catalog, store, &c.key, c.size).await? {
                    proof::Verdict::Spare => {
                        if !dry_run {
                            match store.object_store().delete(&c.key).await {
                                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                                Err(e) => return Err(store_error(store, c.key.as_ref(), e)),
                            }
                            tracing::info!(key = %c.key, bytes = c.size,
                                "deleted a bundle proven spare: every pack in it is indexed in another object");
                        }
                        report.deleted += 1;
                        report.deleted_bytes += c.size;
                    }
                    proof::Verdict::Unindexed { packs, why } => {
                        report.unindexed_bundles += 1;
                        report.unindexed_packs += packs;
                        name_kept(report, &c.key, why);
                    }
                    proof::Verdict::Unproven { why } => {
                        report.unproven += 1;
                        name_kept(report, &c.key, why);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Keeps `why` for the report, for the first few kept bundles.
fn name_kept(report: &mut SweepReport, key: &Path, why: String) {
    tracing::warn!(key = %key, "kept a bundle no row names: {why}");
    if report.kept_why.len() < MAX_NAMED {
        report.kept_why.push((key.to_string(), why));
    }
}

#[cfg(test)]
mod tests;
