//! Service tests on fakes: the memory catalog, the fault-scripting store,
//! real temp directories and real locks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use spool_catalog::{Catalog, LeaseScope, MemoryCatalog};
use spool_core::spool::SpoolConfig;
use spool_core::{claim_rank_dir, Destination, PackId, PackWriter, Spool};
use spool_lock::{Claim, LockMode, LockOptions};
use spool_upload::testing::{Action, FaultStore, Injected, Op, Rule};

use crate::{Error, ServiceConfig, StorageService};

pub(crate) fn destination(tag: &str) -> Destination {
    Destination {
        catalog_url: format!("memory://{tag}"),
        database: "db".into(),
        table_prefix: "spool_".into(),
        store_url: format!("memory://{tag}"),
        store_id: "default".into(),
    }
}

pub(crate) struct Fixture {
    pub(crate) _root: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) dest: Destination,
    pub(crate) store: Arc<FaultStore>,
    pub(crate) catalog: Arc<MemoryCatalog>,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let fx = Fixture {
            root: root.path().canonicalize().unwrap(),
            _root: root,
            dest: destination("a"),
            store: Arc::new(FaultStore::new(Arc::new(InMemory::new()))),
            catalog: Arc::new(MemoryCatalog::new()),
        };
        // the store's prefixes ("" for services, "p" for bare drains)
        // recorded for this catalog up front, behind the fault store: the
        // tests script and count the packs' calls, not the record's
        for prefix in ["", "p"] {
            fx.record(prefix, Duration::from_secs(3600));
        }
        fx
    }

    /// Records (again) store prefix `prefix` as serving this fixture's
    /// catalog, with `grace`.
    pub(crate) fn record(&self, prefix: &str, grace: Duration) {
        let inner: Arc<dyn ObjectStore> = self.store.inner().clone();
        let store = spool_upload::Store::new(inner.clone(), prefix, "memory", true).unwrap();
        // (a take-over keeps a record's grace: this one is set anew)
        let _ = block_on(inner.delete(&crate::prefix_record::record_key(&store)));
        block_on(crate::prefix_record::take_over(
            &store,
            &self.identity(),
            "default",
            grace,
            Duration::ZERO,
        ))
        .unwrap();
    }

    /// This fixture's catalog as a prefix record names it.
    pub(crate) fn identity(&self) -> crate::prefix_record::CatalogIdentity {
        crate::prefix_record::CatalogIdentity::of(&self.dest, &spool_lock::host_name())
    }

    pub(crate) fn claim(&self, dest: &Destination, rank: u64) -> Claim {
        claim_rank_dir(
            &self.root,
            &dest.catalog_key().unwrap(),
            rank,
            &LockOptions::default(),
        )
        .unwrap()
    }

    pub(crate) fn config(&self, dir: &Path) -> ServiceConfig {
        let mut c = ServiceConfig::new(
            dir,
            self.dest.clone(),
            spool_upload::Store::new(
                self.store.clone() as Arc<dyn ObjectStore>,
                "",
                self.dest.store_url.clone(),
                true,
            )
            .unwrap(),
            self.catalog.clone() as Arc<dyn Catalog>,
        );
        c.lock_mode = LockMode::HeldByCaller;
        c.lease_ttl = Duration::from_secs(10);
        c.poll_interval = Duration::from_millis(200);
        // the memory catalog stands in for a remote one: its index linger
        c.index_linger = crate::config::keys::INDEX_LINGER.default_value();
        c.max_backoff = Duration::from_millis(500);
        c.upload.max_attempts = 2;
        c.upload.backoff_initial = Duration::from_millis(10);
        c.upload.backoff_max = Duration::from_millis(20);
        // one object per pack, which most tests count; the tests of
        // bundles turn them on (`drain/pipeline/tests.rs`, "bundles")
        c.upload.bundle_bytes = 0;
        c.registry = Arc::new(spool_core::registry::Registry::new());
        c
    }

    /// A dead sibling, rank `rank`: `packs` packs staged, its lock let go.
    pub(crate) fn dead_sibling(&self, rank: u64, packs: usize) -> PathBuf {
        let sib = self.claim(&self.dest, rank);
        let dir = sib.dir().to_path_buf();
        stage(&dir, packs);
        sib.release().unwrap();
        dir
    }

    pub(crate) async fn objects(&self) -> usize {
        // (spool's own records under `_spool/` are not packs)
        let l: Vec<_> = self.store.inner().list(None).try_collect().await.unwrap();
        l.iter()
            .filter(|m| !crate::prefix_record::is_record_key(m.location.as_ref()))
            .count()
    }
}

/// The spool of `dir`, whose lock this process holds.
pub(crate) fn held_spool(dir: &Path) -> Spool {
    Spool::open(
        dir,
        &SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..SpoolConfig::default()
        },
    )
    .unwrap()
}

/// Stages `n` packs into `dir` (whose lock this process holds).
pub(crate) fn stage(dir: &Path, n: usize) -> Vec<PackId> {
    let spool = held_spool(dir);
    (0..n)
        .map(|i| {
            let id = PackId::generate();
            let mut w = PackWriter::new(id, spool_core::pack::now_ms());
            w.push_record(format!("record {i}").as_bytes());
            spool.stage(None, id, &w.finish()).unwrap();
            id
        })
        .collect()
}

/// A log sink for one test: every line (INFO and up) written on this
/// thread while `f` runs.
pub(crate) fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (out, text)
}

