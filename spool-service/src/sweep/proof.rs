//! Whether a bundle no row names is a spare copy (the sweep's rules 4
//! and 5, `sweep.rs`): its bytes walk as spool packs, and every pack in it
//! has a current row naming another object whose bytes at that range end
//! in the same pack's trailer.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use object_store::path::Path;
use object_store::ObjectStoreExt;
use spool_catalog::{Catalog, PackRow};
use spool_core::pack::{PackSummary, Trailer, TRAILER_LEN};
use spool_upload::Store;

use crate::Error;

/// The largest bundle a sweep reads to prove it spare (256 MiB, the
/// default `upload.max_in_flight_bytes`, which bounds every bundle the
/// default uploader writes): a larger object is kept and reported.
pub const MAX_PROVABLE_BYTES: u64 = 256 << 20;

/// What [`prove_spare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Every pack in it is indexed in another object that holds it.
    Spare,
    /// `packs` of its packs have no row at all: keep it, for `spool
    /// reindex`.
    Unindexed {
        /// How many.
        packs: u64,
        /// The first one, said.
        why: String,
    },
    /// It is not provably spool's, or a row names a copy that is not
    /// there: keep it.
    Unproven {
        /// Why.
        why: String,
    },
}

/// Proves (or not) that the bundle at `key`, `size` bytes, that no row
/// names, is a spare copy. `Err` only when the store or the catalog could
/// not be read (nothing is deleted then).
pub(super) async fn prove_spare(
    catalog: &dyn Catalog,
    store: &Store,
    key: &Path,
    size: u64,
) -> Result<Verdict, Error> {
    if size > MAX_PROVABLE_BYTES {
        return Ok(Verdict::Unproven {
            why: format!("{size} bytes, more than a sweep reads ({MAX_PROVABLE_BYTES})"),
        });
    }
    let store_error = |k: &Path, e: object_store::Error| Error::SweepStore {
        store: store.description().to_string(),
        key: k.to_string(),
        error: e.into(),
    };
    let bytes = match store.object_store().get(key).await {
        Ok(got) => got.bytes().await.map_err(|e| store_error(key, e))?,
        // gone since it was listed: nothing to delete
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(Verdict::Unproven {
                why: "gone since it was listed".into(),
            })
        }
        Err(e) => return Err(store_error(key, e)),
    };
    if bytes.len() as u64 != size {
        return Ok(Verdict::Unproven {
            why: format!("{} bytes read, {size} listed: changed since", bytes.len()),
        });
    }
    let packs = match tokio::task::spawn_blocking(move || walk(&bytes)).await {
        Ok(Ok(packs)) => packs,
        Ok(Err(why)) => return Ok(Verdict::Unproven { why }),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let ids: Vec<String> = packs.iter().map(|(_, s)| s.id.to_hex()).collect();
    let rows = catalog
        .current_rows(&ids)
        .await
        .map_err(|e| Error::SweepCatalog {
            catalog: catalog.server(),
            error: Box::new(e),
        })?;
    let missing: Vec<&String> = ids.iter().filter(|id| !rows.contains_key(*id)).collect();
    if let Some(first) = missing.first() {
        return Ok(Verdict::Unindexed {
            packs: missing.len() as u64,
            why: format!(
                "{} of its {} pack(s) have no row here (pack {first} first): run spool reindex",
                missing.len(),
                ids.len()
            ),
        });
    }
    let mut sizes: HashMap<String, Option<u64>> = HashMap::new();
    for (_, summary) in &packs {
        let row = &rows[&summary.id.to_hex()];
        if let Some(why) = elsewhere(store, key, row, summary, &mut sizes).await? {
            return Ok(Verdict::Unproven { why });
        }
    }
    Ok(Verdict::Spare)
}

/// The packs of a bundle's bytes with their offsets, each valid; `Err`
/// saying why when the bytes are not spool packs back to back from byte 0
/// to the end.
fn walk(bytes: &[u8]) -> Result<Vec<(u64, PackSummary)>, String> {
    let never = AtomicBool::new(false);
    let mut packs = Vec::new();
    for found in spool_core::pack::bundled_packs(bytes) {
        let (range, trailer) = found.map_err(|e| format!("does not walk as spool packs: {e}"))?;
        let start = range.start as u64;
        let summary = spool_core::pack::validate(&bytes[range], Some(trailer.id), &never)
            .map_err(|e| format!("pack {} at byte {start} is not valid: {e}", trailer.id))?;
        packs.push((start, summary));
    }
    if packs.is_empty() {
        return Err("empty: holds no pack".into());
    }
    Ok(packs)
}

/// Whether `row`, the current row of the pack `summary` of the bundle
/// `key`, names another copy that holds it: `None` if so, else why not.
/// `sizes` caches the other objects' sizes (`None`: not there).
async fn elsewhere(
    store: &Store,
    key: &Path,
    row: &PackRow,
    summary: &PackSummary,
    sizes: &mut HashMap<String, Option<u64>>,
) -> Result<Option<String>, Error> {
    let id = summary.id;
    if row.object_key == key.as_ref() {
        // (a row naming this bundle would have kept it: read again since)
        return Ok(Some(format!("pack {id}'s row names this bundle now")));
    }
    if row.bytes != summary.bytes || row.trailer_sha256 != hex::encode(summary.trailer_sha256) {
        return Ok(Some(format!(
            "pack {id}'s row describes another pack ({} bytes, trailer checksum {}; here {} bytes, {})",
            row.bytes,
            row.trailer_sha256,
            summary.bytes,
            hex::encode(summary.trailer_sha256)
        )));
    }
    let other = Path::from(row.object_key.as_str());
    let store_error = |e: object_store::Error| Error::SweepStore {
        store: store.description().to_string(),
        key: row.object_key.clone(),
        error: e.into(),
    };
    let size = match sizes.get(&row.object_key) {
        Some(s) => *s,
        None => {
            let s = match store.object_store().head(&other).await {
                Ok(m) => Some(m.size),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => return Err(store_error(e)),
            };
            sizes.insert(row.object_key.clone(), s);
            s
        }
    };
    let end = row.object_offset.saturating_add(row.bytes);
    let Some(size) = size else {
        return Ok(Some(format!(
            "pack {id}'s row names {}, which is not in the store",
            row.object_key
        )));
    };
    if end > size || row.bytes < TRAILER_LEN as u64 {
        return Ok(Some(format!(
            "pack {id}'s row names bytes {}..{end} of {}, which has {size}",
            row.object_offset, row.object_key
        )));
    }
    let tail = match store
        .object_store()
        .get_range(&other, end - TRAILER_LEN as u64..end)
        .await
    {
        Ok(b) => b,
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(Some(format!(
                "pack {id}'s row names {}, which is not in the store",
                row.object_key
            )))
        }
        Err(e) => return Err(store_error(e)),
    };
    let parsed = <&[u8; TRAILER_LEN]>::try_from(tail.as_ref())
        .ok()
        .and_then(|t| Trailer::parse(t).ok());
    match parsed {
        Some(t) if t.id == id && t.sha256 == summary.trailer_sha256 => Ok(None),
        _ => Ok(Some(format!(
            "pack {id}'s row names bytes {}..{end} of {}, which do not end in its trailer",
            row.object_offset, row.object_key
        ))),
    }
}
