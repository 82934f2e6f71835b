//! spool-upload against moto's real S3 server (started by `cargo xtask
//! test`): the behavioural suite through `s3://` URLs, then the faults the
//! fault-injecting proxy puts between the client and moto — refused
//! connections, stalls, a body cut mid-way, a request held back past a
//! successor's upload — and a cut multipart upload leaving no parts.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use spool_tests::packs::write_pack;
use spool_tests::proxy::{EventKind, Proxy, ProxyAction, ProxyRule};
use spool_tests::servers::{client, moto, s3_store, Moto};
use spool_tests::upload_suite::{keys, prefix, test_config, upload_all};
use spool_upload::{CancellationToken, Store, UploadConfig, UploadOutcome, Uploader};

mod suite {
    use super::*;

    /// The suite through `s3://BUCKET/PREFIX` URLs, configured from the
    /// `AWS_*` environment xtask sets.
    fn make() -> impl Fn(&str) -> Option<Store> {
        let m = moto();
        move |p: &str| {
            let m = m.as_ref()?;
            Some(Store::from_url(&format!("s3://{}/{p}", m.bucket), &client()).expect("s3:// URL"))
        }
    }
    spool_tests::upload_suite!(make());
}

/// Multipart uploads moto still holds for keys under `prefix`.
async fn open_uploads(m: &Moto, prefix: &str) -> usize {
    let addr = m.endpoint.trim_start_matches("http://");
    let (status, body) = spool_tests::http::request(addr, "GET", &format!("/{}?uploads", m.bucket))
        .await
        .expect("list multipart uploads");
    assert_eq!(status, 200, "{body}");
    body.matches(&format!("<Key>{prefix}/")).count()
}

fn quick(attempts: u32) -> UploadConfig {
    UploadConfig {
        max_attempts: attempts,
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..test_config()
    }
}

#[tokio::test]
async fn refused_connections_are_retryable_after_the_attempts() {
    let Some(m) = moto() else { return };
    let proxy = Proxy::start(m.addr()).await.unwrap();
    proxy.set_refusing(true);
    let store = s3_store(&proxy.url(), &m.bucket, &prefix("refused"));
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..2).map(|_| write_pack(dir.path(), 5000).0).collect();
    let cfg = UploadConfig {
        max_attempts: 4,
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_millis(400),
        ..test_config()
    };
    let up = Uploader::new(store.clone(), cfg).unwrap();
    let start = Instant::now();
    let results = upload_all(&up, items, &CancellationToken::new()).await;
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(5),
        "{took:?}"
    );
    for r in &results {
        let f = r.outcome.failure().expect("refused");
        assert!(f.retryable && !f.cancelled && f.attempts == 4, "{f:?}");
        assert!(r.item.path.exists(), "the pack stays");
    }
    proxy.set_refusing(false);
    let again = upload_all(
        &up,
        results.into_iter().map(|r| r.item).collect(),
        &CancellationToken::new(),
    )
    .await;
    assert!(
        again.iter().all(|r| r.outcome.is_stored()),
        "the same proxy port works again"
    );
}

#[tokio::test]
async fn a_body_cut_midway_is_never_stored_short() {
    let Some(m) = moto() else { return };
    let proxy = Proxy::start(m.addr()).await.unwrap();
    proxy.add_rule(
        ProxyRule::new(ProxyAction::CutRequestAfter(10_000))
            .method("PUT")
            .times(1),
    );
    let p = prefix("cut");
    let store = s3_store(&proxy.url(), &m.bucket, &p);
    let dir = tempfile::tempdir().unwrap();
    let (item, bytes) = write_pack(dir.path(), 200_000);
    let r = Uploader::new(store.clone(), quick(3))
        .unwrap()
        .upload_one(item, &CancellationToken::new())
        .await;
    assert!(
        matches!(r.outcome, UploadOutcome::Uploaded { attempts: 2, .. }),
        "{:?}",
        r.outcome
    );
    assert_eq!(proxy.count(EventKind::CutRequest), 1);
    let direct = s3_store(&m.endpoint, &m.bucket, &p);
    let got = direct
        .object_store()
        .get(&r.key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        got.as_ref() == bytes.as_slice(),
        "the object is the whole pack"
    );
}

