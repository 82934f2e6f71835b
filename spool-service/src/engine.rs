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
//!
//! # Shipping by the node's daemon ([`Ship::Daemon`], `service.ship = "daemon"`)
//!
//! An engine can leave uploading and indexing to the node's shipper (the
//! `spool run` holding the node lease on the same spool root,
//! `crate::handoff`): it claims its directory and opens its sinks as
//! above, but starts no service; every sink hands its packs off
//! ([`SinkConfig::hand_off`]) and removes each one once the shipper
//! confirmed its row. The process then runs no runtime and no upload worker
//! and makes no store or catalog call (it builds no client of either:
//! [`Shipping::Daemon`] carries none): a node of 8 ranks
//! has one uploader and one index stream (the daemon's), at the price of a
//! hop (a ref, an inotify wake, a confirmation) on each pack's way and of
//! depending on that daemon. With none running the packs wait in the
//! directory (`spool status` says so) and are adopted once the process
//! exits, as a sink-only producer's. [`Engine::flush`] then waits for the
//! confirmations, and [`Engine::close`] (step 2) waits for them within
//! `close_flush_timeout` while they come, giving up after a second without
//! one: what is left goes with the directory to the daemon's adoption.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use spool_core::sink::{Sink, SinkConfig};
use spool_core::{Spool, SpoolConfig};
use spool_lock::{Claim, LockMode};

use crate::{Error, ServiceConfig, Ship, StorageService};

/// What an [`Engine`] is started with.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The spool root; the rank directory is claimed at
    /// `<spool_root>/<catalog_key>/r<rank>-<incarnation>/`.
    pub spool_root: PathBuf,
    /// The rank (from `RANK`, see
    /// [`spool_core::layout::rank_from_env`]).
    pub rank: u64,
    /// Who uploads and indexes the packs, and with what (`service.ship`).
    pub shipping: Shipping,
    /// One entry per sink to open (empty for a daemon). Each sink's lock
    /// mode, lock options and registry are set by the engine.
    pub sinks: Vec<SinkConfig>,
    /// How long [`Engine::close`] lets the service drain (or waits for the
    /// daemon's confirmations) before it lets go.
    pub close_flush_timeout: Duration,
}

/// Who uploads and indexes an engine's packs, with what they need.
#[derive(Debug, Clone)]
pub enum Shipping {
    /// The engine's own service, with its configuration: its `dir` and
    /// `lock_mode` are set by the engine (the claimed directory,
    /// `HeldByCaller`); its `lock` options are used for the claim too.
    Itself(Box<ServiceConfig>),
    /// The node's daemon, through the hand-off: no service, so no store or
    /// catalog client.
    Daemon(HandOffConfig),
}

/// What an engine whose packs the node's daemon ships needs.
#[derive(Debug, Clone)]
pub struct HandOffConfig {
    /// The destination (its catalog key names the rank directory's parent).
    pub destination: spool_core::Destination,
    /// The lock options of the claim and the sinks.
    pub lock: spool_lock::LockOptions,
    /// The registry the sinks publish in.
    pub registry: Arc<spool_core::registry::Registry>,
    /// The directory's byte budget (dead siblings charged), if any.
    pub max_bytes: Option<u64>,
}

