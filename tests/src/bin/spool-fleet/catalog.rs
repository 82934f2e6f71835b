//! The catalog every engine of a host process talks through: the real
//! ClickHouse catalog behind a decorator that times each index insert and
//! each lease claim (client-side latency, rows, errors) and runs every
//! call on one runtime of the process, so the engines of all its nodes
//! share one connection pool (a connection belongs to the runtime that
//! opened it, and engines stop at different times) of at most
//! [`MAX_IN_FLIGHT`] requests at once: a thousand engines starting together
//! would otherwise open more connections than the server takes
//! (`max_connections`), which is not what a fleet run measures. Latency is
//! measured around the whole call, a wait for a free slot included.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use spool_catalog::{
    Catalog, CatalogCounters, Error, LeaseGuard, LeaseHead, LeaseRecord, NewClaim, PackRow, Result,
};

/// What the engines of one process asked of the catalog.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct CallStats {
    /// Index statements answered `Ok`.
    pub inserts: u64,
    /// Rows in them.
    pub rows: u64,
    /// Index statements that failed.
    pub insert_errors: u64,
    /// Latency of every index statement (ok or not), microseconds.
    pub insert_us: Vec<u32>,
    /// Lease claims begun (head reads): those refused by a live foreign
    /// head end there.
    pub claim_attempts: u64,
    /// Lease claims that appended a row and read it back.
    pub claims: u64,
    /// Claims that failed.
    pub claim_errors: u64,
    /// Latency of every claim that appended (read head, append, read
    /// back), microseconds.
    pub claim_us: Vec<u32>,
    /// Lease rows appended (claims, renewals, tombstones).
    pub lease_rows: u64,
    /// The first few distinct error messages.
    pub errors: Vec<String>,
    /// Failed index inserts and claims by what failed them: `code N` (a
    /// ClickHouse exception), `timeout`, `unreachable`, `fenced`, `other`.
    #[serde(default)]
    pub errors_by_code: BTreeMap<String, u64>,
    /// Code-286 answers the catalog client met and tried again (quorum
    /// contention, [`CatalogCounters::quorum_contention`]): not errors.
    #[serde(default)]
    pub quorum_contention: u64,
    /// Statements that met code 286 until the end of their budget
    /// (counted in `errors_by_code` too).
    #[serde(default)]
    pub quorum_contention_gave_up: u64,
}

impl CallStats {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: CallStats) {
        self.inserts += other.inserts;
        self.rows += other.rows;
        self.insert_errors += other.insert_errors;
        self.insert_us.extend(other.insert_us);
        self.claim_attempts += other.claim_attempts;
        self.claims += other.claims;
        self.claim_errors += other.claim_errors;
        self.claim_us.extend(other.claim_us);
        self.lease_rows += other.lease_rows;
        for e in other.errors {
            note_error(&mut self.errors, e);
        }
        for (k, n) in other.errors_by_code {
            *self.errors_by_code.entry(k).or_default() += n;
        }
        self.quorum_contention += other.quorum_contention;
        self.quorum_contention_gave_up += other.quorum_contention_gave_up;
    }
}

/// The key an error is counted under in [`CallStats::errors_by_code`].
fn error_key(e: &Error) -> String {
    match e {
        Error::Server { code: Some(c), .. } => format!("code {c}"),
        Error::Server { code: None, .. } => "server (no code)".into(),
        Error::Timeout { .. } => "timeout".into(),
        Error::Unreachable { .. } => "unreachable".into(),
        Error::Fenced { .. } => "fenced".into(),
        _ => "other".into(),
    }
}

fn note_error(errors: &mut Vec<String>, e: String) {
    if errors.len() < 8 && !errors.contains(&e) {
        errors.push(e);
    }
}