pub(crate) fn files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == ext))
                .count()
        })
        .unwrap_or(0)
}

pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn construction_refuses_a_directory_outside_its_destinations_key() {
    let fx = Fixture::new();
    // a rank dir under another destination's key
    let other = fx.claim(&destination("other"), 0);
    let err = StorageService::new(fx.config(other.dir())).unwrap_err();
    assert!(matches!(err, Error::NotARankDir { .. }), "{err}");
    // a plain directory
    let plain = fx.root.join("plain");
    std::fs::create_dir(&plain).unwrap();
    assert!(matches!(
        StorageService::new(fx.config(&plain)).unwrap_err(),
        Error::NotARankDir { .. }
    ));
    // adoption off: accepted anywhere
    let mut c = fx.config(&plain);
    c.adopt = false;
    StorageService::new(c).unwrap();
    // its own rank directory: accepted
    let own = fx.claim(&fx.dest, 0);
    StorageService::new(fx.config(own.dir())).unwrap();
}

/// A started service on a rank directory it took itself
/// (`LockMode::Take`), and that directory.
fn service_that_took_its_directory(fx: &Fixture) -> (StorageService, PathBuf) {
    let dir = fx
        .root
        .join(fx.dest.catalog_key().unwrap())
        .join("r0-deadbeef");
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = fx.config(&dir);
    c.lock_mode = LockMode::Take;
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(dir.join(spool_lock::LOCK_FILE_NAME).exists(), "taken");
    (svc, dir)
}

/// A service that took its own directory (`LockMode::Take`) lets go of it
/// on stop and removes it once it is empty: nothing is left behind.
#[test]
fn a_service_that_took_its_directory_removes_it_on_stop_once_empty() {
    let fx = Fixture::new();
    let (mut svc, dir) = service_that_took_its_directory(&fx);
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    svc.stop().unwrap();
    assert!(!dir.exists(), "{} left behind on stop", dir.display());
}

/// Dropping a started service stops it: a directory it took is let go of
/// and removed once empty, as by [`StorageService::stop`].
#[test]
fn dropping_a_started_service_stops_it() {
    let fx = Fixture::new();
    let (svc, dir) = service_that_took_its_directory(&fx);
    drop(svc);
    assert!(!dir.exists(), "{} left behind on drop", dir.display());
}

/// A service's start sweeps a dead writer's temp files of its own
/// directory and says so; with none there, it says nothing. Dead siblings
/// count against the byte budget only when the service adopts them (here
/// it does not).
#[test]
fn start_logs_only_a_sweep_it_did_and_charges_siblings_only_when_adopting() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    fx.dead_sibling(1, 3);
    let torn = own
        .dir()
        .join(format!(".{}.0badf00d.open", PackId::generate()));
    std::fs::write(&torn, b"partial").unwrap();
    for first in [true, false] {
        let mut c = fx.config(own.dir());
        c.max_bytes = Some(1 << 30);
        c.adopt = false;
        let mut svc = StorageService::new(c).unwrap();
        let (started, log) = logged(|| svc.start());
        started.unwrap();
        assert_eq!(
            log.contains("swept dead writers' temp files"),
            first,
            "the first start sweeps, the second finds nothing: {log}"
        );
        assert!(!torn.exists());
        // the snapshot a cycle published, not the one before any cycle
        assert!(svc.wait_published(0, Duration::from_secs(10)) >= 1);
        assert_eq!(svc.snapshot().sibling_bytes, 0, "not adopting: not charged");
        svc.stop().unwrap();
    }
}

/// Each cycle publishes a snapshot, and [`StorageService::wait_published`]
/// counts them: a follower (`spool run --once`) wakes at a cycle's end.
#[test]
fn every_cycle_publishes_and_a_follower_counts_them() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    let first = svc.wait_published(0, Duration::from_secs(10));
    assert!(first >= 1, "no publication within 10 s");
    stage(own.dir(), 1);
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    let after = svc.wait_published(first, Duration::from_secs(10));
    assert!(
        after > first,
        "the flush's cycle published nothing: {after}"
    );
    svc.stop().unwrap();
}

#[test]
fn own_packs_are_uploaded_indexed_and_removed_by_flush() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let ids = stage(own.dir(), 3);
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    assert_eq!(files(own.dir(), "ready"), 0);
    assert_eq!(block_on(fx.objects()), 3);
    for id in &ids {
        let row = block_on(fx.catalog.get(&id.to_hex()))
            .unwrap()
            .expect("indexed");
        assert_eq!(row.records, 1);
    }
    let snap = svc.snapshot();
    assert_eq!((snap.uploaded, snap.indexed, snap.pending_index), (3, 3, 0));
    assert!(snap.cycles >= 1);
    svc.stop().unwrap();
    assert!(
        own.release_and_remove_if_empty().unwrap(),
        "clean close removes the empty dir"
    );
}

#[test]
fn a_non_retryable_own_pack_is_rejected_and_does_not_stall_the_loop() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let ids = stage(own.dir(), 2);
    let bad = ids[0].to_hex();
    // pack-specific: a different object already at its key
    let key = spool_upload::object_key(&object_store::path::Path::default(), &ids[0]);
    block_on(
        fx.store
            .inner()
            .put(&key, b"someone else's bytes".to_vec().into()),
    )
    .unwrap();
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    assert_eq!(files(own.dir(), "rejected"), 1);
    assert!(own.dir().join(format!("{bad}.rejected")).exists());
    assert_eq!(files(own.dir(), "ready"), 0);
    assert_eq!(svc.snapshot().rejected, 1);
    assert!(block_on(fx.catalog.get(&ids[1].to_hex()))
        .unwrap()
        .is_some());
    assert!(block_on(fx.catalog.get(&bad)).unwrap().is_none());
    svc.stop().unwrap();
    assert!(
        !own.release_and_remove_if_empty().unwrap(),
        "a dir with a rejected pack is kept"
    );
}

