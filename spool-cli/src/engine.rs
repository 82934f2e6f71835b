//! The daemon's engine (SPEC §1, §7.5): `spool_service::Engine` with no
//! sink, configured from [`Config`]. It claims a rank directory under the
//! destination's catalog key, starts the storage service on it
//! `held_by_caller` with adoption on, and releases in reverse (stop the
//! service, then release the claim, removing the directory when empty).
//! `spool run` uses only [`start`], [`Engine::flush`], [`Engine::close`]
//! and the service's snapshot.

use std::time::Duration;

use anyhow::Context;
use spool_service::{Engine, EngineConfig};

use crate::config::{keys, mask_url, Config};

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
    cfg.destination()?; // a bad destination is refused before anything is opened
    let store_url = cfg.store_url()?;
    let catalog_url = cfg.catalog_url()?;
    crate::dest::refuse_memory(&store_url, &catalog_url)?;
    // the embedded store and catalog are as private as the spool
    spool_service::config::create_local_destination(&store_url, &catalog_url, &cfg.access()?)?;
    let store = spool_upload::Store::from_url(&store_url, &cfg.client())
        .with_context(|| format!("cannot open the object store {}", mask_url(&store_url)))?;
    let catalog = spool_catalog::open_with_timeout(
        &catalog_url,
        crate::config::keys::CATALOG_REQUEST_TIMEOUT.get(cfg),
    )
    .with_context(|| format!("cannot open the catalog {}", mask_url(&catalog_url)))?;
    // the engine sets dir and lock mode (the claimed directory, HeldByCaller)
    let sc = cfg.service_config(
        store.object_store().clone(),
        store.prefix().as_ref().to_string(),
        store.conditional_create(),
        catalog,
    )?;
    let engine = Engine::start(EngineConfig {
        spool_root: root.clone(),
        rank: keys::RANK.get(cfg),
        service: sc,
        sinks: Vec::new(),
        close_flush_timeout: Duration::ZERO,
    })
    .with_context(|| format!("cannot start the daemon under {}", root.display()))?;
    tracing::info!(dir = %engine.dir().display(), "claimed {} and started its service", engine.dir().display());
    Ok(engine)
}
