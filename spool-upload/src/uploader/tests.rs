//! The uploader's unit tests: corrupt packs never sent, a single PUT
//! validating the whole pack, bodies read in chunks, parts in flight.

use super::*;

/// Stages a valid pack of about `bytes` record bytes in `dir`, then
/// flips one byte in its middle (a record byte: the size, id and trailer
/// still check out, only the checksum does not).
fn corrupt_pack(dir: &FsPath, bytes: usize) -> UploadItem {
    let id = PackId::generate();
    let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
    w.push_record(&vec![7u8; bytes]);
    let mut body = w.finish();
    let mid = body.len() / 2;
    body[mid] ^= 0x01;
    let path = dir.join(format!("{id}.ready"));
    std::fs::write(&path, &body).unwrap();
    UploadItem {
        path,
        pack_id: id,
        size: body.len() as u64,
    }
}

async fn upload_corrupt(multipart: bool) {
    let dir = tempfile::tempdir().unwrap();
    let fault = Arc::new(crate::testing::FaultStore::new(Arc::new(
        object_store::memory::InMemory::new(),
    )));
    let store = Store::new(fault.clone(), "p", "memory", true).unwrap();
    let config = UploadConfig {
        multipart_threshold: if multipart { 1024 } else { 1 << 30 },
        part_size: 1000,
        ..UploadConfig::default()
    };
    let up = Uploader::new(store, config).unwrap();
    let item = corrupt_pack(dir.path(), 10_000);
    let r = up.upload_one(item, &CancellationToken::new()).await;
    let f = r.outcome.failure().expect("a corrupt pack fails");
    assert!(f.corrupt && !f.retryable && !f.cancelled, "{f:?}");
    assert!(
        matches!(f.error, Error::ChecksumMismatch { .. }),
        "{}",
        f.error
    );
    assert!(f.error.to_string().contains("quarantined"), "{}", f.error);
    let listed: Vec<_> = futures::TryStreamExt::try_collect(fault.inner().list(None))
        .await
        .unwrap();
    assert!(listed.is_empty(), "nothing at the key: {listed:?}");
    use crate::testing::Op;
    if multipart {
        assert!(fault.calls(Op::PutPart) > 1, "the parts streamed");
        assert_eq!(fault.calls(Op::Complete), 0, "never completed");
        assert_eq!(fault.open_multipart_uploads(), 0, "aborted");
    } else {
        assert_eq!(fault.calls(Op::Put), 0, "never PUT");
    }
}

/// A pack whose trailer is damaged (its magic, the pack id
/// it names, the length it gives, or a file shorter than a trailer) is
/// corrupt: it fails as corrupt (so it is quarantined, not rejected)
/// and nothing is sent.
#[tokio::test]
async fn a_pack_with_a_damaged_trailer_is_corrupt_and_never_sent() {
    for (what, damage) in [("magic", 0usize), ("id", 12), ("length", 30)] {
        let dir = tempfile::tempdir().unwrap();
        let id = PackId::generate();
        let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
        w.push_record(b"rec");
        let mut body = w.finish();
        let at = body.len() - TRAILER_LEN + damage;
        body[at] ^= 0x5a;
        let path = dir.path().join(format!("{id}.ready"));
        std::fs::write(&path, &body).unwrap();
        let item = UploadItem {
            path,
            pack_id: id,
            size: body.len() as u64,
        };
        let fault = Arc::new(crate::testing::FaultStore::new(Arc::new(
            object_store::memory::InMemory::new(),
        )));
        let store = Store::new(fault.clone(), "p", "memory", true).unwrap();
        let up = Uploader::new(store, UploadConfig::default()).unwrap();
        let r = up.upload_one(item, &CancellationToken::new()).await;
        let f = r.outcome.failure().expect("a damaged trailer fails");
        assert!(
            f.corrupt && !f.retryable && !f.cancelled,
            "{what}: {f:?} {}",
            f.error
        );
        assert!(f.error.to_string().contains("quarantined"), "{}", f.error);
        assert_eq!(fault.calls(crate::testing::Op::Put), 0, "{what}: never PUT");
    }
}

