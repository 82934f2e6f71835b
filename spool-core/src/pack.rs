//! The pack format: ids, the in-memory writer, the streaming
//! reader and bounded-memory validation.
//!
//! The byte layout is documented in the crate docs ([`crate`], "Pack
//! format"); the constants below are its single source of truth.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::error::{Corruption, Error};
pub use crate::version::{VERSION_MAJOR, VERSION_MINOR};

/// The 8 magic bytes that open every pack.
pub const MAGIC: [u8; 8] = *b"SPOOLPK\x01";
/// The 8 magic bytes that open the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"SPOOLEND";
/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// The record-length value that marks the footer instead of a record.
pub const FOOTER_MARKER: u32 = u32::MAX;
/// The largest record: one less than [`FOOTER_MARKER`].
pub const MAX_RECORD_LEN: u32 = u32::MAX - 1;
/// Length of the footer, marker included.
pub const FOOTER_LEN: usize = 4 + 8 + 8;
/// Length of the trailer, at a fixed offset from the end of every pack.
pub const TRAILER_LEN: usize = 8 + 16 + 8 + 8 + 32;
/// Offset of the SHA-256 field within the trailer; the hash covers every
/// byte of the pack before it.
pub const TRAILER_HASH_OFFSET: usize = TRAILER_LEN - 32;
/// The smallest possible pack: header, footer and trailer, no record.
pub const MIN_PACK_LEN: u64 = (HEADER_LEN + FOOTER_LEN + TRAILER_LEN) as u64;
/// Validation checks its cancellation flag at least once per this many bytes.
pub const CANCEL_CHECK_BYTES: u64 = 8 << 20;
/// Read-buffer size of the streaming reader and of validation.
const READ_CHUNK: usize = 1 << 20;

/// A pack's id: 128 bits, time-ordered. The first 6 bytes are the creation
/// time in milliseconds since the Unix epoch (big-endian, so byte order is
/// time order), the remaining 10 bytes random. Spelled as 32 lowercase hex
/// digits, which is also the pack's file name.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackId(pub [u8; 16]);

impl PackId {
    /// A fresh id for the current time.
    pub fn generate() -> PackId {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        PackId::with_timestamp(ms)
    }

    /// A fresh id for the given time (milliseconds since the epoch; only the
    /// low 48 bits are kept) with 80 random bits.
    ///
    /// The random bits come from the operating system (`getrandom`), never
    /// from a user-space generator: a process forked without exec (a
    /// DataLoader worker) copies such a generator's state, so parent and
    /// child would draw the same bits and, within one millisecond, mint the
    /// same id for different packs — a conflict in the store that sets
    /// both aside. (Found by spool-py's fork test.)
    pub fn with_timestamp(ms: u64) -> PackId {
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        if rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut bytes[6..]).is_err() {
            // No OS randomness (never seen on Linux): the thread generator
            // is still unique across the threads of one process.
            rand::Rng::fill(&mut rand::rng(), &mut bytes[6..]);
        }
        PackId(bytes)
    }

    /// The creation time the id carries, in milliseconds since the epoch.
    pub fn timestamp_ms(&self) -> u64 {
        let mut b = [0u8; 8];
        b[2..].copy_from_slice(&self.0[..6]);
        u64::from_be_bytes(b)
    }

    /// 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses exactly 32 lowercase hex digits (the spelling [`to_hex`]
    /// writes and pack file names use); anything else is refused, so a file
    /// name that parses is exactly the id it names.
    ///
    /// [`to_hex`]: PackId::to_hex
    pub fn from_hex(s: &str) -> Result<PackId, Error> {
        let bad = || Error::BadPackId {
            text: s.chars().take(80).collect(),
        };
        if s.len() != 32 || !s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(s, &mut bytes).map_err(|_| bad())?;
        Ok(PackId(bytes))
    }
}

impl fmt::Display for PackId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PackId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PackId({})", self.to_hex())
    }
}

impl FromStr for PackId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PackId::from_hex(s)
    }
}

