//! The `file://` fast path: a pack goes into a local
//! store at copy speed, durably, and never replaces an object.
//!
//! One upload of a pack to `<root>/<key>`:
//!
//! 1. If something is at the key already, nothing is copied: the uploader
//!    compares it (HEAD + trailer read through `LocalFileSystem`, exactly as
//!    for any store) and reports `Skipped` or a conflict.
//! 2. The key's directory is created if missing (every new directory and the
//!    first existing one fsynced, deepest first).
//! 3. A staging file `<key>#<n>` is created beside the key with `O_EXCL`
//!    (`create_new`) and held under an exclusive `flock` while it is
//!    written. `LocalFileSystem` lists no name ending in `#<digits>`, so a
//!    staging file is never seen as an object. A staging file whose lock
//!    can be taken has no live writer (a crashed uploader's leftover): it is
//!    removed and its name reused (counted as `leftovers_removed`);
//!    one whose lock is held belongs to a live uploader and is left alone.
//! 4. The pack is copied in chunks of [`CHUNK`] bytes with `std::io::copy`
//!    between two `File`s, which on Linux is `copy_file_range(2)`: an
//!    in-kernel copy, a reflink (shared extents) on filesystems that clone
//!    in `copy_file_range` (Btrfs, XFS with reflink, bcachefs), and std's
//!    read/write loop where the call is not available. spool-core's
//!    `pack::validate` drives the copy: it reads the staging file back
//!    (page cache, hot), and a chunk is copied whenever it has read all
//!    that was copied, so the bytes validated — framing, footer, id and
//!    SHA-256, in one pass — are the bytes that will be published, and the
//!    service need not read the pack a second time (the upload returns its
//!    summary). A cancel is checked before every chunk, and before the
//!    fsync and the publish.
//! 5. The copy must be exactly `size` bytes ending in the trailer that was
//!    checked, and a valid pack (otherwise `StagedMismatch`,
//!    `ChecksumMismatch` or `CorruptPack`, and nothing is published).
//! 6. The staging file is fsynced, then published under the key with
//!    `renameat2(RENAME_NOREPLACE)` (Linux/glibc; `link(2)` + unlink of the
//!    staging name where the flag or the call is refused, and on other
//!    systems): an object that appeared at the key meanwhile is never
//!    replaced; the staging file is removed and the uploader compares.
//! 7. The key's directory is fsynced: the new entry is on disk before the
//!    upload reports `Uploaded` (the service then deletes the pack).
//!
//! Every failure, a cancel included, removes the staging file before the
//! upload returns.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use spool_core::pack::{PackSummary, TRAILER_LEN};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::item::{invalid, keep_tail, mismatch, read_err, UploadItem};

/// Bytes copied between two cancel checks (one `copy_file_range` call at
/// most): a cancel waits for at most one chunk, a few milliseconds.
pub(crate) const CHUNK: u64 = 4 << 20;

/// Staging names tried per key (`<key>#1` .. `<key>#64`) before giving up:
/// more live uploaders of one pack than that is not a real situation.
const STAGING_NAMES: u32 = 64;

/// What the `file://` path did since the store was built: in its `Debug`,
/// and what the tests pin (every object fsynced, its directory fsynced, no
/// staging file left behind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LocalCounters {
    /// Staging files fsynced (one per published object).
    pub files_synced: u64,
    /// Directory fsyncs: the key's directory after each publish, and new
    /// directories (and the first existing parent) when a key's directory
    /// is created.
    pub dirs_synced: u64,
    /// Objects published under their key.
    pub published: u64,
    /// Staging files of this store's own attempts removed because the
    /// attempt failed, was cancelled or found the key taken.
    pub staging_removed: u64,
    /// Staging files of a writer that is gone (a crash) removed.
    pub leftovers_removed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    files_synced: AtomicU64,
    dirs_synced: AtomicU64,
    published: AtomicU64,
    staging_removed: AtomicU64,
    leftovers_removed: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Called after each chunk with the bytes copied so far (tests cut, race
/// or change a copy there).
#[cfg(test)]
type ChunkHook = Box<dyn FnMut(u64) + Send>;

/// A `file://` store's directory and its fast path.
pub(crate) struct LocalDir {
    fs: Arc<LocalFileSystem>,
    counters: Counters,
    #[cfg(test)]
    hook: std::sync::Mutex<Option<ChunkHook>>,
}

impl std::fmt::Debug for LocalDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDir")
            .field("fs", &self.fs)
            .field("counters", &self.counters())
            .finish()
    }
}

