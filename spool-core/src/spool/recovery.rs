//! Recovery: the sweep of dead writers' temp files, the
//! incremental validation of listed packs, and setting packs aside
//! (quarantine, reject, purge).

use std::io;
use std::sync::atomic::AtomicBool;

use super::inspect::validate_file;
use super::names::FileKind;
use super::recovered::{Recovery, RecoveryReport, RecoveryStep, SetAside};
use super::walk::{walk, EntryDirs};
use super::{ReadyPack, Spool};
use crate::Error;

impl Spool {
    /// Starts an incremental recovery: sweeps every `.open` temp file (not
    /// those of this spool's own stages in flight), sets aside a `.ready`
    /// that is not a regular file, and lists the ready packs without
    /// hashing them. Only for a directory whose lock this process holds and
    /// where no other `Spool` of this process is staging (the engine
    /// recovers before it opens its sinks).
    pub fn begin_recovery(&self) -> Result<Recovery, Error> {
        let mut swept = Vec::new();
        let mut pending = Vec::new();
        let mut odd = Vec::new();
        let mut touched = std::collections::BTreeSet::new();
        let mut dirs = EntryDirs::new(&self.dir);
        {
            let st = self.state();
            let mut sweep = Vec::new();
            walk(&self.dir, |e| {
                match e.kind {
                    FileKind::Open if !st.in_flight.contains_key(&e.id) => {
                        sweep.push((e.path, e.ordinal));
                    }
                    FileKind::Ready if e.regular => pending.push(ReadyPack {
                        path: e.path,
                        id: e.id,
                        bytes: e.len,
                        ordinal: e.ordinal,
                    }),
                    FileKind::Ready => odd.push((
                        ReadyPack {
                            path: e.path,
                            id: e.id,
                            bytes: 0,
                            ordinal: e.ordinal,
                        },
                        e.what,
                    )),
                    _ => {}
                }
                Ok(true)
            })?;
            // removed relative to the directory holding each (a `w<k>/`
            // swapped for a link meanwhile is an error, never followed)
            for (path, ordinal) in sweep {
                if let (Some(dir), Some(name)) = (dirs.of(ordinal)?, path.file_name()) {
                    dir.remove_entry(name)?;
                }
                tracing::info!(dir = %self.dir.display(), "swept temp file {}", path.display());
                touched.insert(ordinal);
                swept.push(path);
            }
        }
        for ordinal in touched {
            if let Some(dir) = dirs.of(ordinal)? {
                dir.sync()?;
            }
        }
        let mut set_aside = Vec::new();
        for (p, what) in odd {
            set_aside.push(self.set_aside(
                &p,
                FileKind::Quarantined,
                &super::inspect::not_regular_reason(what),
            )?);
        }
        pending.sort_by_key(|p| p.id);
        Ok(Recovery {
            swept,
            set_aside,
            pending: pending.into(),
            finished: false,
        })
    }

