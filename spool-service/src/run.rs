//! A run's lifecycle: an [`Engine`] that ships itself, driven until a
//! condition, ending in a typed [`RunEnd`] with a [`RunReport`] of what is
//! left and why. `spool run` (the daemon, and `--once`) and Python's
//! `Engine.run` both call [`Engine::run`]: when a run is drained, who else
//! ships the dead siblings, and what a stop leaves behind are decided here,
//! once; a caller only presents the looks and the report.
//!
//! # When a run ends
//!
//! The run looks each time the service publishes a snapshot (the end of
//! every cycle) and at least every 100 ms, and ends, in this order of
//! precedence, when:
//!
//! 1. the lease latched (a foreign lease outlived 2 × TTL): [`RunEnd::Latched`];
//! 2. the service loop panicked: [`RunEnd::LoopFailed`];
//! 3. until drained ([`RunPlan::until_drained`]), once the service has
//!    published a snapshot: no own ready pack, nothing owed to the
//!    catalog and no adoption owed: [`RunEnd::Drained`], or
//!    [`RunEnd::Blocked`] when siblings were found blocked;
//! 4. until drained, in node lease scope, the own directory drained while
//!    another live service holds the node lease (that service
//!    adopts the dead siblings): [`RunEnd::LeftToShipper`]; with
//!    [`RunPlan::wait_for_siblings`], [`RunEnd::Drained`] once no ready pack
//!    is left in a dead rank directory or one that service adopts;
//! 5. until drained, the store or catalog refuses the destination for good
//!    (credentials, a missing bucket): [`RunEnd::Refused`] at once, rather
//!    than waiting out the deadline;
//! 6. the deadline passed: [`RunEnd::Deadline`];
//! 7. the caller asked it to stop (a signal): [`RunEnd::Stopped`], after a
//!    flush bounded by the plan's stop flush timeout.
//!
//! Then the engine closes (every adopted sibling let go whole, the claim
//! released), and the report is taken from the last snapshot and a
//! read-only walk of the spool root ([`spool_core::backlog`]).
//!
//! # Another live service
//!
//! The node lease names its holder. A holder on this host is another
//! *live* service only while its own rank directory's owner lock is held
//! (the product's one liveness rule): a SIGKILLed holder leaves a lease that
//! runs out within its TTL, and the run waits for that and adopts. The lock
//! is probed twice 50 ms apart, since this process's own adoption probes
//! hold a directory's lock for an instant. A holder on another host cannot
//! be probed: its lease is taken at its word. In catalog scope nothing
//! moves without the lease, so a foreign holder there ends in the latch.
//!
//! # The report never claims more than is true
//!
//! Every end's message names what is left where: ready packs in rank
//! directories of this catalog key, packs uploaded but still owed their
//! catalog rows (a stop cut short by a long `index_linger`), packs under the
//! spool root's other catalog keys (another destination's, which this run
//! never ships: "drained" beside them says so), blocked siblings and why.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use spool_catalog::{LeaseHolder, LeaseScope};
use spool_core::backlog::Backlog;
use spool_core::siblings::{self, Owner};
use spool_lock::Purpose;

use crate::config::Value;
use crate::{CloseReport, Engine, Error, Snapshot};

/// How long a run waits between looks at most (a stop, the deadline and the
/// caller's progress are seen this soon).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How often a run until drained walks the disk for what is owed.
const BACKLOG_EVERY: Duration = Duration::from_millis(500);

/// When a run ends: until the caller stops it (the daemon), or until
/// drained within a deadline (`spool run --once`).
#[derive(Debug, Clone)]
pub struct RunPlan {
    until_drained: bool,
    deadline: Option<Duration>,
    wait_for_siblings: bool,
    stop_flush_timeout: Duration,
}

impl RunPlan {
    /// Runs until the caller stops it; then flushes within
    /// `stop_flush_timeout` and closes.
    pub fn until_stopped(stop_flush_timeout: Duration) -> RunPlan {
        RunPlan {
            until_drained: false,
            deadline: None,
            wait_for_siblings: false,
            stop_flush_timeout,
        }
    }

