//! The one error type of spool-core.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What is wrong with a corrupt pack (carried by [`Error::CorruptPack`]).
/// Every kind means the pack must be quarantined, never uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// Shorter than a header.
    TooShort {
        /// Bytes present.
        len: u64,
    },
    /// The first 8 bytes are not the pack magic.
    BadMagic {
        /// The 8 bytes found, hex.
        found: String,
    },
    /// A major version this build does not know.
    UnknownVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// The header's id is not the one the file name (or caller) expects.
    IdMismatch {
        /// The id expected (file name).
        expected: String,
        /// The id in the header.
        found: String,
    },
    /// The data ends before the structure does.
    Truncated {
        /// Offset where more bytes were needed.
        offset: u64,
        /// How many more were needed for the field or record being read.
        missing: u64,
    },
    /// The footer's record count or byte count disagrees with the records.
    FooterMismatch {
        /// Records the footer claims.
        footer_records: u64,
        /// Record bytes the footer claims.
        footer_bytes: u64,
        /// Records read.
        read_records: u64,
        /// Record bytes read.
        read_bytes: u64,
    },
    /// The trailer does not start with its magic.
    BadTrailerMagic {
        /// The 8 bytes found, hex.
        found: String,
    },
    /// A trailer field disagrees with the pack.
    TrailerMismatch {
        /// Which field.
        field: &'static str,
        /// What the trailer says.
        trailer: String,
        /// What the pack is.
        actual: String,
    },
    /// The SHA-256 of the pack is not the one its trailer carries.
    ChecksumMismatch {
        /// The trailer's hash.
        trailer: String,
        /// The hash of the bytes.
        computed: String,
    },
    /// Bytes follow the trailer.
    TrailingBytes {
        /// Where the trailer ended.
        offset: u64,
        /// How many extra bytes were seen (at least).
        at_least: u64,
    },
}

impl Corruption {
    /// The byte offset the problem is at, where the kind has one: the
    /// header fields (magic 0, version 8, id 12), a truncation, bytes after
    /// the trailer. `None` for the footer, trailer and checksum kinds, which
    /// concern the pack as a whole.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Corruption::TooShort { len } => Some(*len),
            Corruption::BadMagic { .. } => Some(0),
            Corruption::UnknownVersion { .. } => Some(8),
            Corruption::IdMismatch { .. } => Some(12),
            Corruption::Truncated { offset, .. } | Corruption::TrailingBytes { offset, .. } => {
                Some(*offset)
            }
            Corruption::FooterMismatch { .. }
            | Corruption::BadTrailerMagic { .. }
            | Corruption::TrailerMismatch { .. }
            | Corruption::ChecksumMismatch { .. } => None,
        }
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::TooShort { len } => {
                write!(f, "only {len} bytes: shorter than a pack header")
            }
            Corruption::BadMagic { found } => {
                write!(f, "wrong magic {found} (not a spool pack)")
            }
            Corruption::UnknownVersion { major, minor } => write!(
                f,
                "unknown pack format version {major}.{minor} (this build reads major version {})",
                crate::version::VERSION_MAJOR
            ),
            Corruption::IdMismatch { expected, found } => {
                write!(f, "header carries pack id {found}, expected {expected}")
            }
            Corruption::Truncated { offset, missing } => write!(
                f,
                "truncated: ends at byte {offset} with at least {missing} more bytes expected"
            ),
            Corruption::FooterMismatch {
                footer_records,
                footer_bytes,
                read_records,
                read_bytes,
            } => write!(
                f,
                "footer says {footer_records} records / {footer_bytes} bytes, \
                 the pack holds {read_records} records / {read_bytes} bytes"
            ),
            Corruption::BadTrailerMagic { found } => {
                write!(f, "wrong trailer magic {found}")
            }
            Corruption::TrailerMismatch {
                field,
                trailer,
                actual,
            } => write!(f, "trailer {field} is {trailer}, the pack's is {actual}"),
            Corruption::ChecksumMismatch { trailer, computed } => write!(
                f,
                "SHA-256 mismatch: trailer carries {trailer}, the bytes hash to {computed}"
            ),
            Corruption::TrailingBytes { offset, at_least } => write!(
                f,
                "{at_least} or more bytes follow the trailer ending at byte {offset}"
            ),
        }
    }
}