#[tokio::test]
async fn a_single_put_of_bytes_that_do_not_match_the_checksum_is_never_sent() {
    upload_corrupt(false).await;
}

#[tokio::test]
async fn a_multipart_upload_of_bytes_that_do_not_match_the_checksum_is_aborted() {
    upload_corrupt(true).await;
}

/// A single PUT validates the whole pack from the bytes it
/// holds (one read, one hash): a valid pack comes back with its summary,
/// on a fresh PUT and on finding itself already stored; a pack whose
/// hash matches its trailer but whose framing is broken (a record
/// length running into the footer, the hash recomputed) is corrupt and
/// never sent, which the hash alone would not catch. A multipart upload
/// returns no summary (its caller validates).
#[tokio::test]
async fn a_single_put_validates_the_whole_pack_and_returns_its_summary() {
    use crate::testing::Op;
    let dir = tempfile::tempdir().unwrap();
    let fault = Arc::new(crate::testing::FaultStore::new(Arc::new(
        object_store::memory::InMemory::new(),
    )));
    let store = Store::new(fault.clone(), "p", "memory", true).unwrap();
    let up = Uploader::new(store.clone(), UploadConfig::default()).unwrap();
    let write = |id: PackId, bytes: &[u8]| {
        let path = dir.path().join(format!("{id}.ready"));
        std::fs::write(&path, bytes).unwrap();
        UploadItem {
            path,
            pack_id: id,
            size: bytes.len() as u64,
        }
    };
    let id = PackId::generate();
    let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
    for r in [&b"one"[..], b"two", b"three"] {
        w.push_record(r);
    }
    let good = w.finish();
    assert!(up.validates_whole(good.len() as u64));
    let item = write(id, &good);
    for round in ["fresh", "already stored"] {
        let r = up.upload_one(item.clone(), &CancellationToken::new()).await;
        assert!(r.outcome.is_stored(), "{round}: {:?}", r.outcome);
        let s = r.summary.unwrap_or_else(|| panic!("{round}: no summary"));
        assert_eq!(
            (s.id, s.records, s.bytes),
            (id, 3, good.len() as u64),
            "{round}"
        );
    }

    // the first record's length now runs into the footer; the hash is
    // made to match again
    let bad_id = PackId::generate();
    let bad = spool_core::pack::testing_misframed_pack(bad_id);
    let puts = fault.calls(Op::Put);
    let r = up
        .upload_one(write(bad_id, &bad), &CancellationToken::new())
        .await;
    let f = r.outcome.failure().expect("a mis-framed pack fails");
    assert!(f.corrupt && !f.retryable, "{f:?}");
    assert!(matches!(f.error, Error::CorruptPack { .. }), "{}", f.error);
    assert!(f.error.to_string().contains("quarantined"), "{}", f.error);
    assert!(r.summary.is_none());
    assert_eq!(fault.calls(Op::Put), puts, "never PUT");

    let multipart = Uploader::new(
        store,
        UploadConfig {
            multipart_threshold: 16,
            part_size: 5 << 20,
            ..UploadConfig::default()
        },
    )
    .unwrap();
    let other = PackId::generate();
    let mut w = spool_core::PackWriter::new(other, spool_core::pack::now_ms());
    w.push_record(b"a record");
    let bytes = w.finish();
    assert!(!multipart.validates_whole(bytes.len() as u64));
    let r = multipart
        .upload_one(write(other, &bytes), &CancellationToken::new())
        .await;
    assert!(r.outcome.is_stored() && r.summary.is_none(), "{r:?}");
}

