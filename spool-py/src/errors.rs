//! The library crates' typed errors as the Python exceptions of
//! `spool._errors` (defined in Python so that `DeadlineError` can also be a
//! `TimeoutError` and `ConfigError` a `ValueError`). The message is always
//! the library's own `Display`; the attributes carry its figures.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Builds `spool._errors.<class>(message, **attrs)` as a `PyErr`.
pub fn raise(py: Python<'_>, class: &str, message: String, attrs: &[(&str, Attr)]) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("spool._errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        for (k, v) in attrs {
            match v {
                Attr::U(n) => kwargs.set_item(k, *n)?,
                Attr::S(s) => kwargs.set_item(k, s)?,
                Attr::None => kwargs.set_item(k, py.None())?,
            }
        }
        let value = cls.call((message.clone(),), Some(&kwargs))?;
        Ok(PyErr::from_value(value))
    };
    build().unwrap_or_else(|e| e)
}

/// One attribute value of an exception.
pub enum Attr {
    /// A number.
    U(u64),
    /// Text (paths, hosts).
    S(String),
    /// Not known.
    None,
}

fn path(p: &std::path::Path) -> Attr {
    Attr::S(p.display().to_string())
}

fn opt(n: Option<u32>) -> Attr {
    n.map_or(Attr::None, |n| Attr::U(u64::from(n)))
}

/// A bad option: `spool.ConfigError` (a `ValueError`).
pub fn config(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "ConfigError", message.into(), &[])
}

/// Any other failure: `spool.Error`.
pub fn plain(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "Error", message.into(), &[])
}

/// spool-lock's refusals.
pub fn lock(py: Python<'_>, err: &spool_lock::Error) -> PyErr {
    use spool_lock::Error as E;
    let msg = err.to_string();
    match err {
        E::OwnedByOther { dir, holder, .. } => owned(py, msg, holder.pid, Some(&holder.host), dir),
        E::HeldByThisProcess { dir, pid, .. } => {
            owned(py, msg, Some(*pid), Some(&spool_lock::host_name()), dir)
        }
        E::NestedUnderHeld { outer, holder, .. } => {
            owned(py, msg, holder.pid, Some(&holder.host), outer)
        }
        E::ContainsHeld { inner, holder, .. } => {
            owned(py, msg, holder.pid, Some(&holder.host), inner)
        }
        E::LockFileReplaced { dir, .. } => owned(py, msg, None, None, dir),
        E::SharedFilesystem {
            path: p, fs_name, ..
        } => raise(
            py,
            "SharedFilesystemError",
            msg,
            &[
                ("path", path(p)),
                ("filesystem", Attr::S((*fs_name).to_string())),
            ],
        ),
        E::UnknownMode { .. } => config(py, msg),
        _ => plain(py, msg),
    }
}

/// `spool.OwnedError`: the holder's pid and host when known, the directory.
fn owned(
    py: Python<'_>,
    msg: String,
    pid: Option<u32>,
    host: Option<&str>,
    dir: &std::path::Path,
) -> PyErr {
    raise(
        py,
        "OwnedError",
        msg,
        &[
            ("pid", opt(pid)),
            ("host", host.map_or(Attr::None, |h| Attr::S(h.to_string()))),
            ("path", path(dir)),
        ],
    )
}

