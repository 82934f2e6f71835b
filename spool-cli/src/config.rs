//! The `spool` configuration (SPEC §8, issue 7): every knob of the service
//! from a TOML file, `SPOOL_*` environment variables and flags.
//!
//! # Precedence
//!
//! For each key: a flag (`--lease-ttl 10`, or `--set lease.ttl=10` for any
//! key) wins over the environment variable (`SPOOL_LEASE_TTL=10`), which
//! wins over the file, which wins over the built-in default. The file is
//! `--config FILE`, else `$SPOOL_CONFIG`, else `./spool.toml` if it exists
//! (none is fine). [`KEYS`] is the one table of keys: name, environment
//! variable, flag, kind (what values are allowed), default, help.
//!
//! # Validation
//!
//! The file is read with serde's `deny_unknown_fields` (an unknown section or
//! key is refused, naming it, the file and the known keys), every value —
//! from any source — goes through the same parser of its kind, and a refused
//! value names the key, the value (credentials masked), where it came from
//! and what is allowed. Config errors exit with code 2 (usage).
//!
//! # Secrets
//!
//! Values are shown (by `spool config show`, in errors and logs) through
//! [`mask_url`]: the password of `user:password@` and credential query
//! parameters (`password`, `secret`, `token`, …) become `****`. A store URL
//! with credentials in it is refused (object_store reads credentials from
//! the `AWS_*`/`GOOGLE_*`/`AZURE_*` variables, never from the URL).
//!
//! # Embedded defaults
//!
//! With a spool root and no store or catalog, the destination is the
//! single-machine default under the root: `file://ROOT/.store` and
//! `sqlite:///ROOT/.catalog.db` (spelled by `crate::dest`, as `spool produce
//! --spool-root` spells them, so both find the same catalog key; the names
//! are spool-core's `EMBEDDED_STORE_DIR` and `EMBEDDED_CATALOG_FILE`); every spool walk skips
//! both names.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use spool_catalog::{CatalogUrl, LeaseScope};
use spool_core::Destination;
use spool_upload::{ClientConfig, UploadConfig};

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
    /// `IP:PORT`.
    Addr,
}

impl Kind {
    fn allowed(self) -> String {
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
            Kind::Addr => "a socket address IP:PORT, e.g. 127.0.0.1:9464".into(),
        }
    }
}

fn show_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// `section.name`, as in the TOML file.
    pub name: &'static str,
    /// Its environment variable.
    pub env: &'static str,
    /// Its own flag, if it has one (every key also takes `--set KEY=VALUE`).
    pub flag: Option<&'static str>,
    /// What values it takes.
    pub kind: Kind,
    /// The built-in default, as a value would be spelled (`None`: unset).
    pub default: Option<&'static str>,
    /// What it does.
    pub help: &'static str,
}

const fn key(
    name: &'static str,
    env: &'static str,
    flag: Option<&'static str>,
    kind: Kind,
    default: Option<&'static str>,
    help: &'static str,
) -> Key {
    Key {
        name,
        env,
        flag,
        kind,
        default,
        help,
    }
}

const SECS: Kind = Kind::Secs {
    min_ms: 1,
    whole: false,
};
const SECS0: Kind = Kind::Secs {
    min_ms: 0,
    whole: false,
};

