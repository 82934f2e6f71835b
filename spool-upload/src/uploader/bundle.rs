//! Bundles: many small packs in one object, one PUT (the crate docs,
//! "Bundles").

use bytes::Bytes;
use object_store::path::Path;
use object_store::{PutMode, PutOptions, PutPayload};
use spool_core::pack::{PackId, PackSummary};
use tokio_util::sync::CancellationToken;

use super::{check_end, check_staged, read_body, ChunksReader, UploadFailure, Uploader};
use crate::backoff;
use crate::error::{Error, Result};
use crate::item::{invalid, read_err, UploadItem};
use crate::key::bundle_key;
use crate::{UploadOutcome, UploadResult};

/// One pack read for a bundle: its bytes, checked and validated.
struct Member {
    item: UploadItem,
    chunks: Vec<Bytes>,
    trailer_sha256: [u8; 32],
    summary: PackSummary,
}

impl Uploader {
    /// Whether a pack of `size` bytes goes up in a bundle
    /// ([`Uploader::upload_bundle`]) rather than alone: bundling is on
    /// (`bundle_bytes` above 0), the store is not `file://`, and the pack
    /// is smaller than the bundle size
    /// ([`bundle_limit`](crate::UploadConfig::bundle_limit)).
    pub fn bundles(&self, size: u64) -> bool {
        let cfg = &self.inner.config;
        self.inner.store.local().is_none() && size < cfg.bundle_limit()
    }

