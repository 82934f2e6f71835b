//! What torture runs measured ([`Figures`]), summed over runs, and the
//! summary line `cargo xtask torture` prints (RELIABILITY.md quotes it).

use std::collections::BTreeMap;
use std::time::Duration;

use spool_core::seams::HAND_OFF_POINTS;

use crate::{disk, ENGINE_TIMEOUT, OVERRUN_BOUND, STOP_BOUND};

/// The figures of runs, summed.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Runs done.
    pub runs: u64,
    /// SIGKILLs sent by the scheduler.
    pub kills_random: u64,
    /// Processes that killed themselves at an armed kill point.
    pub kills_at_points: u64,
    /// Fault windows opened (none in the crash torture; the fault
    /// torture's), by kind in `faults_by`.
    pub faults: u64,
    /// Fault windows by kind (`faults::KINDS`), per server.
    pub faults_by: BTreeMap<String, u64>,
    /// Requests the fault proxies hit, by what was done to them.
    pub requests_hit: BTreeMap<String, u64>,
    /// Engine closes timed (last durable pack to exit) and the longest.
    pub closes: u64,
    /// The longest engine close, from its last durable pack to its exit.
    pub longest_close: Duration,
    /// How far the longest close went past its deadline (`--timeout`).
    pub longest_overrun: Duration,
    /// Stops timed (SIGTERM to exit, daemons and holders) and the longest.
    pub stops: u64,
    /// The longest SIGTERM-to-exit.
    pub longest_stop: Duration,
    /// Packs producers reported durable.
    pub packs: u64,
    /// Reported packs missing, damaged or unindexed at the end.
    pub lost: u64,
    /// Packs stored or indexed more than once.
    pub duplicates: u64,
    /// Changes to a live owner's directory by someone else.
    pub live_touched: u64,
    /// Catalog rows read while their object was not in the store yet.
    pub rows_before_object: u64,
    /// Objects made by a producer killed before it reported them (fine).
    pub unreported: u64,
    /// Bundles no row named at the end of a run (a crash between a
    /// bundle's PUT and its index), each then deleted by the sweep.
    pub orphan_bundles: u64,
    /// Bytes no row pointed to at the end of a run (orphan bundles, packs
    /// alone superseded by a later copy).
    pub orphaned_bytes: u64,
    /// Deaths at each kill point.
    pub points: BTreeMap<String, u64>,
    /// Adoptions of a dead owner's directory seen past their sweep (the
    /// adopter removed a ready pack; [`opens`]): each had to leave no
    /// `.open` behind.
    pub adoptions_swept: u64,
    /// Packs seen released by a live sink-only owner once the node's
    /// shipper confirmed them (the hand-off done end to end).
    pub handed_off: u64,
    /// Of those, the ones seen while a fault window was open.
    pub handed_off_in_faults: u64,
    /// Refs (consents) seen published by live owners.
    pub refs_published: u64,
    /// Of those, the ones seen while a fault window was open.
    pub refs_in_faults: u64,
    /// Daemons that latched and exited 7 (fault runs only): a lease holder
    /// whose renewals the faults cut was deposed, and a foreign lease
    /// outlived 2 × TTL. Restarted like any dead daemon.
    pub latched: u64,
    /// Entries planted in the spool root (links to a victim outside it,
    /// FIFOs, files where a directory belongs).
    pub plants: u64,
    /// `--disk`: the full-disk and read-only figures.
    pub disk: Option<disk::DiskFigures>,
}

impl Figures {
    /// Adds another run's figures.
    pub fn add(&mut self, o: &Figures) {
        self.runs += o.runs;
        self.kills_random += o.kills_random;
        self.kills_at_points += o.kills_at_points;
        self.faults += o.faults;
        self.packs += o.packs;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.live_touched += o.live_touched;
        self.rows_before_object += o.rows_before_object;
        self.unreported += o.unreported;
        self.orphan_bundles += o.orphan_bundles;
        self.orphaned_bytes += o.orphaned_bytes;
        self.latched += o.latched;
        self.plants += o.plants;
        self.adoptions_swept += o.adoptions_swept;
        self.handed_off += o.handed_off;
        self.handed_off_in_faults += o.handed_off_in_faults;
        self.refs_published += o.refs_published;
        self.refs_in_faults += o.refs_in_faults;
        if let Some(d) = &o.disk {
            self.disk.get_or_insert_with(Default::default).add(d);
        }
        for (k, n) in &o.points {
            *self.points.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.faults_by {
            *self.faults_by.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.requests_hit {
            *self.requests_hit.entry(k.clone()).or_default() += n;
        }
        self.closes += o.closes;
        self.stops += o.stops;
        self.longest_close = self.longest_close.max(o.longest_close);
        self.longest_overrun = self.longest_overrun.max(o.longest_overrun);
        self.longest_stop = self.longest_stop.max(o.longest_stop);
    }

    /// The summary line.
    pub fn line(&self) -> String {
        let points: Vec<String> = self
            .points
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let by = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let faults = if self.faults == 0 {
            "0".to_string()
        } else {
            format!(
                "{} ({}; requests hit: {})",
                self.faults,
                by(&self.faults_by),
                by(&self.requests_hit)
            )
        };
        // the hand-off's points, each said even when not reached
        let hand_off: Vec<String> = HAND_OFF_POINTS
            .iter()
            .map(|p| format!("{p} {}", self.points.get(*p).copied().unwrap_or(0)))
            .collect();
        let disk = self
            .disk
            .as_ref()
            .map_or(String::new(), |d| format!(" {}", d.line()));
        format!(
            "runs {} kills {} (random {}, at kill points {}: {}) faults {}{disk} packs {} lost {} duplicates {} live_touched {} rows_before_object {} (unreported objects {}) orphan_bundles {} swept, orphaned_bytes {} adoptions_swept {} plants {} (victim unchanged unless a problem says so) hand_off (refs published {}, {} in a fault window; packs released once confirmed {}, {} in a fault window; kill points: {}) latched {} longest_flush_overrun {:.2} s (longest engine close {:.2} s of {}, deadline {ENGINE_TIMEOUT} s, bound +{} s) longest_stop {:.2} s (of {}, bound {} s)",
            self.runs,
            self.kills_random + self.kills_at_points,
            self.kills_random,
            self.kills_at_points,
            points.join(", "),
            faults,
            self.packs,
            self.lost,
            self.duplicates,
            self.live_touched,
            self.rows_before_object,
            self.unreported,
            self.orphan_bundles,
            self.orphaned_bytes,
            self.adoptions_swept,
            self.plants,
            self.refs_published,
            self.refs_in_faults,
            self.handed_off,
            self.handed_off_in_faults,
            hand_off.join(", "),
            self.latched,
            self.longest_overrun.as_secs_f64(),
            self.longest_close.as_secs_f64(),
            self.closes,
            OVERRUN_BOUND.as_secs(),
            self.longest_stop.as_secs_f64(),
            self.stops,
            STOP_BOUND.as_secs()
        )
    }
}
