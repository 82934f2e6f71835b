//! The `spool` configuration from Python: a `config=` path to the same TOML
//! file the command reads (else `$SPOOL_CONFIG`, else `./spool.toml`), the
//! `SPOOL_*` variables, and every key of spool-service's key table as a
//! keyword argument named by [`Key::argument_name`] (`lease_ttl` for
//! `lease.ttl`, `poll_interval` for `service.poll_interval`, `root` for
//! `spool.root`). Keyword arguments rank with the command's flags (over the
//! environment, the file and the defaults), and every value goes through
//! the table's own parser, so a refusal has the command's words: the key,
//! the argument, the value and what is allowed.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use spool_service::config::keys::{self, Key, KEYS};
use spool_service::config::{Config, FlagValue};

use crate::errors;
use crate::opts::Opts;

/// A Python value as the raw text the key table parses: `True`/`False` as
/// `true`/`false`, numbers and strings as written, path-like objects by
/// `os.fspath`; `None` as not given. Anything else is refused naming the
/// key and what it allows.
fn raw_value(key: &'static Key, v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let py = v.py();
    if v.is_none() {
        return Ok(None);
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(Some(v.extract::<bool>()?.to_string()));
    }
    if v.is_instance_of::<PyInt>()
        || v.is_instance_of::<PyFloat>()
        || v.is_instance_of::<PyString>()
    {
        return Ok(Some(v.str()?.to_string()));
    }
    if let Ok(p) = py.import("os")?.call_method1("fspath", (v,)) {
        if let Ok(s) = p.extract::<String>() {
            return Ok(Some(s));
        }
    }
    let ty = v
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    Err(errors::config(
        py,
        format!(
            "bad value for {} (argument {}): a {ty} is not allowed; allowed: {}",
            key.name,
            key.argument_name(),
            key.kind.allowed()
        ),
    ))
}

/// One key given as a parameter of the call's own signature (`root`,
/// `store`, ...).
pub fn named(key: &'static Key, v: Option<Bound<'_, PyAny>>) -> PyResult<Option<FlagValue>> {
    match v {
        None => Ok(None),
        Some(v) => Ok(raw_value(key, &v)?.map(|raw| FlagValue::argument(key, raw))),
    }
}

/// The destination parameters of a constructor's signature (`root`,
/// `store`, `catalog`, `rank`) and every configuration key among its
/// keyword arguments (taken out of `opts`, leaving the call's own options),
/// as the arguments [`load`] resolves.
pub fn arguments(
    opts: &mut Opts<'_>,
    [root, store, catalog, rank]: [Option<Bound<'_, PyAny>>; 4],
) -> PyResult<Vec<FlagValue>> {
    let mut args = Vec::new();
    for (key, v) in [
        (&keys::ROOT.key, root),
        (&keys::STORE.key, store),
        (&keys::CATALOG.key, catalog),
        (&keys::RANK.key, rank),
    ] {
        args.extend(named(key, v)?);
    }
    args.extend(take_keys(opts)?);
    Ok(args)
}

/// Takes every configuration key out of `opts` (by its argument name),
/// leaving the call's other options there.
pub fn take_keys(opts: &mut Opts<'_>) -> PyResult<Vec<FlagValue>> {
    let mut out = Vec::new();
    for key in KEYS {
        if let Some(v) = opts.take(&key.argument_name())? {
            if let Some(raw) = raw_value(key, &v)? {
                out.push(FlagValue::argument(key, raw));
            }
        }
    }
    Ok(out)
}

/// Resolves the configuration as the command does, with `args` in the
/// flags' place; a refusal is a `spool.ConfigError`.
pub fn load(py: Python<'_>, config: Option<PathBuf>, args: &[FlagValue]) -> PyResult<Config> {
    Config::load(config.as_deref(), args).map_err(|e| errors::config(py, e.0))
}

/// Every configuration key as (keyword-argument name, key name), in the
/// table's order: `spool.CONFIG_KEYS`.
pub fn argument_names() -> Vec<(String, &'static str)> {
    KEYS.iter().map(|k| (k.argument_name(), k.name)).collect()
}
