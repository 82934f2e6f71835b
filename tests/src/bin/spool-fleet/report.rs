//! The fleet report: what the server saw (`system.events` deltas over the
//! production window, active parts per partition sampled from
//! `system.parts`), what the engines asked (client-side latency of index
//! inserts and lease claims, lease rows, errors), and the oracle's verdict.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalog::CallStats;
use crate::host::HostReport;
use crate::options::Options;
use crate::oracle::Verdict;

/// The `system.parts` samples.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Sampled {
    /// Samples taken.
    pub samples: u64,
    /// The most active parts one partition had, with its table and
    /// partition.
    pub max_parts: u64,
    /// Where the maximum was seen (`table/partition`).
    pub max_at: String,
    /// Per table, the most active parts of any of its partitions.
    pub max_by_table: BTreeMap<String, u64>,
    /// Failed samples (the first message).
    pub errors: u64,
    /// The first failed sample's message.
    pub first_error: Option<String>,
}

impl Sampled {
    /// Takes one sample of `(table, partition, active parts)`.
    pub fn add(&mut self, parts: &[(String, String, u64)]) {
        self.samples += 1;
        for (table, partition, n) in parts {
            let m = self.max_by_table.entry(table.clone()).or_default();
            *m = (*m).max(*n);
            if *n > self.max_parts {
                self.max_parts = *n;
                self.max_at = format!("{table}/{partition}");
            }
        }
    }

    /// Notes a failed sample.
    pub fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }
}

/// A replica SIGKILLed mid-window (`--kill-replica`) and started again.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ReplicaKill {
    /// The replica (1-based, as the URL lists them).
    pub replica: usize,
    /// Seconds into the window of the SIGKILL.
    pub killed_at: f64,
    /// Seconds into the window of its start.
    pub restarted_at: f64,
    /// Seconds into the window when it was healthy again (writable, every
    /// peer active, nothing left to fetch); `None`: not by the drain's end.
    pub healthy_at: Option<f64>,
}

/// The coordinator's own figures of a run.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Run {
    /// The server's version.
    pub version: String,
    /// Seconds until every host ran all its nodes.
    pub startup_secs: f64,
    /// The production window, seconds.
    pub window_secs: f64,
    /// From the stop to the last host's report, seconds.
    pub drain_secs: f64,
    /// 1-minute load average at the window's start and end.
    pub load_start: f64,
    /// See `load_start`.
    pub load_end: f64,
    /// `system.events` at the window's start.
    pub events0: BTreeMap<String, u64>,
    /// `system.events` at the window's end.
    pub events1: BTreeMap<String, u64>,
    /// (seconds into the window, node) of each SIGKILL.
    pub killed: Vec<(f64, usize)>,
    /// Hosts that sent no report (killed ones excepted: they are restarted).
    pub missing_reports: usize,
    /// CPU seconds the server used in the window (with `--server-pid`).
    pub server_cpu_secs: Option<f64>,
    /// Objects the store gained in the window: its PUTs (the `file://`
    /// store puts one per pack; an object store, one per bundle).
    #[serde(default)]
    pub objects_put: u64,
    /// The replica killed mid-window, if any.
    #[serde(default)]
    pub replica_kill: Option<ReplicaKill>,
}

