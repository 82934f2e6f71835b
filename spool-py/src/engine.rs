//! `spool.Engine`: spool-service's engine as a Python object —
//! claim a rank directory, start its storage service, open sinks on it;
//! `close()` releases in reverse. Every blocking call (start, flush, close,
//! opening a sink) runs with the GIL released.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use spool_service::Engine as CoreEngine;

use crate::errors;
use crate::live::{self, Closable};
use crate::opts::Opts;
use crate::sink::{self, Sink};

/// The Rust state behind one `spool.Engine`.
pub struct EngineCell {
    owner: u32,
    dir: PathBuf,
    engine: RwLock<Option<CoreEngine>>,
    /// The Python sinks handed out, so `sink()` returns the attached one.
    sinks: Mutex<Vec<Py<Sink>>>,
}

impl EngineCell {
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        live::owner_check(py, self.owner, "engine", &self.dir)
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        errors::plain(
            py,
            format!(
                "the engine on {} is closed; start a new spool.Engine",
                self.dir.display()
            ),
        )
    }

    /// Closes the engine: seal the sinks, flush and stop the service,
    /// release the claim (or keep it until exit if a sink did not seal).
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.check(py)?;
        let engine = self
            .engine
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(engine) = engine else {
            return Ok(None);
        };
        let report = py.detach(move || engine.close());
        self.detach_sinks();
        let d = PyDict::new(py);
        d.set_item("dir", report.dir)?;
        d.set_item("sealed", report.sealed)?;
        d.set_item("drained", report.drained)?;
        d.set_item("removed", report.removed)?;
        d.set_item("claim_kept", report.claim_kept)?;
        d.set_item("problems", report.problems)?;
        Ok(Some(d))
    }
}

impl EngineCell {
    /// The engine is closing: its Python sinks no longer reach it.
    fn detach_sinks(&self) {
        for s in self
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            s.get().cell.detach_from_engine();
        }
    }
}

impl Drop for EngineCell {
    fn drop(&mut self) {
        crate::live::forget_in_fork_child(self.owner, self.engine.get_mut());
    }
}

impl Closable for EngineCell {
    fn owner(&self) -> u32 {
        self.owner
    }
    fn close_at_exit(&self, py: Python<'_>) {
        if let Err(err) = self.close(py) {
            eprintln!(
                "spool: closing the engine on {} at exit: {err}",
                self.dir.display()
            );
        }
    }
    fn is_engine(&self) -> bool {
        true
    }
}

/// An embedded spool engine: claims a fresh rank directory under
/// `<root>/<catalog key>/`, runs a storage service on it (uploads and
/// indexes its packs, adopts dead siblings when it holds the node's
/// lease), and opens sinks on it. Use it as a context manager, or call
/// `close()`: sinks are sealed, the service drains within
/// `close_flush_timeout` and stops, and the claim is released (the
/// directory removed when empty) — or kept until exit if a sink did not
/// seal, so nobody adopts a directory that may still change.
#[pyclass(frozen, weakref, module = "spool", name = "Engine")]
pub struct Engine {
    cell: Arc<EngineCell>,
}