/// The reader the validator pulls a `file://` upload through: each read
/// returns bytes read back from the staging file; once everything copied
/// has been read, the next [`CHUNK`] is copied from the staged pack first
/// (`std::io::copy` between two files: `copy_file_range(2)`), after a
/// cancel check. It stops at the staged size. The first failure (a cancel,
/// a short file, a write error) is kept in `failed`, which wins over what
/// the validator makes of the I/O error it sees.
struct CopyThrough<'a, 'j> {
    job: &'a Job<'j>,
    src: &'a File,
    staging: &'a Staging<'a>,
    after_chunk: &'a mut dyn FnMut(u64),
    /// Bytes copied into the staging file so far.
    copied: u64,
    /// Bytes read back so far.
    at: u64,
    /// The last [`TRAILER_LEN`] bytes read back.
    tail: Vec<u8>,
    failed: Option<Error>,
}

impl CopyThrough<'_, '_> {
    fn fail(&mut self, e: Error) -> std::io::Error {
        let io = std::io::Error::other(e.to_string());
        self.failed.get_or_insert(e);
        io
    }

    /// Copies the next chunk; `false` at the staged size.
    fn copy_next(&mut self) -> std::io::Result<bool> {
        let size = self.job.item.size;
        if self.copied >= size {
            return Ok(false);
        }
        if self.job.cancel.is_cancelled() {
            let e = cancelled(self.job.key);
            return Err(self.fail(e));
        }
        let want = (size - self.copied).min(CHUNK);
        let n = match std::io::copy(&mut self.src.take(want), &mut &self.staging.file) {
            Ok(n) => n,
            Err(source) => {
                let e = Error::LocalWrite {
                    what: "copying the staged pack into",
                    path: self.staging.path.clone(),
                    source,
                };
                return Err(self.fail(e));
            }
        };
        if n == 0 {
            let e = mismatch(
                self.job.item,
                format!("the file ended at {} bytes", self.copied),
            );
            return Err(self.fail(e));
        }
        self.copied += n;
        (self.after_chunk)(self.copied);
        Ok(true)
    }
}

impl Read for CopyThrough<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("the copy failed"));
        }
        if self.at == self.copied && !self.copy_next()? {
            return Ok(0);
        }
        let k = ((self.copied - self.at) as usize).min(buf.len());
        if let Err(source) = self.staging.file.read_exact_at(&mut buf[..k], self.at) {
            let e = Error::LocalWrite {
                what: "reading back the staged copy",
                path: self.staging.path.clone(),
                source,
            };
            return Err(self.fail(e));
        }
        keep_tail(&mut self.tail, &buf[..k]);
        self.at += k as u64;
        Ok(k)
    }
}

/// How a publish ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Published {
    /// The object is at its key, durably; the summary of the pack, which
    /// was validated whole from the bytes copied.
    Created(PackSummary),
    /// Something is at the key already; nothing was written. The uploader
    /// compares it.
    Exists,
}

/// One pack to put: what the uploader checked before.
pub(crate) struct Job<'a> {
    pub(crate) item: &'a UploadItem,
    pub(crate) key: &'a Path,
    pub(crate) trailer_bytes: &'a [u8; TRAILER_LEN],
    pub(crate) cancel: &'a CancellationToken,
}

