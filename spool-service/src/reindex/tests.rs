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

/// The packs' bytes back to back, and where each starts.
fn bundle_of(packs: &[(PackId, Vec<u8>)]) -> (Vec<u8>, Vec<u64>) {
    let mut body = Vec::new();
    let mut offsets = Vec::new();
    for (_, bytes) in packs {
        offsets.push(body.len() as u64);
        body.extend_from_slice(bytes);
    }
    (body, offsets)
}

/// A bundle key under prefix `p`.
fn bundle_key() -> String {
    format!("p/v2/0a/date=2026-12-07/{}.bundle", PackId::generate())
}

/// Damages the trailer magic of the pack that ends at `end` in `body`.
fn break_trailer(body: &mut [u8], end: usize) {
    body[end - spool_core::pack::TRAILER_LEN] ^= 0xff;
}

/// Asserts that each pack of `packs` but those at `damaged` has a row
/// naming `key` and its offset, and the damaged ones none.
async fn assert_rows(
    catalog: &MemoryCatalog,
    packs: &[(PackId, Vec<u8>)],
    (key, offsets): (&str, &[u64]),
    damaged: &[usize],
) {
    for (i, (id, bytes)) in packs.iter().enumerate() {
        let row = catalog.get(&id.to_hex()).await.unwrap();
        if damaged.contains(&i) {
            assert!(row.is_none(), "damaged pack {i} got a row");
            continue;
        }
        let row = row.unwrap_or_else(|| panic!("pack {i} has no row"));
        assert_eq!(row.object_key, key);
        assert_eq!(row.object_offset, offsets[i], "pack {i}");
        assert_eq!(row.bytes, bytes.len() as u64);
    }
}

/// A bundle whose last pack's trailer is damaged cannot be walked from its
/// end at all: the walk from its start finds every other pack, and the
/// damaged one is one invalid entry.
#[tokio::test]
async fn a_bundle_whose_last_trailer_is_damaged_still_yields_its_other_packs() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let packs: Vec<(PackId, Vec<u8>)> = (1..=4).map(pack).collect();
    let (mut body, offsets) = bundle_of(&packs);
    let len = body.len();
    break_trailer(&mut body, len);
    let key = bundle_key();
    put(&objects, &key, body).await;
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!(report.inserted, 3, "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    assert_eq!(report.damaged, 1, "{report:?}");
    assert_rows(&catalog, &packs, (&key, &offsets), &[3]).await;
}

/// A damaged trailer in the middle: the packs after it come from the walk
/// from the end, the ones before it from the walk from the start.
#[tokio::test]
async fn a_damaged_middle_trailer_loses_only_its_own_pack() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let packs: Vec<(PackId, Vec<u8>)> = (1..=5).map(pack).collect();
    let (mut body, offsets) = bundle_of(&packs);
    break_trailer(&mut body, offsets[3] as usize); // pack 2's
    let key = bundle_key();
    put(&objects, &key, body).await;
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!(report.inserted, 4, "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    assert_rows(&catalog, &packs, (&key, &offsets), &[2]).await;
}

