//! Fast tier of spool-upload: the behavioural suite on `LocalFileSystem`,
//! `InMemory` and the fault-scripting fake, then the fake's scripted
//! faults — classification, retries, round bounds and (in `serial`)
//! cancellation bounds.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::ObjectStoreExt;
use spool_tests::packs::write_pack;
use spool_tests::upload_suite::{keys, test_config, upload_all};
use spool_upload::testing::{Action, FaultStore, Injected, Op, Rule};
use spool_upload::{
    CancellationToken, ClientConfig, Error, Store, UploadConfig, UploadOutcome, Uploader,
};

mod local {
    fn make() -> impl Fn(&str) -> Option<spool_upload::Store> {
        let root = tempfile::tempdir().unwrap().keep();
        move |p: &str| {
            let url = format!("file://{}/{p}", root.display());
            Some(
                spool_upload::Store::from_url(&url, &spool_upload::ClientConfig::default())
                    .unwrap(),
            )
        }
    }
    spool_tests::upload_suite!(make());
}

mod memory {
    fn make() -> impl Fn(&str) -> Option<spool_upload::Store> {
        let mem: std::sync::Arc<dyn object_store::ObjectStore> =
            std::sync::Arc::new(object_store::memory::InMemory::new());
        move |p: &str| Some(spool_upload::Store::new(mem.clone(), p, "memory://", true).unwrap())
    }
    spool_tests::upload_suite!(make());
}

mod fault_fake {
    fn make() -> impl Fn(&str) -> Option<spool_upload::Store> {
        let fake = spool_upload::testing::FaultStore::new(std::sync::Arc::new(
            object_store::memory::InMemory::new(),
        ));
        move |p: &str| {
            Some(
                spool_upload::Store::new(std::sync::Arc::new(fake.clone()), p, "fake://", true)
                    .unwrap(),
            )
        }
    }
    spool_tests::upload_suite!(make());
}

fn new_fake() -> (FaultStore, Store) {
    let fake = FaultStore::new(Arc::new(InMemory::new()));
    let store = Store::new(Arc::new(fake.clone()), "p", "fake://", true).unwrap();
    (fake, store)
}

fn quick(attempts: u32) -> UploadConfig {
    UploadConfig {
        max_attempts: attempts,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(40),
        ..test_config()
    }
}

async fn one(store: &Store, cfg: UploadConfig, size: usize) -> spool_upload::UploadResult {
    let dir = tempfile::tempdir().unwrap();
    let (item, _) = write_pack(dir.path(), size);
    let up = Uploader::new(store.clone(), cfg).unwrap();
    let r = up.upload_one(item, &CancellationToken::new()).await;
    assert!(
        r.item.path.exists(),
        "a failed upload leaves the pack staged"
    );
    r
}

#[tokio::test]
async fn statuses_403_404_401_400_are_not_retried() {
    for status in [400, 401, 403, 404] {
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::Put, Action::Fail(Injected::Status(status))));
        let r = one(&store, quick(5), 10_000).await;
        let f = r.outcome.failure().expect("fails");
        assert!(!f.retryable && !f.cancelled, "{status}: {}", f.error);
        assert_eq!(fake.calls(Op::Put), 1, "{status} must not be retried");
        assert!(keys(&store).await.is_empty());
    }
}

#[tokio::test]
async fn statuses_503_429_500_and_transport_failures_are_retried() {
    let faults = [
        Injected::Status(503),
        Injected::Status(429),
        Injected::Status(500),
        Injected::ConnectionRefused,
        Injected::Tls,
        Injected::Timeout,
    ];
    for inj in faults {
        // Fails every time: retried up to max_attempts, then reported retryable.
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::Put, Action::Fail(inj.clone())));
        let r = one(&store, quick(4), 10_000).await;
        let f = r.outcome.failure().expect("fails");
        assert!(f.retryable && !f.cancelled, "{inj:?}: {}", f.error);
        assert_eq!(f.attempts, 4);
        assert_eq!(
            fake.calls(Op::Put),
            4,
            "{inj:?} is retried up to max_attempts"
        );
        // Fails twice, then goes through.
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::Put, Action::Fail(inj.clone())).times(2));
        let r = one(&store, quick(4), 10_000).await;
        assert!(
            matches!(r.outcome, UploadOutcome::Uploaded { attempts: 3, .. }),
            "{inj:?}: {:?}",
            r.outcome
        );
    }
}

#[tokio::test]
async fn a_failed_head_is_retryable_and_nothing_is_put_meanwhile() {
    // A store without conditional create looks before it puts.
    let fake = FaultStore::new(Arc::new(InMemory::new()));
    let store = Store::new(Arc::new(fake.clone()), "p", "fake://", false).unwrap();
    fake.script(Rule::new(Op::Head, Action::Fail(Injected::Status(500))));
    let r = one(&store, quick(3), 10_000).await;
    let f = r.outcome.failure().expect("fails");
    assert!(f.retryable, "{}", f.error);
    assert_eq!(fake.calls(Op::Head), 3);
    assert_eq!(fake.calls(Op::Put), 0, "no PUT without a preflight");
}