/// A staging file, removed on drop unless published.
struct Staging<'a> {
    dir: &'a LocalDir,
    path: PathBuf,
    name: OsString,
    file: File,
    published: bool,
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        if !self.published {
            match std::fs::remove_file(&self.path) {
                Ok(()) => bump(&self.dir.counters.staging_removed),
                Err(e) => tracing::warn!(
                    staging = %self.path.display(), error = %e,
                    "cannot remove a staging file; the next upload of this pack removes it"
                ),
            }
        }
    }
}

impl LocalDir {
    pub(crate) fn new(fs: Arc<LocalFileSystem>) -> LocalDir {
        LocalDir {
            fs,
            counters: Counters::default(),
            #[cfg(test)]
            hook: std::sync::Mutex::new(None),
        }
    }

    /// What the fast path did so far.
    pub(crate) fn counters(&self) -> LocalCounters {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LocalCounters {
            files_synced: get(&c.files_synced),
            dirs_synced: get(&c.dirs_synced),
            published: get(&c.published),
            staging_removed: get(&c.staging_removed),
            leftovers_removed: get(&c.leftovers_removed),
        }
    }

    /// Copies, verifies and publishes one pack (steps 1-7 of the module
    /// doc). Blocking: the uploader runs it on tokio's blocking pool.
    pub(crate) fn put(&self, job: &Job<'_>) -> Result<Published> {
        #[cfg(test)]
        {
            let mut hook = self.hook.lock().expect("hook lock").take();
            let r = self.put_with(job, &mut |done| {
                if let Some(h) = hook.as_mut() {
                    h(done)
                }
            });
            *self.hook.lock().expect("hook lock") = hook;
            r
        }
        #[cfg(not(test))]
        self.put_with(job, &mut |_| {})
    }

    /// Sets the function called after each chunk of the next puts.
    #[cfg(test)]
    pub(crate) fn set_hook(&self, hook: impl FnMut(u64) + Send + 'static) {
        *self.hook.lock().expect("hook lock") = Some(Box::new(hook));
    }

