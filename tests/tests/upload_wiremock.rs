//! spool-upload's real S3 client (object_store's) against wiremock playing
//! S3, for the answers real servers will not give on demand: 401, 403, 404,
//! 409, 412, 429, 500, 503 and slow headers. Pins the classification of
//! The uploader's failure classification end to end, including how object_store words a status (which
//! `spool_upload::retryable` reads).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use spool_core::pack::{PackId, TRAILER_LEN};
use spool_tests::packs::{write_pack, write_pack_with};
use spool_upload::{CancellationToken, Error, Store, UploadConfig, UploadOutcome, Uploader};
use wiremock::matchers::{header_exists, method};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn store(server: &MockServer, client_retries: usize, timeout: Duration) -> Store {
    store_with(server, client_retries, timeout, true)
}

/// A store on the mock; `conditional_create: false` is a store taken not to
/// honour `If-None-Match`, which looks (HEAD) before every PUT.
fn store_with(
    server: &MockServer,
    client_retries: usize,
    timeout: Duration,
    conditional_create: bool,
) -> Store {
    let s3 = AmazonS3Builder::new()
        .with_endpoint(server.uri())
        .with_bucket_name("bucket")
        .with_region("us-east-1")
        .with_access_key_id("k")
        .with_secret_access_key("s")
        .with_allow_http(true)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(5),
                max_backoff: Duration::from_millis(10),
                base: 2.0,
            },
            max_retries: client_retries,
            retry_timeout: Duration::from_secs(5),
        })
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(timeout),
        )
        .build()
        .unwrap();
    Store::new(Arc::new(s3), "p", server.uri(), conditional_create).unwrap()
}

fn cfg(attempts: u32) -> UploadConfig {
    UploadConfig {
        max_attempts: attempts,
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
        ..UploadConfig::default()
    }
}

async fn count(server: &MockServer, m: &str) -> usize {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == m)
        .count()
}

/// HEAD finds nothing, PUT answers `status`.
async fn put_answers(status: u16) -> (MockServer, spool_upload::UploadResult) {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(
            ResponseTemplate::new(status).set_body_string("<Error><Code>X</Code></Error>"),
        )
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let (item, _) = write_pack(dir.path(), 5000);
    let up = Uploader::new(store(&server, 0, Duration::from_secs(5)), cfg(3)).unwrap();
    let r = up.upload_one(item, &CancellationToken::new()).await;
    (server, r)
}

#[tokio::test]
async fn put_401_403_404_400_are_final() {
    for status in [400, 401, 403, 404] {
        let (server, r) = put_answers(status).await;
        let f = r.outcome.failure().expect("fails");
        assert!(!f.retryable, "{status}: {}", f.error);
        assert_eq!(count(&server, "PUT").await, 1, "{status} is not retried");
    }
}

#[tokio::test]
async fn put_429_500_503_are_retried() {
    for status in [429, 500, 503] {
        let (server, r) = put_answers(status).await;
        let f = r.outcome.failure().expect("fails");
        assert!(f.retryable && f.attempts == 3, "{status}: {}", f.error);
        assert_eq!(
            count(&server, "PUT").await,
            3,
            "{status} is retried up to max_attempts"
        );
    }
}

#[tokio::test]
async fn object_stores_own_retries_are_bounded_by_its_retry_config() {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let (item, _) = write_pack(dir.path(), 5000);
    let up = Uploader::new(store(&server, 2, Duration::from_secs(5)), cfg(2)).unwrap();
    let r = up.upload_one(item, &CancellationToken::new()).await;
    assert!(r.outcome.failure().is_some_and(|f| f.retryable));
    assert_eq!(
        count(&server, "PUT").await,
        2 * 3,
        "2 attempts × (1 + 2 client retries)"
    );
}

