//! The lease: an append-only claim log decided by the catalog's
//! clock and by reading back, plus [`LeaseKeeper`], the acquire/renew/latch
//! loop a service runs.
//!
//! The claim algorithm lives here once, over three primitives every backend
//! provides ([`Catalog::read_lease_head`], [`Catalog::append_claim`],
//! [`Catalog::read_claims`]); the fence lives in each backend's index insert.

use crate::error::{Error, Result};
use crate::{Catalog, LeaseHolder};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// The shortest TTL accepted: whole seconds (old ClickHouse servers have a
/// one-second clock), and room for the smallest fence margin (2 s) plus a
/// renew interval of ttl/3 plus the clock's second: 2 + 1.67 + 1 < 5.
pub const MIN_TTL: Duration = Duration::from_secs(5);
/// The longest TTL accepted: far under [`crate::LEASE_LOG_RETENTION`], so
/// the head of a name idle since the trim's cutoff has lapsed long ago.
pub const MAX_TTL: Duration = Duration::from_secs(3_600);
/// The default TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The default fence margin: a fenced insert runs only while the lease has
/// at least this long to live.
pub const DEFAULT_FENCE_MARGIN: Duration = Duration::from_secs(5);
/// Resolution of the catalog clock (`toUInt64(now()) * 1000`).
pub const CLOCK_RESOLUTION: Duration = Duration::from_secs(1);

/// Timing of a lease: TTL, renew interval, fence margin. See the crate docs
/// ("Safety margin") for why the checks in [`LeaseConfig::validate`] hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// How long a claim lives (whole seconds, ≥ 5 s).
    pub ttl: Duration,
    /// How often a holder renews (≤ ttl / 3).
    pub renew_interval: Duration,
    /// How long the lease must still live for a fenced insert to run (whole
    /// seconds, ≥ 2 s); the insert's `max_execution_time` is one second less.
    pub fence_margin: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            ttl: DEFAULT_TTL,
            renew_interval: DEFAULT_TTL / 3,
            fence_margin: DEFAULT_FENCE_MARGIN,
        }
    }
}

fn whole_seconds(d: Duration) -> bool {
    d.subsec_nanos() == 0
}

impl LeaseConfig {
    /// A config with this TTL, renewing every ttl/3, with the default fence
    /// margin (5 s) — lowered a second at a time, never under 2 s, while
    /// `margin + ttl/3 + 1 s` would not fit under the TTL — validated. The
    /// shortest TTL that fits is therefore 5 s (margin 2 s, renew 1.67 s).
    pub fn new(ttl: Duration) -> Result<LeaseConfig> {
        let renew_interval = ttl / 3;
        let mut fence_margin = DEFAULT_FENCE_MARGIN;
        while fence_margin > Duration::from_secs(2)
            && fence_margin + renew_interval + CLOCK_RESOLUTION >= ttl
        {
            fence_margin -= Duration::from_secs(1);
        }
        let c = LeaseConfig {
            ttl,
            renew_interval,
            fence_margin,
        };
        c.validate()?;
        Ok(c)
    }

    /// The same config with another fence margin, validated.
    pub fn with_fence_margin(mut self, fence_margin: Duration) -> Result<LeaseConfig> {
        self.fence_margin = fence_margin;
        self.validate()?;
        Ok(self)
    }

    /// The same config with another renew interval, validated.
    pub fn with_renew_interval(mut self, renew_interval: Duration) -> Result<LeaseConfig> {
        self.renew_interval = renew_interval;
        self.validate()?;
        Ok(self)
    }

