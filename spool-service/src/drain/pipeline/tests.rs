//! The pipeline's ordering rules, on fakes: uploads go on while a batch is
//! indexed, no file goes before its row is confirmed, at most
//! `pipeline_depth` packs are out and not indexed, memory stays within
//! `max_in_flight_bytes`, a stop cuts every stage, a batch closes at once
//! when no upload is in flight.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spool_catalog::{
    Catalog, LeaseGuard, LeaseHead, LeaseRecord, MemoryCatalog, NewClaim, PackRow, Result,
};
use spool_upload::testing::{Action, Injected, Op, Rule};

use crate::bound::Bound;
use crate::drain::{Drain, DrainParts, Job, Origin, PackOutcome};
use crate::service::tests::{block_on, files, held_spool, stage, wait_for, Fixture};
use crate::StorageService;

/// The memory catalog behind a gate: `index` waits while the gate is shut,
/// and records, for every call, its rows and whether each row's pack file
/// was still in its spool directory when the call came.
struct GatedCatalog {
    inner: MemoryCatalog,
    dir: std::path::PathBuf,
    open: tokio::sync::watch::Sender<bool>,
    calls: AtomicUsize,
    /// Per call: (rows, rows whose `.ready` file was gone at the call).
    seen: Mutex<Vec<(usize, usize)>>,
    /// Every index call fails with this error's kind while set.
    refusing: Mutex<Option<Refusal>>,
}

/// How a [`GatedCatalog`] refuses an index call.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// The credentials (the whole destination).
    Auth,
    /// Not answering (retryable: one batch, not the destination).
    Unreachable,
}

impl GatedCatalog {
    fn new(dir: &Path, open: bool) -> Arc<GatedCatalog> {
        Arc::new(GatedCatalog {
            inner: MemoryCatalog::new(),
            dir: dir.to_path_buf(),
            open: tokio::sync::watch::channel(open).0,
            calls: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            refusing: Mutex::new(None),
        })
    }

    fn refuse(&self, how: Option<Refusal>) {
        *self.refusing.lock().unwrap() = how;
    }

    fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn rows(&self) -> u64 {
        block_on(self.inner.count()).unwrap()
    }

    fn gone_at_call(&self) -> usize {
        self.seen.lock().unwrap().iter().map(|(_, gone)| gone).sum()
    }
}

#[async_trait::async_trait]
impl Catalog for GatedCatalog {
    fn server(&self) -> String {
        "gated memory catalog".into()
    }
    async fn ensure_schema(&self) -> Result<()> {
        self.inner.ensure_schema().await
    }
    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let gone = rows
            .iter()
            .filter(|r| !self.dir.join(format!("{}.ready", r.pack_id)).exists())
            .count();
        self.seen.lock().unwrap().push((rows.len(), gone));
        let server = self.server();
        match *self.refusing.lock().unwrap() {
            Some(Refusal::Auth) => {
                return Err(spool_catalog::Error::Auth {
                    server,
                    purpose: "index packs",
                    message: "bad password".into(),
                })
            }
            Some(Refusal::Unreachable) => {
                return Err(spool_catalog::Error::Unreachable {
                    server,
                    purpose: "index packs",
                    detail: "connection refused".into(),
                })
            }
            None => {}
        }
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|open| *open).await;
        self.inner.index(rows, fence).await
    }
    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>> {
        self.inner.get(pack_id).await
    }
    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        self.inner.list_range(from_ms, to_ms).await
    }
    async fn count(&self) -> Result<u64> {
        self.inner.count().await
    }
    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        self.inner.read_lease_head(name).await
    }
    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        self.inner.append_claim(claim).await
    }
    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        self.inner.read_claims(name, term).await
    }
    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        self.inner.lease_log(name).await
    }
    fn request_timeout(&self) -> Duration {
        self.inner.request_timeout()
    }
}

fn objects(fx: &Fixture) -> usize {
    block_on(fx.objects())
}

#[test]
fn uploads_go_on_while_a_batch_is_indexed_and_no_file_goes_before_its_row() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 40);
    let catalog = GatedCatalog::new(own.dir(), false);
    let mut c = fx.config(own.dir());
    c.catalog = catalog.clone() as Arc<dyn Catalog>;
    c.adopt = false;
    c.index_batch = 4;
    c.upload.max_workers = 2;
    c.pipeline_depth = 16;
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    // The first batch is held by the catalog; uploads go on meanwhile (no
    // barrier per round) until pipeline_depth packs are out and not in the
    // catalog, and no further.
    assert!(
        wait_for(Duration::from_secs(10), || objects(&fx) >= 16),
        "uploads stopped at {} objects while the first batch was indexed",
        objects(&fx)
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        objects(&fx),
        16,
        "more than pipeline_depth packs out and not indexed"
    );
    assert_eq!(catalog.calls(), 1, "one index call in flight at a time");
    assert_eq!(
        files(own.dir(), "ready"),
        40,
        "a file went before its row was confirmed"
    );
    catalog.set_open(true);
    assert!(
        wait_for(Duration::from_secs(10), || catalog.rows() == 40
            && files(own.dir(), "ready") == 0),
        "rows {}, ready {}",
        catalog.rows(),
        files(own.dir(), "ready")
    );
    assert_eq!(objects(&fx), 40);
    assert_eq!(
        catalog.gone_at_call(),
        0,
        "a pack's file was gone before its index call"
    );
    // batches: at most index_batch rows each, fewer calls than packs
    let seen = catalog.seen.lock().unwrap().clone();
    assert!(seen.iter().all(|(rows, _)| *rows <= 4), "{seen:?}");
    assert!(
        seen.len() <= 20,
        "{} calls for 40 packs in batches of 4",
        seen.len()
    );
    svc.stop().unwrap();
}

