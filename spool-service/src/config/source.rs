//! Where a configuration value came from ([`Source`]): what a refusal
//! names and `spool config show` prints.

use std::fmt;
use std::path::PathBuf;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// Derived from the spool root (the embedded store and catalog).
    Embedded,
    /// An environment variable (its name).
    Env(String),
    /// The config file (its path).
    File(PathBuf),
    /// A flag (its spelling).
    Flag(String),
    /// An embedder's keyword argument (its name, e.g. `lease_ttl` of
    /// spool-py's `spool.Engine(lease_ttl=5)`); ranks with the flags.
    Argument(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Embedded => f.write_str("default (embedded, under spool.root)"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Flag(s) => write!(f, "flag {s}"),
            Source::Argument(s) => write!(f, "argument {s}"),
        }
    }
}
