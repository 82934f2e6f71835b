//! The sweep on the in-memory store and catalog: it deletes exactly the
//! old bundles no row names.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use spool_catalog::{MemoryCatalog, PackRow};
use spool_core::pack::PackId;

use super::*;

async fn put(store: &Arc<InMemory>, key: &str, bytes: usize) {
    store
        .put(&Path::from(key), PutPayload::from(vec![7u8; bytes]))
        .await
        .unwrap();
}

async fn exists(store: &Arc<InMemory>, key: &str) -> bool {
    store.head(&Path::from(key)).await.is_ok()
}

fn row(key: &str, offset: u64, bytes: u64) -> PackRow {
    let id = PackId::generate();
    PackRow {
        pack_id: id.to_hex(),
        object_key: key.into(),
        object_offset: offset,
        store_id: "default".into(),
        sha256: "0".repeat(64),
        bytes,
        records: 1,
        source_host: "h".into(),
        source_pid: 1,
        rank_dir: "r0-00000000".into(),
        ordinal: None,
        created_at_ms: id.timestamp_ms(),
        indexed_at_ms: 0,
        trailer_sha256: "0".repeat(64),
    }
}

/// Old bundles: one no row names (deleted), one rows name in part (kept,
/// the rest counted orphaned); a young one no row names (left); an old
/// pack alone that no row names (counted, never deleted). A dry run
/// deletes nothing; a second pass finds nothing more to delete.
#[tokio::test]
async fn only_old_bundles_no_row_names_are_deleted() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    let b = |name: &str| format!("p/v2/0a/date=2026-12-07/{name}.bundle");
    let (orphan, named, young) = (b(&"a".repeat(32)), b(&"b".repeat(32)), b(&"c".repeat(32)));
    let stray = format!("p/v2/0a/date=2026-12-07/{}.pack", "d".repeat(32));
    put(&objects, &orphan, 3000).await;
    put(&objects, &named, 3000).await;
    put(&objects, &stray, 500).await;
    catalog
        .index(&[row(&named, 0, 1000), row(&named, 1000, 1500)], None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    put(&objects, &young, 100).await;
    let grace = Duration::from_millis(300);
    let cancel = AtomicBool::new(false);

    let dry = sweep(&catalog, &store, grace, (1000, true), &cancel)
        .await
        .unwrap();
    assert_eq!((dry.deleted, dry.deleted_bytes), (1, 3000), "{dry:?}");
    assert!(exists(&objects, &orphan).await, "a dry run deleted");

    let report = sweep(&catalog, &store, grace, (1000, false), &cancel)
        .await
        .unwrap();
    assert_eq!(report.listed, 4);
    assert_eq!(
        (report.deleted, report.deleted_bytes),
        (1, 3000),
        "{report:?}"
    );
    assert_eq!((report.kept, report.orphaned_bytes), (1, 500), "{report:?}");
    assert_eq!(report.young, 1);
    assert_eq!((report.stray_packs, report.stray_pack_bytes), (1, 500));
    assert!(!report.truncated);
    assert!(
        !exists(&objects, &orphan).await,
        "an unreferenced old bundle stayed"
    );
    assert!(
        exists(&objects, &named).await,
        "a bundle rows name was deleted"
    );
    assert!(exists(&objects, &young).await, "a young bundle was deleted");
    assert!(
        exists(&objects, &stray).await,
        "a pack's own object was deleted"
    );

    let again = sweep(&catalog, &store, grace, (1000, false), &cancel)
        .await
        .unwrap();
    assert_eq!(again.deleted, 0);
}

/// A pass examines at most its limit of old objects; the rest wait.
#[tokio::test]
async fn a_pass_stops_at_its_limit() {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    let catalog = MemoryCatalog::new();
    for i in 0..5 {
        put(&objects, &format!("p/v2/0a/d/{i:032x}.bundle"), 10).await;
    }
    let cancel = AtomicBool::new(false);
    let first = sweep(&catalog, &store, Duration::ZERO, (3, false), &cancel)
        .await
        .unwrap();
    assert_eq!((first.deleted, first.truncated), (3, true));
    let second = sweep(&catalog, &store, Duration::ZERO, (3, false), &cancel)
        .await
        .unwrap();
    assert_eq!((second.deleted, second.truncated), (2, false));
}
