//! The in-memory fake (`memory://`): same rules, no server. Test seams:
//! [`MemoryCatalog::set_reachable`] and [`MemoryCatalog::advance_clock`].

use crate::error::{Error, Result};
use crate::lease::{LeaseGuard, LeaseHead, LeaseRecord, NewClaim};
use crate::row::{check_pack_id, PackRow};
use crate::{Catalog, SCHEMA_VERSION};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Default)]
struct Inner {
    schema_version: Option<u32>,
    packs: BTreeMap<String, PackRow>,
    lease: Vec<LeaseRecord>,
}

/// The in-memory catalog: a map of rows and a claim log under one mutex,
/// with the catalog clock at one-second resolution like ClickHouse's.
pub struct MemoryCatalog {
    name: String,
    inner: Mutex<Inner>,
    reachable: AtomicBool,
    clock_offset_ms: AtomicU64,
}

impl std::fmt::Debug for MemoryCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCatalog")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryCatalog {
    fn default() -> Self {
        MemoryCatalog::new()
    }
}

fn head_of(log: &[LeaseRecord], name: &str) -> Vec<LeaseRecord> {
    let max = log.iter().filter(|c| c.name == name).map(|c| c.term).max();
    log.iter()
        .filter(|c| c.name == name && Some(c.term) == max)
        .cloned()
        .collect()
}

impl MemoryCatalog {
    /// A fresh, empty catalog.
    pub fn new() -> MemoryCatalog {
        MemoryCatalog {
            name: "memory://".into(),
            inner: Mutex::new(Inner::default()),
            reachable: AtomicBool::new(true),
            clock_offset_ms: AtomicU64::new(0),
        }
    }

