//! `spool.Sink`: spool-core's sink as a Python object.
//!
//! Three ways to get one: `engine.sink()` (beside the engine's service,
//! `held_by_caller`), `Sink.claim(root=...)` (sink-only, in a rank
//! directory claimed under the layout: a dead sibling for the node's
//! adopter once it is closed or the process exits) and `Sink.open(dir)` (a
//! plain directory, lock mode `take`).
//!
//! `write` holds the GIL only while the record is appended in memory: it
//! first tries without waiting ([`AdmissionPolicy::Refuse`]), and only when
//! that refuses and the sink's admission is `block` does it wait, with the
//! GIL released. `flush` and `close` always release the GIL.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyByteArrayMethods, PyBytes, PyDict, PyMemoryView};
use spool_core::sink::{AdmissionPolicy, Sink as CoreSink, SinkConfig};
use spool_lock::LockMode;

use crate::errors;
use crate::live::{self, Closable};
use crate::opts::Opts;

/// The Rust state behind one `spool.Sink`.
pub struct SinkCell {
    owner: u32,
    dir: PathBuf,
    ordinal: Option<u32>,
    admission: AdmissionPolicy,
    sink: Mutex<Option<Arc<CoreSink>>>,
}

impl SinkCell {
    /// The sink, if this process opened it and it is not closed.
    fn get(&self, py: Python<'_>) -> PyResult<Arc<CoreSink>> {
        live::owner_check(py, self.owner, "sink", &self.dir)?;
        self.sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                errors::plain(
                    py,
                    format!(
                        "the sink for {} is closed: it admits no more records; open a new sink",
                        self.dir.display()
                    ),
                )
            })
    }

    /// Releases the sink (seal and stage within its release flush) and
    /// lets go of it: the last reference's drop releases its claim when it
    /// sealed (spool-core), keeps it until exit otherwise.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        live::owner_check(py, self.owner, "sink", &self.dir)?;
        let sink = self
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(sink) = sink else { return Ok(()) };
        py.detach(move || {
            let result = sink.release();
            drop(sink);
            result
        })
        .map_err(|e| errors::core(py, &e))
    }

    /// Forgets the sink without closing it (the engine closed it).
    pub fn detach_from_engine(&self) {
        self.sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// Whether the sink is open and attached.
    pub fn is_attached(&self) -> bool {
        self.sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|s| !s.stats().released)
    }
}

impl Drop for SinkCell {
    fn drop(&mut self) {
        crate::live::forget_in_fork_child(self.owner, self.sink.get_mut());
    }
}

impl Closable for SinkCell {
    fn owner(&self) -> u32 {
        self.owner
    }
    fn close_at_exit(&self, py: Python<'_>) {
        if let Err(err) = self.close(py) {
            eprintln!(
                "spool: closing the sink for {} at exit: {err}",
                self.dir.display()
            );
        }
    }
    fn is_engine(&self) -> bool {
        false
    }
}

/// A producer's handle on a spool directory: `write` appends records,
/// packs are sealed by size, count or age and staged by the sink's own
/// thread (a pack is durable once staged), `flush` waits for that, `close`
/// seals and releases. Usable from several threads at once.
#[pyclass(frozen, weakref, module = "spool", name = "Sink")]
pub struct Sink {
    pub(crate) cell: Arc<SinkCell>,
}

/// Where a sink is opened, which decides the options it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `engine.sink()`: the budget and lock options are the engine's.
    Engine,
    /// `Sink.claim()`: the budget (`max_bytes`), the lock options and the
    /// destination come from the configuration keys.
    Claim,
    /// `Sink.open(dir)`: a plain directory; `max_bytes` and
    /// `allow_shared_filesystem` are its own options.
    Open,
}

/// The sink options read from keyword arguments.
pub struct SinkOpts {
    /// The sink configuration (lock fields set by the caller).
    pub config: SinkConfig,
    /// `allow_shared_filesystem` ([`Place::Open`]).
    pub allow_shared_filesystem: bool,
}