/// The fixed header of a pack, as parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Major format version (always [`VERSION_MAJOR`] once parsed).
    pub version_major: u16,
    /// Minor format version.
    pub version_minor: u16,
    /// The pack's id.
    pub id: PackId,
    /// Creation time, milliseconds since the epoch.
    pub created_ms: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.version_major.to_le_bytes());
        h[10..12].copy_from_slice(&self.version_minor.to_le_bytes());
        h[12..28].copy_from_slice(&self.id.0);
        h[28..36].copy_from_slice(&self.created_ms.to_le_bytes());
        // 36..40: flags, zero in version 1.0.
        h
    }

    fn parse(h: &[u8; HEADER_LEN]) -> Result<Header, Corruption> {
        if h[0..8] != MAGIC {
            return Err(Corruption::BadMagic {
                found: hex::encode(&h[0..8]),
            });
        }
        let version_major = u16::from_le_bytes([h[8], h[9]]);
        let version_minor = u16::from_le_bytes([h[10], h[11]]);
        if version_major != VERSION_MAJOR {
            return Err(Corruption::UnknownVersion {
                major: version_major,
                minor: version_minor,
            });
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&h[12..28]);
        let created_ms = u64::from_le_bytes(h[28..36].try_into().expect("8 bytes"));
        Ok(Header {
            version_major,
            version_minor,
            id: PackId(id),
            created_ms,
        })
    }
}

/// The fixed-size trailer at the end of every pack ([`TRAILER_LEN`] bytes).
/// One ranged read of the last [`TRAILER_LEN`] bytes of an object gives its
/// id, its length and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// The pack's id (the header carries it too).
    pub id: PackId,
    /// Length of the whole pack, trailer included.
    pub total_len: u64,
    /// Offset of the footer from the start of the pack.
    pub footer_offset: u64,
    /// SHA-256 of every byte of the pack before this field.
    pub sha256: [u8; 32],
}

impl Trailer {
    /// Parses a trailer. Checks its magic only: whether it matches the rest
    /// of the pack is [`validate`]'s job.
    pub fn parse(bytes: &[u8; TRAILER_LEN]) -> Result<Trailer, Error> {
        Trailer::parse_inner(bytes).map_err(|problem| Error::CorruptPack {
            pack: "trailer".into(),
            problem,
        })
    }

    fn parse_inner(t: &[u8; TRAILER_LEN]) -> Result<Trailer, Corruption> {
        if t[0..8] != TRAILER_MAGIC {
            return Err(Corruption::BadTrailerMagic {
                found: hex::encode(&t[0..8]),
            });
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&t[8..24]);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(&t[TRAILER_HASH_OFFSET..]);
        Ok(Trailer {
            id: PackId(id),
            total_len: u64::from_le_bytes(t[24..32].try_into().expect("8 bytes")),
            footer_offset: u64::from_le_bytes(t[32..40].try_into().expect("8 bytes")),
            sha256,
        })
    }

    /// The trailer's bytes before its hash field (these are hashed).
    fn encode_head(&self) -> [u8; TRAILER_HASH_OFFSET] {
        let mut t = [0u8; TRAILER_HASH_OFFSET];
        t[0..8].copy_from_slice(&TRAILER_MAGIC);
        t[8..24].copy_from_slice(&self.id.0);
        t[24..32].copy_from_slice(&self.total_len.to_le_bytes());
        t[32..40].copy_from_slice(&self.footer_offset.to_le_bytes());
        t
    }

    /// The SHA-256 as 64 lowercase hex digits.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// Builds a pack in memory: header first, records appended, footer and
/// trailer written by [`finish`](PackWriter::finish).
#[derive(Debug)]
pub struct PackWriter {
    id: PackId,
    buf: Vec<u8>,
    records: u64,
    record_bytes: u64,
}

impl PackWriter {
    /// Starts a pack with this id and creation time (ms since the epoch).
    pub fn new(id: PackId, created_ms: u64) -> PackWriter {
        let header = Header {
            version_major: VERSION_MAJOR,
            version_minor: VERSION_MINOR,
            id,
            created_ms,
        };
        let mut buf = Vec::with_capacity(HEADER_LEN + FOOTER_LEN + TRAILER_LEN);
        buf.extend_from_slice(&header.encode());
        PackWriter {
            id,
            buf,
            records: 0,
            record_bytes: 0,
        }
    }