/// A store that refuses the whole destination (403 on every PUT:
/// wrong credentials) never sets a pack aside nor blocks a sibling: the
/// service backs off, reports it (`destination_refused`, `last_error`), keeps
/// every pack ready, and ships everything on its own once the store accepts
/// again (here: the credentials fixed, the script cleared).
#[test]
fn a_destination_wide_refusal_keeps_every_pack_ready_and_ships_once_fixed() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let sib_dir = fx.dead_sibling(1, 2);
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(403))));
    let mut c = fx.config(own.dir());
    c.recheck_interval = Duration::from_millis(200);
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || {
            let s = svc.snapshot();
            s.destination_refused.is_some() && s.upload_failures >= 4
        }),
        "the sibling's packs refused: {:?}",
        svc.snapshot()
    );
    // own packs staged now meet the same refusal
    stage(own.dir(), 2);
    let before = svc.snapshot().upload_failures;
    assert!(
        wait_for(Duration::from_secs(20), || svc.snapshot().upload_failures
            >= before + 4),
        "{:?}",
        svc.snapshot()
    );
    let snap = svc.snapshot();
    let refused = snap.destination_refused.clone().unwrap();
    assert!(
        refused.contains("refuses this destination") && refused.contains("privileges"),
        "{refused}"
    );
    assert_eq!(snap.rejected, 0, "{snap:?}");
    assert!(snap.blocked_siblings.is_empty(), "{snap:?}");
    assert_eq!(files(own.dir(), "ready"), 2);
    assert_eq!(files(own.dir(), "rejected"), 0);
    assert_eq!(files(&sib_dir, "ready") + files(&sib_dir, "rejected"), 2);
    assert_eq!(files(&sib_dir, "rejected"), 0);
    assert!(!matches!(
        spool_lock::read_owner(&sib_dir)
            .ok()
            .and_then(|o| o.record)
            .map(|r| r.purpose),
        Some(spool_lock::Purpose::Blocked(_))
    ));
    // the operator fixes the credentials; nobody touches a file
    fx.store.clear();
    assert!(
        wait_for(Duration::from_secs(20), || files(own.dir(), "ready") == 0
            && !sib_dir.exists()),
        "{:?}",
        svc.snapshot()
    );
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    let snap = svc.snapshot();
    assert_eq!((snap.indexed, snap.rejected), (4, 0), "{snap:?}");
    assert_eq!(snap.destination_refused, None, "{snap:?}");
    assert_eq!(block_on(fx.catalog.count()).unwrap(), 4);
    svc.stop().unwrap();
    assert!(own.release_and_remove_if_empty().unwrap());
}

#[test]
fn catalog_down_leaves_packs_owed_and_flush_says_so() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 2);
    fx.catalog.set_reachable(false);
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    let err = svc.flush(Duration::from_millis(800)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("2 pack(s) uploaded but not indexed"), "{msg}");
    assert_eq!(files(own.dir(), "ready"), 2, "owed packs keep their files");
    // the index call's own error, not a refusal of the destination
    let snap = svc.snapshot();
    let last = snap.last_error.clone().unwrap_or_default();
    assert!(last.contains("owed, indexed again next cycle"), "{snap:?}");
    assert_eq!(snap.destination_refused, None, "{snap:?}");
    fx.catalog.set_reachable(true);
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    assert_eq!(files(own.dir(), "ready"), 0);
    svc.stop().unwrap();
}

/// `deferred` counts the own ready packs a cycle left: none
/// after a cycle that indexed them all, every one while the store refuses
/// them.
#[test]
fn deferred_counts_the_own_packs_a_cycle_left() {
    for refused in [false, true] {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 3);
        if refused {
            fx.store
                .script(Rule::new(Op::Put, Action::Fail(Injected::Status(403))));
        }
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.poll_interval = Duration::from_secs(60);
        c.max_backoff = Duration::from_secs(60);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(wait_for(Duration::from_secs(10), || svc.snapshot().cycles >= 1));
        std::thread::sleep(Duration::from_millis(300));
        let snap = svc.snapshot();
        svc.stop().unwrap();
        let expect = if refused { (0, 3) } else { (3, 0) };
        assert_eq!((snap.indexed, snap.deferred), expect, "{snap:?}");
    }
}

/// An upload that fails with a 500 is that pack's failure, never a
/// refusal of the whole destination.
#[test]
fn a_failed_upload_is_its_packs_error_not_a_refusal_of_the_destination() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 1);
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(500))));
    let mut c = fx.config(own.dir());
    c.adopt = false;
    c.poll_interval = Duration::from_secs(60);
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(svc.flush(Duration::from_millis(800)).is_err());
    let snap = svc.snapshot();
    svc.stop().unwrap();
    // (the last error may be the flush's cut, which came after)
    assert!(snap.upload_failures > 0, "{snap:?}");
    assert_eq!(snap.destination_refused, None, "{snap:?}");
    assert_eq!(files(own.dir(), "ready"), 1);
}