    /// Refuses a config that breaks the safety margin: TTL and margin in
    /// whole seconds, 5 s ≤ TTL ≤ 1 h, margin ≥ 2 s, renew interval in (0, ttl/3],
    /// and `fence_margin + renew_interval + 1 s < ttl`, so a holder renewing
    /// on time always has a fence that passes.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if !whole_seconds(self.ttl) || self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return bad(format!(
                "ttl {:?} must be whole seconds, at least {MIN_TTL:?} (the catalog clock has one-second resolution) and at most {MAX_TTL:?} (far under the lease log's one-day retention)",
                self.ttl
            ));
        }
        if !whole_seconds(self.fence_margin) || self.fence_margin < Duration::from_secs(2) {
            return bad(format!(
                "fence_margin {:?} must be whole seconds and at least 2 s (the fenced insert's max_execution_time is one second less)",
                self.fence_margin
            ));
        }
        if self.renew_interval.is_zero() || self.renew_interval > self.ttl / 3 {
            return bad(format!(
                "renew_interval {:?} must be more than 0 and at most ttl/3 = {:?}",
                self.renew_interval,
                self.ttl / 3
            ));
        }
        if self.fence_margin + self.renew_interval + CLOCK_RESOLUTION >= self.ttl {
            return bad(format!(
                "fence_margin {:?} + renew_interval {:?} + 1 s must be less than ttl {:?}, or a holder renewing on time finds its own fence closed; raise ttl or lower the margin",
                self.fence_margin, self.renew_interval, self.ttl
            ));
        }
        Ok(())
    }

    /// The server-side bound on a fenced insert: one second under the margin.
    pub fn max_execution_time(&self) -> Duration {
        self.fence_margin.saturating_sub(CLOCK_RESOLUTION)
    }

    /// How long a foreign lease must live on before a deposed holder latches.
    pub fn latch_after(&self) -> Duration {
        self.ttl * 2
    }
}

/// What the lease is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LeaseScope {
    /// One adopter per node: name `<catalog_key>/<host>`. Services index
    /// their own directory without it; adoption needs it.
    #[default]
    Node,
    /// One writer for the whole catalog: name `<catalog_key>`. Nothing is
    /// uploaded or indexed without it.
    Catalog,
}

impl LeaseScope {
    /// Parses `node` or `catalog`; anything else is refused.
    pub fn parse(s: &str) -> Result<LeaseScope> {
        match s {
            "node" => Ok(LeaseScope::Node),
            "catalog" => Ok(LeaseScope::Catalog),
            other => Err(Error::InvalidConfig(format!(
                "unknown lease_scope {other:?}: expected \"node\" or \"catalog\""
            ))),
        }
    }

    /// The lease name for this scope.
    pub fn lease_name(self, catalog_key: &str, host: &str) -> String {
        match self {
            LeaseScope::Node => node_lease_name(catalog_key, host),
            LeaseScope::Catalog => catalog_lease_name(catalog_key),
        }
    }
}

/// `<catalog_key>/<host>`: the node's adopter lease.
pub(crate) fn node_lease_name(catalog_key: &str, host: &str) -> String {
    format!("{catalog_key}/{host}")
}

/// `<catalog_key>`: the single-publisher lease of a whole catalog.
pub fn catalog_lease_name(catalog_key: &str) -> String {
    catalog_key.to_string()
}

/// One row of the claim log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The lease name.
    pub name: String,
    /// The claim's term (the log's sequence number for this name).
    pub term: u64,
    /// The holding this claim belongs to (new per acquisition, kept across
    /// its renewals).
    pub lease_id: Uuid,
    /// Who claimed (host, pid, what).
    pub holder: String,
    /// Server clock at the claim, milliseconds.
    pub acquired_at_ms: u64,
    /// Server clock when it lapses, milliseconds (a tombstone: = acquired).
    pub expires_at_ms: u64,
}

/// The head of a lease name: every claim at its highest term, and the
/// catalog clock at the read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseHead {
    /// The claims at the highest term (empty: never claimed; two or more:
    /// contested, nobody holds it).
    pub claims: Vec<LeaseRecord>,
    /// The catalog's clock at the read, milliseconds.
    pub now_ms: u64,
}

impl LeaseHead {
    /// The highest term (0 when never claimed).
    pub fn term(&self) -> u64 {
        self.claims.first().map_or(0, |c| c.term)
    }