    /// Runs until the own directory and every adoptable sibling are
    /// drained, `deadline` passes, or the caller stops it.
    pub fn until_drained(deadline: Duration, stop_flush_timeout: Duration) -> RunPlan {
        RunPlan {
            until_drained: true,
            deadline: Some(deadline),
            wait_for_siblings: false,
            stop_flush_timeout,
        }
    }

    /// Until drained, while another live service holds the node's adopter
    /// lease: wait (within the deadline) until it shipped the dead
    /// siblings too, instead of ending once the own directory is drained.
    pub fn wait_for_siblings(mut self, wait: bool) -> RunPlan {
        self.wait_for_siblings = wait;
        self
    }

    /// The plan ends once drained.
    pub fn is_until_drained(&self) -> bool {
        self.until_drained
    }
}

/// What the run saw at one look, for the caller's progress and health.
#[derive(Debug)]
pub struct Look<'a> {
    snapshot: &'a Snapshot,
    owed: Option<u64>,
    other_shipper: Option<&'a LeaseHolder>,
}

impl Look<'_> {
    /// The service's snapshot.
    pub fn snapshot(&self) -> &Snapshot {
        self.snapshot
    }

    /// Until drained: the ready packs still on disk in the own directory
    /// and in dead, unblocked rank directories of the catalog key (walked at
    /// most every 500 ms). `None` for a run until stopped.
    pub fn owed_packs(&self) -> Option<u64> {
        self.owed
    }

    /// Another live service holding the node lease (node scope),
    /// which adopts the dead siblings instead of this run.
    pub fn other_shipper(&self) -> Option<&LeaseHolder> {
        self.other_shipper
    }
}

/// Why a run ended (the module doc says when each happens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The own directory and every adoptable sibling drained.
    Drained,
    /// Drained, but siblings were found blocked ([`RunReport::blocked`]):
    /// their packs stay until a person acts.
    Blocked,
    /// The own directory drained; another live service holds the node's
    /// node lease and ships the dead siblings.
    LeftToShipper(LeaseHolder),
    /// The deadline (the duration) passed before the run drained.
    Deadline(Duration),
    /// The store or catalog refuses the destination for good: what it said.
    Refused(String),
    /// The lease latched: lease-gated work stopped for good.
    Latched,
    /// The service loop panicked: the message.
    LoopFailed(String),
    /// The caller stopped the run (the cause, e.g. `SIGTERM`).
    Stopped(String),
}

/// What a run did and what it left: [`Engine::run`]'s result.
#[derive(Debug)]
pub struct RunReport {
    end: RunEnd,
    snapshot: Snapshot,
    left: Backlog,
    elsewhere: Backlog,
    blocked: Vec<(PathBuf, String)>,
    lease_scope: LeaseScope,
    close: CloseReport,
    elapsed: Duration,
}

impl RunReport {
    /// Why the run ended.
    pub fn end(&self) -> &RunEnd {
        &self.end
    }

    /// The service's last snapshot, taken before the engine closed.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Ready packs left in rank directories of this catalog key that no
    /// other live process owns (after the close).
    pub fn left(&self) -> &Backlog {
        &self.left
    }

    /// Ready packs under the spool root's other catalog keys: another
    /// destination's, never shipped by this run.
    pub fn elsewhere(&self) -> &Backlog {
        &self.elsewhere
    }

    /// Blocked siblings and why (from their owner records).
    pub fn blocked(&self) -> &[(PathBuf, String)] {
        &self.blocked
    }

    /// How the engine closed.
    pub fn close(&self) -> &CloseReport {
        &self.close
    }