/// The service's Debug names its directory and whether it runs.
#[test]
fn a_services_debug_names_its_directory_and_whether_it_runs() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let mut c = fx.config(own.dir());
    c.adopt = false;
    let mut svc = StorageService::new(c).unwrap();
    let shown = format!("{svc:?}");
    assert!(
        shown.starts_with("StorageService")
            && shown.contains(&format!("{:?}", own.dir()))
            && shown.contains("running: false"),
        "{shown}"
    );
    svc.start().unwrap();
    assert!(format!("{svc:?}").contains("running: true"), "{svc:?}");
    svc.stop().unwrap();
}

/// Each loop cycle reconciles the own spool's account with a
/// walk: bytes put in the directory behind the spool's back (here a
/// quarantined pack written by hand) are counted by the next cycle.
#[test]
fn a_loop_cycle_reconciles_the_own_spools_account() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let mut c = fx.config(own.dir());
    c.adopt = false;
    c.poll_interval = Duration::from_millis(100);
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(wait_for(Duration::from_secs(10), || svc.snapshot().cycles >= 1));
    let before = svc.spool().unwrap().usage().committed;
    let id = PackId::generate();
    std::fs::write(
        own.dir().join(format!("{id}.quarantined")),
        vec![0u8; 10_000],
    )
    .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || svc
            .spool()
            .unwrap()
            .usage()
            .committed
            >= before + 10_000),
        "committed {} (before {before})",
        svc.spool().unwrap().usage().committed
    );
    svc.stop().unwrap();
}

/// Waits until `cond` or `limit`.
pub(crate) fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn a_dead_sibling_is_adopted_and_removed_a_live_one_is_left_alone() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    // dead: staged, then its lock let go
    let dead = fx.claim(&fx.dest, 1);
    let dead_dir = dead.dir().to_path_buf();
    let dead_ids = stage(&dead_dir, 3);
    dead.release().unwrap();
    // live: this process keeps its claim
    let live = fx.claim(&fx.dest, 2);
    let live_ids = stage(live.dir(), 2);
    // another destination's dir: never looked at
    let foreign = fx.claim(&destination("b"), 3);
    let foreign_dir = foreign.dir().to_path_buf();
    stage(&foreign_dir, 1);
    foreign.release().unwrap();

    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    assert!(
        // the snapshot counts the sibling when its cycle ends, after the
        // directory is gone
        wait_for(Duration::from_secs(30), || !dead_dir.exists()
            && svc.snapshot().adopted_spools == 1),
        "dead sibling not drained: {:?}",
        svc.snapshot()
    );
    for id in &dead_ids {
        let row = block_on(fx.catalog.get(&id.to_hex()))
            .unwrap()
            .expect("indexed");
        // the dead producer named by the sibling's owner record (this
        // process claimed it), never the adopter's guess
        assert_eq!(row.source_pid, std::process::id(), "{row:?}");
        assert_eq!(row.source_host, spool_lock::host_name(), "{row:?}");
    }
    assert_eq!(block_on(fx.objects()), 3);
    let snap = svc.snapshot();
    assert_eq!(snap.adopted_spools, 1);
    // each cycle's listing of the own directory is timed
    assert!(snap.stage_times.list > Duration::ZERO, "{snap:?}");
    assert_eq!(snap.live_siblings, 1);
    assert_eq!(
        files(live.dir(), "ready"),
        live_ids.len(),
        "live sibling untouched"
    );
    assert_eq!(
        files(&foreign_dir, "ready"),
        1,
        "other destination untouched"
    );
    svc.stop().unwrap();
}

/// The lease is taken where it is needed: to adopt, or for every
/// upload and index in catalog scope. Adoption off in node scope, the
/// service indexes its own directory with no lease at all; adoption off in
/// catalog scope, it claims the catalog's lease and indexes under it.
#[test]
fn without_adoption_only_catalog_scope_takes_a_lease() {
    for scope in [LeaseScope::Node, LeaseScope::Catalog] {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 2);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.lease_scope = scope;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(
            svc.flush(Duration::from_secs(20)).unwrap(),
            "{scope:?}: {:?}",
            svc.snapshot()
        );
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 2, "{scope:?}");
        svc.stop().unwrap();
        let key = fx.dest.catalog_key().unwrap();
        let log = |s: LeaseScope| {
            block_on(
                fx.catalog
                    .lease_log(&s.lease_name(&key, &spool_lock::host_name())),
            )
            .unwrap()
            .len()
        };
        let catalog_claims = log(LeaseScope::Catalog);
        let node_claims = log(LeaseScope::Node);
        assert_eq!(node_claims, 0, "{scope:?}: a node lease without adoption");
        assert_eq!(
            catalog_claims > 0,
            scope == LeaseScope::Catalog,
            "{scope:?}: {catalog_claims} claims of the catalog lease"
        );
    }
}

