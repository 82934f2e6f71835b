//! [`LeaseKeeper`]: the acquire/renew/latch loop a service runs on a
//! catalog's lease, and [`LeaseTask`], the keeper on a task of its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::catalog::{claim, release, Catalog, LEASE_TRIM_INTERVAL};
use crate::error::{Error, Result};
use crate::holder::LeaseHolder;
use crate::lease::{LeaseClaim, LeaseConfig, LeaseGuard};

/// What a service polls: is the lease ours, who else has it, has this
/// process latched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseState {
    /// The lease name.
    pub name: String,
    /// The current holding, while ours.
    pub guard: Option<LeaseGuard>,
    /// The holder of the live foreign claim last seen, if any.
    pub foreign_holder: Option<LeaseHolder>,
    /// Acquisitions made by this keeper (each with a new lease id).
    pub acquisitions: u64,
    /// Holdings lost (superseded, lapsed, or unrenewable before the local
    /// deadline).
    pub losses: u64,
    /// A foreign lease outlived 2 × TTL after this process had held it: its
    /// lease-gated work stops for its lifetime.
    pub latched: bool,
    /// The last failure talking to the catalog.
    pub last_error: Option<String>,
    /// The last failure, when no retry can fix it as things are (catalog
    /// credentials refused, say): the catalog refuses this destination.
    /// Cleared by the next claim that gets an answer.
    pub refused: Option<String>,
    /// The catalog, as messages name it (credentials removed).
    pub server: String,
    /// The claim in flight (what for, since when), so a caller can say what
    /// it waits on before the call fails.
    pub in_flight: Option<(&'static str, std::time::Instant)>,
    /// The keeper's task panicked (its message): the lease is not kept any
    /// more; the service reports it as a failed loop.
    pub task_failed: Option<String>,
    /// Renewals that kept a holding (each a claim that landed).
    pub renewals: u64,
    /// The longest time from one claim of a holding to its next renewal
    /// (both measured at the claim's start): `renew_interval` plus however
    /// late the keeper got to run. A keeper starved by blocked runtime
    /// workers shows here before its lease lapses.
    pub max_renewal_gap: Option<std::time::Duration>,
}

impl LeaseState {
    /// Whether the lease is ours now (by the local, conservative clock).
    pub fn held(&self) -> bool {
        self.guard
            .as_ref()
            .is_some_and(LeaseGuard::is_locally_valid)
    }
}

/// The acquire/renew/latch loop of one lease name.
///
/// [`LeaseKeeper::tick`] does what is due: renew a holding every
/// `renew_interval`, acquire when not held, and latch once a foreign lease
/// has been seen live for `2 × ttl` since this keeper lost (or, with
/// [`LeaseKeeper::latch_without_holding`], since it first looked). A latched
/// keeper never claims again.
pub struct LeaseKeeper {
    catalog: Arc<dyn Catalog>,
    name: String,
    holder: LeaseHolder,
    config: LeaseConfig,
    latch_without_holding: bool,
    state: LeaseState,
    ever_held: bool,
    foreign_since: Option<Instant>,
    /// Where [`LeaseKeeper::spawn`] publishes (the claim in flight too).
    publish: Option<tokio::sync::watch::Sender<LeaseState>>,
    /// When the last trim of the lease log started, and its task.
    trimmed_at: Option<Instant>,
    trimming: Option<tokio::task::JoinHandle<()>>,
}

/// The bound on one trim of the lease log.
const TRIM_BOUND: Duration = Duration::from_secs(60);

impl std::fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseKeeper")
            .field("catalog", &self.catalog.server())
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("config", &self.config)
            .field("state", &self.state)
            .finish()
    }
}