    /// Validates the next listed pack (one pack's hash per step, checking
    /// `cancel` every 8 MiB); a corrupt one is quarantined. `None` once
    /// every pack is done, after rebuilding the account. A cancelled or
    /// failing step keeps the pack at the front for the next call.
    pub fn continue_recovery(
        &self,
        rec: &mut Recovery,
        cancel: &AtomicBool,
    ) -> Result<Option<RecoveryStep>, Error> {
        while let Some(pack) = rec.pending.pop_front() {
            match validate_file(&pack.path, pack.id, cancel) {
                Ok(summary) => return Ok(Some(RecoveryStep::Valid(pack, summary))),
                Err(e) if e.is_corrupt() => {
                    let reason = e.to_string();
                    let aside = self.set_aside(&pack, FileKind::Quarantined, &reason)?;
                    return Ok(Some(RecoveryStep::Quarantined(aside)));
                }
                Err(Error::PackRead { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    continue; // removed since the listing
                }
                Err(e) => {
                    rec.pending.push_front(pack);
                    return Err(e);
                }
            }
        }
        if !rec.finished {
            self.reconcile()?;
            rec.finished = true;
        }
        Ok(None)
    }

    /// Recovers the whole directory in one call: [`begin_recovery`] and
    /// every [`continue_recovery`] step.
    ///
    /// [`begin_recovery`]: Spool::begin_recovery
    /// [`continue_recovery`]: Spool::continue_recovery
    pub fn recover(&self) -> Result<RecoveryReport, Error> {
        let never = AtomicBool::new(false);
        let mut rec = self.begin_recovery()?;
        let mut report = RecoveryReport::default();
        while let Some(step) = self.continue_recovery(&mut rec, &never)? {
            match step {
                RecoveryStep::Valid(p, _) => report.valid.push(p),
                RecoveryStep::Quarantined(q) => report.quarantined.push(q),
            }
        }
        report.swept = rec.swept;
        report.quarantined.extend(rec.set_aside);
        Ok(report)
    }

    /// Renames a ready pack to `<id>.quarantined` (kept, counted, never
    /// listed or uploaded), logging the reason.
    pub fn quarantine(&self, pack: &ReadyPack, reason: &str) -> Result<SetAside, Error> {
        self.own_path(pack, "ready")?;
        self.set_aside(pack, FileKind::Quarantined, reason)
    }

    /// Renames a ready pack to `<id>.rejected` (the service's verdict on a
    /// pack that failed non-retryably: kept, counted; a person decides).
    pub fn reject(&self, pack: &ReadyPack, reason: &str) -> Result<SetAside, Error> {
        self.own_path(pack, "ready")?;
        self.set_aside(pack, FileKind::Rejected, reason)
    }

    fn set_aside(&self, pack: &ReadyPack, kind: FileKind, reason: &str) -> Result<SetAside, Error> {
        let ext = match kind {
            FileKind::Quarantined => "quarantined",
            FileKind::Rejected => "rejected",
            _ => unreachable!("only quarantine and reject set aside"),
        };
        let parent = pack.path.parent().unwrap_or(&self.dir).to_path_buf();
        let to = parent.join(format!("{}.{ext}", pack.id));
        // renamed relative to the directory holding it (a `w<k>/` that is
        // a link is an error, never followed)
        let mut dirs = EntryDirs::new(&self.dir);
        let (Some(at), Some(from), Some(to_name)) = (
            dirs.of(pack.ordinal)?,
            pack.path.file_name(),
            to.file_name(),
        ) else {
            return Err(Error::io(
                "rename (no replace)",
                &to,
                io::ErrorKind::NotFound.into(),
            ));
        };
        at.rename_noreplace(from, to_name)?;
        at.sync()?;
        tracing::warn!(dir = %self.dir.display(), "pack {} {ext}: {reason}", pack.path.display());
        Ok(SetAside {
            path: to,
            id: pack.id,
            reason: reason.to_string(),
        })
    }

    /// Removes every quarantined pack (an operator's decision). Returns how
    /// many and their bytes.
    pub fn purge_quarantined(&self) -> Result<(u64, u64), Error> {
        let mut found = Vec::new();
        walk(&self.dir, |e| {
            if e.kind == FileKind::Quarantined {
                found.push((e.path, e.ordinal, e.len));
            }
            Ok(true)
        })?;
        let (mut count, mut bytes) = (0, 0);
        // removed relative to the directory holding each, as the sweep
        let mut dirs = EntryDirs::new(&self.dir);
        for (path, ordinal, len) in found {
            let (Some(dir), Some(name)) = (dirs.of(ordinal)?, path.file_name()) else {
                continue; // its directory is gone
            };
            if dir.remove_entry(name)? {
                count += 1;
                bytes += len;
                tracing::info!(dir = %self.dir.display(), "purged {}", path.display());
            }
            dir.sync()?;
        }
        let mut st = self.state();
        st.committed = st.committed.saturating_sub(bytes);
        Ok((count, bytes))
    }
}