#[test]
fn a_body_is_read_in_chunks_of_at_most_read_chunk_and_its_end_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body");
    let bytes: Vec<u8> = (0..(READ_CHUNK * 5 / 2)).map(|i| i as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    let size = bytes.len() as u64;
    let b = read_body(&path, size).unwrap();
    let lens: Vec<usize> = b.chunks.iter().map(Bytes::len).collect();
    assert_eq!(lens, vec![READ_CHUNK, READ_CHUNK, READ_CHUNK / 2]);
    assert_eq!(b.chunks.concat(), bytes);
    assert_eq!((b.read, b.grown), (size, false));
    assert_eq!(b.tail, bytes[bytes.len() - TRAILER_LEN..]);
    // staged as shorter than the file: it grew
    let b = read_body(&path, size - 10).unwrap();
    assert_eq!((b.read, b.grown), (size - 10, true));
    // staged as longer: it read short
    let b = read_body(&path, size + 10).unwrap();
    assert_eq!((b.read, b.grown), (size, false));
}

#[test]
fn the_body_hash_leaves_out_the_hash_field_whatever_the_chunking() {
    let id = PackId::generate();
    let mut w = spool_core::PackWriter::new(id, 1);
    w.push_record(b"some bytes");
    let body = w.finish();
    let trailer = Trailer::parse(body[body.len() - TRAILER_LEN..].try_into().unwrap()).unwrap();
    let item = UploadItem {
        path: "x".into(),
        pack_id: id,
        size: body.len() as u64,
    };
    for chunk in [1, 7, 31, 32, 33, body.len()] {
        let mut h = BodyHash::new(body.len() as u64);
        for c in body.chunks(chunk) {
            h.update(c);
        }
        h.check(&item, &trailer).unwrap();
    }
}

#[test]
fn tail_keeps_the_last_trailer_len_bytes() {
    let mut tail = Vec::new();
    keep_tail(&mut tail, &[1; 10]);
    keep_tail(&mut tail, &[2; TRAILER_LEN - 3]);
    assert_eq!(tail.len(), TRAILER_LEN);
    assert_eq!(&tail[..3], &[1, 1, 1]);
    keep_tail(&mut tail, &[3; TRAILER_LEN + 5]);
    assert_eq!(tail, vec![3; TRAILER_LEN]);
}

/// A multipart upload keeps `part_concurrency` parts in flight at once
/// (and no more): with every part held 50 ms by the store, the most
/// part bytes in flight are exactly `part_concurrency` parts.
#[tokio::test]
async fn a_multipart_upload_has_part_concurrency_parts_in_flight() {
    for parts in [1usize, 3] {
        let dir = tempfile::tempdir().unwrap();
        let fault = Arc::new(crate::testing::FaultStore::new(Arc::new(
            object_store::memory::InMemory::new(),
        )));
        fault.script(crate::testing::Rule::new(
            crate::testing::Op::PutPart,
            crate::testing::Action::Delay(std::time::Duration::from_millis(50)),
        ));
        let store = Store::new(fault.clone(), "p", "memory", true).unwrap();
        let config = UploadConfig {
            multipart_threshold: 1024,
            part_size: 1000,
            part_concurrency: parts,
            ..UploadConfig::default()
        };
        let up = Uploader::new(store, config).unwrap();
        let id = PackId::generate();
        let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
        w.push_record(&[9u8; 10_000]);
        let body = w.finish();
        let path = dir.path().join(format!("{id}.ready"));
        std::fs::write(&path, &body).unwrap();
        let item = UploadItem {
            path,
            pack_id: id,
            size: body.len() as u64,
        };
        let r = up.upload_one(item, &CancellationToken::new()).await;
        assert!(r.outcome.is_stored(), "{:?}", r.outcome);
        assert!(fault.calls(crate::testing::Op::PutPart) > 3 * parts);
        assert_eq!(
            fault.max_bytes_in_flight(),
            1000 * parts as u64,
            "{parts} parts of 1000 bytes in flight at once"
        );
    }
}