#[pymethods]
impl Engine {
    /// Starts an engine under the spool root `root` (which must exist).
    /// `store` and `catalog` are URLs (`s3://bucket/prefix`,
    /// `clickhouse://host:8123/db`, ...), by default the embedded
    /// `file://ROOT/.store` and `sqlite:///ROOT/.catalog.db`, as for `spool
    /// run`; `rank` defaults to `$RANK` (else 0).
    ///
    /// The configuration is the command's: `config` names the TOML file
    /// (default `$SPOOL_CONFIG`, else `./spool.toml` if present), the
    /// `SPOOL_*` variables apply, and every key is also a keyword argument
    /// ranking with the command's flags: `lease.ttl` as `lease_ttl`,
    /// `service.poll_interval` as `poll_interval`, `upload.max_workers` as
    /// `upload_max_workers`, `spool.max_bytes` as `max_bytes` (see
    /// `spool config show`). Values are what the file takes (seconds as
    /// numbers or `"500ms"`, sizes as numbers or `"64MiB"`). Two options
    /// are the engine's own: `adopt` (default True: adopt dead siblings
    /// when holding the node's lease) and `close_flush_timeout` (seconds
    /// `close()` lets the service drain, default 30).
    #[new]
    #[pyo3(signature = (root=None, store=None, catalog=None, rank=None, *, config=None, **options))]
    fn new(
        py: Python<'_>,
        root: Option<Bound<'_, PyAny>>,
        store: Option<Bound<'_, PyAny>>,
        catalog: Option<Bound<'_, PyAny>>,
        rank: Option<Bound<'_, PyAny>>,
        config: Option<PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Engine> {
        let mut opts = Opts::new(py, "Engine()", options);
        let args = crate::config::arguments(&mut opts, [root, store, catalog, rank])?;
        let adopt = opts.flag("adopt")?;
        let close_flush_timeout = opts
            .secs("close_flush_timeout", 0.0)?
            .unwrap_or(Duration::from_secs(30));
        opts.finish()?;
        let cfg = crate::config::load(py, config, &args)?;
        let mut config = py
            .detach(|| {
                cfg.engine_config(
                    close_flush_timeout,
                    spool_service::config::keys::SHIP.get(&cfg),
                )
            })
            .map_err(|e| errors::service(py, &e))?;
        if let (Some(adopt), spool_service::Shipping::Itself(service)) =
            (adopt, &mut config.shipping)
        {
            service.adopt = adopt;
        }
        let engine = py
            .detach(move || CoreEngine::start(config))
            .map_err(|e| errors::service(py, &e))?;
        let cell = Arc::new(EngineCell {
            owner: std::process::id(),
            dir: engine.dir().to_path_buf(),
            engine: RwLock::new(Some(engine)),
            sinks: Mutex::new(Vec::new()),
        });
        let as_closable: Arc<dyn Closable> = cell.clone();
        live::register(&as_closable);
        Ok(Engine { cell })
    }

    /// The engine's sink for worker ordinal `ordinal` (None: the main
    /// one): the attached one if there is one and no options are given,
    /// else a new sink with these options (see `spool.Sink.claim`). Two
    /// attached sinks on one ordinal are refused (`spool.ConfigError`).
    #[pyo3(signature = (ordinal=None, **options))]
    fn sink(
        &self,
        py: Python<'_>,
        ordinal: Option<u32>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<Sink>> {
        self.cell.check(py)?;
        let has_options = options.is_some_and(|o| !o.is_empty());
        if !has_options {
            let sinks = self
                .cell
                .sinks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(s) = sinks
                .iter()
                .find(|s| s.get().cell_ordinal() == ordinal && s.get().cell.is_attached())
            {
                return Ok(s.clone_ref(py));
            }
        }
        let mut opts = Opts::new(py, "Engine.sink()", options);
        let mut so = sink::sink_opts(&mut opts, sink::Place::Engine)?;
        opts.finish()?;
        so.config.ordinal = ordinal;
        let cell = self.cell.clone();
        let opened = py.detach(move || {
            let mut guard = cell
                .engine
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            guard.as_mut().map(|e| e.open_sink(so.config))
        });
        let sink = match opened {
            None => return Err(self.cell.closed_error(py)),
            Some(r) => r.map_err(|e| errors::service(py, &e))?,
        };
        let obj = sink::wrap(py, sink, false)?;
        self.cell
            .sinks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(obj.clone_ref(py));
        Ok(obj)
    }

    /// Flushes every sink, then the service, within `timeout` seconds in
    /// all (GIL released): True when everything written before the call is
    /// uploaded and indexed (drained); else a false
    /// `spool.Undrained` with the owed figures. Raises
    /// `spool.DeadlineError` when a sink could not stage in time and
    /// `spool.LeaseLostError` when the service has latched.
    #[pyo3(signature = (timeout=30.0))]
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<Py<PyAny>> {
        self.cell.check(py)?;
        let timeout = sink::secs(py, "timeout", timeout)?;
        let cell = self.cell.clone();
        let result = py.detach(move || {
            let guard = cell
                .engine
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            guard
                .as_ref()
                .map(|e| (e.flush(timeout), e.service().map(|s| s.snapshot())))
        });
        let Some((result, snap)) = result else {
            return Err(self.cell.closed_error(py));
        };
        let Some(snap) = snap else {
            // shipped by the node's daemon (service.ship = "daemon")
            return match result {
                Ok(drained) => Ok(drained.into_pyobject(py)?.to_owned().into_any().unbind()),
                Err(err @ spool_service::Error::HandOffTimeout { waiting, .. }) => {
                    let cls = py.import("spool._types")?.getattr("Undrained")?;
                    Ok(cls
                        .call1((waiting as u64, 0u64, 0u64, None::<String>, err.to_string()))?
                        .unbind())
                }
                Err(err) => Err(errors::service(py, &err)),
            };
        };
        let undrained = |ready: u64, owed: u64, message: String| -> PyResult<Py<PyAny>> {
            let cls = py.import("spool._types")?.getattr("Undrained")?;
            Ok(cls
                .call1((ready, owed, snap.cycles, snap.last_error.clone(), message))?
                .unbind())
        };
        match result {
            // Latched: nothing more is shipped for this process's lifetime,
            // even when nothing is owed right now.
            Ok(_) if snap.latched => Err(lease_lost(py, &self.cell.dir, &snap)),
            Ok(true) => Ok(true.into_pyobject(py)?.to_owned().into_any().unbind()),
            Ok(false) => undrained(
                snap.deferred,
                snap.pending_index,
                "the service is stopping".into(),
            ),
            Err(spool_service::Error::FlushTimeout { ready, owed, .. }) if snap.latched => {
                let _ = (ready, owed);
                Err(lease_lost(py, &self.cell.dir, &snap))
            }
            Err(err @ spool_service::Error::FlushTimeout { ready, owed, .. }) => {
                undrained(ready as u64, owed as u64, err.to_string())
            }
            Err(err) => Err(errors::service(py, &err)),
        }
    }

    /// Drains once, as `spool run --once` does, then closes the engine:
    /// runs until the own directory and every adoptable sibling are drained,
    /// `timeout` seconds pass, the destination refuses the run, or the lease
    /// latches (GIL released; Ctrl-C stops it cleanly, then raises
    /// KeyboardInterrupt). Returns a dict: `end` (`"drained"`, `"blocked"`,
    /// `"left_to_shipper"`, `"deadline"`, `"refused"`, `"latched"`,
    /// `"loop_failed"`), `message` (what it shipped and what it left where),
    /// `left_packs` (ready packs left in rank directories of this catalog
    /// key), `elsewhere_packs` (under other catalog keys of the root),
    /// `blocked` (`[(dir, why)]`), `elapsed` (seconds) and `snapshot`.
    /// With `wait_for_siblings`, waits (within `timeout`) while another live
    /// service ships the dead siblings.
    #[pyo3(signature = (timeout=600.0, wait_for_siblings=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        timeout: f64,
        wait_for_siblings: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.cell.check(py)?;
        let timeout = sink::secs(py, "timeout", timeout)?;
        let engine = {
            let mut guard = self
                .cell
                .engine
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match guard.as_ref().map(|e| e.ship()) {
                None => return Err(self.cell.closed_error(py)),
                Some(spool_service::Ship::Daemon) => {
                    return Err(errors::plain(
                        py,
                        format!(
                            "the engine on {} hands its packs to the node's daemon (ship = \
                             \"daemon\"): it has no service to run; flush() waits for the \
                             daemon's confirmations",
                            self.cell.dir.display()
                        ),
                    ))
                }
                Some(spool_service::Ship::Itself) => guard.take().expect("checked above"),
            }
        };
        self.cell.detach_sinks();
        // the close at the end of the run flushes (close_flush_timeout)
        let plan = spool_service::RunPlan::until_drained(timeout, Duration::ZERO)
            .wait_for_siblings(wait_for_siblings);
        let mut interrupted = None;
        let report = py.detach(|| {
            engine.run(&plan, |_| {
                Python::attach(|py| py.check_signals()).err().map(|e| {
                    interrupted = Some(e);
                    "interrupted".to_string()
                })
            })
        });
        if let Some(e) = interrupted {
            return Err(e);
        }
        let report = report.map_err(|e| errors::service(py, &e))?;
        let d = PyDict::new(py);
        d.set_item(
            "end",
            match report.end() {
                spool_service::RunEnd::Drained => "drained",
                spool_service::RunEnd::Blocked => "blocked",
                spool_service::RunEnd::LeftToShipper(_) => "left_to_shipper",
                spool_service::RunEnd::Deadline(_) => "deadline",
                spool_service::RunEnd::Refused(_) => "refused",
                spool_service::RunEnd::Latched => "latched",
                spool_service::RunEnd::LoopFailed(_) => "loop_failed",
                spool_service::RunEnd::Stopped(_) => "stopped",
            },
        )?;
        d.set_item("message", report.message())?;
        d.set_item("left_packs", report.left().packs())?;
        d.set_item("elsewhere_packs", report.elsewhere().packs())?;
        d.set_item("blocked", report.blocked().to_vec())?;
        d.set_item("elapsed", report.elapsed().as_secs_f64())?;
        d.set_item("snapshot", snapshot_dict(py, report.snapshot())?)?;
        Ok(d)
    }

    /// The service's snapshot as a dict.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.cell.check(py)?;
        let guard = self
            .cell
            .engine
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(engine) = guard.as_ref() else {
            return Err(self.cell.closed_error(py));
        };
        let d = PyDict::new(py);
        d.set_item("ship", engine.ship().as_str())?;
        let Some(service) = engine.service() else {
            return Ok(d); // shipped by the node's daemon: no service here
        };
        let snap = snapshot_dict(py, &service.snapshot())?;
        d.update(snap.as_mapping())?;
        Ok(d)
    }