    /// Appends one record. Panics if the record is longer than
    /// [`MAX_RECORD_LEN`] (4 GiB − 2 bytes); a sink seals far below that.
    pub fn push_record(&mut self, record: &[u8]) {
        let len = u32::try_from(record.len())
            .ok()
            .filter(|l| *l <= MAX_RECORD_LEN)
            .expect("a pack record is at most MAX_RECORD_LEN bytes");
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(record);
        self.records += 1;
        self.record_bytes += record.len() as u64;
    }

    /// The pack's id.
    pub fn id(&self) -> PackId {
        self.id
    }

    /// Bytes written so far (header and records; not yet footer or trailer).
    pub fn bytes_len(&self) -> usize {
        self.buf.len()
    }

    /// The length the finished pack will have.
    pub fn finished_len(&self) -> usize {
        self.buf.len() + FOOTER_LEN + TRAILER_LEN
    }

    /// Records pushed so far.
    pub fn record_count(&self) -> u64 {
        self.records
    }

    /// Writes the footer and the trailer and returns the pack's bytes.
    pub fn finish(self) -> Vec<u8> {
        self.finish_with_sha256().0
    }

    /// [`PackWriter::finish`], with the SHA-256 of the whole pack (what
    /// `sha256sum` of it prints: [`PackSummary::sha256`]), from the same
    /// pass that computes the trailer's checksum.
    pub fn finish_with_sha256(mut self) -> (Vec<u8>, [u8; 32]) {
        let footer_offset = self.buf.len() as u64;
        self.buf.reserve_exact(FOOTER_LEN + TRAILER_LEN);
        self.buf.extend_from_slice(&FOOTER_MARKER.to_le_bytes());
        self.buf.extend_from_slice(&self.records.to_le_bytes());
        self.buf.extend_from_slice(&self.record_bytes.to_le_bytes());
        let total_len = (self.buf.len() + TRAILER_LEN) as u64;
        let trailer = Trailer {
            id: self.id,
            total_len,
            footer_offset,
            sha256: [0; 32],
        };
        self.buf.extend_from_slice(&trailer.encode_head());
        let mut hasher = Sha256::new();
        hasher.update(&self.buf);
        let checksum = hasher.clone().finalize();
        self.buf.extend_from_slice(&checksum);
        hasher.update(checksum);
        debug_assert_eq!(self.buf.len() as u64, total_len);
        (self.buf, hasher.finalize().into())
    }
}

/// What [`validate`] found in a valid pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackSummary {
    /// The pack's id.
    pub id: PackId,
    /// Its total length in bytes.
    pub bytes: u64,
    /// Its record count.
    pub records: u64,
    /// The SHA-256 of the whole pack, trailer included: what `sha256sum`
    /// of the file or of its object prints, and the catalog row's
    /// `sha256` (crate docs, "Which hash is which").
    pub sha256: [u8; 32],
    /// The checksum its trailer carries, checked: the SHA-256 of every byte
    /// before the trailer's hash field ([`Trailer::sha256`]); the row's
    /// `trailer_sha256`.
    pub trailer_sha256: [u8; 32],
    /// Its creation time (from the header), ms since the epoch.
    pub created_ms: u64,
}

/// The byte stream under a reader or a validation: reads through a large
/// buffer, hashes what it passes (until the trailer's hash field), counts
/// offsets, and checks the cancellation flag.
struct Stream<'c, R> {
    inner: BufReader<R>,
    hasher: Sha256,
    offset: u64,
    cancel: Option<&'c AtomicBool>,
    unchecked: u64,
}

impl<'c, R: Read> Stream<'c, R> {
    fn new(reader: R, cancel: Option<&'c AtomicBool>) -> Self {
        Stream {
            inner: BufReader::with_capacity(READ_CHUNK, reader),
            hasher: Sha256::new(),
            offset: 0,
            cancel,
            unchecked: 0,
        }
    }

    fn check_cancel(&mut self) -> Result<(), Error> {
        if let Some(cancel) = self.cancel {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
        }
        self.unchecked = 0;
        Ok(())
    }