/// Every key, in the order `spool config show` prints them.
pub const KEYS: &[Key] = &[
    key(
        "spool.root",
        "SPOOL_ROOT",
        Some("--spool-root"),
        Kind::Path,
        None,
        "the spool root: rank directories live under ROOT/<catalog key>/",
    ),
    key(
        "spool.rank",
        "SPOOL_RANK",
        Some("--rank"),
        Kind::Count(0),
        None,
        "the rank of the claimed directory (default: $RANK, else 0)",
    ),
    key(
        "spool.max_bytes",
        "SPOOL_MAX_BYTES",
        None,
        Kind::Bytes(1),
        None,
        "byte budget of a rank directory (producers' sinks; unset: no budget)",
    ),
    key(
        "spool.allow_shared_filesystem",
        "SPOOL_ALLOW_SHARED_FILESYSTEM",
        Some("--allow-shared-filesystem"),
        Kind::Bool,
        Some("false"),
        "accept a network filesystem (only one used by this node alone)",
    ),
    key(
        "destination.catalog",
        "SPOOL_CATALOG",
        Some("--catalog"),
        Kind::CatalogUrl,
        None,
        "catalog URL (default: sqlite:///ROOT/.catalog.db)",
    ),
    key(
        "catalog.request_timeout",
        "SPOOL_CATALOG_REQUEST_TIMEOUT",
        None,
        SECS,
        Some("30s"),
        "bound on one catalog statement (connect, send, answer); every call is also cut by the enclosing flush or stop",
    ),
    key(
        "destination.store",
        "SPOOL_STORE",
        Some("--store"),
        Kind::StoreUrl,
        None,
        "object store URL, bucket and prefix (default: file://ROOT/.store)",
    ),
    key(
        "destination.store_id",
        "SPOOL_STORE_ID",
        Some("--store-id"),
        Kind::Name,
        Some("default"),
        "the name the operator gives the store (part of the catalog key)",
    ),
    key(
        "lease.scope",
        "SPOOL_LEASE_SCOPE",
        Some("--lease-scope"),
        Kind::LeaseScope,
        Some("node"),
        "node: only adoption needs the lease; catalog: nothing is uploaded or indexed without it",
    ),
    key(
        "lease.ttl",
        "SPOOL_LEASE_TTL",
        Some("--lease-ttl"),
        Kind::Secs {
            min_ms: 3000,
            whole: true,
        },
        Some("30s"),
        "lease time-to-live (renewed every ttl/3; latched after a foreign lease outlives 2 x ttl)",
    ),
    key(
        "service.poll_interval",
        "SPOOL_POLL_INTERVAL",
        Some("--poll-interval"),
        SECS,
        Some("1s"),
        "the loop's safety-net wake-up",
    ),
    key(
        "service.recheck_interval",
        "SPOOL_RECHECK_INTERVAL",
        Some("--recheck-interval"),
        SECS0,
        Some("30s"),
        "how often a live sibling is probed again (0: never)",
    ),
    key(
        "service.max_backoff",
        "SPOOL_MAX_BACKOFF",
        Some("--max-backoff"),
        SECS,
        Some("30s"),
        "longest wait between cycles while a store is down",
    ),
    key(
        "service.staging_max_age",
        "SPOOL_STAGING_MAX_AGE",
        None,
        SECS,
        Some("60s"),
        "unheld .creating staging copies older than this are removed",
    ),
    key(
        "service.adoption_slice",
        "SPOOL_ADOPTION_SLICE",
        None,
        SECS,
        Some("1s"),
        "how long one adopting cycle may keep stepping",
    ),
    key(
        "service.index_batch",
        "SPOOL_INDEX_BATCH",
        None,
        Kind::Count(1),
        Some("256"),
        "most packs indexed in one catalog call",
    ),
    key(
        "service.stop_flush_timeout",
        "SPOOL_STOP_FLUSH_TIMEOUT",
        None,
        SECS0,
        Some("10s"),
        "on SIGTERM/SIGINT, how long the last flush may take before the stop",
    ),
    key(
        "service.once_timeout",
        "SPOOL_ONCE_TIMEOUT",
        None,
        SECS,
        Some("10m"),
        "how long `spool run --once` may take before it gives up (exit 6) when --timeout is not given",
    ),
    key(
        "service.unhealthy_after",
        "SPOOL_UNHEALTHY_AFTER",
        None,
        SECS,
        Some("60s"),
        "/healthz turns 503 when work waits and nothing moved for this long while a store fails",
    ),
    key(
        "upload.max_workers",
        "SPOOL_UPLOAD_MAX_WORKERS",
        None,
        Kind::Count(1),
        Some("4"),
        "packs transferred at once in a round",
    ),
    key(
        "upload.max_in_flight_bytes",
        "SPOOL_UPLOAD_MAX_IN_FLIGHT_BYTES",
        None,
        Kind::Bytes(1),
        Some("256MiB"),
        "bytes of packs in one round (a bigger pack is refused)",
    ),
    key(
        "upload.multipart_threshold",
        "SPOOL_UPLOAD_MULTIPART_THRESHOLD",
        None,
        Kind::Bytes(1),
        Some("32MiB"),
        "packs above this go up as multipart uploads",
    ),
    key(
        "upload.part_size",
        "SPOOL_UPLOAD_PART_SIZE",
        None,
        Kind::Bytes(1),
        Some("8MiB"),
        "multipart part size (S3 wants at least 5MiB)",
    ),
    key(
        "upload.part_concurrency",
        "SPOOL_UPLOAD_PART_CONCURRENCY",
        None,
        Kind::Count(1),
        Some("2"),
        "parts of one multipart upload in flight",
    ),
    key(
        "upload.max_attempts",
        "SPOOL_UPLOAD_MAX_ATTEMPTS",
        None,
        Kind::Count(1),
        Some("4"),
        "attempts per pack, the first included",
    ),
    key(
        "upload.backoff_initial",
        "SPOOL_UPLOAD_BACKOFF_INITIAL",
        None,
        SECS,
        Some("250ms"),
        "backoff before the second attempt (doubles)",
    ),
    key(
        "upload.backoff_max",
        "SPOOL_UPLOAD_BACKOFF_MAX",
        None,
        SECS,
        Some("5s"),
        "cap of the backoff between attempts",
    ),
    key(
        "client.connect_timeout",
        "SPOOL_CLIENT_CONNECT_TIMEOUT",
        None,
        SECS,
        Some("5s"),
        "object store TCP connect timeout",
    ),
    key(
        "client.request_timeout",
        "SPOOL_CLIENT_REQUEST_TIMEOUT",
        None,
        SECS,
        Some("120s"),
        "object store whole-request timeout",
    ),
    key(
        "client.max_retries",
        "SPOOL_CLIENT_MAX_RETRIES",
        None,
        Kind::Count(0),
        Some("2"),
        "object_store's own retries per request",
    ),
    key(
        "client.retry_timeout",
        "SPOOL_CLIENT_RETRY_TIMEOUT",
        None,
        SECS,
        Some("10s"),
        "cap on object_store's retrying of one request",
    ),
    key(
        "client.allow_http",
        "SPOOL_CLIENT_ALLOW_HTTP",
        None,
        Kind::Bool,
        None,
        "allow plain http:// store endpoints (default: $AWS_ALLOW_HTTP, else false)",
    ),
    key(
        "metrics.addr",
        "SPOOL_METRICS_ADDR",
        Some("--metrics-addr"),
        Kind::Addr,
        None,
        "serve /metrics and /healthz on this address (unset: off)",
    ),
    key(
        "metrics.linger",
        "SPOOL_METRICS_LINGER",
        None,
        SECS0,
        Some("0s"),
        "after a latch or a timeout, keep serving /metrics and /healthz this long before \
         exiting, so the last state can be scraped (a signal cuts it short)",
    ),
];

