//! Reading one pack back (`spool cat`, Python's `spool.fetch`): its row
//! from the catalog, its object from the store, then the checks a reader
//! relies on — spool-core's whole-pack validation (header, the expected id,
//! every record, footer, trailer, SHA-256) and the row's checksums and size.
//! One function, so the command and the binding check alike.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
use object_store::ObjectStoreExt;
use spool_catalog::{Catalog, PackRow};
use spool_core::pack::{PackId, PackSummary};
use spool_upload::Store;

use crate::Error;

/// A pack read back and checked by [`fetch_pack`].
#[derive(Debug, Clone)]
pub struct FetchedPack {
    /// Its catalog row.
    pub row: PackRow,
    /// What validation found (id, size, record count, SHA-256).
    pub summary: PackSummary,
}

/// Looks pack `id` up in `catalog`, streams its object from `store` into
/// `out` (from `out`'s current position; pass an empty file or buffer),
/// validates what was written and compares it with the row's SHA-256 and
/// size. On success `out` holds the checked pack and is rewound to its
/// start; on [`Error::PackMismatch`] it holds the bytes that failed (write
/// them nowhere).
///
/// Errors: [`Error::PackNotIndexed`] (no row), [`Error::FetchCatalog`]
/// (the catalog call failed), [`Error::PackNotInStore`] (the row's key has
/// no object), [`Error::FetchStore`] (reading the object or writing `out`
/// failed), [`Error::PackMismatch`] (the bytes are not the pack the row
/// describes).
pub async fn fetch_pack<F: Read + Write + Seek>(
    catalog: &dyn Catalog,
    store: &Store,
    id: PackId,
    out: &mut F,
) -> Result<FetchedPack, Error> {
    let pack_id = id.to_hex();
    let row = catalog
        .get(&pack_id)
        .await
        .map_err(|error| Error::FetchCatalog {
            pack_id: pack_id.clone(),
            catalog: catalog.server(),
            error: Box::new(error),
        })?
        .ok_or_else(|| Error::PackNotIndexed {
            pack_id: pack_id.clone(),
            catalog: catalog.server(),
        })?;
    let key = object_store::path::Path::from(row.object_key.as_str());
    let store_error = |error: Box<dyn std::error::Error + Send + Sync>| Error::FetchStore {
        pack_id: pack_id.clone(),
        store: store.description().to_string(),
        key: key.to_string(),
        error,
    };
    let got = match store.object_store().get(&key).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(Error::PackNotInStore {
                pack_id: pack_id.clone(),
                store: store.description().to_string(),
                key: key.to_string(),
            })
        }
        Err(e) => return Err(store_error(e.into())),
    };
    let start = out.stream_position().map_err(|e| store_error(e.into()))?;
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| store_error(e.into()))?;
        out.write_all(&chunk).map_err(|e| store_error(e.into()))?;
    }
    out.flush().map_err(|e| store_error(e.into()))?;
    out.seek(SeekFrom::Start(start))
        .map_err(|e| store_error(e.into()))?;
    let mismatch = |why: String, offset: Option<u64>| Error::PackMismatch {
        pack_id: pack_id.clone(),
        store: store.description().to_string(),
        key: key.to_string(),
        why,
        offset,
    };
    let summary = match spool_core::pack::validate(&mut *out, Some(id), &AtomicBool::new(false)) {
        Ok(s) => s,
        Err(spool_core::Error::CorruptPack { problem, .. }) => {
            return Err(mismatch(problem.to_string(), problem.offset()))
        }
        Err(e) => return Err(store_error(e.into())),
    };
    // A row of schema version 4 or later names the whole object's SHA-256
    // and the trailer's checksum; an older one the trailer's in both
    // (`PackRow::whole_sha256`), so it is checked against that.
    let (sha, trailer) = (
        hex::encode(summary.sha256),
        hex::encode(summary.trailer_sha256),
    );
    let row_sha = if row.whole_sha256() { &sha } else { &trailer };
    if *row_sha != row.sha256 || trailer != row.trailer_sha256 || summary.bytes != row.bytes {
        return Err(mismatch(
            format!(
                "the catalog says sha256 {} (trailer {}) and {} bytes, the object has sha256 {sha} (trailer {trailer}) and {} bytes",
                row.sha256, row.trailer_sha256, row.bytes, summary.bytes
            ),
            None,
        ));
    }
    out.seek(SeekFrom::Start(start))
        .map_err(|e| store_error(e.into()))?;
    Ok(FetchedPack { row, summary })
}
