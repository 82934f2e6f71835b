//! Fixtures for the inspection commands' black-box tests (`ls`, `cat`,
//! `status`, `unblock`): a spool root whose embedded catalog
//! (`ROOT/.catalog.db`, SQLite) and store (`ROOT/.store`, a local
//! directory) are filled through the real libraries, as a service would
//! fill them, and a `spool lock hold` child that keeps a directory live.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use object_store::ObjectStoreExt;
use spool_catalog::PackRow;
use spool_core::pack::{PackId, PackWriter};
use spool_upload::{object_key, ClientConfig, Store};

/// One pack put into the embedded store and indexed in the embedded catalog.
#[derive(Debug, Clone)]
pub struct StoredPack {
    /// Its id.
    pub id: PackId,
    /// Its bytes, as written.
    pub bytes: Vec<u8>,
    /// Its records, as written.
    pub records: Vec<Vec<u8>>,
    /// Where the object is on disk (inside `ROOT/.store`).
    pub object_path: PathBuf,
    /// Its catalog row.
    pub row: PackRow,
}

/// The embedded catalog URL of `root`.
pub fn catalog_url(root: &Path) -> String {
    format!("sqlite://{}/.catalog.db", root.display())
}

/// The embedded store URL of `root`.
pub fn store_url(root: &Path) -> String {
    format!("file://{}/.store", root.display())
}

/// A valid pack of `records` created at `created_ms`, and the catalog row a
/// service would write for it when stored in `store` (under its object key).
pub fn pack_and_row(
    store: &Store,
    created_ms: u64,
    records: &[Vec<u8>],
) -> (PackId, Vec<u8>, PackRow) {
    let id = PackId::with_timestamp(created_ms);
    let mut w = PackWriter::new(id, created_ms);
    for r in records {
        w.push_record(r);
    }
    let bytes = w.finish();
    let summary = spool_core::pack::validate_bytes(&bytes, Some(id)).expect("a valid pack");
    let row = PackRow {
        object_offset: 0,
        pack_id: id.to_hex(),
        object_key: object_key(store.prefix(), &id).to_string(),
        store_id: "default".into(),
        sha256: summary.sha256.iter().map(|b| format!("{b:02x}")).collect(),
        bytes: summary.bytes,
        records: summary.records,
        source_host: "node7".into(),
        source_pid: 4242,
        rank_dir: "r3-0badcafe".into(),
        ordinal: None,
        created_at_ms: created_ms,
        indexed_at_ms: 0,
        trailer_sha256: summary
            .trailer_sha256
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    };
    (id, bytes, row)
}

/// Puts `bytes` into `store` at `row`'s object key and indexes `row` in
/// `catalog`, as a service does.
pub async fn put_and_index(
    store: &Store,
    catalog: &dyn spool_catalog::Catalog,
    bytes: &[u8],
    row: &PackRow,
) {
    let key = object_store::path::Path::from(row.object_key.as_str());
    store
        .object_store()
        .put(&key, bytes.to_vec().into())
        .await
        .expect("put the pack");
    catalog
        .index(std::slice::from_ref(row), None)
        .await
        .expect("index the pack");
}

/// Writes a pack with `records` and creation time `created_ms`, puts it in
/// `root`'s embedded store under its object key, and indexes it in the
/// embedded catalog (created on first use), as a service does.
pub fn store_and_index(root: &Path, created_ms: u64, records: &[Vec<u8>]) -> StoredPack {
    let store = Store::from_url(&store_url(root), &ClientConfig::default()).expect("store");
    let (id, bytes, row) = pack_and_row(&store, created_ms, records);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let catalog = spool_catalog::open(&catalog_url(root)).expect("catalog");
    rt.block_on(put_and_index(&store, catalog.as_ref(), &bytes, &row));
    StoredPack {
        id,
        object_path: root.join(".store").join(&row.object_key),
        bytes,
        records: records.to_vec(),
        row,
    }
}

/// A `spool lock hold DIR --release-on-eof` child holding a directory's
/// lock; killed (and reaped) on drop.
pub struct LockHolder {
    /// The child.
    pub child: Child,
}

impl LockHolder {
    /// Starts the child and waits for its `held <dir> pid <pid>` line.
    pub fn start(dir: &Path) -> LockHolder {
        let mut child = crate::spool()
            .args(["lock", "hold", "--release-on-eof"])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn spool lock hold");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the held line");
        assert!(line.starts_with("held "), "spool lock hold said {line:?}");
        LockHolder { child }
    }

    /// The holder's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