#[test]
fn uploads_stay_within_the_workers_and_the_bytes_in_flight() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    // packs of one size, so the bound below is exactly three of them
    stage_sized(own.dir(), 30, 64);
    let pack_bytes = std::fs::read_dir(own.dir())
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "ready"))
        .map(|e| e.metadata().unwrap().len())
        .unwrap();
    fx.store
        .script(Rule::new(Op::Put, Action::Delay(Duration::from_millis(20))));
    let mut c = fx.config(own.dir());
    c.adopt = false;
    c.upload.max_workers = 8;
    // room for three packs at once (the bound itself included), though
    // eight workers are allowed
    c.upload.max_in_flight_bytes = 3 * pack_bytes;
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    assert_eq!(objects(&fx), 30);
    assert_eq!(fx.store.max_concurrent_transfers(), 3);
    assert!(fx.store.max_bytes_in_flight() <= 3 * pack_bytes);
    svc.stop().unwrap();
}

/// Stages `n` packs of one record of `bytes` bytes into `dir`.
fn stage_sized(dir: &Path, n: usize, bytes: usize) {
    let spool = held_spool(dir);
    for i in 0..n {
        let id = spool_core::PackId::generate();
        let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
        w.push_record(&vec![i as u8; bytes]);
        spool.stage(None, id, &w.finish()).unwrap();
    }
}

#[test]
fn small_packs_go_up_more_at_once_than_large_ones() {
    let large = spool_upload::SMALL_PACK_BYTES as usize + (4 << 10);
    for (n, bytes, expect) in [(12, 4 << 10, 6), (12, 1536 << 10, 6), (5, large, 2)] {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage_sized(own.dir(), n, bytes);
        fx.store.script(Rule::new(
            Op::Put,
            Action::Delay(Duration::from_millis(100)),
        ));
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.upload.max_workers = 2;
        c.upload.small_pack_workers = 6;
        c.upload.multipart_threshold = 64 << 20;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(svc.flush(Duration::from_secs(30)).unwrap());
        assert_eq!(objects(&fx), n);
        assert_eq!(
            fx.store.max_concurrent_transfers(),
            expect,
            "packs of {bytes} bytes"
        );
        svc.stop().unwrap();
    }
}

/// Validated before uploaded, on both paths. A pack
/// whose hash matches its trailer but whose framing is broken (its first
/// record's length runs into the next one, the hash recomputed) is
/// quarantined and never sent, whether it goes up in one PUT (validated by
/// the uploader from the bytes it holds, the pipeline skipping its own
/// read) or in parts (validated by the pipeline ahead of the upload); the
/// valid packs beside it are uploaded and indexed.
#[test]
fn a_misframed_pack_with_a_matching_hash_is_quarantined_on_either_upload_path() {
    for multipart in [false, true] {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 3);
        let id = spool_core::PackId::generate();
        let bad = spool_core::pack::testing_misframed_pack(id);
        std::fs::write(own.dir().join(format!("{id}.ready")), &bad).unwrap();
        let mut c = fx.config(own.dir());
        c.adopt = false;
        if multipart {
            c.upload.multipart_threshold = 16;
        }
        let up = spool_upload::Uploader::new(
            spool_upload::Store::new(fx.store.clone(), "p", "memory", true).unwrap(),
            c.upload.clone(),
        )
        .unwrap();
        assert_eq!(up.validates_whole(bad.len() as u64), !multipart);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(svc.flush(Duration::from_secs(20)).unwrap());
        let snap = svc.snapshot();
        assert_eq!(
            (snap.quarantined, snap.indexed),
            (1, 3),
            "multipart {multipart}: {snap:?}"
        );
        assert!(own.dir().join(format!("{id}.quarantined")).exists());
        assert_eq!(
            objects(&fx),
            3,
            "multipart {multipart}: the bad pack never stored"
        );
        let (puts, creates) = (fx.store.calls(Op::Put), fx.store.calls(Op::CreateMultipart));
        assert_eq!(puts + creates, 3, "multipart {multipart}: never sent");
        svc.stop().unwrap();
    }
}

/// A batch closes the moment it holds `index_batch` packs, even
/// while other uploads are in flight and however long the linger: with the
/// PUTs after the fourth stalled, the first four packs are indexed (two
/// batches of two) while eight uploads hang.
#[test]
fn a_full_batch_is_indexed_at_once_while_other_uploads_are_in_flight() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 12);
    fx.store.script(Rule::new(Op::Put, Action::Stall).after(4));
    let mut c = fx.config(own.dir());
    c.adopt = false;
    c.index_batch = 2;
    c.index_linger = Duration::from_secs(30);
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || block_on(fx.catalog.count())
            .unwrap()
            == 4),
        "full batches waited for the stalled uploads: {} rows, {} PUTs",
        block_on(fx.catalog.count()).unwrap(),
        fx.store.calls(Op::Put)
    );
    assert!(
        fx.store.calls(Op::Put) > 4,
        "uploads were in flight meanwhile"
    );
    svc.stop().unwrap();
}