/// A bundle larger than the walk's window, with a pack larger than the
/// window in it: every pack is found (over several ranged reads) and the
/// large one validated as it streams.
#[tokio::test]
async fn a_bundle_larger_than_a_window_with_a_pack_larger_than_a_window() {
    use spool_upload::testing::{FaultStore, Op};
    let fault = Arc::new(FaultStore::new(Arc::new(InMemory::new())));
    let store = Store::new(fault.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let mut packs: Vec<(PackId, Vec<u8>)> = (1..=3).map(pack).collect();
    let big = PackId::generate();
    let mut w = PackWriter::new(big, big.timestamp_ms());
    w.push_record(&vec![7u8; walk::WINDOW as usize + 4096]);
    packs.insert(1, (big, w.finish()));
    // enough 1 MiB packs after it to need a second window
    for _ in 0..9 {
        let id = PackId::generate();
        let mut w = PackWriter::new(id, id.timestamp_ms());
        w.push_record(&vec![1u8; 1 << 20]);
        packs.push((id, w.finish()));
    }
    let (body, offsets) = bundle_of(&packs);
    let key = bundle_key();
    fault
        .inner()
        .put(&object_store::path::Path::from(key.as_str()), body.into())
        .await
        .unwrap();
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!(report.inserted, packs.len() as u64, "{report:?}");
    assert!(report.invalid.is_empty(), "{:?}", report.invalid);
    assert_rows(&catalog, &packs, (&key, &offsets), &[]).await;
    // two windows, then the large pack's own GET and the window before it
    assert!(fault.calls(Op::Get) <= 4, "{} GETs", fault.calls(Op::Get));
}

/// A 10 GiB sparse file named like a bundle is more than any bundle spool
/// writes: reported without a single read (reading it whole aborted the
/// process), and the pack beside it is indexed.
#[tokio::test]
async fn a_bundle_larger_than_spool_writes_is_reported_unread() {
    use spool_upload::testing::{FaultStore, Op};
    let dir = tempfile::tempdir().unwrap();
    let key = bundle_key();
    let path = dir.path().join(&key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(&path)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let fault = Arc::new(FaultStore::new(Arc::new(local)));
    let store = Store::new(fault.clone(), "p", "file", true).unwrap();
    let (id, bytes) = pack(2);
    let pack_key = spool_upload::object_key(store.prefix(), &id).to_string();
    let pack_path = dir.path().join(&pack_key);
    std::fs::create_dir_all(pack_path.parent().unwrap()).unwrap();
    std::fs::write(&pack_path, bytes).unwrap();
    let catalog = MemoryCatalog::new();
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!(report.inserted, 1, "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    assert_eq!(report.invalid[0].0, key);
    assert!(
        report.invalid[0].1.contains("10737418240 bytes"),
        "{:?}",
        report.invalid
    );
    assert_eq!(
        fault.calls_on(Op::Get, &object_store::path::Path::from(key.as_str())),
        0,
        "the oversized bundle was read"
    );
}

/// Valid-looking trailers back to back, each naming a length shorter than
/// any pack (72 bytes) or the shortest pack's (132): one invalid entry per
/// object, whatever the number of trailers, and quickly.
#[tokio::test]
async fn a_trailer_bomb_is_one_invalid_entry_and_quick() {
    use spool_core::pack::{MIN_PACK_LEN, TRAILER_LEN, TRAILER_MAGIC};
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let mut keys = Vec::new();
    for step in [TRAILER_LEN as u64, MIN_PACK_LEN] {
        let mut body = vec![0u8; 4 << 20];
        let mut end = body.len();
        while end >= step as usize {
            let t = &mut body[end - TRAILER_LEN..end];
            t[..8].copy_from_slice(&TRAILER_MAGIC);
            t[8..24].copy_from_slice(&PackId::generate().0);
            t[24..32].copy_from_slice(&step.to_le_bytes());
            end -= step as usize;
        }
        let key = bundle_key();
        put(&objects, &key, body).await;
        keys.push(key);
    }
    let started = std::time::Instant::now();
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert_eq!(report.inserted, 0);
    assert_eq!(
        report.invalid.len(),
        2,
        "{:?}",
        &report.invalid[..4.min(report.invalid.len())]
    );
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    // the 132-byte one is walked to its start: every one of its "packs"
    // counted, in one entry
    assert!(report.damaged > 30_000, "{report:?}");
}

/// A corrupt `<id>.pack` and a valid copy of the same pack in a bundle:
/// the valid copy is indexed whichever is listed first.
#[tokio::test]
async fn a_corrupt_copy_never_hides_a_valid_one() {
    for pack_dir in ["a", "c"] {
        let objects = Arc::new(InMemory::new());
        let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
        let catalog = MemoryCatalog::new();
        let packs: Vec<(PackId, Vec<u8>)> = (1..=2).map(pack).collect();
        let (body, offsets) = bundle_of(&packs);
        // the memory store lists in key order: `p/a/...` before `p/b/...`
        // before `p/c/...`
        let key = format!("p/b/{}.bundle", PackId::generate());
        put(&objects, &key, body).await;
        let (id, bytes) = &packs[0];
        let mut bad = bytes.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 1;
        put(&objects, &format!("p/{pack_dir}/{id}.pack"), bad).await;
        let report = reindex(
            &catalog,
            &store,
            "default",
            None,
            false,
            &AtomicBool::new(false),
        )
        .await
        .unwrap();
        assert_eq!(report.inserted, 2, "{pack_dir}: {report:?}");
        assert_rows(&catalog, &packs, (&key, &offsets), &[]).await;
    }
}

/// A pack damaged inside (its trailer whole) after a damaged trailer: the
/// walk from the start meets it again, and each damaged pack counts once.
#[tokio::test]
async fn each_damaged_pack_counts_once() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let packs: Vec<(PackId, Vec<u8>)> = (1..=4).map(pack).collect();
    let (mut body, offsets) = bundle_of(&packs);
    let last = body.len() - 1;
    body[last] ^= 1; // pack 3's checksum: its framing and trailer magic hold
    break_trailer(&mut body, offsets[3] as usize); // pack 2's
    let key = bundle_key();
    put(&objects, &key, body).await;
    let report = reindex(
        &catalog,
        &store,
        "default",
        None,
        false,
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!((report.inserted, report.damaged), (2, 2), "{report:?}");
    assert_eq!(report.invalid.len(), 1, "{:?}", report.invalid);
    assert_rows(&catalog, &packs, (&key, &offsets), &[2, 3]).await;
}
