//! The service's configuration.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use spool_catalog::{Catalog, LeaseScope};
use spool_core::registry::Registry;
use spool_core::Destination;
use spool_lock::{LockMode, LockOptions};
use spool_upload::{Store, UploadConfig};

use super::keys;

/// `service.index_linger`'s default for a catalog: 0 for a local one
/// (`sqlite://`, `memory://`), else the key table's (why: `drain/pipeline.rs`,
/// "The index linger"). [`ServiceConfig::new`] and the configuration
/// resolver both use it.
pub fn default_index_linger(catalog_url: &str) -> Duration {
    if catalog_url.starts_with("sqlite:") || catalog_url.starts_with("memory:") {
        Duration::ZERO
    } else {
        keys::INDEX_LINGER.default_value()
    }
}

/// Everything a [`StorageService`](crate::StorageService) needs.
#[derive(Clone)]
pub struct ServiceConfig {
    /// The service's own rank directory.
    pub dir: PathBuf,
    /// The destination the directory was claimed for (the construction check
    /// compares its catalog key with the directory's parent).
    pub destination: Destination,
    /// Where packs go: the object store with its key prefix and whether it
    /// creates conditionally, as [`Store::from_url`] built it (with a
    /// `file://` store's own write path) or [`Store::new`] wrapped it. The
    /// service uploads through exactly this store.
    pub store: Store,
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// Node (adoption only is lease-gated) or catalog (everything is).
    pub lease_scope: LeaseScope,
    /// The node this service runs on, as the node-scope lease is named
    /// (`<catalog_key>/<node_name>`): every service with the same spool
    /// root and destination must agree on it. Default: this host's name
    /// ([`spool_lock::host_name`]). Set it where the host name is not the
    /// node's (containers with their own host names sharing a node's spool
    /// root; several simulated nodes on one host). Owner records and the
    /// lease holder keep naming the process's own host.
    pub node_name: String,
    /// Lease time-to-live (whole seconds, ≥ 5 s).
    pub lease_ttl: Duration,
    /// The safety-net wake-up of the loop when no sink publishes.
    pub poll_interval: Duration,
    /// How often a live sibling is probed again (0: never).
    pub recheck_interval: Duration,
    /// The longest wait between cycles while a store is down.
    pub max_backoff: Duration,
    /// Unheld staging copies older than this are removed.
    pub staging_max_age: Duration,
    /// How long one adopting cycle may keep stepping.
    pub adoption_slice: Duration,
    /// Uploader configuration.
    pub upload: UploadConfig,
    /// Most packs indexed in one catalog call.
    pub index_batch: usize,
    /// The index linger (its rule: `drain/pipeline.rs`, "The index
    /// linger"). Default 50 ms: the catalog gets a few statements a second
    /// instead of hundreds (after a 10 000-pack drain with a 5 ms linger,
    /// ClickHouse 18.16 was too busy to answer a `DROP DATABASE` within
    /// 30 s; BENCHMARKS.md).
    pub index_linger: Duration,
    /// At most this many packs of one pipeline run are out of their spool
    /// (uploading or uploaded) and not yet in the catalog; an adoption step
    /// hands the pipeline at most this many. What a crash can make a
    /// successor upload again (each found already there). Default 64.
    pub pipeline_depth: usize,
    /// Adopt dead siblings.
    pub adopt: bool,
    /// The registry sinks publish into (the loop registers a reader there).
    pub registry: Arc<Registry>,
    /// `Take` (standalone: the service takes its directory's lock) or
    /// `HeldByCaller` (the engine claimed it).
    pub lock_mode: LockMode,
    /// Lock options (shared-filesystem override, staging age).
    pub lock: LockOptions,
    /// Byte budget of the own rank directory (`None`: unbounded). The
    /// service opens the directory's one [`Spool`](spool_core::Spool) with
    /// it, and an [`Engine`](crate::Engine) hands that same spool to every
    /// sink, so all of them (and the service's reconcile) share one account.
    /// With adoption on (the layout), what dead siblings hold is charged
    /// too (`charge_dead_siblings`).
    pub max_bytes: Option<u64>,
    /// Worker threads of the service's own tokio runtime (at least 1;
    /// default 2). Blocking file system work never runs on them (it goes to
    /// the blocking pool), so even one keeps the lease renewed; the tests
    /// run with one so that any blocking call on a worker shows as a late
    /// renewal.
    pub runtime_workers: usize,
}

impl ServiceConfig {
    /// A configuration with the key table's defaults
    /// ([`keys`](super::keys): lease, poll, recheck, backoff, staging age,
    /// adoption slice, index batch, pipeline depth; the index linger by
    /// [`default_index_linger`]), node scope on this host's name, adoption
    /// on, the global registry, lock mode `Take`.
    pub fn new(
        dir: impl Into<PathBuf>,
        destination: Destination,
        store: Store,
        catalog: Arc<dyn Catalog>,
    ) -> ServiceConfig {
        ServiceConfig {
            dir: dir.into(),
            store,
            catalog,
            lease_scope: keys::LEASE_SCOPE.default_value(),
            node_name: spool_lock::host_name(),
            lease_ttl: keys::LEASE_TTL.default_value(),
            poll_interval: keys::POLL_INTERVAL.default_value(),
            recheck_interval: keys::RECHECK_INTERVAL.default_value(),
            max_backoff: keys::MAX_BACKOFF.default_value(),
            staging_max_age: keys::STAGING_MAX_AGE.default_value(),
            adoption_slice: keys::ADOPTION_SLICE.default_value(),
            upload: UploadConfig::default(),
            index_batch: keys::INDEX_BATCH.default_value() as usize,
            index_linger: default_index_linger(&destination.catalog_url),
            pipeline_depth: keys::PIPELINE_DEPTH.default_value() as usize,
            adopt: true,
            registry: Registry::global(),
            lock_mode: LockMode::Take,
            lock: LockOptions::default(),
            max_bytes: None,
            runtime_workers: 2,
            destination,
        }
    }
}

impl std::fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("dir", &self.dir)
            .field("destination", &self.destination)
            .field("store", &self.store)
            .field("catalog", &self.catalog.server())
            .field("lease_scope", &self.lease_scope)
            .field("node_name", &self.node_name)
            .field("lease_ttl", &self.lease_ttl)
            .field("poll_interval", &self.poll_interval)
            .field("adopt", &self.adopt)
            .field("lock_mode", &self.lock_mode)
            .field("max_bytes", &self.max_bytes)
            .field("runtime_workers", &self.runtime_workers)
            .finish_non_exhaustive()
    }
}
