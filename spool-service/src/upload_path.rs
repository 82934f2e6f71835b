//! The upload path shared by the service's own packs and adopted ones: one
//! uploader, one catalog, one pending index (what is owed), one cancel.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spool_catalog::{Catalog, LeaseGuard, LeaseState, PackRow};
use spool_core::pack::now_ms;
use spool_core::{PackId, PackSummary, ReadyPack, Spool};
use spool_upload::{UploadResult, Uploader};
use tokio::sync::watch;

use crate::bound::{human, Bound, Cut, InFlight};

/// A pack uploaded and not yet indexed, or about to be indexed.
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    pub(crate) row: PackRow,
    pub(crate) pack: ReadyPack,
    /// The spool directory that holds its file.
    pub(crate) dir: PathBuf,
}

/// Where a pack came from: the producer that staged it (the
/// catalog row's `source_host` / `source_pid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) host: String,
    /// 0 when the owner record named no pid.
    pub(crate) pid: u32,
}

impl Source {
    /// This process: the producer of its own directory's packs.
    pub(crate) fn this_process(host: &str) -> Source {
        Source {
            host: host.to_string(),
            pid: std::process::id(),
        }
    }

    /// An adopted directory's producer, as its owner record named it when
    /// the adopter took the lock (never the adopter); `unknown` / 0 when
    /// the record could not tell.
    pub(crate) fn adopted(producer: Option<&spool_lock::Producer>) -> Source {
        match producer {
            Some(p) => Source {
                host: p.host.clone(),
                pid: p.pid.unwrap_or(0),
            },
            None => Source {
                host: "unknown".into(),
                pid: 0,
            },
        }
    }
}

/// A sibling this service holds for adoption.
pub(crate) struct Held {
    pub(crate) claim: spool_lock::Claim,
    pub(crate) spool: Arc<Spool>,
}

/// The upload path.
pub(crate) struct UploadPath {
    pub(crate) uploader: Uploader,
    pub(crate) catalog: Arc<dyn Catalog>,
    pub(crate) store_id: String,
    pub(crate) host: String,
    pub(crate) index_batch: usize,
    /// At most this many packs of one pipeline run are out of their spool
    /// and not yet in the catalog (see `pipeline`).
    pub(crate) pipeline_depth: usize,
    /// How long an index batch waits for more uploads to land.
    pub(crate) index_linger: std::time::Duration,
    /// Catalog scope: every index insert is fenced and nothing moves without
    /// the lease.
    pub(crate) fenced: bool,
    pub(crate) lease: Option<watch::Receiver<LeaseState>>,
    pub(crate) own: Arc<Spool>,
    pub(crate) held: HashMap<PathBuf, Held>,
    pub(crate) pending: Vec<Owed>,
    pub(crate) summaries: HashMap<PackId, PackSummary>,
    pub(crate) counters: Counters,
    /// What the path waits on now (the snapshot's `waiting_on`).
    pub(crate) inflight: InFlight,
}

/// The counters the snapshot reads live.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) uploaded: AtomicU64,
    pub(crate) indexed: AtomicU64,
}

/// Counters the snapshot reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters {
    /// Packs uploaded and packs indexed, shared with the snapshot, which
    /// reads them live (not as of the last cycle): a pack's row is counted
    /// the moment the catalog confirmed it.
    pub(crate) progress: Arc<Progress>,
    pub(crate) upload_failures: u64,
    pub(crate) cancelled_uploads: u64,
    pub(crate) quarantined: u64,
    pub(crate) rejected: u64,
    pub(crate) last_error: Option<String>,
    /// The store refuses the whole destination (401, 403, no such bucket):
    /// what it said, until an upload lands again.
    pub(crate) store_refused: Option<String>,
    /// The catalog refuses the whole destination (credentials, permission):
    /// what it said, until an index lands again.
    pub(crate) catalog_refused: Option<String>,
}

impl UploadPath {
    pub(crate) fn lease_state(&self) -> Option<LeaseState> {
        self.lease.as_ref().map(|rx| rx.borrow().clone())
    }