    /// Releases in reverse and returns what happened:
    /// `sealed`, `drained`, `removed`, `claim_kept`, `problems`, `dir`; None
    /// when already closed. Never raises for a store or catalog that is
    /// down: with them down the directory is kept, unlocked, for adoption.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.cell.close(py)
    }

    /// The claimed rank directory.
    #[getter]
    fn dir(&self) -> PathBuf {
        self.cell.dir.clone()
    }

    /// Whether `close()` ran.
    #[getter]
    fn closed(&self) -> bool {
        self.cell
            .engine
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes (in order) whether or not an exception is in flight.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.cell.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<spool.Engine dir={:?}>",
            self.cell.dir.display().to_string()
        )
    }
}

/// A service snapshot as a Python dict: every field of spool-service's one
/// table ([`spool_service::FIELDS`]), dotted names nested, as `spool run
/// --json` shows it.
fn snapshot_dict<'py>(
    py: Python<'py>,
    s: &spool_service::Snapshot,
) -> PyResult<Bound<'py, PyDict>> {
    use spool_service::FieldValue;
    let root = PyDict::new(py);
    for (field, value) in s.fields() {
        let value = match value {
            FieldValue::Number(n) => n.into_pyobject(py)?.into_any(),
            FieldValue::Flag(b) => b.into_pyobject(py)?.to_owned().into_any(),
            FieldValue::Text(t) => t.into_pyobject(py)?,
            FieldValue::List(l) => l.into_pyobject(py)?,
        };
        let mut at = root.clone();
        let mut parts = field.name().split('.').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                at.set_item(part, &value)?;
                break;
            }
            at = match at.get_item(part)? {
                Some(d) => d.cast_into::<PyDict>()?,
                None => {
                    let d = PyDict::new(py);
                    at.set_item(part, &d)?;
                    d
                }
            };
        }
    }
    Ok(root)
}

fn lease_lost(py: Python<'_>, dir: &std::path::Path, snap: &spool_service::Snapshot) -> PyErr {
    errors::raise(
        py,
        "LeaseLostError",
        format!(
            "the service of {} has latched: a foreign lease (held by {}) outlived twice its TTL, \
             so its lease-gated work stopped for good; close this engine and start a new one{}",
            dir.display(),
            snap.lease_holder
                .as_ref()
                .map_or_else(|| "unknown".to_owned(), |h| h.to_string()),
            snap.last_error
                .as_deref()
                .map(|e| format!(" (last error: {e})"))
                .unwrap_or_default()
        ),
        &[],
    )
}