    /// The sole claim at the head term, if there is exactly one.
    pub fn sole(&self) -> Option<&LeaseRecord> {
        match self.claims.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The sole claim at the head, if it is still live.
    pub fn live_holder(&self) -> Option<&LeaseRecord> {
        self.sole().filter(|c| c.expires_at_ms > self.now_ms)
    }
}

/// A claim to append: the catalog stamps `acquired_at_ms = now` and
/// `expires_at_ms = now + ttl_ms` with its own clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewClaim {
    /// The lease name.
    pub name: String,
    /// The term claimed (head term + 1).
    pub term: u64,
    /// The holding's id.
    pub lease_id: Uuid,
    /// Who claims.
    pub holder: String,
    /// Lifetime in milliseconds (0: a tombstone).
    pub ttl_ms: u64,
}

/// Proof of holding a lease: what a fenced insert carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseGuard {
    /// The lease name.
    pub name: String,
    /// This holding's id (minted at acquisition, kept across renewals).
    pub lease_id: Uuid,
    /// Who holds it.
    pub holder: String,
    /// The term of the acquisition that started this holding.
    pub acquired_term: u64,
    /// The term of the latest claim (acquisition or renewal).
    pub term: u64,
    /// When the latest claim lapses, by the catalog's clock.
    pub expires_at_ms: u64,
    /// The timing it was claimed with.
    pub config: LeaseConfig,
    /// When the latest claim was sent (local monotonic clock).
    pub claimed_at: Instant,
}

impl LeaseGuard {
    /// The local, conservative end of the latest claim: the claim was sent
    /// at `claimed_at`, so the catalog cannot have stamped it earlier than
    /// that less its one-second resolution.
    pub fn local_deadline(&self) -> Instant {
        self.claimed_at + self.config.ttl - CLOCK_RESOLUTION
    }