/// Validation chunks: consecutive jobs up to `VALIDATION_CHUNK_BYTES` in
/// all, the bound itself included; a first job larger than the bound goes
/// alone; a job validated elsewhere ends the chunk; never more than the
/// room.
#[test]
fn a_validation_chunk_holds_up_to_its_byte_bound_and_stops_at_a_job_validated_elsewhere() {
    use super::{chunk_len, VALIDATION_CHUNK_BYTES as B};
    let jobs = |sizes: &[u64]| sizes.iter().map(|&b| (b, false)).collect::<Vec<_>>();
    assert_eq!(
        chunk_len(jobs(&[B / 2, B / 2, 1]), 16),
        2,
        "the bound included"
    );
    assert_eq!(chunk_len(jobs(&[B / 2, B / 2 + 1]), 16), 1, "one byte over");
    assert_eq!(chunk_len(jobs(&[B - 1, 1, 1]), 16), 2);
    assert_eq!(
        chunk_len(jobs(&[B + 1, 1]), 16),
        1,
        "a large first job alone"
    );
    assert_eq!(chunk_len(jobs(&[B, 0, 1]), 16), 2);
    assert_eq!(chunk_len(jobs(&[1; 20]), 16), 16, "the room");
    assert_eq!(chunk_len(jobs(&[1; 3]), 2), 2);
    assert_eq!(chunk_len(jobs(&[]), 16), 0);
    assert_eq!(chunk_len([(1, false), (1, true), (1, false)], 16), 1);
    assert_eq!(chunk_len([(1, false), (1, false), (B, true)], 16), 2);
}

/// The parts of a drain of its own over `dir`'s spool, the fixture's
/// store and catalog, with `upload`.
fn parts(fx: &Fixture, dir: &Path, upload: spool_upload::UploadConfig) -> DrainParts {
    let spool = held_spool(dir);
    DrainParts {
        uploader: spool_upload::Uploader::new(
            spool_upload::Store::new(fx.store.clone(), "p", "memory", true).unwrap(),
            upload,
        )
        .unwrap(),
        catalog: fx.catalog.clone(),
        store_id: "default".into(),
        host: "h".into(),
        index_batch: 4,
        pipeline_depth: 16,
        index_linger: Duration::from_millis(5),
        fenced: false,
        lease: None,
        own: Arc::new(spool),
        progress: Default::default(),
        inflight: Default::default(),
        identity: fx.identity(),
    }
}

/// A drain of its own (see [`parts`]).
fn upload_path(fx: &Fixture, dir: &Path, upload: spool_upload::UploadConfig) -> Drain {
    Drain::new(parts(fx, dir, upload))
}

/// [`parts`] with the default upload knobs, indexing into a
/// [`GatedCatalog`] whose gate is shut, changed by `tweak`.
fn gated_path(
    fx: &Fixture,
    dir: &Path,
    tweak: impl FnOnce(&mut DrainParts),
) -> (Drain, Arc<GatedCatalog>) {
    let catalog = GatedCatalog::new(dir, false);
    let mut p = parts(fx, dir, fx.config(dir).upload);
    p.catalog = catalog.clone() as Arc<dyn Catalog>;
    tweak(&mut p);
    (Drain::new(p), catalog)
}

/// Validation runs a few packs ahead of the uploads, never more
/// than `small_pack_workers` validated or validating. One upload at a time
/// (`pipeline_depth` 1), the second stalls: the three packs behind it are
/// validated, and the corrupt one behind those (the sixth) is not read
/// (not quarantined) until the store moves again; then it is, and the rest
/// go up.
#[test]
fn validation_runs_at_most_small_pack_workers_packs_ahead_of_the_uploads() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let spool = held_spool(own.dir());
    let base = spool_core::pack::now_ms();
    for i in 0..8u64 {
        let id = spool_core::PackId::with_timestamp(base + i);
        let bytes = if i == 5 {
            spool_core::pack::testing_misframed_pack(id)
        } else {
            let mut w = spool_core::PackWriter::new(id, base);
            w.push_record(format!("record {i}").as_bytes());
            w.finish()
        };
        spool.stage(None, id, &bytes).unwrap();
    }
    fx.store.script(
        Rule::new(Op::CreateMultipart, Action::Stall)
            .after(1)
            .times(1),
    );
    let mut c = fx.config(own.dir());
    c.adopt = false;
    c.pipeline_depth = 1;
    c.upload.max_workers = 1;
    c.upload.small_pack_workers = 3;
    c.upload.multipart_threshold = 16; // validated by the pipeline
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(wait_for(Duration::from_secs(10), || fx
        .store
        .calls(Op::CreateMultipart)
        >= 2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        files(own.dir(), "quarantined"),
        0,
        "a pack more than small_pack_workers ahead of the uploads was read"
    );
    fx.store.release_stalls();
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    let snap = svc.snapshot();
    assert_eq!((snap.quarantined, snap.indexed), (1, 7), "{snap:?}");
    // at its limit the feed waits; it does not spin on empty validation
    // tasks through the 300 ms stall
    let validating = snap.stage_times.validate;
    assert!(validating < Duration::from_millis(150), "{validating:?}");
    svc.stop().unwrap();
}