/// Reads the sink options: `ordinal`, `seal_bytes`, `seal_records`,
/// `seal_age`, `buffer_bytes`, `admission` (`"block"`, `"refuse"`),
/// `admission_timeout`, `release_flush_timeout`, outside an engine
/// `charge_dead_siblings` (default True for [`Place::Claim`]), and for [`Place::Open`] `max_bytes` and
/// `allow_shared_filesystem`.
pub fn sink_opts(opts: &mut Opts<'_>, place: Place) -> PyResult<SinkOpts> {
    let mut c = SinkConfig::default();
    if let Some(k) = opts.uint("ordinal", 0)? {
        c.ordinal = Some(u32::try_from(k).unwrap_or(u32::MAX));
    }
    if let Some(v) = opts.uint("seal_bytes", 1)? {
        c.seal_bytes = v;
    }
    if let Some(v) = opts.uint("seal_records", 1)? {
        c.seal_records = v;
    }
    if let Some(v) = opts.secs("seal_age", 0.001)? {
        c.seal_age = v;
    }
    if let Some(v) = opts.uint("buffer_bytes", 1)? {
        c.buffer_bytes = v;
    }
    let policy = opts.choice("admission", &["block", "refuse"])?;
    let wait = opts.secs("admission_timeout", 0.0)?;
    c.admission = match (policy, wait) {
        (Some("refuse"), _) => AdmissionPolicy::Refuse,
        (_, Some(wait)) => AdmissionPolicy::Block(wait),
        _ => c.admission,
    };
    if let Some(v) = opts.secs("release_flush_timeout", 0.0)? {
        c.release_flush_timeout = v;
    }
    if place != Place::Engine {
        // A claimed rank directory charges its dead siblings by default,
        // as `spool produce --spool-root` does.
        c.spool.charge_dead_siblings = opts
            .flag("charge_dead_siblings")?
            .unwrap_or(place == Place::Claim);
    }
    let mut allow_shared_filesystem = false;
    if place == Place::Open {
        if let Some(v) = opts.uint("max_bytes", 1)? {
            c.spool.max_bytes = Some(v);
        }
        allow_shared_filesystem = opts.flag("allow_shared_filesystem")?.unwrap_or(false);
    }
    Ok(SinkOpts {
        config: c,
        allow_shared_filesystem,
    })
}

/// Wraps a running sink as a Python object (registered for the exit-time
/// close when `standalone`: an engine closes its own sinks).
pub fn wrap(py: Python<'_>, sink: Arc<CoreSink>, standalone: bool) -> PyResult<Py<Sink>> {
    let cell = Arc::new(SinkCell {
        owner: std::process::id(),
        dir: sink.dir().to_path_buf(),
        ordinal: sink.ordinal(),
        admission: sink.admission(),
        sink: Mutex::new(Some(sink)),
    });
    if standalone {
        let as_closable: Arc<dyn Closable> = cell.clone();
        live::register(&as_closable);
    }
    Py::new(py, Sink { cell })
}

/// Calls `f` with the bytes of a bytes-like object: `bytes` in place (no
/// copy); `bytearray`, `memoryview`, numpy arrays and anything else with
/// the buffer protocol through one copy (the abi3 build for CPython 3.9
/// cannot borrow a buffer: the buffer API is in the stable ABI only from
/// 3.11).
fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(f(&b.to_vec()));
    }
    let view = PyMemoryView::from(obj).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "a record must be bytes-like (bytes, bytearray, memoryview, a contiguous array), not {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".to_string(), |n| n.to_string())
        ))
    })?;
    let bytes = view.call_method0("tobytes")?;
    let bytes = bytes.cast::<PyBytes>()?;
    Ok(f(bytes.as_bytes()))
}