/// Looks a key up by name.
pub fn key_named(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

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
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::Embedded => f.write_str("default (embedded, under spool.root)"),
            Source::Env(v) => write!(f, "env {v}"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Flag(s) => write!(f, "flag {s}"),
        }
    }
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
            Value::Secs(d) => f.write_str(&show_ms(d.as_millis() as u64)),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Scope(LeaseScope::Node) => f.write_str("node"),
            Value::Scope(LeaseScope::Catalog) => f.write_str("catalog"),
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

/// A refused configuration value or file: exit code 2.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn refuse(k: &Key, raw: &str, source: &Source, why: &str) -> ConfigError {
    ConfigError(format!(
        "bad value for {} ({source}): {:?} {why}; allowed: {}",
        k.name,
        mask_url(raw),
        k.kind.allowed()
    ))
}

/// Parses `raw` as a value of `k`'s kind.
pub fn parse_value(k: &Key, raw: &str, source: &Source) -> Result<Value, ConfigError> {
    let raw_t = raw.trim();
    let bad = |why: &str| refuse(k, raw, source, why);
    Ok(match k.kind {
        Kind::Path => {
            if raw_t.is_empty() {
                return Err(bad("is empty"));
            }
            Value::Path(PathBuf::from(raw_t))
        }
        Kind::StoreUrl => {
            let u = url::Url::parse(raw_t).map_err(|e| bad(&format!("is not a URL ({e})")))?;
            if !matches!(u.scheme(), "s3" | "gs" | "az" | "file" | "memory") {
                return Err(bad(&format!("has an unknown scheme {:?}", u.scheme())));
            }
            if !u.username().is_empty() || u.password().is_some() {
                return Err(bad("carries credentials; put them in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or GOOGLE_*/AZURE_*) instead"));
            }
            Value::Text(raw_t.to_string())
        }
        Kind::CatalogUrl => {
            CatalogUrl::parse(raw_t).map_err(|e| bad(&format!("is refused: {e}")))?;
            Value::Text(raw_t.to_string())
        }
        Kind::Name => {
            let ok = !raw_t.is_empty()
                && raw_t.len() <= 64
                && raw_t
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !ok {
                return Err(bad("is not a plain name"));
            }
            Value::Text(raw_t.to_string())
        }
        Kind::Count(min) => {
            let n: u64 = raw_t.parse().map_err(|_| bad("is not a whole number"))?;
            if n < min {
                return Err(bad(&format!("is below {min}")));
            }
            Value::Count(n)
        }
        Kind::Bytes(min) => {
            let n = parse_bytes(raw_t).ok_or_else(|| bad("is not a size"))?;
            if n < min {
                return Err(bad(&format!("is below {min}")));
            }
            Value::Bytes(n)
        }
        Kind::Secs { min_ms, whole } => {
            let d = parse_duration(raw_t).ok_or_else(|| bad("is not a duration"))?;
            if (d.as_millis() as u64) < min_ms {
                return Err(bad(&format!("is below {}", show_ms(min_ms))));
            }
            if whole && d.subsec_nanos() != 0 {
                return Err(bad("is not a whole number of seconds"));
            }
            Value::Secs(d)
        }
        Kind::Bool => match raw_t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Value::Bool(true),
            "false" | "0" | "no" | "off" => Value::Bool(false),
            _ => return Err(bad("is not a boolean")),
        },
        Kind::LeaseScope => {
            Value::Scope(LeaseScope::parse(raw_t).map_err(|_| bad("is not a lease scope"))?)
        }
        Kind::Addr => Value::Addr(
            raw_t
                .parse()
                .map_err(|_| bad("is not an address IP:PORT"))?,
        ),
    })
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

/// `"30"`, `"2.5"`, `"500ms"`, `"30s"`, `"2m"`, `"1h"` → a duration.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return None;
    }
    Some(Duration::from_secs_f64(secs))
}

/// Credential query parameters masked by [`mask_url`].
const SECRET_PARAMS: &[&str] = &[
    "password",
    "pass",
    "secret",
    "secret_key",
    "secret_access_key",
    "token",
    "access_key",
    "session_token",
    "sig",
    "signature",
];

/// Masks the secrets of a URL as spelled: the password of `user:password@`
/// and the values of credential query parameters become `****`. Anything
/// that is not a URL comes back unchanged.
pub fn mask_url(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    let (head, rest) = s.split_at(scheme_end + 3);
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{user}:****@{}", &authority[at + 1..])
            } else {
                authority.to_string()
            }
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, frag) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let masked: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if SECRET_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(k)) => {
                        format!("{k}=****")
                    }
                    _ => kv.to_string(),
                })
                .collect();
            let mut t = format!("{path}?{}", masked.join("&"));
            if let Some(f) = frag {
                t.push('#');
                t.push_str(f);
            }
            t
        }
        None => tail.to_string(),
    };
    format!("{head}{authority}{tail}")
}