/// Jobs for `packs` of `dir`, staged by this process.
fn jobs_of(path: &Drain, packs: Vec<spool_core::ReadyPack>) -> Vec<Job> {
    packs
        .into_iter()
        .map(|pack| Job::new(pack, path.own().clone(), Origin::this_process("h")))
        .collect()
}

/// A bound that cuts nothing for 30 s.
fn no_cut() -> Bound {
    Bound::new(
        Instant::now() + Duration::from_secs(30),
        tokio_util::sync::CancellationToken::new(),
    )
}

/// Only a corrupt pack is quarantined. A pack the pipeline cannot
/// read for another reason (here a directory where its file was: EISDIR)
/// is reported and left where it is, not renamed `.quarantined`; the valid
/// pack beside it is indexed.
#[test]
fn a_pack_that_cannot_be_read_is_reported_and_left_in_place_not_quarantined() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 1);
    let mut upload = fx.config(own.dir()).upload;
    upload.multipart_threshold = 16; // validated by the pipeline, not the upload
    let mut path = upload_path(&fx, own.dir(), upload);
    let never = Arc::new(AtomicBool::new(false));
    let mut packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let id = spool_core::PackId::generate();
    let bad = own.dir().join(format!("{id}.ready"));
    std::fs::create_dir(&bad).unwrap();
    packs.push(spool_core::ReadyPack {
        path: bad.clone(),
        id,
        bytes: 4096,
        ordinal: None,
    });
    let jobs = jobs_of(&path, packs);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    let outcome = |id: spool_core::PackId| {
        done.iter()
            .find(|(j, _)| j.pack().id == id)
            .map(|(_, o)| format!("{o:?}"))
            .unwrap()
    };
    assert!(
        outcome(id).starts_with("Failed { retryable: true"),
        "{}",
        outcome(id)
    );
    assert!(bad.is_dir(), "the unreadable pack was moved");
    assert_eq!(path.counters().quarantined(), 0);
    let err = path.counters().last_error().unwrap_or_default().to_string();
    assert!(err.contains(&bad.display().to_string()), "{err}");
    assert_eq!(files(own.dir(), "quarantined"), 0);
    let valid: Vec<_> = done.iter().filter(|(j, _)| j.pack().id != id).collect();
    assert_eq!(valid.len(), 1);
    assert!(
        matches!(valid[0].1, PackOutcome::Indexed),
        "{:?}",
        valid[0].1
    );
}

/// The outcomes of `done`, by name (`Indexed`, `Owed`, ...), in order.
fn outcome_names(done: &[(Job, PackOutcome)]) -> Vec<String> {
    done.iter()
        .map(|(_, o)| {
            format!("{o:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A pack this pipeline did not validate itself and
/// that comes back stored without a summary (a `file://` store that found
/// it at its key before the copy: a predecessor's upload) is validated from
/// its file before its row is made; a corrupt one is quarantined, not
/// merely reported, and never indexed. The valid pack beside it is indexed.
#[test]
fn a_pack_found_already_stored_is_validated_and_quarantined_when_corrupt() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 1);
    let id = spool_core::PackId::generate();
    let bad = spool_core::pack::testing_misframed_pack(id);
    std::fs::write(own.dir().join(format!("{id}.ready")), &bad).unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(store_dir.path()).unwrap();
    let store = spool_upload::Store::from_url(url.as_str(), &Default::default()).unwrap();
    let mut p = parts(&fx, own.dir(), fx.config(own.dir()).upload);
    p.uploader = spool_upload::Uploader::new(store, fx.config(own.dir()).upload).unwrap();
    let mut path = Drain::new(p);
    assert!(path.uploader.validates_whole(bad.len() as u64));
    // a predecessor stored the very same bytes at its key
    let key = store_dir.path().join(path.uploader.key(&id).as_ref());
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, &bad).unwrap();
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    let of_bad: Vec<_> = done.iter().filter(|(j, _)| j.pack().id == id).collect();
    assert!(
        matches!(of_bad[0].1, PackOutcome::Quarantined { .. }),
        "{:?}",
        of_bad[0].1
    );
    assert!(own.dir().join(format!("{id}.quarantined")).exists());
    assert!(block_on(fx.catalog.get(&id.to_hex())).unwrap().is_none());
    assert_eq!(path.counters().quarantined(), 1);
    assert_eq!(block_on(fx.catalog.count()).unwrap(), 1, "the valid pack");
}

/// A pipeline that loses the lease it indexes under (catalog
/// scope) indexes nothing more: the batch it was about to send and every
/// upload that lands afterwards are owed (kept in the backlog, their
/// files in place), nothing is removed, and why is reported.
#[test]
fn without_the_lease_what_is_uploaded_is_owed_and_nothing_is_indexed_or_removed() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 6);
    let mut p = parts(&fx, own.dir(), fx.config(own.dir()).upload);
    p.fenced = true; // lease-gated, and no lease held
    p.index_batch = 1; // the first upload closes a batch at once
    let mut path = Drain::new(p);
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 6]);
    assert_eq!(path.owed(), 6);
    assert_eq!(block_on(fx.catalog.count()).unwrap(), 0);
    assert_eq!(files(own.dir(), "ready"), 6, "an owed pack's file removed");
    let err = path.counters().last_error().unwrap_or_default().to_string();
    assert!(err.contains("lease is not held"), "{err}");
}

