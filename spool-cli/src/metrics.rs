//! `/metrics` and `/healthz` for `spool run --metrics-addr ADDR`.
//!
//! The run loop publishes each service snapshot and its health
//! verdict into a shared [`Status`]; [`server::Server`] (`server.rs`) serves it
//! over HTTP. `/metrics` is encoded by the Prometheus project's Rust
//! client (`prometheus-client`) from a [`Collector`] that reads the latest
//! snapshot at scrape time: every field of the snapshot, `spool_` prefix,
//! units in the names (`_packs`, `_bytes`, `_seconds`; counters end in
//! `_total`). `/healthz` answers `200 ok` while healthy and `503` with the
//! reason when the service latched or the stores keep failing
//! ([`Health::judge`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use spool_service::Snapshot;

pub mod server;

/// What the run loop publishes for the server.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The latest snapshot.
    pub snapshot: Snapshot,
    /// `None` while healthy; else why not.
    pub unhealthy: Option<String>,
    /// Process start, Unix seconds.
    pub start_time: f64,
}

/// Shared between the run loop and the server.
pub type Shared = Arc<Mutex<Status>>;

/// A new shared status.
pub fn shared() -> Shared {
    Arc::new(Mutex::new(Status {
        start_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64(),
        ..Status::default()
    }))
}

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

