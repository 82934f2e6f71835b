//! The sweep on the in-memory store and catalog: it deletes a bundle only
//! when its own bytes prove it a spare copy, and nothing else, ever.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use spool_catalog::{MemoryCatalog, PackRow};
use spool_core::pack::{PackId, PackSummary, PackWriter};

use super::*;
use crate::prefix_record::tests::identity;

/// A fixture: a memory store under prefix `p`, recorded for the catalog
/// `identity("a")` with `grace`, and a memory catalog.
struct Fx {
    objects: Arc<InMemory>,
    store: Store,
    catalog: MemoryCatalog,
}

impl Fx {
    async fn new(grace: Duration) -> Fx {
        let objects = Arc::new(InMemory::new());
        let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
        prefix_record::settle(&store, &identity("a"), "default", grace, Duration::ZERO)
            .await
            .unwrap();
        Fx {
            objects,
            store,
            catalog: MemoryCatalog::new(),
        }
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) {
        self.objects
            .put(&Path::from(key), PutPayload::from(bytes))
            .await
            .unwrap();
    }

    async fn exists(&self, key: &str) -> bool {
        self.objects.head(&Path::from(key)).await.is_ok()
    }

    /// Puts `packs` back to back as a bundle at spool's key for a fresh
    /// bundle id; its key and each pack's offset.
    async fn bundle(&self, packs: &[&Pack]) -> (String, Vec<u64>) {
        let key = spool_upload::bundle_key(self.store.prefix(), &PackId::generate()).to_string();
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for p in packs {
            offsets.push(bytes.len() as u64);
            bytes.extend_from_slice(&p.bytes);
        }
        self.put(&key, bytes).await;
        (key, offsets)
    }

    /// Indexes `pack` as held at `offset` of `key`.
    async fn index(&self, pack: &Pack, key: &str, offset: u64) {
        self.catalog
            .index(&[row(&pack.summary, key, offset)], None)
            .await
            .unwrap();
    }

    async fn sweep(&self, dry_run: bool) -> Result<SweepReport, Error> {
        sweep(
            &self.catalog,
            &self.store,
            &identity("a"),
            (1000, dry_run),
            &AtomicBool::new(false),
        )
        .await
    }
}

/// A valid pack and what validation says of it.
struct Pack {
    bytes: Vec<u8>,
    summary: PackSummary,
}

fn pack(records: usize) -> Pack {
    let id = PackId::generate();
    let mut w = PackWriter::new(id, id.timestamp_ms());
    for i in 0..records {
        w.push_record(format!("record {i} of {id}").as_bytes());
    }
    let bytes = w.finish();
    let summary = spool_core::pack::validate_bytes(&bytes, Some(id)).unwrap();
    Pack { bytes, summary }
}

fn row(summary: &PackSummary, key: &str, offset: u64) -> PackRow {
    PackRow {
        pack_id: summary.id.to_hex(),
        object_key: key.into(),
        object_offset: offset,
        store_id: "default".into(),
        sha256: hex::encode(summary.sha256),
        bytes: summary.bytes,
        records: summary.records,
        source_host: "h".into(),
        source_pid: 1,
        rank_dir: "r0-00000000".into(),
        ordinal: None,
        created_at_ms: summary.created_ms,
        indexed_at_ms: 0,
        trailer_sha256: hex::encode(summary.trailer_sha256),
    }
}

const GRACE: Duration = Duration::from_millis(200);

async fn aged() {
    tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
}

