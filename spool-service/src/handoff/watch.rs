//! The shipper's wake-ups: a thread that watches the catalog key directory
//! (a new owner appears) and each served owner's `_refs/` (a pack is
//! consented), and marks what changed dirty in the process's registry, so
//! the service loop learns of a consented pack without waiting for its
//! poll interval. An owner whose `_refs/` does not exist yet is watched
//! itself until it appears. A queue overflow marks everything dirty; the
//! loop's periodic full rescan is the backstop for anything else.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use spool_core::registry::Registry;
use spool_core::spool::REFS_DIR;
use spool_lock::{DirWatch, WatchWaker};

/// The running watch thread.
pub(crate) struct RefWatch {
    serve: mpsc::Sender<PathBuf>,
    waker: WatchWaker,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RefWatch {
    /// Starts watching `key_dir`, marking changes in `registry`; `None`
    /// (said once) when the kernel refuses a watch: the poll interval's
    /// rescans are then the only wake-up.
    pub(crate) fn start(key_dir: &Path, registry: Arc<Registry>) -> Option<RefWatch> {
        let mut watch = match DirWatch::new().and_then(|mut w| w.watch(key_dir).map(|()| w)) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(dir = %key_dir.display(), "cannot watch {} for consented packs (found on each poll interval instead): {e}", key_dir.display());
                return None;
            }
        };
        let waker = watch.waker();
        let (serve, rx) = mpsc::channel::<PathBuf>();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let key = key_dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("spool-ref-watch".into())
            .spawn(move || run(&key, &mut watch, &rx, &registry, &flag))
            .ok()?;
        Some(RefWatch {
            serve,
            waker,
            stop,
            thread: Some(thread),
        })
    }

    /// Watches live owner `dir` (its `_refs/`) from now on.
    pub(crate) fn serve(&self, dir: &Path) {
        if self.serve.send(dir.to_path_buf()).is_ok() {
            self.waker.wake();
        }
    }
}

impl Drop for RefWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What is watched for one owner.
enum Watched {
    /// `_refs/` does not exist yet: the owner's directory itself.
    Dir,
    /// `_refs/`.
    Refs,
}

fn run(
    key: &Path,
    watch: &mut DirWatch,
    rx: &mpsc::Receiver<PathBuf>,
    registry: &Registry,
    stop: &AtomicBool,
) {
    let mut owners: HashMap<PathBuf, Watched> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        while let Ok(dir) = rx.try_recv() {
            if let std::collections::hash_map::Entry::Vacant(slot) = owners.entry(dir) {
                let w = start_watching(watch, slot.key());
                slot.insert(w);
            }
        }
        let changes = match watch.wait(Duration::from_secs(60)) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(dir = %key.display(), "watching for consented packs failed (found on each poll interval instead): {e}");
                return;
            }
        };
        if changes.overflowed {
            registry.notify(key);
            for dir in owners.keys() {
                registry.notify(dir);
            }
        }
        for d in changes.changed.iter().chain(changes.gone.iter()) {
            if d == key {
                registry.notify(key);
                continue;
            }
            let owner = if d.file_name().is_some_and(|n| n == REFS_DIR) {
                d.parent().map(Path::to_path_buf)
            } else {
                Some(d.clone())
            };
            let Some(owner) = owner else { continue };
            if matches!(owners.get(&owner), Some(Watched::Dir))
                && spool_core::handoff::has_refs_dir(&owner)
            {
                watch.unwatch(&owner);
                let w = start_watching(watch, &owner);
                owners.insert(owner.clone(), w);
            }
            registry.notify(&owner);
        }
        for d in &changes.gone {
            let owner = if d.file_name().is_some_and(|n| n == REFS_DIR) {
                d.parent().map(Path::to_path_buf)
            } else {
                Some(d.clone())
            };
            if let Some(owner) = owner {
                watch.unwatch(&owner);
                watch.unwatch(&owner.join(REFS_DIR));
                owners.remove(&owner);
            }
        }
    }
}

/// Watches `dir`'s `_refs/`, or `dir` itself until `_refs/` exists.
fn start_watching(watch: &mut DirWatch, dir: &Path) -> Watched {
    if watch.watch(&dir.join(REFS_DIR)).is_ok() {
        return Watched::Refs;
    }
    if let Err(e) = watch.watch(dir) {
        tracing::debug!(dir = %dir.display(), "cannot watch {}: {e}", dir.display());
    }
    Watched::Dir
}
