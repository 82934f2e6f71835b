//! The daemon's engine (SPEC §1, §7.5) in one place: claim a rank
//! directory under the destination's catalog key, start the storage
//! service on it `held_by_caller` with adoption on, and release in reverse
//! (stop the service, then release the claim, removing the directory when
//! empty). `spool run` uses only [`Engine::start`], [`Engine::snapshot`],
//! [`Engine::flush`] and [`Engine::close`], so this module is what switches
//! to `spool_service`'s own engine once it exists.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use spool_lock::{LockMode, LockOptions};
use spool_service::{ServiceConfig, Snapshot, StorageService};

use crate::config::{mask_url, Config};

/// A claimed rank directory with a running service on it.
pub struct Engine {
    service: StorageService,
    claim: Option<spool_lock::Claim>,
    dir: PathBuf,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.dir).finish()
    }
}

impl Engine {
    /// Claims `ROOT/<key>/r<rank>-<inc>/` and starts the service on it. A
    /// start that fails releases the claim (and removes the empty
    /// directory) before returning the error.
    pub fn start(cfg: &Config) -> anyhow::Result<Engine> {
        let root = cfg.spool_root()?;
        if !root.is_dir() {
            anyhow::bail!(
                "spool root {} does not exist (or is not a directory): create it (mkdir -p {0}) \
                 or fix --spool-root / SPOOL_ROOT / spool.root",
                root.display()
            );
        }
        let destination = cfg.destination()?;
        let key = destination.catalog_key()?;
        let store_url = cfg.store_url()?;
        let store = spool_upload::Store::from_url(store_url, &cfg.client())
            .with_context(|| format!("cannot open the object store {}", mask_url(store_url)))?;
        let catalog_url = cfg.catalog_url()?;
        let catalog = spool_catalog::open(catalog_url)
            .with_context(|| format!("cannot open the catalog {}", mask_url(catalog_url)))?;
        let lock = LockOptions {
            allow_shared_filesystem: cfg.allow_shared_filesystem(),
            staging_max_age: cfg.staging_max_age(),
        };
        let claim =
            spool_core::claim_rank_dir(&root, &key, cfg.rank(), &lock).with_context(|| {
                format!(
                    "cannot claim a rank directory under {}",
                    root.join(&key).display()
                )
            })?;
        let dir = claim.dir().to_path_buf();
        let mut sc = ServiceConfig::new(&dir, destination, store.object_store().clone(), catalog);
        sc.store_prefix = store.prefix().as_ref().to_string();
        sc.conditional_create = store.conditional_create();
        sc.lease_scope = cfg.lease_scope();
        sc.lease_ttl = cfg.lease_ttl();
        sc.poll_interval = cfg.poll_interval();
        sc.adoption_recheck_interval = cfg.recheck_interval();
        sc.max_backoff = cfg.max_backoff();
        sc.staging_max_age = cfg.staging_max_age();
        sc.adoption_slice = cfg.adoption_slice();
        sc.upload = cfg.upload()?;
        sc.index_batch = cfg.index_batch();
        sc.adopt = true;
        sc.lock_mode = LockMode::HeldByCaller;
        sc.lock = lock;
        let started = StorageService::new(sc).and_then(|mut s| s.start().map(|()| s));
        match started {
            Ok(service) => {
                tracing::info!(dir = %dir.display(), "claimed {} and started its service", dir.display());
                Ok(Engine {
                    service,
                    claim: Some(claim),
                    dir,
                })
            }
            Err(e) => {
                release(claim, &dir);
                Err(anyhow::Error::new(e).context(format!(
                    "the storage service on {} did not start",
                    dir.display()
                )))
            }
        }
    }

    /// The claimed rank directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The service's counters.
    pub fn snapshot(&self) -> Snapshot {
        self.service.snapshot()
    }

    /// A bounded flush of the own directory.
    pub fn flush(&self, timeout: Duration) -> Result<bool, spool_service::Error> {
        self.service.flush(timeout)
    }

    /// Stops the service (every adopted lock let go, promptly), then
    /// releases the claim, removing the directory if it is empty.
    pub fn close(mut self) -> Snapshot {
        if let Err(e) = self.service.stop() {
            tracing::warn!(dir = %self.dir.display(), "stopping the service of {}: {e}", self.dir.display());
        }
        let snap = self.service.snapshot();
        if let Some(claim) = self.claim.take() {
            release(claim, &self.dir);
        }
        snap
    }
}

fn release(claim: spool_lock::Claim, dir: &Path) {
    match claim.release_and_remove_if_empty() {
        Ok(removed) => {
            tracing::info!(dir = %dir.display(), removed, "released {}", dir.display())
        }
        Err(e) => tracing::warn!(dir = %dir.display(), "releasing {}: {e}", dir.display()),
    }
}