    /// [`LocalDir::put`], calling `after_chunk(bytes copied so far)` after
    /// each chunk.
    fn put_with(&self, job: &Job<'_>, after_chunk: &mut dyn FnMut(u64)) -> Result<Published> {
        let dest = self
            .fs
            .path_to_filesystem(job.key)
            .map_err(|e| Error::LocalWrite {
                what: "mapping the key to a file",
                path: PathBuf::from(job.key.as_ref()),
                source: std::io::Error::other(e.to_string()),
            })?;
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(Error::LocalWrite {
                what: "finding the directory of",
                path: dest.clone(),
                source: std::io::Error::other("the key names no file"),
            });
        };
        if dest.symlink_metadata().is_ok() {
            return Ok(Published::Exists);
        }
        self.ensure_dir(dir)?;
        let src = match File::open(&job.item.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(mismatch(job.item, "the file is gone".into()))
            }
            Err(e) => return Err(read_err(&job.item.path, e)),
        };
        let mut staging = self.stage(dir, name)?;
        let summary = self.fill(job, &src, &staging, after_chunk)?;
        if job.cancel.is_cancelled() {
            return Err(cancelled(job.key));
        }
        self.sync_file(&staging.file, &staging.path)?;
        if job.cancel.is_cancelled() {
            return Err(cancelled(job.key));
        }
        let created = publish(dir, &staging.name, name).map_err(|source| Error::LocalWrite {
            what: "publishing the staged copy as",
            path: dest.clone(),
            source,
        })?;
        if !created {
            // Staging dropped: removed. The uploader compares what is there.
            return Ok(Published::Exists);
        }
        staging.published = true;
        bump(&self.counters.published);
        self.sync_dir(dir)?;
        Ok(Published::Created(summary))
    }

    /// Copies the pack into `staging` chunk by chunk while validating it
    /// whole (spool-core's `pack::validate` reads what was written back
    /// from the staging file, chunk by chunk: the bytes verified are the
    /// bytes that will be published), and checks size and trailer.
    fn fill(
        &self,
        job: &Job<'_>,
        src: &File,
        staging: &Staging<'_>,
        after_chunk: &mut dyn FnMut(u64),
    ) -> Result<PackSummary> {
        let item = job.item;
        let size = item.size;
        let mut copy = CopyThrough {
            job,
            src,
            staging,
            after_chunk,
            copied: 0,
            at: 0,
            tail: Vec::with_capacity(TRAILER_LEN),
            failed: None,
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        let validated = spool_core::pack::validate(&mut copy, Some(item.pack_id), &never);
        if let Some(e) = copy.failed.take() {
            return Err(e);
        }
        let (copied, tail) = (copy.copied, std::mem::take(&mut copy.tail));
        let now = src
            .metadata()
            .map_err(|source| read_err(&item.path, source))?
            .len();
        if now != size {
            return Err(mismatch(
                item,
                format!("it is now {now} bytes, staged as {size}"),
            ));
        }
        let summary = validated.map_err(|e| invalid(item, copied, e))?;
        if copied != size || tail.as_slice() != job.trailer_bytes.as_slice() {
            return Err(mismatch(
                item,
                "its trailer changed while it was copied".into(),
            ));
        }
        Ok(summary)
    }

    /// Creates a staging file beside the key, held under an exclusive lock.
    /// Removes leftovers of dead writers on the way.
    fn stage<'a>(&'a self, dir: &FsPath, name: &OsStr) -> Result<Staging<'a>> {
        let mut n = 1;
        while n <= STAGING_NAMES {
            let mut staging_name = name.to_os_string();
            staging_name.push(format!("#{n}"));
            let path = dir.join(&staging_name);
            let open_err = |source| Error::LocalWrite {
                what: "creating the staging file",
                path: path.clone(),
                source,
            };
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => match file.try_lock() {
                    Ok(()) => {
                        return Ok(Staging {
                            dir: self,
                            path,
                            name: staging_name,
                            file,
                            published: false,
                        })
                    }
                    // Another uploader took it for a leftover in the instant
                    // between our create and our lock; it removes it.
                    Err(TryLockError::WouldBlock) => n += 1,
                    Err(TryLockError::Error(e)) => return Err(open_err(e)),
                },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if !self.remove_if_dead(&path) {
                        n += 1;
                    }
                }
                Err(e) => return Err(open_err(e)),
            }
        }
        Err(Error::LocalWrite {
            what: "finding a free staging name beside",
            path: dir.join(name),
            source: std::io::Error::other(format!(
                "{STAGING_NAMES} staging files of live uploaders are there"
            )),
        })
    }

    /// A staging file nobody holds the lock of is a dead writer's leftover:
    /// removes it (if the name still names that file) and says so.
    fn remove_if_dead(&self, path: &FsPath) -> bool {
        let Ok(file) = File::open(path) else {
            // Gone meanwhile (published or removed): the name is free.
            return true;
        };
        if file.try_lock().is_err() {
            return false;
        }
        let same = match (file.metadata(), path.symlink_metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if same && std::fs::remove_file(path).is_ok() {
            bump(&self.counters.leftovers_removed);
            tracing::info!(staging = %path.display(), "removed the staging file of an upload that did not finish");
        }
        true
    }

    /// Creates `dir` and its missing parents, fsyncing every new directory
    /// and the first existing one, deepest first.
    fn ensure_dir(&self, dir: &FsPath) -> Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        let mut first_existing = dir;
        while !first_existing.exists() {
            match first_existing.parent() {
                Some(p) => first_existing = p,
                None => break,
            }
        }
        std::fs::create_dir_all(dir).map_err(|source| Error::LocalWrite {
            what: "creating the directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let mut d = dir;
        loop {
            self.sync_dir(d)?;
            if d == first_existing {
                return Ok(());
            }
            match d.parent() {
                Some(p) => d = p,
                None => return Ok(()),
            }
        }
    }

    /// fsyncs a staged copy (its data and size) and counts it.
    fn sync_file(&self, file: &File, path: &FsPath) -> Result<()> {
        file.sync_all().map_err(|source| Error::LocalWrite {
            what: "fsyncing",
            path: path.to_path_buf(),
            source,
        })?;
        bump(&self.counters.files_synced);
        Ok(())
    }

    /// fsyncs a directory (its entries) and counts it.
    fn sync_dir(&self, dir: &FsPath) -> Result<()> {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|source| Error::LocalWrite {
                what: "fsyncing the directory",
                path: dir.to_path_buf(),
                source,
            })?;
        bump(&self.counters.dirs_synced);
        Ok(())
    }
}

