//! Set-up shared by the storage-service tests (`tests/tests/service_*.rs`
//! on fakes, `tests/tests/real_service.rs` on the real servers): a spool
//! root in a temp directory with its destination, the store (always behind
//! a [`FaultStore`], over memory or moto) and the catalog (memory or
//! ClickHouse), rank directories claimed in the layout, packs staged with
//! the real spool, a read-back that compares every record byte for byte, a
//! helper child process that holds a sibling (SIGKILLed to make it dead),
//! and sparse packs for backlog timing.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use spool_catalog::{Catalog, MemoryCatalog};
use spool_core::spool::SpoolConfig;
use spool_core::{claim_rank_dir, Destination, PackId, PackWriter, Spool};
use spool_lock::{Claim, LockMode, LockOptions};
use spool_service::ServiceConfig;
use spool_upload::testing::FaultStore;

/// A destination named by `tag` (memory URLs: only the catalog key matters).
pub fn destination(tag: &str) -> Destination {
    Destination {
        catalog_url: format!("memory://{tag}"),
        database: "db".into(),
        table_prefix: "spool_".into(),
        store_url: format!("memory://{tag}"),
        store_id: "default".into(),
    }
}

/// Records `store`'s `prefix` as serving `dest`'s catalog on this host
/// (spool-service's `prefix_record`), behind the fault store the tests
/// script and count the packs' calls on: a drain then finds it there.
fn record(dest: &Destination, store: &Arc<dyn ObjectStore>, prefix: &str, request: Duration) {
    let store = spool_upload::Store::new(store.clone(), prefix, "fixture", true)
        .expect("a valid key prefix");
    let identity =
        spool_service::prefix_record::CatalogIdentity::of(dest, &spool_lock::host_name());
    // (on a thread of its own: the caller may be on a runtime)
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(spool_service::prefix_record::settle(
                &store,
                &identity,
                "default",
                Duration::from_secs(3600),
                request,
            ))
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .join()
    .unwrap()
    .expect("the fixture's prefix record");
}

/// A staged pack: its id and its bytes as staged.
pub type Staged = (PackId, Vec<u8>);

/// A spool root, its destination, a store and a catalog.
pub struct Fixture {
    _root: Arc<tempfile::TempDir>,
    /// The spool root (canonical).
    pub root: PathBuf,
    /// The destination every service of the fixture is configured for.
    pub dest: Destination,
    /// The store, behind a fault-scripting wrapper.
    pub store: Arc<FaultStore>,
    /// Key prefix inside the store.
    pub prefix: String,
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// The memory catalog, when that is the catalog (for its switches).
    pub memory: Option<Arc<MemoryCatalog>>,
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}

impl Fixture {
    /// Memory store and memory catalog.
    pub fn new() -> Fixture {
        let memory = Arc::new(MemoryCatalog::new());
        let mut fx = Fixture::with_backends(
            destination("a"),
            Arc::new(InMemory::new()),
            "",
            memory.clone(),
        );
        fx.memory = Some(memory);
        fx
    }

    /// The given store (wrapped in a [`FaultStore`]) under `prefix`, and
    /// catalog.
    pub fn with_backends(
        dest: Destination,
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        catalog: Arc<dyn Catalog>,
    ) -> Fixture {
        let root = tempfile::tempdir().unwrap();
        record(&dest, &store, prefix, catalog.request_timeout());
        Fixture {
            root: root.path().canonicalize().unwrap(),
            _root: Arc::new(root),
            dest,
            store: Arc::new(FaultStore::new(store)),
            prefix: prefix.to_string(),
            catalog,
            memory: None,
        }
    }

    /// Another destination on the same spool root, with a memory store and
    /// a memory catalog of its own.
    pub fn on_same_root(&self, dest: Destination) -> Fixture {
        let memory = Arc::new(MemoryCatalog::new());
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        record(&dest, &store, "", std::time::Duration::ZERO);
        Fixture {
            _root: self._root.clone(),
            root: self.root.clone(),
            dest,
            store: Arc::new(FaultStore::new(store)),
            prefix: String::new(),
            catalog: memory.clone(),
            memory: Some(memory),
        }
    }

    /// The memory catalog (panics on a real one).
    pub fn memory(&self) -> &MemoryCatalog {
        self.memory.as_deref().expect("a memory catalog")
    }