/// Environment variables the object store backends read that hold secrets:
/// `spool config show` says whether they are set, never what they are.
pub const SECRET_ENV: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
];

/// Store environment shown as is.
pub const PLAIN_ENV: &[&str] = &[
    "AWS_ENDPOINT",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_ALLOW_HTTP",
    "GOOGLE_SERVICE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_NAME",
];

// ---------------------------------------------------------------- the file

/// The TOML file's shape (unknown sections and keys refused). Values are
/// kept raw and parsed by [`parse_value`], so a bad one gets the same
/// message whichever source it came from.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    spool: SpoolSection,
    #[serde(default)]
    destination: DestinationSection,
    #[serde(default)]
    catalog: CatalogSection,
    #[serde(default)]
    lease: LeaseSection,
    #[serde(default)]
    service: ServiceSection,
    #[serde(default)]
    upload: UploadSection,
    #[serde(default)]
    client: ClientSection,
    #[serde(default)]
    metrics: MetricsSection,
}

type Raw = Option<toml::Value>;

/// A section's fields as (name, value if set).
type Fields<'a> = Vec<(&'static str, Option<&'a toml::Value>)>;

macro_rules! section {
    ($name:ident { $($field:ident),* $(,)? }) => {
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name { $($field: Raw,)* }
        impl $name {
            fn entries(&self) -> Vec<(&'static str, Option<&toml::Value>)> {
                vec![$((stringify!($field), self.$field.as_ref()),)*]
            }
        }
    };
}

section!(SpoolSection {
    root,
    rank,
    max_bytes,
    allow_shared_filesystem
});
section!(DestinationSection {
    catalog,
    store,
    store_id
});
section!(LeaseSection { scope, ttl });
section!(ServiceSection {
    poll_interval,
    recheck_interval,
    max_backoff,
    staging_max_age,
    adoption_slice,
    index_batch,
    stop_flush_timeout,
    once_timeout,
    unhealthy_after,
});
section!(CatalogSection { request_timeout });
section!(UploadSection {
    max_workers,
    max_in_flight_bytes,
    multipart_threshold,
    part_size,
    part_concurrency,
    max_attempts,
    backoff_initial,
    backoff_max,
});
section!(ClientSection {
    connect_timeout,
    request_timeout,
    max_retries,
    retry_timeout,
    allow_http
});
section!(MetricsSection { addr, linger });

impl FileConfig {
    fn entries(&self) -> Vec<(String, &toml::Value)> {
        let sections: [(&str, Fields<'_>); 8] = [
            ("spool", self.spool.entries()),
            ("destination", self.destination.entries()),
            ("catalog", self.catalog.entries()),
            ("lease", self.lease.entries()),
            ("service", self.service.entries()),
            ("upload", self.upload.entries()),
            ("client", self.client.entries()),
            ("metrics", self.metrics.entries()),
        ];
        let mut out = Vec::new();
        for (section, fields) in sections {
            for (field, v) in fields {
                if let Some(v) = v {
                    out.push((format!("{section}.{field}"), v));
                }
            }
        }
        out
    }
}

fn toml_raw(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Which file to read: `--config`, else `$SPOOL_CONFIG`, else
/// `./spool.toml` if present.
fn config_path(flag: Option<&Path>) -> Option<(PathBuf, bool)> {
    if let Some(p) = flag {
        return Some((p.to_path_buf(), true));
    }
    if let Some(p) = std::env::var_os("SPOOL_CONFIG").filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(p), true));
    }
    let local = PathBuf::from("spool.toml");
    local.is_file().then_some((local, false))
}

fn read_file(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "cannot read the config file {}: {e}; fix it, or point --config / SPOOL_CONFIG elsewhere",
            path.display()
        ))
    })?;
    let file: FileConfig = toml::from_str(&text).map_err(|e| {
        let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        ConfigError(format!(
            "config file {} is refused: {}; known keys: {}",
            path.display(),
            e.message().trim(),
            known.join(", ")
        ))
    })?;
    let mut out = Vec::new();
    for (name, v) in file.entries() {
        let raw = toml_raw(v).ok_or_else(|| {
            ConfigError(format!(
                "bad value for {name} (file {}): a {} is not allowed; allowed: {}",
                path.display(),
                v.type_str(),
                key_named(&name)
                    .map(|k| k.kind.allowed())
                    .unwrap_or_default()
            ))
        })?;
        out.push((name, raw));
    }
    Ok(out)
}

// ------------------------------------------------------------ resolution