fn cancelled(key: &Path) -> Error {
    Error::Cancelled {
        key: key.to_string(),
    }
}

/// Moves `staging` to `name` in `dir` unless `name` exists. `Ok(false)`:
/// it exists, nothing was replaced (the staging file is left for its
/// owner to remove).
fn publish(dir: &FsPath, staging: &OsStr, name: &OsStr) -> std::io::Result<bool> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::errno::Errno;
        use nix::fcntl::{renameat2, RenameFlags};
        let d = File::open(dir)?;
        match renameat2(&d, staging, &d, name, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => return Ok(true),
            Err(Errno::EEXIST) => return Ok(false),
            // The filesystem (or the kernel) has no RENAME_NOREPLACE: link.
            Err(Errno::EINVAL | Errno::ENOSYS | Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(e.into()),
        }
    }
    link_publish(dir, staging, name)
}

/// The portable no-replace publish: `link(2)` refuses an existing name;
/// then the staging name is unlinked.
fn link_publish(dir: &FsPath, staging: &OsStr, name: &OsStr) -> std::io::Result<bool> {
    let (from, to) = (dir.join(staging), dir.join(name));
    match std::fs::hard_link(&from, &to) {
        Ok(()) => {
            std::fs::remove_file(&from)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use futures::TryStreamExt;
    use object_store::ObjectStore;
    use spool_core::pack::PackId;

    use super::*;
    use crate::{ClientConfig, Store, UploadConfig, UploadOutcome, Uploader};

    /// A pack of about `bytes` bytes (records of `fill`) staged in `dir`.
    fn stage_pack(dir: &FsPath, id: PackId, bytes: usize, fill: u8) -> (UploadItem, Vec<u8>) {
        let mut w = spool_core::PackWriter::new(id, id.timestamp_ms());
        let record = vec![fill; 1 << 20];
        while w.finished_len() + 64 < bytes {
            let room = bytes - w.finished_len() - 64;
            w.push_record(&record[..room.min(record.len())]);
        }
        let body = w.finish();
        let path = dir.join(format!("{id}.ready"));
        std::fs::write(&path, &body).unwrap();
        let item = UploadItem {
            path,
            pack_id: id,
            size: body.len() as u64,
        };
        (item, body)
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        spool: PathBuf,
        store: Store,
        up: Uploader,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let spool = tmp.path().join("spool");
        std::fs::create_dir(&spool).unwrap();
        let url = format!("file://{}/store", tmp.path().display());
        let store = Store::from_url(&url, &ClientConfig::default()).unwrap();
        let config = UploadConfig {
            max_attempts: 1,
            ..UploadConfig::default()
        };
        let up = Uploader::new(store.clone(), config).unwrap();
        Fixture {
            _tmp: tmp,
            spool,
            store,
            up,
        }
    }

    impl Fixture {
        fn local(&self) -> &Arc<LocalDir> {
            self.store
                .local()
                .expect("a file:// store has the fast path")
        }

        fn counters(&self) -> LocalCounters {
            self.store.local_counters().unwrap()
        }

        /// The file a key names.
        fn file(&self, key: &Path) -> PathBuf {
            self.local().fs.path_to_filesystem(key).unwrap()
        }

        /// Every file in the key's directory (objects and staging files).
        fn dir_entries(&self, key: &Path) -> Vec<String> {
            let dir = self.file(key).parent().unwrap().to_path_buf();
            let mut v: Vec<String> = match std::fs::read_dir(dir) {
                Ok(rd) => rd
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect(),
                Err(_) => Vec::new(),
            };
            v.sort();
            v
        }

        async fn listed(&self) -> Vec<String> {
            self.store
                .object_store()
                .list(None)
                .map_ok(|m| m.location.to_string())
                .try_collect()
                .await
                .unwrap()
        }
    }

    fn name_of(key: &Path) -> String {
        key.filename().unwrap().to_string()
    }

    /// A `file://` upload validates the pack whole as it copies
    /// it (the validator pulls the copy, chunk by chunk, reading it back):
    /// a valid pack of several chunks comes back with its summary; one
    /// whose hash matches its trailer but whose framing is broken (a record
    /// length running into the next record, the hash recomputed) is
    /// `CorruptPack`, never published, its staging file removed.
    #[tokio::test]
    async fn a_copy_is_validated_whole_as_it_goes_and_a_misframed_pack_is_never_published() {
        let fx = fixture();
        let id = PackId::generate();
        let (item, body) = stage_pack(&fx.spool, id, (CHUNK as usize) * 2 + 12345, 0x5a);
        assert!(fx.up.validates_whole(item.size));
        let r = fx.up.upload_one(item, &CancellationToken::new()).await;
        assert!(matches!(r.outcome, UploadOutcome::Uploaded { .. }), "{r:?}");
        let s = r.summary.expect("the copy's summary");
        assert_eq!((s.id, s.bytes), (id, body.len() as u64));
        assert_eq!(std::fs::read(fx.file(&r.key)).unwrap(), body);

        // in the same key range as the good one, so they share a directory
        let mut bad_id = PackId::with_timestamp(id.timestamp_ms());
        bad_id.0[15] = id.0[15];
        let bad = spool_core::pack::testing_misframed_pack(bad_id);
        let path = fx.spool.join(format!("{bad_id}.ready"));
        std::fs::write(&path, &bad).unwrap();
        let item = UploadItem {
            path,
            pack_id: bad_id,
            size: bad.len() as u64,
        };
        let r = fx.up.upload_one(item, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("a mis-framed pack fails");
        assert!(f.corrupt && !f.retryable, "{f:?}");
        assert!(matches!(f.error, Error::CorruptPack { .. }), "{}", f.error);
        assert!(r.summary.is_none());
        assert!(!fx.file(&r.key).exists(), "never published");
        assert_eq!(fx.dir_entries(&r.key), vec![name_of(&fx.up.key(&id))]);
    }

    /// An object that lands at the key while the pack is being copied (a
    /// racing uploader) is never replaced: the publish is refused, the
    /// staging file removed, and the uploader compares what is there — the
    /// same pack is `Skipped`, another one a final conflict that leaves it
    /// as it was.
    #[tokio::test]
    async fn an_object_that_appears_during_the_copy_is_never_replaced() {
        for same in [true, false] {
            let fx = fixture();
            let id = PackId::generate();
            let (item, ours) = stage_pack(&fx.spool, id, 9 << 20, 0x11);
            let other = tempfile::tempdir().unwrap();
            let (_, theirs) = if same {
                (item.clone(), ours.clone())
            } else {
                stage_pack(other.path(), id, 9 << 20, 0x22)
            };
            let dest = fx.file(&fx.up.key(&id));
            let racer = theirs.clone();
            let raced = Arc::new(AtomicBool::new(false));
            let flag = raced.clone();
            fx.local().set_hook(move |_| {
                if !flag.swap(true, Ordering::SeqCst) {
                    std::fs::write(&dest, &racer).unwrap();
                }
            });
            let r = fx.up.upload_one(item, &CancellationToken::new()).await;
            assert!(raced.load(Ordering::SeqCst), "the racer ran mid-copy");
            if same {
                assert!(
                    matches!(r.outcome, UploadOutcome::Skipped { .. }),
                    "{:?}",
                    r.outcome
                );
            } else {
                let f = r.outcome.failure().expect("a conflict");
                assert!(matches!(f.error, Error::Conflict { .. }), "{}", f.error);
                assert!(!f.retryable);
            }
            let got = std::fs::read(fx.file(&r.key)).unwrap();
            assert!(got == theirs, "the racer's object is left as it was");
            assert_eq!(
                fx.dir_entries(&r.key),
                vec![name_of(&r.key)],
                "no staging file"
            );
            let c = fx.counters();
            assert_eq!((c.published, c.staging_removed), (0, 1), "{c:?}");
        }
    }

    /// A cancel mid-copy stops it before the next chunk: the upload is
    /// reported cancelled, nothing is at the key and no staging file is
    /// left; the next upload puts the pack whole.
    #[tokio::test]
    async fn a_cancel_mid_copy_leaves_nothing() {
        let fx = fixture();
        let (item, bytes) = stage_pack(&fx.spool, PackId::generate(), 3 * CHUNK as usize + 5, 1);
        let cancel = CancellationToken::new();
        let chunks = Arc::new(AtomicU64::new(0));
        let (token, seen) = (cancel.clone(), chunks.clone());
        fx.local().set_hook(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            token.cancel();
        });
        let r = fx.up.upload_one(item.clone(), &cancel).await;
        let f = r.outcome.failure().expect("cut");
        assert!(f.cancelled, "{}", f.error);
        assert_eq!(chunks.load(Ordering::SeqCst), 1, "stopped after one chunk");
        assert!(!fx.file(&r.key).exists(), "nothing at the key");
        assert_eq!(
            fx.dir_entries(&r.key),
            Vec::<String>::new(),
            "no staging file"
        );
        assert_eq!(fx.counters().files_synced, 0);
        assert!(fx.listed().await.is_empty());
        let r = fx.up.upload_one(item, &CancellationToken::new()).await;
        assert!(
            matches!(r.outcome, UploadOutcome::Uploaded { .. }),
            "{:?}",
            r.outcome
        );
        assert!(std::fs::read(fx.file(&r.key)).unwrap() == bytes);
    }

    /// A staging file left by a writer that is gone (no lock on it) is
    /// removed by the next upload of the pack; one whose writer is alive
    /// (its lock held) is left alone; neither is listed as an object.
    #[tokio::test]
    async fn a_dead_writers_staging_file_is_cleaned_and_a_live_ones_kept() {
        let fx = fixture();
        let (item, bytes) = stage_pack(&fx.spool, PackId::generate(), 100_000, 3);
        let key = fx.up.key(&item.pack_id);
        let dest = fx.file(&key);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let staging = |n: u32| PathBuf::from(format!("{}#{n}", dest.display()));
        std::fs::write(staging(1), b"half a pack, then a crash").unwrap();
        let live = File::create(staging(2)).unwrap();
        live.lock().unwrap();
        assert!(
            fx.listed().await.is_empty(),
            "staging files are not objects"
        );
        let r = fx.up.upload_one(item, &CancellationToken::new()).await;
        assert!(
            matches!(r.outcome, UploadOutcome::Uploaded { .. }),
            "{:?}",
            r.outcome
        );
        assert!(std::fs::read(&dest).unwrap() == bytes);
        assert!(
            !staging(1).exists(),
            "the dead writer's leftover is removed"
        );
        assert!(staging(2).exists(), "the live writer's file is kept");
        assert_eq!(fx.counters().leftovers_removed, 1);
        assert_eq!(fx.listed().await, vec![key.to_string()]);
    }

    /// A pack whose bytes changed after it was validated — before the
    /// upload, or during the copy (a byte flipped in a chunk not yet
    /// copied) — is corrupt: nothing is published, no staging file stays.
    /// One that grew during the copy is a staged mismatch.
    #[tokio::test]
    async fn a_pack_changed_after_validation_is_refused() {
        for when in ["before", "during", "grew"] {
            let fx = fixture();
            let (item, _) = stage_pack(&fx.spool, PackId::generate(), 9 << 20, 5);
            let path = item.path.clone();
            let flip = move |at: u64| {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                let mut b = [0u8; 1];
                f.read_exact_at(&mut b, at).unwrap();
                f.write_all_at(&[b[0] ^ 1], at).unwrap();
            };
            match when {
                "before" => flip(item.size / 2),
                "during" => {
                    let mut once = Some(flip);
                    fx.local().set_hook(move |done| {
                        if let Some(flip) = once.take() {
                            flip(done + 1000);
                        }
                    })
                }
                _ => {
                    let path = item.path.clone();
                    fx.local().set_hook(move |_| {
                        let f = OpenOptions::new().append(true).open(&path).unwrap();
                        f.write_all_at(b"more", 0).unwrap();
                    })
                }
            }
            let r = fx.up.upload_one(item, &CancellationToken::new()).await;
            let f = r.outcome.failure().expect("refused");
            if when == "grew" {
                assert!(
                    matches!(f.error, Error::StagedMismatch { .. }),
                    "{}",
                    f.error
                );
            } else {
                assert!(f.corrupt, "{when}: {}", f.error);
                assert!(
                    matches!(f.error, Error::ChecksumMismatch { .. }),
                    "{}",
                    f.error
                );
            }
            assert!(!f.retryable, "{when}");
            assert_eq!(fx.dir_entries(&r.key), Vec::<String>::new(), "{when}");
            assert!(fx.listed().await.is_empty(), "{when}");
            assert_eq!(fx.counters().files_synced, 0, "{when}");
        }
    }

    /// An upload returns only once its object is fsynced and its directory
    /// entry is: one file fsync and one directory fsync per object, plus
    /// the new directories (and the first existing parent) of a new day.
    #[tokio::test]
    async fn an_uploaded_object_and_its_directory_are_fsynced() {
        let fx = fixture();
        let ts = spool_core::pack::now_ms();
        let a_id = PackId::with_timestamp(ts);
        let (a, a_bytes) = stage_pack(&fx.spool, a_id, 50_000, 7);
        // b shares a's key range and day: its object goes beside a's
        let mut b_id = a_id;
        b_id.0[8] ^= 0xff;
        let (b, _) = stage_pack(&fx.spool, b_id, 50_000, 8);
        let r = fx.up.upload_one(a, &CancellationToken::new()).await;
        assert!(r.outcome.is_stored(), "{:?}", r.outcome);
        // <root>/v2/<spread>/date=D/<id>.pack: v2, <spread> and date=D are
        // new, the root existed.
        assert_eq!(
            fx.counters(),
            LocalCounters {
                files_synced: 1,
                dirs_synced: 4 + 1,
                published: 1,
                staging_removed: 0,
                leftovers_removed: 0,
            }
        );
        let r2 = fx.up.upload_one(b, &CancellationToken::new()).await;
        assert!(r2.outcome.is_stored(), "{:?}", r2.outcome);
        let c = fx.counters();
        assert_eq!(
            (c.files_synced, c.dirs_synced, c.published),
            (2, 6, 2),
            "{c:?}"
        );
        assert!(std::fs::read(fx.file(&r.key)).unwrap() == a_bytes);
        // The same pack again: nothing copied, nothing synced, skipped.
        let r3 = fx
            .up
            .upload_one(r.item.clone(), &CancellationToken::new())
            .await;
        assert!(
            matches!(r3.outcome, UploadOutcome::Skipped { .. }),
            "{:?}",
            r3.outcome
        );
        assert_eq!(fx.counters(), c);
    }
}
