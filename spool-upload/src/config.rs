//! The uploader's knobs and the HTTP client's.

use std::time::Duration;

use crate::error::{Error, Result};

/// Packs of at most this size (16 MiB) go up many at once: the service's
/// pipeline keeps up to [`UploadConfig::small_pack_workers`] of them in
/// flight (their bytes still bounded by `max_in_flight_bytes`). Below a
/// few hundred KiB a transfer is mostly round trips; up to 16 MiB one
/// connection seldom fills the store's side (moto: 64 × 16 MiB drained
/// 1.16× rclone with 4 in flight, 1.26× with 8, 1.22× with 16,
/// BENCHMARKS.md). Larger packs are few and held whole in memory (or go up
/// in parts), so `max_workers` of them.
pub const SMALL_PACK_BYTES: u64 = 16 << 20;

/// The shortest `orphan_grace` accepted: half of it must outlast any one
/// index call a drain starts (a catalog request is bounded well below
/// this), and a sweep's own listing and deletes.
pub(crate) const MIN_ORPHAN_GRACE: Duration = Duration::from_secs(2);

/// How the uploader works through staged packs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadConfig {
    /// Packs larger than [`SMALL_PACK_BYTES`] (16 MiB) the service's
    /// pipeline keeps in flight at once (≥ 1).
    pub max_workers: usize,
    /// Packs of at most [`SMALL_PACK_BYTES`] (16 MiB) in flight at once in
    /// the service's pipeline (at least `max_workers` is used). A small
    /// pack's transfer is mostly round trips, and one connection seldom
    /// fills the store's side, so more of them at once keep the link busy;
    /// `max_in_flight_bytes` still bounds their bytes together (16 × 16 MiB
    /// is the default 256 MiB).
    pub small_pack_workers: usize,
    /// Bytes of packs in flight at once in the service's pipeline, summed
    /// (≥ 1). A pack larger than this is refused, not retryable.
    pub max_in_flight_bytes: u64,
    /// Packs larger than this go up as multipart uploads, in
    /// parts of `part_size` streamed from disk; smaller ones as one PUT
    /// held in memory.
    pub multipart_threshold: u64,
    /// Multipart part size. S3 wants ≥ 5 MiB for every part but the last.
    pub part_size: usize,
    /// Parts of one multipart upload in flight at once (≥ 1).
    pub part_concurrency: usize,
    /// Attempts per pack, the first included (≥ 1).
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles per attempt.
    pub backoff_initial: Duration,
    /// Cap of the backoff between attempts.
    pub backoff_max: Duration,
    /// How long an abort of a failed or cancelled multipart upload may take
    /// before it is given up on (the store is probably down; the bucket's
    /// lifecycle rule for incomplete uploads is then the backstop).
    pub abort_timeout: Duration,
    /// Packs smaller than this go up together, many to one object (a
    /// bundle, [`crate::Uploader::upload_bundle`]) of at most this many
    /// bytes; a pack at or over it goes alone. 0: every pack alone. Taken
    /// as at most `multipart_threshold` and `max_in_flight_bytes` (a bundle
    /// is one PUT held in memory: [`UploadConfig::bundle_limit`]).
    /// `file://` stores never bundle (the crate docs, "Bundles").
    pub bundle_bytes: u64,
    /// How long the service lets its first small pack wait for others to
    /// share its bundle when fewer than `bundle_bytes` are ready (the
    /// latency a bundle costs; spool-service's drain docs, "Bundles").
    pub bundle_linger: Duration,
    /// The grace a drain records for its destination when it is the first
    /// to write to a store prefix (spool-service's `prefix_record`: the
    /// record's grace is the destination's from then on, for every
    /// process): how old a bundle must be before a sweep reads it, and
    /// (half of it) how long after a bundle's PUT its rows may be indexed.
    pub orphan_grace: Duration,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig {
            max_workers: 4,
            small_pack_workers: 16,
            max_in_flight_bytes: 256 << 20,
            multipart_threshold: 32 << 20,
            part_size: 8 << 20,
            part_concurrency: 2,
            max_attempts: 4,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(5),
            abort_timeout: Duration::from_secs(2),
            bundle_bytes: 8 << 20,
            bundle_linger: Duration::from_secs(1),
            orphan_grace: Duration::from_secs(3600),
        }
    }
}

impl UploadConfig {
    /// The bundle size in force: `bundle_bytes`, at most
    /// `multipart_threshold`, `max_in_flight_bytes` and
    /// [`MAX_BUNDLE_BYTES`](crate::MAX_BUNDLE_BYTES) (what a reader of
    /// bundles trusts an object named like one to be within).
    pub fn bundle_limit(&self) -> u64 {
        self.bundle_bytes
            .min(self.multipart_threshold)
            .min(self.max_in_flight_bytes)
            .min(crate::MAX_BUNDLE_BYTES)
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.max_workers == 0 {
            return bad("max_workers must be at least 1".into());
        }
        if self.max_in_flight_bytes == 0 {
            return bad("max_in_flight_bytes must be at least 1".into());
        }
        if self.part_size == 0 || self.part_concurrency == 0 {
            return bad("part_size and part_concurrency must be at least 1".into());
        }
        if self.max_attempts == 0 {
            return bad("max_attempts must be at least 1 (the first attempt counts)".into());
        }
        if self.orphan_grace < MIN_ORPHAN_GRACE {
            return bad(format!(
                "orphan_grace ({:?}) is below {MIN_ORPHAN_GRACE:?}: a drain indexes a bundle \
                 only within half of it",
                self.orphan_grace
            ));
        }
        if self.backoff_max < self.backoff_initial {
            return bad(format!(
                "backoff_max ({:?}) is below backoff_initial ({:?})",
                self.backoff_max, self.backoff_initial
            ));
        }
        Ok(())
    }
}

/// Settings of object_store's HTTP client for the cloud backends. Set
/// deliberately so object_store's own retries and spool-upload's attempts do
/// not multiply into minutes: the defaults bound one attempt's retries to
/// `client_retry_timeout` (object_store's own default is 10 retries within
/// 3 minutes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// object_store's retries per request (0 disables them).
    pub client_max_retries: usize,
    /// object_store's cap on the time spent retrying one request.
    pub client_retry_timeout: Duration,
    /// object_store's first backoff.
    pub client_backoff_initial: Duration,
    /// object_store's backoff cap.
    pub client_backoff_max: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout (a 32 MiB PUT must fit in it on a slow link).
    pub request_timeout: Duration,
    /// Allow plain `http://` endpoints (test servers, emulators).
    pub allow_http: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_max_retries: 2,
            client_retry_timeout: Duration::from_secs(10),
            client_backoff_initial: Duration::from_millis(100),
            client_backoff_max: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(120),
            allow_http: false,
        }
    }
}