    /// The guard to fence with, when fenced: `Err` when the lease is not held.
    pub(crate) fn fence(&self) -> Result<Option<LeaseGuard>, String> {
        if !self.fenced {
            return Ok(None);
        }
        match self.lease_state() {
            Some(s) if s.held() && !s.latched => Ok(s.guard),
            _ => Err("the catalog-scope lease is not held: nothing is indexed without it".into()),
        }
    }

    /// Whether own work may run (catalog scope needs the lease).
    pub(crate) fn may_work(&self) -> bool {
        self.fence().is_ok()
    }

    pub(crate) fn note_error(&mut self, e: impl Into<String>) {
        let e = e.into();
        tracing::warn!(dir = %self.own.dir().display(), "{e}");
        self.counters.last_error = Some(e);
    }

    /// Renames a corrupt pack of `spool` to `<id>.quarantined` (kept,
    /// counted, reported by `spool verify`) and counts it. The reason is
    /// the corruption found (by validation, or by the upload's hash).
    pub(crate) async fn quarantine(&mut self, spool: Arc<Spool>, pack: &ReadyPack, why: String) {
        let p = pack.clone();
        match tokio::task::spawn_blocking(move || spool.quarantine(&p, &why)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.note_error(format!(
                "quarantining corrupt pack {}: {e}",
                pack.path.display()
            )),
            Err(_) => self.note_error(format!(
                "quarantining corrupt pack {}: the task failed",
                pack.path.display()
            )),
        }
        self.summaries.remove(&pack.id);
        self.counters.quarantined += 1;
    }

    /// The catalog row of an uploaded pack staged in `dir` (under `w<k>/`
    /// when `ordinal` is `Some(k)`) by `source`.
    pub(crate) fn row(
        &self,
        result: &UploadResult,
        summary: &PackSummary,
        dir: &Path,
        ordinal: Option<u32>,
        source: &Source,
    ) -> PackRow {
        PackRow {
            pack_id: summary.id.to_hex(),
            object_key: result.key.to_string(),
            store_id: self.store_id.clone(),
            sha256: hex::encode(result.outcome.sha256().unwrap_or(summary.sha256)),
            bytes: summary.bytes,
            records: summary.records,
            source_host: source.host.clone(),
            source_pid: source.pid,
            rank_dir: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ordinal,
            created_at_ms: summary.created_ms,
            indexed_at_ms: now_ms(),
        }
    }

    /// Counts one upload's answer and says what a failure means: a refusal
    /// of the whole destination is reported once (and shown in the
    /// snapshot) until an upload lands again.
    pub(crate) fn count_upload(&mut self, r: &UploadResult, store: &str) {
        match r.outcome.failure() {
            None => {
                self.counters
                    .progress
                    .uploaded
                    .fetch_add(1, Ordering::Relaxed);
                self.counters.store_refused = None;
            }
            Some(f) if f.cancelled => self.counters.cancelled_uploads += 1,
            Some(f) if f.destination_wide() => {
                self.counters.upload_failures += 1;
                let msg = format!(
                    "store {store} refuses this destination ({}); uploads to it stop and back \
                     off, every pack stays ready and goes up on its own once the cause is fixed",
                    f.error
                );
                if self.counters.store_refused.is_none() {
                    tracing::error!(dir = %self.own.dir().display(), "{msg}");
                }
                self.counters.store_refused = Some(msg.clone());
                self.counters.last_error = Some(msg);
            }
            Some(f) => {
                self.counters.upload_failures += 1;
                let msg = format!("upload of {} failed: {}", r.item.path.display(), f.error);
                self.note_error(msg);
            }
        }
    }

