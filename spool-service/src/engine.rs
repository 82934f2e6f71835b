//! The engine: claim a rank directory → start a service on it →
//! open sinks on it `held_by_caller`; release in the reverse order.
//!
//! This is how a producer embeds spool ("embedded"), and `spool
//! run` is an engine with no sink (the daemon).
//!
//! # Order, and why
//!
//! - **Claim first.** [`spool_core::layout::claim_rank_dir`] creates a fresh
//!   `r<rank>-<incarnation>` directory under the destination's catalog key
//!   with its owner lock already held, so no walk ever sees it unlocked.
//! - **Then the service**, with lock mode `HeldByCaller`: it checks that this
//!   process holds the lock, and it is running (sweeping, registered on the
//!   registry) before any pack can be sealed. A service that fails to be
//!   built or started releases the claim at once (the empty directory is
//!   removed) and no sink is opened: [`Error`] says why.
//! - **Then the sinks**, each staging through the service's own
//!   [`Spool`](spool_core::Spool) (one per directory: one byte budget and
//!   one account for every sink and the service's reconcile, with dead
//!   siblings charged) and publishing into the service's registry, so a
//!   seal wakes the service's loop at once. The budget is
//!   [`ServiceConfig::max_bytes`], else the smallest `spool.max_bytes` of
//!   the sinks' configs. A sink that fails to start undoes everything
//!   already done, in reverse.
//!
//! # Closing ([`Engine::close`])
//!
//! 1. Release every sink: it stops admitting and flushes within its
//!    `release_flush_timeout`; `sealed_on_release()` says whether everything
//!    it held is staged.
//! 2. Flush the service within [`EngineConfig::close_flush_timeout`] (a
//!    clean close without an explicit flush still ships the tail: uploads
//!    and indexes it), then stop it, drained or not.
//! 3. If every sink sealed, release the claim, removing the directory if
//!    it is empty (it is when the flush drained). With the store down the
//!    directory is kept, unlocked, with its packs: a dead sibling the next
//!    service adopts.
//! 4. If a sink did not seal, its records may still be on their way into the
//!    directory: the claim is **kept** until the process exits (spool-lock
//!    keeps a dropped claim's descriptor and warns, naming the directory), so
//!    nobody adopts a directory that might still change. After the exit the
//!    directory is dead, and the next service adopts what was staged.
//!
//! Dropping an engine without [`Engine::close`] closes it (errors logged).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use spool_core::sink::{Sink, SinkConfig};
use spool_lock::{Claim, LockMode};

use crate::{Error, ServiceConfig, StorageService};

/// What an [`Engine`] is started with.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The spool root; the rank directory is claimed at
    /// `<spool_root>/<catalog_key>/r<rank>-<incarnation>/`.
    pub spool_root: PathBuf,
    /// The rank (from `RANK`, see
    /// [`spool_core::layout::rank_from_env`]).
    pub rank: u64,
    /// The service's configuration. Its `dir` and `lock_mode` are set by the
    /// engine (the claimed directory, `HeldByCaller`); its `lock` options
    /// are used for the claim too.
    pub service: ServiceConfig,
    /// One entry per sink to open (empty for a daemon). Each sink's lock
    /// mode, lock options and registry are set by the engine.
    pub sinks: Vec<SinkConfig>,
    /// How long [`Engine::close`] lets the service drain before stopping it.
    pub close_flush_timeout: Duration,
}

impl EngineConfig {
    /// An engine on `spool_root` with one default sink and a 30 s close
    /// flush.
    pub fn new(spool_root: impl Into<PathBuf>, rank: u64, service: ServiceConfig) -> EngineConfig {
        EngineConfig {
            spool_root: spool_root.into(),
            rank,
            service,
            sinks: vec![SinkConfig::default()],
            close_flush_timeout: Duration::from_secs(30),
        }
    }
}

/// What [`Engine::close`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReport {
    /// The rank directory.
    pub dir: PathBuf,
    /// Every sink sealed on release.
    pub sealed: bool,
    /// The service drained before it stopped.
    pub drained: bool,
    /// The rank directory was removed (released and empty).
    pub removed: bool,
    /// The claim is kept until the process exits (a sink did not seal).
    pub claim_kept: bool,
    /// Why the close was not clean, if it was not (sink release or flush
    /// errors), one line each.
    pub problems: Vec<String>,
}