    /// The catalog key directory of the fixture's destination.
    pub fn key_dir(&self) -> PathBuf {
        self.root.join(self.dest.catalog_key().unwrap())
    }

    /// Claims a rank directory for `dest` (this process holds it).
    pub fn claim_for(&self, dest: &Destination, rank: u64) -> Claim {
        claim_rank_dir(
            &self.root,
            &dest.catalog_key().unwrap(),
            rank,
            &LockOptions::default(),
        )
        .unwrap()
    }

    /// Claims a rank directory of the fixture's destination.
    pub fn claim(&self, rank: u64) -> Claim {
        self.claim_for(&self.dest, rank)
    }

    /// A dead sibling: claimed, `n` packs staged, its lock let go.
    pub fn dead_sibling(&self, rank: u64, n: usize) -> (PathBuf, Vec<Staged>) {
        let c = self.claim(rank);
        let dir = c.dir().to_path_buf();
        let packs = stage(&dir, n);
        c.release().unwrap();
        (dir, packs)
    }

    /// A service configuration for `dir` (claimed by the caller) with
    /// short intervals: 10 s lease, 200 ms poll, 500 ms max backoff, two
    /// quick upload attempts, a registry of its own, and one object per
    /// pack (which the tests using it count and script faults on; bundles
    /// have tests of their own: spool-service's `drain/pipeline/tests/
    /// bundles.rs` and `real_run.rs`).
    pub fn config(&self, dir: &Path) -> ServiceConfig {
        let mut c = ServiceConfig::new(
            dir,
            self.dest.clone(),
            spool_upload::Store::new(
                self.store.clone() as Arc<dyn ObjectStore>,
                &self.prefix,
                self.dest.store_url.clone(),
                true,
            )
            .expect("a valid key prefix"),
            self.catalog.clone(),
        );
        c.lock_mode = LockMode::HeldByCaller;
        c.lease_ttl = Duration::from_secs(10);
        c.poll_interval = Duration::from_millis(200);
        // the memory catalog stands in for a remote one: its index linger
        c.index_linger = spool_service::config::keys::INDEX_LINGER.default_value();
        c.max_backoff = Duration::from_millis(500);
        c.upload.max_attempts = 2;
        c.upload.backoff_initial = Duration::from_millis(10);
        c.upload.backoff_max = Duration::from_millis(20);
        c.upload.bundle_bytes = 0;
        c.registry = Arc::new(spool_core::registry::Registry::new());
        c
    }

    /// Objects in the store (under any prefix).
    pub async fn objects(&self) -> usize {
        // (spool's own records under `_spool/` are not packs)
        let l: Vec<_> = self.store.inner().list(None).try_collect().await.unwrap();
        l.iter()
            .filter(|m| !spool_service::prefix_record::is_record_key(m.location.as_ref()))
            .count()
    }

    /// Deletes every object under the fixture's prefix (a real store's
    /// clean-up).
    pub async fn clear_store(&self) {
        let prefix = object_store::path::Path::from(self.prefix.as_str());
        let store = self.store.inner();
        let listed: Vec<_> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .unwrap_or_default();
        for o in listed {
            let _ = store.delete(&o.location).await;
        }
    }

    /// Reads every pack back: its catalog row, then the object the row
    /// names, byte-equal to what was staged. Panics naming the first pack
    /// that does not read back.
    pub async fn read_back(&self, packs: &[Staged]) {
        for (id, bytes) in packs {
            let row = self
                .catalog
                .get(&id.to_hex())
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("pack {id} is not in the catalog"));
            assert_eq!(row.bytes, bytes.len() as u64, "catalog row of {id}");
            let got = self
                .store
                .inner()
                .get(&object_store::path::Path::from(row.object_key.as_str()))
                .await
                .unwrap_or_else(|e| panic!("object {} of pack {id}: {e}", row.object_key))
                .bytes()
                .await
                .unwrap();
            assert!(
                got.as_ref() == bytes.as_slice(),
                "pack {id} differs in the store"
            );
        }
    }

    /// Whether pack `id` has a catalog row.
    pub async fn indexed(&self, id: &PackId) -> bool {
        self.catalog.get(&id.to_hex()).await.unwrap().is_some()
    }
}