/// Everything a run reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// `N x R at P/s for M min, K killed, ranks ship self|daemon`.
    pub shape: String,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks: usize,
    /// Packs per second per rank.
    pub rate: f64,
    /// The coordinator's figures.
    pub run: Run,
    /// Server: insert statements per second in the window (index and lease).
    pub server_inserts_per_s: f64,
    /// Server: rows per insert statement in the window.
    pub server_rows_per_insert: f64,
    /// Server: inserts delayed or refused for too many parts, failed
    /// inserts, in the window.
    pub delayed_inserts: u64,
    /// See `delayed_inserts`.
    pub rejected_inserts: u64,
    /// See `delayed_inserts`.
    pub failed_inserts: u64,
    /// Client: index inserts per second (whole run, surviving processes).
    pub index_per_s: f64,
    /// Client: rows per index insert.
    pub rows_per_index: f64,
    /// Client: index insert latency p50 / p99, milliseconds.
    pub index_ms: (f64, f64),
    /// Client: lease claims begun per second (a head read; refused ones
    /// end there).
    pub claim_attempts_per_s: f64,
    /// Client: lease claims that appended a row, per second.
    pub claims_per_s: f64,
    /// Client: lease claim latency p50 / p99, milliseconds.
    pub claim_ms: (f64, f64),
    /// Client: lease rows appended per second.
    pub lease_rows_per_s: f64,
    /// Client: failed index inserts and claims.
    pub errors: u64,
    /// Client: the first distinct error messages.
    pub error_examples: Vec<String>,
    /// Client: failed index inserts and claims by what failed them
    /// (`code N`, `timeout`, `unreachable`, `fenced`, ...).
    pub errors_by_code: BTreeMap<String, u64>,
    /// Client: code-286 answers (an earlier quorum insert into the table
    /// not satisfied yet) met and tried again: contention, not errors.
    pub quorum_contention: u64,
    /// Client: statements that met 286 until their budget ran out
    /// (counted in `errors_by_code` as `code 286` too).
    pub quorum_contention_gave_up: u64,
    /// Lease holdings lost while their engine lived (superseded, lapsed,
    /// or not renewed before the local deadline), surviving processes.
    pub lease_lapses: u64,
    /// Packs sealed per second (all ranks).
    pub sealed_per_s: f64,
    /// Produce errors, and ticks more than an interval late.
    pub produce_errors: u64,
    /// See `produce_errors`.
    pub late_ticks: u64,
    /// Nodes that did not close cleanly.
    pub node_problems: Vec<String>,
    /// The parts samples.
    pub parts: Sampled,
    /// The crash oracle.
    pub verdict: Verdict,
}

fn delta(r: &Run, k: &str) -> u64 {
    let (a, b) = (r.events0.get(k), r.events1.get(k));
    b.copied()
        .unwrap_or(0)
        .saturating_sub(a.copied().unwrap_or(0))
}

/// The `p`-th percentile of microsecond samples, in milliseconds.
fn pct_ms(v: &mut [u32], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    f64::from(v[rank.clamp(1, v.len()) - 1]) / 1000.0
}

impl Report {
    /// Puts the figures together.
    pub fn new(
        o: &Options,
        run: Run,
        hosts: Vec<HostReport>,
        parts: Sampled,
        verdict: Verdict,
    ) -> Report {
        let mut calls = CallStats::default();
        let (mut sealed, mut produce_errors, mut late_ticks, mut node_problems) =
            (0, 0, 0, Vec::new());
        let mut lease_lapses = 0;
        for h in hosts {
            calls.merge(h.calls);
            for n in h.nodes {
                sealed += n.sealed;
                produce_errors += n.produce_errors;
                late_ticks += n.late_ticks;
                lease_lapses += n.lease_lapses;
                if n.left_ready > 0 || !n.problems.is_empty() {
                    node_problems.push(format!(
                        "node {}: {} ready left; {}",
                        n.id,
                        n.left_ready,
                        n.problems.join("; ")
                    ));
                }
            }
        }
        let inserts = delta(&run, "InsertQuery");
        let secs = run.window_secs.max(1e-9);
        let whole = (run.startup_secs + run.window_secs + run.drain_secs).max(1e-9);
        Report {
            shape: format!(
                "{} nodes x {} ranks at {}/s for {} min, {} killed, ranks ship {}",
                o.nodes,
                o.ranks,
                o.rate,
                o.minutes,
                o.kill,
                o.ship.as_str()
            ),
            nodes: o.nodes,
            ranks: o.ranks,
            rate: o.rate,
            server_inserts_per_s: inserts as f64 / secs,
            server_rows_per_insert: delta(&run, "InsertedRows") as f64 / inserts.max(1) as f64,
            delayed_inserts: delta(&run, "DelayedInserts"),
            rejected_inserts: delta(&run, "RejectedInserts"),
            failed_inserts: delta(&run, "FailedInsertQuery"),
            index_per_s: calls.inserts as f64 / whole,
            rows_per_index: calls.rows as f64 / calls.inserts.max(1) as f64,
            index_ms: (
                pct_ms(&mut calls.insert_us, 50.0),
                pct_ms(&mut calls.insert_us, 99.0),
            ),
            claim_attempts_per_s: calls.claim_attempts as f64 / whole,
            claims_per_s: calls.claims as f64 / whole,
            claim_ms: (
                pct_ms(&mut calls.claim_us, 50.0),
                pct_ms(&mut calls.claim_us, 99.0),
            ),
            lease_rows_per_s: calls.lease_rows as f64 / whole,
            errors: calls.insert_errors + calls.claim_errors,
            error_examples: calls.errors,
            errors_by_code: calls.errors_by_code,
            quorum_contention: calls.quorum_contention,
            quorum_contention_gave_up: calls.quorum_contention_gave_up,
            lease_lapses,
            sealed_per_s: sealed as f64 / secs,
            produce_errors,
            late_ticks,
            node_problems,
            parts,
            verdict,
            run,
        }
    }