/// A claimed rank directory with its service and sinks.
#[derive(Debug)]
pub struct Engine {
    dir: PathBuf,
    claim: Option<Claim>,
    service: Option<StorageService>,
    sinks: Vec<Arc<Sink>>,
    /// The lock options and registry every sink is opened with.
    lock: spool_lock::LockOptions,
    registry: Arc<spool_core::registry::Registry>,
    close_flush_timeout: Duration,
}

impl Engine {
    /// Claims a rank directory, starts the service on it, opens the sinks.
    /// Any failure undoes what was done (in reverse) and returns the error:
    /// a failed start leaves no lock and opens no sink.
    pub fn start(config: EngineConfig) -> Result<Engine, Error> {
        let EngineConfig {
            spool_root,
            rank,
            mut service,
            sinks,
            close_flush_timeout,
        } = config;
        let key = service.destination.catalog_key()?;
        let claim = spool_core::layout::claim_rank_dir(&spool_root, &key, rank, &service.lock)?;
        let dir = claim.dir().to_path_buf();
        tracing::info!(dir = %dir.display(), "engine claimed {}", dir.display());
        service.dir = dir.clone();
        service.lock_mode = LockMode::HeldByCaller;
        // One budget for the directory: the service's, else the smallest a
        // sink asks for; every sink stages through the service's spool.
        service.max_bytes = service
            .max_bytes
            .into_iter()
            .chain(sinks.iter().filter_map(|s| s.spool.max_bytes))
            .min();
        let lock = service.lock.clone();
        let registry = service.registry.clone();

        let mut svc = match StorageService::new(service).and_then(|mut s| s.start().map(|()| s)) {
            Ok(svc) => svc,
            Err(err) => {
                tracing::warn!(dir = %dir.display(), "service on {} did not start: {err}; releasing the claim", dir.display());
                release_claim(claim, &dir);
                return Err(err);
            }
        };

        let mut opened = Vec::with_capacity(sinks.len());
        let spool = svc
            .spool()
            .cloned()
            .expect("a started service has its spool");
        for (index, mut cfg) in sinks.into_iter().enumerate() {
            cfg.spool.lock_mode = LockMode::HeldByCaller;
            cfg.spool.lock = lock.clone();
            cfg.registry = registry.clone();
            match Sink::start(spool.clone(), cfg) {
                Ok(sink) => opened.push(Arc::new(sink)),
                Err(err) => {
                    tracing::warn!(dir = %dir.display(), "sink {index} on {} did not open: {err}; undoing the engine's start", dir.display());
                    for sink in &opened {
                        let _ = sink.release();
                    }
                    drop(opened);
                    let _ = svc.stop();
                    drop(svc);
                    release_claim(claim, &dir);
                    return Err(Error::Sink {
                        dir,
                        index,
                        source: Box::new(err),
                    });
                }
            }
        }
        Ok(Engine {
            dir,
            claim: Some(claim),
            service: Some(svc),
            sinks: opened,
            lock,
            registry,
            close_flush_timeout,
        })
    }

    /// Opens one more sink on the running engine, as [`Engine::start`]
    /// opens those of [`EngineConfig::sinks`] (lock mode `HeldByCaller`, the
    /// engine's lock options and registry), and returns it; [`Engine::close`]
    /// seals it with the others. Refused ([`Error::InvalidConfig`]) when a sink of
    /// this engine with the same worker ordinal is still attached (two sinks
    /// would share one registry slot), and once the engine is closing.
    pub fn open_sink(&mut self, mut config: SinkConfig) -> Result<Arc<Sink>, Error> {
        if self.service.is_none() {
            return Err(Error::NotRunning {
                dir: self.dir.clone(),
            });
        }
        if let Some(other) = self
            .sinks
            .iter()
            .find(|s| s.ordinal() == config.ordinal && !s.stats().released)
        {
            let ordinal = other
                .ordinal()
                .map_or_else(|| "none".to_string(), |k| k.to_string());
            return Err(Error::InvalidConfig {
                why: format!(
                    "the engine on {} already has an attached sink with worker ordinal {ordinal}; use that sink, release it first, or open this one with another ordinal",
                    self.dir.display()
                ),
            });
        }
        config.spool.lock_mode = LockMode::HeldByCaller;
        config.spool.lock = self.lock.clone();
        config.registry = self.registry.clone();
        let index = self.sinks.len();
        // The directory's one spool (one budget for every sink).
        let spool = self
            .service
            .as_ref()
            .and_then(|svc| svc.spool().cloned())
            .expect("a running engine's service has its spool");
        let sink = Sink::start(spool, config).map_err(|err| Error::Sink {
            dir: self.dir.clone(),
            index,
            source: Box::new(err),
        })?;
        let sink = Arc::new(sink);
        self.sinks.push(sink.clone());
        Ok(sink)
    }

