//! What [`super::Spool::requeue`] reports (a leaf: the spool re-exports
//! it, `requeue.rs` makes it).

use std::path::{Path, PathBuf};

/// One pack [`super::Spool::requeue`] looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeued {
    from: PathBuf,
    to: PathBuf,
    kept: Option<String>,
}

impl Requeued {
    /// `from` looked at: renamed to `to`, or `kept` as it was (why).
    pub(super) fn new(from: PathBuf, to: PathBuf, kept: Option<String>) -> Requeued {
        Requeued { from, to, kept }
    }

    /// The set-aside pack.
    pub fn from(&self) -> &Path {
        &self.from
    }

    /// Its ready name.
    pub fn to(&self) -> &Path {
        &self.to
    }

    /// Why it stayed set aside; `None` when it was requeued.
    pub fn kept(&self) -> Option<&str> {
        self.kept.as_deref()
    }
}