/// Stages `n` small packs into `dir`, whose lock this process holds.
pub fn stage(dir: &Path, n: usize) -> Vec<Staged> {
    let spool = Spool::open(
        dir,
        &SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..SpoolConfig::default()
        },
    )
    .unwrap();
    (0..n)
        .map(|i| {
            let id = PackId::generate();
            let mut w = PackWriter::new(id, spool_core::pack::now_ms());
            w.push_record(format!("record {i} of {id}").as_bytes());
            w.push_record(&[i as u8; 300]);
            let bytes = w.finish();
            spool.stage(None, id, &bytes).unwrap();
            (id, bytes)
        })
        .collect()
}

/// Files of `dir` (not below it) whose extension is `ext`.
pub fn files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == ext))
                .count()
        })
        .unwrap_or(0)
}

/// Every file name in `dir` and below, sorted (for "left exactly as it
/// was" comparisons).
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Whether some process holds `dir`'s lock.
pub fn is_held(dir: &Path) -> bool {
    spool_lock::read_owner(dir).is_ok_and(|s| s.held)
}

/// Whether `dir`'s owner record says an adopter holds it.
pub fn is_adopting(dir: &Path) -> bool {
    spool_lock::read_owner(dir).is_ok_and(|s| {
        s.held
            && s.record
                .is_some_and(|r| r.purpose == spool_lock::Purpose::Adopting)
    })
}

/// A runtime for the async checks of synchronous tests.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Path of a test helper binary built alongside this test executable.
pub fn helper_bin(name: &str) -> PathBuf {
    let bin = crate::build_dir().join(name);
    assert!(bin.exists(), "helper {} is not built", bin.display());
    bin
}

/// A `spool-core-helper` child: a real other process holding a spool
/// directory. Killed (SIGKILL) when dropped.
pub struct HelperChild {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl HelperChild {
    /// Runs `spool-core-helper ARGS...`.
    pub fn spawn(args: &[&str]) -> HelperChild {
        HelperChild::spawn_bin("spool-core-helper", args)
    }

    /// Runs the helper binary `name` with `args`.
    pub fn spawn_bin(name: &str, args: &[&str]) -> HelperChild {
        let mut child = Command::new(helper_bin(name))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn spool-core-helper");
        let out = BufReader::new(child.stdout.take().unwrap());
        HelperChild { child, out }
    }

    /// Runs `cmd` (a helper wrapped in another command: `unshare`, ...),
    /// its stdout read like [`HelperChild::spawn_bin`]'s.
    pub fn spawn_command(mut cmd: Command) -> HelperChild {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn a wrapped helper");
        let out = BufReader::new(child.stdout.take().unwrap());
        HelperChild { child, out }
    }

    /// Reads lines until one starts with `prefix`; returns it.
    pub fn expect_line(&mut self, prefix: &str) -> String {
        loop {
            let mut line = String::new();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(n > 0, "helper exited before printing {prefix:?}");
            if line.starts_with(prefix) {
                return line.trim_end().to_string();
            }
        }
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HelperChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes a sparse `<id>.ready` file of `len` bytes into `dir`: a real
/// pack header and a first record spanning the whole file, then a hole.
/// It is **corrupt by design** (it ends inside its record, with no footer
/// and no trailer), but validation finds that only after reading every
/// byte — so it stands for a large valid pack wherever only timing is
/// asserted, and is quarantined at the end of its validation.
pub fn write_sparse_pack(dir: &Path, len: u64) -> PathBuf {
    let id = PackId::generate();
    let w = PackWriter::new(id, id.timestamp_ms());
    let header = w.finish();
    let header = &header[..spool_core::pack::HEADER_LEN];
    let path = dir.join(format!("{}.ready", id.to_hex()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(header).unwrap();
    let record = u32::try_from(len - spool_core::pack::HEADER_LEN as u64 - 4)
        .unwrap_or(spool_core::pack::MAX_RECORD_LEN);
    f.write_all(&record.to_le_bytes()).unwrap();
    f.set_len(len).unwrap();
    // a byte at the very end, so the file is `len` long on every filesystem
    f.write_at(&[0], len - 1).unwrap();
    f.sync_all().unwrap();
    path
}
