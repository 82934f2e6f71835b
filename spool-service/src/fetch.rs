//! Reading one pack back (`spool cat`, Python's `spool.fetch`): its row
//! from the catalog, its object from the store, then the checks a reader
//! relies on — spool-core's whole-pack validation (header, the expected id,
//! every record, footer, trailer, SHA-256) and the row's checksums and size.
//! One function, so the command and the binding check alike.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
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

/// Looks pack `id` up in `catalog`, streams its bytes (the row's range of
/// its object: `bytes` bytes from `object_offset`) from `store` into
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
    // The pack is the row's range of its object (the whole object for a
    // pack that is one): one ranged GET.
    let range = row.object_offset..row.object_offset.saturating_add(row.bytes);
    let options = object_store::GetOptions::default().with_range(Some(range));
    let got = match store.object_store().get_opts(&key, options).await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt, PutPayload};
    use spool_core::pack::PackWriter;

    /// A pack inside a larger object (a bundle) is read back from its row's
    /// range with one ranged GET and checked; a row whose range is off by
    /// one byte fails the checks, and nothing passes as the pack.
    #[tokio::test]
    async fn a_pack_inside_a_larger_object_is_read_from_its_range_and_checked() {
        let store = Store::from_url("memory://", &Default::default()).unwrap();
        let catalog = spool_catalog::open("memory://").unwrap();
        let id = PackId::generate();
        let mut w = PackWriter::new(id, id.timestamp_ms());
        w.push_record(b"the one record");
        let pack = w.finish();
        let summary = spool_core::validate(
            std::io::Cursor::new(&pack),
            Some(id),
            &AtomicBool::new(false),
        )
        .unwrap();
        // another pack's bytes before it, padding after
        let mut object = vec![0x5a; 4099];
        let offset = object.len() as u64;
        object.extend_from_slice(&pack);
        object.extend_from_slice(&[0xa5; 777]);
        let key = "pre/v2/bundle.bundle";
        store
            .object_store()
            .put(
                &object_store::path::Path::from(key),
                PutPayload::from(object),
            )
            .await
            .unwrap();
        let row = |object_offset: u64| PackRow {
            pack_id: id.to_hex(),
            object_key: key.into(),
            object_offset,
            store_id: "default".into(),
            sha256: hex::encode(summary.sha256),
            bytes: summary.bytes,
            records: summary.records,
            source_host: "h".into(),
            source_pid: 1,
            rank_dir: "r0-0badcafe".into(),
            ordinal: None,
            created_at_ms: id.timestamp_ms(),
            indexed_at_ms: 0,
            trailer_sha256: hex::encode(summary.trailer_sha256),
        };
        catalog.index(&[row(offset)], None).await.unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        let fetched = fetch_pack(catalog.as_ref(), &store, id, &mut out)
            .await
            .unwrap();
        assert_eq!(out.into_inner(), pack);
        assert_eq!(fetched.row.object_offset, offset);

        for wrong in [offset - 1, offset + 1, 0] {
            catalog.index(&[row(wrong)], None).await.unwrap();
            let mut out = std::io::Cursor::new(Vec::new());
            let err = fetch_pack(catalog.as_ref(), &store, id, &mut out)
                .await
                .unwrap_err();
            assert!(matches!(err, Error::PackMismatch { .. }), "{wrong}: {err}");
        }
    }
}
