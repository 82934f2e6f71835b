//! The uploader: staged packs in, one outcome per pack out.

use std::path::Path as FsPath;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload};
use sha2::{Digest, Sha256};
use spool_core::pack::{PackId, PackSummary, Trailer, TRAILER_HASH_OFFSET, TRAILER_LEN};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::backoff;
use crate::config::UploadConfig;
use crate::error::{Error, Result};
use crate::item::{invalid, keep_tail, mismatch, read_err, UploadItem};
use crate::key::object_key;
use crate::local::{Job, LocalDir, Published};
use crate::retryable;
use crate::store::Store;

mod bundle;

/// What happened to one pack.
#[derive(Debug)]
pub struct UploadResult {
    /// The pack.
    pub item: UploadItem,
    /// Its object key: its own, or its bundle's.
    pub key: Path,
    /// Where the pack starts in that object: 0 for a pack alone, its
    /// place in the bundle otherwise (the pack is its `item.size` bytes
    /// from here).
    pub offset: u64,
    /// The outcome.
    pub outcome: UploadOutcome,
    /// The pack's summary when this upload validated the whole pack from
    /// the very bytes it sent (see [`Uploader::validates_whole`]: a single
    /// PUT's body read whole, a `file://` copy read back, each checked by
    /// [`spool_core::pack::validate`] before anything is visible at the
    /// key), so its caller need not read and hash the file a second time.
    /// `None` for a multipart upload, a pack found in the store before
    /// anything was read, and a failure.
    pub summary: Option<PackSummary>,
}

/// The outcome of one pack's upload.
#[derive(Debug)]
pub enum UploadOutcome {
    /// This call put the object.
    Uploaded {
        /// The pack's trailer checksum (the SHA-256 of every byte before
        /// the trailer's hash field), checked against the bytes sent.
        trailer_sha256: [u8; 32],
        /// Attempts it took (1 = first time).
        attempts: u32,
    },
    /// The same pack (same size and checksum) was already at the key.
    Skipped {
        /// The pack's trailer checksum, equal to the stored object's.
        trailer_sha256: [u8; 32],
    },
    /// Not uploaded; the pack stays in the spool.
    Failed(UploadFailure),
}

impl UploadOutcome {
    /// Whether the pack is now in the store (uploaded or already there).
    pub fn is_stored(&self) -> bool {
        matches!(
            self,
            UploadOutcome::Uploaded { .. } | UploadOutcome::Skipped { .. }
        )
    }

    /// The failure, if it failed.
    pub fn failure(&self) -> Option<&UploadFailure> {
        match self {
            UploadOutcome::Failed(f) => Some(f),
            _ => None,
        }
    }
}

/// Why a pack was not uploaded.
#[derive(Debug)]
pub struct UploadFailure {
    /// Trying again later can succeed (store down, 5xx, 429, timeouts, a
    /// cancel). `false`: it never will as things are (403, a conflict at the
    /// key, a pack over the in-flight bound, staged bytes that changed).
    pub retryable: bool,
    /// A cancel cut it. Not a failure of the store: the pack goes back to
    /// the front of its queue.
    pub cancelled: bool,
    /// The staged bytes do not match the pack's checksum
    /// ([`Error::ChecksumMismatch`]): the pack is corrupt, to be
    /// quarantined (not retryable either).
    pub corrupt: bool,
    /// Attempts made (0 if none started).
    pub attempts: u32,
    /// The last error.
    pub error: Error,
}

impl UploadFailure {
    /// A refusal of the whole destination (401, 403, a missing bucket, a bad
    /// request): not retryable, not cut, not a corrupt pack, and not about this pack
    /// ([`Error::is_pack_specific`]). The pack must stay ready.
    pub fn destination_wide(&self) -> bool {
        !self.retryable && !self.cancelled && !self.corrupt && !self.error.is_pack_specific()
    }
}

/// Uploads staged packs to one [`Store`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Uploader {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    config: UploadConfig,
}

/// What one successful attempt did, with the summary of the pack when the
/// attempt validated it whole (see [`UploadResult::summary`]).
enum Done {
    Uploaded([u8; 32], Option<PackSummary>),
    Skipped([u8; 32], Option<PackSummary>),
}

