//! spool-py: the Python binding of spool (PyO3, abi3 for CPython >= 3.9),
//! built by maturin as the extension module `spool._native` under the pure
//! Python package `spool` (`python/spool/`: the exception classes, the
//! catalog wrapper, the type stubs).
//!
//! A thin layer: every rule lives in the library crates. What this crate
//! adds is only what a Python object needs:
//!
//! - **The GIL.** Every call that can block — an engine's start, flush and
//!   close, a sink's flush and close, a write blocked by admission, catalog
//!   and store reads — runs in `Python::detach`, so other Python threads
//!   run meanwhile. A write first tries without waiting while holding the
//!   GIL (the common case costs no GIL round trip) and waits only after
//!   letting go of it.
//! - **Fork.** Every handle remembers the pid that opened it and refuses,
//!   with `spool.ForkedError`, to act in another process (a forked
//!   DataLoader worker); its drop there forgets the Rust state instead of
//!   waiting on the parent's threads. The locks themselves are closed in
//!   the child by spool-lock's atfork handler.
//! - **Exit.** Engines and sinks not closed by the program are closed by an
//!   `atexit` hook (sinks, then engines): sealed, shipped within the close
//!   flush, the directory released — or, when a sink could not seal, kept
//!   locked until the process is gone, never unlocked under a live writer.
//! - **Errors.** The library's typed errors become `spool.Error`
//!   subclasses carrying the same message and its figures ([`errors`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod engine;
mod errors;
mod live;
mod opts;
mod readers;
mod sink;

use pyo3::prelude::*;

/// The native half of the `spool` package (import `spool`, not this).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<sink::Sink>()?;
    m.add_class::<readers::Records>()?;
    m.add_class::<readers::Catalog>()?;
    m.add_function(wrap_pyfunction!(readers::read_pack, m)?)?;
    m.add_function(wrap_pyfunction!(readers::fetch, m)?)?;
    m.add_function(wrap_pyfunction!(readers::fetch_many, m)?)?;
    m.add_function(wrap_pyfunction!(live::_close_at_exit, m)?)?;
    m.add("COLUMNS", readers::COLUMNS.to_vec())?;
    m.add("CONFIG_KEYS", config::argument_names())?;
    Ok(())
}
