//! [`ConfigError`]: a refused configuration value, key or file (a leaf:
//! every part of the configuration refuses with it).

use std::fmt;

/// A refused configuration value, key or file: what, where from, and what
/// is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}