impl EngineConfig {
    /// An engine on `spool_root` shipping through its own service, with
    /// one default sink and a 30 s close flush.
    pub fn new(spool_root: impl Into<PathBuf>, rank: u64, service: ServiceConfig) -> EngineConfig {
        EngineConfig {
            spool_root: spool_root.into(),
            rank,
            shipping: Shipping::Itself(Box::new(service)),
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
    /// The directory's one spool (every sink stages through it); `None`
    /// once closing.
    spool: Option<Arc<Spool>>,
    /// The service (`Ship::Itself` only).
    service: Option<StorageService>,
    sinks: Vec<Arc<Sink>>,
    /// The lock options and registry every sink is opened with.
    lock: spool_lock::LockOptions,
    registry: Arc<spool_core::registry::Registry>,
    close_flush_timeout: Duration,
    ship: Ship,
    lease_scope: spool_catalog::LeaseScope,
}

impl Engine {
    /// Claims a rank directory, starts the service on it, opens the sinks.
    /// Any failure undoes what was done (in reverse) and returns the error:
    /// a failed start leaves no lock and opens no sink.
    pub fn start(config: EngineConfig) -> Result<Engine, Error> {
        let EngineConfig {
            spool_root,
            rank,
            shipping,
            sinks,
            close_flush_timeout,
        } = config;
        let (destination, lock, registry) = match &shipping {
            Shipping::Itself(s) => (&s.destination, s.lock.clone(), s.registry.clone()),
            Shipping::Daemon(h) => (&h.destination, h.lock.clone(), h.registry.clone()),
        };
        let key = destination.catalog_key()?;
        // an engine that ships may take the key directory's reserve on a
        // full filesystem; a hand-off producer never does
        let claim = match &shipping {
            Shipping::Itself(_) => {
                spool_core::layout::claim_rank_dir_to_ship(&spool_root, &key, rank, &lock)?
            }
            Shipping::Daemon(_) => {
                spool_core::layout::claim_rank_dir(&spool_root, &key, rank, &lock)?
            }
        };
        let dir = claim.dir().to_path_buf();
        tracing::info!(dir = %dir.display(), "engine claimed {}", dir.display());
        // One budget for the directory: the engine's, else the smallest a
        // sink asks for; every sink stages through the one spool.
        let budget = |own: Option<u64>| {
            own.into_iter()
                .chain(sinks.iter().filter_map(|s| s.spool.max_bytes))
                .min()
        };
        let (ship, lease_scope, started) = match shipping {
            Shipping::Itself(mut service) => {
                service.dir = dir.clone();
                service.lock_mode = LockMode::HeldByCaller;
                service.max_bytes = budget(service.max_bytes);
                let scope = service.lease_scope;
                let started = StorageService::new(*service)
                    .and_then(|mut s| s.start().map(|()| s))
                    .map(|svc| {
                        let spool = svc
                            .spool()
                            .cloned()
                            .expect("a started service has its spool");
                        (Some(svc), spool)
                    });
                (Ship::Itself, scope, started)
            }
            Shipping::Daemon(h) => (
                Ship::Daemon,
                spool_catalog::LeaseScope::Node,
                hand_off_spool(&dir, &lock, budget(h.max_bytes)).map(|spool| (None, spool)),
            ),
        };
        let (mut svc, spool) = match started {
            Ok(started) => started,
            Err(err) => {
                tracing::warn!(dir = %dir.display(), "service on {} did not start: {err}; releasing the claim", dir.display());
                release_claim(claim, &dir);
                return Err(err);
            }
        };

        let mut opened = Vec::with_capacity(sinks.len());
        for (index, mut cfg) in sinks.into_iter().enumerate() {
            cfg.spool.lock_mode = LockMode::HeldByCaller;
            cfg.spool.lock = lock.clone();
            cfg.registry = registry.clone();
            cfg.hand_off |= ship == Ship::Daemon;
            match Sink::start(spool.clone(), cfg) {
                Ok(sink) => opened.push(Arc::new(sink)),
                Err(err) => {
                    tracing::warn!(dir = %dir.display(), "sink {index} on {} did not open: {err}; undoing the engine's start", dir.display());
                    for sink in &opened {
                        let _ = sink.release();
                    }
                    drop(opened);
                    if let Some(svc) = svc.as_mut() {
                        let _ = svc.stop();
                    }
                    drop(svc);
                    drop(spool);
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
            spool: Some(spool),
            service: svc,
            ship,
            sinks: opened,
            lock,
            registry,
            close_flush_timeout,
            lease_scope,
        })
    }

    /// Opens one more sink on the running engine, as [`Engine::start`]
    /// opens those of [`EngineConfig::sinks`] (lock mode `HeldByCaller`, the
    /// engine's lock options and registry), and returns it; [`Engine::close`]
    /// seals it with the others. Refused ([`Error::InvalidConfig`]) when a sink of
    /// this engine with the same worker ordinal is still attached (two sinks
    /// would share one registry slot), and once the engine is closing.
    pub fn open_sink(&mut self, mut config: SinkConfig) -> Result<Arc<Sink>, Error> {
        let Some(spool) = self.spool.clone() else {
            return Err(Error::NotRunning {
                dir: self.dir.clone(),
            });
        };
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
        config.hand_off |= self.ship == Ship::Daemon;
        let index = self.sinks.len();
        // The directory's one spool (one budget for every sink).
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

    /// The running service (its flush, snapshot); `None` when the node's
    /// daemon ships ([`Ship::Daemon`]).
    pub fn service(&self) -> Option<&StorageService> {
        self.service.as_ref()
    }

    /// Who ships this engine's packs.
    pub fn ship(&self) -> Ship {
        self.ship
    }

    /// The lease scope of its service (`service.lease_scope`).
    pub fn lease_scope(&self) -> spool_catalog::LeaseScope {
        self.lease_scope
    }

    /// Flushes every sink, then the service, within `timeout` in all:
    /// `Ok(true)` when everything written before the call is uploaded and
    /// indexed (drained). With [`Ship::Daemon`], waits until the node's
    /// shipper confirmed every pack handed off and the sinks removed them
    /// ([`Error::HandOffTimeout`] when it did not in time).
    pub fn flush(&self, timeout: Duration) -> Result<bool, Error> {
        let deadline = std::time::Instant::now() + timeout;
        for sink in &self.sinks {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            sink.flush(left)?;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match (&self.service, &self.spool) {
            (Some(svc), _) => svc.flush(left),
            (None, Some(spool)) => self.wait_confirmed(spool, timeout, deadline),
            (None, None) => Err(Error::NotRunning {
                dir: self.dir.clone(),
            }),
        }
    }

    /// Waits until no pack of `spool` is handed off and unconfirmed,
    /// removing the confirmed ones itself (as the sinks' confirmation
    /// threads do), looking every few milliseconds (in this process only).
    fn wait_confirmed(
        &self,
        spool: &Spool,
        timeout: Duration,
        deadline: std::time::Instant,
    ) -> Result<bool, Error> {
        match spool.wait_confirmed(deadline, None)? {
            0 => Ok(true),
            waiting => Err(Error::HandOffTimeout {
                dir: self.dir.clone(),
                timeout,
                waiting,
            }),
        }
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
        if let (None, Some(spool)) = (&self.service, self.spool.take()) {
            // Shipping through the daemon: wait for the confirmations while
            // they come; what is left goes with the directory to adoption.
            let deadline = std::time::Instant::now() + self.close_flush_timeout;
            match spool.wait_confirmed(deadline, Some(spool_core::handoff::STALLED_HAND_OFF)) {
                Ok(0) => {
                    drained = spool
                        .scan(&std::sync::atomic::AtomicBool::new(false))
                        .is_ok_and(|packs| packs.is_empty())
                }
                Ok(_) => {}
                Err(err) => problems.push(format!("hand-off: {err}")),
            }
        }
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
        if self.claim.is_some() || self.spool.is_some() {
            let report = self.close_inner();
            if !report.problems.is_empty() {
                tracing::warn!(dir = %report.dir.display(), "engine on {} closed on drop: {}", report.dir.display(), report.problems.join("; "));
            }
        }
    }
}

/// The spool of an engine shipping through the node's daemon: its fresh
/// claimed directory opened as the service would open it (the caller holds
/// the claim; dead siblings count against the budget).
fn hand_off_spool(
    dir: &Path,
    lock: &spool_lock::LockOptions,
    max_bytes: Option<u64>,
) -> Result<Arc<Spool>, Error> {
    let spool = Spool::open(
        dir,
        &SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            lock: lock.clone(),
            max_bytes,
            charge_dead_siblings: max_bytes.is_some(),
        },
    )?;
    Ok(Arc::new(spool))
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