    /// Nothing lost or duplicated, every node drained, no host missing.
    pub fn passed(&self) -> bool {
        self.verdict.ok() && self.run.missing_reports == 0 && self.node_problems.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        let v = &self.verdict;
        writeln!(f, "fleet: {} (ClickHouse {})", self.shape, r.version)?;
        writeln!(
            f,
            "  time: start {:.1} s, window {:.1} s, drain {:.1} s; load {:.2} -> {:.2}; killed at {:?}",
            r.startup_secs, r.window_secs, r.drain_secs, r.load_start, r.load_end, r.killed
        )?;
        writeln!(
            f,
            "  server (window): {:.1} inserts/s, {:.1} rows/insert, {} delayed, {} rejected, {} failed inserts",
            self.server_inserts_per_s, self.server_rows_per_insert, self.delayed_inserts, self.rejected_inserts, self.failed_inserts
        )?;
        writeln!(
            f,
            "  store (window): {:.1} PUTs/s, {:.3} per pack sealed (objects created: one per pack on file://, which never bundles; one per bundle on an object store)",
            r.objects_put as f64 / r.window_secs.max(1e-9),
            r.objects_put as f64 / r.window_secs.max(1e-9) / self.sealed_per_s.max(1e-9)
        )?;
        if let Some(cpu) = r.server_cpu_secs {
            writeln!(
                f,
                "  server CPU (window): {:.1} s = {:.2} cores, {:.2} ms per insert",
                cpu,
                cpu / r.window_secs.max(1e-9),
                1000.0 * cpu / (self.server_inserts_per_s * r.window_secs).max(1.0)
            )?;
        }
        writeln!(
            f,
            "  parts: max {} active parts in one partition ({}), per table {:?}, {} samples, {} failed",
            self.parts.max_parts, self.parts.max_at, self.parts.max_by_table, self.parts.samples, self.parts.errors
        )?;
        writeln!(
            f,
            "  client: {:.1} index inserts/s, {:.1} rows/insert, insert p50 {:.1} ms p99 {:.1} ms; {:.1} lease claims begun/s, {:.1} appended/s, claim p50 {:.1} ms p99 {:.1} ms; {:.1} lease rows/s; {} errors",
            self.index_per_s, self.rows_per_index, self.index_ms.0, self.index_ms.1, self.claim_attempts_per_s, self.claims_per_s, self.claim_ms.0, self.claim_ms.1, self.lease_rows_per_s, self.errors
        )?;
        if !self.errors_by_code.is_empty() {
            writeln!(f, "    errors by code: {:?}", self.errors_by_code)?;
        }
        for e in &self.error_examples {
            writeln!(f, "    error: {e}")?;
        }
        writeln!(
            f,
            "  contention: {} code-286 answers tried again, {} gave up at their budget; {} lease lapses",
            self.quorum_contention, self.quorum_contention_gave_up, self.lease_lapses
        )?;
        if let Some(k) = &r.replica_kill {
            let healthy = k.healthy_at.map_or_else(
                || "not healthy by the drain's end".to_string(),
                |t| format!("healthy at {t:.1} s"),
            );
            writeln!(
                f,
                "  replica {} SIGKILLed at {:.1} s, started again at {:.1} s, {healthy}",
                k.replica, k.killed_at, k.restarted_at
            )?;
        }
        writeln!(
            f,
            "  producers: {:.1} packs/s sealed, {} produce errors, {} late ticks",
            self.sealed_per_s, self.produce_errors, self.late_ticks
        )?;
        for p in &self.node_problems {
            writeln!(f, "    {p}")?;
        }
        writeln!(
            f,
            "  oracle: {} logged, {} stored, {} indexed ({} rows stored), {} unlogged; lost {}, duplicated {}, indexed-not-stored {}, ready left {} => {}",
            v.logged, v.stored, v.indexed, v.physical_rows, v.unlogged, v.lost, v.duplicated, v.indexed_not_stored, v.left_ready,
            if self.passed() { "PASS" } else { "FAIL" }
        )?;
        if !v.examples.is_empty() {
            writeln!(f, "    lost: {:?}", v.examples)?;
        }
        Ok(())
    }
}
