//! What values a key takes ([`Kind`]), the parsed [`Value`], and the one
//! parser every source goes through ([`parse_value`]), so a refusal always
//! names the key, the value (credentials masked), its source and what is
//! allowed.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spool_catalog::{mask_url, LeaseScope};

/// What values a key takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory path (made absolute).
    Path,
    /// An object store URL.
    StoreUrl,
    /// A catalog URL.
    CatalogUrl,
    /// A store id: letters, digits, `_`, `-`, `.`.
    Name,
    /// A whole number at least this.
    Count(u64),
    /// A size in bytes (`1048576`, `"64MiB"`, `"1GB"`), at least this.
    Bytes(u64),
    /// A duration (`30` seconds, `"500ms"`, `"2m"`), at least this many
    /// milliseconds; `whole` asks for whole seconds.
    Secs {
        /// Least value, milliseconds.
        min_ms: u64,
        /// Whole seconds only.
        whole: bool,
    },
    /// `true` or `false`.
    Bool,
    /// `node` or `catalog`.
    LeaseScope,
    /// `self` or `daemon`.
    Ship,
    /// `IP:PORT`.
    Addr,
    /// A spool access mode: `"0700"`, `"0750"` or `"0770"`.
    AccessMode,
    /// A group name on this host, or a numeric gid.
    Group,
}

impl Kind {
    /// What values of this kind look like, for refusals.
    pub fn allowed(self) -> String {
        match self {
            Kind::Path => "a directory path".into(),
            Kind::StoreUrl => {
                "an object store URL: s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX], \
                 az://CONTAINER[/PREFIX], file:///ABS/DIR or memory:// (credentials come from \
                 the AWS_*/GOOGLE_*/AZURE_* variables, never the URL)"
                    .into()
            }
            Kind::CatalogUrl => "a catalog URL: clickhouse://HOST:PORT/DATABASE[?table_prefix=P], \
                 sqlite:///ABS/PATH.db or memory://"
                .into(),
            Kind::Name => "a name of letters, digits, '_', '-' and '.' (at most 64)".into(),
            Kind::Count(min) => format!("a whole number ≥ {min}"),
            Kind::Bytes(min) => format!(
                "a size in bytes ≥ {min}: a whole number or a string like \"64MiB\", \"1GiB\", \"500KB\""
            ),
            Kind::Secs { min_ms, whole } => format!(
                "a duration{}: seconds as a number, or a string like \"500ms\", \"30s\", \"2m\", \"1h\"; at least {}",
                if whole { " in whole seconds" } else { "" },
                show_ms(min_ms)
            ),
            Kind::Bool => "true or false".into(),
            Kind::LeaseScope => "node or catalog".into(),
            Kind::Ship => "self or daemon".into(),
            Kind::Addr => "a socket address IP:PORT, e.g. 127.0.0.1:9464".into(),
            Kind::AccessMode => "\"0700\" (private), \"0750\" (the group reads) or \"0770\" (the group also adopts)".into(),
            Kind::Group => "a group name of this host (see /etc/group) or a numeric gid".into(),
        }
    }
}

pub(crate) fn show_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `d` as it reads back exactly: whole milliseconds as `"30s"` or
/// `"1500ms"`, anything finer as decimal seconds (`"0.0015005s"`).
fn show_duration(d: Duration) -> String {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        return show_ms(d.as_millis() as u64);
    }
    let fraction = format!("{:09}", d.subsec_nanos());
    format!("{}.{}s", d.as_secs(), fraction.trim_end_matches('0'))
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A path.
    Path(PathBuf),
    /// A URL or a name.
    Text(String),
    /// A number.
    Count(u64),
    /// A size.
    Bytes(u64),
    /// A duration.
    Secs(Duration),
    /// A flag.
    Bool(bool),
    /// A lease scope.
    Scope(LeaseScope),
    /// Who ships.
    Ship(crate::Ship),
    /// An address.
    Addr(SocketAddr),
}

impl fmt::Display for Value {
    /// Shown with credentials masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Path(p) => write!(f, "{}", p.display()),
            Value::Text(t) => f.write_str(&mask_url(t)),
            Value::Count(n) => write!(f, "{n}"),
            Value::Bytes(n) => f.write_str(&show_bytes(*n)),
            Value::Secs(d) => f.write_str(&show_duration(*d)),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Scope(LeaseScope::Node) => f.write_str("node"),
            Value::Scope(LeaseScope::Catalog) => f.write_str("catalog"),
            Value::Ship(s) => f.write_str(s.as_str()),
            Value::Addr(a) => write!(f, "{a}"),
        }
    }
}

fn show_bytes(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

/// `"64MiB"`, `"1GB"`, `"4096"` → bytes.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `"30"`, `"2.5"`, `"500ms"`, `"30s"`, `"2m"`, `"1h"` → a duration, at
/// most 10⁹ seconds. The number is read as a decimal, exactly (digits
/// below a nanosecond are dropped), never through a float, so every
/// duration [`Value`] shows reads back as the same value.
pub fn parse_duration(s: &str) -> Option<Duration> {
    const NS_PER_SEC: u128 = 1_000_000_000;
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let ns_per_unit: u128 = match unit.trim() {
        "" | "s" => NS_PER_SEC,
        "ms" => NS_PER_SEC / 1000,
        "m" | "min" => 60 * NS_PER_SEC,
        "h" => 3600 * NS_PER_SEC,
        _ => return None,
    };
    let (whole, fraction) = num.split_once('.').unwrap_or((num, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let whole: u128 = match whole.trim_start_matches('0') {
        "" => 0,
        digits => digits.parse().ok()?,
    };
    // 24 digits are below a nanosecond of any unit (an hour is 3.6e12 ns),
    // and 10^24 times an hour's nanoseconds still fits in a u128.
    let fraction = &fraction[..fraction.len().min(24)];
    let fraction_ns = match fraction {
        "" => 0,
        digits => digits.parse::<u128>().ok()? * ns_per_unit / 10u128.pow(digits.len() as u32),
    };
    let total = whole.checked_mul(ns_per_unit)?.checked_add(fraction_ns)?;
    if total > 1_000_000_000 * NS_PER_SEC {
        return None;
    }
    Some(Duration::new(
        (total / NS_PER_SEC) as u64,
        (total % NS_PER_SEC) as u32,
    ))
}