    /// Whether, by the local clock, the latest claim certainly still lives.
    pub fn is_locally_valid(&self) -> bool {
        Instant::now() < self.local_deadline()
    }
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseClaim {
    /// The claim is ours alone.
    Held(LeaseGuard),
    /// Someone else's claim is live.
    Busy {
        /// Its holder.
        holder: String,
        /// Its term.
        term: u64,
        /// How long it still lives by the catalog's clock.
        expires_in: Duration,
    },
    /// Two claimants met at one term: nobody holds it; try again.
    Contested {
        /// The contested term.
        term: u64,
    },
    /// (Renew only.) Our holding is over: it lapsed or was superseded.
    /// Acquire again, with a new lease id.
    Lapsed {
        /// The head term seen.
        term: u64,
    },
}

/// The claim algorithm, shared by every backend: read the head; refuse if it
/// is live and not ours; append `term + 1`; read back: held only if ours is
/// the sole claim at that term.
pub(crate) async fn claim<C: Catalog + ?Sized>(
    catalog: &C,
    name: &str,
    holder: &str,
    config: &LeaseConfig,
    renewing: Option<&LeaseGuard>,
) -> Result<LeaseClaim> {
    config.validate()?;
    let claimed_at = Instant::now();
    let head = catalog.read_lease_head(name).await?;
    let lease_id = match renewing {
        Some(g) => {
            // A renewal continues a holding that is ours, alone and live.
            match head.live_holder() {
                Some(h) if h.lease_id == g.lease_id => g.lease_id,
                Some(h) => {
                    return Ok(LeaseClaim::Busy {
                        holder: h.holder.clone(),
                        term: h.term,
                        expires_in: Duration::from_millis(h.expires_at_ms - head.now_ms),
                    })
                }
                None if head.claims.len() > 1 => {
                    return Ok(LeaseClaim::Contested { term: head.term() })
                }
                None => return Ok(LeaseClaim::Lapsed { term: head.term() }),
            }
        }
        None => {
            if let Some(h) = head.live_holder() {
                return Ok(LeaseClaim::Busy {
                    holder: h.holder.clone(),
                    term: h.term,
                    expires_in: Duration::from_millis(h.expires_at_ms - head.now_ms),
                });
            }
            Uuid::new_v4()
        }
    };
    let term = head.term() + 1;
    catalog
        .append_claim(&NewClaim {
            name: name.to_string(),
            term,
            lease_id,
            holder: holder.to_string(),
            ttl_ms: config.ttl.as_millis() as u64,
        })
        .await?;
    crate::kill_point("lease_claim");
    let back = catalog.read_claims(name, term).await?;
    match back.as_slice() {
        [ours] if ours.lease_id == lease_id => Ok(LeaseClaim::Held(LeaseGuard {
            name: name.to_string(),
            lease_id,
            holder: holder.to_string(),
            acquired_term: renewing.map_or(term, |g| g.acquired_term),
            term,
            expires_at_ms: ours.expires_at_ms,
            config: *config,
            claimed_at,
        })),
        _ => Ok(LeaseClaim::Contested { term }),
    }
}

/// Release: a tombstone claim (expiring at once) on top of our own live
/// head. Returns whether one was written (nothing to do if the head is not
/// ours any more).
pub(crate) async fn release<C: Catalog + ?Sized>(catalog: &C, guard: &LeaseGuard) -> Result<bool> {
    let head = catalog.read_lease_head(&guard.name).await?;
    match head.live_holder() {
        Some(h) if h.lease_id == guard.lease_id => {
            catalog
                .append_claim(&NewClaim {
                    name: guard.name.clone(),
                    term: h.term + 1,
                    lease_id: guard.lease_id,
                    holder: guard.holder.clone(),
                    ttl_ms: 0,
                })
                .await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

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
                .is_some_and(|t| t.elapsed() < crate::LEASE_TRIM_INTERVAL)
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

    #[test]
    fn default_config_is_valid_and_documented_numbers_hold() {
        let c = LeaseConfig::default();
        c.validate().unwrap();
        assert_eq!(c.ttl, Duration::from_secs(30));
        assert_eq!(c.renew_interval, Duration::from_secs(10));
        assert_eq!(c.fence_margin, Duration::from_secs(5));
        assert_eq!(c.max_execution_time(), Duration::from_secs(4));
        assert_eq!(c.latch_after(), Duration::from_secs(60));
    }

    #[test]
    fn configs_that_break_the_margin_are_refused() {
        for (ttl, renew, margin, needle) in [
            (4, 0, 2, "at least 5s"),
            (6, 2, 1, "at least 2 s"),
            (6, 3, 2, "at most ttl/3"),
            (6, 2, 3, "must be less than ttl"),
            (10, 3, 6, "must be less than ttl"),
            (3_601, 1_200, 5, "at most 3600s"),
        ] {
            let c = LeaseConfig {
                ttl: Duration::from_secs(ttl),
                renew_interval: Duration::from_secs(renew).max(Duration::from_millis(1)),
                fence_margin: Duration::from_secs(margin),
            };
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{c:?}: {e}");
        }
        assert!(LeaseConfig::new(Duration::from_millis(3500)).is_err());
        // The smallest default-margin TTL: 10 s (5 + 3.33 + 1 < 10); below
        // it the margin is lowered to fit, down to 2 s; the shortest TTL
        // that fits at all is 5 s (2 + 1.67 + 1 < 5).
        assert_eq!(
            LeaseConfig::new(Duration::from_secs(10))
                .unwrap()
                .fence_margin,
            DEFAULT_FENCE_MARGIN
        );
        let nine = LeaseConfig::new(Duration::from_secs(9)).unwrap();
        assert_eq!(nine.fence_margin, Duration::from_secs(4));
        let five = LeaseConfig::new(Duration::from_secs(5)).unwrap();
        assert_eq!(five.fence_margin, Duration::from_secs(2));
        let e = LeaseConfig::new(Duration::from_secs(4)).unwrap_err();
        assert!(e.to_string().contains("at least 5s"), "{e}");
        assert!(LeaseConfig::new(Duration::from_secs(3)).is_err());
    }

    #[test]
    fn lease_names_per_scope() {
        assert_eq!(
            LeaseScope::Node.lease_name("0123456789ab", "node7"),
            "0123456789ab/node7"
        );
        assert_eq!(
            LeaseScope::Catalog.lease_name("0123456789ab", "node7"),
            "0123456789ab"
        );
        assert_eq!(LeaseScope::parse("node").unwrap(), LeaseScope::Node);
        assert_eq!(LeaseScope::parse("catalog").unwrap(), LeaseScope::Catalog);
        assert!(LeaseScope::parse("cluster").is_err());
    }
}