    /// The process-wide catalog of this name (`memory://NAME`).
    pub fn shared(name: &str) -> Arc<MemoryCatalog> {
        static SHARED: OnceLock<Mutex<HashMap<String, Arc<MemoryCatalog>>>> = OnceLock::new();
        let map = SHARED.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.to_string())
            .or_insert_with(|| {
                let mut c = MemoryCatalog::new();
                c.name = format!("memory://{name}");
                Arc::new(c)
            })
            .clone()
    }

    /// Test seam: while unreachable, every operation fails with a retryable
    /// [`Error::Unreachable`] and changes nothing.
    pub fn set_reachable(&self, reachable: bool) {
        self.reachable.store(reachable, Ordering::SeqCst);
    }

    /// Test seam: moves the catalog clock forward.
    pub fn advance_clock(&self, by: Duration) {
        self.clock_offset_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    fn now_ms(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let ms = real + self.clock_offset_ms.load(Ordering::SeqCst);
        ms / 1000 * 1000
    }

    /// Runs `f` on the state, after the reachability and schema checks.
    fn with<T>(
        &self,
        purpose: &'static str,
        f: impl FnOnce(&mut Inner, u64) -> Result<T>,
    ) -> Result<T> {
        if !self.reachable.load(Ordering::SeqCst) {
            return Err(Error::Unreachable {
                server: self.name.clone(),
                purpose,
                detail: "switched off by the test".into(),
            });
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match inner.schema_version {
            None => inner.schema_version = Some(SCHEMA_VERSION),
            Some(SCHEMA_VERSION) => {}
            // The migrations from versions 1 to 3: version 1's rows
            // already read as version 2 (their ordinal is `Some`), version
            // 3 only partitions ClickHouse's tables, and older rows were
            // given their `trailer_sha256` (their `sha256`) when made by
            // `testing_create_v1`: the label changes.
            Some(1..=3) => inner.schema_version = Some(SCHEMA_VERSION),
            Some(found) => {
                return Err(Error::SchemaVersion {
                    server: self.name.clone(),
                    found,
                    expected: SCHEMA_VERSION,
                    advice: "it was written by a newer spool; upgrade this spool, or point it at another database or table_prefix",
                })
            }
        }
        let now = self.now_ms();
        f(&mut inner, now)
    }
}

#[async_trait]
impl Catalog for MemoryCatalog {
    fn server(&self) -> String {
        self.name.clone()
    }

    async fn ensure_schema(&self) -> Result<()> {
        self.with("check the schema", |_, _| Ok(()))
    }

    async fn index(&self, rows: &[PackRow], fence: Option<&LeaseGuard>) -> Result<()> {
        for r in rows {
            r.validate()?;
        }
        let server = self.server();
        self.with("index packs", |inner, now| {
            if let Some(g) = fence {
                let head = head_of(&inner.lease, &g.name);
                let open = matches!(head.as_slice(), [h] if h.lease_id == g.lease_id
                    && h.expires_at_ms > now + g.config.fence_margin.as_millis() as u64);
                if !open {
                    return Err(Error::Fenced {
                        server,
                        name: g.name.clone(),
                        lease_id: g.lease_id,
                        margin: g.config.fence_margin,
                        packs: rows.len(),
                    });
                }
            }
            for r in rows {
                let mut r = r.clone();
                r.indexed_at_ms = now;
                inner.packs.insert(r.pack_id.clone(), r);
            }
            Ok(())
        })
    }

    async fn get(&self, pack_id: &str) -> Result<Option<PackRow>> {
        check_pack_id(pack_id)?;
        self.with("read a pack row", |inner, _| {
            Ok(inner.packs.get(pack_id).cloned())
        })
    }

    async fn list_range(&self, from_ms: u64, to_ms: u64) -> Result<Vec<PackRow>> {
        self.with("list pack rows by time", |inner, _| {
            let mut rows: Vec<PackRow> = inner
                .packs
                .values()
                .filter(|r| r.created_at_ms >= from_ms && r.created_at_ms < to_ms)
                .cloned()
                .collect();
            rows.sort_by(|a, b| (a.created_at_ms, &a.pack_id).cmp(&(b.created_at_ms, &b.pack_id)));
            Ok(rows)
        })
    }

    async fn count(&self) -> Result<u64> {
        self.with("count packs", |inner, _| Ok(inner.packs.len() as u64))
    }

    async fn referenced_bytes(&self, object_keys: &[String]) -> Result<HashMap<String, u64>> {
        if object_keys.is_empty() {
            return Ok(HashMap::new());
        }
        let wanted: std::collections::HashSet<&str> =
            object_keys.iter().map(String::as_str).collect();
        self.with("read referenced bytes", |inner, _| {
            // the map holds each pack's current row only
            let mut out: HashMap<String, u64> = HashMap::new();
            for r in inner.packs.values() {
                if wanted.contains(r.object_key.as_str()) {
                    let sum = out.entry(r.object_key.clone()).or_insert(0);
                    *sum = sum.saturating_add(r.bytes);
                }
            }
            Ok(out)
        })
    }

    async fn current_rows(&self, pack_ids: &[String]) -> Result<HashMap<String, PackRow>> {
        for id in pack_ids {
            check_pack_id(id)?;
        }
        if pack_ids.is_empty() {
            return Ok(HashMap::new());
        }
        self.with("read current pack rows", |inner, _| {
            Ok(pack_ids
                .iter()
                .filter_map(|id| inner.packs.get(id).map(|r| (id.clone(), r.clone())))
                .collect())
        })
    }

    fn request_timeout(&self) -> Duration {
        // answers in this process, at once
        Duration::ZERO
    }

    async fn read_lease_head(&self, name: &str) -> Result<LeaseHead> {
        self.with("read the lease head", |inner, now| {
            Ok(LeaseHead {
                claims: head_of(&inner.lease, name),
                now_ms: now,
            })
        })
    }

    async fn append_claim(&self, claim: &NewClaim) -> Result<()> {
        self.with("append a lease claim", |inner, now| {
            inner.lease.push(LeaseRecord {
                name: claim.name.clone(),
                term: claim.term,
                lease_id: claim.lease_id,
                holder: claim.holder.clone(),
                acquired_at_ms: now,
                expires_at_ms: now + claim.ttl_ms,
            });
            Ok(())
        })
    }

    async fn read_claims(&self, name: &str, term: u64) -> Result<Vec<LeaseRecord>> {
        self.with("read back lease claims", |inner, _| {
            let mut v: Vec<LeaseRecord> = inner
                .lease
                .iter()
                .filter(|c| c.name == name && c.term == term)
                .cloned()
                .collect();
            v.sort_by_key(|c| c.lease_id);
            Ok(v)
        })
    }

    async fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        self.with("read the lease log", |inner, _| {
            let mut v: Vec<LeaseRecord> = inner
                .lease
                .iter()
                .filter(|c| c.name == name)
                .cloned()
                .collect();
            v.sort_by_key(|c| (c.term, c.lease_id));
            Ok(v)
        })
    }

    async fn trim_lease_log(&self) -> Result<u64> {
        self.with("trim the lease log", |inner, now| {
            let cutoff = now.saturating_sub(crate::LEASE_LOG_RETENTION.as_millis() as u64);
            let mut heads = std::collections::HashMap::new();
            for c in &inner.lease {
                let t = heads.entry(c.name.clone()).or_insert(c.term);
                *t = (*t).max(c.term);
            }
            let before = inner.lease.len();
            inner
                .lease
                .retain(|c| c.acquired_at_ms >= cutoff || heads.get(&c.name) == Some(&c.term));
            Ok((before - inner.lease.len()) as u64)
        })
    }
}

#[cfg(any(test, feature = "testing"))]
impl MemoryCatalog {
    /// Test seam: makes this catalog a version-1 one holding `rows`; see
    /// [`crate::testing::create_v1`].
    pub fn testing_create_v1(&self, rows: &[PackRow]) -> Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.schema_version = Some(1);
        for r in rows {
            r.validate()?;
            // version 1 had no `trailer_sha256` (its `sha256` was that
            // checksum) and no `object_offset` (a pack was its object)
            let old = PackRow {
                trailer_sha256: r.sha256.clone(),
                object_offset: 0,
                ..r.clone()
            };
            inner.packs.insert(r.pack_id.clone(), old);
        }
        Ok(())
    }

    /// Test seam: the schema version, without the schema check (0: none).
    pub fn testing_schema_version(&self) -> u32 {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.schema_version.unwrap_or(0)
    }

    /// Test seam: writes a schema-version row (to test refusals); see
    /// [`crate::testing::set_schema_version`].
    pub async fn testing_set_schema_version(&self, version: u32) -> Result<()> {
        self.with("write a schema version (test)", |_, _| Ok(()))?;
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .schema_version = Some(version);
        Ok(())
    }
}