/// Every way spool-core fails.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- packs -------------------------------------------------------
    /// A pack is corrupt (see [`Corruption`]). Quarantine it; never upload it.
    #[error("corrupt pack {pack}: {problem}")]
    CorruptPack {
        /// The pack (its path, or a description when read from a stream).
        pack: String,
        /// What is wrong.
        problem: Corruption,
    },
    /// Reading a pack failed; says nothing about the pack itself.
    #[error(
        "cannot read pack{}: {source}",
        path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default()
    )]
    PackRead {
        /// The pack file, when the read was of one (`None` for a stream).
        path: Option<PathBuf>,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A string that is not a pack id (32 lowercase hex digits).
    #[error("{text:?} is not a pack id (32 lowercase hex digits)")]
    BadPackId {
        /// The text (at most 80 characters of it).
        text: String,
    },
    /// Work stopped because its cancellation flag was raised.
    #[error("cancelled")]
    Cancelled,

    // ---- the spool directory -----------------------------------------
    /// An I/O operation on a spool path failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("create", "fsync", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// An entry of a spool directory is not the kind spool expects there (a
    /// symlink, a FIFO, a device, a file where a directory belongs, a
    /// directory where a file belongs, a name that is not UTF-8). Nothing
    /// is followed, read or removed through it; the directory holding it is
    /// set aside until an operator removes it.
    #[error(
        "{} is {found} where spool expects {expected}: spool never follows, reads or removes such an entry; remove or move it (the directory holding it is set aside until then)",
        path.display()
    )]
    UnexpectedEntry {
        /// The entry.
        path: PathBuf,
        /// What is there (`"a symlink"`, `"a FIFO"`, ...).
        found: String,
        /// What spool expects there.
        expected: String,
    },
    /// The owner lock refused or failed (another owner, nesting, a shared
    /// filesystem, held_by_caller without the lock...).
    #[error("{0}")]
    Lock(#[from] spool_lock::Error),
    /// The spool directory (or its worker subdirectory's parent) does not
    /// exist: it was removed. A stage never recreates it.
    #[error(
        "spool directory {} has vanished (removed while in use); nothing was staged and it is not recreated: the stage is refused so its packs are not written outside the owner lock",
        dir.display()
    )]
    DirectoryVanished {
        /// The directory.
        dir: PathBuf,
    },
    /// A pack with this id is already sealed with different bytes; the
    /// sealed one is kept, never replaced.
    #[error(
        "pack {} already exists with different bytes ({existing} bytes there, {staged} staged); the sealed pack is kept: a pack id must never be reused for other data",
        path.display()
    )]
    Conflict {
        /// The sealed pack's path.
        path: PathBuf,
        /// Its size.
        existing: u64,
        /// The size of what was staged.
        staged: u64,
    },
    /// The spool is over its byte budget.
    #[error(
        "spool directory {} is full: {needed} bytes needed, {used} of {budget} bytes in use \
         ({dead_sibling_bytes} of them in dead sibling directories, which this node's storage \
         service adopts and drains); wait for uploads to drain it, or raise max_bytes",
        dir.display()
    )]
    Full {
        /// The spool directory.
        dir: PathBuf,
        /// Bytes in use: committed, reserved by stages in flight, and
        /// charged dead siblings.
        used: u64,
        /// `max_bytes`.
        budget: u64,
        /// The part of `used` held by dead siblings.
        dead_sibling_bytes: u64,
        /// The size of the refused pack.
        needed: u64,
    },
    /// A path that is not a pack of this spool (bad name, outside the
    /// directory, or a symlink).
    #[error("{} is not a pack of spool directory {}: {why}", path.display(), dir.display())]
    NotAPack {
        /// The path.
        path: PathBuf,
        /// The spool directory.
        dir: PathBuf,
        /// Why it is refused.
        why: &'static str,
    },
    /// A destination field is missing or malformed (of the catalog key).
    #[error("destination field `{field}` {why}")]
    BadDestination {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A test seam was asked for in a build without them.
    #[error("this build has no test seams ({seam}): build spool-core with the `testing` feature")]
    NoTestSeams {
        /// The seam.
        seam: &'static str,
    },
    /// A kill point was asked for by a name that is none (test seams).
    #[error("no kill point is named {name:?}; the kill points are: {known}")]
    UnknownKillPoint {
        /// The name asked for.
        name: String,
        /// The kill points there are.
        known: String,
    },
    // ---- the sink and the registry (core-sink) -------------------------
    /// The spool directory is full and the sink's buffer too: the record was
    /// not admitted (the producer is told, nothing is dropped).
    #[error(
        "spool directory {} is full ({used} of {budget} bytes used, {dead_sibling_bytes} of \
         them by dead siblings awaiting adoption) and the sink's buffer holds {buffered} of \
         {buffer_bytes} bytes not yet staged: record not admitted; let the storage service \
         upload and remove packs, raise max_bytes, or retry later",
        dir.display()
    )]
    SpoolFull {
        /// The spool directory.
        dir: PathBuf,
        /// Bytes the spool accounts as used (from its last refused stage).
        used: u64,
        /// The spool's budget (`max_bytes`).
        budget: u64,
        /// The part of `used` dead siblings hold.
        dead_sibling_bytes: u64,
        /// Bytes the sink holds that are not staged yet.
        buffered: u64,
        /// The sink's buffer limit (`buffer_bytes`).
        buffer_bytes: u64,
    },
    /// The sink's buffer is full because staging is slow or failing (not
    /// because the spool is full): the record was not admitted.
    #[error(
        "sink for {}: its buffer holds {buffered} of {buffer_bytes} bytes not yet staged \
         ({cause}): record not admitted; retry later or raise buffer_bytes",
        dir.display()
    )]
    SinkBufferFull {
        /// The spool directory.
        dir: PathBuf,
        /// Bytes the sink holds that are not staged yet.
        buffered: u64,
        /// The sink's buffer limit (`buffer_bytes`).
        buffer_bytes: u64,
        /// What the staging thread is doing (its last failure, if any).
        cause: String,
    },
    /// The sink was released (or is being released): it admits nothing.
    #[error(
        "the sink for {} was released: it admits no more records; open a new sink",
        dir.display()
    )]
    SinkReleased {
        /// The spool directory.
        dir: PathBuf,
    },
    /// A flush (or a release's flush) did not stage everything by its
    /// deadline. What is left stays in the sink's buffer and its thread
    /// keeps trying.
    #[error(
        "flush of the sink for {} did not finish within {timeout:?}: {packs} pack(s) \
         ({bytes} bytes) not yet staged ({cause})",
        dir.display()
    )]
    FlushTimeout {
        /// The spool directory.
        dir: PathBuf,
        /// The flush's timeout.
        timeout: std::time::Duration,
        /// Packs sealed (or about to be) but not staged.
        packs: u64,
        /// Their bytes.
        bytes: u64,
        /// Why: the spool is full, the last stage failure, or a stage still
        /// in progress.
        cause: String,
    },
    /// The sink's staging thread could not be started.
    #[error("cannot start the staging thread of the sink for {}: {source}", dir.display())]
    SinkThread {
        /// The spool directory.
        dir: PathBuf,
        /// Why the thread could not be spawned.
        #[source]
        source: io::Error,
    },
    /// A sink setting is out of range.
    #[error("invalid sink configuration for {}: {why}", dir.display())]
    InvalidConfig {
        /// The spool directory.
        dir: PathBuf,
        /// What is wrong and what to set instead.
        why: String,
    },
}

impl Error {
    /// Wraps a corruption found in a stream with no path.
    pub(crate) fn corrupt(problem: Corruption) -> Error {
        Error::CorruptPack {
            pack: "<stream>".into(),
            problem,
        }
    }

    /// Whether this error says a pack is corrupt (as opposed to an I/O
    /// failure, a cancel, or a refusal).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Error::CorruptPack { .. })
    }

    /// Whether this error says an entry of a spool directory is not the
    /// kind spool expects: the directory must be set aside, not retried.
    pub fn is_unexpected_entry(&self) -> bool {
        matches!(self, Error::UnexpectedEntry { .. })
    }

    /// Whether this is an I/O error saying an entry was not found (a
    /// directory removed under a descriptor, say).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// The same error naming `pack` (a path) if it is a corruption.
    pub fn for_pack(self, pack: impl fmt::Display) -> Error {
        match self {
            Error::CorruptPack { problem, .. } => Error::CorruptPack {
                pack: pack.to_string(),
                problem,
            },
            e => e,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