/// The real catalog with every call run on one runtime of the process;
/// the lease's claim algorithm (the trait's own `acquire` and `renew`) runs
/// over these primitives, so every appended lease row is counted here.
struct OnRuntime {
    inner: Arc<dyn Catalog>,
    rt: tokio::runtime::Handle,
    slots: Arc<tokio::sync::Semaphore>,
    lease_rows: AtomicU64,
}

/// Catalog requests one host process has in flight at most.
pub const MAX_IN_FLIGHT: usize = 48;

impl OnRuntime {
    async fn run<T: Send + 'static>(
        &self,
        purpose: &'static str,
        f: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let slots = self.slots.clone();
        let f = async move {
            let _slot = slots.acquire_owned().await;
            f.await
        };
        match self.rt.spawn(f).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(spool_catalog::Error::Unreachable {
                server: self.inner.server(),
                purpose,
                detail: format!("the simulator's catalog runtime is gone: {e}"),
            }),
        }
    }
}

#[async_trait]
impl Catalog for OnRuntime {
    fn server(&self) -> String {
        self.inner.server()
    }

    async fn ensure_schema(&self) -> Result<()> {
        let c = self.inner.clone();
        self.run("install the schema", async move { c.ensure_schema().await })
            .await
    }

    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        let (c, rows, fence) = (self.inner.clone(), rows.to_vec(), fence.cloned());
        self.run("index packs", async move {
            c.index(&rows, fence.as_ref()).await
        })
        .await
    }

    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>> {
        let (c, id) = (self.inner.clone(), pack_id.to_string());
        self.run("read a pack row", async move { c.get(&id).await })
            .await
    }

    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        let c = self.inner.clone();
        self.run(
            "list packs",
            async move { c.list_range(from_ms, to_ms).await },
        )
        .await
    }

    async fn count(&self) -> Result<u64> {
        let c = self.inner.clone();
        self.run("count packs", async move { c.count().await })
            .await
    }

    async fn referenced_bytes(&self, object_keys: &[String]) -> Result<HashMap<String, u64>> {
        let (c, keys) = (self.inner.clone(), object_keys.to_vec());
        self.run("read referenced bytes", async move {
            c.referenced_bytes(&keys).await
        })
        .await
    }

    async fn current_rows(&self, pack_ids: &[String]) -> Result<HashMap<String, PackRow>> {
        let (c, ids) = (self.inner.clone(), pack_ids.to_vec());
        self.run("read current pack rows", async move {
            c.current_rows(&ids).await
        })
        .await
    }

    fn request_timeout(&self) -> std::time::Duration {
        self.inner.request_timeout()
    }

    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        let (c, n) = (self.inner.clone(), name.to_string());
        self.run(
            "read the lease head",
            async move { c.read_lease_head(&n).await },
        )
        .await
    }

    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        let (c, claim) = (self.inner.clone(), claim.clone());
        let r = self
            .run(
                "append a claim",
                async move { c.append_claim(&claim).await },
            )
            .await;
        if r.is_ok() {
            self.lease_rows.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        let (c, n) = (self.inner.clone(), name.to_string());
        self.run("read claims", async move { c.read_claims(&n, term).await })
            .await
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        let (c, n) = (self.inner.clone(), name.to_string());
        self.run("read the lease log", async move { c.lease_log(&n).await })
            .await
    }

    fn counters(&self) -> CatalogCounters {
        self.inner.counters()
    }
}

/// The timing decorator (see the module doc).
pub struct TimedCatalog {
    inner: Arc<OnRuntime>,
    stats: Mutex<CallStats>,
    /// Claims in progress: when each (lease name, task) read its head.
    claiming: Mutex<HashMap<(String, Option<tokio::task::Id>), Instant>>,
}

impl TimedCatalog {
    /// `inner`, its calls run on `rt`.
    pub fn new(inner: Arc<dyn Catalog>, rt: tokio::runtime::Handle) -> TimedCatalog {
        TimedCatalog {
            inner: Arc::new(OnRuntime {
                inner,
                rt,
                slots: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
                lease_rows: AtomicU64::new(0),
            }),
            stats: Mutex::default(),
            claiming: Mutex::default(),
        }
    }