    /// The claimed rank directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sinks, in the order of [`EngineConfig::sinks`], then those of
    /// [`Engine::open_sink`].
    pub fn sinks(&self) -> &[Arc<Sink>] {
        &self.sinks
    }

    /// The running service (its flush, snapshot).
    pub fn service(&self) -> &StorageService {
        self.service
            .as_ref()
            .expect("the service lives until the engine closes")
    }

    /// Flushes every sink, then the service, within `timeout` in all:
    /// `Ok(true)` when everything written before the call is uploaded and
    /// indexed (drained).
    pub fn flush(&self, timeout: Duration) -> Result<bool, Error> {
        let deadline = std::time::Instant::now() + timeout;
        for sink in &self.sinks {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            sink.flush(left)?;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        self.service().flush(left)
    }

    /// Releases in the reverse order of [`Engine::start`]: seal the sinks,
    /// flush and stop the service, release the claim (removing the
    /// directory if empty) — or keep the claim until exit if a sink did not
    /// seal. Never fails: what went wrong is in [`CloseReport::problems`].
    pub fn close(mut self) -> CloseReport {
        self.close_inner()
    }

    fn close_inner(&mut self) -> CloseReport {
        let dir = self.dir.clone();
        let mut problems = Vec::new();
        let mut sealed = true;
        for (i, sink) in self.sinks.iter().enumerate() {
            if let Err(err) = sink.release() {
                problems.push(format!("sink {i}: {err}"));
            }
            sealed &= sink.sealed_on_release();
        }
        self.sinks.clear(); // their staging threads end here
        let mut drained = false;
        if let Some(mut svc) = self.service.take() {
            match svc.flush(self.close_flush_timeout) {
                Ok(d) => drained = d,
                Err(err) => problems.push(format!("service flush: {err}")),
            }
            if let Err(err) = svc.stop() {
                problems.push(format!("service stop: {err}"));
            }
        }
        let mut removed = false;
        let mut claim_kept = false;
        if let Some(claim) = self.claim.take() {
            if sealed {
                removed = release_claim(claim, &dir);
            } else {
                tracing::warn!(
                    dir = %dir.display(),
                    "a sink on {} did not seal on release: keeping its claim until this process exits, so the next process adopts what it staged",
                    dir.display()
                );
                claim_kept = true;
                drop(claim); // spool-lock keeps a dropped claim's lock until exit
            }
        }
        CloseReport {
            dir,
            sealed,
            drained,
            removed,
            claim_kept,
            problems,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.claim.is_some() || self.service.is_some() {
            let report = self.close_inner();
            if !report.problems.is_empty() {
                tracing::warn!(dir = %report.dir.display(), "engine on {} closed on drop: {}", report.dir.display(), report.problems.join("; "));
            }
        }
    }
}

/// Releases `claim`, removing the directory if empty; logs a failure.
/// Returns whether the directory was removed.
fn release_claim(claim: Claim, dir: &Path) -> bool {
    match claim.release_and_remove_if_empty() {
        Ok(removed) => {
            tracing::info!(dir = %dir.display(), removed, "released {}", dir.display());
            removed
        }
        Err(err) => {
            tracing::warn!(dir = %dir.display(), "releasing {}: {err}", dir.display());
            false
        }
    }
}

#[cfg(test)]
mod tests;
