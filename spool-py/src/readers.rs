//! The readers: `read_pack` (a pack file or bytes, validated, then its
//! records), `Catalog` (rows of the index) and `fetch` (a pack read back
//! from the store by spool-service's `fetch_pack`, the check `spool cat`
//! makes).

use std::io::{Cursor, Read};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use spool_catalog::{Catalog as CoreCatalog, PackRow};
use spool_core::pack::{PackId, PackReader};

use spool_service::config::keys;
use spool_service::fetch::{fetch_pack, fetch_packs};

use crate::errors;

/// The columns of a catalog row, in order.
pub const COLUMNS: [&str; 14] = [
    "pack_id",
    "object_key",
    "store_id",
    "sha256",
    "bytes",
    "records",
    "source_host",
    "source_pid",
    "rank_dir",
    "ordinal",
    "created_at_ms",
    "indexed_at_ms",
    "trailer_sha256",
    "object_offset",
];

type Reader = PackReader<Box<dyn Read + Send>>;

/// The records of a validated pack, in order (an iterator of `bytes`).
#[pyclass(module = "spool", name = "Records")]
pub struct Records {
    reader: Mutex<Reader>,
    /// How many records the pack holds.
    #[pyo3(get)]
    count: u64,
    /// The pack's id (32 hex digits).
    #[pyo3(get)]
    pack_id: String,
}

#[pymethods]
impl Records {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut reader = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match reader.next_record() {
            Ok(Some(r)) => Ok(Some(PyBytes::new(py, &r))),
            Ok(None) => Ok(None),
            Err(e) => Err(errors::core(py, &e)),
        }
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.count).unwrap_or(usize::MAX)
    }
}

fn records(py: Python<'_>, bytes: Vec<u8>, summary: &spool_core::PackSummary) -> PyResult<Records> {
    let reader: Box<dyn Read + Send> = Box::new(Cursor::new(bytes));
    let reader = PackReader::new(reader).map_err(|e| errors::core(py, &e))?;
    Ok(Records {
        count: summary.records,
        pack_id: summary.id.to_hex(),
        reader: Mutex::new(reader),
    })
}

/// Validates a pack — a path (`str`/`os.PathLike`) or its bytes — whole
/// (magic, version, every record, footer, trailer, SHA-256; raising
/// `spool.CorruptPackError` naming the offset where the problem has one),
/// then iterates its records.
#[pyfunction]
pub fn read_pack(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<Records> {
    if let Ok(path) = source.extract::<PathBuf>() {
        if !source.is_instance_of::<PyBytes>() {
            let (bytes, summary) = py
                .detach(|| -> Result<_, spool_core::Error> {
                    let bytes = std::fs::read(&path).map_err(|source| spool_core::Error::Io {
                        op: "read",
                        path: path.clone(),
                        source,
                    })?;
                    let summary = spool_core::pack::validate_bytes(&bytes, None)
                        .map_err(|e| e.for_pack(path.display()))?;
                    Ok((bytes, summary))
                })
                .map_err(|e| errors::core(py, &e))?;
            return records(py, bytes, &summary);
        }
    }
    let bytes: Vec<u8> = if let Ok(b) = source.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else {
        pyo3::types::PyMemoryView::from(source)?
            .call_method0("tobytes")?
            .cast::<PyBytes>()?
            .as_bytes()
            .to_vec()
    };
    let summary = py
        .detach(|| spool_core::pack::validate_bytes(&bytes, None))
        .map_err(|e| errors::core(py, &e))?;
    records(py, bytes, &summary)
}

fn runtime(py: Python<'_>) -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| errors::plain(py, format!("cannot start the async runtime: {e}")))
}

fn row<'py>(py: Python<'py>, r: &PackRow) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("pack_id", &r.pack_id)?;
    d.set_item("object_key", &r.object_key)?;
    d.set_item("store_id", &r.store_id)?;
    d.set_item("sha256", &r.sha256)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("records", r.records)?;
    d.set_item("source_host", &r.source_host)?;
    d.set_item("source_pid", r.source_pid)?;
    d.set_item("rank_dir", &r.rank_dir)?;
    d.set_item("ordinal", r.ordinal)?;
    d.set_item("created_at_ms", r.created_at_ms)?;
    d.set_item("indexed_at_ms", r.indexed_at_ms)?;
    d.set_item("trailer_sha256", &r.trailer_sha256)?;
    d.set_item("object_offset", r.object_offset)?;
    Ok(d)
}

/// A catalog opened by URL (the Python `spool.Catalog` wraps it).
#[pyclass(frozen, module = "spool._native", name = "Catalog")]
pub struct Catalog {
    owner: u32,
    url: String,
    catalog: Arc<dyn CoreCatalog>,
    rt: tokio::runtime::Runtime,
}

#[pymethods]
impl Catalog {
    #[new]
    fn new(py: Python<'_>, url: &str) -> PyResult<Catalog> {
        let catalog = spool_catalog::open(url).map_err(|e| errors::catalog(py, &e))?;
        Ok(Catalog {
            owner: std::process::id(),
            url: catalog.server(),
            catalog,
            rt: runtime(py)?,
        })
    }

    /// The server, credentials masked.
    #[getter]
    fn server(&self) -> String {
        self.url.clone()
    }