#[tokio::test]
async fn a_lost_put_answer_is_resolved_by_the_conditional_create() {
    // The PUT lands but its answer is lost (a 503 after the fact): the retry's
    // preflight finds the same pack and skips it; one object.
    let (fake, store) = new_fake();
    let dir = tempfile::tempdir().unwrap();
    let (item, bytes) = write_pack(dir.path(), 10_000);
    let key = spool_upload::object_key(store.prefix(), &item.pack_id);
    fake.inner().put(&key, bytes.clone().into()).await.unwrap();
    let up = Uploader::new(store.clone(), quick(3)).unwrap();
    let r = up.upload_one(item, &CancellationToken::new()).await;
    assert!(
        matches!(r.outcome, UploadOutcome::Skipped { .. }),
        "PutMode::Create must refuse to replace the object: {:?}",
        r.outcome
    );
    assert_eq!(keys(&store).await.len(), 1);
    assert_eq!(
        (fake.calls(Op::Put), fake.calls(Op::Head)),
        (1, 1),
        "the PUT first, the HEAD only after its refusal"
    );
}

#[tokio::test]
async fn a_failed_multipart_upload_is_aborted_and_retried() {
    let (fake, store) = new_fake();
    fake.script(
        Rule::new(Op::PutPart, Action::Fail(Injected::Status(503)))
            .after(1)
            .times(1),
    );
    let r = one(&store, quick(3), 12 << 20).await;
    assert!(
        matches!(r.outcome, UploadOutcome::Uploaded { attempts: 2, .. }),
        "{:?}",
        r.outcome
    );
    assert_eq!(fake.calls(Op::Abort), 1);
    assert_eq!(fake.open_multipart_uploads(), 0, "no orphaned parts");
    assert_eq!(fake.calls(Op::CreateMultipart), 2);
}

#[tokio::test]
async fn store_urls_refuse_unknown_schemes() {
    let e = Store::from_url("ftp://x", &ClientConfig::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidUrl { .. }));
}

/// Liveness bounds: each cancel must return within ~1 s (asserted with a
/// generous margin) where losing the cancel would cost tens of seconds.
mod serial {
    use super::*;

    fn cancel_after(ms: u64) -> CancellationToken {
        let c = CancellationToken::new();
        let c2 = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            c2.cancel();
        });
        c
    }

    /// Bounds a call that a lost cancel would leave hanging, so the
    /// mutation shows up as a failure instead of a stuck test.
    async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("did not return within 10 s of its cancel")
    }

    fn assert_cancelled(r: &spool_upload::UploadResult) {
        let f = r.outcome.failure().expect("not uploaded");
        assert!(f.cancelled && f.retryable, "{:?}", f);
        assert!(r.item.path.exists(), "the pack stays in the spool");
    }

    #[tokio::test]
    async fn cancel_cuts_a_stalled_transfer() {
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::Put, Action::Stall));
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 10_000);
        let up = Uploader::new(store.clone(), quick(8)).unwrap();
        let start = Instant::now();
        let r = bounded(up.upload_one(item, &cancel_after(300))).await;
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        assert_cancelled(&r);
        assert!(keys(&store).await.is_empty());
    }

    #[tokio::test]
    async fn cancel_cuts_a_backoff_sleep() {
        // Eight attempts with a 10 s backoff cap: losing the sleep's cancel
        // would cost over a minute.
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 10_000);
        let cfg = UploadConfig {
            max_attempts: 8,
            backoff_initial: Duration::from_secs(5),
            backoff_max: Duration::from_secs(10),
            ..test_config()
        };
        let up = Uploader::new(store, cfg).unwrap();
        let start = Instant::now();
        let r = bounded(up.upload_one(item, &cancel_after(300))).await;
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        assert_cancelled(&r);
        assert_eq!(
            fake.calls(Op::Put),
            1,
            "the cancel came during the first backoff"
        );
    }

    #[tokio::test]
    async fn cancel_cuts_a_multipart_upload_and_aborts_it() {
        let (fake, store) = new_fake();
        fake.script(Rule::new(Op::PutPart, Action::Stall).after(1));
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 16 << 20);
        let up = Uploader::new(store.clone(), quick(8)).unwrap();
        let start = Instant::now();
        let r = bounded(up.upload_one(item, &cancel_after(300))).await;
        assert!(
            start.elapsed() < Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        assert_cancelled(&r);
        assert!(fake.calls(Op::PutPart) >= 2, "the cancel came mid-upload");
        assert_eq!(
            fake.calls(Op::Abort),
            1,
            "a cut multipart upload is aborted"
        );
        assert_eq!(fake.open_multipart_uploads(), 0, "no orphaned parts");
        assert_eq!(fake.calls(Op::Complete), 0);
        assert!(keys(&store).await.is_empty());
    }

    #[tokio::test]
    async fn refusing_store_reports_retryable_after_the_attempts_in_the_expected_time() {
        let (fake, store) = new_fake();
        fake.script(Rule::new(
            Op::Put,
            Action::Fail(Injected::ConnectionRefused),
        ));
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<_> = (0..3).map(|_| write_pack(dir.path(), 1000).0).collect();
        let cfg = UploadConfig {
            max_attempts: 4,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_millis(400),
            ..test_config()
        };
        let up = Uploader::new(store, cfg).unwrap();
        let start = Instant::now();
        let results = upload_all(&up, items, &CancellationToken::new()).await;
        let took = start.elapsed();
        // Backoffs 100-200, 200-400, 200-400 ms: between 0.5 s and 1 s, plus slack.
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took < Duration::from_millis(2500), "{took:?}");
        for r in &results {
            let f = r.outcome.failure().expect("fails");
            assert!(f.retryable && !f.cancelled && f.attempts == 4, "{f:?}");
            assert!(r.item.path.exists());
        }
        assert_eq!(fake.calls(Op::Put), 12);
    }
}
