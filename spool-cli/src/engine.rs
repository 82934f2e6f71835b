//! The daemon's engine (SPEC §1, §7.5): `spool_service::Engine` with no
//! sink, configured from [`Config`]. It claims a rank directory under the
//! destination's catalog key, starts the storage service on it
//! `held_by_caller` with adoption on, and releases in reverse (stop the
//! service, then release the claim, removing the directory when empty).
//! `spool run` uses only [`start`], [`Engine::flush`], [`Engine::close`]
//! and the service's snapshot.

use std::time::Duration;

use anyhow::Context;
use spool_lock::LockOptions;
use spool_service::{Engine, EngineConfig, ServiceConfig};

use crate::config::{mask_url, Config};

/// Claims `ROOT/<key>/r<rank>-<inc>/` and starts the service on it (no
/// sink). A start that fails releases the claim (and removes the empty
/// directory) before returning the error. The engine's own close flush is
/// zero: `spool run` flushes, bounded, before it closes on a signal.
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
    let store_url = cfg.store_url()?;
    let store = spool_upload::Store::from_url(store_url, &cfg.client())
        .with_context(|| format!("cannot open the object store {}", mask_url(store_url)))?;
    let catalog_url = cfg.catalog_url()?;
    let catalog = spool_catalog::open_with_timeout(catalog_url, cfg.catalog_request_timeout())
        .with_context(|| format!("cannot open the catalog {}", mask_url(catalog_url)))?;
    // the engine sets dir and lock mode (the claimed directory, HeldByCaller)
    let mut sc = ServiceConfig::new(&root, destination, store.object_store().clone(), catalog);
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
    sc.lock = LockOptions {
        allow_shared_filesystem: cfg.allow_shared_filesystem(),
        staging_max_age: cfg.staging_max_age(),
    };
    let engine = Engine::start(EngineConfig {
        spool_root: root.clone(),
        rank: cfg.rank(),
        service: sc,
        sinks: Vec::new(),
        close_flush_timeout: Duration::ZERO,
    })
    .with_context(|| format!("cannot start the daemon under {}", root.display()))?;
    tracing::info!(dir = %engine.dir().display(), "claimed {} and started its service", engine.dir().display());
    Ok(engine)
}
