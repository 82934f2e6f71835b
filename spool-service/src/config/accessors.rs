//! The typed accessors that build the other crates' configurations from a
//! resolved [`Config`]: the destination and its key directory, the
//! uploader's and the store client's configs, the lock options, and the
//! whole [`ServiceConfig`] of `spool run`'s engine. Plain values are read
//! with their handles (`keys::POLL_INTERVAL.get(&cfg)`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use spool_catalog::Catalog;
use spool_core::sink::{Sink, SinkConfig};
use spool_core::Destination;
use spool_lock::{Access, LockOptions};
use spool_upload::{ClientConfig, Store, UploadConfig};

use super::keys;
use super::{destination, ConfigError, ServiceConfig};
use crate::engine::{HandOffConfig, Shipping};
use crate::{EngineConfig, Error};

impl super::Config {
    /// The spool root (absolute), or an error saying how to give one.
    pub fn spool_root(&self) -> Result<PathBuf, ConfigError> {
        keys::ROOT.get(self).ok_or_else(|| {
            ConfigError(
                "no spool root: give --spool-root ROOT, SPOOL_ROOT, or spool.root in the config file"
                    .into(),
            )
        })
    }

    /// The spool root, which must be an existing directory.
    pub fn existing_spool_root(&self) -> Result<PathBuf, ConfigError> {
        let root = self.spool_root()?;
        if !root.is_dir() {
            return Err(ConfigError(format!(
                "spool root {} does not exist (or is not a directory): create it (mkdir -p {0}) \
                 or fix --spool-root / SPOOL_ROOT / spool.root",
                root.display()
            )));
        }
        Ok(root)
    }

    /// The store URL (as given).
    pub fn store_url(&self) -> Result<String, ConfigError> {
        keys::STORE.get(self).ok_or_else(|| ConfigError(
            "no object store: give --store URL (or SPOOL_STORE, destination.store), or a spool root for the embedded default".into(),
        ))
    }

    /// The catalog URL (as given, with its credentials: never print it; use
    /// [`spool_catalog::mask_url`]).
    pub fn catalog_url(&self) -> Result<String, ConfigError> {
        keys::CATALOG.get(self).ok_or_else(|| ConfigError(
            "no catalog: give --catalog URL (or SPOOL_CATALOG, destination.catalog), or a spool root for the embedded default".into(),
        ))
    }

    /// The catalog URL to open: [`Config::catalog_url`] with
    /// `catalog.cluster` joined as its `cluster=` parameter
    /// ([`spool_catalog::CatalogUrl::with_cluster`]); the catalog key still
    /// hashes [`Config::catalog_url`].
    pub fn catalog_open_url(&self) -> Result<String, ConfigError> {
        let url = self.catalog_url()?;
        match keys::CATALOG_CLUSTER.get(self) {
            None => Ok(url),
            Some(c) => spool_catalog::CatalogUrl::with_cluster(&url, &c)
                .map_err(|e| ConfigError(format!("catalog.cluster: {e}"))),
        }
    }

    /// Opens the object store it names with the client settings
    /// (`client.*`), creating nothing: where `spool cat` and `spool
    /// reindex` read.
    pub fn open_store(&self) -> Result<Store, Error> {
        let url = self.store_url()?;
        Store::from_url(&url, &self.client()).map_err(|source| Error::OpenStore {
            url: spool_catalog::mask_url(&url),
            source: Box::new(source),
        })
    }

    /// Opens the catalog it names (with `catalog.cluster`) to read it, each
    /// request bounded by `catalog.request_timeout` as the service's are.
    /// The catalog must already exist, on every backend: a read never
    /// creates a database, table or file ([`spool_catalog::open_existing`]).
    pub fn open_catalog_to_read(&self) -> Result<Arc<dyn Catalog>, Error> {
        let url = self.catalog_open_url()?;
        if let spool_catalog::CatalogUrl::Sqlite { path, .. } =
            spool_catalog::CatalogUrl::parse(&url)?
        {
            if !path.is_file() {
                return Err(Error::NoCatalogAt { path });
            }
        }
        Ok(spool_catalog::open_existing(
            &url,
            keys::CATALOG_REQUEST_TIMEOUT.get(self),
        )?)
    }

