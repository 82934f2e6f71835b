//! How a spool is opened with respect to its owner lock, and the options
//! every lock operation takes.

use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// How a spool (a sink, a service) treats its directory's owner lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// Take the lock when the spool opens (the default).
    #[default]
    Take,
    /// Take none: the caller already holds the lock in THIS process
    /// (checked with [`crate::verify_held_by_caller`]).
    HeldByCaller,
}

impl LockMode {
    /// The mode's config/flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Take => "take",
            LockMode::HeldByCaller => "held_by_caller",
        }
    }
}

impl FromStr for LockMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "take" => Ok(LockMode::Take),
            "held_by_caller" => Ok(LockMode::HeldByCaller),
            other => Err(Error::UnknownMode {
                value: other.to_owned(),
            }),
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options for every lock operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    /// Admit filesystems where flock does not exclude other nodes (NFS,
    /// Lustre, FUSE, ...). Only for a filesystem that one node uses.
    pub allow_shared_filesystem: bool,
    /// Unheld `.creating` staging copies older than this are stale: adoption
    /// removes them ([`crate::remove_stale_staging`]). Default 60 s.
    pub staging_max_age: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            allow_shared_filesystem: false,
            staging_max_age: Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_unknown_is_refused_by_name() {
        assert_eq!("take".parse::<LockMode>().unwrap(), LockMode::Take);
        assert_eq!(
            "held_by_caller".parse::<LockMode>().unwrap(),
            LockMode::HeldByCaller
        );
        assert_eq!(LockMode::default(), LockMode::Take);
        let err = "Take".parse::<LockMode>().unwrap_err().to_string();
        assert!(err.contains("\"Take\""), "{err}");
        assert!(
            err.contains("\"take\"") && err.contains("\"held_by_caller\""),
            "{err}"
        );
        assert_eq!(
            LockOptions::default().staging_max_age,
            Duration::from_secs(60)
        );
    }
}
