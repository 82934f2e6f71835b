//! `/metrics` and `/healthz` for `spool run --metrics-addr ADDR`.
//!
//! The run loop publishes each service snapshot and its health
//! verdict into a shared [`Status`]; [`server::Server`] (`server.rs`) serves it
//! over HTTP. `/metrics` is encoded by the Prometheus project's Rust
//! client (`prometheus-client`) from a [`Collector`] that reads the latest
//! snapshot at scrape time: every field of spool-service's one table
//! ([`spool_service::FIELDS`]), `spool_` prefix,
//! units in the names (`_packs`, `_bytes`, `_seconds`; counters end in
//! `_total`). `/healthz` answers `200 ok` while healthy and `503` with the
//! reason when the service latched or the stores keep failing
//! (spool-service's `Health`, the daemon's rule).

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use spool_service::{FieldKind, Snapshot};

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
        for (field, value) in s.fields() {
            match field.kind() {
                FieldKind::Counter => counter(e, field.metric(), field.help(), value.as_metric())?,
                FieldKind::Gauge | FieldKind::Text => gauge(
                    e,
                    field.metric(),
                    field.help(),
                    i64::try_from(value.as_metric()).unwrap_or(i64::MAX),
                )?,
            }
        }
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