    /// Feeds up to `len` bytes through the hash, handing each chunk to
    /// `sink`. Fails with `Truncated` if the input ends first.
    fn pass(&mut self, mut len: u64, mut sink: impl FnMut(&[u8])) -> Result<(), Error> {
        while len > 0 {
            if self.unchecked >= CANCEL_CHECK_BYTES - READ_CHUNK as u64 {
                self.check_cancel()?;
            }
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::PackRead {
                        path: None,
                        source: e,
                    })
                }
            };
            if buf.is_empty() {
                return Err(Error::corrupt(Corruption::Truncated {
                    offset: self.offset,
                    missing: len,
                }));
            }
            let n = buf.len().min(usize::try_from(len).unwrap_or(usize::MAX));
            self.hasher.update(&buf[..n]);
            sink(&buf[..n]);
            self.inner.consume(n);
            self.offset += n as u64;
            self.unchecked += n as u64;
            len -= n as u64;
        }
        Ok(())
    }

    fn read_array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        let mut at = 0;
        self.pass(N as u64, |chunk| {
            out[at..at + chunk.len()].copy_from_slice(chunk);
            at += chunk.len();
        })?;
        Ok(out)
    }

    /// Reads the hash field, which is not hashed, and then checks that
    /// nothing follows it.
    fn read_hash_field_and_end(&mut self) -> Result<[u8; 32], Error> {
        let mut out = [0u8; 32];
        let mut at = 0;
        while at < 32 {
            match self.inner.read(&mut out[at..]) {
                Ok(0) => {
                    return Err(Error::corrupt(Corruption::Truncated {
                        offset: self.offset,
                        missing: (32 - at) as u64,
                    }))
                }
                Ok(n) => {
                    at += n;
                    self.offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::PackRead {
                        path: None,
                        source: e,
                    })
                }
            }
        }
        loop {
            match self.inner.fill_buf() {
                Ok([]) => break,
                Ok(rest) => {
                    return Err(Error::corrupt(Corruption::TrailingBytes {
                        offset: self.offset,
                        at_least: rest.len() as u64,
                    }))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::PackRead {
                        path: None,
                        source: e,
                    })
                }
            }
        }
        Ok(out)
    }
}

/// The next thing in a pack after the header.
enum Entry {
    Record(u32),
    Footer,
}

/// The pack decoder shared by [`PackReader`] and [`validate`].
struct Decoder<'c, R> {
    stream: Stream<'c, R>,
    header: Header,
    records: u64,
    record_bytes: u64,
    done: bool,
}

impl<'c, R: Read> Decoder<'c, R> {
    fn new(reader: R, cancel: Option<&'c AtomicBool>) -> Result<Self, Error> {
        let mut stream = Stream::new(reader, cancel);
        stream.check_cancel()?;
        let raw: [u8; HEADER_LEN] = stream.read_array().map_err(|e| match e {
            Error::CorruptPack {
                problem: Corruption::Truncated { .. },
                ..
            } => Error::corrupt(Corruption::TooShort { len: stream.offset }),
            e => e,
        })?;
        let header = Header::parse(&raw).map_err(Error::corrupt)?;
        Ok(Decoder {
            stream,
            header,
            records: 0,
            record_bytes: 0,
            done: false,
        })
    }

    fn next_entry(&mut self) -> Result<Entry, Error> {
        let len = u32::from_le_bytes(self.stream.read_array()?);
        if len == FOOTER_MARKER {
            Ok(Entry::Footer)
        } else {
            Ok(Entry::Record(len))
        }
    }