/// A retryable upload failure (the store answers 503) halts new
/// uploads for the rest of the run (the loop backs off) instead of trying
/// every other pack against a store in trouble: one pack's attempts, the
/// rest not done and still ready.
#[test]
fn a_retryable_upload_failure_halts_new_uploads_for_the_run() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 10);
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let mut upload = fx.config(own.dir()).upload;
    upload.max_workers = 1;
    upload.small_pack_workers = 1;
    let attempts = upload.max_attempts as usize;
    let mut path = upload_path(&fx, own.dir(), upload);
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    let names = outcome_names(&done);
    assert_eq!(
        names.iter().filter(|n| *n == "Failed").count(),
        1,
        "{names:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "Cancelled").count(), 9);
    assert_eq!(fx.store.calls(Op::Put), attempts, "one pack's attempts");
    assert_eq!(files(own.dir(), "ready"), 10);
}

/// A bound with `deadline` whose cancel is cut 300 ms from now (as the
/// cycle's watcher cuts it at the cycle's deadline, or a stop at any time).
fn cut_after_300ms(deadline: Instant) -> Bound {
    let cancel = tokio_util::sync::CancellationToken::new();
    let cut = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        cut.cancel();
    });
    Bound::new(deadline, cancel)
}

/// Uploads a cancel cut at the deadline of the flush or cycle are
/// reported, naming the store and how many; a stop (a cancel before the
/// deadline) is not reported as a timeout. Nothing is removed either way.
#[test]
fn uploads_cut_at_the_deadline_are_reported_a_stop_is_not() {
    for at_deadline in [true, false] {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 3);
        fx.store.script(Rule::new(Op::Put, Action::Stall));
        let mut path = upload_path(&fx, own.dir(), fx.config(own.dir()).upload);
        let never = Arc::new(AtomicBool::new(false));
        let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
        let jobs = jobs_of(&path, packs);
        let deadline = if at_deadline {
            Instant::now() + Duration::from_millis(300)
        } else {
            Instant::now() + Duration::from_secs(30)
        };
        let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
        assert_eq!(outcome_names(&done), vec!["Cancelled"; 3]);
        let err = path.counters().last_error().unwrap_or_default().to_string();
        let reported =
            err.contains("did not finish uploading 3 pack(s)") && err.contains("store memory");
        assert_eq!(reported, at_deadline, "deadline {at_deadline}: {err}");
        assert_eq!(files(own.dir(), "ready"), 3);
    }
}

/// Removal comes after the catalog's Ok, and a removal that fails
/// (here the pack's file became a directory while its row was indexed) is
/// reported naming the file; the row stays, the directory is not touched.
#[test]
fn a_removal_that_fails_after_the_index_is_reported_naming_the_file() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let ids = stage(own.dir(), 1);
    let (mut path, catalog) = gated_path(&fx, own.dir(), |_| {});
    let file = own.dir().join(format!("{}.ready", ids[0]));
    let swapper = {
        let (catalog, file) = (catalog.clone(), file.clone());
        std::thread::spawn(move || {
            assert!(wait_for(Duration::from_secs(10), || catalog.calls() >= 1));
            std::fs::remove_file(&file).unwrap();
            std::fs::create_dir(&file).unwrap();
            catalog.set_open(true);
        })
    };
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    swapper.join().unwrap();
    assert_eq!(outcome_names(&done), vec!["Indexed"]);
    assert_eq!(catalog.rows(), 1);
    assert!(file.is_dir(), "the directory in its place was touched");
    let err = path.counters().last_error().unwrap_or_default().to_string();
    assert!(
        err.contains("removing indexed pack") && err.contains(&file.display().to_string()),
        "{err}"
    );
}

/// A catalog that stalls past the deadline (the uploads all
/// landed) is the catalog's failure, not the store's: what is uploaded is
/// owed and nothing is reported as uploads left unfinished.
#[test]
fn a_catalog_stalled_past_the_deadline_is_not_reported_as_unfinished_uploads() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 2);
    let (mut path, _gate) = gated_path(&fx, own.dir(), |_| {});
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 2]);
    let err = path.counters().last_error().unwrap_or_default().to_string();
    assert!(!err.contains("did not finish uploading"), "{err}");
    assert_eq!(files(own.dir(), "ready"), 2);
}

