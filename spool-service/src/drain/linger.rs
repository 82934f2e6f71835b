//! The bundle linger: a run of small packs waits until a bundle's worth is
//! ready or its oldest pack has waited `upload.bundle_linger` (the drain's
//! module docs, "Bundles").

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use spool_core::PackId;
use spool_upload::Uploader;

use super::Job;

/// What waits for a bundle to fill: the packs, their bytes, and how long
/// the oldest has waited (the snapshot's `open_bundle`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenBundle {
    /// Packs waiting.
    pub packs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How long the oldest has waited (counted to when the snapshot was
    /// taken).
    pub age: Duration,
    /// When the oldest was first seen; `None` when nothing waits.
    pub since: Option<Instant>,
}

impl OpenBundle {
    /// This open bundle with its age counted to now: a service waiting out
    /// a linger takes no cycle, so its last cycle's age would stand still.
    pub(crate) fn aged_now(self) -> OpenBundle {
        match self.since {
            Some(t) => OpenBundle {
                age: t.elapsed(),
                ..self
            },
            None => self,
        }
    }
}

/// One stream of runs' linger (the service's own packs, or the hand-off's):
/// when each waiting pack was first seen, and when the wait ends.
#[derive(Debug, Default)]
pub(crate) struct Linger {
    since: HashMap<PackId, Instant>,
    due: Option<Instant>,
    open: OpenBundle,
}

impl Linger {
    /// Whether the run of `jobs` should wait for more packs to share its
    /// bundle: every job is a pack not yet uploaded that `uploader` would
    /// bundle, together fewer than `bundle_bytes`, and the oldest (by when
    /// this stream first saw it) has waited less than `bundle_linger`.
    /// Then [`Linger::due`] says until when.
    pub(crate) fn hold(&mut self, jobs: &[Job], uploader: &Uploader, now: Instant) -> bool {
        let ids: HashSet<PackId> = jobs.iter().map(|j| j.pack().id).collect();
        self.since.retain(|id, _| ids.contains(id));
        for id in ids {
            self.since.entry(id).or_insert(now);
        }
        self.due = None;
        self.open = OpenBundle::default();
        let cfg = uploader.config();
        let small = |j: &Job| j.row().is_none() && uploader.bundles(j.pack().bytes);
        if jobs.is_empty() || cfg.bundle_linger.is_zero() || !jobs.iter().all(small) {
            return false;
        }
        let bytes: u64 = jobs.iter().map(|j| j.pack().bytes).sum();
        let oldest = self.since.values().min().copied().unwrap_or(now);
        let due = oldest + cfg.bundle_linger;
        if bytes >= cfg.bundle_limit() || now >= due {
            return false;
        }
        self.due = Some(due);
        self.open = OpenBundle {
            packs: jobs.len() as u64,
            bytes,
            age: now.saturating_duration_since(oldest),
            since: Some(oldest),
        };
        true
    }

    /// When the wait [`Linger::hold`] asked for ends.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// What waits now.
    pub(crate) fn open(&self) -> OpenBundle {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot taken while a bundle lingers shows the wait so far, not
    /// the one of the cycle that started the linger.
    #[test]
    fn an_open_bundle_ages_to_when_it_is_read() {
        let since = Instant::now() - Duration::from_millis(500);
        let open = OpenBundle {
            packs: 3,
            bytes: 3 << 14,
            age: Duration::ZERO,
            since: Some(since),
        };
        let aged = open.aged_now();
        assert!(aged.age >= Duration::from_millis(500), "{aged:?}");
        assert_eq!(
            (aged.packs, aged.bytes, aged.since),
            (3, 3 << 14, Some(since))
        );
        assert_eq!(OpenBundle::default().aged_now(), OpenBundle::default());
    }
}