impl Uploader {
    /// An uploader to `store`. Refuses a configuration that cannot work.
    pub fn new(store: Store, config: UploadConfig) -> Result<Uploader> {
        config.validate()?;
        Ok(Uploader {
            inner: Arc::new(Inner { store, config }),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The configuration.
    pub fn config(&self) -> &UploadConfig {
        &self.inner.config
    }

    /// Whether [`Uploader::upload_one`] of a pack of `size` bytes validates
    /// it whole before anything of it becomes visible at its key, returning
    /// its summary ([`UploadResult::summary`]): a single PUT (at most
    /// `multipart_threshold`) to a store that honours a conditional create
    /// (the body is read before anything else, so even a pack found already
    /// stored comes back with its summary), and any upload to a `file://`
    /// store (validated as it is copied, before the publish; a pack found
    /// at its key before the copy comes back without one); never a pack
    /// over `max_in_flight_bytes` (refused unread). A caller may skip its
    /// own validation of such a pack, and validates one that comes back
    /// stored without a summary.
    pub fn validates_whole(&self, size: u64) -> bool {
        let cfg = &self.inner.config;
        if self.refuses_unread(size) {
            return false; // refused before anything is read
        }
        if self.inner.store.local().is_some() {
            return true; // validated as it is copied
        }
        self.inner.store.conditional_create() && size <= cfg.multipart_threshold
    }

    /// Whether [`Uploader::upload_one`] refuses a pack of `size` bytes
    /// unread: over `max_in_flight_bytes`, it could never fit in a round
    /// ([`Error::TooLarge`]), so nothing of it is worth reading or hashing
    /// first (one such pack must not stall everything behind it).
    pub fn refuses_unread(&self, size: u64) -> bool {
        size > self.inner.config.max_in_flight_bytes
    }

    /// A pack's object key in this store.
    pub fn key(&self, id: &PackId) -> Path {
        object_key(self.inner.store.prefix(), id)
    }

    /// Uploads one pack: checks the staged file, HEADs the key (an equal
    /// pack already there is skipped, a different object is a conflict),
    /// then PUTs it — one conditional PUT below `multipart_threshold`, a
    /// streamed multipart upload above — retrying retryable failures with
    /// capped exponential backoff up to `max_attempts`.
    pub async fn upload_one(&self, item: UploadItem, cancel: &CancellationToken) -> UploadResult {
        let key = self.key(&item.pack_id);
        let (outcome, summary) = self.upload_with_retries(&item, &key, cancel).await;
        match &outcome {
            UploadOutcome::Uploaded { attempts, .. } => tracing::info!(
                pack = %item.path.display(), %key, bytes = item.size, attempts, "uploaded pack"
            ),
            UploadOutcome::Skipped { .. } => tracing::info!(
                pack = %item.path.display(), %key, "pack already in the store with the same checksum; skipped"
            ),
            UploadOutcome::Failed(f) if f.cancelled => tracing::info!(
                pack = %item.path.display(), %key, "upload cancelled; the pack stays in the spool"
            ),
            UploadOutcome::Failed(f) => tracing::warn!(
                pack = %item.path.display(), %key, retryable = f.retryable, attempts = f.attempts,
                error = %f.error, "upload failed; the pack stays in the spool"
            ),
        }
        UploadResult {
            item,
            key,
            offset: 0,
            outcome,
            summary,
        }
    }

    async fn upload_with_retries(
        &self,
        item: &UploadItem,
        key: &Path,
        cancel: &CancellationToken,
    ) -> (UploadOutcome, Option<PackSummary>) {
        let cfg = &self.inner.config;
        let fail = |error: Error, attempts: u32| {
            let cancelled = matches!(error, Error::Cancelled { .. });
            let failure = UploadFailure {
                retryable: error.is_retryable(),
                cancelled,
                corrupt: error.is_corrupt(),
                attempts,
                error,
            };
            (UploadOutcome::Failed(failure), None)
        };
        if self.refuses_unread(item.size) {
            let error = Error::TooLarge {
                path: item.path.clone(),
                size: item.size,
                limit: cfg.max_in_flight_bytes,
            };
            return fail(error, 0);
        }
        let cancelled = || Error::Cancelled {
            key: key.to_string(),
        };
        let mut attempt = 0;
        loop {
            if cancel.is_cancelled() {
                return fail(cancelled(), attempt);
            }
            attempt += 1;
            match self.attempt(item, key, cancel).await {
                Ok(Done::Uploaded(trailer_sha256, summary)) => {
                    let outcome = UploadOutcome::Uploaded {
                        trailer_sha256,
                        attempts: attempt,
                    };
                    return (outcome, summary);
                }
                Ok(Done::Skipped(trailer_sha256, summary)) => {
                    return (UploadOutcome::Skipped { trailer_sha256 }, summary)
                }
                Err(e) if !e.is_retryable() || attempt >= cfg.max_attempts => {
                    return fail(e, attempt)
                }
                Err(e) if matches!(e, Error::Cancelled { .. }) => return fail(e, attempt),
                Err(e) => {
                    let wait = backoff::delay(cfg.backoff_initial, cfg.backoff_max, attempt);
                    tracing::debug!(
                        pack = %item.path.display(), %key, attempt, ?wait, error = %e,
                        "upload attempt failed; retrying after backoff"
                    );
                    if !backoff::sleep(wait, cancel).await {
                        return fail(cancelled(), attempt);
                    }
                }
            }
        }
    }

    fn store_err(&self, op: &'static str, key: &Path, source: object_store::Error) -> Error {
        Error::Store {
            op,
            key: key.to_string(),
            store: self.inner.store.description().to_string(),
            retryable: retryable::is_retryable(&source),
            source: Box::new(source),
        }
    }

    /// Runs `fut` unless `cancel` fires first.
    async fn cut<T>(
        key: &Path,
        cancel: &CancellationToken,
        fut: impl std::future::Future<Output = T>,
    ) -> Result<T> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Error::Cancelled { key: key.to_string() }),
            r = fut => Ok(r),
        }
    }

