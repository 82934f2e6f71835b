//! The lease: an append-only claim log decided by the catalog's clock and
//! by reading back. This file holds what a lease is (its configuration,
//! names, claims, guard); the claim algorithm lives once in `catalog.rs`,
//! over three primitives every backend provides
//! ([`Catalog::read_lease_head`](crate::Catalog::read_lease_head),
//! [`Catalog::append_claim`](crate::Catalog::append_claim),
//! [`Catalog::read_claims`](crate::Catalog::read_claims)), and the
//! acquire/renew/latch loop a service runs in `keeper.rs`; the fence lives
//! in each backend's index insert.

use crate::error::{Error, Result};
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

/// `<catalog_key>/<host>`: the node lease.
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

#[cfg(test)]
mod tests {
    use super::*;

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