/// The flags that set configuration keys, shared by `spool run` and
/// `spool config show` (every one also readable from the environment and
/// the file; see `spool config show` for the effective values).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigFlags {
    /// The spool root [env: SPOOL_ROOT] (spool.root).
    #[arg(long, value_name = "ROOT")]
    pub spool_root: Option<String>,
    /// Object store URL [env: SPOOL_STORE] (default: file://ROOT/.store).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Catalog URL [env: SPOOL_CATALOG] (default: sqlite:///ROOT/.catalog.db).
    #[arg(long, value_name = "URL")]
    pub catalog: Option<String>,
    /// Store id [env: SPOOL_STORE_ID] (default: default).
    #[arg(long, value_name = "ID")]
    pub store_id: Option<String>,
    /// Rank of the claimed directory [env: SPOOL_RANK] (default: $RANK, else 0).
    #[arg(long, value_name = "N")]
    pub rank: Option<String>,
    /// Lease scope, node or catalog [env: SPOOL_LEASE_SCOPE] (default: node).
    #[arg(long, value_name = "SCOPE")]
    pub lease_scope: Option<String>,
    /// Lease TTL, whole seconds ≥ 3 [env: SPOOL_LEASE_TTL] (default: 30).
    #[arg(long, value_name = "SECS")]
    pub lease_ttl: Option<String>,
    /// Poll interval [env: SPOOL_POLL_INTERVAL] (default: 1s).
    #[arg(long, value_name = "SECS")]
    pub poll_interval: Option<String>,
    /// How often live siblings are probed again, 0 = never
    /// [env: SPOOL_RECHECK_INTERVAL] (default: 30s).
    #[arg(long, value_name = "SECS")]
    pub recheck_interval: Option<String>,
    /// Longest backoff while a store is down [env: SPOOL_MAX_BACKOFF] (default: 30s).
    #[arg(long, value_name = "SECS")]
    pub max_backoff: Option<String>,
    /// Accept a shared (network) filesystem [env: SPOOL_ALLOW_SHARED_FILESYSTEM].
    #[arg(long)]
    pub allow_shared_filesystem: bool,
    /// Serve Prometheus /metrics and /healthz here, e.g. 127.0.0.1:9464
    /// [env: SPOOL_METRICS_ADDR].
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Set any key, e.g. --set upload.max_workers=8 (repeatable; see
    /// `spool config show` for every key).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl ConfigFlags {
    fn entries(&self) -> Result<Vec<(&'static Key, String, String)>, ConfigError> {
        let mut out = Vec::new();
        let named: [(&str, &Option<String>); 11] = [
            ("spool.root", &self.spool_root),
            ("destination.store", &self.store),
            ("destination.catalog", &self.catalog),
            ("destination.store_id", &self.store_id),
            ("spool.rank", &self.rank),
            ("lease.scope", &self.lease_scope),
            ("lease.ttl", &self.lease_ttl),
            ("service.poll_interval", &self.poll_interval),
            ("service.recheck_interval", &self.recheck_interval),
            ("service.max_backoff", &self.max_backoff),
            ("metrics.addr", &self.metrics_addr),
        ];
        for (name, v) in named {
            if let Some(v) = v {
                let k = key_named(name).expect("flag keys are in KEYS");
                out.push((k, v.clone(), k.flag.unwrap_or("--set").to_string()));
            }
        }
        if self.allow_shared_filesystem {
            let k = key_named("spool.allow_shared_filesystem").expect("in KEYS");
            out.push((k, "true".into(), "--allow-shared-filesystem".into()));
        }
        for s in &self.set {
            let (name, value) = s.split_once('=').ok_or_else(|| {
                ConfigError(format!(
                    "--set {:?}: expected KEY=VALUE, e.g. --set upload.max_workers=8",
                    mask_url(s)
                ))
            })?;
            let k = key_named(name.trim()).ok_or_else(|| unknown_key(name.trim(), "--set"))?;
            out.push((k, value.to_string(), format!("--set {}", k.name)));
        }
        Ok(out)
    }
}

fn unknown_key(name: &str, source: &str) -> ConfigError {
    let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    ConfigError(format!(
        "unknown configuration key {name:?} ({source}); known keys: {}",
        known.join(", ")
    ))
}

/// One resolved key.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key.
    pub key: &'static Key,
    /// Its value (`None`: unset).
    pub value: Option<Value>,
    /// Where it came from.
    pub source: Source,
}

/// The effective configuration: one [`Entry`] per key of [`KEYS`].
#[derive(Debug, Clone)]
pub struct Config {
    entries: BTreeMap<&'static str, Entry>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl Config {
    /// Resolves every key: flag > environment > file > default (then the
    /// embedded store and catalog under the spool root). `config_flag` is
    /// the global `--config`.
    pub fn load(config_flag: Option<&Path>, flags: &ConfigFlags) -> Result<Config, ConfigError> {
        Config::load_with(config_flag, flags, |v| std::env::var(v).ok())
    }