#[tokio::test]
async fn a_held_back_put_released_after_a_successors_upload_replaces_nothing() {
    let Some(m) = moto() else { return };
    let p = prefix("held");
    let direct = s3_store(&m.endpoint, &m.bucket, &p);
    let dir = tempfile::tempdir().unwrap();
    for client_goes_away in [true, false] {
        let (item, bytes) = write_pack(dir.path(), 100_000);
        let proxy = Proxy::start(m.addr()).await.unwrap();
        proxy.add_rule(ProxyRule::new(ProxyAction::Hold).method("PUT"));
        let via_proxy = s3_store(&proxy.url(), &m.bucket, &p);
        let up = Uploader::new(via_proxy, quick(1)).unwrap();
        let cancel = CancellationToken::new();
        let (it, c) = (item.clone(), cancel.clone());
        let mut first = Some(tokio::spawn(async move { up.upload_one(it, &c).await }));
        let deadline = Instant::now() + Duration::from_secs(10);
        while proxy.count(EventKind::Held) == 0 {
            assert!(Instant::now() < deadline, "the PUT never reached the proxy");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The successor uploads the same pack straight to the store.
        let succ = Uploader::new(direct.clone(), quick(1))
            .unwrap()
            .upload_one(item.clone(), &CancellationToken::new())
            .await;
        assert!(succ.outcome.is_stored(), "{:?}", succ.outcome);
        let before = direct.object_store().head(&succ.key).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await; // a later Last-Modified would show
        if client_goes_away {
            cancel.cancel();
            let r = first.take().unwrap().await.unwrap();
            assert!(r.outcome.failure().is_some_and(|f| f.cancelled));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        proxy.release_held();
        if client_goes_away {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(proxy.count(EventKind::DroppedClientGone), 1);
            assert_eq!(
                proxy
                    .events()
                    .iter()
                    .filter(|e| e.kind == EventKind::Forwarded && e.method == "PUT")
                    .count(),
                0,
                "a held request whose client went away is never forwarded"
            );
        } else {
            let r = first.take().unwrap().await.unwrap();
            assert!(
                matches!(r.outcome, UploadOutcome::Skipped { .. }),
                "the late PUT is a conditional create: refused, then found equal: {:?}",
                r.outcome
            );
        }
        let after = direct.object_store().head(&succ.key).await.unwrap();
        assert_eq!(
            before.last_modified, after.last_modified,
            "the object was replaced"
        );
        assert_eq!(before.e_tag, after.e_tag);
        let got = direct
            .object_store()
            .get(&succ.key)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(got.as_ref() == bytes.as_slice());
    }
    assert_eq!(keys(&direct).await.len(), 2);
}

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

    #[tokio::test]
    async fn cancel_cuts_a_put_the_store_stalls() {
        let Some(m) = moto() else { return };
        let proxy = Proxy::start(m.addr()).await.unwrap();
        proxy.add_rule(ProxyRule::new(ProxyAction::Stall).method("PUT"));
        let store = s3_store(&proxy.url(), &m.bucket, &prefix("stall"));
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 100_000);
        let up = Uploader::new(store.clone(), quick(8)).unwrap();
        let start = Instant::now();
        let r = up.upload_one(item, &cancel_after(500)).await;
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        let f = r.outcome.failure().expect("cut");
        assert!(f.cancelled, "{f:?}");
        assert!(r.item.path.exists());
        proxy.clear_rules();
        assert!(keys(&store).await.is_empty());
    }

    #[tokio::test]
    async fn cancel_cuts_a_stalled_multipart_upload_and_leaves_no_parts() {
        let Some(m) = moto() else { return };
        let proxy = Proxy::start(m.addr()).await.unwrap();
        proxy.add_rule(ProxyRule::new(ProxyAction::Stall).path_contains("partNumber=2"));
        let p = prefix("mpu-cancel");
        let store = s3_store(&proxy.url(), &m.bucket, &p);
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 16 << 20);
        let up = Uploader::new(store.clone(), quick(8)).unwrap();
        let start = Instant::now();
        let r = up.upload_one(item, &cancel_after(1500)).await;
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
        let f = r.outcome.failure().expect("cut");
        assert!(f.cancelled, "{f:?}");
        assert!(
            proxy.events().iter().any(|e| e.kind == EventKind::Stalled),
            "the cancel came while part 2 was stalled"
        );
        assert_eq!(
            open_uploads(&m, &p).await,
            0,
            "the multipart upload was aborted"
        );
        assert!(keys(&store).await.is_empty());
    }
}