    /// Indexes `batch` (fenced where lease-gated) under `bound` and removes
    /// the files of what landed; what did not — refused, failed, or cut by
    /// the deadline or a stop — joins the pending index (owed, never lost,
    /// counted once: only an answered `Ok` counts as indexed). Returns the
    /// ids indexed.
    pub(crate) async fn index(&mut self, batch: Vec<Owed>, bound: &Bound) -> Vec<PackId> {
        let mut done = Vec::new();
        let mut chunks = batch.chunks(self.index_batch.max(1));
        while let Some(chunk) = chunks.next() {
            let fence = match self.fence() {
                Ok(f) => f,
                Err(e) => {
                    self.note_error(e);
                    self.pending.extend(chunk.iter().cloned());
                    continue;
                }
            };
            let rows: Vec<PackRow> = chunk.iter().map(|o| o.row.clone()).collect();
            let server = self.catalog.server();
            let what = format!("indexing {} pack(s)", chunk.len());
            spool_core::seams::kill_point("before_index");
            let answer = {
                let _busy = self.inflight.begin(format!("catalog {server}: {what}"));
                bound.run(self.catalog.index(&rows, fence.as_ref())).await
            };
            match answer {
                Ok(Ok(())) => {
                    spool_core::seams::kill_point("after_index");
                    self.counters.catalog_refused = None;
                    self.counters
                        .progress
                        .indexed
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    for o in chunk {
                        self.remove_file(o).await;
                        self.summaries.remove(&o.pack.id);
                        done.push(o.pack.id);
                    }
                }
                Ok(Err(e)) => {
                    let retryable = e.is_retryable();
                    self.note_index_failure(&server, &what, Err(e));
                    self.pending.extend(chunk.iter().cloned());
                    // the same refusal awaits every other chunk
                    if !retryable {
                        for rest in chunks.by_ref() {
                            self.pending.extend(rest.iter().cloned());
                        }
                    }
                }
                Err(cut) => {
                    self.note_index_failure(&server, &what, Ok(cut));
                    self.pending.extend(chunk.iter().cloned());
                    for rest in chunks.by_ref() {
                        self.pending.extend(rest.iter().cloned());
                    }
                }
            }
        }
        done
    }

    /// Says why an index call (`what`, to `server`) left its packs owed:
    /// the catalog's error (`Err`; a refusal of the destination is kept
    /// for the snapshot) or the cut (`Ok`; a stop's cut says nothing).
    pub(crate) fn note_index_failure(
        &mut self,
        server: &str,
        what: &str,
        why: Result<Cut, spool_catalog::Error>,
    ) {
        match why {
            Err(e) => {
                if catalog_refuses(&e) {
                    self.counters.catalog_refused =
                        Some(format!("catalog {server} refuses this destination: {e}"));
                }
                self.note_error(format!(
                    "{what} into {server} failed (owed, retried next cycle): {e}"
                ));
            }
            Ok(Cut::Deadline(waited)) => self.note_error(format!(
                "catalog {server} did not answer within {} while {what} (the deadline of this \
                 flush or cycle): owed, indexed again next cycle",
                human(waited)
            )),
            Ok(Cut::Cancelled) => {}
        }
    }

    /// Retries the pending index under `bound`.
    pub(crate) async fn index_pending(&mut self, bound: &Bound) {
        if self.pending.is_empty() || bound.is_over() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        self.index(batch, bound).await;
    }

    /// The refusal of the destination (store first, then catalog), if any.
    pub(crate) fn refused(&self) -> Option<String> {
        self.counters
            .store_refused
            .clone()
            .or_else(|| self.counters.catalog_refused.clone())
    }

    async fn remove_file(&mut self, o: &Owed) {
        let spool = if o.dir == self.own.dir() {
            Some(self.own.clone())
        } else {
            self.held.get(&o.dir).map(|h| h.spool.clone())
        };
        // A sibling let go since keeps the file: its successor uploads it
        // again (idempotent) and indexes it.
        let Some(spool) = spool else { return };
        let pack = o.pack.clone();
        let r = tokio::task::spawn_blocking(move || spool.remove(&pack)).await;
        if let Ok(Err(e)) = r {
            self.note_error(format!(
                "removing indexed pack {}: {e}",
                o.pack.path.display()
            ));
        }
    }
}

/// A catalog failure that refuses the whole destination (credentials,
/// permission, schema, an unknown setting), not one batch: a retryable
/// failure or a fence is not one.
fn catalog_refuses(e: &spool_catalog::Error) -> bool {
    !e.is_retryable()
        && !matches!(
            e,
            spool_catalog::Error::Fenced { .. } | spool_catalog::Error::InvalidRow { .. }
        )
}