    /// Reads the footer (its marker already consumed) and the trailer, and
    /// checks every field against what was read.
    fn finish(&mut self) -> Result<PackSummary, Error> {
        let footer_offset = self.stream.offset - 4;
        let count = u64::from_le_bytes(self.stream.read_array()?);
        let bytes = u64::from_le_bytes(self.stream.read_array()?);
        if count != self.records || bytes != self.record_bytes {
            return Err(Error::corrupt(Corruption::FooterMismatch {
                footer_records: count,
                footer_bytes: bytes,
                read_records: self.records,
                read_bytes: self.record_bytes,
            }));
        }
        let head: [u8; TRAILER_HASH_OFFSET] = self.stream.read_array()?;
        // One pass: the hash of everything before the hash field is the
        // trailer's checksum; the same state fed the field gives the whole
        // pack's SHA-256.
        let mut hasher = std::mem::take(&mut self.stream.hasher);
        let computed: [u8; 32] = hasher.clone().finalize().into();
        let stored = self.stream.read_hash_field_and_end()?;
        hasher.update(stored);
        let mut raw = [0u8; TRAILER_LEN];
        raw[..TRAILER_HASH_OFFSET].copy_from_slice(&head);
        raw[TRAILER_HASH_OFFSET..].copy_from_slice(&stored);
        let trailer = Trailer::parse_inner(&raw).map_err(Error::corrupt)?;
        if trailer.id != self.header.id {
            return Err(Error::corrupt(Corruption::TrailerMismatch {
                field: "pack id",
                trailer: trailer.id.to_hex(),
                actual: self.header.id.to_hex(),
            }));
        }
        if trailer.total_len != self.stream.offset {
            return Err(Error::corrupt(Corruption::TrailerMismatch {
                field: "total length",
                trailer: trailer.total_len.to_string(),
                actual: self.stream.offset.to_string(),
            }));
        }
        if trailer.footer_offset != footer_offset {
            return Err(Error::corrupt(Corruption::TrailerMismatch {
                field: "footer offset",
                trailer: trailer.footer_offset.to_string(),
                actual: footer_offset.to_string(),
            }));
        }
        if computed != trailer.sha256 {
            return Err(Error::corrupt(Corruption::ChecksumMismatch {
                trailer: hex::encode(trailer.sha256),
                computed: hex::encode(computed),
            }));
        }
        self.done = true;
        Ok(PackSummary {
            id: self.header.id,
            bytes: self.stream.offset,
            records: self.records,
            sha256: hasher.finalize().into(),
            trailer_sha256: computed,
            created_ms: self.header.created_ms,
        })
    }
}

/// Reads a pack's records one at a time from any [`Read`], holding at most
/// one record (plus a 1 MiB read buffer) in memory. The checksum and the
/// trailer are checked when the last record has been read: a record handed
/// out before that is not yet known to be intact, so a caller that must not
/// act on a corrupt pack validates it first (a staged pack is validated by
/// recovery before anyone reads it).
pub struct PackReader<R> {
    decoder: Decoder<'static, R>,
    summary: Option<PackSummary>,
}

impl<R: Read> PackReader<R> {
    /// Reads and checks the header.
    pub fn new(reader: R) -> Result<PackReader<R>, Error> {
        Ok(PackReader {
            decoder: Decoder::new(reader, None)?,
            summary: None,
        })
    }

    /// The pack's header.
    pub fn header(&self) -> &Header {
        &self.decoder.header
    }

    /// Reads the next record into `buf` (replacing its contents). Returns
    /// `false` once the footer and the trailer have been read and checked.
    pub fn next_record_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, Error> {
        if self.decoder.done {
            return Ok(false);
        }
        match self.decoder.next_entry()? {
            Entry::Record(len) => {
                buf.clear();
                buf.reserve(len as usize);
                self.decoder
                    .stream
                    .pass(len as u64, |c| buf.extend_from_slice(c))?;
                self.decoder.records += 1;
                self.decoder.record_bytes += len as u64;
                Ok(true)
            }
            Entry::Footer => {
                self.summary = Some(self.decoder.finish()?);
                Ok(false)
            }
        }
    }

    /// Reads the next record, or `None` after the last (with the pack
    /// checked).
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>, Error> {
        let mut buf = Vec::new();
        Ok(self.next_record_into(&mut buf)?.then_some(buf))
    }

    /// The summary, once every record has been read and the pack checked.
    pub fn summary(&self) -> Option<&PackSummary> {
        self.summary.as_ref()
    }
}

