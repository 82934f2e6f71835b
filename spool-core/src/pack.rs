//! The pack format (SPEC §4.1): ids, the in-memory writer, the streaming
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

/// The 8 magic bytes that open every pack.
pub const MAGIC: [u8; 8] = *b"SPOOLPK\x01";
/// The 8 magic bytes that open the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"SPOOLEND";
/// The major version this crate writes and the only one it reads.
pub const VERSION_MAJOR: u16 = 1;
/// The minor version this crate writes. Readers accept any minor version of
/// a major version they know (minor versions only add what old readers may
/// ignore: see the crate docs).
pub const VERSION_MINOR: u16 = 0;
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
    pub fn finish(mut self) -> Vec<u8> {
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
        let hash = Sha256::digest(&self.buf);
        self.buf.extend_from_slice(&hash);
        debug_assert_eq!(self.buf.len() as u64, total_len);
        self.buf
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
    /// Its SHA-256 (as carried by the trailer, and checked).
    pub sha256: [u8; 32],
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
        let computed: [u8; 32] = std::mem::take(&mut self.stream.hasher).finalize().into();
        let stored = self.stream.read_hash_field_and_end()?;
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
            sha256: computed,
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pack(records: &[&[u8]]) -> (PackId, Vec<u8>) {
        let id = PackId::generate();
        let mut w = PackWriter::new(id, 1_700_000_000_000);
        for r in records {
            w.push_record(r);
        }
        (id, w.finish())
    }

    fn problem(e: Error) -> Corruption {
        match e {
            Error::CorruptPack { problem, .. } => problem,
            other => panic!("expected a corrupt pack, got {other:?}"),
        }
    }

    /// The test aid other crates' tests rely on: its trailer's SHA-256 is
    /// that of the bytes before it (a hash check alone passes it), its id is
    /// the one asked for, and a whole validation refuses its framing.
    #[test]
    fn the_misframed_test_pack_hashes_right_and_fails_only_whole_validation() {
        let id = PackId::generate();
        let bad = testing_misframed_pack(id);
        // the SHA-256 is the last 32 bytes, over all that precedes them
        let hashed = bad.len() - 32;
        let digest: [u8; 32] = Sha256::digest(&bad[..hashed]).into();
        assert_eq!(&bad[hashed..], &digest[..], "the trailer's hash is right");
        let trailer: &[u8; TRAILER_LEN] = bad[bad.len() - TRAILER_LEN..].try_into().unwrap();
        assert_eq!(Trailer::parse(trailer).unwrap().sha256, digest);
        assert_eq!(
            Header::parse(bad[..HEADER_LEN].try_into().unwrap())
                .unwrap()
                .id,
            id
        );
        let problem = problem(validate_bytes(&bad, Some(id)).unwrap_err());
        assert!(
            !matches!(problem, Corruption::ChecksumMismatch { .. }),
            "refused for its framing, not its hash: {problem:?}"
        );
    }

    #[test]
    fn ids_are_time_ordered_hex_round_trips() {
        let a = PackId::with_timestamp(1_000);
        let b = PackId::with_timestamp(1_001);
        assert!(a < b);
        assert_eq!(a.timestamp_ms(), 1_000);
        let hex = a.to_hex();
        assert_eq!(hex.len(), 32);
        assert!(hex.starts_with("0000000003e8"));
        assert_eq!(PackId::from_hex(&hex).unwrap(), a);
        assert_eq!(hex.parse::<PackId>().unwrap(), a);
        assert_eq!(a.to_string(), hex);
        let now = PackId::generate();
        assert!(now.timestamp_ms() > 1_600_000_000_000);
    }

    #[test]
    fn ids_refuse_anything_but_32_lowercase_hex() {
        let good = PackId::generate().to_hex();
        for bad in [
            String::new(),
            good[..31].to_string(),
            format!("{good}0"),
            good.to_uppercase(),
            format!("../{}", &good[3..]),
            format!("{}/", &good[..31]),
            "g".repeat(32),
        ] {
            assert!(PackId::from_hex(&bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn layout_is_as_documented() {
        let id = PackId([7; 16]);
        let mut w = PackWriter::new(id, 0x0102_0304_0506_0708);
        w.push_record(b"abc");
        assert_eq!(w.bytes_len(), HEADER_LEN + 4 + 3);
        let finished = w.finished_len();
        let p = w.finish();
        assert_eq!(p.len(), finished);
        assert_eq!(&p[0..8], b"SPOOLPK\x01");
        assert_eq!(&p[8..12], &[1, 0, 0, 0]);
        assert_eq!(&p[12..28], &[7; 16]);
        assert_eq!(&p[28..36], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&p[36..40], &[0; 4]);
        assert_eq!(&p[40..44], &3u32.to_le_bytes());
        assert_eq!(&p[44..47], b"abc");
        assert_eq!(&p[47..51], &[0xff; 4]);
        assert_eq!(&p[51..59], &1u64.to_le_bytes());
        assert_eq!(&p[59..67], &3u64.to_le_bytes());
        let t: [u8; TRAILER_LEN] = p[p.len() - TRAILER_LEN..].try_into().unwrap();
        assert_eq!(&t[0..8], b"SPOOLEND");
        let trailer = Trailer::parse(&t).unwrap();
        assert_eq!(trailer.id, id);
        assert_eq!(trailer.total_len, p.len() as u64);
        assert_eq!(trailer.footer_offset, 47);
        let want: [u8; 32] = Sha256::digest(&p[..p.len() - 32]).into();
        assert_eq!(trailer.sha256, want);
        assert_eq!(p.len(), 67 + TRAILER_LEN);
    }

    #[test]
    fn reader_streams_records_and_checks_the_pack() {
        let (id, p) = pack(&[b"one", b"", b"three"]);
        let mut r = PackReader::new(&p[..]).unwrap();
        assert_eq!(r.header().id, id);
        let got: Vec<Vec<u8>> = r.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![b"one".to_vec(), vec![], b"three".to_vec()]);
        let s = r.summary().unwrap();
        assert_eq!((s.id, s.records, s.bytes), (id, 3, p.len() as u64));
    }

    #[test]
    fn validate_accepts_an_empty_pack_and_checks_the_id() {
        let (id, p) = pack(&[]);
        assert_eq!(p.len() as u64, MIN_PACK_LEN);
        let s = validate_bytes(&p, Some(id)).unwrap();
        assert_eq!(s.records, 0);
        let other = PackId::generate();
        assert!(matches!(
            problem(validate_bytes(&p, Some(other)).unwrap_err()),
            Corruption::IdMismatch { .. }
        ));
    }

    #[test]
    fn every_single_byte_flip_is_caught() {
        let (id, p) = pack(&[b"hello", b"world!", &[0u8; 100]]);
        for i in 0..p.len() {
            for bit in [0x01u8, 0x80] {
                let mut q = p.clone();
                q[i] ^= bit;
                let r = validate_bytes(&q, Some(id));
                assert!(
                    r.is_err(),
                    "flip of bit {bit:#x} at byte {i} went unnoticed"
                );
                assert!(r.unwrap_err().is_corrupt());
                // The streaming reader must not report success either.
                let all: Result<Vec<_>, _> = match PackReader::new(&q[..]) {
                    Ok(r) => r.collect(),
                    Err(e) => Err(e),
                };
                assert!(all.is_err(), "reader accepted a flip at byte {i}");
            }
        }
    }

    #[test]
    fn every_truncation_and_extension_is_caught() {
        let (id, p) = pack(&[b"hello", b"world!"]);
        for len in 0..p.len() {
            let e = validate_bytes(&p[..len], Some(id)).unwrap_err();
            assert!(e.is_corrupt(), "truncation to {len}: {e}");
        }
        let mut longer = p.clone();
        longer.push(0);
        assert!(matches!(
            problem(validate_bytes(&longer, Some(id)).unwrap_err()),
            Corruption::TrailingBytes { .. }
        ));
    }

    #[test]
    fn a_cut_in_the_hash_field_names_the_bytes_it_lacks() {
        let (id, p) = pack(&[b"hello", b"world!"]);
        for cut in p.len() - 32..p.len() {
            match problem(validate_bytes(&p[..cut], Some(id)).unwrap_err()) {
                Corruption::Truncated { offset, missing } => {
                    assert_eq!((offset, missing), (cut as u64, (p.len() - cut) as u64));
                }
                other => panic!("a cut at {cut}: {other:?}"),
            }
        }
    }

    /// A reader over `data` that hands out at most `max_read` bytes a
    /// call, is interrupted (EINTR) before every read when `interrupt`,
    /// and fails once with EIO on reaching `fail_at`.
    struct Rough<'a> {
        data: &'a [u8],
        pos: usize,
        max_read: usize,
        interrupt: bool,
        interrupted: bool,
        fail_at: Option<usize>,
    }

    impl<'a> Rough<'a> {
        fn new(data: &'a [u8], max_read: usize) -> Self {
            Rough {
                data,
                pos: 0,
                max_read,
                interrupt: false,
                interrupted: false,
                fail_at: None,
            }
        }
    }

    impl Read for Rough<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.interrupt && !self.interrupted {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            self.interrupted = false;
            if self.fail_at == Some(self.pos) {
                self.fail_at = None;
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let end = self.fail_at.unwrap_or(usize::MAX);
            let end = end.min(self.data.len()).min(self.pos + self.max_read);
            let n = (end - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn short_and_interrupted_reads_read_and_validate_as_one_buffer_does() {
        let records: [&[u8]; 3] = [b"hello", b"", b"a longer record, of 35 bytes or so"];
        let (id, p) = pack(&records);
        let whole = validate_bytes(&p, Some(id)).unwrap();
        for max_read in [1, 3, 7, 64] {
            for interrupt in [false, true] {
                let rough = || Rough {
                    interrupt,
                    ..Rough::new(&p, max_read)
                };
                let got = validate(rough(), Some(id), &AtomicBool::new(false));
                assert_eq!(got.unwrap(), whole, "{max_read} a read, EINTR {interrupt}");
                let read: Vec<Vec<u8>> = PackReader::new(rough())
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert_eq!(read, records, "{max_read} a read, EINTR {interrupt}");
            }
        }
    }

    #[test]
    fn a_failing_read_anywhere_is_a_read_error_never_skipped() {
        // Anywhere: in the header, a record, the trailer, its hash field,
        // and at the very end, where the reader looks for trailing bytes.
        let (id, p) = pack(&[b"hello", b"world!"]);
        for fail_at in 0..=p.len() {
            for max_read in [1, 5] {
                let rough = Rough {
                    fail_at: Some(fail_at),
                    ..Rough::new(&p, max_read)
                };
                match validate(rough, Some(id), &AtomicBool::new(false)) {
                    Err(Error::PackRead { path: None, source }) => {
                        assert_eq!(source.raw_os_error(), Some(libc::EIO), "at {fail_at}");
                    }
                    other => panic!("an EIO at {fail_at} ({max_read} a read): {other:?}"),
                }
            }
        }
    }

    #[test]
    fn now_ms_is_the_wall_clock_in_milliseconds() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = now_ms();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(
            (before.as_millis() as u64..=after.as_millis() as u64).contains(&now),
            "{before:?} {now} {after:?}"
        );
    }

    #[test]
    fn a_corruption_names_the_offset_it_is_at() {
        let (id, p) = pack(&[b"hello", b"world!"]);
        // A cut inside the second record: the offset is where it ends.
        let cut = HEADER_LEN + 4 + 5 + 4 + 2;
        let e = problem(validate_bytes(&p[..cut], Some(id)).unwrap_err());
        assert!(matches!(e, Corruption::Truncated { .. }), "{e}");
        assert_eq!(e.offset(), Some(cut as u64), "{e}");
        let mut q = p.clone();
        q[0] = b'X';
        assert_eq!(
            problem(validate_bytes(&q, None).unwrap_err()).offset(),
            Some(0)
        );
        let mut q = p.clone();
        q[8] = 2;
        assert_eq!(
            problem(validate_bytes(&q, None).unwrap_err()).offset(),
            Some(8)
        );
        let mut longer = p.clone();
        longer.push(0);
        assert_eq!(
            problem(validate_bytes(&longer, Some(id)).unwrap_err()).offset(),
            Some(p.len() as u64)
        );
        let mut flipped = p.clone();
        flipped[HEADER_LEN + 5] ^= 1;
        let e = problem(validate_bytes(&flipped, Some(id)).unwrap_err());
        assert!(matches!(e, Corruption::ChecksumMismatch { .. }), "{e}");
        assert_eq!(e.offset(), None, "a checksum concerns the whole pack");
    }

    #[test]
    fn wrong_magic_and_unknown_major_version_are_named() {
        let (_, p) = pack(&[b"x"]);
        let mut q = p.clone();
        q[0] = b'X';
        assert!(matches!(
            problem(validate_bytes(&q, None).unwrap_err()),
            Corruption::BadMagic { .. }
        ));
        let mut q = p.clone();
        q[8] = 2;
        let e = validate_bytes(&q, None).unwrap_err();
        assert!(e.to_string().contains("version 2.0"), "{e}");
        assert!(matches!(
            problem(e),
            Corruption::UnknownVersion { major: 2, .. }
        ));
    }

    /// A pack rewritten consistently (checksum recomputed) but whose
    /// trailer lies about its id, length or footer is still refused.
    #[test]
    fn a_lying_trailer_with_a_good_checksum_is_caught() {
        let (id, p) = pack(&[b"abc"]);
        let t0 = p.len() - TRAILER_LEN;
        for (field, at) in [
            ("pack id", t0 + 8),
            ("total length", t0 + 24),
            ("footer offset", t0 + 32),
        ] {
            let mut q = p.clone();
            q[at] ^= 1;
            let n = q.len();
            let h: [u8; 32] = Sha256::digest(&q[..n - 32]).into();
            q[n - 32..].copy_from_slice(&h);
            match problem(validate_bytes(&q, Some(id)).unwrap_err()) {
                Corruption::TrailerMismatch { field: f, .. } => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        // A footer that lies about the count, checksum recomputed.
        let mut q = p.clone();
        q[HEADER_LEN + 4 + 3 + 4] ^= 1;
        let n = q.len();
        let h: [u8; 32] = Sha256::digest(&q[..n - 32]).into();
        q[n - 32..].copy_from_slice(&h);
        assert!(matches!(
            problem(validate_bytes(&q, Some(id)).unwrap_err()),
            Corruption::FooterMismatch { .. }
        ));
    }

    /// A reader that counts the bytes read through it.
    struct Counting<'a, R>(R, &'a std::cell::Cell<u64>);
    impl<R: Read> Read for Counting<'_, R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n as u64);
            Ok(n)
        }
    }

    /// A reader that counts bytes and raises the flag after `raise_at`.
    struct Raiser<'a> {
        left: u64,
        pos: u64,
        raise_at: u64,
        flag: &'a AtomicBool,
    }
    impl Read for Raiser<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = (buf.len() as u64).min(self.left) as usize;
            buf[..n].fill(0);
            self.left -= n as u64;
            self.pos += n as u64;
            if self.pos >= self.raise_at {
                self.flag.store(true, Ordering::Relaxed);
            }
            Ok(n)
        }
    }

    /// A header, then a record claiming 4 GiB of zeros, validated with a
    /// cancel raised when `raise_at` bytes have been read: the bytes read
    /// by the time the validation returned `Cancelled`.
    fn bytes_read_until_cancelled(raise_at: u64) -> u64 {
        let id = PackId::generate();
        let mut head = PackWriter::new(id, 0).finish()[..HEADER_LEN].to_vec();
        head.extend_from_slice(&MAX_RECORD_LEN.to_le_bytes());
        let flag = AtomicBool::new(false);
        let zeros = Raiser {
            left: raise_at + (16 << 20),
            pos: head.len() as u64,
            raise_at,
            flag: &flag,
        };
        let counter = std::cell::Cell::new(0u64);
        let r = Counting((&head[..]).chain(zeros), &counter);
        let e = validate(r, Some(id), &flag).unwrap_err();
        assert!(matches!(e, Error::Cancelled), "{e:?}");
        counter.get()
    }

    #[test]
    fn validation_notices_a_cancel_within_8_mib() {
        let raise_at = 20 << 20;
        let read = bytes_read_until_cancelled(raise_at);
        assert!(read >= raise_at, "{read}");
        assert!(
            read <= raise_at + CANCEL_CHECK_BYTES,
            "read {read} bytes past a cancel raised at {raise_at}"
        );
        // Raised before the start: nothing read past the first buffer.
        let mut head = PackWriter::new(PackId::generate(), 0).finish()[..HEADER_LEN].to_vec();
        head.extend_from_slice(&MAX_RECORD_LEN.to_le_bytes());
        let flag = AtomicBool::new(true);
        assert!(matches!(
            validate(&head[..], None, &flag).unwrap_err(),
            Error::Cancelled
        ));
    }

    #[test]
    fn a_cancel_is_noticed_within_8_mib_wherever_it_is_raised() {
        // The flag is read before every 1 MiB read once 7 MiB have passed
        // since it was last read: a cancel raised just after a check is
        // noticed at most 8 MiB of reading later, wherever it falls.
        for step in 0..18u64 {
            let raise_at = (1 << 20) + step * (512 << 10) + 1000;
            let read = bytes_read_until_cancelled(raise_at);
            assert!(
                read <= raise_at + CANCEL_CHECK_BYTES,
                "read {read} bytes past a cancel raised at {raise_at}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_records_round_trip(records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)) {
            let id = PackId::generate();
            let mut w = PackWriter::new(id, 5);
            for r in &records { w.push_record(r); }
            prop_assert_eq!(w.record_count(), records.len() as u64);
            let p = w.finish();
            let s = validate_bytes(&p, Some(id)).unwrap();
            prop_assert_eq!(s.records, records.len() as u64);
            prop_assert_eq!(s.created_ms, 5);
            let got: Vec<Vec<u8>> = PackReader::new(&p[..]).unwrap().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, records);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = validate_bytes(&bytes, None);
            if let Ok(r) = PackReader::new(&bytes[..]) { for _ in r {} }
        }
    }

    #[test]
    fn a_trailer_spells_its_hash_as_sha256sum_does_and_an_id_debugs_as_its_hex() {
        let (id, p) = pack(&[b"abc"]);
        let t: [u8; TRAILER_LEN] = p[p.len() - TRAILER_LEN..].try_into().unwrap();
        let trailer = Trailer::parse(&t).unwrap();
        // `head -c -32 pack | sha256sum`: the hash of all but its own field.
        let digest = Sha256::digest(&p[..p.len() - 32]);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(trailer.sha256_hex(), hex);
        assert_eq!(format!("{id:?}"), format!("PackId({id})"));
        assert_eq!(id.to_string().len(), 32);
    }
}