    /// Uploads `items` as one object at a fresh bundle key
    /// (`<prefix>/v2/<spread>/date=<day>/<bundle id>.bundle`): each pack's
    /// staged file is checked and read whole, and validated from the very
    /// bytes read (a corrupt one, or one that changed since it was staged,
    /// fails alone and is left out); the others are concatenated in order
    /// and sent in one PUT (`PutMode::Create` where the store honours it),
    /// retried like a pack's, each attempt at a fresh key (an attempt whose
    /// answer was lost leaves an object no row names, for the sweep). One
    /// result per item, in order: a stored pack's names the bundle's key,
    /// its `offset` in it and its summary; a failed PUT fails every pack
    /// in it alike ([`Error::InBundle`], classified as its cause). The
    /// results are in the order of `items`.
    ///
    /// The caller keeps the bundle within
    /// [`bundle_limit`](crate::UploadConfig::bundle_limit), so it is one
    /// request held in memory.
    pub async fn upload_bundle(
        &self,
        items: Vec<UploadItem>,
        cancel: &CancellationToken,
    ) -> Vec<UploadResult> {
        let read = tokio::task::spawn_blocking(move || {
            items
                .into_iter()
                .map(|item| {
                    let r = read_member(&item);
                    (item, r)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let mut results: Vec<Option<UploadResult>> = Vec::with_capacity(read.len());
        let mut members = Vec::with_capacity(read.len());
        for (item, r) in read {
            match r {
                Ok(m) => {
                    members.push((results.len(), m));
                    results.push(None);
                }
                Err(error) => {
                    let key = self.key(&item.pack_id);
                    results.push(Some(failed(item, key, error, 0)));
                }
            }
        }
        if !members.is_empty() {
            let payload: PutPayload = members
                .iter()
                .flat_map(|(_, m)| m.chunks.iter().cloned())
                .collect();
            let (key, put) = self.put_bundle(payload, members.len(), cancel).await;
            for (at, r) in self.member_results(key, put, members) {
                results[at] = Some(r);
            }
        }
        results.into_iter().flatten().collect()
    }

    /// The results of a bundle's packs (each with its place among the
    /// items), given its PUT's answer.
    fn member_results(
        &self,
        key: Path,
        put: Result<u32, (Error, u32)>,
        members: Vec<(usize, Member)>,
    ) -> Vec<(usize, UploadResult)> {
        let n = members.len();
        let bytes: u64 = members.iter().map(|(_, m)| m.item.size).sum();
        match put {
            Ok(attempts) => {
                tracing::info!(%key, packs = n, bytes, attempts, "uploaded bundle");
                let mut offset = 0;
                members
                    .into_iter()
                    .map(|(at, m)| {
                        let size = m.item.size;
                        let r = UploadResult {
                            item: m.item,
                            key: key.clone(),
                            offset,
                            outcome: UploadOutcome::Uploaded {
                                trailer_sha256: m.trailer_sha256,
                                attempts,
                            },
                            summary: Some(m.summary),
                        };
                        offset += size;
                        (at, r)
                    })
                    .collect()
            }
            Err((error, attempts)) => {
                tracing::warn!(%key, packs = n, error = %error,
                    "bundle upload failed; its packs stay in the spool");
                let shared = std::sync::Arc::new(error);
                members
                    .into_iter()
                    .map(|(at, m)| {
                        let error = match shared.as_ref() {
                            Error::Cancelled { key } => Error::Cancelled { key: key.clone() },
                            _ => Error::InBundle {
                                key: key.to_string(),
                                packs: n,
                                source: shared.clone(),
                            },
                        };
                        (at, failed(m.item, key.clone(), error, attempts))
                    })
                    .collect()
            }
        }
    }

    /// PUTs one bundle's body, retrying retryable failures with backoff,
    /// each attempt at a fresh key. Returns the key of the last attempt and
    /// the attempts it took, or the last error.
    async fn put_bundle(
        &self,
        payload: PutPayload,
        packs: usize,
        cancel: &CancellationToken,
    ) -> (Path, Result<u32, (Error, u32)>) {
        let cfg = &self.inner.config;
        let store = self.inner.store.object_store();
        let mode = if self.inner.store.conditional_create() {
            PutMode::Create
        } else {
            PutMode::Overwrite // a fresh random key: nothing to replace
        };
        let mut attempt = 0;
        loop {
            let key = bundle_key(self.inner.store.prefix(), &PackId::generate());
            if cancel.is_cancelled() {
                let e = Error::Cancelled {
                    key: key.to_string(),
                };
                return (key, Err((e, attempt)));
            }
            attempt += 1;
            let opts = PutOptions {
                mode: mode.clone(),
                ..Default::default()
            };
            let put = Self::cut(&key, cancel, store.put_opts(&key, payload.clone(), opts)).await;
            let e = match put {
                Ok(Ok(_)) => {
                    spool_core::seams::kill_point("after_bundle_put");
                    return (key, Ok(attempt));
                }
                Err(cut) => return (key, Err((cut, attempt))),
                Ok(Err(e)) => {
                    let mut e = self.store_err("PUT bundle", &key, e);
                    if let Error::Store {
                        source, retryable, ..
                    } = &mut e
                    {
                        // something at a key no one else names: try another
                        if matches!(
                            **source,
                            object_store::Error::AlreadyExists { .. }
                                | object_store::Error::Precondition { .. }
                        ) {
                            *retryable = true;
                        }
                    }
                    e
                }
            };
            if !e.is_retryable() || attempt >= cfg.max_attempts {
                return (key, Err((e, attempt)));
            }
            let wait = backoff::delay(cfg.backoff_initial, cfg.backoff_max, attempt);
            tracing::debug!(%key, packs, attempt, ?wait, error = %e,
                "bundle upload attempt failed; retrying at a fresh key after backoff");
            if !backoff::sleep(wait, cancel).await {
                let e = Error::Cancelled {
                    key: key.to_string(),
                };
                return (key, Err((e, attempt)));
            }
        }
    }
}

/// Checks one staged pack, reads it whole and validates it from the bytes
/// read (blocking).
fn read_member(item: &UploadItem) -> Result<Member> {
    let (trailer, trailer_bytes) = check_staged(item)?;
    let body = read_body(&item.path, item.size).map_err(|e| read_err(&item.path, e))?;
    check_end(item, (body.read, body.grown, &body.tail), &trailer_bytes)?;
    let never = std::sync::atomic::AtomicBool::new(false);
    let summary =
        spool_core::pack::validate(ChunksReader::new(&body.chunks), Some(item.pack_id), &never)
            .map_err(|e| invalid(item, body.read, e))?;
    Ok(Member {
        item: item.clone(),
        chunks: body.chunks,
        trailer_sha256: trailer.sha256,
        summary,
    })
}

/// The result of a pack that was not stored.
fn failed(item: UploadItem, key: Path, error: Error, attempts: u32) -> UploadResult {
    UploadResult {
        item,
        key,
        offset: 0,
        outcome: UploadOutcome::Failed(UploadFailure {
            retryable: error.is_retryable(),
            cancelled: matches!(error, Error::Cancelled { .. }),
            corrupt: error.is_corrupt(),
            attempts,
            error,
        }),
        summary: None,
    }
}
