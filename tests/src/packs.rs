//! Real packs for upload tests, written with spool-core's `PackWriter`.

use std::path::Path;

use spool_core::pack::{PackId, PackWriter};
use spool_upload::UploadItem;

/// Writes a valid pack of about `approx_bytes` (at least one record) into
/// `dir` as `<id>.ready`, with records filled from `fill`, and returns it as
/// an upload item with its bytes.
pub fn write_pack_with(
    dir: &Path,
    id: PackId,
    approx_bytes: usize,
    fill: u8,
) -> (UploadItem, Vec<u8>) {
    let mut w = PackWriter::new(id, id.timestamp_ms());
    let record = vec![fill; 64 << 10];
    while w.finished_len() + 4 < approx_bytes {
        let room = approx_bytes - w.finished_len() - 4;
        w.push_record(&record[..room.min(record.len())]);
    }
    if w.record_count() == 0 {
        w.push_record(&[fill]);
    }
    let bytes = w.finish();
    let path = dir.join(format!("{}.ready", id.to_hex()));
    std::fs::write(&path, &bytes).expect("write test pack");
    let item = UploadItem {
        path,
        pack_id: id,
        size: bytes.len() as u64,
    };
    (item, bytes)
}

/// [`write_pack_with`] with a fresh id and records of `0xA5`.
pub fn write_pack(dir: &Path, approx_bytes: usize) -> (UploadItem, Vec<u8>) {
    write_pack_with(dir, PackId::generate(), approx_bytes, 0xA5)
}
