//! The index row: one per pack.

use crate::error::{Error, Result};

/// One catalog row: where a pack is, what it holds and where it came from.
///
/// `indexed_at_ms` is set by the catalog (the server's clock) when the row
/// is written; the value passed to [`crate::Catalog::index`] is ignored.
/// Re-indexing a pack replaces its row: reads see exactly one row per
/// `pack_id`, the one with the latest `indexed_at_ms`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackRow {
    /// The pack id: 32 lowercase hex digits (its file name without `.ready`).
    pub pack_id: String,
    /// The object key in the store (`<prefix>/v1/date=<day>/<pack_id>.pack`):
    /// the object that holds the pack's bytes.
    pub object_key: String,
    /// Where the pack's bytes start in that object: the pack is the
    /// `bytes` bytes from here, read with one ranged GET. 0 for a pack that
    /// is its own object (every row written before schema version 5,
    /// whose range is the whole object).
    pub object_offset: u64,
    /// The operator's name for the store (`default` unless configured).
    pub store_id: String,
    /// SHA-256 of the whole pack (the object, trailer included), 64
    /// lowercase hex digits: what `sha256sum` of the object prints and S3
    /// reports as its `ChecksumSHA256` (in base64). Rows written before
    /// schema version 4 carry the trailer's checksum here instead, and the
    /// same value in `trailer_sha256` (see [`PackRow::whole_sha256`]).
    pub sha256: String,
    /// Size of the pack in bytes.
    pub bytes: u64,
    /// Number of records in the pack.
    pub records: u64,
    /// Host of the producer that staged the pack: the owner record of the
    /// directory it was staged in (an adopter carries the dead producer's,
    /// never its own); `unknown` when that record named no host.
    pub source_host: String,
    /// Pid of the producer that staged it (from the same owner record, in
    /// that producer's pid namespace); 0 when the record named no pid.
    pub source_pid: u32,
    /// The rank directory it was staged in (`r<rank>-<incarnation>`).
    pub rank_dir: String,
    /// The sink's worker ordinal within its process: `Some(k)` for a pack
    /// staged under `w<k>/`, `None` for one staged in the rank directory
    /// itself (a sink without an ordinal). Rows of schema version 1 keep
    /// the `Some(0)` they were written with (that version could not say
    /// "none").
    pub ordinal: Option<u32>,
    /// When the pack was created (milliseconds since the epoch, from its id).
    pub created_at_ms: u64,
    /// When the row was written (server clock, milliseconds since the epoch).
    pub indexed_at_ms: u64,
    /// The checksum the pack's trailer carries: the SHA-256 of every byte
    /// of the pack before the trailer's hash field (its last 32 bytes), 64
    /// lowercase hex digits. Schema version 4 added it; older rows got
    /// their `sha256` (which was this checksum) copied in.
    pub trailer_sha256: String,
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a pack id: 32 lowercase hex digits.
pub(crate) fn check_pack_id(pack_id: &str) -> Result<()> {
    if is_lower_hex(pack_id, 32) {
        Ok(())
    } else {
        Err(Error::InvalidRow {
            pack_id: pack_id.to_string(),
            reason: "a pack id is 32 lowercase hex digits".into(),
        })
    }
}

impl PackRow {
    /// Whether `sha256` is the SHA-256 of the whole object (every row this
    /// schema writes), not the trailer's checksum a row written before
    /// schema version 4 carries there (both columns equal: the two hashes
    /// of one pack differ unless SHA-256 collides).
    pub fn whole_sha256(&self) -> bool {
        self.sha256 != self.trailer_sha256
    }

    /// Checks the row before it is written: the ids are well-formed and no
    /// text field is empty or holds a control character.
    pub fn validate(&self) -> Result<()> {
        check_pack_id(&self.pack_id)?;
        let bad = |reason: String| Error::InvalidRow {
            pack_id: self.pack_id.clone(),
            reason,
        };
        if !is_lower_hex(&self.sha256, 64) {
            return Err(bad("sha256 must be 64 lowercase hex digits".into()));
        }
        if !is_lower_hex(&self.trailer_sha256, 64) {
            return Err(bad("trailer_sha256 must be 64 lowercase hex digits".into()));
        }
        for (field, value) in [
            ("object_key", &self.object_key),
            ("store_id", &self.store_id),
            ("source_host", &self.source_host),
            ("rank_dir", &self.rank_dir),
        ] {
            if value.is_empty() {
                return Err(bad(format!("{field} is empty")));
            }
            if value.chars().any(char::is_control) {
                return Err(bad(format!("{field} holds a control character")));
            }
        }
        Ok(())
    }
}
