//! What the drain counts for the snapshot: packs uploaded and indexed (read
//! live through [`Progress`]), failures, the last error, and a refusal of
//! the whole destination by the store or the catalog (reported once, kept
//! until a call lands again).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::stage_times::StageTimes;

/// The two counters the snapshot reads live, not as of the last cycle: a
/// pack counts as uploaded the moment its upload landed, and as indexed the
/// moment the catalog confirmed its row.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    uploaded: AtomicU64,
    indexed: AtomicU64,
}

impl Progress {
    /// Packs uploaded so far.
    pub(crate) fn uploaded(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }

    /// Packs whose rows the catalog confirmed so far.
    pub(crate) fn indexed(&self) -> u64 {
        self.indexed.load(Ordering::Relaxed)
    }
}

/// The drain's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    progress: Arc<Progress>,
    upload_failures: u64,
    cancelled_uploads: u64,
    quarantined: u64,
    rejected: u64,
    /// Bundles stored, and the packs they held.
    bundles: u64,
    bundled_packs: u64,
    /// Bytes of stored bundles this service stopped indexing.
    orphaned_bytes: u64,
    last_error: Option<String>,
    /// The store refuses the whole destination (401, 403, no such bucket):
    /// what it said, until an upload lands again.
    store_refused: Option<String>,
    /// The catalog refuses the whole destination (credentials, permission):
    /// what it said, until an index lands again.
    catalog_refused: Option<String>,
    /// Where the drains' time went.
    stage_times: StageTimes,
}

impl Counters {
    /// Counters that count `progress` (shared with the snapshot).
    pub(crate) fn new(progress: Arc<Progress>) -> Counters {
        Counters {
            progress,
            ..Counters::default()
        }
    }

    /// Packs uploaded so far.
    pub(crate) fn uploaded(&self) -> u64 {
        self.progress.uploaded()
    }

    /// Packs indexed so far.
    pub(crate) fn indexed(&self) -> u64 {
        self.progress.indexed()
    }

    /// Uploads that failed (not cut by a cancel).
    pub(crate) fn upload_failures(&self) -> u64 {
        self.upload_failures
    }

    /// Uploads a cancel cut.
    pub(crate) fn cancelled_uploads(&self) -> u64 {
        self.cancelled_uploads
    }

    /// Packs renamed `.quarantined`.
    pub(crate) fn quarantined(&self) -> u64 {
        self.quarantined
    }

    /// Own packs renamed `.rejected`.
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Bundles stored (objects holding more than one pack).
    pub(crate) fn bundles(&self) -> u64 {
        self.bundles
    }

    /// Packs stored in those bundles.
    pub(crate) fn bundled_packs(&self) -> u64 {
        self.bundled_packs
    }

    /// Bytes of packs stored in bundles that no row will name: this
    /// service stopped indexing them (their rows were owed past half of
    /// `upload.orphan_grace`) and sent the packs again in fresh bundles.
    /// `spool sweep` reclaims them once the bundle is `orphan_grace` old.
    pub(crate) fn orphaned_bytes(&self) -> u64 {
        self.orphaned_bytes
    }

    /// A pack of `bytes` in a stored bundle will never be indexed there.
    pub(super) fn count_orphaned(&mut self, bytes: u64) {
        self.orphaned_bytes += bytes;
    }

    /// One bundle of `packs` packs was stored.
    pub(super) fn count_bundle(&mut self, packs: usize) {
        self.bundles += 1;
        self.bundled_packs += packs as u64;
    }

    /// Where the drains' time went so far.
    pub(crate) fn stage_times(&self) -> StageTimes {
        self.stage_times
    }

    /// The pipeline's clock charges its stages here.
    pub(super) fn stage_times_mut(&mut self) -> &mut StageTimes {
        &mut self.stage_times
    }

    /// One listing of the own directory took `took`.
    pub(crate) fn count_listing(&mut self, took: Duration) {
        self.stage_times.list += took;
    }

    /// The last error noted.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The refusal of the destination (store first, then catalog), if any.
    pub(crate) fn refused(&self) -> Option<&str> {
        self.store_refused
            .as_deref()
            .or(self.catalog_refused.as_deref())
    }

    pub(super) fn note_error(&mut self, e: String) {
        self.last_error = Some(e);
    }

    pub(super) fn count_uploaded(&mut self) {
        self.progress.uploaded.fetch_add(1, Ordering::Relaxed);
        self.store_refused = None;
    }

    pub(super) fn count_indexed(&mut self, n: usize) {
        self.progress.indexed.fetch_add(n as u64, Ordering::Relaxed);
        self.catalog_refused = None;
    }

    pub(super) fn count_cancelled_upload(&mut self) {
        self.cancelled_uploads += 1;
    }

    pub(super) fn count_upload_failure(&mut self) {
        self.upload_failures += 1;
    }

    /// Keeps the store's refusal of the destination; true the first time
    /// (the caller reports it once).
    pub(super) fn store_refuses(&mut self, msg: String) -> bool {
        let first = self.store_refused.is_none();
        self.store_refused = Some(msg.clone());
        self.last_error = Some(msg);
        first
    }

    pub(super) fn catalog_refuses(&mut self, msg: String) {
        self.catalog_refused = Some(msg);
    }

    pub(super) fn count_quarantined(&mut self) {
        self.quarantined += 1;
    }

    pub(super) fn count_rejected(&mut self) {
        self.rejected += 1;
    }
}