    /// Checks the configuration of the node's daemon (`spool run`), which
    /// ships its own packs whatever `service.ship` says: that key is for
    /// producers' engines, so a shared file or environment that sets it to
    /// `daemon` is logged and does not stop the daemon; a flag that asks
    /// the daemon itself to hand its packs off is refused.
    pub fn daemon_ships_itself(&self) -> Result<(), ConfigError> {
        if keys::SHIP.get(self) != crate::Ship::Daemon {
            return Ok(());
        }
        match self.source(&keys::SHIP.key) {
            Some(super::Source::Flag(flag)) => Err(ConfigError(format!(
                "service.ship = \"daemon\" ({flag}) is for producers' engines (they hand their \
                 packs to the node's `spool run`); spool run is that daemon and ships itself: \
                 leave the key out (or set it to \"self\") for spool run"
            ))),
            source => {
                tracing::info!(
                    "service.ship = \"daemon\" (from {}) applies to producers' engines; spool run \
                     is the node's daemon and ships itself",
                    source.map_or_else(|| "the configuration".into(), ToString::to_string)
                );
                Ok(())
            }
        }
    }

    /// Claims a fresh rank directory for a sink-only producer (spool-core's
    /// `Sink::claim`: it hands each pack off to the node's daemon while it
    /// lives, and its directory is a dead sibling to adopt once it exits):
    /// under the existing spool root, for the destination's catalog key and
    /// `spool.rank`, with the lock options and the byte budget
    /// (`spool.max_bytes`) of the configuration and the rest of `sink`.
    /// What `spool produce` and Python's `Sink.claim` open.
    pub fn claim_sink(&self, mut sink: SinkConfig) -> Result<Sink, Error> {
        let (key, _) = self.key_dir()?;
        let root = self.existing_spool_root()?;
        sink.spool.lock = self.lock_options()?;
        sink.spool.max_bytes = keys::MAX_BYTES.get(self);
        Ok(Sink::claim(&root, &key, keys::RANK.get(self), sink)?)
    }

