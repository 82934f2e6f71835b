//! What a file name in a spool directory says: the pack file kinds and
//! the worker subdirectory names (`w<ordinal>`).

use crate::pack::PackId;

/// The kind of a file in a spool directory, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `<id>.ready`
    Ready,
    /// `.<id>.<8 hex>.open`
    Open,
    /// `<id>.quarantined`
    Quarantined,
    /// `<id>.rejected`
    Rejected,
}

/// Classifies a file name; `None` for anything that is not a pack file
/// (those are never counted, swept, listed or removed).
pub fn file_kind(name: &str) -> Option<(FileKind, PackId)> {
    if let Some(rest) = name.strip_prefix('.') {
        let rest = rest.strip_suffix(".open")?;
        let (id, rand) = rest.split_once('.')?;
        if rand.len() != 8 || !rand.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        return Some((FileKind::Open, PackId::from_hex(id).ok()?));
    }
    let (id, ext) = name.split_once('.')?;
    let kind = match ext {
        "ready" => FileKind::Ready,
        "quarantined" => FileKind::Quarantined,
        "rejected" => FileKind::Rejected,
        _ => return None,
    };
    Some((kind, PackId::from_hex(id).ok()?))
}

/// The worker subdirectory name for an ordinal.
pub fn ordinal_dir_name(ordinal: u32) -> String {
    format!("w{ordinal}")
}

/// Parses a canonical worker subdirectory name (`w<decimal>`).
pub fn parse_ordinal_dir(name: &str) -> Option<u32> {
    let digits = name.strip_prefix('w')?;
    if digits.is_empty()
        || !digits.bytes().all(|c| c.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}
