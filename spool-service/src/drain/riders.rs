//! Riders: the packs a stream's bundle linger holds back go along in any
//! other run of the same cycle, so the node's packs share bundles (the
//! pipeline's module docs, "Bundles").
//!
//! A cycle runs its streams one after another: the service's own packs,
//! the hand-off's (every live owner's together), then an adoption step.
//! When a stream's linger holds its run, the stream parks the jobs it
//! would have run ([`Drain::park`](super::Drain::park)); the next run of
//! the cycle, whoever's it is, takes them in front of its own, so they
//! fill its first bundle. The outcomes of the packs a run carried go back
//! to their stream at the end of the cycle
//! ([`Drain::end_cycle`](super::Drain::end_cycle)), which also drops the
//! riders no run took: every stream lists its packs afresh each cycle, so
//! a rider never outlives the listing it came from.

use std::collections::{HashMap, HashSet};

use spool_core::PackId;

use super::{Job, PackOutcome};

/// Which stream's linger held a run back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    /// The service's own packs.
    Own,
    /// The hand-off's: every live owner's packs together.
    HandOff,
}

/// A pack another stream's run carried, and how it ended.
pub(crate) type Carried = (Stream, Job, PackOutcome);

/// The riders of this cycle: parked, on board a run, or carried.
#[derive(Default)]
pub(super) struct Riders {
    parked: Vec<(Stream, Job)>,
    riding: HashMap<PackId, Stream>,
    carried: Vec<Carried>,
}

impl Riders {
    /// Parks `jobs`, a run of `stream` its linger holds back (replacing
    /// what `stream` parked before).
    pub(super) fn park(&mut self, stream: Stream, jobs: Vec<Job>) {
        self.parked.retain(|(s, _)| *s != stream);
        self.parked.extend(jobs.into_iter().map(|j| (stream, j)));
    }

    /// The run of `jobs` with every parked job (of another pack) in front.
    pub(super) fn board(&mut self, jobs: Vec<Job>) -> Vec<Job> {
        let mine: HashSet<PackId> = jobs.iter().map(|j| j.pack().id).collect();
        let mut all = Vec::with_capacity(self.parked.len() + jobs.len());
        for (stream, job) in std::mem::take(&mut self.parked) {
            if !mine.contains(&job.pack().id) {
                self.riding.insert(job.pack().id, stream);
                all.push(job);
            }
        }
        all.extend(jobs);
        all
    }

    /// The outcomes of a boarded run's own jobs; the riders' are kept for
    /// [`Riders::end_cycle`].
    pub(super) fn alight(&mut self, done: Vec<(Job, PackOutcome)>) -> Vec<(Job, PackOutcome)> {
        let mut out = Vec::with_capacity(done.len());
        for (job, outcome) in done {
            match self.riding.remove(&job.pack().id) {
                Some(stream) => self.carried.push((stream, job, outcome)),
                None => out.push((job, outcome)),
            }
        }
        out
    }

    /// Drops the riders no run took and returns what became of those a
    /// run carried.
    pub(super) fn end_cycle(&mut self) -> Vec<Carried> {
        self.parked.clear();
        self.riding.clear();
        std::mem::take(&mut self.carried)
    }
}