    /// The destination its packs go to (credentials removed from the
    /// catalog URL: the key hashes it without them anyway).
    pub fn destination(&self) -> Result<Destination, ConfigError> {
        let store_id = keys::STORE_ID.get(self);
        destination::destination(&self.catalog_url()?, &self.store_url()?, &store_id)
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// Its catalog as a store prefix's record names it
    /// ([`crate::prefix_record`]): what a sweep and a reindex compare with
    /// the record, as the service's drain does.
    pub fn catalog_identity(&self) -> Result<crate::prefix_record::CatalogIdentity, ConfigError> {
        let node = keys::NODE_NAME
            .get(self)
            .unwrap_or_else(spool_lock::host_name);
        Ok(crate::prefix_record::CatalogIdentity::of(
            &self.destination()?,
            &node,
        ))
    }

    /// `ROOT/<catalog key>`: where this destination's rank directories live.
    pub fn key_dir(&self) -> Result<(String, PathBuf), Error> {
        let key = self.destination()?.catalog_key()?;
        Ok((key.clone(), self.spool_root()?.join(key)))
    }

    /// The uploader's configuration (validated).
    pub fn upload(&self) -> Result<UploadConfig, ConfigError> {
        let u = UploadConfig {
            max_workers: keys::UPLOAD_MAX_WORKERS.get(self) as usize,
            small_pack_workers: keys::UPLOAD_SMALL_PACK_WORKERS.get(self) as usize,
            max_in_flight_bytes: keys::UPLOAD_MAX_IN_FLIGHT_BYTES.get(self),
            multipart_threshold: keys::UPLOAD_MULTIPART_THRESHOLD.get(self),
            part_size: keys::UPLOAD_PART_SIZE.get(self) as usize,
            part_concurrency: keys::UPLOAD_PART_CONCURRENCY.get(self) as usize,
            max_attempts: keys::UPLOAD_MAX_ATTEMPTS.get(self).min(u32::MAX as u64) as u32,
            backoff_initial: keys::UPLOAD_BACKOFF_INITIAL.get(self),
            backoff_max: keys::UPLOAD_BACKOFF_MAX.get(self),
            bundle_bytes: keys::UPLOAD_BUNDLE_BYTES.get(self),
            bundle_linger: keys::UPLOAD_BUNDLE_LINGER.get(self),
            orphan_grace: keys::UPLOAD_ORPHAN_GRACE.get(self),
            ..UploadConfig::default()
        };

        u.validate()
            .map_err(|e| ConfigError(format!("upload.*: {e}")))?;
        Ok(u)
    }

    /// `lease.scope`: who must hold the lease for an index write.
    pub fn lease_scope(&self) -> spool_catalog::LeaseScope {
        keys::LEASE_SCOPE.get(self)
    }

    /// The object store client's configuration.
    pub fn client(&self) -> ClientConfig {
        ClientConfig {
            client_max_retries: keys::CLIENT_MAX_RETRIES.get(self) as usize,
            client_retry_timeout: keys::CLIENT_RETRY_TIMEOUT.get(self),
            connect_timeout: keys::CLIENT_CONNECT_TIMEOUT.get(self),
            request_timeout: keys::CLIENT_REQUEST_TIMEOUT.get(self),
            allow_http: keys::CLIENT_ALLOW_HTTP.get(self),
            ..ClientConfig::default()
        }
    }

    /// The access new spool directories and files get (`spool.mode`,
    /// `spool.group`).
    pub fn access(&self) -> Result<Access, ConfigError> {
        let mode = keys::MODE.get(self);
        let group = keys::GROUP.get(self);
        Access::parse(Some(&mode), group.as_deref())
            .map_err(|e| ConfigError(format!("spool.mode / spool.group: {e}")))
    }

    /// The lock options (the shared-filesystem override, the staging age,
    /// the access of what a take creates).
    pub fn lock_options(&self) -> Result<LockOptions, ConfigError> {
        Ok(LockOptions {
            allow_shared_filesystem: keys::ALLOW_SHARED_FILESYSTEM.get(self),
            staging_max_age: keys::STAGING_MAX_AGE.get(self),
            access: self.access()?,
        })
    }

    /// The [`ServiceConfig`] of a service under the spool root, adoption on,
    /// on the given store and catalog. The engine sets its directory and
    /// lock mode (the claimed directory, `HeldByCaller`).
    pub fn service_config(
        &self,
        store: Store,
        catalog: Arc<dyn Catalog>,
    ) -> Result<ServiceConfig, Error> {
        let root = self.spool_root()?;
        let mut sc = ServiceConfig::new(&root, self.destination()?, store, catalog);
        sc.lease_scope = keys::LEASE_SCOPE.get(self);
        if let Some(node) = keys::NODE_NAME.get(self) {
            sc.node_name = node;
        }
        sc.lease_ttl = keys::LEASE_TTL.get(self);
        sc.poll_interval = keys::POLL_INTERVAL.get(self);
        sc.recheck_interval = keys::RECHECK_INTERVAL.get(self);
        sc.max_backoff = keys::MAX_BACKOFF.get(self);
        sc.staging_max_age = keys::STAGING_MAX_AGE.get(self);
        sc.adoption_slice = keys::ADOPTION_SLICE.get(self);
        sc.upload = self.upload()?;
        sc.index_batch = keys::INDEX_BATCH.get(self) as usize;
        sc.index_linger = keys::INDEX_LINGER.get(self);
        sc.pipeline_depth = keys::PIPELINE_DEPTH.get(self) as usize;
        sc.adopt = true;
        sc.lock = self.lock_options()?;
        sc.max_bytes = keys::MAX_BYTES.get(self);
        Ok(sc)
    }

    /// The [`EngineConfig`] of an engine with no sink under the spool root
    /// (which must be an existing directory), shipping its packs as `ship`
    /// says: itself, through a service on the store and catalog opened from
    /// the destination's URLs with the client settings (`client.*`) and
    /// `catalog.request_timeout` (a local store's directory and catalog's
    /// file created first with `spool.mode` / `spool.group`); or through
    /// the node's daemon, opening neither. What `spool run` (always
    /// itself), `spool produce --serve` and spool-py's `spool.Engine`
    /// start. Nothing is claimed yet.
    pub fn engine_config(
        &self,
        close_flush_timeout: Duration,
        ship: crate::Ship,
    ) -> Result<EngineConfig, Error> {
        let root = self.existing_spool_root()?;
        let destination = self.destination()?; // a bad one is refused before anything is opened
        let shipping = match ship {
            crate::Ship::Itself => {
                let (store_url, catalog_url) = (self.store_url()?, self.catalog_url()?);
                // a local store and catalog are as private as the spool
                super::destination::create_local_destination(
                    &store_url,
                    &catalog_url,
                    &self.access()?,
                )?;
                let store = Store::from_url(&store_url, &self.client())?;
                let catalog = spool_catalog::open_with_timeout(
                    &self.catalog_open_url()?,
                    keys::CATALOG_REQUEST_TIMEOUT.get(self),
                )?;
                Shipping::Itself(Box::new(self.service_config(store, catalog)?))
            }
            crate::Ship::Daemon => Shipping::Daemon(HandOffConfig {
                destination,
                lock: self.lock_options()?,
                registry: spool_core::registry::Registry::global(),
                max_bytes: keys::MAX_BYTES.get(self),
            }),
        };
        Ok(EngineConfig {
            spool_root: root,
            rank: keys::RANK.get(self),
            shipping,
            sinks: Vec::new(),
            close_flush_timeout,
        })
    }
}
