//! The uploader's behavioural suite, run unchanged against every store:
//! `LocalFileSystem`, `InMemory` and the fault-scripting fake in the fast
//! tier (`tests/tests/upload_fast.rs`), moto's S3 server in the real tier
//! (`tests/tests/real_s3.rs`). Each case takes a factory that builds a
//! [`Store`] under a key prefix of its own, and cleans up after itself by
//! using a fresh prefix.
//!
//! [`upload_suite!`](crate::upload_suite) expands to one `#[tokio::test]`
//! per case for a backend.

use std::time::Duration;

use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use spool_core::pack::{PackId, Trailer, TRAILER_LEN};
use spool_upload::{
    CancellationToken, Error, Store, UploadConfig, UploadItem, UploadOutcome, UploadResult,
    Uploader,
};

use crate::packs::{write_pack, write_pack_with};

/// Builds a store whose keys live under the given prefix.
pub type MakeStore<'a> = &'a dyn Fn(&str) -> Store;

/// Uploads `items` all at once, one [`Uploader::upload_one`] each (as the
/// service's pipeline calls it), and returns their results in order.
pub async fn upload_all(
    up: &Uploader,
    items: Vec<UploadItem>,
    cancel: &CancellationToken,
) -> Vec<UploadResult> {
    futures::future::join_all(items.into_iter().map(|item| up.upload_one(item, cancel))).await
}

/// A unique prefix for one case.
pub fn prefix(case: &str) -> String {
    format!("suite-{case}-{}", PackId::generate().to_hex())
}

/// A configuration small enough for tests: quick backoff, 5 MiB parts
/// (S3's minimum), multipart from 6 MiB.
pub fn test_config() -> UploadConfig {
    UploadConfig {
        max_workers: 3,
        small_pack_workers: 3,
        max_in_flight_bytes: 64 << 20,
        multipart_threshold: 6 << 20,
        part_size: 5 << 20,
        part_concurrency: 2,
        max_attempts: 3,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        abort_timeout: Duration::from_secs(2),
        bundle_bytes: 1 << 20,
        bundle_linger: Duration::ZERO,
        orphan_grace: UploadConfig::default().orphan_grace,
    }
}

async fn object_bytes(store: &Store, key: &object_store::path::Path) -> Vec<u8> {
    store
        .object_store()
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {e}"))
        .bytes()
        .await
        .expect("object body")
        .to_vec()
}

/// Every key under the store's prefix.
pub async fn keys(store: &Store) -> Vec<String> {
    let mut k: Vec<String> = store
        .object_store()
        .list(Some(store.prefix()))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    k.sort();
    k
}

/// The same pack uploaded twice: one object, byte-equal to the file, at
/// `<prefix>/v2/<spread>/date=<day>/<id>.pack`; the second upload is skipped by the
/// preflight.
pub async fn uploads_then_skips_the_same_pack(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("twice"));
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    let (item, bytes) = write_pack(dir.path(), 100_000);
    let cancel = CancellationToken::new();
    let first = up.upload_one(item.clone(), &cancel).await;
    assert!(
        matches!(first.outcome, UploadOutcome::Uploaded { attempts: 1, .. }),
        "{:?}",
        first.outcome
    );
    let second = up.upload_one(item.clone(), &cancel).await;
    assert!(
        matches!(second.outcome, UploadOutcome::Skipped { .. }),
        "{:?}",
        second.outcome
    );
    let trailer_sha256 = |o: &UploadOutcome| match o {
        UploadOutcome::Uploaded { trailer_sha256, .. }
        | UploadOutcome::Skipped { trailer_sha256 } => Some(*trailer_sha256),
        UploadOutcome::Failed(_) => None,
    };
    assert_eq!(
        trailer_sha256(&first.outcome),
        trailer_sha256(&second.outcome)
    );
    let trailer = Trailer::parse(bytes[bytes.len() - TRAILER_LEN..].try_into().unwrap()).unwrap();
    assert_eq!(trailer_sha256(&first.outcome), Some(trailer.sha256));
    assert_eq!(keys(&store).await, vec![first.key.to_string()]);
    let hex = item.pack_id.to_hex();
    assert!(first.key.as_ref().ends_with(&format!(
        "v2/{}/{}/{hex}.pack",
        &hex[30..],
        day(&item.pack_id),
    )));
    assert_eq!(object_bytes(&store, &first.key).await, bytes);
    assert!(
        item.path.exists(),
        "the uploader never removes the staged file"
    );
}

/// The `date=YYYY-MM-DD` part of a pack's key (the key module's unit tests
/// pin the date itself).
fn day(id: &PackId) -> String {
    let key = spool_upload::object_key(&object_store::path::Path::from(""), id);
    key.as_ref().split('/').nth(2).unwrap().to_string()
}

/// A pack above `multipart_threshold` goes up as a multipart upload in
/// streamed parts and lands whole.
pub async fn multipart_lands_whole(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("multipart"));
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    let (item, bytes) = write_pack(dir.path(), 13 << 20);
    let r = up.upload_one(item, &CancellationToken::new()).await;
    assert!(r.outcome.is_stored(), "{:?}", r.outcome);
    let got = object_bytes(&store, &r.key).await;
    assert_eq!(got.len(), bytes.len());
    assert!(got == bytes, "multipart object differs from the pack");
}

