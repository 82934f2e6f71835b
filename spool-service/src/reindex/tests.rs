//! Reindexing on the in-memory store and catalog: the rows a catalog lost
//! come back from the store, and nothing else is written.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use spool_catalog::MemoryCatalog;
use spool_core::pack::{PackId, PackWriter};

use super::*;

fn pack(records: usize) -> (PackId, Vec<u8>) {
    let id = PackId::generate();
    let mut w = PackWriter::new(id, id.timestamp_ms());
    for i in 0..records {
        w.push_record(format!("record {i}").as_bytes());
    }
    (id, w.finish())
}

async fn put(store: &Arc<InMemory>, key: &str, bytes: Vec<u8>) {
    store
        .put(
            &object_store::path::Path::from(key),
            PutPayload::from(bytes),
        )
        .await
        .unwrap();
}

/// A catalog that lost two of three rows gets them back, from objects in
/// two layouts; a corrupt pack, a pack under another id's name and a file
/// that is no pack get no row; a second run inserts nothing.
#[tokio::test]
async fn lost_rows_come_back_and_nothing_else_is_written() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let (kept, kept_bytes) = pack(3);
    let (lost_a, a_bytes) = pack(5);
    let (lost_b, b_bytes) = pack(1);
    let (bad, mut bad_bytes) = pack(2);
    let mid = bad_bytes.len() / 2;
    bad_bytes[mid] ^= 1;
    let (other, other_bytes) = pack(1);
    let key = |id: PackId| spool_upload::object_key(store.prefix(), &id).to_string();
    put(&objects, &key(kept), kept_bytes.clone()).await;
    put(&objects, &key(lost_a), a_bytes.clone()).await;
    // another layout (a spread key): found by its name all the same
    put(&objects, &format!("p/ab/v1/{lost_b}.pack"), b_bytes).await;
    put(&objects, &key(bad), bad_bytes).await;
    // the bytes of one pack under another id's name
    put(
        &objects,
        &format!("p/v1/{}.pack", PackId::generate()),
        other_bytes,
    )
    .await;
    put(&objects, "p/v1/README", b"not a pack".to_vec()).await;
    let summary = spool_core::pack::validate_bytes(&kept_bytes, Some(kept)).unwrap();
    catalog
        .index(&[row_of(&summary, &key(kept), "default")], None)
        .await
        .unwrap();
    let _ = other;

    let cancel = AtomicBool::new(false);
    let dry = reindex(&catalog, &store, "default", None, true, &cancel)
        .await
        .unwrap();
    assert_eq!(dry.inserted, 2);
    assert_eq!(catalog.count().await.unwrap(), 1, "a dry run wrote");

    let report = reindex(&catalog, &store, "default", None, false, &cancel)
        .await
        .unwrap();
    assert_eq!(report.listed, 6);
    assert_eq!(report.present, 1);
    assert_eq!(report.inserted, 2);
    assert_eq!(report.other, 1);
    assert_eq!(report.invalid.len(), 2, "{:?}", report.invalid);
    assert_eq!(catalog.count().await.unwrap(), 3);
    let a = catalog.get(&lost_a.to_hex()).await.unwrap().unwrap();
    assert_eq!(a.object_key, key(lost_a));
    assert_eq!(a.records, 5);
    assert_eq!(a.bytes, a_bytes.len() as u64);
    let whole = spool_core::pack::validate_bytes(&a_bytes, Some(lost_a)).unwrap();
    assert_eq!(a.sha256, hex::encode(whole.sha256));
    assert_eq!(
        catalog
            .get(&lost_b.to_hex())
            .await
            .unwrap()
            .unwrap()
            .object_key,
        format!("p/ab/v1/{lost_b}.pack")
    );
    assert!(catalog.get(&bad.to_hex()).await.unwrap().is_none());

    let again = reindex(&catalog, &store, "default", None, false, &cancel)
        .await
        .unwrap();
    assert_eq!((again.inserted, again.present), (0, 3));
    assert_eq!(catalog.count().await.unwrap(), 3);
}

/// A raised cancel stops it between objects.
#[tokio::test]
async fn a_cancel_stops_it() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let (id, bytes) = pack(1);
    put(
        &objects,
        spool_upload::object_key(store.prefix(), &id).as_ref(),
        bytes,
    )
    .await;
    let catalog = MemoryCatalog::new();
    let cancel = AtomicBool::new(true);
    let e = reindex(&catalog, &store, "default", None, false, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ReindexCancelled { .. }), "{e}");
    assert_eq!(catalog.count().await.unwrap(), 0);
}

/// A bundle's packs come back each with its own row naming its range,
/// found by walking the bundle from its end; a pack damaged inside it
/// gets no row and the packs before it are still found; a second run
/// inserts nothing.
#[tokio::test]
async fn the_packs_of_a_bundle_come_back_each_naming_its_range() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let packs: Vec<(PackId, Vec<u8>)> = (1..=4).map(pack).collect();
    let mut body = Vec::new();
    let mut offsets = Vec::new();
    for (i, (_, bytes)) in packs.iter().enumerate() {
        offsets.push(body.len() as u64);
        let mut bytes = bytes.clone();
        if i == 2 {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 1; // its trailer stays whole: the walk goes on
        }
        body.extend_from_slice(&bytes);
    }
    let key = format!("p/v2/0a/date=2026-12-07/{}.bundle", PackId::generate());
    put(&objects, &key, body.clone()).await;
    let cancel = AtomicBool::new(false);
    let report = reindex(&catalog, &store, "default", None, false, &cancel)
        .await
        .unwrap();
    assert_eq!(report.inserted, 3, "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    for (i, (id, bytes)) in packs.iter().enumerate() {
        let row = catalog.get(&id.to_hex()).await.unwrap();
        if i == 2 {
            assert!(row.is_none(), "a damaged pack got a row");
            continue;
        }
        let row = row.unwrap();
        assert_eq!(row.object_key, key);
        assert_eq!(row.object_offset, offsets[i]);
        assert_eq!(row.bytes, bytes.len() as u64);
        let at = row.object_offset as usize;
        let whole =
            spool_core::pack::validate_bytes(&body[at..at + bytes.len()], Some(*id)).unwrap();
        assert_eq!(row.sha256, hex::encode(whole.sha256));
    }
    let again = reindex(&catalog, &store, "default", None, false, &cancel)
        .await
        .unwrap();
    assert_eq!((again.inserted, again.present), (0, 3));
}