    async fn attempt(
        &self,
        item: &UploadItem,
        key: &Path,
        cancel: &CancellationToken,
    ) -> Result<Done> {
        let (trailer, trailer_bytes) = read_staged_trailer(item).await?;
        if let Some(local) = self.inner.store.local() {
            return self
                .put_local(local, item, key, &trailer, &trailer_bytes, cancel)
                .await;
        }
        let multipart = item.size > self.inner.config.multipart_threshold;
        // One request per fresh pack: a single PUT to a store that honours
        // `PutMode::Create` goes up with no HEAD first; only the store's
        // "it exists" leads to the HEAD + trailer read (in `put_single`).
        // A multipart upload (no conditional complete in object_store) or a
        // store without conditional create looks first, so it never
        // replaces an object.
        let one_request = !multipart && self.inner.store.conditional_create();
        if !one_request {
            if let Some(done) = self.preflight(item, key, &trailer, cancel).await? {
                return Ok(done);
            }
        }
        if multipart {
            self.put_multipart(item, key, &trailer, &trailer_bytes, cancel)
                .await
        } else {
            self.put_single(item, key, &trailer, &trailer_bytes, cancel)
                .await
        }
    }

    /// HEAD the key: `None` if nothing is there, `Some(Skipped)` if the
    /// same pack is, a conflict if anything else is.
    async fn preflight(
        &self,
        item: &UploadItem,
        key: &Path,
        ours: &Trailer,
        cancel: &CancellationToken,
    ) -> Result<Option<Done>> {
        let store = self.inner.store.object_store();
        match Self::cut(key, cancel, store.head(key)).await? {
            Ok(meta) => self
                .compare_existing(item, key, meta.size, ours, cancel)
                .await
                .map(Some),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err("HEAD", key, e)),
        }
    }

    /// An object of `size` bytes is at `key`: the same pack (same size, id
    /// and checksum, read by one ranged GET of its trailer) or a conflict.
    async fn compare_existing(
        &self,
        item: &UploadItem,
        key: &Path,
        size: u64,
        ours: &Trailer,
        cancel: &CancellationToken,
    ) -> Result<Done> {
        let conflict = |existing: String| Error::Conflict {
            key: key.to_string(),
            store: self.inner.store.description().to_string(),
            path: item.path.clone(),
            existing,
            ours: format!("{} bytes, sha256 {}", ours.total_len, ours.sha256_hex()),
        };
        if size != ours.total_len {
            return Err(conflict(format!("{size} bytes")));
        }
        let store = self.inner.store.object_store();
        let range = size - TRAILER_LEN as u64..size;
        let bytes = match Self::cut(key, cancel, store.get_range(key, range)).await? {
            Ok(b) => b,
            Err(e @ object_store::Error::NotFound { .. }) => {
                // It went away between the HEAD and the GET: look again later.
                let mut err = self.store_err("GET trailer", key, e);
                if let Error::Store { retryable, .. } = &mut err {
                    *retryable = true;
                }
                return Err(err);
            }
            Err(e) => return Err(self.store_err("GET trailer", key, e)),
        };
        let Ok(arr) = <&[u8; TRAILER_LEN]>::try_from(bytes.as_ref()) else {
            return Err(conflict(format!(
                "{size} bytes whose trailer read returned {} bytes",
                bytes.len()
            )));
        };
        match Trailer::parse(arr) {
            Ok(theirs) if theirs.sha256 == ours.sha256 && theirs.id == ours.id => {
                Ok(Done::Skipped(ours.sha256, None))
            }
            Ok(theirs) => Err(conflict(format!(
                "{size} bytes, pack {} with sha256 {}",
                theirs.id,
                theirs.sha256_hex()
            ))),
            Err(e) => Err(conflict(format!("{size} bytes, not a pack: {e}"))),
        }
    }

    /// A `file://` store: the fast path of [`crate::local`] on the blocking
    /// pool (it checks `cancel` between chunks and removes its staging file
    /// before it returns); a key found taken is compared as for any store.
    async fn put_local(
        &self,
        local: &Arc<LocalDir>,
        item: &UploadItem,
        key: &Path,
        trailer: &Trailer,
        trailer_bytes: &[u8; TRAILER_LEN],
        cancel: &CancellationToken,
    ) -> Result<Done> {
        let (local, owned) = (local.clone(), (item.clone(), key.clone(), *trailer_bytes));
        let token = cancel.clone();
        let put = tokio::task::spawn_blocking(move || {
            let (item, key, trailer_bytes) = &owned;
            local.put(&Job {
                item,
                key,
                trailer_bytes,
                cancel: &token,
            })
        });
        let published = match put.await {
            Ok(r) => r?,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        match published {
            Published::Created(summary) => Ok(Done::Uploaded(trailer.sha256, Some(summary))),
            Published::Exists => self.taken(item, key, trailer, cancel).await,
        }
    }

    /// The store refused a create because something is at the key (a
    /// predecessor, or our own earlier attempt whose answer was lost): the
    /// same pack, or a conflict.
    async fn taken(
        &self,
        item: &UploadItem,
        key: &Path,
        trailer: &Trailer,
        cancel: &CancellationToken,
    ) -> Result<Done> {
        match self.preflight(item, key, trailer, cancel).await? {
            Some(done) => Ok(done),
            None => Err(Error::Store {
                op: "PUT",
                key: key.to_string(),
                store: self.inner.store.description().to_string(),
                retryable: true,
                source: Box::new(object_store::Error::Generic {
                    store: "spool-upload",
                    source:
                        "the store refused a create as existing, then reported nothing at the key"
                            .into(),
                }),
            }),
        }
    }

    async fn put_single(
        &self,
        item: &UploadItem,
        key: &Path,
        trailer: &Trailer,
        trailer_bytes: &[u8; TRAILER_LEN],
        cancel: &CancellationToken,
    ) -> Result<Done> {
        // One trip to the blocking pool: open, read in chunks, validate the
        // whole pack from the bytes read (its hash included: one pass).
        let (path, size, id) = (item.path.clone(), item.size, item.pack_id);
        let (read, validated) = tokio::task::spawn_blocking(move || {
            let read = read_body(&path, size)?;
            let complete = read.read == size && !read.grown;
            let validated = complete.then(|| {
                let never = std::sync::atomic::AtomicBool::new(false);
                spool_core::pack::validate(ChunksReader::new(&read.chunks), Some(id), &never)
            });
            Ok((read, validated))
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        .map_err(|source| read_err(&item.path, source))?;
        check_end(item, (read.read, read.grown, &read.tail), trailer_bytes)?;
        let summary = match validated {
            Some(Ok(summary)) => summary,
            Some(Err(e)) => return Err(invalid(item, read.read, e)),
            None => unreachable!("check_end refuses a body of another size"),
        };
        let body = read.chunks;
        let store = self.inner.store.object_store();
        let mode = if self.inner.store.conditional_create() {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let payload: PutPayload = body.into_iter().collect();
        match Self::cut(key, cancel, store.put_opts(key, payload, opts)).await? {
            Ok(_) => Ok(Done::Uploaded(trailer.sha256, Some(summary))),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => match self.taken(item, key, trailer, cancel).await? {
                Done::Skipped(sha256, _) => Ok(Done::Skipped(sha256, Some(summary))),
                done => Ok(done),
            },
            Err(e) => Err(self.store_err("PUT", key, e)),
        }
    }

    async fn put_multipart(
        &self,
        item: &UploadItem,
        key: &Path,
        trailer: &Trailer,
        trailer_bytes: &[u8; TRAILER_LEN],
        cancel: &CancellationToken,
    ) -> Result<Done> {
        let store = self.inner.store.object_store();
        let mut file = tokio::fs::File::open(&item.path)
            .await
            .map_err(|source| read_err(&item.path, source))?;
        let opts = PutMultipartOptions::default();
        let mut upload = Self::cut(key, cancel, store.put_multipart_opts(key, opts))
            .await?
            .map_err(|e| self.store_err("multipart create", key, e))?;
        let result = self
            .stream_parts(
                item,
                key,
                &mut file,
                &mut *upload,
                (trailer, trailer_bytes),
                cancel,
            )
            .await;
        let err = match result {
            Ok(()) => match Self::cut(key, cancel, upload.complete()).await {
                Ok(Ok(_)) => return Ok(Done::Uploaded(trailer.sha256, None)),
                Ok(Err(e)) => self.store_err("multipart complete", key, e),
                Err(cancelled) => cancelled,
            },
            Err(e) => e,
        };
        self.abort(key, &mut *upload).await;
        Err(err)
    }

    async fn stream_parts(
        &self,
        item: &UploadItem,
        key: &Path,
        file: &mut tokio::fs::File,
        upload: &mut dyn object_store::MultipartUpload,
        (trailer, trailer_bytes): (&Trailer, &[u8; TRAILER_LEN]),
        cancel: &CancellationToken,
    ) -> Result<()> {
        let cfg = &self.inner.config;
        let mut hash = BodyHash::new(item.size);
        let mut sent: u64 = 0;
        let mut tail: Vec<u8> = Vec::with_capacity(TRAILER_LEN);
        let mut parts = FuturesUnordered::new();
        loop {
            while parts.len() < cfg.part_concurrency && sent < item.size {
                let want = (item.size - sent).min(cfg.part_size as u64) as usize;
                let chunks = read_chunks(file, want, &mut hash, &mut tail)
                    .await
                    .map_err(|source| read_err(&item.path, source))?;
                let n: usize = chunks.iter().map(Bytes::len).sum();
                if n < want {
                    return Err(mismatch(
                        item,
                        format!("the file ended at {} bytes", sent + n as u64),
                    ));
                }
                sent += n as u64;
                parts.push(upload.put_part(chunks.into_iter().collect()));
            }
            if parts.is_empty() {
                break;
            }
            match Self::cut(key, cancel, parts.next()).await? {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(self.store_err("multipart part", key, e)),
                None => break,
            }
        }
        let mut extra = [0u8; 1];
        let grown = file
            .read(&mut extra)
            .await
            .map_err(|source| read_err(&item.path, source))?
            != 0;
        check_end(item, (sent, grown, &tail), trailer_bytes)?;
        // Before the completion: a mismatch aborts the upload, so nothing
        // becomes visible at the key.
        hash.check(item, trailer)
    }

    /// Aborts a multipart upload so no parts are left behind, within
    /// `abort_timeout` (past it, the store is likely down; its lifecycle rule
    /// for incomplete uploads is the backstop).
    async fn abort(&self, key: &Path, upload: &mut dyn object_store::MultipartUpload) {
        match tokio::time::timeout(self.inner.config.abort_timeout, upload.abort()).await {
            Ok(Ok(())) => tracing::debug!(%key, "multipart upload aborted"),
            Ok(Err(e)) => {
                tracing::warn!(%key, error = %e, "aborting a multipart upload failed; its parts may stay until the bucket's lifecycle rule removes them")
            }
            Err(_) => {
                tracing::warn!(%key, timeout = ?self.inner.config.abort_timeout, "aborting a multipart upload timed out; its parts may stay until the bucket's lifecycle rule removes them")
            }
        }
    }
}

/// A damaged trailer: the pack is corrupt (quarantined, not rejected).
fn corrupt_trailer(item: &UploadItem, problem: String) -> Error {
    Error::CorruptTrailer {
        path: item.path.clone(),
        problem,
    }
}

/// Re-checks a staged file against what was staged (see
/// [`check_staged`]), on the blocking pool.
async fn read_staged_trailer(item: &UploadItem) -> Result<(Trailer, [u8; TRAILER_LEN])> {
    let owned = item.clone();
    tokio::task::spawn_blocking(move || check_staged(&owned))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Re-checks a staged file against what was staged: its size, and a trailer
/// naming its id and its length. Returns the trailer and its bytes.
pub(crate) fn check_staged(item: &UploadItem) -> Result<(Trailer, [u8; TRAILER_LEN])> {
    use std::io::{Read, Seek};
    let mut file = match std::fs::File::open(&item.path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(mismatch(item, "the file is gone".into()))
        }
        Err(e) => return Err(read_err(&item.path, e)),
    };
    let size = file
        .metadata()
        .map_err(|source| read_err(&item.path, source))?
        .len();
    if size != item.size {
        return Err(mismatch(
            item,
            format!("it is {size} bytes, it was staged as {}", item.size),
        ));
    }
    if size < TRAILER_LEN as u64 {
        return Err(corrupt_trailer(
            item,
            format!("it is {size} bytes, shorter than a trailer"),
        ));
    }
    let mut bytes = [0u8; TRAILER_LEN];
    file.seek(std::io::SeekFrom::Start(size - TRAILER_LEN as u64))
        .map_err(|source| read_err(&item.path, source))?;
    file.read_exact(&mut bytes)
        .map_err(|source| read_err(&item.path, source))?;
    let trailer = Trailer::parse(&bytes)
        .map_err(|e| corrupt_trailer(item, format!("its trailer is damaged ({e})")))?;
    if trailer.id != item.pack_id {
        return Err(corrupt_trailer(
            item,
            format!(
                "its trailer names pack {}, not {}",
                trailer.id, item.pack_id
            ),
        ));
    }
    if trailer.total_len != size {
        return Err(corrupt_trailer(
            item,
            format!(
                "its trailer says {} bytes, the file has {size}",
                trailer.total_len
            ),
        ));
    }
    Ok((trailer, bytes))
}

/// A body read whole for one PUT.
struct Body {
    chunks: Vec<Bytes>,
    /// Bytes read (at most the staged size).
    read: u64,
    /// The file held more than the staged size.
    grown: bool,
    /// The last [`TRAILER_LEN`] bytes read.
    tail: Vec<u8>,
}

/// The chunks of a [`Body`] as one reader (for the validator).
struct ChunksReader<'a> {
    chunks: std::slice::Iter<'a, Bytes>,
    current: &'a [u8],
}

impl<'a> ChunksReader<'a> {
    fn new(chunks: &'a [Bytes]) -> ChunksReader<'a> {
        ChunksReader {
            chunks: chunks.iter(),
            current: &[],
        }
    }
}

impl std::io::Read for ChunksReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.next() {
                Some(c) => self.current = c,
                None => return Ok(0),
            }
        }
        let n = self.current.len().min(buf.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = &self.current[n..];
        Ok(n)
    }
}

/// Reads the `size` bytes of the file at `path` in buffers of at most
/// [`READ_CHUNK`] and looks for a byte past them.
fn read_body(path: &FsPath, size: u64) -> std::io::Result<Body> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut body = Body {
        chunks: Vec::with_capacity((size as usize).div_ceil(READ_CHUNK)),
        read: 0,
        grown: false,
        tail: Vec::with_capacity(TRAILER_LEN),
    };
    while body.read < size {
        let want = (size - body.read).min(READ_CHUNK as u64) as usize;
        let mut buf = vec![0u8; want];
        let mut n = 0;
        while n < want {
            match file.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(n);
        keep_tail(&mut body.tail, &buf);
        body.read += n as u64;
        if n > 0 {
            body.chunks.push(Bytes::from(buf));
        }
        if n < want {
            return Ok(body); // the file ended early
        }
    }
    let mut extra = [0u8; 1];
    body.grown = loop {
        match file.read(&mut extra) {
            Ok(k) => break k != 0,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    Ok(body)
}

/// The body about to be PUT is the file that was checked: all of its
/// staged bytes, the file ends there, and they end in the trailer that was
/// checked.
/// `(read, grown, tail)`: the bytes read (at most the staged size), whether
/// the file held more, and the last [`TRAILER_LEN`] bytes read.
fn check_end(
    item: &UploadItem,
    (read, grown, tail): (u64, bool, &[u8]),
    trailer_bytes: &[u8; TRAILER_LEN],
) -> Result<()> {
    if read != item.size {
        return Err(mismatch(
            item,
            format!("it read as {read} bytes, staged as {}", item.size),
        ));
    }
    if grown {
        return Err(mismatch(
            item,
            format!("the file grew past its {} bytes", item.size),
        ));
    }
    if tail != trailer_bytes.as_slice() {
        return Err(mismatch(
            item,
            "its trailer changed while it was read".into(),
        ));
    }
    Ok(())
}

/// Bodies are read in buffers of at most this many bytes. A PUT or a part
/// is a list of them, never one buffer of its whole size: the allocator
/// reuses same-sized freed buffers across threads, where buffers of a
/// pack's size (up to `multipart_threshold`) each raise glibc's mmap
/// threshold and then stay in its per-thread arenas once freed (the peak
/// RSS of a 10 GiB drain of 32 MiB packs was 456 MiB with them, above
/// `max_in_flight_bytes` + 64 MiB).
const READ_CHUNK: usize = 1 << 20;

/// Reads up to `want` bytes of a part (fewer only at the end of the file)
/// in buffers of at most [`READ_CHUNK`], feeding `hash` and `tail`.
async fn read_chunks(
    file: &mut tokio::fs::File,
    want: usize,
    hash: &mut BodyHash,
    tail: &mut Vec<u8>,
) -> std::io::Result<Vec<Bytes>> {
    let mut chunks = Vec::with_capacity(want.div_ceil(READ_CHUNK));
    let mut left = want;
    while left > 0 {
        let mut buf = vec![0u8; left.min(READ_CHUNK)];
        let n = read_full(file, &mut buf).await?;
        if n == 0 {
            break; // the end of the file
        }
        buf.truncate(n);
        keep_tail(tail, &buf);
        hash.update(&buf);
        left -= n;
        let short = n < buf.capacity();
        chunks.push(Bytes::from(buf));
        if short {
            break;
        }
    }
    Ok(chunks)
}

/// The SHA-256 of the bytes sent, fed in order as they are read: it covers
/// everything before the trailer's hash field (the last 32 bytes of a pack
/// of `size` bytes), as the pack format's checksum does.
pub(crate) struct BodyHash {
    hasher: Sha256,
    /// Bytes fed so far.
    at: u64,
    /// Where the hash field starts.
    end: u64,
}

impl BodyHash {
    pub(crate) fn new(size: u64) -> BodyHash {
        BodyHash {
            hasher: Sha256::new(),
            at: 0,
            end: size.saturating_sub((TRAILER_LEN - TRAILER_HASH_OFFSET) as u64),
        }
    }

    /// Feeds the next bytes read.
    pub(crate) fn update(&mut self, buf: &[u8]) {
        let take = self.end.saturating_sub(self.at).min(buf.len() as u64) as usize;
        self.hasher.update(&buf[..take]);
        self.at += buf.len() as u64;
    }

    /// Compares the hash of everything fed with the trailer's checksum.
    pub(crate) fn check(self, item: &UploadItem, trailer: &Trailer) -> Result<()> {
        let computed: [u8; 32] = self.hasher.finalize().into();
        if computed == trailer.sha256 {
            return Ok(());
        }
        Err(Error::ChecksumMismatch {
            path: item.path.clone(),
            bytes: self.at,
            expected: trailer.sha256_hex(),
            computed: hex::encode(computed),
        })
    }
}

async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]).await? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