impl LeaseKeeper {
    /// A keeper for `name`, claiming as `holder`, not yet holding.
    pub fn new(
        catalog: Arc<dyn Catalog>,
        name: impl Into<String>,
        holder: LeaseHolder,
        config: LeaseConfig,
    ) -> Result<LeaseKeeper> {
        config.validate()?;
        let name = name.into();
        let server = catalog.server();
        Ok(LeaseKeeper {
            catalog,
            state: LeaseState {
                name: name.clone(),
                server,
                ..LeaseState::default()
            },
            name,
            holder,
            config,
            latch_without_holding: false,
            ever_held: false,
            foreign_since: None,
            publish: None,
            trimmed_at: None,
            trimming: None,
        })
    }

    /// Latch also when this keeper never held the lease (a second
    /// single-publisher for one catalog is a misconfiguration). Off by
    /// default: a node's standby adopters wait without latching.
    pub fn latch_without_holding(mut self, yes: bool) -> Self {
        self.latch_without_holding = yes;
        self
    }

    /// The lease's timing.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The state after the last tick.
    pub fn state(&self) -> LeaseState {
        self.state.clone()
    }

    /// The current holding, if it is still locally valid.
    pub fn guard(&self) -> Option<LeaseGuard> {
        self.state
            .guard
            .clone()
            .filter(LeaseGuard::is_locally_valid)
    }

    /// How long until the next tick has something to do.
    pub fn next_tick_in(&self) -> Duration {
        match &self.state.guard {
            Some(g) => (g.claimed_at + self.config.renew_interval)
                .saturating_duration_since(Instant::now()),
            None => self.config.renew_interval,
        }
    }

    fn lose(&mut self, why: &str) {
        if let Some(g) = self.state.guard.take() {
            self.state.losses += 1;
            tracing::warn!(lease = %self.name, lease_id = %g.lease_id, term = g.term, "lease lost: {why}");
        }
    }

    fn saw_foreign(&mut self, holder: String, now: Instant) {
        self.state.foreign_holder = Some(LeaseHolder::parse(&holder));
        let since = *self.foreign_since.get_or_insert(now);
        if (self.ever_held || self.latch_without_holding)
            && now.duration_since(since) >= self.config.latch_after()
            && !self.state.latched
        {
            self.state.latched = true;
            tracing::error!(
                lease = %self.name,
                foreign_holder = %holder,
                "a foreign lease outlived 2 x TTL ({:?}): latched; lease-gated work stops for this process's lifetime",
                self.config.latch_after()
            );
        }
    }

    /// Does what is due now and returns the new state.
    pub async fn tick(&mut self) -> LeaseState {
        if self.state.latched {
            return self.state.clone();
        }
        let now = Instant::now();
        if let Some(g) = self.state.guard.clone() {
            if now < g.claimed_at + self.config.renew_interval {
                return self.state.clone();
            }
            // A renewal that lands after the holding's local deadline is
            // worthless: it is cut there (or after the renew interval).
            let until = g
                .local_deadline()
                .max(now + self.config.renew_interval.min(Duration::from_secs(1)));
            match self.bounded("renew the lease", until, Some(&g)).await {
                Ok(LeaseClaim::Held(g2)) => {
                    let gap = g2.claimed_at.saturating_duration_since(g.claimed_at);
                    self.state.renewals += 1;
                    self.state.max_renewal_gap = self.state.max_renewal_gap.max(Some(gap));
                    self.state.guard = Some(g2);
                    self.state.last_error = None;
                    self.state.refused = None;
                    return self.state.clone();
                }
                Ok(LeaseClaim::Busy { holder, .. }) => {
                    self.lose(&format!("{holder} holds it now"));
                    self.saw_foreign(holder, now);
                    return self.state.clone();
                }
                Ok(LeaseClaim::Contested { term }) => {
                    self.lose(&format!("renewal contested at term {term}"))
                }
                Ok(LeaseClaim::Lapsed { term }) => self.lose(&format!("lapsed (head term {term})")),
                Err(e) => {
                    self.note_error(&e);
                    if !g.is_locally_valid() {
                        self.lose(&format!("could not renew before it lapsed: {e}"));
                    }
                    return self.state.clone();
                }
            }
        }
        let until = now + self.config.renew_interval;
        match self.bounded("acquire the lease", until, None).await {
            Ok(LeaseClaim::Held(g)) => {
                tracing::info!(lease = %self.name, lease_id = %g.lease_id, term = g.term, "lease acquired");
                self.state.guard = Some(g);
                self.state.acquisitions += 1;
                self.state.foreign_holder = None;
                self.state.last_error = None;
                self.state.refused = None;
                self.ever_held = true;
                self.foreign_since = None;
            }
            Ok(LeaseClaim::Busy { holder, .. }) => self.saw_foreign(holder, now),
            Ok(LeaseClaim::Contested { .. } | LeaseClaim::Lapsed { .. }) => {}
            Err(e) => self.note_error(&e),
        }
        self.state.clone()
    }

