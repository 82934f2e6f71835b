//! The owner record: the text inside `<dir>/.owner.lock`.
//!
//! Format (UTF-8, one `key: value` per line, written whole by the holder
//! after it takes the lock, rewritten by every take):
//!
//! ```text
//! host: node17
//! pid: 4242
//! purpose: claim            (or `adopting`, or `blocked: <why>`)
//! producer_host: node17     (only when the holder is not the producer)
//! producer_pid: 4100
//! ```
//!
//! The `producer_*` lines carry the provenance of the directory's packs
//! across takes: a claim's holder is its producer; an adopter (and a
//! `blocked` mark, and the clearing of one) rewrites the record but
//! carries the producer it found (`Claim::producer` hands it to the
//! adopter), so catalog rows name the process that staged a pack, never
//! the one that drained it. Readers
//! that predate these lines ignore them as unknown keys.
//!
//! Parsing is defensive: unknown keys are ignored, a missing or garbled
//! field reads as unknown, and nothing in the file can make a reader panic.

/// Why the holder holds (or last held) the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purpose {
    /// A claim: the directory's own producer/service (`acquire`).
    Claim,
    /// An adopter draining a dead directory (`try_adopt`).
    Adopting,
    /// An adopter gave up on the directory and says why (`mark_blocked`);
    /// other services skip it until an operator clears the mark.
    Blocked(String),
    /// Anything else found in the file (kept verbatim, for messages).
    Unknown(String),
}

impl Purpose {
    fn render(&self) -> String {
        match self {
            Purpose::Claim => "claim".to_owned(),
            Purpose::Adopting => "adopting".to_owned(),
            Purpose::Blocked(why) => format!("blocked: {}", one_line(why)),
            Purpose::Unknown(s) => one_line(s),
        }
    }

    fn parse(s: &str) -> Purpose {
        let s = s.trim();
        match s {
            "claim" => Purpose::Claim,
            "adopting" => Purpose::Adopting,
            _ => match s.strip_prefix("blocked:") {
                Some(why) => Purpose::Blocked(why.trim().to_owned()),
                None => Purpose::Unknown(s.to_owned()),
            },
        }
    }
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// The process that staged a directory's packs: the holder of its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    /// Its host name (`"unknown"` when the record has none).
    pub host: String,
    /// Its pid (in its own pid namespace), if the record has one.
    pub pid: Option<u32>,
}

/// The owner record of a spool directory, as written by its (last) holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The holder's host name (`"unknown"` when the record has none).
    pub host: String,
    /// The holder's pid (in its own pid namespace), if the record has one.
    pub pid: Option<u32>,
    /// Why it holds the lock.
    pub purpose: Purpose,
    /// The producer carried over from an earlier record, when the holder
    /// is not the producer (an adopter, a `blocked` mark); see
    /// [`OwnerRecord::producer`].
    pub carried: Option<Producer>,
}

/// Longest record read; anything past it is ignored.
pub(crate) const MAX_RECORD_BYTES: usize = 4096;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Producer-controlled text made safe to store and show: line breaks
/// become spaces (one record line, one value), any other control character
/// its escape (`\u{1b}`), so no record can rewrite a terminal or be
/// refused by a catalog as a row. Idempotent: an escape holds no control
/// character.
pub(crate) fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

impl OwnerRecord {
    /// Who staged the directory's packs, as this record says: the carried
    /// producer if any, else the holder itself when it holds a claim.
    /// `None` when the record cannot tell (an adopter's record written
    /// before producers were carried, or a purpose this build does not
    /// know).
    pub fn producer(&self) -> Option<Producer> {
        match (&self.carried, &self.purpose) {
            (Some(p), _) => Some(p.clone()),
            (None, Purpose::Claim) => Some(Producer {
                host: self.host.clone(),
                pid: self.pid,
            }),
            (None, _) => None,
        }
    }