impl Sink {
    /// The worker ordinal of this sink.
    pub(crate) fn cell_ordinal(&self) -> Option<u32> {
        self.cell.ordinal
    }

    fn write_one(
        &self,
        py: Python<'_>,
        sink: &CoreSink,
        record: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let blocking = matches!(self.cell.admission, AdmissionPolicy::Block(_));
        with_bytes(record, |bytes| {
            match sink.write_with(bytes, AdmissionPolicy::Refuse) {
                Err(
                    spool_core::Error::SpoolFull { .. } | spool_core::Error::SinkBufferFull { .. },
                ) if blocking => py.detach(|| sink.write(bytes)),
                other => other,
            }
        })?
        .map_err(|e| errors::core(py, &e))
    }
}

#[pymethods]
impl Sink {
    /// Claims a fresh rank directory `r<rank>-<incarnation>` under the
    /// layout of the destination (`store` and `catalog` default to the
    /// embedded ones under `root`, as for `spool run`) and opens a sink on
    /// it, with no service: it hands each pack to the node's shipper (the
    /// `spool run` holding the node lease), which ships it while
    /// this process lives; the sink removes a pack once its row is
    /// confirmed. With no daemon running, its packs are shipped once this
    /// sink is closed or its process exits. `rank` defaults to `$RANK`
    /// (else 0).
    /// The destination, `max_bytes` (the directory's budget, dead siblings
    /// charged), `allow_shared_filesystem` and `staging_max_age` come from
    /// the configuration as for `spool.Engine` (`config=`, `SPOOL_*`, or
    /// keyword arguments); the other keyword arguments are sink options.
    #[staticmethod]
    #[pyo3(signature = (root=None, store=None, catalog=None, rank=None, *, config=None, **options))]
    fn claim(
        py: Python<'_>,
        root: Option<Bound<'_, PyAny>>,
        store: Option<Bound<'_, PyAny>>,
        catalog: Option<Bound<'_, PyAny>>,
        rank: Option<Bound<'_, PyAny>>,
        config: Option<PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<Sink>> {
        let mut opts = Opts::new(py, "Sink.claim()", options);
        let args = crate::config::arguments(&mut opts, [root, store, catalog, rank])?;
        let so = sink_opts(&mut opts, Place::Claim)?;
        opts.finish()?;
        let cfg = crate::config::load(py, config, &args)?;
        // a sink-only producer in the layout hands each pack to the node's
        // shipper while it lives (with none, its packs go when it exits)
        let sink = py
            .detach(move || cfg.claim_sink(so.config))
            .map_err(|e| errors::service(py, &e))?;
        wrap(py, Arc::new(sink), true)
    }

    /// Opens a sink on a plain spool directory `dir` (created, locked: lock
    /// mode `take`); `close()` releases the lock once everything is staged.
    #[staticmethod]
    #[pyo3(signature = (dir, **options))]
    fn open(
        py: Python<'_>,
        dir: PathBuf,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<Sink>> {
        let mut opts = Opts::new(py, "Sink.open()", options);
        let so = sink_opts(&mut opts, Place::Open)?;
        opts.finish()?;
        let mut config = so.config;
        config.spool.lock_mode = LockMode::Take;
        config.spool.lock.allow_shared_filesystem = so.allow_shared_filesystem;
        let sink = py
            .detach(move || CoreSink::open(&dir, config))
            .map_err(|e| errors::core(py, &e))?;
        wrap(py, Arc::new(sink), true)
    }

    /// Appends one record (any bytes-like object). Returns once it is in
    /// the sink's buffer; a full buffer blocks (GIL released) up to the
    /// admission timeout, or refuses, per the sink's `admission`
    /// (`spool.FullError` either way when it is not admitted).
    fn write(&self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        let sink = self.cell.get(py)?;
        self.write_one(py, &sink, record)
    }

    /// Appends every record of an iterable of bytes-like objects, in
    /// order; stops at the first one not admitted (raising its error).
    /// Returns how many were written.
    fn write_many(&self, py: Python<'_>, records: &Bound<'_, PyAny>) -> PyResult<u64> {
        let sink = self.cell.get(py)?;
        let mut n = 0u64;
        for record in records.try_iter()? {
            self.write_one(py, &sink, &record?)?;
            n += 1;
        }
        Ok(n)
    }

    /// Seals what the sink holds and waits (GIL released) until every pack
    /// sealed so far is staged — durable in the spool directory. Raises
    /// `spool.DeadlineError` naming what is left after `timeout` seconds.
    #[pyo3(signature = (timeout=30.0))]
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = secs(py, "timeout", timeout)?;
        let sink = self.cell.get(py)?;
        py.detach(|| sink.flush(timeout))
            .map_err(|e| errors::core(py, &e))
    }

    /// Stops admission, seals and stages everything within the sink's
    /// `release_flush_timeout`, and lets go. A sink of
    /// `Sink.claim`/`Sink.open` releases its lock only if everything was
    /// staged; otherwise the lock is kept until the process exits, so
    /// nobody adopts a directory this sink may still write. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.cell.close(py)
    }