/// Owed packs go back in as jobs marked uploaded, through the one index
/// stage: the next run indexes them and removes their files after the
/// catalog's `Ok`, with no call to the store (nothing is uploaded twice).
#[test]
fn owed_packs_go_back_in_marked_uploaded_and_are_indexed_without_a_store_call() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 3);
    let (mut path, catalog) = gated_path(&fx, own.dir(), |_| {});
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 3]);
    assert_eq!(path.owed(), 3);
    let store_calls = |s: &spool_upload::testing::FaultStore| {
        [Op::Put, Op::CreateMultipart, Op::PutPart, Op::Head, Op::Get]
            .map(|op| s.calls(op))
            .iter()
            .sum::<usize>()
    };
    let before = store_calls(&fx.store);
    catalog.set_open(true);
    // the listing names the owed packs again: they are not taken twice
    let listed = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = path.own_jobs(listed);
    assert_eq!(
        jobs.len(),
        3,
        "an owed pack listed again became a second job"
    );
    assert!(jobs.iter().all(|j| j.row().is_some()));
    let done = block_on(path.run(jobs, &no_cut(), &never));
    assert_eq!(outcome_names(&done), vec!["Indexed"; 3]);
    assert_eq!((path.owed(), catalog.rows()), (0, 3));
    assert_eq!(
        store_calls(&fx.store),
        before,
        "an owed pack was uploaded again"
    );
    assert_eq!(files(own.dir(), "ready"), 0, "an indexed pack's file kept");
    assert_eq!(catalog.gone_at_call(), 0, "a file removed before its row");
}

/// A directory let go of takes its owed packs with it: they are never
/// indexed nor removed by this drain (the successor uploads them again and
/// indexes them), and their files stay.
#[test]
fn a_directory_let_go_of_is_forgotten_by_the_backlog_and_keeps_its_files() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 2);
    let (mut path, catalog) = gated_path(&fx, own.dir(), |_| {});
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(path.owed(), 2);
    path.forget(own.dir());
    assert_eq!(path.owed(), 0);
    catalog.set_open(true);
    let jobs = path.own_jobs(Vec::new());
    assert!(jobs.is_empty());
    assert_eq!(catalog.rows(), 0);
    assert_eq!(files(own.dir(), "ready"), 2);
}

/// A live owner's consented packs are only read: once indexed, every file
/// is still where it was (the owner removes it, once told), the drain
/// hands them over to be confirmed, and nothing in the owner's directory
/// was created, renamed or removed.
#[test]
fn handed_off_packs_are_indexed_and_left_in_place_for_their_owner() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let owner = fx.claim(&fx.dest, 1);
    stage(owner.dir(), 3);
    let mut path = upload_path(&fx, own.dir(), fx.config(own.dir()).upload);
    let never = Arc::new(AtomicBool::new(false));
    let before = listing(owner.dir());
    let packs = spool_core::spool::scan_dir(owner.dir(), &never).unwrap();
    let jobs = packs
        .into_iter()
        .map(|p| Job::handed_off(p, owner.dir().to_path_buf(), Origin::this_process("h")))
        .collect();
    let done = block_on(path.run(jobs, &no_cut(), &never));
    assert_eq!(outcome_names(&done), vec!["Indexed"; 3]);
    assert_eq!(block_on(fx.catalog.count()).unwrap(), 3);
    assert_eq!(
        listing(owner.dir()),
        before,
        "the owner's directory was changed"
    );
    assert_eq!(path.take_confirmable().len(), 3);
    assert!(path.take_confirmable().is_empty());
}

/// The names and sizes of every file under `dir`.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (e.file_name().to_string_lossy().into_owned(), m.len())
        })
        .collect();
    out.sort();
    out
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(u.user_time()) + secs(u.system_time())
}

mod serial {
    use super::*;

