//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in spool-upload. Each variant names what it
/// was working on (a local path, an object key) and, where there is one,
/// what to do about it. A store URL is never shown by these messages (it
/// may carry a secret): the caller adds it as context through the one
/// redactor, `spool_catalog::mask_url`; the `url` fields keep it as given
/// for code. [`Error::is_retryable`] is the classification of
/// the crate docs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store URL that cannot be parsed or is not of a supported form.
    #[error("the store URL is not usable: {reason} (expected s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX], az://CONTAINER[/PREFIX], file:///ABS/PATH or memory://)")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The URL's scheme needs a cloud backend this build leaves out.
    #[error("the store URL needs the `{feature}` feature of spool-upload, which this build leaves out: rebuild with `--features {feature}` (the `spool` binary has it on by default)")]
    BackendNotBuilt {
        /// The URL as given.
        url: String,
        /// The cargo feature that would provide it.
        feature: &'static str,
    },

    /// object_store refused to build a client for the URL (missing bucket,
    /// credentials or region, bad option values).
    #[error("cannot build an object store client for the store URL: {source}")]
    StoreConfig {
        /// The URL as given.
        url: String,
        /// object_store's explanation.
        #[source]
        source: Box<object_store::Error>,
    },

    /// An [`UploadConfig`](crate::UploadConfig) that cannot work.
    #[error("invalid upload configuration: {0}")]
    InvalidConfig(String),

    /// A store operation failed (after object_store's own retries).
    #[error("{op} {key} on {store} failed ({}): {source}", if *retryable { "retryable: it is tried again later" } else { "not retryable: fix the store or its credentials" })]
    Store {
        /// The operation (`PUT`, `HEAD`, `GET trailer`, `multipart part` ...).
        op: &'static str,
        /// The object key.
        key: String,
        /// The store's description (its URL or name).
        store: String,
        /// The classification of `source` ([`crate::retryable`]).
        retryable: bool,
        /// What object_store reported (boxed: it is large).
        #[source]
        source: Box<object_store::Error>,
    },

    /// A different object is already at the pack's key. It is never
    /// overwritten; a person has to look at both.
    #[error("a different object is already at {key} on {store} ({existing}; the staged pack {path} is {ours}): it is left untouched, and the pack stays in the spool for a person to compare")]
    Conflict {
        /// The object key.
        key: String,
        /// The store's description.
        store: String,
        /// The staged pack.
        path: PathBuf,
        /// What is in the store (size, checksum, or why it is not a pack).
        existing: String,
        /// What the staged pack is (size, checksum).
        ours: String,
    },

    /// A pack larger than `max_in_flight_bytes` can never fit in a round.
    #[error("pack {path} is {size} bytes, more than max_in_flight_bytes ({limit}): it can never be uploaded with this configuration; raise max_in_flight_bytes to at least {size}")]
    TooLarge {
        /// The staged pack.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The configured bound.
        limit: u64,
    },

    /// The staged file no longer matches what was staged (size, trailer, id).
    #[error("staged pack {path} no longer matches what was staged: {problem}; it is not uploaded (validate it, then quarantine it)")]
    StagedMismatch {
        /// The staged pack.
        path: PathBuf,
        /// What differs.
        problem: String,
    },

    /// The bytes read for the upload do not hash to the checksum in the
    /// pack's trailer: the file changed (bit rot, a stray writer, a bad
    /// disk) after it was validated. Nothing was completed at the key; the
    /// pack is corrupt and the service quarantines it.
    #[error("staged pack {path} is corrupt: the {bytes} bytes read for its upload hash to sha256 {computed}, its trailer says {expected}; the upload was aborted (no object at the key) and the pack must be quarantined (`spool verify` shows it)")]
    ChecksumMismatch {
        /// The staged pack.
        path: PathBuf,
        /// Bytes hashed (the pack's length).
        bytes: u64,
        /// The trailer's SHA-256, hex.
        expected: String,
        /// The SHA-256 of the bytes read, hex.
        computed: String,
    },

    /// The staged pack's trailer is damaged: unparseable (magic, version,
    /// lengths), naming another pack or another length, or the file is
    /// shorter than a trailer. The pack is corrupt: nothing is
    /// sent, and the service quarantines it like any other corrupt pack.
    #[error("staged pack {path} is corrupt: {problem}; nothing was uploaded and the pack must be quarantined (`spool verify` shows it)")]
    CorruptTrailer {
        /// The staged pack.
        path: PathBuf,
        /// What is wrong with the trailer.
        problem: String,
    },

    /// The staged pack, read whole for a single PUT, is not a valid pack
    /// (a record length past the end, a bad footer, another
    /// pack's id, ...) although its trailer parsed: nothing was sent, and
    /// the service quarantines it like any other corrupt pack.
    #[error("staged pack {path} is corrupt: {problem}; nothing was uploaded and the pack must be quarantined (`spool verify` shows it)")]
    CorruptPack {
        /// The staged pack.
        path: PathBuf,
        /// What the validator found.
        problem: String,
    },

    /// Reading the staged pack failed.
    #[error("cannot read staged pack {path}: {source}")]
    ReadStaged {
        /// The staged pack.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The one PUT of a bundle failed: every pack in it shares `source`
    /// (classified as it is), and stays in the spool.
    #[error("the bundle {key} holding {packs} pack(s) was not stored: {source}")]
    InBundle {
        /// The bundle's object key (of the last attempt).
        key: String,
        /// How many packs the bundle held.
        packs: usize,
        /// Why the PUT failed.
        #[source]
        source: std::sync::Arc<Error>,
    },

    /// The upload was cut by a cancel. Not a failure: the pack stays staged.
    #[error("upload of {key} was cancelled; the pack stays in the spool")]
    Cancelled {
        /// The object key.
        key: String,
    },

    /// Writing into a `file://` store failed (creating a directory or the
    /// staging file, copying, fsyncing, publishing). Retryable: a full disk
    /// or a permission can be fixed while the pack waits in the spool.
    #[error("{what} {path} failed: {source}; the pack stays in the spool and is retried (check the store directory's free space and permissions)")]
    LocalWrite {
        /// What was being done.
        what: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Preparing a local directory for a `file://` store failed.
    #[error("cannot create the local store directory {path}: {source}")]
    LocalDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the failure belongs to this one pack (a different object at
    /// its key, a pack over the in-flight bound, staged bytes that changed):
    /// the only failures that may set a pack aside. Every other
    /// non-retryable failure (401, 403, a missing bucket, a bad request
    /// every pack gets, a store that cannot be built) is destination-wide
    ///: uploads to that store stop and back off, every pack stays
    /// ready.
    pub fn is_pack_specific(&self) -> bool {
        matches!(
            self,
            Error::Conflict { .. } | Error::TooLarge { .. } | Error::StagedMismatch { .. }
        ) || matches!(self, Error::InBundle { source, .. } if source.is_pack_specific())
    }

    /// Whether retrying later can help. Retryable: timeouts,
    /// connection and TLS failures, 5xx, 429, a failed HEAD, a local read
    /// error, a cancel. Not retryable: 400/401/403/404, a different object at
    /// the key, a pack over the in-flight bound, staged bytes that no longer
    /// match, configuration errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store { retryable, .. } => *retryable,
            Error::InBundle { source, .. } => source.is_retryable(),
            Error::ReadStaged { .. } | Error::Cancelled { .. } | Error::LocalWrite { .. } => true,
            Error::InvalidUrl { .. }
            | Error::BackendNotBuilt { .. }
            | Error::StoreConfig { .. }
            | Error::InvalidConfig(_)
            | Error::Conflict { .. }
            | Error::TooLarge { .. }
            | Error::StagedMismatch { .. }
            | Error::ChecksumMismatch { .. }
            | Error::CorruptTrailer { .. }
            | Error::CorruptPack { .. }
            | Error::LocalDir { .. } => false,
        }
    }

    /// Whether the staged pack itself is corrupt (its bytes do not match
    /// its checksum, or its trailer is damaged): the pack is quarantined,
    /// not rejected.
    pub fn is_corrupt(&self) -> bool {
        matches!(
            self,
            Error::ChecksumMismatch { .. }
                | Error::CorruptTrailer { .. }
                | Error::CorruptPack { .. }
        )
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
