//! [`Cause`]: a failure carried through the adoption machine (and the
//! drain's outcomes it reads) with its type kept.
//!
//! The machine is generic over its environment and its states are plain
//! data (`Clone`, `Eq`, so the state-machine tests can compare them), which
//! library errors are not: `spool_lock::Error` holds an `io::Error`. A
//! `Cause` shares the error behind an `Arc`, so the machine can clone and
//! compare it (by its message) while the type stays there for whoever asks
//! (`Cause::downcast_ref` in the tests, [`std::error::Error::source`]). Text enters a
//! cause only where no typed error exists (the fakes of the tests, a
//! violated internal expectation).

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// Why a probe, a take or a recovery step failed: the library error itself.
#[derive(Clone)]
pub struct Cause(Arc<dyn StdError + Send + Sync + 'static>);

impl Cause {
    /// Keeps `err` as the cause.
    pub fn new(err: impl StdError + Send + Sync + 'static) -> Self {
        Cause(Arc::new(err))
    }

    /// The error, if it is a `T` (`spool_lock::Error`, `spool_core::Error`,
    /// `std::io::Error`, ...): what the tests check a cause by.
    #[cfg(test)]
    pub fn downcast_ref<T: StdError + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cause({:?})", self.0.to_string())
    }
}

impl StdError for Cause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// Two causes are equal when they say the same (the state-machine tests
/// compare states; the machine itself never compares causes).
impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

impl From<spool_lock::Error> for Cause {
    fn from(e: spool_lock::Error) -> Self {
        Cause::new(e)
    }
}

impl From<spool_core::Error> for Cause {
    fn from(e: spool_core::Error) -> Self {
        Cause::new(e)
    }
}

impl From<tokio::task::JoinError> for Cause {
    fn from(e: tokio::task::JoinError) -> Self {
        Cause::new(e)
    }
}

/// A cause that is only a message (the tests' fakes, an internal
/// expectation that did not hold).
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

impl From<String> for Cause {
    fn from(s: String) -> Self {
        Cause::new(Message(s))
    }
}

impl From<&str> for Cause {
    fn from(s: &str) -> Self {
        Cause::new(Message(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_cause_keeps_the_library_error_it_was_made_of() {
        let lock = spool_lock::Error::Io {
            op: "open",
            path: PathBuf::from("/spool/r1-aa/.owner.lock"),
            source: std::io::Error::from_raw_os_error(13),
        };
        let text = lock.to_string();
        let cause = Cause::from(lock);
        assert_eq!(cause.to_string(), text);
        let back = cause.downcast_ref::<spool_lock::Error>().expect("typed");
        assert!(matches!(back, spool_lock::Error::Io { op: "open", .. }));
        let io = StdError::source(&cause).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.and_then(|e| e.raw_os_error()), Some(13));
        assert_eq!(cause.clone(), cause, "clones compare equal");
        assert!(Cause::from("EMFILE")
            .downcast_ref::<spool_lock::Error>()
            .is_none());
    }

    /// The machine's states print and compare by what their causes say:
    /// a state-machine test that expects one cause must fail on another.
    #[test]
    fn causes_compare_and_print_by_their_message() {
        assert_ne!(Cause::from("EACCES"), Cause::from("EMFILE"));
        assert_eq!(Cause::from("EACCES"), Cause::from("EACCES".to_string()));
        assert_eq!(format!("{:?}", Cause::from("EACCES")), r#"Cause("EACCES")"#);
    }
}
