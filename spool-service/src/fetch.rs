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
    let options = object_store::GetOptions::default().with_range(Some(range.clone()));
    let got = match store.object_store().get_opts(&key, options).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(Error::PackNotInStore {
                pack_id: pack_id.clone(),
                store: store.description().to_string(),
                key: key.to_string(),
            })
        }
        Err(e) => {
            // A range starting past the object's end is refused (S3: 416,
            // the local and memory stores: an invalid range): if the
            // object is shorter than the row says, that is the mismatch.
            if let Some(size) = shorter_than(store, &key, range.end).await {
                return Err(past_the_end(&row, store, range.end, size));
            }
            return Err(store_error(e.into()));
        }
    };
    if got.meta.size < range.end {
        // a store that answers a range running past the end with what
        // there is (the memory store)
        return Err(past_the_end(&row, store, range.end, got.meta.size));
    }
    let start = out.stream_position().map_err(|e| store_error(e.into()))?;
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| store_error(e.into()))?;
        out.write_all(&chunk).map_err(|e| store_error(e.into()))?;
    }
    out.flush().map_err(|e| store_error(e.into()))?;
    out.seek(SeekFrom::Start(start))
        .map_err(|e| store_error(e.into()))?;
    let summary = check(&row, id, store, &mut *out)?;
    out.seek(SeekFrom::Start(start))
        .map_err(|e| store_error(e.into()))?;
    Ok(FetchedPack { row, summary })
}

/// The size of the object at `key` when it is below `end` (a HEAD); `None`
/// when it is not, or the HEAD failed.
async fn shorter_than(store: &Store, key: &object_store::path::Path, end: u64) -> Option<u64> {
    let meta = store.object_store().head(key).await.ok()?;
    (meta.size < end).then_some(meta.size)
}

/// The mismatch of a row whose range (`object_offset` + `bytes`, ending
/// at `end`) runs past its object's `size`: naming both.
fn past_the_end(row: &PackRow, store: &Store, end: u64, size: u64) -> Error {
    Error::PackMismatch {
        pack_id: row.pack_id.clone(),
        store: store.description().to_string(),
        key: row.object_key.clone(),
        why: format!(
            "the catalog row's range ends at byte {end} (offset {} + {} bytes) but the object is \
             {size} bytes long",
            row.object_offset, row.bytes
        ),
        offset: Some(size),
    }
}

