//! An in-memory [`StageTarget`](super::StageTarget) for tests: can be full, fail, or
//! hold stages at a gate. Compiled only for tests and the `testing` feature.

use super::*;

/// One pack the fake staged.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The sink's ordinal.
    pub ordinal: Option<u32>,
    /// The pack id.
    pub id: PackId,
    /// The pack's bytes.
    pub bytes: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    staged: Vec<Staged>,
    budget: Option<u64>,
    fail: Option<String>,
    gate_closed: bool,
    /// Stages currently inside `stage` (waiting at the gate or not).
    entered: u64,
    attempts: u64,
}

/// The fake. `dir` is only a name (nothing touches the filesystem).
pub struct MemoryTarget {
    dir: PathBuf,
    inner: Mutex<Inner>,
    gate: Condvar,
}

impl MemoryTarget {
    /// A fake with no budget, no failure, gate open.
    pub fn new(dir: impl Into<PathBuf>) -> Arc<MemoryTarget> {
        Arc::new(MemoryTarget {
            dir: dir.into(),
            inner: Mutex::new(Inner::default()),
            gate: Condvar::new(),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Refuse stages that would take the staged total past `budget`.
    pub fn set_budget(&self, budget: Option<u64>) {
        self.inner().budget = budget;
    }

    /// Fail every stage with this message (`None`: stop failing).
    pub fn set_failure(&self, message: Option<&str>) {
        self.inner().fail = message.map(str::to_string);
    }

    /// Close the gate: stages block inside `stage` until it opens.
    pub fn close_gate(&self) {
        self.inner().gate_closed = true;
    }

    /// Open the gate.
    pub fn open_gate(&self) {
        self.inner().gate_closed = false;
        self.gate.notify_all();
    }

    /// What was staged, in order.
    pub fn staged(&self) -> Vec<Staged> {
        self.inner().staged.clone()
    }

    /// Stages inside `stage` right now.
    pub fn entered(&self) -> u64 {
        self.inner().entered
    }

    /// Calls of `stage` so far.
    pub fn attempts(&self) -> u64 {
        self.inner().attempts
    }

    /// Bytes staged.
    pub fn used(&self) -> u64 {
        self.inner()
            .staged
            .iter()
            .map(|s| s.bytes.len() as u64)
            .sum()
    }
}

impl StageTarget for MemoryTarget {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn stage(&self, ordinal: Option<u32>, id: PackId, bytes: &[u8]) -> Result<(), StageFailure> {
        let mut inner = self.inner();
        inner.attempts += 1;
        inner.entered += 1;
        while inner.gate_closed {
            inner = self
                .gate
                .wait(inner)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        inner.entered -= 1;
        if let Some(message) = &inner.fail {
            return Err(StageFailure::Failed(Error::Io {
                op: "stage",
                path: self.dir.join(id.to_hex()),
                source: std::io::Error::other(message.clone()),
            }));
        }
        let used: u64 = inner.staged.iter().map(|s| s.bytes.len() as u64).sum();
        if let Some(budget) = inner.budget {
            if used + bytes.len() as u64 > budget {
                return Err(StageFailure::Full(Fullness {
                    used,
                    budget,
                    dead_sibling_bytes: 0,
                }));
            }
        }
        if let Some(existing) = inner.staged.iter().find(|s| s.id == id) {
            assert_eq!(existing.bytes, bytes, "a re-stage carries the same bytes");
            return Ok(());
        }
        inner.staged.push(Staged {
            ordinal,
            id,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }
}