    /// Records a failed claim: the last error, and whether it refuses the
    /// destination (no retry can fix it).
    fn note_error(&mut self, e: &Error) {
        self.state.last_error = Some(e.to_string());
        self.state.refused = (!e.is_retryable()).then(|| e.to_string());
    }

    /// One claim, published as in flight while it runs and cut at `until`
    /// (a [`Error::Timeout`] naming the catalog and the purpose).
    async fn bounded(
        &mut self,
        purpose: &'static str,
        until: Instant,
        renewing: Option<&LeaseGuard>,
    ) -> Result<LeaseClaim> {
        self.state.in_flight = Some((purpose, std::time::Instant::now()));
        if let Some(tx) = &self.publish {
            tx.send_replace(self.state.clone());
        }
        let started = Instant::now();
        let r = tokio::time::timeout_at(
            until,
            claim(
                &*self.catalog,
                &self.name,
                self.holder.as_str(),
                &self.config,
                renewing,
            ),
        )
        .await
        .unwrap_or_else(|_| {
            Err(Error::Timeout {
                server: self.catalog.server(),
                purpose,
                after: started.elapsed(),
            })
        });
        self.state.in_flight = None;
        r
    }

    /// While holding, starts a trim of the lease log
    /// ([`Catalog::trim_lease_log`]) on its own task every
    /// [`crate::LEASE_TRIM_INTERVAL`] (the first one at once): it never
    /// delays a renewal, at most one runs at a time, and each is cut after
    /// a minute. A failed trim is logged and tried again at the next interval.
    fn trim_when_due(&mut self) {
        if self.state.guard.is_none()
            || self.trimming.as_ref().is_some_and(|h| !h.is_finished())
            || self
                .trimmed_at
                .is_some_and(|t| t.elapsed() < LEASE_TRIM_INTERVAL)
        {
            return;
        }
        self.trimmed_at = Some(Instant::now());
        let catalog = self.catalog.clone();
        self.trimming = Some(tokio::spawn(async move {
            match tokio::time::timeout(TRIM_BOUND, catalog.trim_lease_log()).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => {
                    tracing::info!(server = %catalog.server(), trimmed = n, "trimmed the lease log")
                }
                Ok(Err(e)) => tracing::warn!("could not trim the lease log: {e}"),
                Err(_) => {
                    tracing::warn!(server = %catalog.server(), "trimming the lease log took over {TRIM_BOUND:?}; cut")
                }
            }
        }));
    }

    /// Lets go: a tombstone if the lease is ours, then not held.
    pub async fn release(&mut self) -> Result<()> {
        if let Some(g) = self.state.guard.take() {
            release(&*self.catalog, &g).await?;
        }
        Ok(())
    }

    /// Runs the keeper on its own task: ticks when due, publishes every
    /// state on a watch channel (a latch wakes subscribers at once), and
    /// releases on [`LeaseTask::stop`].
    pub fn spawn(mut self) -> LeaseTask {
        let (tx, rx) = tokio::sync::watch::channel(self.state());
        self.publish = Some(tx.clone());
        let stop = Arc::new(tokio::sync::Notify::new());
        let stop2 = stop.clone();
        let handle = tokio::spawn(async move {
            use futures::FutureExt;
            let run = std::panic::AssertUnwindSafe(async {
                loop {
                    // stop cuts a claim in flight: the release comes next
                    let st = tokio::select! {
                        st = self.tick() => st,
                        _ = stop2.notified() => break,
                    };
                    tx.send_replace(st);
                    self.trim_when_due();
                    if self.state.latched {
                        // Nothing more to do: a latched keeper never claims again.
                        stop2.notified().await;
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(self.next_tick_in().max(Duration::from_millis(50))) => {}
                        _ = stop2.notified() => break,
                    }
                }
                self.state.in_flight = None;
                let released = self.release().await;
                tx.send_replace(self.state());
                released
            })
            .catch_unwind()
            .await;
            match run {
                Ok(released) => released,
                Err(panic) => {
                    let why = panic_message(panic.as_ref());
                    tracing::error!("the lease keeper's task panicked: {why}");
                    tx.send_modify(|s| {
                        s.guard = None;
                        s.in_flight = None;
                        s.task_failed = Some(why.clone());
                    });
                    Err(Error::LeaseTaskPanicked(why))
                }
            }
        });
        LeaseTask {
            state: rx,
            stop,
            handle,
        }
    }
}