    /// What was asked so far.
    pub fn stats(&self) -> CallStats {
        let mut s = self.stats.lock().expect("stats lock").clone();
        s.lease_rows = self.inner.lease_rows.load(Ordering::Relaxed);
        let counted = self.inner.counters();
        s.quorum_contention = counted.quorum_contention;
        s.quorum_contention_gave_up = counted.quorum_contention_gave_up;
        s
    }

    fn record<T>(&self, r: &Result<T>, started: Instant, claim: bool, rows: usize) {
        let us = started.elapsed().as_micros().min(u32::MAX as u128) as u32;
        let mut s = self.stats.lock().expect("stats lock");
        match (claim, r) {
            (false, Ok(_)) => {
                s.inserts += 1;
                s.rows += rows as u64;
            }
            (false, Err(_)) => s.insert_errors += 1,
            (true, Ok(_)) => s.claims += 1,
            (true, Err(_)) => s.claim_errors += 1,
        }
        if claim {
            s.claim_us.push(us);
        } else {
            s.insert_us.push(us);
        }
        if let Err(e) = r {
            *s.errors_by_code.entry(error_key(e)).or_default() += 1;
            note_error(&mut s.errors, e.to_string());
        }
    }
}

#[async_trait]
impl Catalog for TimedCatalog {
    fn server(&self) -> String {
        self.inner.server()
    }

    async fn ensure_schema(&self) -> Result<()> {
        self.inner.ensure_schema().await
    }

    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        let t = Instant::now();
        let r = self.inner.index(rows, fence).await;
        self.record(&r, t, false, rows.len());
        r
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

    async fn referenced_bytes(&self, object_keys: &[String]) -> Result<HashMap<String, u64>> {
        self.inner.referenced_bytes(object_keys).await
    }

    async fn current_rows(&self, pack_ids: &[String]) -> Result<HashMap<String, PackRow>> {
        self.inner.current_rows(pack_ids).await
    }

    fn request_timeout(&self) -> std::time::Duration {
        self.inner.request_timeout()
    }

    /// A claim starts with its head read (the lease keeper runs the claim
    /// algorithm over these primitives, one claim at a time per task).
    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        let t = Instant::now();
        let r = self.inner.read_lease_head(name).await;
        let key = (name.to_string(), tokio::task::try_id());
        let mut s = self.stats.lock().expect("stats lock");
        s.claim_attempts += 1;
        match &r {
            Ok(_) => {
                self.claiming.lock().expect("claims lock").insert(key, t);
            }
            Err(e) => {
                s.claim_errors += 1;
                *s.errors_by_code.entry(error_key(e)).or_default() += 1;
                note_error(&mut s.errors, e.to_string());
            }
        }
        r
    }

    /// A failed append ends its claim as a failure.
    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        let r = self.inner.append_claim(claim).await;
        if let Err(e) = &r {
            let key = (claim.name.clone(), tokio::task::try_id());
            self.claiming.lock().expect("claims lock").remove(&key);
            let mut s = self.stats.lock().expect("stats lock");
            s.claim_errors += 1;
            *s.errors_by_code.entry(error_key(e)).or_default() += 1;
            note_error(&mut s.errors, e.to_string());
        }
        r
    }

    /// ... and ends with its read-back: a claim's latency is from its head
    /// read to here (head, append, read back).
    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        let r = self.inner.read_claims(name, term).await;
        let key = (name.to_string(), tokio::task::try_id());
        let started = self.claiming.lock().expect("claims lock").remove(&key);
        if let Some(t) = started {
            self.record(&r, t, true, 0);
        }
        r
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        self.inner.lease_log(name).await
    }

    async fn release(&self, guard: &LeaseGuard) -> Result<bool> {
        self.inner.release(guard).await
    }

    fn counters(&self) -> CatalogCounters {
        self.inner.counters()
    }
}
