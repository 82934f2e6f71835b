//! [`LeaseHolder`]: who claims a lease, as one typed value from the service
//! that claims to every reader of the lease log (the service's snapshot,
//! `spool run`'s messages and JSON, Python).

use std::fmt;
use std::path::Path;

/// Who claims a lease: a service's host, pid and own spool directory. The
/// lease log's `holder` column holds it as `host:pid:dir`
/// ([`LeaseHolder::as_str`]); a row written by anything else (a test, an
/// older build) parses with the parts it has, and shows as it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    raw: String,
    host: String,
    pid: Option<u32>,
    dir: Option<String>,
}

impl LeaseHolder {
    /// The holder a service on `host` with `pid` and own directory `dir`
    /// claims as.
    pub fn new(host: &str, pid: u32, dir: &Path) -> LeaseHolder {
        LeaseHolder::parse(&format!("{host}:{pid}:{}", dir.display()))
    }

    /// A holder as the lease log spells it (never fails: missing parts are
    /// `None`).
    pub fn parse(raw: &str) -> LeaseHolder {
        let mut it = raw.splitn(3, ':');
        let host = it.next().unwrap_or_default().to_string();
        let pid = it.next().and_then(|p| p.parse().ok());
        let dir = it.next().map(str::to_string);
        LeaseHolder {
            raw: raw.to_string(),
            host,
            pid,
            dir,
        }
    }

    /// The text of the lease log's `holder` column.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Its host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its pid, if the row names one.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Its own spool directory, if the row names one.
    pub fn dir(&self) -> Option<&str> {
        self.dir.as_deref()
    }
}

/// `pid N on host H (DIR)`; a row of another form as written, quoted.
impl fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.pid, &self.dir) {
            (Some(pid), Some(dir)) => write!(f, "pid {pid} on host {} ({dir})", self.host),
            (Some(pid), None) => write!(f, "pid {pid} on host {}", self.host),
            _ => write!(f, "{:?}", self.raw),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_round_trips_through_its_column_and_reads_any_row() {
        let h = LeaseHolder::new("node7", 42, Path::new("/var/lib/spool/k/r0-1:x"));
        let back = LeaseHolder::parse(h.as_str());
        assert_eq!(back, h);
        assert_eq!(back.host(), "node7");
        assert_eq!(back.pid(), Some(42));
        assert_eq!(back.dir(), Some("/var/lib/spool/k/r0-1:x"));
        assert_eq!(
            back.to_string(),
            "pid 42 on host node7 (/var/lib/spool/k/r0-1:x)"
        );
        let odd = LeaseHolder::parse("a");
        assert_eq!((odd.host(), odd.pid(), odd.dir()), ("a", None, None));
        assert_eq!(odd.to_string(), "\"a\"");
        assert_eq!(LeaseHolder::parse("h:1").to_string(), "pid 1 on host h");
    }
}