/// The node lease is named after `node_name` (`<catalog_key>/<node_name>`),
/// not the host: two services on one host with different node names hold
/// two leases, so each simulated node (or container) adopts on its own.
#[test]
fn the_node_lease_is_named_after_the_node_name() {
    let fx = Fixture::new();
    let key = fx.dest.catalog_key().unwrap();
    let mut svcs = Vec::new();
    for node in ["sim-a", "sim-b"] {
        let own = fx.claim(&fx.dest, 0);
        let mut c = fx.config(own.dir());
        c.node_name = node.into();
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        svcs.push((own, svc));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !svcs.iter().all(|(_, s)| s.snapshot().lease_held) {
        assert!(std::time::Instant::now() < deadline, "both leases held");
        std::thread::sleep(Duration::from_millis(20));
    }
    for node in ["sim-a", "sim-b"] {
        let log = block_on(
            fx.catalog
                .lease_log(&LeaseScope::Node.lease_name(&key, node)),
        )
        .unwrap();
        assert!(!log.is_empty(), "no claim of {node}'s lease");
    }
    let host = LeaseScope::Node.lease_name(&key, &spool_lock::host_name());
    assert!(block_on(fx.catalog.lease_log(&host)).unwrap().is_empty());
    for (_, mut s) in svcs {
        s.stop().unwrap();
    }
}

/// A stop lets the loop end (every call it makes watches the stop token)
/// within its grace: the loop is never reported abandoned, the lease is
/// released by the loop's stop, not left to lapse.
#[test]
fn a_stop_lets_the_loop_end_within_its_grace_and_abandons_nothing() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 2);
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    let ((), log) = logged(|| svc.stop().unwrap());
    assert!(log.contains("storage service stopped"), "{log}");
    assert!(!log.contains("did not end"), "{log}");
    assert!(!log.contains("lapses after its TTL"), "{log}");
}

/// Liveness bounds, one at a time.
mod serial {
    use super::*;