    /// How long the run took, close included.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// One paragraph saying how the run ended, what it shipped and what it
    /// left where, and what to do about it.
    pub fn message(&self) -> String {
        let s = &self.snapshot;
        let by_run = format!("{} pack(s) uploaded and indexed by this run", s.indexed);
        let mut text = match &self.end {
            RunEnd::Drained => format!(
                "drained: {} pack(s) uploaded and indexed, {} sibling director{} adopted, {} live \
                 sibling(s) left alone",
                s.indexed,
                s.adopted_spools,
                if s.adopted_spools == 1 { "y" } else { "ies" },
                s.live_siblings
            ),
            RunEnd::Blocked => {
                let list: Vec<String> = self
                    .blocked
                    .iter()
                    .map(|(d, why)| format!("{}: {why}", d.display()))
                    .collect();
                format!(
                    "{} sibling director{} blocked; their packs stay where they are until a \
                     person acts: {}. Fix the cause, then `spool unblock DIR` and run again \
                     ({by_run})",
                    list.len(),
                    if list.len() == 1 { "y is" } else { "ies are" },
                    list.join("; ")
                )
            }
            RunEnd::LeftToShipper(h) => format!(
                "own directory drained: {by_run}; the node lease is held by {h}, which \
                 adopts the dead siblings ({})",
                self.left_in_dead_dirs()
            ),
            RunEnd::Deadline(d) => format!(
                "not drained within {}: {} own ready pack(s) not uploaded, {} pack(s) uploaded \
                 but not indexed (owed to the catalog), adoption {}; {}; {by_run}; {}{}. \
                 Nothing is lost: the packs stay in their spool directories for the next run",
                Value::Secs(*d),
                s.deferred,
                s.pending_index,
                if s.adoption_owed { "owed" } else { "not owed" },
                self.left_in_dead_dirs(),
                cause(s),
                match (&self.lease_scope, &s.lease_holder) {
                    (LeaseScope::Node, Some(h)) if !s.lease_held =>
                        format!("; the node lease is held by {h}"),
                    _ => String::new(),
                }
            ),
            RunEnd::Refused(why) => format!(
                "the destination refuses this run: {why}. Fix the credentials, bucket or \
                 database it names, then run again; nothing is lost: {}; {by_run}",
                self.left_in_dead_dirs()
            ),
            RunEnd::LoopFailed(why) => format!(
                "{why}: stopped after letting go of every adopted sibling ({by_run}); nothing is \
                 lost, the packs stay in their spool directories. Restart spool run (exit code \
                 10 tells a supervisor to)"
            ),
            RunEnd::Latched => format!(
                "lease lost (latched): a foreign lease{} outlived 2 x TTL, so this process \
                 stopped all lease-gated work and let go of every sibling it was adopting; find \
                 the other writer (lease scope {:?}), then run again",
                s.lease_holder
                    .as_ref()
                    .map(|h| format!(" held by {h}"))
                    .unwrap_or_default(),
                self.lease_scope
            ),
            RunEnd::Stopped(cause) => {
                let owed = if s.pending_index > 0 {
                    format!(
                        "{} pack(s) uploaded but still owed their catalog rows (the next run \
                         indexes them); ",
                        s.pending_index
                    )
                } else {
                    String::new()
                };
                let left = if self.left.packs() == 0 && s.pending_index == 0 {
                    "nothing left to drain".to_string()
                } else {
                    format!("{owed}{}, kept for the next run", self.left_in_dead_dirs())
                };
                format!("{cause}: stopped; {by_run}; {left}")
            }
        };
        if self.elsewhere.packs() > 0 {
            text.push_str(&format!(
                ". Not this run's destination: {} ready pack(s) under {} other catalog key(s) of \
                 this spool root ({}), shipped only by a run configured with their store and \
                 catalog",
                self.elsewhere.packs(),
                self.elsewhere.dirs().len(),
                self.elsewhere
                    .dirs()
                    .iter()
                    .map(|(d, n)| format!("{} ({n})", d.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        text
    }

    fn left_in_dead_dirs(&self) -> String {
        if self.left.packs() == 0 {
            "no ready pack left in a dead rank directory".into()
        } else {
            self.left
                .describe()
                .replacen(" director", " rank director", 1)
        }
    }
}

impl Engine {
    /// Runs this engine's service until `plan` says the run ended (the
    /// module doc says when), then closes the engine and reports. `look` is
    /// called at every look (at least every 100 ms) with what the run saw;
    /// it returns `Some(cause)` to stop the run (a signal's name).
    ///
    /// Refused ([`Error::InvalidConfig`]) for an engine whose packs the
    /// node's daemon ships ([`crate::Ship::Daemon`]): it has no service to
    /// run.
    pub fn run(
        self,
        plan: &RunPlan,
        mut look: impl FnMut(&Look<'_>) -> Option<String>,
    ) -> Result<RunReport, Error> {
        let started = Instant::now();
        let Some(svc) = self.service() else {
            return Err(Error::InvalidConfig {
                why: format!(
                    "the engine on {} hands its packs to the node's daemon (service.ship = \
                     \"daemon\"): it has no service to run; the daemon (`spool run`) ships itself",
                    self.dir().display()
                ),
            });
        };
        let own = self.dir().to_path_buf();
        let key_dir = own.parent().unwrap_or(Path::new("/")).to_path_buf();
        let node_scope = self.lease_scope() == LeaseScope::Node;
        // Snapshots the service has published (one per cycle): until one
        // has, the snapshot is that of a service that has looked at nothing.
        if plan.until_drained {
            svc.skip_bundle_linger();
        }
        let mut published = 0;
        let mut owed: Option<(Instant, u64)> = None;
        let mut stop: Option<String> = None;
        let end = loop {
            let snap = svc.snapshot();
            let other = if node_scope {
                other_shipper(&snap)
            } else {
                None
            };
            if plan.until_drained && owed.is_none_or(|(at, _)| at.elapsed() >= BACKLOG_EVERY) {
                owed = Some((Instant::now(), Backlog::scan(&key_dir, &own, false).packs()));
            }
            if let Some(cause) = look(&Look {
                snapshot: &snap,
                owed: owed.map(|(_, n)| n),
                other_shipper: other.as_ref(),
            }) {
                stop.get_or_insert(cause);
            }
            // the caller saw the last state (its /metrics, /healthz) first
            if snap.latched {
                break RunEnd::Latched;
            }
            if let Some(why) = &snap.loop_failed {
                break RunEnd::LoopFailed(why.clone());
            }
            let looked = published > 0;
            if plan.until_drained && looked {
                if own_drained(&snap) && !snap.adoption_owed {
                    break if snap.blocked_siblings.is_empty() {
                        RunEnd::Drained
                    } else {
                        RunEnd::Blocked
                    };
                }
                // Siblings only the lease holder may adopt are not owed to
                // this run.
                if let (true, Some(h)) = (own_drained(&snap), &other) {
                    if !plan.wait_for_siblings {
                        break RunEnd::LeftToShipper(h.clone());
                    }
                    if Backlog::scan(&key_dir, &own, true).packs() == 0 {
                        break RunEnd::Drained;
                    }
                }
                if let Some(why) = &snap.destination_refused {
                    break RunEnd::Refused(why.clone());
                }
            }
            if let Some(d) = plan.deadline.filter(|d| started.elapsed() >= *d) {
                break RunEnd::Deadline(d);
            }
            if let Some(cause) = stop.take() {
                break RunEnd::Stopped(cause);
            }
            // Woken at the end of each cycle, so a drain is seen the moment
            // it is done; at the latest after 100 ms.
            published = svc.wait_published(published, LOOK_EVERY);
        };
        if let RunEnd::Stopped(cause) = &end {
            tracing::info!(dir = %own.display(), "{cause}: flushing (at most {:?}) and stopping", plan.stop_flush_timeout);
            if let Err(e) = self.flush(plan.stop_flush_timeout) {
                tracing::warn!(dir = %own.display(), "last flush before the stop: {e}");
            }
        }
        let snapshot = svc.snapshot();
        let lease_scope = self.lease_scope();
        let close = self.close();
        for p in &close.problems {
            tracing::warn!(dir = %close.dir.display(), "closing {}: {p}", close.dir.display());
        }
        let adopting = matches!(end, RunEnd::LeftToShipper(_));
        let own_key = key_dir
            .file_name()
            .and_then(|k| k.to_str())
            .unwrap_or_default()
            .to_owned();
        let root = key_dir.parent().unwrap_or(Path::new("/"));
        Ok(RunReport {
            blocked: snapshot
                .blocked_siblings
                .iter()
                .map(|d| (d.clone(), blocked_reason(d)))
                .collect(),
            end,
            snapshot,
            left: Backlog::scan(&key_dir, &own, adopting),
            elsewhere: Backlog::elsewhere(root, &own_key),
            lease_scope,
            close,
            elapsed: started.elapsed(),
        })
    }
}

/// No own ready pack left and nothing owed to the catalog.
fn own_drained(s: &Snapshot) -> bool {
    s.deferred == 0 && s.pending_index == 0
}

/// What the service last failed on and what it waits for: never "last
/// error: none" while a call is in flight.
fn cause(s: &Snapshot) -> String {
    match (&s.last_error, &s.waiting_on) {
        (Some(e), Some(w)) => format!("last error: {e}; waiting on: {w}"),
        (Some(e), None) => format!("last error: {e}"),
        (None, Some(w)) => format!("waiting on: {w}"),
        (None, None) => "no store or catalog call failed or was in flight".into(),
    }
}

/// Another live service holds the node lease (this one does not): the
/// module doc's liveness rule.
fn other_shipper(s: &Snapshot) -> Option<LeaseHolder> {
    if s.lease_held {
        return None;
    }
    let holder = s.lease_holder.clone()?;
    if let (Some(dir), true) = (holder.dir(), holder.host() == spool_lock::host_name()) {
        let live = || siblings::probe(Path::new(dir)).is_ok_and(|p| p.owner() == Owner::Live);
        if !(live() && {
            std::thread::sleep(Duration::from_millis(50));
            live()
        }) {
            return None;
        }
    }
    Some(holder)
}

/// Why a blocked sibling is blocked, from its owner record.
fn blocked_reason(dir: &Path) -> String {
    spool_lock::read_owner(dir)
        .ok()
        .and_then(|o| o.record)
        .and_then(|r| match r.purpose {
            Purpose::Blocked(why) => Some(why),
            _ => None,
        })
        .unwrap_or_else(|| "see the service's last error".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(end: RunEnd, snapshot: Snapshot) -> RunReport {
        RunReport {
            end,
            snapshot,
            left: Backlog::default(),
            elsewhere: Backlog::default(),
            blocked: Vec::new(),
            lease_scope: LeaseScope::Node,
            close: CloseReport {
                dir: PathBuf::from("/spool/k/r0-00000001"),
                sealed: true,
                drained: false,
                removed: false,
                claim_kept: false,
                problems: Vec::new(),
            },
            elapsed: Duration::ZERO,
        }
    }

    /// A stop cut short while uploaded packs wait for their rows (a long
    /// `index_linger`) says so, never "nothing left to drain".
    #[test]
    fn a_stop_with_rows_owed_does_not_say_nothing_is_left() {
        let owed = Snapshot {
            indexed: 2,
            pending_index: 3,
            ..Snapshot::default()
        };
        let m = report(RunEnd::Stopped("SIGTERM".into()), owed).message();
        assert!(
            m.starts_with("SIGTERM: stopped; 2 pack(s) uploaded and indexed by this run; 3 pack(s) uploaded but still owed their catalog rows"),
            "{m}"
        );
        assert!(!m.contains("nothing left"), "{m}");
        let m = report(RunEnd::Stopped("SIGTERM".into()), Snapshot::default()).message();
        assert!(m.ends_with("nothing left to drain"), "{m}");
    }
}