#[derive(Debug)]
struct SnapshotCollector(Shared);

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let st = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let s = &st.snapshot;
        let e = &mut e;
        counter(
            e,
            "staged_packs",
            "Packs staged by sinks in this process.",
            s.staged,
        )?;
        counter(
            e,
            "uploaded_packs",
            "Packs put in the object store (own and adopted).",
            s.uploaded,
        )?;
        counter(
            e,
            "indexed_packs",
            "Packs indexed in the catalog (own and adopted).",
            s.indexed,
        )?;
        counter(
            e,
            "upload_failures",
            "Failed upload attempt series.",
            s.upload_failures,
        )?;
        counter(
            e,
            "cancelled_uploads",
            "Uploads cut by a cancel (deadline, flush, stop).",
            s.cancelled_uploads,
        )?;
        counter(
            e,
            "quarantined_packs",
            "Corrupt packs set aside as .quarantined.",
            s.quarantined,
        )?;
        counter(
            e,
            "rejected_packs",
            "Own packs set aside as .rejected after a non-retryable failure.",
            s.rejected,
        )?;
        counter(
            e,
            "adopted_spools",
            "Dead sibling directories drained by this service.",
            s.adopted_spools,
        )?;
        counter(
            e,
            "adopted_packs",
            "Sibling packs uploaded by this service.",
            s.adopted_packs,
        )?;
        counter(
            e,
            "handed_off_shipped",
            "Packs live sink-only owners handed off, indexed by this service.",
            s.hand_off.shipped,
        )?;
        counter(
            e,
            "handed_off_confirmed",
            "Handed-off packs whose owners were told their rows are confirmed.",
            s.hand_off.confirmed,
        )?;
        counter(
            e,
            "handed_off_refused",
            "Consent refs refused (no valid pack behind them).",
            s.hand_off.refused,
        )?;
        gauge(
            e,
            "handed_off_unconfirmed",
            "Handed-off packs indexed whose confirmations cannot be written yet (kept by their owners).",
            s.hand_off.unconfirmed as i64,
        )?;
        gauge(
            e,
            "index_pace_milliseconds",
            "The index linger in force: service.index_linger, longer while the catalog pushes back.",
            s.index_pace.as_millis() as i64,
        )?;
        gauge(
            e,
            "handed_off_last_lag_milliseconds",
            "Consent to confirmation of the last handed-off pack confirmed.",
            s.hand_off.last_lag_ms as i64,
        )?;
        gauge(
            e,
            "handed_off_max_lag_milliseconds",
            "The longest consent-to-confirmation lag of a handed-off pack so far.",
            s.hand_off.max_lag_ms as i64,
        )?;
        counter(
            e,
            "cycles",
            "Service cycles run (loop and flush).",
            s.cycles,
        )?;
        counter(
            e,
            "lease_losses",
            "Holdings of this service's lease lost (superseded, lapsed, or not renewed in time).",
            s.lease_losses,
        )?;
        counter(
            e,
            "catalog_quorum_contention",
            "Replicated catalog: answers that an earlier quorum insert was not satisfied yet (ClickHouse code 286), each tried again.",
            s.catalog.quorum_contention,
        )?;
        counter(
            e,
            "catalog_quorum_contention_gave_up",
            "Replicated catalog: statements that met code 286 until the end of their budget (retried at a later cycle).",
            s.catalog.quorum_contention_gave_up,
        )?;
        gauge(
            e,
            "pending_index_packs",
            "Packs uploaded and not yet indexed (owed to the catalog).",
            s.pending_index as i64,
        )?;
        gauge(
            e,
            "deferred_packs",
            "Own ready packs not uploaded at the end of the last cycle.",
            s.deferred as i64,
        )?;
        gauge(
            e,
            "adoption_owed",
            "1 while adoptable sibling work is not done.",
            s.adoption_owed as i64,
        )?;
        gauge(
            e,
            "live_siblings",
            "Sibling directories found live at their last probe.",
            s.live_siblings as i64,
        )?;
        gauge(
            e,
            "blocked_siblings",
            "Sibling directories nobody adopts until a person acts.",
            s.blocked_siblings.len() as i64,
        )?;
        gauge(
            e,
            "sibling_bytes",
            "Bytes held by dead siblings (charged to the own budget).",
            s.sibling_bytes as i64,
        )?;
        gauge(
            e,
            "lease_held",
            "1 while this service holds its lease.",
            s.lease_held as i64,
        )?;
        gauge(
            e,
            "latched",
            "1 once a foreign lease outlived 2 x TTL (lease-gated work stopped).",
            s.latched as i64,
        )?;
        gauge(
            e,
            "destination_refused",
            "1 while the store or catalog refuses the whole destination (401, 403, missing bucket); packs stay ready.",
            s.destination_refused.is_some() as i64,
        )?;
        gauge(
            e,
            "loop_failed",
            "1 once the service loop panicked (the daemon stops and exits 10).",
            s.loop_failed.is_some() as i64,
        )?;
        gauge(
            e,
            "last_error_present",
            "1 when an error has been recorded (the text is in /healthz).",
            s.last_error.is_some() as i64,
        )?;
        gauge(
            e,
            "healthy",
            "1 while /healthz answers 200.",
            st.unhealthy.is_none() as i64,
        )?;
        let g = ConstGauge::new(st.start_time);
        g.encode(e.encode_descriptor(
            "start_time_seconds",
            "Process start, seconds since the Unix epoch.",
            None,
            g.metric_type(),
        )?)?;
        if let Some(holder) = &s.lease_holder {
            let g = ConstGauge::new(1i64);
            let mut m = e.encode_descriptor(
                "lease_foreign_holder",
                "The foreign lease holder last seen (label holder).",
                None,
                g.metric_type(),
            )?;
            g.encode(m.encode_family(&[("holder", holder.as_str())])?)?;
        }
        if !s.blocked_siblings.is_empty() {
            let g = ConstGauge::new(1i64);
            let mut m = e.encode_descriptor(
                "blocked_sibling",
                "One series per blocked sibling directory (label dir).",
                None,
                g.metric_type(),
            )?;
            for dir in &s.blocked_siblings {
                let dir = dir.display().to_string();
                g.encode(m.encode_family(&[("dir", dir.as_str())])?)?;
            }
        }
        Ok(())
    }
}

/// Renders the Prometheus text exposition of `status`.
pub fn render(status: &Shared) -> String {
    let mut registry = Registry::with_prefix("spool");
    registry.register_collector(Box::new(SnapshotCollector(status.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

#[cfg(test)]
mod tests;
