//! Recovery: the sweep of dead writers' temp files, the
//! incremental validation of listed packs, and setting packs aside
//! (quarantine, reject, purge).

use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::inspect::validate_file;
use super::names::FileKind;
use super::recovered::{Recovery, RecoveryReport, RecoveryStep, SetAside};
use super::walk::{fsync_dir, walk};
use super::{ReadyPack, Spool};
use crate::at::rename_noreplace;
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
        {
            let st = self.state();
            walk(&self.dir, |e| {
                match e.kind {
                    FileKind::Open if !st.in_flight.contains_key(&e.id) => {
                        match std::fs::remove_file(&e.path) {
                            Ok(()) => {}
                            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                            Err(err) => return Err(Error::io("remove", &e.path, err)),
                        }
                        tracing::info!(dir = %self.dir.display(), "swept temp file {}", e.path.display());
                        touched.insert(e.path.parent().map(Path::to_path_buf));
                        swept.push(e.path);
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
        }
        for d in touched.into_iter().flatten() {
            fsync_dir(&d)?;
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
        rename_noreplace(&pack.path, &to)?;
        fsync_dir(&parent)?;
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
                found.push((e.path, e.len));
            }
            Ok(true)
        })?;
        let (mut count, mut bytes) = (0, 0);
        for (path, len) in found {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    count += 1;
                    bytes += len;
                    tracing::info!(dir = %self.dir.display(), "purged {}", path.display());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", &path, e)),
            }
            fsync_dir(path.parent().unwrap_or(&self.dir))?;
        }
        let mut st = self.state();
        st.committed = st.committed.saturating_sub(bytes);
        Ok((count, bytes))
    }
}