impl<R: Read> Iterator for PackReader<R> {
    type Item = Result<Vec<u8>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Validates a whole pack in bounded memory (a 1 MiB buffer, whatever the
/// pack's size): magic, major version, the id against `expected_id` (when
/// given), every record length, the footer's counts, the trailer's id,
/// length and footer offset, the SHA-256, and that nothing follows the
/// trailer. Checks `cancel` before reading and at least every
/// [`CANCEL_CHECK_BYTES`] (8 MiB) after, returning [`Error::Cancelled`].
///
/// A corrupt pack gives [`Error::CorruptPack`] (see
/// [`Error::is_corrupt`]); a failing read gives [`Error::PackRead`], which
/// says nothing about the pack.
pub fn validate<R: Read>(
    reader: R,
    expected_id: Option<PackId>,
    cancel: &AtomicBool,
) -> Result<PackSummary, Error> {
    let mut d = Decoder::new(reader, Some(cancel))?;
    if let Some(expected) = expected_id {
        if d.header.id != expected {
            return Err(Error::corrupt(Corruption::IdMismatch {
                expected: expected.to_hex(),
                found: d.header.id.to_hex(),
            }));
        }
    }
    loop {
        match d.next_entry()? {
            Entry::Record(len) => {
                d.stream.pass(len as u64, |_| {})?;
                d.records += 1;
                d.record_bytes += len as u64;
            }
            Entry::Footer => return d.finish(),
        }
    }
}

/// Validates a pack held in memory (see [`validate`]).
pub fn validate_bytes(bytes: &[u8], expected_id: Option<PackId>) -> Result<PackSummary, Error> {
    validate(bytes, expected_id, &AtomicBool::new(false))
}

/// The packs of a bundle (packs written back to back into one object:
/// spool-upload's crate docs, "Bundles"), found from its end by their
/// trailers, last first: each one's byte range in `bytes` and its trailer
/// (parsed, not yet checked against the pack: that is [`validate`]'s job).
/// The walk stops at the first damage, the last item then:
/// [`Error::CorruptPack`] naming the byte the damaged pack ends at.
pub fn bundled_packs(bytes: &[u8]) -> Vec<Result<(std::ops::Range<usize>, Trailer), Error>> {
    let mut found = Vec::new();
    let mut end = bytes.len();
    while end > 0 {
        let damaged = |problem| Error::CorruptPack {
            pack: format!("in a bundle, ending at byte {end}"),
            problem,
        };
        let Some(at) = end.checked_sub(TRAILER_LEN) else {
            found.push(Err(damaged(Corruption::TooShort { len: end as u64 })));
            break;
        };
        let tail: &[u8; TRAILER_LEN] = bytes[at..end].try_into().expect("TRAILER_LEN bytes");
        let trailer = match Trailer::parse(tail) {
            Ok(t) => t,
            Err(Error::CorruptPack { problem, .. }) => {
                found.push(Err(damaged(problem)));
                break;
            }
            Err(e) => {
                found.push(Err(e));
                break;
            }
        };
        // a length shorter than a trailer would never move the walk on
        let Some(start) = usize::try_from(trailer.total_len)
            .ok()
            .filter(|&len| len >= TRAILER_LEN)
            .and_then(|len| end.checked_sub(len))
        else {
            found.push(Err(damaged(Corruption::TrailerMismatch {
                field: "total_len",
                trailer: trailer.total_len.to_string(),
                actual: format!("{end} bytes up to its end, at least {TRAILER_LEN}"),
            })));
            break;
        };
        found.push(Ok((start..end, trailer)));
        end = start;
    }
    found
}

/// A pack that is corrupt in a way its hash cannot show (feature
/// `testing`): two records, the first one's length changed to run into the
/// second, and the trailer's SHA-256 recomputed over the changed bytes, so
/// only a whole-pack validation (framing, footer) refuses it.
#[cfg(any(test, feature = "testing"))]
pub fn testing_misframed_pack(id: PackId) -> Vec<u8> {
    let mut w = PackWriter::new(id, id.timestamp_ms());
    w.push_record(b"one");
    w.push_record(b"two");
    let mut bad = w.finish();
    bad[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&9u32.to_le_bytes());
    let hashed = bad.len() - (TRAILER_LEN - TRAILER_HASH_OFFSET);
    let digest: [u8; 32] = Sha256::digest(&bad[..hashed]).into();
    bad[hashed..].copy_from_slice(&digest);
    bad
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