/// Validates the pack `id` read from `bytes` (the row's range of its
/// object) and compares it with `row`: its checksums and size.
fn check(row: &PackRow, id: PackId, store: &Store, bytes: impl Read) -> Result<PackSummary, Error> {
    let mismatch = |why: String, offset: Option<u64>| Error::PackMismatch {
        pack_id: row.pack_id.clone(),
        store: store.description().to_string(),
        key: row.object_key.clone(),
        why,
        offset,
    };
    let summary = match spool_core::pack::validate(bytes, Some(id), &AtomicBool::new(false)) {
        Ok(s) => s,
        Err(spool_core::Error::CorruptPack { problem, .. }) => {
            return Err(mismatch(problem.to_string(), problem.offset()))
        }
        Err(e) => {
            return Err(Error::FetchStore {
                pack_id: row.pack_id.clone(),
                store: store.description().to_string(),
                key: row.object_key.clone(),
                error: e.into(),
            })
        }
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
    Ok(summary)
}

/// Reads the packs `ids` back together, checked as [`fetch_pack`] checks
/// one: their rows from `catalog`, then **one ranged GET per object** (the
/// span from the first to the last of the asked packs it holds: a bundle's
/// packs asked together cost one request, not one each). Returns each
/// pack's bytes and what was found, in the order of `ids`; the first
/// failure ends it (the same errors as [`fetch_pack`]).
pub async fn fetch_packs(
    catalog: &dyn Catalog,
    store: &Store,
    ids: &[PackId],
) -> Result<Vec<(FetchedPack, Vec<u8>)>, Error> {
    let mut rows = Vec::with_capacity(ids.len());
    for id in ids {
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
        rows.push(row);
    }
    let mut by_object: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (at, row) in rows.iter().enumerate() {
        by_object.entry(&row.object_key).or_default().push(at);
    }
    let mut found: Vec<Option<(PackSummary, Vec<u8>)>> = vec![None; rows.len()];
    for (key, members) in by_object {
        let start = members
            .iter()
            .map(|&i| rows[i].object_offset)
            .min()
            .unwrap_or(0);
        let end = members
            .iter()
            .map(|&i| rows[i].object_offset.saturating_add(rows[i].bytes))
            .max()
            .unwrap_or(0);
        let first = &rows[members[0]];
        let path = object_store::path::Path::from(key);
        let span = match store.object_store().get_range(&path, start..end).await {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::PackNotInStore {
                    pack_id: first.pack_id.clone(),
                    store: store.description().to_string(),
                    key: key.to_string(),
                })
            }
            Err(e) => {
                if let Some(size) = shorter_than(store, &path, end).await {
                    let row = members
                        .iter()
                        .map(|&i| &rows[i])
                        .max_by_key(|r| r.object_offset.saturating_add(r.bytes))
                        .unwrap_or(first);
                    return Err(past_the_end(row, store, end, size));
                }
                return Err(Error::FetchStore {
                    pack_id: first.pack_id.clone(),
                    store: store.description().to_string(),
                    key: key.to_string(),
                    error: e.into(),
                });
            }
        };
        if (span.len() as u64) < end - start {
            // a store that answers a range running past the end with what
            // there is
            let size = start + span.len() as u64;
            let row = members
                .iter()
                .map(|&i| &rows[i])
                .find(|r| r.object_offset.saturating_add(r.bytes) > size)
                .unwrap_or(first);
            let end = row.object_offset.saturating_add(row.bytes);
            return Err(past_the_end(row, store, end, size));
        }
        for at in members {
            let row = &rows[at];
            let from = (row.object_offset - start) as usize;
            let to = from.saturating_add(row.bytes as usize).min(span.len());
            let bytes = span[from..to].to_vec();
            let summary = check(row, ids[at], store, &bytes[..])?;
            found[at] = Some((summary, bytes));
        }
    }
    Ok(rows
        .into_iter()
        .zip(found)
        .map(|(row, f)| {
            let (summary, bytes) = f.expect("every row was read");
            (FetchedPack { row, summary }, bytes)
        })
        .collect())
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

    /// A row whose range runs past its object's end (an offset past the
    /// end, a length past it) is a mismatch naming the range's end, the
    /// object's size and its key, on the memory and the file store, read
    /// alone or together.
    #[tokio::test]
    async fn a_row_past_its_objects_end_is_a_mismatch_naming_both_sizes() {
        let dir = tempfile::tempdir().unwrap();
        for url in [
            "memory://".to_string(),
            format!("file://{}", dir.path().display()),
        ] {
            let store = Store::from_url(&url, &Default::default()).unwrap();
            let catalog = spool_catalog::open("memory://").unwrap();
            let id = PackId::generate();
            let mut w = PackWriter::new(id, id.timestamp_ms());
            w.push_record(b"the one record");
            let pack = w.finish();
            let s = spool_core::pack::validate_bytes(&pack, Some(id)).unwrap();
            let size = pack.len() as u64;
            let key = spool_upload::object_key(store.prefix(), &id);
            store
                .object_store()
                .put(&key, PutPayload::from(pack))
                .await
                .unwrap();
            for (offset, bytes) in [(size + 100, size), (size, size), (3, size)] {
                let row = PackRow {
                    pack_id: id.to_hex(),
                    object_key: key.to_string(),
                    object_offset: offset,
                    store_id: "default".into(),
                    sha256: hex::encode(s.sha256),
                    bytes,
                    records: s.records,
                    source_host: "h".into(),
                    source_pid: 1,
                    rank_dir: "r0-0badcafe".into(),
                    ordinal: None,
                    created_at_ms: id.timestamp_ms(),
                    indexed_at_ms: 0,
                    trailer_sha256: hex::encode(s.trailer_sha256),
                };
                catalog.index(&[row], None).await.unwrap();
                let mut out = std::io::Cursor::new(Vec::new());
                let alone = fetch_pack(catalog.as_ref(), &store, id, &mut out)
                    .await
                    .unwrap_err();
                let together = fetch_packs(catalog.as_ref(), &store, &[id])
                    .await
                    .unwrap_err();
                for err in [alone, together] {
                    let text = err.to_string();
                    assert!(matches!(err, Error::PackMismatch { .. }), "{url}: {text}");
                    assert!(
                        text.contains(&format!("ends at byte {}", offset + bytes)),
                        "{url}: {text}"
                    );
                    assert!(
                        text.contains(&format!("the object is {size} bytes long")),
                        "{url}: {text}"
                    );
                    assert!(text.contains(key.as_ref()), "{url}: {text}");
                }
            }
        }
    }

    /// Packs asked for together cost one GET per object: three of a
    /// bundle's and one alone make two requests; each comes back checked,
    /// in the order asked; a row that does not match its bytes fails.
    #[tokio::test]
    async fn packs_asked_together_cost_one_get_per_object() {
        use spool_upload::testing::{FaultStore, Op};
        let fault = std::sync::Arc::new(FaultStore::new(std::sync::Arc::new(
            object_store::memory::InMemory::new(),
        )));
        let store = Store::new(fault.clone(), "", "memory", true).unwrap();
        let catalog = spool_catalog::open("memory://").unwrap();
        let mut packs = Vec::new();
        for i in 0..4 {
            let id = PackId::generate();
            let mut w = PackWriter::new(id, id.timestamp_ms());
            w.push_record(format!("record of pack {i}").as_bytes());
            packs.push((id, w.finish()));
        }
        let mut bundle = Vec::new();
        let mut rows = Vec::new();
        for (i, (id, bytes)) in packs.iter().enumerate() {
            let s = spool_core::pack::validate_bytes(bytes, Some(*id)).unwrap();
            let (key, offset) = if i < 3 {
                bundle.extend_from_slice(bytes);
                ("b/x.bundle", (bundle.len() - bytes.len()) as u64)
            } else {
                ("b/alone.pack", 0)
            };
            rows.push(PackRow {
                pack_id: id.to_hex(),
                object_key: key.into(),
                object_offset: offset,
                store_id: "default".into(),
                sha256: hex::encode(s.sha256),
                bytes: s.bytes,
                records: s.records,
                source_host: "h".into(),
                source_pid: 1,
                rank_dir: "r0-0badcafe".into(),
                ordinal: None,
                created_at_ms: id.timestamp_ms(),
                indexed_at_ms: 0,
                trailer_sha256: hex::encode(s.trailer_sha256),
            });
        }
        let put = |key: &str, bytes: Vec<u8>| {
            let fault = fault.clone();
            let key = object_store::path::Path::from(key);
            async move {
                fault
                    .inner()
                    .put(&key, PutPayload::from(bytes))
                    .await
                    .unwrap()
            }
        };
        put("b/x.bundle", bundle).await;
        put("b/alone.pack", packs[3].1.clone()).await;
        catalog.index(&rows, None).await.unwrap();
        let asked = [packs[2].0, packs[0].0, packs[3].0];
        let got = fetch_packs(catalog.as_ref(), &store, &asked).await.unwrap();
        assert_eq!(fault.calls(Op::Get), 2, "one GET per object");
        for ((fetched, bytes), id) in got.iter().zip(asked) {
            assert_eq!(fetched.row.pack_id, id.to_hex());
            let want = &packs.iter().find(|(p, _)| *p == id).unwrap().1;
            assert_eq!(bytes, want);
        }
        let mut wrong = rows[0].clone();
        wrong.sha256 = "0".repeat(64);
        catalog.index(&[wrong], None).await.unwrap();
        let err = fetch_packs(catalog.as_ref(), &store, &asked)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::PackMismatch { .. }), "{err}");
    }
}