    /// The sink's counters: `staged_packs`, `pending_packs`,
    /// `buffered_bytes`, `released`, `sealed_on_release`, `last_error`,
    /// `spool_full` (used/budget/dead-sibling bytes, or None).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let sink = self.cell.get(py)?;
        let s = sink.stats();
        let d = PyDict::new(py);
        d.set_item("staged_packs", s.staged_packs)?;
        d.set_item("last_staged", s.last_staged.map(|id| id.to_hex()))?;
        d.set_item("pending_packs", s.pending_packs)?;
        d.set_item("buffered_bytes", s.buffered_bytes)?;
        d.set_item("released", s.released)?;
        d.set_item("sealed_on_release", s.sealed_on_release)?;
        d.set_item("last_error", s.last_error)?;
        match s.spool_full {
            Some(f) => {
                let full = PyDict::new(py);
                full.set_item("used", f.used)?;
                full.set_item("budget", f.budget)?;
                full.set_item("dead_sibling_bytes", f.dead_sibling_bytes)?;
                d.set_item("spool_full", full)?;
            }
            None => d.set_item("spool_full", py.None())?,
        }
        Ok(d)
    }

    /// The spool directory the sink stages into.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.cell.dir.clone()
    }

    /// The worker ordinal (packs under `w<ordinal>/`), or None.
    #[getter]
    fn ordinal(&self) -> Option<u32> {
        self.cell.ordinal
    }

    /// Whether `close()` ran (or the engine closed it).
    #[getter]
    fn closed(&self) -> bool {
        self.cell
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes; with an exception in flight a close failure is only warned
    /// about, so the original exception propagates.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let result = self.cell.close(py);
        match (result, exc_type) {
            (Err(err), Some(_)) => {
                warn(py, &format!("closing the sink during an exception: {err}"));
                Ok(false)
            }
            (Err(err), None) => Err(err),
            (Ok(()), _) => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<spool.Sink dir={:?} ordinal={:?}{}>",
            self.cell.dir.display().to_string(),
            self.cell.ordinal,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// Emits a Python `RuntimeWarning`.
pub fn warn(py: Python<'_>, message: &str) {
    let warn = || -> PyResult<()> {
        let w = py.import("warnings")?;
        w.call_method1(
            "warn",
            (message, py.get_type::<pyo3::exceptions::PyRuntimeWarning>()),
        )?;
        Ok(())
    };
    let _ = warn();
}

/// A timeout in seconds, refused when negative or not finite.
pub fn secs(py: Python<'_>, what: &str, s: f64) -> PyResult<Duration> {
    if s.is_finite() && s >= 0.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(errors::config(
            py,
            format!("{what}={s}: expected seconds >= 0"),
        ))
    }
}