    fn load_with(
        config_flag: Option<&Path>,
        flags: &ConfigFlags,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut entries: BTreeMap<&'static str, Entry> = BTreeMap::new();
        let mut set = |k: &'static Key, raw: &str, source: Source| -> Result<(), ConfigError> {
            let value = parse_value(k, raw, &source)?;
            entries.insert(
                k.name,
                Entry {
                    key: k,
                    value: Some(value),
                    source,
                },
            );
            Ok(())
        };
        for k in KEYS {
            if let Some(d) = k.default {
                set(k, d, Source::Default)?;
            }
        }
        let file = config_path(config_flag);
        if let Some((path, _)) = &file {
            for (name, raw) in read_file(path)? {
                let k = key_named(&name).ok_or_else(|| unknown_key(&name, "file"))?;
                set(k, &raw, Source::File(path.clone()))?;
            }
        }
        for k in KEYS {
            if let Some(v) = env(k.env).filter(|v| !v.is_empty()) {
                set(k, &v, Source::Env(k.env.to_string()))?;
            }
        }
        for (k, raw, flag) in flags.entries()? {
            set(k, &raw, Source::Flag(flag))?;
        }
        // Derived defaults.
        if !entries.contains_key("spool.rank") {
            let k = key_named("spool.rank").expect("in KEYS");
            let (rank, source) = match env("RANK") {
                Some(r) => (
                    spool_core::layout::parse_rank(Some(&r)),
                    Source::Env("RANK".into()),
                ),
                None => (0, Source::Default),
            };
            entries.insert(
                k.name,
                Entry {
                    key: k,
                    value: Some(Value::Count(rank)),
                    source,
                },
            );
        }
        if !entries.contains_key("client.allow_http") {
            let k = key_named("client.allow_http").expect("in KEYS");
            let (v, source) = match env("AWS_ALLOW_HTTP") {
                Some(r) => (
                    matches!(r.trim().to_ascii_lowercase().as_str(), "true" | "1"),
                    Source::Env("AWS_ALLOW_HTTP".into()),
                ),
                None => (false, Source::Default),
            };
            entries.insert(
                k.name,
                Entry {
                    key: k,
                    value: Some(Value::Bool(v)),
                    source,
                },
            );
        }
        let mut config = Config {
            entries,
            file: file.map(|(p, _)| p),
        };
        config.check_lease()?;
        config.embedded_defaults()?;
        for k in KEYS {
            config.entries.entry(k.name).or_insert(Entry {
                key: k,
                value: None,
                source: Source::Default,
            });
        }
        Ok(config)
    }

    /// The TTL must leave room for the fence margin and the renewals
    /// (spool-catalog's rule: the fence margin shrinks to fit, never under 2 s, so ttl ≥ 5 s).
    fn check_lease(&self) -> Result<(), ConfigError> {
        let e = &self.entries["lease.ttl"];
        spool_catalog::LeaseConfig::new(self.lease_ttl()).map_err(|err| {
            refuse(
                e.key,
                &self.lease_ttl().as_secs().to_string(),
                &e.source,
                &format!("is refused: {err}"),
            )
        })?;
        Ok(())
    }

    /// With a spool root and no store or catalog: the embedded ones.
    fn embedded_defaults(&mut self) -> Result<(), ConfigError> {
        let Some(root) = self.path("spool.root") else {
            return Ok(());
        };
        let root = std::path::absolute(&root).unwrap_or(root);
        let root = root.canonicalize().unwrap_or(root);
        // spelled by crate::dest, like `spool produce --spool-root`: one
        // spelling, one catalog key
        for (name, url) in [
            ("destination.store", crate::dest::embedded_store_url(&root)),
            (
                "destination.catalog",
                crate::dest::embedded_catalog_url(&root),
            ),
        ] {
            if !self.entries.contains_key(name) {
                let k = key_named(name).expect("in KEYS");
                let value = parse_value(k, &url, &Source::Embedded)?;
                self.entries.insert(
                    name,
                    Entry {
                        key: k,
                        value: Some(value),
                        source: Source::Embedded,
                    },
                );
            }
        }
        let k = key_named("spool.root").expect("in KEYS");
        let source = self.entries["spool.root"].source.clone();
        self.entries.insert(
            "spool.root",
            Entry {
                key: k,
                value: Some(Value::Path(root)),
                source,
            },
        );
        Ok(())
    }

    /// Every key, in [`KEYS`] order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        KEYS.iter().map(|k| &self.entries[k.name])
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.entries.get(name).and_then(|e| e.value.as_ref())
    }

    /// Where a key's value came from.
    #[cfg(test)]
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.entries.get(name).map(|e| &e.source)
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        match self.get(name) {
            Some(Value::Path(p)) => Some(p.clone()),
            _ => None,
        }
    }

    fn text(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }

    fn secs(&self, name: &str) -> Duration {
        match self.get(name) {
            Some(Value::Secs(d)) => *d,
            other => unreachable!("{name} is a duration with a default, got {other:?}"),
        }
    }

    fn count(&self, name: &str) -> u64 {
        match self.get(name) {
            Some(Value::Count(n) | Value::Bytes(n)) => *n,
            other => unreachable!("{name} is a number with a default, got {other:?}"),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Value::Bool(true)))
    }

    /// The spool root (absolute), or an error saying how to give one.
    pub fn spool_root(&self) -> anyhow::Result<PathBuf> {
        self.path("spool.root").ok_or_else(|| {
            ConfigError(
                "no spool root: give --spool-root ROOT, SPOOL_ROOT, or spool.root in the config file"
                    .into(),
            )
            .into()
        })
    }

    /// The rank.
    pub fn rank(&self) -> u64 {
        self.count("spool.rank")
    }

    /// The spool byte budget, if any (for the producers: `spool produce
    /// --spool-root` and the engine's sinks).
    #[allow(dead_code)]
    pub fn max_bytes(&self) -> Option<u64> {
        match self.get("spool.max_bytes") {
            Some(Value::Bytes(n)) => Some(*n),
            _ => None,
        }
    }

    /// The store URL (as given).
    pub fn store_url(&self) -> Result<&str, ConfigError> {
        self.text("destination.store").ok_or_else(|| ConfigError(
            "no object store: give --store URL (or SPOOL_STORE, destination.store), or a spool root for the embedded default".into(),
        ))
    }

    /// The catalog URL (as given, with its credentials: never print it; use
    /// [`mask_url`]).
    pub fn catalog_url(&self) -> Result<&str, ConfigError> {
        self.text("destination.catalog").ok_or_else(|| ConfigError(
            "no catalog: give --catalog URL (or SPOOL_CATALOG, destination.catalog), or a spool root for the embedded default".into(),
        ))
    }

    /// The destination its packs go to (credentials removed from the
    /// catalog URL: the key hashes it without them anyway).
    pub fn destination(&self) -> anyhow::Result<Destination> {
        let store_id = self
            .text("destination.store_id")
            .unwrap_or(spool_core::layout::DEFAULT_STORE_ID);
        crate::dest::destination(self.catalog_url()?, self.store_url()?, store_id)
            .map_err(|e| ConfigError(e.to_string()).into())
    }

    /// `ROOT/<catalog key>`: where this destination's rank directories live.
    pub fn key_dir(&self) -> anyhow::Result<(String, PathBuf)> {
        let key = self.destination()?.catalog_key()?;
        Ok((key.clone(), self.spool_root()?.join(key)))
    }

    /// Accept a shared filesystem.
    pub fn allow_shared_filesystem(&self) -> bool {
        self.flag("spool.allow_shared_filesystem")
    }

    /// The lease scope.
    pub fn lease_scope(&self) -> LeaseScope {
        match self.get("lease.scope") {
            Some(Value::Scope(s)) => *s,
            _ => LeaseScope::Node,
        }
    }

    /// The lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.secs("lease.ttl")
    }

    /// Poll interval.
    pub fn poll_interval(&self) -> Duration {
        self.secs("service.poll_interval")
    }

    /// Live-sibling recheck interval (0: never).
    pub fn recheck_interval(&self) -> Duration {
        self.secs("service.recheck_interval")
    }

    /// Longest backoff.
    pub fn max_backoff(&self) -> Duration {
        self.secs("service.max_backoff")
    }

    /// Staging-copy age.
    pub fn staging_max_age(&self) -> Duration {
        self.secs("service.staging_max_age")
    }

    /// Adoption slice.
    pub fn adoption_slice(&self) -> Duration {
        self.secs("service.adoption_slice")
    }

    /// Index batch.
    pub fn index_batch(&self) -> usize {
        self.count("service.index_batch") as usize
    }

    /// The last flush's bound on a stop signal.
    pub fn stop_flush_timeout(&self) -> Duration {
        self.secs("service.stop_flush_timeout")
    }

    /// `run --once`'s default timeout.
    pub fn once_timeout(&self) -> Duration {
        self.secs("service.once_timeout")
    }

    /// The bound on one catalog statement.
    pub fn catalog_request_timeout(&self) -> Duration {
        self.secs("catalog.request_timeout")
    }

    /// How long work may wait without progress while a store fails before
    /// `/healthz` says 503.
    pub fn unhealthy_after(&self) -> Duration {
        self.secs("service.unhealthy_after")
    }

    /// The uploader's configuration (validated).
    pub fn upload(&self) -> Result<UploadConfig, ConfigError> {
        let u = UploadConfig {
            max_workers: self.count("upload.max_workers") as usize,
            max_in_flight_bytes: self.count("upload.max_in_flight_bytes"),
            multipart_threshold: self.count("upload.multipart_threshold"),
            part_size: self.count("upload.part_size") as usize,
            part_concurrency: self.count("upload.part_concurrency") as usize,
            max_attempts: self.count("upload.max_attempts").min(u32::MAX as u64) as u32,
            backoff_initial: self.secs("upload.backoff_initial"),
            backoff_max: self.secs("upload.backoff_max"),
            ..UploadConfig::default()
        };
        u.validate()
            .map_err(|e| ConfigError(format!("upload.*: {e}")))?;
        Ok(u)
    }

    /// The object store client's configuration.
    pub fn client(&self) -> ClientConfig {
        ClientConfig {
            client_max_retries: self.count("client.max_retries") as usize,
            client_retry_timeout: self.secs("client.retry_timeout"),
            connect_timeout: self.secs("client.connect_timeout"),
            request_timeout: self.secs("client.request_timeout"),
            allow_http: self.flag("client.allow_http"),
            ..ClientConfig::default()
        }
    }

    /// How long the metrics server outlives a latched or timed-out run.
    pub fn metrics_linger(&self) -> Duration {
        self.secs("metrics.linger")
    }

    /// The metrics address, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        match self.get("metrics.addr") {
            Some(Value::Addr(a)) => Some(*a),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(
        file: Option<&str>,
        env: &[(&str, &str)],
        flags: ConfigFlags,
    ) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.toml");
        if let Some(text) = file {
            std::fs::write(&path, text).unwrap();
        }
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with(file.map(|_| path.as_path()), &flags, |k| {
            env.get(k).cloned()
        })
    }

    #[test]
    fn precedence_flag_env_file_default() {
        let file = "[lease]\nttl = 10\nscope = \"catalog\"\n[service]\npoll_interval = \"2s\"\nmax_backoff = 7\n";
        let env = [("SPOOL_LEASE_TTL", "20"), ("SPOOL_POLL_INTERVAL", "3s")];
        let flags = ConfigFlags {
            lease_ttl: Some("40".into()),
            ..Default::default()
        };
        let c = load(Some(file), &env, flags).unwrap();
        assert_eq!(c.lease_ttl(), Duration::from_secs(40));
        assert!(matches!(c.source("lease.ttl"), Some(Source::Flag(f)) if f == "--lease-ttl"));
        assert_eq!(c.poll_interval(), Duration::from_secs(3));
        assert!(matches!(
            c.source("service.poll_interval"),
            Some(Source::Env(_))
        ));
        assert_eq!(c.max_backoff(), Duration::from_secs(7));
        assert!(matches!(
            c.source("service.max_backoff"),
            Some(Source::File(_))
        ));
        assert_eq!(c.lease_scope(), LeaseScope::Catalog);
        assert_eq!(c.recheck_interval(), Duration::from_secs(30));
        assert_eq!(c.source("service.recheck_interval"), Some(&Source::Default));
    }

    #[test]
    fn a_ttl_without_room_for_the_fence_margin_is_refused() {
        // 5 s is the shortest TTL with room for the (lowered) fence margin
        // since LeaseConfig::new adapts the margin to short TTLs.
        let flags = ConfigFlags {
            lease_ttl: Some("4".into()),
            ..Default::default()
        };
        let e = load(None, &[], flags).unwrap_err();
        assert!(
            e.0.contains("lease.ttl") && e.0.contains("is refused"),
            "{e}"
        );
    }

    #[test]
    fn every_key_has_a_file_field_and_a_unique_env() {
        let mut envs = std::collections::HashSet::new();
        for k in KEYS {
            assert!(envs.insert(k.env), "{} env reused", k.name);
            let (section, field) = k.name.split_once('.').unwrap();
            let text = format!("[{section}]\n{field} = \"x\"\n");
            match load(Some(&text), &[], ConfigFlags::default()) {
                Ok(_) => {}
                Err(e) => assert!(
                    e.0.starts_with(&format!("bad value for {}", k.name)),
                    "{}: {}",
                    k.name,
                    e.0
                ),
            }
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_naming_them() {
        let e = load(
            Some("[lease]\nttl = 10\nttls = 3\n"),
            &[],
            ConfigFlags::default(),
        )
        .unwrap_err();
        assert!(e.0.contains("ttls") && e.0.contains("known keys"), "{e}");
        let e = load(Some("[leases]\nttl = 10\n"), &[], ConfigFlags::default()).unwrap_err();
        assert!(e.0.contains("leases"), "{e}");
        let e = load(Some("[lease]\nttl = 2\n"), &[], ConfigFlags::default()).unwrap_err();
        assert!(
            e.0.contains("lease.ttl") && e.0.contains("\"2\"") && e.0.contains("at least 3s"),
            "{e}"
        );
        let e = load(
            None,
            &[("SPOOL_LEASE_SCOPE", "rack")],
            ConfigFlags::default(),
        )
        .unwrap_err();
        assert!(
            e.0.contains("lease.scope") && e.0.contains("rack") && e.0.contains("node or catalog"),
            "{e}"
        );
        let flags = ConfigFlags {
            set: vec!["upload.max_workers=0".into()],
            ..Default::default()
        };
        let e = load(None, &[], flags).unwrap_err();
        assert!(
            e.0.contains("upload.max_workers") && e.0.contains("≥ 1"),
            "{e}"
        );
        let flags = ConfigFlags {
            store: Some("ftp://x/y".into()),
            ..Default::default()
        };
        let e = load(None, &[], flags).unwrap_err();
        assert!(
            e.0.contains("destination.store") && e.0.contains("ftp"),
            "{e}"
        );
    }

    #[test]
    fn embedded_defaults_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        let flags = ConfigFlags {
            spool_root: Some(root.path().display().to_string()),
            ..Default::default()
        };
        let c = load(None, &[], flags).unwrap();
        let r = root.path().canonicalize().unwrap();
        assert_eq!(
            c.store_url().unwrap(),
            format!("file://{}/.store", r.display())
        );
        assert_eq!(
            c.catalog_url().unwrap(),
            format!("sqlite://{}/.catalog.db", r.display())
        );
        assert_eq!(c.source("destination.store"), Some(&Source::Embedded));
        let (key, dir) = c.key_dir().unwrap();
        assert_eq!(dir, r.join(&key));
    }

    #[test]
    fn masking() {
        assert_eq!(
            mask_url("clickhouse://u:hunter2@h:8123/db?table_prefix=t&password=hunter3"),
            "clickhouse://u:****@h:8123/db?table_prefix=t&password=****"
        );
        assert_eq!(mask_url("s3://bucket/p"), "s3://bucket/p");
        assert_eq!(mask_url("not a url"), "not a url");
        let e = load(
            None,
            &[("SPOOL_CATALOG", "clickhouse://u:hunter2@h:8123/d?bogus=1")],
            ConfigFlags::default(),
        )
        .unwrap_err();
        assert!(!e.0.contains("hunter2"), "{e}");
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("1GB"), Some(1_000_000_000));
        assert_eq!(parse_bytes("12"), Some(12));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(parse_duration("soon"), None);
    }
}
