//! Requeue: packs set aside turned back into ready packs once a person
//! fixed the cause (`spool requeue`): `<id>.rejected` (an own pack that
//! failed for good), and `<id>.quarantined` packs that validate now. Done
//! under the spool's owner lock (a [`Spool`] opened with mode `Take`),
//! never replacing a ready pack (`RENAME_NOREPLACE`), the directory fsynced
//! after each rename. A pack that stays set aside says why.

use std::io;
use std::sync::atomic::AtomicBool;

use super::inspect::validate_file;
use super::names::FileKind;
use super::requeued::Requeued;
use super::walk::{walk, EntryDirs};
use super::Spool;
use crate::Error;

impl Spool {
    /// Renames every `<id>.rejected` (with `rejected`) and every
    /// `<id>.quarantined` that validates now (with `quarantined`) of this
    /// spool and its worker subdirectories to `<id>.ready`, in path order.
    /// A pack whose ready name exists, or that still does not validate, or
    /// that cannot be renamed, is kept as it is, with the reason. Fails
    /// only when the directory cannot be walked.
    pub fn requeue(&self, rejected: bool, quarantined: bool) -> Result<Vec<Requeued>, Error> {
        let mut found = Vec::new();
        walk(self.dir(), |e| {
            let wanted = match e.kind {
                FileKind::Rejected => rejected,
                FileKind::Quarantined => quarantined,
                FileKind::Ready | FileKind::Open => false,
            };
            if wanted && e.regular {
                found.push((e.path, e.kind, e.id, e.ordinal));
            }
            Ok(true)
        })?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let never = AtomicBool::new(false);
        let mut out = Vec::with_capacity(found.len());
        let mut dirs = EntryDirs::new(self.dir());
        for (from, kind, id, ordinal) in found {
            let to_name = format!("{}.ready", id.to_hex());
            let to = from.with_file_name(&to_name);
            let kept = if kind == FileKind::Quarantined {
                validate_file(&from, id, &never)
                    .err()
                    .map(|e| format!("still does not validate: {e}"))
            } else {
                None
            };
            // renamed relative to the directory holding it (a `w<k>/`
            // that is a link is kept with why, never followed), and only
            // when nothing above kept it
            let kept = kept.or_else(|| {
                let renamed = dirs.of(ordinal).and_then(|at| match at {
                    Some(at) => at
                        .rename_noreplace(from.file_name().unwrap_or_default(), to_name.as_ref())
                        .map(|()| Some(at)),
                    None => Ok(None),
                });
                match renamed {
                    Ok(Some(at)) => {
                        if let Err(e) = at.sync() {
                            tracing::warn!(dir = %self.dir().display(), "requeued {}, but {e}", to.display());
                        }
                        None
                    }
                    Ok(None) => Some(format!("its directory {} is gone", from.display())),
                    Err(Error::Io { source, .. })
                        if source.kind() == io::ErrorKind::AlreadyExists =>
                    {
                        Some(format!("{} already exists", to.display()))
                    }
                    Err(e) => Some(format!("cannot rename it to {}: {e}", to.display())),
                }
            });
            out.push(Requeued::new(from, to, kept));
        }
        Ok(out)
    }
}