    /// A batch closes at once when the pipeline is at its depth, however long
    /// the linger, and the pipeline goes on: with two packs out at a time
    /// (`pipeline_depth` 2), each pair is indexed the moment its uploads end,
    /// which frees the depth for the next pair, so one run indexes all six
    /// (nothing is left owed or not done for a later cycle), the pacing of
    /// index calls (a second's linger here) costing a backlog nothing.
    #[test]
    fn a_batch_closes_when_no_upload_is_in_flight_so_one_run_indexes_everything() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 6);
        let mut p = parts(&fx, own.dir(), fx.config(own.dir()).upload);
        p.pipeline_depth = 2;
        p.index_batch = 64;
        p.index_linger = Duration::from_secs(1);
        let mut path = Drain::new(p);
        let never = Arc::new(AtomicBool::new(false));
        let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
        let jobs = jobs_of(&path, packs);
        let t = Instant::now();
        let done = block_on(path.run(jobs, &no_cut(), &never));
        let outcomes: Vec<String> = done.iter().map(|(_, o)| format!("{o:?}")).collect();
        assert!(
            outcomes.iter().all(|o| o == "Indexed"),
            "{outcomes:?} after {:?}",
            t.elapsed()
        );
        assert_eq!(outcomes.len(), 6);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 6);
        assert!(path.owed() == 0);
    }

    /// A steady trickle makes at most one index call per `index_linger`: a
    /// lone pack after a quiet spell is indexed at once, one landing right
    /// after a call waits for the linger since that call, and after a quiet
    /// linger a pack goes at once again.
    #[test]
    fn index_calls_are_spaced_by_the_linger_unless_the_batch_is_full() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let mut p = parts(&fx, own.dir(), fx.config(own.dir()).upload);
        let linger = Duration::from_millis(1500);
        p.index_linger = linger;
        let mut path = Drain::new(p);
        let never = Arc::new(AtomicBool::new(false));
        let one_pack = |path: &mut Drain| {
            stage(own.dir(), 1);
            let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
            let jobs = jobs_of(path, packs);
            let t = Instant::now();
            let done = block_on(path.run(jobs, &no_cut(), &never));
            assert_eq!(outcome_names(&done), ["Indexed"]);
            t.elapsed()
        };
        let first = one_pack(&mut path);
        assert!(
            first < Duration::from_secs(1),
            "a lone pack waited {first:?}"
        );
        let started = Instant::now();
        let second = one_pack(&mut path);
        assert!(
            first + second >= linger - Duration::from_millis(50),
            "two index calls {:?} apart, under the {linger:?} linger",
            first + second
        );
        std::thread::sleep(linger);
        let third = one_pack(&mut path);
        assert!(
            third < Duration::from_secs(1),
            "after a quiet linger a pack waited {third:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 3);
    }

    /// A catalog that pushes back (here an index call held for 800 ms, as a
    /// ClickHouse delays inserts into a partition with too many parts)
    /// doubles the linger in force; a quick answer brings it back to
    /// `index_linger`.
    #[test]
    fn a_slow_catalog_lengthens_the_linger_and_quick_answers_bring_it_back() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let linger = Duration::from_millis(20);
        let (mut path, catalog) = gated_path(&fx, own.dir(), |p| p.index_linger = linger);
        assert_eq!(path.pace(), linger);
        let never = Arc::new(AtomicBool::new(false));
        let one_pack = |path: &mut Drain| {
            stage(own.dir(), 1);
            let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
            let done = block_on(path.run(jobs_of(path, packs), &no_cut(), &never));
            assert_eq!(outcome_names(&done), ["Indexed"]);
        };
        let opener = {
            let catalog = catalog.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(800));
                catalog.set_open(true);
            })
        };
        one_pack(&mut path);
        opener.join().unwrap();
        assert_eq!(path.pace(), linger * 2, "a slow index call lengthens it");
        one_pack(&mut path);
        assert_eq!(path.pace(), linger, "a quick one brings it back");
    }

    /// The stage clock charges a drain's time to the stages busy in it: an
    /// index call held 400 ms by the catalog shows as at least that much
    /// index time, while uploads and removals show their own, and the time
    /// nothing was in flight is small (what the snapshot's `stage_times` and
    /// `spool run --json`'s `stage_ms` report).
    #[test]
    fn a_drain_charges_its_time_to_the_stages_busy_in_it() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 4);
        let (mut path, catalog) = gated_path(&fx, own.dir(), |p| p.index_batch = 64);
        let never = Arc::new(AtomicBool::new(false));
        let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
        let jobs = jobs_of(&path, packs);
        let opener = {
            let catalog = catalog.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                catalog.set_open(true);
            })
        };
        let t = Instant::now();
        let done = block_on(path.run(jobs, &no_cut(), &never));
        let wall = t.elapsed();
        opener.join().unwrap();
        assert!(done.iter().all(|(_, o)| matches!(o, PackOutcome::Indexed)));
        let s = path.counters().stage_times();
        assert!(s.index >= Duration::from_millis(300), "{s:?} in {wall:?}");
        assert!(s.index <= wall, "{s:?} in {wall:?}");
        assert!(s.upload > Duration::ZERO && s.upload < s.index, "{s:?}");
        assert!(s.idle < Duration::from_millis(200), "{s:?} in {wall:?}");
        // nothing is validated apart (each pack is validated by its upload's
        // read: no validation task at all) and nothing removed while the
        // index call is held
        assert_eq!(s.validate, Duration::ZERO, "{s:?} in {wall:?}");
        assert!(s.remove < Duration::from_millis(200), "{s:?} in {wall:?}");
        assert_eq!(s.list, Duration::ZERO, "a drain lists nothing itself");
    }

    /// The linger is armed only while no index call is in flight: a
    /// pipeline whose uploads are done and whose index call the catalog
    /// holds waits on that call, it does not wake at a linger long past
    /// (a spin: a second of CPU a second).
    #[test]
    fn a_pipeline_waiting_on_its_index_call_does_not_spin() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 3);
        // the first upload's batch goes alone
        let (mut path, catalog) = gated_path(&fx, own.dir(), |p| p.index_batch = 1);
        let store = fx.store.clone();
        let gate = catalog.clone();
        let run = std::thread::spawn(move || {
            let never = Arc::new(AtomicBool::new(false));
            let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
            let jobs = jobs_of(&path, packs);
            let done = block_on(path.run(jobs, &no_cut(), &never));
            (outcome_names(&done), own)
        });
        assert!(wait_for(Duration::from_secs(10), || gate.calls() >= 1
            && store.calls(Op::Put) >= 3));
        std::thread::sleep(Duration::from_millis(100));
        let before = cpu_seconds();
        std::thread::sleep(Duration::from_secs(1));
        let used = cpu_seconds() - before;
        gate.set_open(true);
        let (names, _own) = run.join().unwrap();
        assert!(
            used < 0.3,
            "{used:.2} s of CPU in 1 s waiting on the catalog"
        );
        assert_eq!(names, vec!["Indexed"; 3]);
    }

    /// The snapshot's `waiting_on` names the call the pipeline has waited
    /// on for a second or more: the uploads in flight, then the index call.
    #[test]
    fn the_snapshot_names_the_uploads_then_the_index_call_the_pipeline_waits_on() {
        for index in [false, true] {
            let fx = Fixture::new();
            let own = fx.claim(&fx.dest, 0);
            stage(own.dir(), 3);
            let catalog = GatedCatalog::new(own.dir(), !index);
            if !index {
                fx.store.script(Rule::new(Op::Put, Action::Stall));
            }
            let mut c = fx.config(own.dir());
            c.catalog = catalog.clone() as Arc<dyn Catalog>;
            c.adopt = false;
            let mut svc = StorageService::new(c).unwrap();
            svc.start().unwrap();
            let expect = if index {
                "catalog gated memory catalog: indexing 3 pack(s)"
            } else {
                "uploading 3 pack(s)"
            };
            assert!(
                wait_for(Duration::from_secs(10), || svc
                    .snapshot()
                    .waiting_on
                    .is_some_and(|w| w.contains(expect))),
                "index {index}: waiting_on {:?}",
                svc.snapshot().waiting_on
            );
            svc.stop().unwrap();
        }
    }

    #[test]
    fn a_stop_cuts_uploads_and_the_index_call_in_flight_and_removes_nothing() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 12);
        let catalog = GatedCatalog::new(own.dir(), false);
        // the first four PUTs land, every later one stalls
        fx.store.script(Rule::new(Op::Put, Action::Stall).after(4));
        let mut c = fx.config(own.dir());
        c.catalog = catalog.clone() as Arc<dyn Catalog>;
        c.adopt = false;
        c.index_batch = 2;
        c.upload.max_workers = 2;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(wait_for(Duration::from_secs(10), || catalog.calls() >= 1
            && fx.store.calls(Op::Put) >= 6));
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "stop took {:?}",
            t.elapsed()
        );
        assert_eq!(files(own.dir(), "ready"), 12, "a stop removed a file");
        assert_eq!(catalog.rows(), 0);
    }

    #[test]
    fn a_batch_closes_at_once_when_no_upload_is_in_flight_however_long_the_linger() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 6);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.index_linger = Duration::from_secs(30);
        c.upload.max_workers = 8;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        let t = Instant::now();
        assert!(svc.flush(Duration::from_secs(20)).unwrap());
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "flush took {:?}",
            t.elapsed()
        );
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 6);
        svc.stop().unwrap();
    }
}

