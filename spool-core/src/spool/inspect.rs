//! Reads of a spool directory that take no lock and change nothing: the
//! ready-pack scan, the per-kind counts of `spool status`, and `spool
//! verify`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::names::FileKind;
use super::walk::{open_nofollow, walk};
use super::ReadyPack;
use crate::pack::{self, PackId, PackSummary};
use crate::Error;

/// Counts and bytes of each kind of file in a spool directory (for
/// `spool status`; read without the lock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirCounts {
    /// Sealed packs.
    pub ready: (u64, u64),
    /// Temp files (stages in flight, or torn by a crash).
    pub open: (u64, u64),
    /// Quarantined packs.
    pub quarantined: (u64, u64),
    /// Rejected packs.
    pub rejected: (u64, u64),
}

/// What [`verify_dir`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Packs that validated.
    pub valid: Vec<ReadyPack>,
    /// Packs that did not: path and reason.
    pub corrupt: Vec<(PathBuf, String)>,
    /// Packs already set aside as `<id>.quarantined` (by recovery, or by an
    /// upload whose bytes did not match the checksum): path and what
    /// validating them finds now (the reason they were set aside).
    pub quarantined: Vec<(PathBuf, String)>,
}

/// Why a file named like a pack that is `what` (a FIFO, a symlink, ...)
/// is no pack.
pub(super) fn not_regular_reason(what: &str) -> String {
    format!("not a regular file but {what}: never read, set aside by recovery")
}

/// Validates one pack file (not following a symlink) against the id its
/// name carries.
pub fn validate_file(path: &Path, id: PackId, cancel: &AtomicBool) -> Result<PackSummary, Error> {
    let file = open_nofollow(path).map_err(|source| Error::PackRead {
        path: Some(path.to_path_buf()),
        source,
    })?;
    pack::validate(file, Some(id), cancel).map_err(|e| match e {
        Error::PackRead { path: None, source } => Error::PackRead {
            path: Some(path.to_path_buf()),
            source,
        },
        e => e.for_pack(path.display()),
    })
}

/// Lists the ready packs of a spool directory in id order (no lock taken).
pub fn scan_dir(dir: &Path, cancel: &AtomicBool) -> Result<Vec<ReadyPack>, Error> {
    let mut out = Vec::new();
    let mut cancelled = false;
    walk(dir, |e| {
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            return Ok(false);
        }
        crate::seams::kill_point("scan_entry");
        if e.kind == FileKind::Ready {
            if e.regular {
                out.push(ReadyPack {
                    path: e.path,
                    id: e.id,
                    bytes: e.len,
                    ordinal: e.ordinal,
                });
            } else {
                crate::warn_throttled!(format!("scan skips {}", e.path.display()), dir = %dir.display(), "scan skips {}: {}", e.path.display(), not_regular_reason(e.what));
            }
        }
        Ok(true)
    })?;
    if cancelled {
        return Err(Error::Cancelled);
    }
    out.sort_by_key(|p| p.id);
    Ok(out)
}

/// Counts the files of each kind (no lock taken; for `spool status`).
pub fn inspect(dir: &Path) -> Result<DirCounts, Error> {
    let mut c = DirCounts::default();
    walk(dir, |e| {
        // a FIFO, symlink or socket named like a ready pack is no pack
        // (verify names it, recovery sets it aside, and then it counts as
        // quarantined)
        if e.kind == FileKind::Ready && !e.regular {
            return Ok(true);
        }
        let slot = match e.kind {
            FileKind::Ready => &mut c.ready,
            FileKind::Open => &mut c.open,
            FileKind::Quarantined => &mut c.quarantined,
            FileKind::Rejected => &mut c.rejected,
        };
        slot.0 += 1;
        slot.1 += e.len;
        Ok(true)
    })?;
    Ok(c)
}

/// Where a [`verify_dir_with_progress`] is: packs and bytes checked so far
/// out of those listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyProgress {
    /// Packs checked (valid, corrupt, or gone since the listing).
    pub done: u64,
    /// Bytes of the packs checked.
    pub done_bytes: u64,
    /// Ready packs listed.
    pub total: u64,
    /// Bytes of the ready packs listed.
    pub total_bytes: u64,
}

/// Validates every ready pack without taking the lock or changing
/// anything (`spool verify`). A pack removed while this runs is skipped.
pub fn verify_dir(dir: &Path, cancel: &AtomicBool) -> Result<VerifyReport, Error> {
    verify_dir_with_progress(dir, cancel, |_| {})
}

/// [`verify_dir`], calling `progress` once after the listing and after
/// each pack (for progress bars on large directories).
pub fn verify_dir_with_progress(
    dir: &Path,
    cancel: &AtomicBool,
    mut progress: impl FnMut(VerifyProgress),
) -> Result<VerifyReport, Error> {
    let mut report = VerifyReport::default();
    let mut odd = Vec::new();
    let mut quarantined = Vec::new();
    walk(dir, |e| {
        if e.kind == FileKind::Ready && !e.regular {
            odd.push((e.path, e.what));
        } else if e.kind == FileKind::Quarantined && e.regular {
            quarantined.push(e.path);
        }
        Ok(true)
    })?;
    for path in quarantined {
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| PackId::from_hex(s).ok());
        let why = match id.map(|id| validate_file(&path, id, cancel)) {
            None => "not named after a pack id".to_string(),
            Some(Ok(_)) => "it validates now (set aside by an earlier check; rename it back to <id>.ready if it should go up)".to_string(),
            Some(Err(Error::CorruptPack { problem, .. })) => problem.to_string(),
            Some(Err(Error::Cancelled)) => return Err(Error::Cancelled),
            Some(Err(e)) => e.to_string(),
        };
        report.quarantined.push((path, why));
    }
    for (p, what) in odd {
        report.corrupt.push((p, not_regular_reason(what)));
    }
    let packs = scan_dir(dir, cancel)?;
    let mut at = VerifyProgress {
        total: packs.len() as u64,
        total_bytes: packs.iter().map(|p| p.bytes).sum(),
        ..VerifyProgress::default()
    };
    progress(at);
    for pack in packs {
        at.done += 1;
        at.done_bytes += pack.bytes;
        let checked = validate_file(&pack.path, pack.id, cancel);
        progress(at);
        match checked {
            Ok(_) => report.valid.push(pack),
            Err(e) if e.is_corrupt() => {
                let reason = match e {
                    Error::CorruptPack { problem, .. } => problem.to_string(),
                    e => e.to_string(),
                };
                report.corrupt.push((pack.path, reason));
            }
            Err(Error::PackRead { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}
