//! The daemon's `/metrics` and `/healthz` (`spool run --metrics-addr
//! ADDR`).
//!
//! The run loop publishes each look's snapshot and its health verdict
//! ([`crate::Health`], the daemon's rule) into a [`Published`];
//! [`server::Server`] (`server.rs`) serves it over HTTP. `/metrics` is
//! encoded by the Prometheus project's Rust client (`prometheus-client`)
//! from a collector that reads the latest snapshot at scrape time: every
//! field of the one snapshot table ([`crate::FIELDS`]), `spool_` prefix,
//! units in the names (`_packs`, `_bytes`, `_seconds`; counters end in
//! `_total`). `/healthz` answers `200 ok` while healthy and `503` with the
//! reason when the service latched or the stores keep failing.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::{FieldKind, Snapshot};

pub mod server;

/// What the run loop last published, shared with the server.
#[derive(Debug, Clone, Default)]
struct State {
    /// The latest snapshot.
    snapshot: Snapshot,
    /// `None` while healthy; else why not.
    unhealthy: Option<String>,
    /// Process start, Unix seconds.
    start_time: f64,
}

/// The latest snapshot and health verdict, published by the run loop and
/// read by the server at each request (a clone shares it).
#[derive(Debug, Clone)]
pub struct Published(Arc<Mutex<State>>);

impl Default for Published {
    fn default() -> Published {
        Published::new()
    }
}

impl Published {
    /// Nothing published yet: an empty snapshot, healthy, started now.
    pub fn new() -> Published {
        Published(Arc::new(Mutex::new(State {
            start_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
            ..State::default()
        })))
    }

    /// Publishes `snapshot` and its verdict (`None`: healthy). Returns the
    /// reason when this turns it unhealthy (it was healthy before).
    pub fn publish(&self, snapshot: &Snapshot, unhealthy: Option<String>) -> Option<String> {
        let mut st = self.state();
        let turned = unhealthy.clone().filter(|_| st.unhealthy.is_none());
        st.snapshot = snapshot.clone();
        st.unhealthy = unhealthy;
        turned
    }

    /// Why it is unhealthy, `None` while healthy.
    fn unhealthy(&self) -> Option<String> {
        self.state().unhealthy.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug)]
struct SnapshotCollector(Published);

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
        let st = self.0.state().clone();
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

/// Renders the Prometheus text exposition of what `published` holds.
fn render(published: &Published) -> String {
    let mut registry = Registry::with_prefix("spool");
    registry.register_collector(Box::new(SnapshotCollector(published.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String does not fail");
    out
}

#[cfg(test)]
mod tests;