    /// An idle loop (nothing to upload, nothing failed, no adoption) sleeps
    /// its poll interval between cycles: a few cycles a second at 200 ms,
    /// never a spin.
    #[test]
    fn an_idle_loop_sleeps_its_poll_interval_between_cycles() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.poll_interval = Duration::from_millis(200);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        std::thread::sleep(Duration::from_millis(1200));
        let cycles = svc.snapshot().cycles;
        svc.stop().unwrap();
        assert!((2..=12).contains(&cycles), "{cycles} cycles in 1.2 s");
    }

    /// A child process killed (and reaped) on drop, so a failed test never
    /// leaves it holding a lock (or the cargo lock's descriptor).
    struct Reader(std::process::Child);

    impl Drop for Reader {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A reader holding a shared flock on `dir`'s lock file (one process:
    /// `sh` keeps the descriptor `flock` locked and becomes `sleep`).
    fn shared_reader(dir: &Path) -> Reader {
        let lock = dir.join(spool_lock::LOCK_FILE_NAME);
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"exec 9<"$1" && flock -s 9 && echo locked && exec sleep 600"#)
            .arg("sh")
            .arg(&lock)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = Reader(child);
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(reader.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked", "{}", lock.display());
        reader
    }

    /// Writes `n` small sealed packs straight into `dir` (no fsync: the
    /// test only needs the files).
    fn write_packs(dir: &Path, n: usize) {
        use std::os::unix::fs::OpenOptionsExt;
        for i in 0..n {
            let id = PackId::generate();
            let mut w = PackWriter::new(id, spool_core::pack::now_ms());
            w.push_record(format!("record {i}").as_bytes());
            let path = dir.join(format!("{}.ready", id.to_hex()));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(&mut f, &w.finish()).unwrap();
        }
    }

    /// No blocking file system work on the async workers. On
    /// a runtime of one worker (where any blocking call stalls every task)
    /// the service lists, validates and drains a dead sibling of 40 000
    /// small packs (`Spool::open` of it reconciles every file), and takes
    /// five siblings a reader holds shared (each take waits out the shared
    /// flock for a second, spool-lock's retry), while its lease keeper renews
    /// on time throughout: no renewal more than `ttl / 3 + 1 s` after the
    /// previous one.
    #[test]
    fn lease_renewals_stay_on_time_while_a_sibling_of_40k_packs_is_adopted() {
        const PACKS: usize = 40_000;
        let base = Path::new("/dev/shm");
        let root = if base.is_dir() {
            tempfile::tempdir_in(base).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let fx = Fixture {
            root: root.path().canonicalize().unwrap(),
            _root: root,
            ..Fixture::new()
        };
        let own = fx.claim(&fx.dest, 0);
        let big = fx.claim(&fx.dest, 1);
        let big_dir = big.dir().to_path_buf();
        let t = Instant::now();
        write_packs(&big_dir, PACKS);
        eprintln!("wrote {PACKS} packs in {:?}", t.elapsed());
        big.release().unwrap();
        let mut readers = Vec::new();
        for rank in 2..7 {
            let c = fx.claim(&fx.dest, rank);
            let dir = c.dir().to_path_buf();
            stage(&dir, 1);
            c.release().unwrap();
            readers.push(shared_reader(&dir));
        }
        let mut c = fx.config(own.dir());
        c.runtime_workers = 1;
        c.lease_ttl = Duration::from_secs(5);
        // live siblings are never probed again; the shared-held ones are
        // taken again every 5 s, all five in a row
        c.recheck_interval = Duration::ZERO;
        c.adoption_slice = Duration::from_secs(6);
        c.upload.max_workers = 32;
        let ttl = c.lease_ttl;
        let mut svc = StorageService::new(c).unwrap();
        let t = Instant::now();
        svc.start().unwrap();
        assert!(
            wait_for(Duration::from_secs(60), || !big_dir.exists()),
            "the sibling of {PACKS} packs was not drained: {:?}",
            svc.snapshot()
        );
        let drained = t.elapsed();
        // the shared-held siblings are taken (and refused) once the big one
        // is done, one after the other, and again every 5 s; then two more
        // renewals are due
        assert!(
            wait_for(Duration::from_secs(20), || svc.snapshot().live_siblings
                == 5),
            "the shared-held siblings were not all taken: {:?}",
            svc.snapshot()
        );
        std::thread::sleep(Duration::from_secs(4));
        let snap = svc.snapshot();
        eprintln!(
            "drained in {drained:?}; renewals {}, max gap {:?}",
            snap.lease_renewals, snap.max_renewal_gap
        );
        assert_eq!(snap.adopted_packs, PACKS as u64, "{snap:?}");
        assert!(
            snap.last_error
                .as_deref()
                .is_some_and(|e| e.contains("shared")),
            "the shared-held siblings were taken and refused: {snap:?}"
        );
        let floor = (drained.as_secs() + 4) / 2;
        assert!(
            snap.lease_renewals >= floor,
            "only {} renewals in {drained:?} + 4 s: {snap:?}",
            snap.lease_renewals
        );
        let bound = ttl / 3 + Duration::from_secs(1);
        let gap = snap.max_renewal_gap.expect("renewed");
        assert!(
            gap <= bound,
            "a lease renewal came {gap:?} after the previous one (bound {bound:?}): \
             something blocked the service's async worker"
        );
        svc.stop().unwrap();
        drop(readers);
    }

    #[test]
    fn start_is_bounded_and_flush_returns_by_its_deadline_with_the_store_stalled() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 50);
        fx.store.script(Rule::new(Op::Put, Action::Stall));
        fx.store.script(Rule::new(Op::Head, Action::Stall));
        let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
        let t = Instant::now();
        svc.start().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "start took {:?}",
            t.elapsed()
        );
        let t = Instant::now();
        let err = svc.flush(Duration::from_millis(500)).unwrap_err();
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(500) + Duration::from_secs(1),
            "flush took {took:?}"
        );
        assert!(matches!(err, Error::FlushTimeout { .. }), "{err}");
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "stop took {:?}",
            t.elapsed()
        );
        assert_eq!(files(own.dir(), "ready"), 50, "nothing lost");
    }

    #[test]
    fn stop_is_prompt_during_a_stalled_upload() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 4);
        fx.store.script(Rule::new(Op::Put, Action::Stall));
        let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
        svc.start().unwrap();
        // all four in flight (one PUT each, within the workers), all stalled
        assert!(wait_for(Duration::from_secs(5), || fx.store.calls(Op::Put) == 4));
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "stop took {:?}",
            t.elapsed()
        );
        assert_eq!(files(own.dir(), "ready"), 4);
        // the stalled uploads were cut, and counted
        assert_eq!(svc.snapshot().cancelled_uploads, 4);
    }

    /// A started service (no adoption, a 60 s poll interval, `max_backoff`)
    /// over two own packs of `dir` that the store refuses (403 on every PUT).
    fn refused_own_packs(fx: &Fixture, dir: &Path, max_backoff: Duration) -> StorageService {
        stage(dir, 2);
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::Status(403))));
        let mut c = fx.config(dir);
        c.adopt = false;
        c.poll_interval = Duration::from_secs(60);
        c.max_backoff = max_backoff;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        svc
    }

    /// A flush whose cycles fail (the store refuses the destination: 403)
    /// naps between them rather than spinning until its deadline: about 20
    /// cycles a second (50 ms apart), the loop's own included.
    #[test]
    fn a_flush_naps_between_failing_cycles() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let mut svc = refused_own_packs(&fx, own.dir(), Duration::from_millis(500));
        let err = svc.flush(Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, Error::FlushTimeout { .. }), "{err}");
        let cycles = svc.snapshot().cycles;
        svc.stop().unwrap();
        assert!((5..=40).contains(&cycles), "{cycles} cycles in a 1 s flush");
        assert_eq!(files(own.dir(), "ready"), 2);
    }

    /// The loop backs off exponentially while its cycles fail
    /// (100 ms, 200 ms, 400 ms, … up to `max_backoff`), so a store that
    /// refuses every upload sees a handful of cycles in 2.5 s, not one
    /// every 100 ms.
    #[test]
    fn a_failing_loop_backs_off_exponentially() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let mut svc = refused_own_packs(&fx, own.dir(), Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(2500));
        let cycles = svc.snapshot().cycles;
        svc.stop().unwrap();
        // 0, 0.1, 0.3, 0.7, 1.5 s (then 3.1 s): 5 cycles
        assert!((3..=9).contains(&cycles), "{cycles} cycles in 2.5 s");
    }

    /// Adoption runs as many steps as fit in its slice in one cycle when no
    /// flush waits: a dead sibling of three packs is drained in a couple of
    /// loop cycles, not one cycle per step.
    #[test]
    fn adoption_takes_many_steps_per_cycle_when_no_flush_waits() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let sib_dir = fx.dead_sibling(1, 3);
        let mut c = fx.config(own.dir());
        c.poll_interval = Duration::from_secs(60);
        c.adoption_slice = Duration::from_secs(10);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(
            wait_for(Duration::from_secs(20), || !sib_dir.exists()),
            "{:?}",
            svc.snapshot()
        );
        std::thread::sleep(Duration::from_millis(300));
        let snap = svc.snapshot();
        svc.stop().unwrap();
        assert_eq!(snap.adopted_spools, 1, "{snap:?}");
        assert!(
            snap.cycles <= 4,
            "{} cycles to adopt one sibling",
            snap.cycles
        );
    }

    /// Holds the catalog-scope lease of `fx`'s destination for a minute as
    /// another process would.
    fn foreign_catalog_lease(fx: &Fixture) {
        let key = fx.dest.catalog_key().unwrap();
        let name = LeaseScope::Catalog.lease_name(&key, &spool_lock::host_name());
        let cfg = spool_catalog::LeaseConfig::new(Duration::from_secs(60)).unwrap();
        let claim = block_on(fx.catalog.acquire(&name, "someone-else:4242", &cfg)).unwrap();
        assert!(matches!(claim, spool_catalog::LeaseClaim::Held(_)));
    }

    /// A flush in catalog scope while another process holds the lease
    /// does no work (not even an upload) and naps between its cycles
    /// (about 20 a second), it does not spin until its deadline.
    #[test]
    fn a_flush_without_the_lease_naps_between_cycles() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 2);
        foreign_catalog_lease(&fx);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.lease_scope = LeaseScope::Catalog;
        c.poll_interval = Duration::from_secs(60);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(svc.flush(Duration::from_secs(1)).is_err());
        let cycles = svc.snapshot().cycles;
        svc.stop().unwrap();
        assert!(cycles <= 40, "{cycles} cycles in a 1 s flush");
        assert_eq!(files(own.dir(), "ready"), 2);
        assert_eq!(block_on(fx.objects()), 0, "uploads ran without the lease");
    }

    /// In catalog scope, the loop ships its packs as soon as its lease
    /// keeper acquires the lease another process let lapse, not a poll
    /// interval (a minute) later.
    #[test]
    fn catalog_scope_ships_as_soon_as_the_lease_is_acquired() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        stage(own.dir(), 2);
        let key = fx.dest.catalog_key().unwrap();
        let name = LeaseScope::Catalog.lease_name(&key, &spool_lock::host_name());
        // the shortest TTL a lease takes; never renewed, so it lapses
        let cfg = spool_catalog::LeaseConfig::new(Duration::from_secs(5)).unwrap();
        let claim = block_on(fx.catalog.acquire(&name, "someone-else:4242", &cfg)).unwrap();
        assert!(matches!(claim, spool_catalog::LeaseClaim::Held(_)));
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.lease_scope = LeaseScope::Catalog;
        c.lease_ttl = Duration::from_secs(5);
        c.poll_interval = Duration::from_secs(60);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        let shipped = wait_for(Duration::from_secs(20), || files(own.dir(), "ready") == 0);
        let snap = svc.snapshot();
        svc.stop().unwrap();
        assert!(shipped, "not shipped 20 s after the lease lapsed: {snap:?}");
        assert_eq!(block_on(fx.objects()), 2);
    }

    /// In catalog scope a foreign lease that outlives 2 x TTL
    /// latches the service though it never held the lease (a second single
    /// publisher is a misconfiguration); a flush of the latched service
    /// returns `false` at once.
    #[test]
    fn catalog_scope_latches_on_a_foreign_lease_it_never_held() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        foreign_catalog_lease(&fx);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.lease_scope = LeaseScope::Catalog;
        c.lease_ttl = Duration::from_secs(5);
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(
            wait_for(Duration::from_secs(20), || svc.snapshot().latched),
            "{:?}",
            svc.snapshot()
        );
        let snap = svc.snapshot();
        // latched, a flush gives up at once: nothing ships without the lease
        stage(own.dir(), 1);
        let t = Instant::now();
        assert!(!svc.flush(Duration::from_secs(5)).unwrap());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        svc.stop().unwrap();
        assert_eq!(
            snap.lease_holder.as_ref().map(|h| h.as_str()),
            Some("someone-else:4242")
        );
    }

    /// When a cycle's adoption slice runs out with work left, the loop goes
    /// on at once (not after its poll interval): a sibling is drained in
    /// slices of one step.
    #[test]
    fn adoption_goes_on_at_once_after_a_slice_that_ran_out() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let sib_dir = fx.dead_sibling(1, 3);
        let mut c = fx.config(own.dir());
        c.poll_interval = Duration::from_secs(60);
        c.adoption_slice = Duration::ZERO;
        c.pipeline_depth = 1;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(
            wait_for(Duration::from_secs(10), || !sib_dir.exists()),
            "{:?}",
            svc.snapshot()
        );
        svc.stop().unwrap();
    }

    /// A flush waiting while a sibling is adopted pauses adoption after its
    /// current step: the flush ships the own pack and returns long before
    /// the adoption slice (10 s) would end.
    #[test]
    fn a_flush_pauses_adoption_after_its_current_step() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let sib_dir = fx.dead_sibling(1, 40);
        fx.store.script(Rule::new(
            Op::Put,
            Action::Delay(Duration::from_millis(100)),
        ));
        let mut c = fx.config(own.dir());
        c.poll_interval = Duration::from_secs(60);
        c.adoption_slice = Duration::from_secs(10);
        c.pipeline_depth = 1;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        assert!(
            wait_for(Duration::from_secs(10), || block_on(fx.objects()) >= 2),
            "{:?}",
            svc.snapshot()
        );
        stage(own.dir(), 1);
        let t = Instant::now();
        assert!(svc.flush(Duration::from_secs(3)).unwrap());
        let took = t.elapsed();
        let left = files(&sib_dir, "ready");
        svc.stop().unwrap();
        assert!(took < Duration::from_secs(2), "flush took {took:?}");
        assert!(left > 0, "adoption was not paused: the sibling is drained");
    }

    /// A service of `dir` without adoption, polling every 30 s, started and
    /// asleep after its first cycle; its registry and cycle count.
    fn asleep(
        fx: &Fixture,
        dir: &std::path::Path,
    ) -> (StorageService, Arc<spool_core::registry::Registry>, u64) {
        let mut c = fx.config(dir);
        c.poll_interval = Duration::from_secs(30);
        c.adopt = false;
        let registry = c.registry.clone();
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        // let the first cycle run and the loop go to sleep
        assert!(wait_for(Duration::from_secs(5), || svc.snapshot().cycles >= 1));
        std::thread::sleep(Duration::from_millis(300));
        let before = svc.snapshot().cycles;
        (svc, registry, before)
    }

    #[test]
    fn a_registry_publication_wakes_the_loop_well_before_the_poll_interval() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let (mut svc, registry, before) = asleep(&fx, own.dir());
        stage(own.dir(), 1);
        let t = Instant::now();
        registry.notify(own.dir());
        assert!(
            wait_for(Duration::from_secs(5), || svc.snapshot().indexed == 1),
            "not woken: {:?}",
            svc.snapshot()
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(svc.snapshot().cycles > before);
        svc.stop().unwrap();
    }

    /// A wake names the directories that changed, and the loop scans only
    /// its own: publications of another directory's sinks in this process
    /// (another service) run no cycle, a publication of its own does.
    #[test]
    fn a_publication_of_another_directory_runs_no_cycle() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let other = fx.claim(&fx.dest, 1);
        let (mut svc, registry, before) = asleep(&fx, own.dir());
        for _ in 0..20 {
            registry.notify(other.dir());
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            svc.snapshot().cycles,
            before,
            "another directory's wake ran a cycle"
        );
        registry.notify(own.dir());
        assert!(
            wait_for(Duration::from_secs(5), || svc.snapshot().cycles > before),
            "its own directory's wake ran no cycle"
        );
        svc.stop().unwrap();
    }
}

