//! Deadlines and cancels for every catalog and store call.
//!
//! A [`Bound`] is what every call the service makes to its catalog or its
//! store runs under: the enclosing deadline (a flush's, or the loop's) and a
//! cancel (stop's, or a flush cutting the loop). [`Bound::run`] races the
//! call against both, so no sequence of per-statement timeouts (the
//! catalog's `request_timeout`) can outlast the deadline, and a stop cuts
//! a call in flight at once. A cut call's future is dropped: an index
//! statement the server may still finish is harmless (re-indexing leaves
//! one row as read), and its packs stay owed.
//!
//! [`InFlight`] is the one slot that says what the service waits on right
//! now (`catalog X: indexing 4 pack(s), for 12 s`), so a timeout message or
//! a snapshot can name the cause even before the call fails.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spool_upload::CancellationToken;

/// The deadline and cancel one call runs under.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    /// When the enclosing work (a flush, a cycle) must be over.
    pub(crate) deadline: Instant,
    /// Stop's cancel (or a flush's cut of the loop).
    pub(crate) cancel: CancellationToken,
}

/// Why a bounded call did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The enclosing deadline passed after waiting this long.
    Deadline(Duration),
    /// Stop (or a flush) cancelled it.
    Cancelled,
}

impl Bound {
    /// A bound with this deadline under `cancel`.
    pub(crate) fn new(deadline: Instant, cancel: CancellationToken) -> Bound {
        Bound { deadline, cancel }
    }

    /// Runs `fut` until it finishes, the deadline passes or the cancel
    /// fires, whichever is first.
    pub(crate) async fn run<T>(&self, fut: impl Future<Output = T>) -> Result<T, Cut> {
        let started = Instant::now();
        if self.cancel.is_cancelled() {
            return Err(if started >= self.deadline {
                Cut::Deadline(Duration::ZERO)
            } else {
                Cut::Cancelled
            });
        }
        let dl = tokio::time::Instant::from_std(self.deadline);
        tokio::select! {
            biased;
            // a cancel fired by the deadline's own watcher is the deadline
            _ = self.cancel.cancelled() => Err(if Instant::now() >= self.deadline {
                Cut::Deadline(started.elapsed())
            } else {
                Cut::Cancelled
            }),
            v = fut => Ok(v),
            _ = tokio::time::sleep_until(dl) => Err(Cut::Deadline(started.elapsed())),
        }
    }
}

/// A duration as messages spell it: `30 s`, `1.5 s`, `250 ms`.
pub(crate) fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// What the service is waiting on now, shared with the snapshot.
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<Option<(String, Instant)>>>);

impl InFlight {
    /// Says what is waited on since when (`None`: nothing), for a caller
    /// with several calls in flight that picks the one to show.
    pub(crate) fn set(&self, what: Option<(String, Instant)>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = what;
    }

    /// `what, for N s` when a call has been waiting at least `min`.
    pub(crate) fn describe(&self, min: Duration) -> Option<String> {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (what, since) = g.as_ref()?;
        let waited = since.elapsed();
        (waited >= min).then(|| format!("{what}, waiting for {}", human(waited)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stalled_call_is_cut_by_the_deadline_and_by_the_cancel() {
        let cancel = CancellationToken::new();
        let b = Bound::new(Instant::now() + Duration::from_millis(100), cancel.clone());
        let t = Instant::now();
        let r = b.run(std::future::pending::<()>()).await;
        assert!(matches!(r, Err(Cut::Deadline(_))), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(1));
        let b = Bound::new(Instant::now() + Duration::from_secs(3600), cancel.clone());
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c2.cancel();
        });
        assert_eq!(
            b.run(std::future::pending::<()>()).await,
            Err(Cut::Cancelled)
        );
        assert_eq!(b.run(async { 1 }).await, Err(Cut::Cancelled));
    }

    #[test]
    fn durations_read_like_an_operator_writes_them() {
        assert_eq!(human(Duration::from_secs(30)), "30 s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
    }
}
