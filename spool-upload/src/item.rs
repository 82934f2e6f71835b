//! A staged pack to upload, and the errors reading one gives: what the
//! uploader and the `file://` fast path (`local.rs`) share.

use std::path::{Path as FsPath, PathBuf};

use spool_core::pack::{PackId, TRAILER_LEN};

use crate::error::Error;

/// A staged pack to upload: where it is, what it is, how big it was when
/// staged. The service builds these from its own scan and from an adopted
/// sibling's listing alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadItem {
    /// The `<id>.ready` file.
    pub path: PathBuf,
    /// The pack's id (its file name).
    pub pack_id: PackId,
    /// Its size when listed. A file of another size now is not uploaded.
    pub size: u64,
}

/// Reading the staged file at `path` failed.
pub(crate) fn read_err(path: &FsPath, source: std::io::Error) -> Error {
    Error::ReadStaged {
        path: path.to_path_buf(),
        source,
    }
}

/// The staged file is not the pack `item` says (its size or id changed).
pub(crate) fn mismatch(item: &UploadItem, problem: String) -> Error {
    Error::StagedMismatch {
        path: item.path.clone(),
        problem,
    }
}

/// The validator refused a body read whole: its bytes do not hash to the
/// trailer's checksum ([`Error::ChecksumMismatch`], as for a multipart
/// upload), or another corruption ([`Error::CorruptPack`]).
pub(crate) fn invalid(item: &UploadItem, read: u64, e: spool_core::Error) -> Error {
    match e {
        spool_core::Error::CorruptPack {
            problem: spool_core::Corruption::ChecksumMismatch { trailer, computed },
            ..
        } => Error::ChecksumMismatch {
            path: item.path.clone(),
            bytes: read,
            expected: trailer,
            computed,
        },
        spool_core::Error::CorruptPack { problem, .. } => Error::CorruptPack {
            path: item.path.clone(),
            problem: problem.to_string(),
        },
        other => Error::CorruptPack {
            path: item.path.clone(),
            problem: other.to_string(),
        },
    }
}

/// Keeps in `tail` the last [`TRAILER_LEN`] bytes read so far, `buf`
/// being the latest read.
pub(crate) fn keep_tail(tail: &mut Vec<u8>, buf: &[u8]) {
    if buf.len() >= TRAILER_LEN {
        tail.clear();
        tail.extend_from_slice(&buf[buf.len() - TRAILER_LEN..]);
    } else {
        tail.extend_from_slice(buf);
        let excess = tail.len().saturating_sub(TRAILER_LEN);
        tail.drain(..excess);
    }
}