#[tokio::test]
async fn a_failed_head_is_retryable_a_forbidden_one_is_not() {
    for (status, retryable, heads) in [(500, true, 3), (503, true, 3), (403, false, 1)] {
        let server = MockServer::start().await;
        Mock::given(method("HEAD"))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 5000);
        let store = store_with(&server, 0, Duration::from_secs(5), false);
        let up = Uploader::new(store, cfg(3)).unwrap();
        let r = up.upload_one(item, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("fails");
        assert_eq!(f.retryable, retryable, "HEAD {status}: {}", f.error);
        assert_eq!(count(&server, "HEAD").await, heads);
        assert_eq!(count(&server, "PUT").await, 0, "no PUT after a failed HEAD");
    }
}

/// A fresh pack costs one request: a PUT with `If-None-Match: *` and no
/// HEAD before it (the store honours conditional create).
#[tokio::test]
async fn a_fresh_pack_is_one_conditional_put_and_no_head() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(200).insert_header("ETag", "\"e\""))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let (item, _) = write_pack(dir.path(), 5000);
    let up = Uploader::new(store(&server, 0, Duration::from_secs(5)), cfg(3)).unwrap();
    let r = up.upload_one(item, &CancellationToken::new()).await;
    assert!(
        matches!(r.outcome, UploadOutcome::Uploaded { attempts: 1, .. }),
        "{:?}",
        r.outcome
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "one request: {requests:?}");
    assert_eq!(requests[0].method.as_str(), "PUT");
    assert_eq!(
        requests[0]
            .headers
            .get("if-none-match")
            .and_then(|v| v.to_str().ok()),
        Some("*"),
        "the one PUT is a conditional create"
    );
}

/// 412 / 409 on the conditional PUT: the key is taken. The uploader reads
/// the existing object's trailer: another pack there is a conflict, final,
/// and nothing overwrites it.
#[tokio::test]
async fn put_412_and_409_with_another_object_there_are_conflicts() {
    for status in [412, 409] {
        let server = MockServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let id = PackId::generate();
        let (item, ours) = write_pack_with(dir.path(), id, 5000, 1);
        let (_, theirs) = write_pack_with(other.path(), id, 5000, 2);
        assert_eq!(ours.len(), theirs.len());
        // The PUT goes first (no HEAD); the HEAD after its 412 / 409 finds
        // the other pack.
        Mock::given(method("HEAD"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_bytes(theirs.clone())
                    .insert_header("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT")
                    .insert_header("ETag", "\"e\""),
            )
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(header_exists("range"))
            .respond_with(
                ResponseTemplate::new(206)
                    .set_body_bytes(theirs[theirs.len() - TRAILER_LEN..].to_vec())
                    .insert_header(
                        "Content-Range",
                        format!(
                            "bytes {}-{}/{}",
                            theirs.len() - TRAILER_LEN,
                            theirs.len() - 1,
                            theirs.len()
                        )
                        .as_str(),
                    )
                    .insert_header("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT")
                    .insert_header("ETag", "\"e\""),
            )
            .mount(&server)
            .await;
        Mock::given(method("PUT"))
            .and(header_exists("if-none-match"))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server)
            .await;
        let up = Uploader::new(store(&server, 0, Duration::from_secs(5)), cfg(3)).unwrap();
        let r = up.upload_one(item, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("conflict");
        assert!(!f.retryable, "{status}: {}", f.error);
        assert!(
            matches!(f.error, Error::Conflict { .. }),
            "{status}: {}",
            f.error
        );
        assert_eq!(
            count(&server, "PUT").await,
            1,
            "{status}: one conditional PUT, no overwrite"
        );
    }
}

mod serial {
    use super::*;

    #[tokio::test]
    async fn slow_headers_time_out_and_are_retried() {
        let server = MockServer::start().await;
        Mock::given(method("HEAD"))
            .respond_with(ResponseTemplate::new(404))
            .mount(&server)
            .await;
        Mock::given(method("PUT"))
            .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(3)))
            .mount(&server)
            .await;
        let dir = tempfile::tempdir().unwrap();
        let (item, _) = write_pack(dir.path(), 5000);
        let up = Uploader::new(store(&server, 0, Duration::from_millis(300)), cfg(2)).unwrap();
        let start = Instant::now();
        let r = up.upload_one(item, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("times out");
        assert!(f.retryable && f.attempts == 2, "{}", f.error);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(r.outcome, UploadOutcome::Failed(_)));
    }
}

