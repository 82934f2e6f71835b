//! Unit tests of the pack format: layout, round trips, every corruption,
//! short and failing reads, the cancel window.

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
fn the_summary_carries_the_whole_pack_sha256_and_the_trailer_checksum() {
    // `sha256` is what `sha256sum` of the pack (or of its object) prints;
    // `trailer_sha256` what the trailer says of the bytes before it
    let mut w = PackWriter::new(PackId::generate(), 1_700_000_000_000);
    w.push_record(b"one");
    w.push_record(b"two");
    let (p, sha256) = w.finish_with_sha256();
    let whole: [u8; 32] = Sha256::digest(&p).into();
    let before_hash: [u8; 32] = Sha256::digest(&p[..p.len() - 32]).into();
    assert_eq!(sha256, whole);
    let s = validate(&p[..], None, &AtomicBool::new(false)).unwrap();
    assert_eq!(s.sha256, whole);
    assert_eq!(s.trailer_sha256, before_hash);
    assert_ne!(s.sha256, s.trailer_sha256);
    let mut r = PackReader::new(&p[..]).unwrap();
    assert_eq!(r.by_ref().count(), 2);
    assert_eq!(r.summary().unwrap().sha256, whole);
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

/// A bundle's packs come back last first, each with its range and trailer;
/// damage ends the walk with an error naming where (too few bytes for a
/// trailer, a broken trailer, a length past the start or shorter than a
/// trailer, which would never move the walk on).
#[test]
fn a_bundle_walks_back_by_its_trailers_and_stops_at_damage() {
    let (a, pa) = pack(&[b"one"]);
    let (b, pb) = pack(&[b"two", b"three"]);
    let bundle = [pa.clone(), pb.clone()].concat();
    let walked: Vec<_> = bundled_packs(&bundle)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(walked.len(), 2);
    assert_eq!(
        (walked[0].1.id, walked[0].0.clone()),
        (b, pa.len()..bundle.len())
    );
    assert_eq!((walked[1].1.id, walked[1].0.clone()), (a, 0..pa.len()));
    assert!(bundled_packs(&[]).is_empty());

    let last_err = |bytes: &[u8]| {
        let mut walked = bundled_packs(bytes);
        let e = walked.pop().unwrap().unwrap_err();
        (walked.len(), problem(e))
    };
    // five stray bytes before the packs
    let stray = [vec![0u8; 5], pa.clone(), pb.clone()].concat();
    assert_eq!(last_err(&stray), (2, Corruption::TooShort { len: 5 }));
    // the last pack's trailer magic broken
    let mut broken = bundle.clone();
    let at = broken.len() - TRAILER_LEN;
    broken[at] ^= 0xff;
    assert!(matches!(
        last_err(&broken),
        (0, Corruption::BadTrailerMagic { .. })
    ));
    // a trailer naming more bytes than there are, or fewer than a trailer
    for len in [bundle.len() as u64 + 1, 0, TRAILER_LEN as u64 - 1] {
        let mut bad = bundle.clone();
        let at = bad.len() - TRAILER_LEN + 24;
        bad[at..at + 8].copy_from_slice(&len.to_le_bytes());
        assert!(
            matches!(
                last_err(&bad),
                (
                    0,
                    Corruption::TrailerMismatch {
                        field: "total_len",
                        ..
                    }
                )
            ),
            "total_len {len}"
        );
    }
}
