//! The engine of `spool run` and `spool produce --serve`:
//! `spool_service::Engine`, configured from [`Config`] through the one
//! wiring the library has ([`Config::engine_config`], also spool-py's). It
//! claims a rank directory under the destination's catalog key, starts the
//! storage service on it `held_by_caller` with adoption on, opens the given
//! sinks, and releases in reverse (seal the sinks, stop the service, then
//! release the claim, removing the directory when empty).

use std::time::Duration;

use anyhow::Context;
use spool_core::sink::SinkConfig;
use spool_service::Engine;

use crate::config::{keys, mask_url, Config};

/// Claims `ROOT/<key>/r<rank>-<inc>/`, starts the service on it and opens
/// `sinks` on it. A start that fails releases the claim (and removes the
/// empty directory) before returning the error. `close_flush_timeout`: how
/// long the engine's close flushes (zero for `spool run`, which flushes,
/// bounded, before it closes on a signal). `daemon`: the node's daemon
/// (`spool run`), which ships itself whatever `service.ship` says.
pub fn start(
    cfg: &Config,
    sinks: Vec<SinkConfig>,
    close_flush_timeout: Duration,
    daemon: bool,
) -> anyhow::Result<Engine> {
    let root = cfg.spool_root()?;
    if !root.is_dir() {
        // exit 1, not a usage error: the configuration is fine, the disk is not
        anyhow::bail!(
            "spool root {} does not exist (or is not a directory): create it (mkdir -p {0}) \
             or fix --spool-root / SPOOL_ROOT / spool.root",
            root.display()
        );
    }
    let (store_url, catalog_url) = (cfg.store_url()?, cfg.catalog_url()?);
    crate::dest::refuse_memory(&store_url, &catalog_url)?;
    let ship = if daemon {
        spool_service::Ship::Itself
    } else {
        keys::SHIP.get(cfg)
    };
    let mut config = cfg
        .engine_config(close_flush_timeout, ship)
        .with_context(|| {
            format!(
                "cannot open the destination (store {}, catalog {})",
                mask_url(&store_url),
                mask_url(&catalog_url)
            )
        })?;
    config.sinks = sinks;
    let engine = Engine::start(config)
        .with_context(|| format!("cannot start the service under {}", root.display()))?;
    match engine.ship() {
        spool_service::Ship::Itself => {
            tracing::info!(dir = %engine.dir().display(), rank = keys::RANK.get(cfg), "claimed {} and started its service", engine.dir().display())
        }
        spool_service::Ship::Daemon => {
            tracing::info!(dir = %engine.dir().display(), rank = keys::RANK.get(cfg), "claimed {}; its packs are handed off to the node's daemon (service.ship = daemon)", engine.dir().display())
        }
    }
    Ok(engine)
}

/// The line on stderr that says where a command ships or stages: the rank
/// directory's parent (the catalog key's directory) and the destination,
/// its URLs redacted.
pub fn destination_line(cfg: &Config) -> anyhow::Result<String> {
    let (key, key_dir) = cfg.key_dir()?;
    Ok(format!(
        "store {}; catalog {} (catalog key {key}, rank directories under {})",
        mask_url(&cfg.store_url()?),
        mask_url(&cfg.catalog_url()?),
        key_dir.display()
    ))
}