/// The orphan of a crash between PUT and index: its packs went up again
/// in a second bundle, whose rows the catalog holds. The first is deleted
/// (a dry run only counts it), the second kept; a second pass finds
/// nothing more.
#[tokio::test]
async fn a_bundle_whose_packs_are_indexed_elsewhere_is_deleted() {
    let fx = Fx::new(GRACE).await;
    let (a, b) = (pack(3), pack(5));
    let (orphan, _) = fx.bundle(&[&a, &b]).await;
    let (named, at) = fx.bundle(&[&b, &a]).await;
    fx.index(&b, &named, at[0]).await;
    fx.index(&a, &named, at[1]).await;
    aged().await;

    let dry = fx.sweep(true).await.unwrap();
    assert_eq!(
        (dry.deleted, dry.kept, dry.clock),
        (1, 1, "local"),
        "{dry:?}"
    );
    assert!(fx.exists(&orphan).await, "a dry run deleted");

    let report = fx.sweep(false).await.unwrap();
    assert_eq!(report.deleted, 1, "{report:?}");
    assert_eq!(report.deleted_bytes, (a.bytes.len() + b.bytes.len()) as u64);
    assert_eq!((report.kept, report.orphaned_bytes), (1, 0), "{report:?}");
    assert_eq!((report.unindexed_bundles, report.unproven), (0, 0));
    assert_eq!((report.grace, report.clock), (GRACE, "store"));
    assert!(!fx.exists(&orphan).await, "a spare bundle stayed");
    assert!(fx.exists(&named).await, "a bundle rows name was deleted");

    let again = fx.sweep(false).await.unwrap();
    assert_eq!((again.deleted, again.kept), (0, 1), "{again:?}");
}

/// A catalog that lost its rows (a restored backup, a dropped table)
/// never turns a sweep into a loss: a bundle holding a pack no row names
/// is kept, whatever its age, and reported for `spool reindex`.
#[tokio::test]
async fn a_bundle_holding_a_pack_no_row_names_is_kept_whatever_its_age() {
    let fx = Fx::new(GRACE).await;
    let (a, b, c) = (pack(1), pack(2), pack(3));
    let (lost, _) = fx.bundle(&[&a, &b]).await;
    // half lost: c is indexed in another bundle, a2 nowhere
    let a2 = pack(4);
    let (half, _) = fx.bundle(&[&c, &a2]).await;
    let (named, at) = fx.bundle(&[&c]).await;
    fx.index(&c, &named, at[0]).await;
    aged().await;
    let report = fx.sweep(false).await.unwrap();
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(
        (report.unindexed_bundles, report.unindexed_packs),
        (2, 3),
        "{report:?}"
    );
    assert!(fx.exists(&lost).await && fx.exists(&half).await);
    assert_eq!(report.kept_why.len(), 2);
    assert!(
        report
            .kept_why
            .iter()
            .all(|(_, why)| why.contains("run spool reindex")),
        "{:?}",
        report.kept_why
    );
}

/// A row naming a copy that is not there (gone, shorter, other bytes)
/// proves nothing: the bundle is kept.
#[tokio::test]
async fn a_row_naming_a_copy_that_is_not_there_keeps_the_bundle() {
    let fx = Fx::new(GRACE).await;
    let (a, b, c) = (pack(1), pack(2), pack(3));
    let (first, _) = fx.bundle(&[&a]).await;
    let (second, _) = fx.bundle(&[&b]).await;
    let (third, _) = fx.bundle(&[&c]).await;
    // a's row names an object that does not exist
    fx.index(&a, "p/v2/00/date=2026-01-01/gone.bundle", 0).await;
    // b's row names an object too short for its range
    fx.put("p/short.bundle", vec![1; 10]).await;
    fx.index(&b, "p/short.bundle", 0).await;
    // c's row names an object whose bytes there are another pack's
    let other = pack(3);
    fx.put("p/other.bundle", other.bytes.clone()).await;
    let mut wrong = row(&c.summary, "p/other.bundle", 0);
    wrong.bytes = other.summary.bytes;
    fx.catalog.index(&[wrong], None).await.unwrap();
    aged().await;
    let report = fx.sweep(false).await.unwrap();
    assert_eq!((report.deleted, report.unproven), (0, 3), "{report:?}");
    for key in [&first, &second, &third] {
        assert!(fx.exists(key).await, "{key} was deleted");
    }
}