/// A panicked loop is never silent. A catalog whose `index()`
/// panics while a dead sibling is being adopted: the snapshot says
/// `loop_failed` with the panic's message, the sibling's lock is let go with
/// every pack in it, a flush refuses with `LoopFailed`, and stop is prompt.
#[test]
fn a_panic_in_the_loop_is_reported_and_lets_go_of_the_adopted_sibling() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let sib_dir = fx.dead_sibling(1, 2);
    let mut c = fx.config(own.dir());
    c.catalog = Arc::new(spool_catalog::testing::PanicOnIndex(fx.catalog.clone()));
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || svc
            .snapshot()
            .loop_failed
            .is_some()),
        "{:?}",
        svc.snapshot()
    );
    let why = svc.snapshot().loop_failed.unwrap();
    assert!(why.contains("index() exploded on purpose"), "{why}");
    assert!(
        wait_for(Duration::from_secs(5), || !spool_lock::read_owner(&sib_dir)
            .unwrap()
            .held),
        "the adopted sibling is let go"
    );
    assert_eq!(
        files(&sib_dir, "ready"),
        2,
        "its packs stay for a successor"
    );
    let err = svc.flush(Duration::from_secs(5)).unwrap_err();
    assert!(matches!(err, Error::LoopFailed { .. }), "{err}");
    let t = Instant::now();
    svc.stop().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(own.release_and_remove_if_empty().unwrap());
}

