//! The daemon's health rule ([`Health`]): what `/healthz` of `spool run`
//! answers, judged from successive snapshots, so an embedder's view of a
//! service's health is the daemon's.

use std::time::{Duration, Instant};

use crate::Snapshot;

/// Decides health from successive snapshots: unhealthy when latched, or
/// when work waits (own packs not uploaded, packs owed to the catalog, or
/// adoption owed while holding the lease), an error is recorded, and
/// nothing moved (uploaded, indexed, adopted, set aside) for
/// `unhealthy_after`.
#[derive(Debug)]
pub struct Health {
    unhealthy_after: Duration,
    marker: (u64, u64, u64, u64, u64, u64),
    moved_at: Instant,
}

impl Health {
    /// A judge with this patience.
    pub fn new(unhealthy_after: Duration) -> Health {
        Health {
            unhealthy_after,
            marker: (0, 0, 0, 0, 0, 0),
            moved_at: Instant::now(),
        }
    }

    /// The verdict for the latest snapshot: `None` if healthy.
    pub fn judge(&mut self, s: &Snapshot) -> Option<String> {
        if s.latched {
            return Some(format!(
                "latched: a foreign lease{} outlived 2 x TTL; lease-gated work stopped for this \
                 process's lifetime (find the other writer, then restart)",
                s.lease_holder
                    .as_ref()
                    .map(|h| format!(" (held by {h})"))
                    .unwrap_or_default()
            ));
        }
        if let Some(why) = &s.loop_failed {
            return Some(format!("loop_failed: {why}"));
        }
        if let Some(r) = &s.destination_refused {
            return Some(format!("destination refused: {r}"));
        }
        let marker = (
            s.uploaded,
            s.indexed,
            s.adopted_packs,
            s.hand_off.shipped,
            s.quarantined,
            s.rejected,
        );
        let waiting = s.deferred > 0 || s.pending_index > 0 || (s.adoption_owed && s.lease_held);
        if marker != self.marker || !waiting {
            self.marker = marker;
            self.moved_at = Instant::now();
            return None;
        }
        let stuck = self.moved_at.elapsed();
        match &s.last_error {
            Some(err) if stuck >= self.unhealthy_after => Some(format!(
                "stores failing: nothing moved for {}s with {} own pack(s) not uploaded, {} owed \
                 to the catalog{}; last error: {err}",
                stuck.as_secs(),
                s.deferred,
                s.pending_index,
                if s.adoption_owed {
                    ", adoption owed"
                } else {
                    ""
                }
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_turns_on_latch_and_on_stuck_failing_work() {
        let mut h = Health::new(Duration::from_millis(50));
        let mut s = Snapshot::default();
        assert_eq!(h.judge(&s), None);
        s.deferred = 3;
        s.last_error = Some("store down".into());
        assert_eq!(h.judge(&s), None, "not stuck long enough yet");
        std::thread::sleep(Duration::from_millis(80));
        let why = h.judge(&s).expect("stuck");
        assert!(
            why.contains("3 own pack(s)") && why.contains("store down"),
            "{why}"
        );
        s.uploaded = 1; // progress clears it
        assert_eq!(h.judge(&s), None);
        s.latched = true;
        s.lease_holder = Some(spool_catalog::LeaseHolder::parse("h:1"));
        assert!(h.judge(&s).unwrap().contains("latched"));
    }
}