/// A different object at the key (same size and id, another checksum; or
/// another size) is a non-retryable conflict, and the object stays as it
/// was.
pub async fn conflict_is_final_and_leaves_the_object(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("conflict"));
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    for (ours_size, theirs_size) in [(50_000, 50_000), (50_000, 70_000)] {
        let id = PackId::generate();
        let (theirs, theirs_bytes) = write_pack_with(other_dir.path(), id, theirs_size, 0x11);
        let r = up.upload_one(theirs, &CancellationToken::new()).await;
        assert!(r.outcome.is_stored());
        let (ours, ours_bytes) = write_pack_with(dir.path(), id, ours_size, 0x22);
        assert_ne!(ours_bytes, theirs_bytes);
        let r = up.upload_one(ours, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("a conflict fails");
        assert!(!f.retryable && !f.cancelled, "{f:?}");
        assert!(matches!(f.error, Error::Conflict { .. }), "{}", f.error);
        assert_eq!(f.attempts, 1, "a conflict is not retried");
        assert_eq!(object_bytes(&store, &r.key).await, theirs_bytes);
    }
}

/// A staged file that no longer matches its listing (another size) is
/// refused, and one whose trailer is damaged (naming another pack, a broken
/// magic) is corrupt; neither is retryable, and nothing is put.
pub async fn changed_staged_bytes_are_refused(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("staged"));
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    // Size changed since it was listed.
    let (mut item, _) = write_pack(dir.path(), 20_000);
    item.size += 1;
    // Trailer names another pack.
    let (item2, mut bytes2) = write_pack(dir.path(), 20_000);
    let n = bytes2.len();
    bytes2[n - TRAILER_LEN + 8] ^= 0xff;
    std::fs::write(&item2.path, &bytes2).unwrap();
    // Trailer magic broken.
    let (item3, mut bytes3) = write_pack(dir.path(), 20_000);
    let n3 = bytes3.len();
    bytes3[n3 - TRAILER_LEN] ^= 0xff;
    std::fs::write(&item3.path, &bytes3).unwrap();
    let results = upload_all(&up, vec![item, item2, item3], &CancellationToken::new()).await;
    for (i, r) in results.iter().enumerate() {
        let f = r.outcome.failure().expect("refused");
        assert!(!f.retryable, "{}", f.error);
        if i == 0 {
            // The file changed since it was listed: the listing is stale.
            assert!(
                matches!(f.error, Error::StagedMismatch { .. }),
                "{}",
                f.error
            );
        } else {
            // A damaged trailer is a corrupt pack: quarantined.
            assert!(
                matches!(f.error, Error::CorruptTrailer { .. }) && f.corrupt,
                "{}",
                f.error
            );
        }
    }
    assert!(keys(&store).await.is_empty());
}

/// A pack larger than `max_in_flight_bytes` is refused at once, not
/// retryable, and never blocks the packs after it.
pub async fn oversized_pack_is_refused(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("oversized"));
    let cfg = UploadConfig {
        max_in_flight_bytes: 100_000,
        ..test_config()
    };
    let up = Uploader::new(store.clone(), cfg).unwrap();
    let (big, _) = write_pack(dir.path(), 200_000);
    let (small, _) = write_pack(dir.path(), 10_000);
    let r = upload_all(&up, vec![big, small], &CancellationToken::new()).await;
    let f = r[0].outcome.failure().expect("oversized fails");
    assert!(!f.retryable && matches!(f.error, Error::TooLarge { .. }));
    assert_eq!(f.attempts, 0);
    assert!(r[1].outcome.is_stored());
    assert_eq!(keys(&store).await, vec![r[1].key.to_string()]);
}

/// Many packs at once: every one lands, results come back in order.
pub async fn many_packs_upload_everything(make: MakeStore<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let store = make(&prefix("rounds"));
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    let items: Vec<_> = (0..10).map(|_| write_pack(dir.path(), 30_000).0).collect();
    let results = upload_all(&up, items.clone(), &CancellationToken::new()).await;
    assert_eq!(results.len(), 10);
    for (r, it) in results.iter().zip(&items) {
        assert_eq!(&r.item, it);
        assert!(r.outcome.is_stored(), "{:?}", r.outcome);
    }
    assert_eq!(keys(&store).await.len(), 10);
}

/// Expands to one `#[tokio::test]` per suite case, for one backend.
/// `$make` is an expression of type `impl Fn(&str) -> Option<Store>`
/// (`None`: the backend is not available; the test says so and returns).
#[macro_export]
macro_rules! upload_suite {
    ($make:expr) => {
        $crate::upload_suite!(@case $make, uploads_then_skips_the_same_pack);
        $crate::upload_suite!(@case $make, multipart_lands_whole);
        $crate::upload_suite!(@case $make, conflict_is_final_and_leaves_the_object);
        $crate::upload_suite!(@case $make, changed_staged_bytes_are_refused);
        $crate::upload_suite!(@case $make, oversized_pack_is_refused);
        $crate::upload_suite!(@case $make, many_packs_upload_everything);
    };
    (@case $make:expr, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let make = $make;
            if make("probe").is_none() {
                return;
            }
            let f = |p: &str| make(p).expect("store");
            $crate::upload_suite::$case(&f).await;
        }
    };
}