/// Standard base64 with padding (what S3's checksum headers carry).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The PUT a store built from an `s3://` URL sends to a wiremock S3
/// (`AWS_*` set as `env` says, in this process only: nextest runs each
/// test in its own process, and every other test here builds its client
/// without the environment), and the pack's bytes.
async fn put_from_env(env: &[(&str, &str)]) -> (wiremock::Request, Vec<u8>) {
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(200).insert_header("ETag", "\"e\""))
        .mount(&server)
        .await;
    for (k, v) in [
        ("AWS_ENDPOINT", server.uri().as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "k"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ]
    .into_iter()
    .chain(env.iter().copied())
    {
        std::env::set_var(k, v);
    }
    std::env::remove_var("AWS_CHECKSUM_ALGORITHM");
    let client = spool_upload::ClientConfig {
        allow_http: true,
        client_max_retries: 0,
        ..spool_upload::ClientConfig::default()
    };
    let store = Store::from_url("s3://bucket/p", &client).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (item, bytes) = write_pack(dir.path(), 5000);
    let r = Uploader::new(store, cfg(1))
        .unwrap()
        .upload_one(item, &CancellationToken::new())
        .await;
    assert!(r.outcome.is_stored(), "{:?}", r.outcome);
    let requests = server.received_requests().await.unwrap();
    let put = requests
        .into_iter()
        .find(|r| r.method.as_str() == "PUT")
        .expect("a PUT");
    assert_eq!(put.body, bytes);
    (put, bytes)
}

/// A header of `put` as text, if it is there.
fn header<'a>(put: &'a wiremock::Request, name: &str) -> Option<&'a str> {
    put.headers.get(name).map(|v| v.to_str().unwrap())
}

/// A store built from an `s3://` URL has the server check the body's
/// SHA-256 once: its signed payload hash (`x-amz-content-sha256`, which
/// S3 verifies: `XAmzContentSHA256Mismatch`), with no second hash of the
/// same bytes in `x-amz-checksum-sha256` (S3 would hash the body twice).
#[tokio::test]
async fn s3_url_stores_have_the_server_check_the_bodys_sha256_once() {
    use sha2::{Digest, Sha256};
    let (put, bytes) = put_from_env(&[]).await;
    assert_eq!(
        header(&put, "x-amz-content-sha256"),
        Some(
            Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .as_str()
        )
    );
    assert_eq!(header(&put, "x-amz-checksum-sha256"), None);
}

/// With the payload unsigned (`AWS_UNSIGNED_PAYLOAD`), the body's SHA-256
/// goes in `x-amz-checksum-sha256`, so S3 still refuses bytes damaged on
/// the way (moto 5.2.5 accepts any value: its `_get_checksum` has a TODO
/// where AWS verifies, so the header is pinned here instead).
#[tokio::test]
async fn an_unsigned_payload_carries_the_bodys_sha256_for_the_server_to_check() {
    use sha2::{Digest, Sha256};
    let (put, bytes) = put_from_env(&[("AWS_UNSIGNED_PAYLOAD", "true")]).await;
    assert_eq!(
        header(&put, "x-amz-content-sha256"),
        Some("UNSIGNED-PAYLOAD")
    );
    assert_eq!(
        header(&put, "x-amz-checksum-sha256"),
        Some(base64(&Sha256::digest(&bytes)).as_str())
    );
}

/// With no signature at all (`AWS_SKIP_SIGNATURE`: a public or proxied
/// bucket), the body's SHA-256 goes in `x-amz-checksum-sha256` too.
#[tokio::test]
async fn an_unsigned_request_carries_the_bodys_sha256_for_the_server_to_check() {
    use sha2::{Digest, Sha256};
    let (put, bytes) = put_from_env(&[("AWS_SKIP_SIGNATURE", "true")]).await;
    assert_eq!(header(&put, "authorization"), None);
    assert_eq!(
        header(&put, "x-amz-checksum-sha256"),
        Some(base64(&Sha256::digest(&bytes)).as_str())
    );
}