/// The message of a caught panic (`&str` or `String` payloads; else a
/// placeholder).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// A [`LeaseKeeper`] running on its own task.
#[derive(Debug)]
pub struct LeaseTask {
    state: tokio::sync::watch::Receiver<LeaseState>,
    stop: Arc<tokio::sync::Notify>,
    handle: tokio::task::JoinHandle<Result<()>>,
}

impl LeaseTask {
    /// The latest state.
    pub fn state(&self) -> LeaseState {
        self.state.borrow().clone()
    }

    /// A receiver that wakes on every new state (including the latch).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// The current holding, if locally valid: what lease-gated inserts carry.
    pub fn guard(&self) -> Option<LeaseGuard> {
        self.state
            .borrow()
            .guard
            .clone()
            .filter(LeaseGuard::is_locally_valid)
    }

    /// Stops the loop and releases the lease (a tombstone), if held.
    pub async fn stop(self) -> Result<()> {
        self.stop.notify_one();
        match self.handle.await {
            Ok(r) => r,
            Err(e) => Err(Error::InvalidConfig(format!("lease task failed: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NewClaim;
    use uuid::Uuid;

    /// A holder's keeper trims the log as soon as it holds: claims older
    /// than the retention go, each name's head term stays (the fake's
    /// clock is moved two days on).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holders_keeper_trims_the_log_and_keeps_every_head() {
        let fake = Arc::new(crate::MemoryCatalog::new());
        let catalog: Arc<dyn Catalog> = fake.clone();
        for term in 1..=3 {
            catalog
                .append_claim(&NewClaim {
                    name: "other".into(),
                    term,
                    lease_id: Uuid::new_v4(),
                    holder: "other pid 1".into(),
                    ttl_ms: 30_000,
                })
                .await
                .unwrap();
        }
        fake.advance_clock(Duration::from_secs(2 * 86_400));
        let keeper = LeaseKeeper::new(
            catalog.clone(),
            "mine",
            LeaseHolder::parse("me pid 2"),
            LeaseConfig::new(Duration::from_secs(6)).unwrap(),
        )
        .unwrap();
        let task = keeper.spawn();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let terms: Vec<u64> = catalog
                .lease_log("other")
                .await
                .unwrap()
                .iter()
                .map(|r| r.term)
                .collect();
            if terms == vec![3] {
                break;
            }
            assert!(Instant::now() < deadline, "not trimmed: {terms:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(task.state().held());
        assert_eq!(
            catalog.lease_log("mine").await.unwrap().len(),
            1,
            "today's claim stays"
        );
        task.stop().await.unwrap();
    }
}