/// Objects spool never wrote are never deleted, whatever their name (an
/// operator's copy of a bundle whose packs are all indexed elsewhere
/// included), and neither is a bundle-named object whose bytes are not
/// spool packs.
#[tokio::test]
async fn objects_spool_never_wrote_are_never_deleted() {
    let fx = Fx::new(GRACE).await;
    let copied = pack(2);
    let (named, at) = fx.bundle(&[&copied]).await;
    fx.index(&copied, &named, at[0]).await;
    let id = PackId::generate();
    let hex = id.to_hex();
    let right = spool_upload::bundle_key(fx.store.prefix(), &id).to_string();
    let foreign = [
        "p/notes/repo.bundle".to_string(),
        "p/backups/site.bundle".to_string(),
        format!("p/{hex}.bundle"),
        format!("p/v2/zz/date=2026-12-07/{hex}.bundle"),
        right.replace("/v2/", "/v1/"),
        format!("p/x/{}", right.trim_start_matches("p/")),
        "q/elsewhere.bundle".to_string(),
    ];
    for key in &foreign {
        fx.put(key, copied.bytes.clone()).await;
    }
    // the right key, but bytes that are not packs
    fx.put(&right, vec![7; 3000]).await;
    aged().await;
    let report = fx.sweep(false).await.unwrap();
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(report.foreign, 6, "{report:?}");
    assert_eq!(report.unproven, 1, "{report:?}");
    for key in foreign.iter().chain([&right]) {
        assert!(fx.exists(key).await, "{key} was deleted");
    }
}

/// A sweep against another catalog than the prefix serves (another
/// node's embedded one, a typo'd database) is refused having done
/// nothing; so is one on a prefix no service recorded.
#[tokio::test]
async fn another_catalog_or_none_recorded_is_refused() {
    let fx = Fx::new(GRACE).await;
    let a = pack(1);
    let (orphan, _) = fx.bundle(&[&a]).await;
    aged().await;
    let e = sweep(
        &fx.catalog,
        &fx.store,
        &identity("typo"),
        (1000, false),
        &AtomicBool::new(false),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::PrefixServesAnother { .. }), "{e}");
    assert!(fx.exists(&orphan).await);

    let bare = Store::new(fx.objects.clone(), "q", "memory", true).unwrap();
    let e = sweep(
        &fx.catalog,
        &bare,
        &identity("a"),
        (1000, false),
        &AtomicBool::new(false),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::NoPrefixRecord { .. }), "{e}");
}

/// A bundle younger than the destination's grace is not even read, even
/// when its packs are indexed elsewhere (an index call naming it may
/// still be on its way).
#[tokio::test]
async fn a_young_bundle_is_left_alone() {
    let fx = Fx::new(Duration::from_secs(3600)).await;
    let a = pack(1);
    let (young, _) = fx.bundle(&[&a]).await;
    let (named, at) = fx.bundle(&[&a]).await;
    fx.index(&a, &named, at[0]).await;
    let report = fx.sweep(false).await.unwrap();
    assert_eq!((report.young, report.deleted), (2, 0), "{report:?}");
    assert!(fx.exists(&young).await);
}

/// A pass examines at most its limit of old objects; the rest wait.
#[tokio::test]
async fn a_pass_stops_at_its_limit() {
    let fx = Fx::new(GRACE).await;
    for _ in 0..5 {
        let a = pack(1);
        fx.bundle(&[&a]).await;
        let (named, at) = fx.bundle(&[&a]).await;
        fx.index(&a, &named, at[0]).await;
    }
    aged().await;
    let run = |limit| {
        let fx = &fx;
        async move {
            sweep(
                &fx.catalog,
                &fx.store,
                &identity("a"),
                (limit, false),
                &AtomicBool::new(false),
            )
            .await
            .unwrap()
        }
    };
    let first = run(4).await;
    assert!(first.truncated, "{first:?}");
    let second = run(1000).await;
    assert!(!second.truncated);
    assert_eq!(first.deleted + second.deleted, 5, "{first:?} {second:?}");
}

mod model;