/// spool-core's failures.
pub fn core(py: Python<'_>, err: &spool_core::Error) -> PyErr {
    use spool_core::Error as E;
    let msg = err.to_string();
    match err {
        E::Lock(e) => lock(py, e),
        E::Full {
            dir,
            used,
            budget,
            dead_sibling_bytes,
            ..
        } => full(
            py,
            msg,
            dir,
            Some((*used, *budget, *dead_sibling_bytes)),
            None,
        ),
        E::SpoolFull {
            dir,
            used,
            budget,
            dead_sibling_bytes,
            buffered,
            buffer_bytes,
        } => full(
            py,
            msg,
            dir,
            Some((*used, *budget, *dead_sibling_bytes)),
            Some((*buffered, *buffer_bytes)),
        ),
        E::SinkBufferFull {
            dir,
            buffered,
            buffer_bytes,
            ..
        } => full(py, msg, dir, None, Some((*buffered, *buffer_bytes))),
        E::FlushTimeout {
            dir, packs, bytes, ..
        } => raise(
            py,
            "DeadlineError",
            msg,
            &[
                ("packs", Attr::U(*packs)),
                ("bytes", Attr::U(*bytes)),
                ("path", path(dir)),
            ],
        ),
        E::CorruptPack { pack, problem } => raise(
            py,
            "CorruptPackError",
            msg,
            &[
                ("offset", problem.offset().map_or(Attr::None, Attr::U)),
                ("pack", Attr::S(pack.clone())),
            ],
        ),
        E::InvalidConfig { .. } | E::BadDestination { .. } | E::BadPackId { .. } => config(py, msg),
        _ => plain(py, msg),
    }
}

/// `spool.FullError` with the figures its cause has: the spool's (`used`,
/// `budget`, `dead_sibling_bytes`) and the sink buffer's (`buffered`,
/// `buffer_bytes`).
fn full(
    py: Python<'_>,
    msg: String,
    dir: &std::path::Path,
    spool: Option<(u64, u64, u64)>,
    buffer: Option<(u64, u64)>,
) -> PyErr {
    let mut attrs = vec![("path", path(dir))];
    if let Some((used, budget, dead)) = spool {
        attrs.extend([
            ("used", Attr::U(used)),
            ("budget", Attr::U(budget)),
            ("dead_sibling_bytes", Attr::U(dead)),
        ]);
    }
    if let Some((buffered, buffer_bytes)) = buffer {
        attrs.extend([
            ("buffered", Attr::U(buffered)),
            ("buffer_bytes", Attr::U(buffer_bytes)),
        ]);
    }
    raise(py, "FullError", msg, &attrs)
}

/// spool-service's failures.
pub fn service(py: Python<'_>, err: &spool_service::Error) -> PyErr {
    use spool_service::Error as E;
    match err {
        E::Core(e) => core(py, e),
        E::Lock(e) => lock(py, e),
        E::Sink { source, .. } => core(py, source),
        E::InvalidConfig { .. } | E::Config(_) => config(py, err.to_string()),
        E::Upload(e) => upload(py, e),
        E::Catalog(e) => catalog(py, e),
        E::FlushTimeout { dir, ready, .. } => raise(
            py,
            "DeadlineError",
            err.to_string(),
            &[("packs", Attr::U(*ready as u64)), ("path", path(dir))],
        ),
        E::PackMismatch {
            pack_id, offset, ..
        } => raise(
            py,
            "CorruptPackError",
            err.to_string(),
            &[
                ("offset", offset.map_or(Attr::None, Attr::U)),
                ("pack", Attr::S(pack_id.clone())),
            ],
        ),
        _ => plain(py, err.to_string()),
    }
}

/// spool-catalog's failures (a bad URL is a `ConfigError`).
pub fn catalog(py: Python<'_>, err: &spool_catalog::Error) -> PyErr {
    use spool_catalog::Error as E;
    match err {
        E::InvalidUrl { .. } | E::BackendNotBuilt { .. } | E::InvalidConfig(_) => {
            config(py, err.to_string())
        }
        _ => plain(py, err.to_string()),
    }
}

/// spool-upload's failures (a bad URL or setting is a `ConfigError`).
pub fn upload(py: Python<'_>, err: &spool_upload::Error) -> PyErr {
    use spool_upload::Error as E;
    match err {
        E::InvalidUrl { .. }
        | E::BackendNotBuilt { .. }
        | E::StoreConfig { .. }
        | E::InvalidConfig(_) => config(py, err.to_string()),
        _ => plain(py, err.to_string()),
    }
}
