//! The owner's side of the hand-off at rest: a thread that removes the
//! consented packs the node's shipper confirmed as soon as it confirms
//! them, woken by the kernel (a [`DirWatch`] on the owner's confirmations
//! directory), not by polling. A look every [`BACKSTOP`] covers a
//! confirmation the watch could not see (it could not be set up, or its
//! queue overflowed).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use spool_lock::{DirWatch, WatchWaker};

use super::target::StageTarget;
use crate::handoff::{confirmations_dir, remove_empty_confirmations};
use crate::Error;

/// How long the thread sleeps between looks when nothing wakes it.
const BACKSTOP: Duration = Duration::from_secs(1);

/// The running confirmations thread of one sink.
pub(super) struct Confirmations {
    stop: Arc<AtomicBool>,
    waker: Option<WatchWaker>,
    thread: JoinHandle<()>,
}

impl Confirmations {
    /// Starts watching the confirmations of `target`'s directory.
    pub(super) fn start(target: Arc<dyn StageTarget>) -> Result<Confirmations, Error> {
        let dir = confirmations_dir(target.dir());
        let watch = match target.prepare_confirmations().and_then(|d| watch(&d)) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %target.dir().display(), "cannot watch {} for confirmations (looked at every {BACKSTOP:?} instead): {e}", dir.display());
                None
            }
        };
        let waker = watch.as_ref().map(DirWatch::waker);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("spool-confirmations".into())
            .spawn(move || run(&*target, watch, &flag))
            .map_err(|source| Error::SinkThread {
                dir: dir.clone(),
                source,
            })?;
        Ok(Confirmations {
            stop,
            waker,
            thread,
        })
    }

    /// Stops the thread and waits for it: no removal happens after this
    /// returns (the claim may be let go). An empty confirmations directory
    /// (and an empty `_shipped`) goes with it.
    pub(super) fn stop(self, dir: &Path) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(w) = &self.waker {
            w.wake();
        }
        let _ = self.thread.join();
        remove_empty_confirmations(dir);
    }
}

fn watch(dir: &Path) -> Result<DirWatch, Error> {
    let mut w = DirWatch::new()?;
    w.watch(dir)?;
    Ok(w)
}

fn run(target: &dyn StageTarget, mut watch: Option<DirWatch>, stop: &AtomicBool) {
    let mut reported = false;
    while !stop.load(Ordering::SeqCst) {
        match target.release_confirmed() {
            Ok(n) if n > 0 => {
                tracing::debug!(dir = %target.dir().display(), "removed {n} pack(s) the shipper confirmed");
                reported = false;
            }
            Ok(_) => reported = false,
            Err(e) if !reported => {
                tracing::warn!(dir = %target.dir().display(), "removing confirmed packs failed (tried again): {e}");
                reported = true;
            }
            Err(_) => {}
        }
        match watch.as_mut() {
            Some(w) => {
                if let Err(e) = w.wait(BACKSTOP) {
                    tracing::warn!(dir = %target.dir().display(), "watching for confirmations failed (looked at every {BACKSTOP:?} instead): {e}");
                    watch = None;
                }
            }
            None => std::thread::sleep(BACKSTOP),
        }
    }
}