/// A catalog that refuses the credentials refuses the whole destination:
/// the drain says so (what the snapshot's `destination_refused` reports)
/// and owes the packs; a catalog that does not answer fails one batch, not
/// the destination; an answer clears the refusal.
#[test]
fn a_catalog_refusing_the_credentials_refuses_the_destination_an_outage_does_not() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let (mut path, catalog) = gated_path(&fx, own.dir(), |_| {});
    catalog.set_open(true);
    let never = Arc::new(AtomicBool::new(false));
    let mut one_pack = |how: Option<Refusal>| {
        catalog.refuse(how);
        stage(own.dir(), 1);
        let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
        let jobs = jobs_of(&path, packs);
        let done = block_on(path.run(jobs, &no_cut(), &never));
        let refused = path.counters().refused().map(str::to_string);
        (outcome_names(&done), refused)
    };
    let (outcomes, refused) = one_pack(Some(Refusal::Unreachable));
    assert_eq!(outcomes, ["Owed"]);
    assert_eq!(refused, None, "an outage is no refusal of the destination");
    let (outcomes, refused) = one_pack(Some(Refusal::Auth));
    assert!(outcomes.iter().all(|o| o == "Owed"), "{outcomes:?}");
    let refused = refused.expect("the credentials refused: the destination is");
    assert!(
        refused.contains("gated memory catalog") && refused.contains("credentials"),
        "{refused}"
    );
    let (outcomes, refused) = one_pack(None);
    assert!(outcomes.iter().all(|o| o == "Indexed"), "{outcomes:?}");
    assert_eq!(refused, None, "an answer clears the refusal");
}

mod bundles;

/// Besides `pipeline_depth` packs, at most twice `max_in_flight_bytes` are
/// out of the spool and not indexed: with the catalog not answering and a
/// depth of thousands, three packs of 600 KiB go up under a 1 MiB
/// in-flight bound (1.8 MiB out), the fourth waits.
#[test]
fn the_bytes_out_and_not_indexed_stay_within_twice_the_in_flight_bound() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage_sized(own.dir(), 8, 600 << 10);
    let (mut path, _catalog) = gated_path(&fx, own.dir(), |p| {
        p.pipeline_depth = 4096;
        let mut u = p.uploader.config().clone();
        u.max_in_flight_bytes = 1 << 20;
        p.uploader = spool_upload::Uploader::new(p.uploader.store().clone(), u).unwrap();
    });
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    let mut names = outcome_names(&done);
    names.sort();
    assert_eq!(fx.store.calls(Op::Put), 3, "{names:?}");
    assert_eq!(
        names.iter().filter(|n| *n == "Owed").count(),
        3,
        "{names:?}"
    );
}