/// A pack hashed once at its first listing, whose bytes
/// change while the store is down, is caught by the upload's own hash when
/// the store is back: quarantined, nothing uploaded or indexed, and
/// `spool verify` (spool-core's `verify_dir`) says why.
#[test]
fn bytes_that_change_after_validation_are_quarantined_at_upload_never_stored() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let id = stage(own.dir(), 1)[0];
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let mut svc = StorageService::new(fx.config(own.dir())).unwrap();
    svc.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || fx.store.calls(Op::Put) >= 1),
        "the first PUT was tried (and failed with 503)"
    );
    let _ = svc.flush(Duration::from_millis(300));
    let ready = own.dir().join(format!("{id}.ready"));
    let mut bytes = std::fs::read(&ready).unwrap();
    // a record byte: size, id and trailer still check out
    let mid = spool_core::pack::HEADER_LEN + 4 + 2;
    bytes[mid] ^= 0x20;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&ready)
            .unwrap();
        f.seek(SeekFrom::Start(mid as u64)).unwrap();
        f.write_all(&bytes[mid..=mid]).unwrap();
        f.sync_all().unwrap();
    }
    fx.store.clear();
    assert!(
        svc.flush(Duration::from_secs(20)).unwrap(),
        "{:?}",
        svc.snapshot()
    );
    assert!(!ready.exists());
    let aside = own.dir().join(format!("{id}.quarantined"));
    assert!(
        aside.exists(),
        "the pack is quarantined: {:?} {:?}",
        std::fs::read_dir(own.dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect::<Vec<_>>(),
        svc.snapshot()
    );
    assert_eq!(block_on(fx.objects()), 0, "nothing uploaded");
    assert!(block_on(fx.catalog.get(&id.to_hex())).unwrap().is_none());
    let snap = svc.snapshot();
    assert_eq!((snap.quarantined, snap.uploaded), (1, 0), "{snap:?}");
    svc.stop().unwrap();
    let report = spool_core::spool::verify_dir(own.dir(), &Default::default()).unwrap();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].0, aside);
    assert!(
        report.quarantined[0].1.contains("SHA-256") || report.quarantined[0].1.contains("sha256"),
        "{report:?}"
    );
    assert!(
        !own.release_and_remove_if_empty().unwrap(),
        "kept with its quarantined pack"
    );
}