    /// Renders the record as written into the lock file. The text always
    /// fits in the 4096 bytes a reader reads: a longer host or
    /// purpose (a long `blocked:` reason) is cut at a character boundary,
    /// so what a reader parses is exactly what was written.
    pub fn render(&self) -> String {
        let mut out = format!("host: {}\n", cut(&one_line(&self.host), 256).trim());
        if let Some(pid) = self.pid {
            out.push_str(&format!("pid: {pid}\n"));
        }
        // The producer goes before the purpose, whose reason may be cut to
        // fit: the provenance is never what is lost.
        if let Some(p) = &self.carried {
            out.push_str(&format!(
                "producer_host: {}\n",
                cut(&one_line(&p.host), 256).trim()
            ));
            if let Some(pid) = p.pid {
                out.push_str(&format!("producer_pid: {pid}\n"));
            }
        }
        let room = MAX_RECORD_BYTES - out.len() - "purpose: \n".len();
        let purpose = self.purpose.render();
        out.push_str(&format!("purpose: {}\n", cut(&purpose, room).trim_end()));
        out
    }

    /// Parses a lock file's contents. `None` when nothing in it looks like a
    /// record (empty, or garbage without any known key).
    pub fn parse(bytes: &[u8]) -> Option<OwnerRecord> {
        let bytes = &bytes[..bytes.len().min(MAX_RECORD_BYTES)];
        let text = String::from_utf8_lossy(bytes);
        let (mut host, mut pid, mut purpose) = (None, None, None);
        let (mut producer_host, mut producer_pid) = (None, None);
        let mut seen = false;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            // A lone `\r` inside a line (lines() only strips `\r\n`) is
            // made a space and any other control character escaped, as
            // render does: a record never carries a control character that
            // could rewrite a terminal line or poison a catalog row.
            let value = one_line(value);
            let value = value.trim();
            match key.trim() {
                "host" => {
                    seen = true;
                    host = Some(value.to_owned());
                }
                "pid" => {
                    seen = true;
                    pid = value.parse::<u32>().ok().filter(|p| *p > 0);
                }
                "purpose" => {
                    seen = true;
                    purpose = Some(Purpose::parse(value));
                }
                "producer_host" => producer_host = Some(value.to_owned()),
                "producer_pid" => {
                    producer_pid = value.parse::<u32>().ok().filter(|p| *p > 0);
                }
                _ => {}
            }
        }
        if !seen {
            return None;
        }
        Some(OwnerRecord {
            host: host
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "unknown".to_owned()),
            pid,
            purpose: purpose.unwrap_or_else(|| Purpose::Unknown(String::new())),
            carried: (producer_host.is_some() || producer_pid.is_some()).then(|| Producer {
                host: producer_host
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "unknown".to_owned()),
                pid: producer_pid,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_purpose() {
        for purpose in [
            Purpose::Claim,
            Purpose::Adopting,
            Purpose::Blocked("disk full\nreally".into()),
        ] {
            let rec = OwnerRecord {
                host: "node17".into(),
                pid: Some(4242),
                purpose: purpose.clone(),
                carried: None,
            };
            let back = OwnerRecord::parse(rec.render().as_bytes()).unwrap();
            assert_eq!(back.host, "node17");
            assert_eq!(back.pid, Some(4242));
            match purpose {
                Purpose::Blocked(_) => {
                    assert_eq!(back.purpose, Purpose::Blocked("disk full really".into()))
                }
                p => assert_eq!(back.purpose, p),
            }
        }
    }

    #[test]
    fn garbage_is_unknown_never_a_crash() {
        assert_eq!(OwnerRecord::parse(b""), None);
        assert_eq!(OwnerRecord::parse(b"\xff\xfe\x00garbage"), None);
        let rec = OwnerRecord::parse(b"pid: notanumber\npurpose: what\x00\n").unwrap();
        assert_eq!(rec.pid, None);
        assert_eq!(rec.host, "unknown");
        // a control character is kept as its escape, never raw
        assert_eq!(rec.purpose, Purpose::Unknown("what\\u{0}".into()));
        // The old `<host> <pid>` form has no key: no record.
        assert_eq!(OwnerRecord::parse(b"node 12\n"), None);
        // A reason longer than a reader reads is cut when written, at a
        // character boundary, so the record reads back as written (found
        // by the owner_record fuzz target).
        let long = OwnerRecord {
            host: "n1".into(),
            pid: Some(7),
            purpose: Purpose::Blocked("é".repeat(5000)),
            carried: Some(Producer {
                host: "n0".into(),
                pid: Some(3),
            }),
        };
        let text = long.render();
        assert!(text.len() <= MAX_RECORD_BYTES, "{} bytes", text.len());
        assert!(
            text.len() + 8 >= MAX_RECORD_BYTES,
            "cut to fill the record: {} bytes",
            text.len()
        );
        let back = OwnerRecord::parse(text.as_bytes()).unwrap();
        assert_eq!(back.render(), text);
        assert!(matches!(&back.purpose, Purpose::Blocked(w) if w.starts_with("éé")));
        // The producer survives the cut.
        assert_eq!(back.producer().and_then(|p| p.pid), Some(3));
        let big = vec![b'x'; 100_000];
        assert_eq!(OwnerRecord::parse(&big), None);
        // A lone carriage return reads as a space, as render writes it
        // (found by the owner_record fuzz target).
        let rec = OwnerRecord::parse(b"host: n1\npurpose: blocked: a\rb\n").unwrap();
        assert_eq!(rec.purpose, Purpose::Blocked("a b".into()));
        assert_eq!(OwnerRecord::parse(rec.render().as_bytes()), Some(rec));
        let rec = OwnerRecord::parse(b"host:\npid: -3\n").unwrap();
        assert_eq!((rec.host.as_str(), rec.pid), ("unknown", None));
    }

    #[test]
    fn the_producer_is_the_claimant_or_the_carried_one() {
        let claim = OwnerRecord::parse(b"host: n1\npid: 10\npurpose: claim\n").unwrap();
        let p = claim.producer().unwrap();
        assert_eq!((p.host.as_str(), p.pid), ("n1", Some(10)));
        // An adopter's record without a carried producer cannot tell.
        let adopting = OwnerRecord::parse(b"host: n1\npid: 20\npurpose: adopting\n").unwrap();
        assert_eq!(adopting.producer(), None);
        let carried = OwnerRecord {
            carried: Some(p.clone()),
            ..adopting
        };
        let back = OwnerRecord::parse(carried.render().as_bytes()).unwrap();
        assert_eq!(back, carried);
        assert_eq!(back.producer(), Some(p));
        // A carried producer outranks the holder even under `claim` (an
        // operator's `spool unblock` writes one).
        let cleared = OwnerRecord {
            purpose: Purpose::Claim,
            ..back
        };
        assert_eq!(cleared.producer().and_then(|p| p.pid), Some(10));
    }

    /// What the mutation run of `record.rs` found untested (mutants/spool-lock).
    #[test]
    fn pid_zero_is_no_pid_a_lone_producer_key_is_kept_and_a_long_purpose_is_cut() {
        let rec =
            OwnerRecord::parse(b"host: h\npid: 0\nproducer_pid: 0\npurpose: claim\n").unwrap();
        assert_eq!(rec.pid, None, "pid 0 names no process");
        assert_eq!(rec.carried, None, "nor does producer pid 0: no producer");
        let only_host = OwnerRecord::parse(b"host: a\nproducer_host: b\n").unwrap();
        assert_eq!(only_host.carried.map(|p| p.host).as_deref(), Some("b"));
        let only_pid = OwnerRecord::parse(b"host: a\nproducer_pid: 7\n").unwrap();
        assert_eq!(only_pid.carried.and_then(|p| p.pid), Some(7));
        let long = OwnerRecord {
            host: "h".into(),
            pid: Some(1),
            purpose: Purpose::Blocked("x".repeat(3 * MAX_RECORD_BYTES)),
            carried: Some(Producer {
                host: "p".into(),
                pid: Some(2),
            }),
        };
        let text = long.render();
        assert!(text.len() <= MAX_RECORD_BYTES, "{} bytes", text.len());
        assert!(
            text.len() + 8 >= MAX_RECORD_BYTES,
            "cut to fill the record: {} bytes",
            text.len()
        );
        assert!(
            text.ends_with("\n"),
            "the purpose line is cut, not the record"
        );
        assert_eq!(Purpose::Adopting.to_string(), "adopting");
        assert_eq!(
            Purpose::Blocked("disk\nfull".into()).to_string(),
            "blocked: disk full"
        );
    }
}
