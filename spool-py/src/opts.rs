//! Keyword options: each read once by name, its type checked, and any left
//! over refused naming it and the options that exist.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;

/// The keyword arguments of one call, consumed by name.
pub struct Opts<'py> {
    py: Python<'py>,
    what: &'static str,
    dict: Option<Bound<'py, PyDict>>,
    known: Vec<String>,
}

impl<'py> Opts<'py> {
    /// Wraps `kwargs` of `what` (e.g. `"Engine()"`).
    pub fn new(py: Python<'py>, what: &'static str, kwargs: Option<&Bound<'py, PyDict>>) -> Self {
        Opts {
            py,
            what,
            dict: kwargs.map(|d| d.copy()).transpose().ok().flatten(),
            known: Vec::new(),
        }
    }

    /// Takes the value of `name` (None when absent or `None`), counting
    /// it as a known option.
    pub fn take(&mut self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.known.push(name.to_string());
        let Some(d) = &self.dict else { return Ok(None) };
        let v = d.get_item(name)?;
        if v.is_some() {
            d.del_item(name)?;
        }
        Ok(v.filter(|v| !v.is_none()))
    }

    fn bad(&self, name: &str, v: &Bound<'py, PyAny>, allowed: &str) -> PyErr {
        let shown = v.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
        errors::config(
            self.py,
            format!(
                "{}: option {name}={shown} is not allowed: {allowed}",
                self.what
            ),
        )
    }

    /// A whole number at least `min`.
    pub fn uint(&mut self, name: &'static str, min: u64) -> PyResult<Option<u64>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(self.bad(name, &v, &format!("expected a whole number >= {min}")));
        }
        match v.extract::<u64>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(self.bad(name, &v, &format!("expected a whole number >= {min}"))),
        }
    }

    /// Seconds (int or float) at least `min_s`.
    pub fn secs(&mut self, name: &'static str, min_s: f64) -> PyResult<Option<Duration>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        let allowed = format!("expected seconds (a number) >= {min_s}");
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(self.bad(name, &v, &allowed));
        }
        match v.extract::<f64>() {
            Ok(s) if s.is_finite() && s >= min_s => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(self.bad(name, &v, &allowed)),
        }
    }

    /// `True` or `False`.
    pub fn flag(&mut self, name: &'static str) -> PyResult<Option<bool>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        if !v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(self.bad(name, &v, "expected True or False"));
        }
        Ok(Some(v.extract::<bool>()?))
    }

    /// One of `choices`.
    pub fn choice(
        &mut self,
        name: &'static str,
        choices: &[&'static str],
    ) -> PyResult<Option<&'static str>> {
        let Some(v) = self.take(name)? else {
            return Ok(None);
        };
        let s: Option<String> = v.extract().ok();
        match s.and_then(|s| choices.iter().find(|c| **c == s).copied()) {
            Some(c) => Ok(Some(c)),
            None => Err(self.bad(name, &v, &format!("expected one of {}", choices.join(", ")))),
        }
    }

    /// Refuses whatever was not taken.
    pub fn finish(self) -> PyResult<()> {
        let Some(d) = &self.dict else { return Ok(()) };
        if d.is_empty() {
            return Ok(());
        }
        let left: Vec<String> = d.keys().iter().map(|k| k.to_string()).collect();
        let mut known = self.known.clone();
        known.sort_unstable();
        known.dedup();
        Err(errors::config(
            self.py,
            format!(
                "{}: unknown option(s) {}; the options are {}",
                self.what,
                left.join(", "),
                known.join(", ")
            ),
        ))
    }
}