    /// Rows created in `[since_ms, until_ms)`, oldest first, at most `limit`.
    #[pyo3(signature = (since_ms=None, until_ms=None, limit=None))]
    fn ls<'py>(
        &self,
        py: Python<'py>,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        crate::live::owner_check(py, self.owner, "catalog", std::path::Path::new(&self.url))?;
        let rows = py
            .detach(|| {
                self.rt.block_on(
                    self.catalog
                        .list_range(since_ms.unwrap_or(0), until_ms.unwrap_or(u64::MAX)),
                )
            })
            .map_err(|e| errors::catalog(py, &e))?;
        let list = PyList::empty(py);
        for r in rows.iter().take(limit.unwrap_or(usize::MAX)) {
            list.append(row(py, r)?)?;
        }
        Ok(list)
    }

    /// The row of one pack, or None.
    fn get<'py>(&self, py: Python<'py>, pack_id: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        crate::live::owner_check(py, self.owner, "catalog", std::path::Path::new(&self.url))?;
        let got = py
            .detach(|| self.rt.block_on(self.catalog.get(pack_id)))
            .map_err(|e| errors::catalog(py, &e))?;
        got.map(|r| row(py, &r)).transpose()
    }

    /// How many packs the catalog lists.
    fn count(&self, py: Python<'_>) -> PyResult<u64> {
        crate::live::owner_check(py, self.owner, "catalog", std::path::Path::new(&self.url))?;
        py.detach(|| self.rt.block_on(self.catalog.count()))
            .map_err(|e| errors::catalog(py, &e))
    }
}

/// The `catalog`, `store` and `root` arguments of `fetch` and
/// `fetch_many`, then `config`.
type FetchArgs<'py> = (
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
    Option<PathBuf>,
);

/// The store and catalog `fetch` and `fetch_many` read from, as
/// `spool cat` resolves them.
fn fetch_source(
    py: Python<'_>,
    what: &str,
    (catalog, store, root, config): FetchArgs<'_>,
) -> PyResult<(spool_upload::Store, Arc<dyn CoreCatalog>)> {
    let mut args = Vec::new();
    for (key, v) in [
        (&keys::ROOT.key, root),
        (&keys::STORE.key, store),
        (&keys::CATALOG.key, catalog),
    ] {
        args.extend(crate::config::named(key, v)?);
    }
    let cfg = crate::config::load(py, config, &args)?;
    let (catalog_url, store_url) = cfg
        .catalog_open_url()
        .and_then(|c| Ok((c, cfg.store_url()?)))
        .map_err(|e| errors::config(py, format!("{what}: {e}")))?;
    let store = spool_upload::Store::from_url(&store_url, &cfg.client())
        .map_err(|e| errors::upload(py, &e))?;
    let cat =
        spool_catalog::open_with_timeout(&catalog_url, keys::CATALOG_REQUEST_TIMEOUT.get(&cfg))
            .map_err(|e| errors::catalog(py, &e))?;
    Ok((store, cat))
}

/// Reads pack `pack_id` back (see `spool.fetch`).
#[pyfunction]
#[pyo3(signature = (pack_id, catalog=None, store=None, root=None, *, config=None))]
pub fn fetch(
    py: Python<'_>,
    pack_id: &str,
    catalog: Option<Bound<'_, PyAny>>,
    store: Option<Bound<'_, PyAny>>,
    root: Option<Bound<'_, PyAny>>,
    config: Option<PathBuf>,
) -> PyResult<Records> {
    let id = PackId::from_hex(pack_id).map_err(|e| errors::core(py, &e))?;
    let (store, cat) = fetch_source(py, "fetch()", (catalog, store, root, config))?;
    let rt = runtime(py)?;
    // The one library read-back (also `spool cat`'s): row, object,
    // validation, the row's checksum and size.
    let mut out = Cursor::new(Vec::new());
    let fetched = py
        .detach(|| rt.block_on(fetch_pack(cat.as_ref(), &store, id, &mut out)))
        .map_err(|e| errors::service(py, &e))?;
    records(py, out.into_inner(), &fetched.summary)
}

/// Reads packs `pack_ids` back together (see `spool.fetch_many`): one GET
/// per object, however many of its packs are asked.
#[pyfunction]
#[pyo3(signature = (pack_ids, catalog=None, store=None, root=None, *, config=None))]
pub fn fetch_many(
    py: Python<'_>,
    pack_ids: Vec<String>,
    catalog: Option<Bound<'_, PyAny>>,
    store: Option<Bound<'_, PyAny>>,
    root: Option<Bound<'_, PyAny>>,
    config: Option<PathBuf>,
) -> PyResult<Vec<Records>> {
    let ids = pack_ids
        .iter()
        .map(|p| PackId::from_hex(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| errors::core(py, &e))?;
    let (store, cat) = fetch_source(py, "fetch_many()", (catalog, store, root, config))?;
    let rt = runtime(py)?;
    let fetched = py
        .detach(|| rt.block_on(fetch_packs(cat.as_ref(), &store, &ids)))
        .map_err(|e| errors::service(py, &e))?;
    fetched
        .into_iter()
        .map(|(f, bytes)| records(py, bytes, &f.summary))
        .collect()
}
