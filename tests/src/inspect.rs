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

/// Writes a pack with `records` and creation time `created_ms`, puts it in
/// `root`'s embedded store under its object key, and indexes it in the
/// embedded catalog (created on first use), as a service does.
pub fn store_and_index(root: &Path, created_ms: u64, records: &[Vec<u8>]) -> StoredPack {
    let id = PackId::with_timestamp(created_ms);
    let mut w = PackWriter::new(id, created_ms);
    for r in records {
        w.push_record(r);
    }
    let bytes = w.finish();
    let summary = spool_core::pack::validate_bytes(&bytes, Some(id)).expect("a valid pack");
    let store = Store::from_url(&store_url(root), &ClientConfig::default()).expect("store");
    let key = object_key(store.prefix(), &id);
    let row = PackRow {
        pack_id: id.to_hex(),
        object_key: key.to_string(),
        store_id: "default".into(),
        sha256: summary.sha256.iter().map(|b| format!("{b:02x}")).collect(),
        bytes: summary.bytes,
        records: summary.records,
        source_host: "node7".into(),
        source_pid: 4242,
        rank_dir: "r3-0badcafe".into(),
        ordinal: 0,
        created_at_ms: created_ms,
        indexed_at_ms: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        store
            .object_store()
            .put(&key, bytes.clone().into())
            .await
            .expect("put the pack");
        let catalog = spool_catalog::open(&catalog_url(root)).expect("catalog");
        catalog
            .index(std::slice::from_ref(&row), None)
            .await
            .expect("index");
    });
    StoredPack {
        id,
        object_path: root.join(".store").join(key.as_ref()),
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
