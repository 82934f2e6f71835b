//! What goes through the drain ([`Job`]: a pack, the spool that holds it,
//! who staged it, and its row once uploaded) and what comes out of it
//! ([`PackOutcome`], the one answer the service's own work and adoption
//! both read).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_catalog::PackRow;
use spool_core::{ReadyPack, Spool};

use crate::cause::Cause;

/// Where a pack came from: the producer that staged it (the catalog row's
/// `source_host` / `source_pid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    host: String,
    /// 0 when the owner record named no pid.
    pid: u32,
}

impl Origin {
    /// This process on `host`: the producer of its own directory's packs.
    pub(crate) fn this_process(host: &str) -> Origin {
        Origin {
            host: host.to_string(),
            pid: std::process::id(),
        }
    }

    /// Another process's directory's producer (an adopted dead sibling, or
    /// a live hand-off owner), as its owner record names it (never the
    /// adopter); `unknown` / 0 when the record could not tell.
    pub(crate) fn of_producer(producer: Option<&spool_lock::Producer>) -> Origin {
        match producer {
            Some(p) => Origin {
                host: p.host.clone(),
                pid: p.pid.unwrap_or(0),
            },
            None => Origin {
                host: "unknown".into(),
                pid: 0,
            },
        }
    }

    /// The producer's host name.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The producer's pid (0: unknown).
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }
}

/// Where a job's file lives, which says what may be done to it once its
/// row is confirmed, or if it is corrupt.
#[derive(Debug, Clone)]
pub(crate) enum Home {
    /// A spool this service holds (its own, or an adopted sibling's): the
    /// file is removed after its row is confirmed, quarantined if corrupt.
    Spool(Arc<Spool>),
    /// A live owner's directory that consented to the hand-off: the file is
    /// only read; once its row is confirmed the owner is told (see
    /// `crate::handoff`), and the owner removes it.
    Owner(PathBuf),
}

/// One pack to upload and index, or, once uploaded, to index.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pack: ReadyPack,
    /// Where its file lives; its directory is the row's `rank_dir`.
    home: Home,
    source: Origin,
    /// Its catalog row once its upload landed: the job is owed to the
    /// catalog and goes straight to the index stage.
    row: Option<PackRow>,
    /// When its upload landed.
    uploaded_at: Option<Instant>,
}

impl Job {
    /// A ready pack of `spool`, staged by `source`, not yet uploaded.
    pub(crate) fn new(pack: ReadyPack, spool: Arc<Spool>, source: Origin) -> Job {
        Job {
            pack,
            home: Home::Spool(spool),
            source,
            row: None,
            uploaded_at: None,
        }
    }

    /// A pack a live owner in `owner_dir` consented to hand off, staged by
    /// `source`, not yet uploaded.
    pub(crate) fn handed_off(pack: ReadyPack, owner_dir: PathBuf, source: Origin) -> Job {
        Job {
            pack,
            home: Home::Owner(owner_dir),
            source,
            row: None,
            uploaded_at: None,
        }
    }

    /// The pack.
    pub(crate) fn pack(&self) -> &ReadyPack {
        &self.pack
    }

    /// Where its file lives.
    pub(crate) fn home(&self) -> &Home {
        &self.home
    }

    /// The spool directory that holds it.
    pub(crate) fn dir(&self) -> &Path {
        match &self.home {
            Home::Spool(s) => s.dir(),
            Home::Owner(d) => d,
        }
    }

    /// Who staged it.
    pub(crate) fn source(&self) -> &Origin {
        &self.source
    }

    /// Its row, once uploaded.
    pub(crate) fn row(&self) -> Option<&PackRow> {
        self.row.as_ref()
    }

    /// Marks it uploaded, with the row the catalog is owed.
    pub(super) fn uploaded(mut self, row: PackRow) -> Job {
        self.row = Some(row);
        self.uploaded_at = Some(Instant::now());
        self
    }

    /// Whether its row names a bundle uploaded more than `limit` ago.
    pub(super) fn bundled_before(&self, limit: Duration) -> bool {
        let bundled = self
            .row
            .as_ref()
            .is_some_and(|r| r.object_key.ends_with(spool_upload::BUNDLE_SUFFIX));
        bundled && self.uploaded_at.is_some_and(|t| t.elapsed() > limit)
    }

    /// Forgets its upload: it goes up again (in a fresh bundle).
    pub(super) fn not_uploaded(mut self) -> Job {
        self.row = None;
        self.uploaded_at = None;
        self
    }
}

/// What became of one pack handed to the drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackOutcome {
    /// Uploaded and indexed; its file has been removed.
    Indexed,
    /// Uploaded, the index failed or was cut: it is owed to the catalog
    /// (the drain's backlog indexes and removes it later). Its file stays
    /// until then.
    Owed,
    /// Upload failed, or its file could not be read (not a corruption).
    Failed {
        /// Whether a later attempt may succeed (a refusal of the whole
        /// destination is retryable: it is not this pack's fault).
        retryable: bool,
        /// The failure, naming the limit or host (the caller names the
        /// pack).
        reason: Cause,
    },
    /// A cancel cut it, or the drain halted before it started. It stays in
    /// the spool, uploaded or not.
    Cancelled,
    /// It failed validation (before any upload), or its bytes changed
    /// after, and was renamed `<id>.quarantined`: kept, never uploaded.
    Quarantined {
        /// What was wrong, for the log.
        reason: String,
    },
    /// Its file is gone since it was listed.
    Vanished,
}
