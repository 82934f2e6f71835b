//! The one table of configuration keys: each a typed [`Setting`] handle
//! (name, `SPOOL_*` variable, flag, [`Kind`], default, help), read with
//! `keys::POLL_INTERVAL.get(&cfg)`; [`KEYS`] lists them in the order
//! `spool config show` prints them, and the TOML file's sections and fields
//! are derived from it (`section.field`).

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spool_catalog::LeaseScope;

use crate::Ship;

use super::kind::{Kind, Value};

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

impl Key {
    /// The TOML section (`service` of `service.poll_interval`).
    pub fn section(&self) -> &'static str {
        self.name.split_once('.').map_or(self.name, |(s, _)| s)
    }

    /// The field within its section (`poll_interval`).
    pub fn field(&self) -> &'static str {
        self.name.split_once('.').map_or(self.name, |(_, f)| f)
    }

    /// The key as an embedder's keyword argument (spool-py's
    /// `spool.Engine(lease_ttl=5)`): the field alone for the sections
    /// [`PLAIN_ARGUMENT_SECTIONS`] (`spool.root` → `root`,
    /// `service.poll_interval` → `poll_interval`), else `section_field`
    /// (`lease.ttl` → `lease_ttl`, `upload.max_workers` →
    /// `upload_max_workers`). Unique over [`KEYS`] (a unit test checks).
    pub fn argument_name(&self) -> String {
        if PLAIN_ARGUMENT_SECTIONS.contains(&self.section()) {
            self.field().to_string()
        } else {
            self.name.replace('.', "_")
        }
    }
}

/// The sections whose keys are keyword arguments by their field alone
/// ([`Key::argument_name`]).
pub const PLAIN_ARGUMENT_SECTIONS: &[&str] = &["spool", "destination", "service"];

/// Looks a key up by its keyword-argument name ([`Key::argument_name`]).
#[cfg(test)]
pub(crate) fn key_for_argument(name: &str) -> Option<&'static Key> {
    KEYS.iter().copied().find(|k| k.argument_name() == name)
}

/// A key whose resolved value is a `T`: `Option<_>` for keys that may be
/// unset, the plain type for keys that always have a value (a default, or
/// one derived at resolution).
#[derive(Debug)]
pub struct Setting<T> {
    /// The key.
    pub key: Key,
    _value: PhantomData<fn() -> T>,
}

impl<T: SettingValue> Setting<T> {
    const fn new(key: Key) -> Self {
        Setting {
            key,
            _value: PhantomData,
        }
    }
}

/// A Rust type a [`Setting`] resolves to.
pub trait SettingValue: Sized {
    /// Converts a resolved value (`None`: unset); `None` when the kind does
    /// not match.
    fn from_value(v: Option<&Value>) -> Option<Self>;
}

macro_rules! setting_value {
    ($t:ty, $($pat:pat => $e:expr),+) => {
        impl SettingValue for $t {
            fn from_value(v: Option<&Value>) -> Option<Self> {
                match v? {
                    $($pat => Some($e),)+
                    _ => None,
                }
            }
        }
        impl SettingValue for Option<$t> {
            fn from_value(v: Option<&Value>) -> Option<Self> {
                match v {
                    None => Some(None),
                    Some(v) => <$t as SettingValue>::from_value(Some(v)).map(Some),
                }
            }
        }
    };
}

setting_value!(Duration, Value::Secs(d) => *d);
setting_value!(u64, Value::Count(n) | Value::Bytes(n) => *n);
setting_value!(bool, Value::Bool(b) => *b);
setting_value!(LeaseScope, Value::Scope(s) => *s);
setting_value!(Ship, Value::Ship(s) => *s);
setting_value!(PathBuf, Value::Path(p) => p.clone());
setting_value!(String, Value::Text(t) => t.clone());
setting_value!(SocketAddr, Value::Addr(a) => *a);

const SECS: Kind = Kind::Secs {
    min_ms: 1,
    whole: false,
};
const SECS0: Kind = Kind::Secs {
    min_ms: 0,
    whole: false,
};
/// A loop's wake-up or slice: under 10 ms it only burns a core.
const SECS_LOOP: Kind = Kind::Secs {
    min_ms: 10,
    whole: false,
};
/// A network timeout: under 100 ms no connect or answer can make it.
const SECS_NET: Kind = Kind::Secs {
    min_ms: 100,
    whole: false,
};

/// `spool.root` (SPOOL_ROOT).
pub const ROOT: Setting<Option<PathBuf>> = Setting::new(Key {
    name: "spool.root",
    env: "SPOOL_ROOT",
    flag: Some("--spool-root"),
    kind: Kind::Path,
    default: None,
    help: "the spool root: rank directories live under ROOT/<catalog key>/",
});

/// `spool.rank` (SPOOL_RANK).
pub const RANK: Setting<u64> = Setting::new(Key {
    name: "spool.rank",
    env: "SPOOL_RANK",
    flag: Some("--rank"),
    kind: Kind::Count(0),
    default: None,
    help: "the rank of the claimed directory (default: $RANK, else 0)",
});

/// `spool.max_bytes` (SPOOL_MAX_BYTES).
pub const MAX_BYTES: Setting<Option<u64>> = Setting::new(Key {
    name: "spool.max_bytes",
    env: "SPOOL_MAX_BYTES",
    flag: None,
    kind: Kind::Bytes(1),
    default: None,
    help: "byte budget of a rank directory, shared by its sinks, dead siblings charged (spool produce, the engine; unset: no budget)",
});

/// `spool.allow_shared_filesystem` (SPOOL_ALLOW_SHARED_FILESYSTEM).
pub const ALLOW_SHARED_FILESYSTEM: Setting<bool> = Setting::new(Key {
    name: "spool.allow_shared_filesystem",
    env: "SPOOL_ALLOW_SHARED_FILESYSTEM",
    flag: Some("--allow-shared-filesystem"),
    kind: Kind::Bool,
    default: Some("false"),
    help: "accept a network filesystem (only one used by this node alone)",
});

/// `spool.mode` (SPOOL_MODE).
pub const MODE: Setting<String> = Setting::new(Key {
    name: "spool.mode",
    env: "SPOOL_MODE",
    flag: None,
    kind: Kind::AccessMode,
    default: Some("0700"),
    help: "modes of new spool directories (files: the same without x): 0700 private; 0750 the group reads packs; 0770 the group can also adopt (a daemon of another user)",
});

/// `spool.group` (SPOOL_GROUP).
pub const GROUP: Setting<Option<String>> = Setting::new(Key {
    name: "spool.group",
    env: "SPOOL_GROUP",
    flag: None,
    kind: Kind::Group,
    default: None,
    help: "group given to new spool directories and files (needs spool.mode 0750 or 0770; this process must be a member; unset: the creator's group)",
});

/// `destination.catalog` (SPOOL_CATALOG).
pub const CATALOG: Setting<Option<String>> = Setting::new(Key {
    name: "destination.catalog",
    env: "SPOOL_CATALOG",
    flag: Some("--catalog"),
    kind: Kind::CatalogUrl,
    default: None,
    help: "catalog URL (default: sqlite:///ROOT/.catalog.db)",
});

/// `catalog.request_timeout` (SPOOL_CATALOG_REQUEST_TIMEOUT).
pub const CATALOG_REQUEST_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "catalog.request_timeout",
    env: "SPOOL_CATALOG_REQUEST_TIMEOUT",
    flag: None,
    kind: SECS_NET,
    default: Some("30s"),
    help: "bound on one catalog statement (connect, send, answer); every call is also cut by the enclosing flush or stop",
});

/// `catalog.cluster` (SPOOL_CATALOG_CLUSTER).
pub const CATALOG_CLUSTER: Setting<Option<String>> = Setting::new(Key {
    name: "catalog.cluster",
    env: "SPOOL_CATALOG_CLUSTER",
    flag: None,
    kind: Kind::Name,
    default: None,
    help: "ClickHouse cluster the catalog's tables are replicated on (Replicated*MergeTree, ON CLUSTER; inserts confirmed by a quorum of replicas); not part of the catalog key",
});

/// `destination.store` (SPOOL_STORE).
pub const STORE: Setting<Option<String>> = Setting::new(Key {
    name: "destination.store",
    env: "SPOOL_STORE",
    flag: Some("--store"),
    kind: Kind::StoreUrl,
    default: None,
    help: "object store URL, bucket and prefix (default: file://ROOT/.store)",
});

/// `destination.store_id` (SPOOL_STORE_ID).
pub const STORE_ID: Setting<String> = Setting::new(Key {
    name: "destination.store_id",
    env: "SPOOL_STORE_ID",
    flag: Some("--store-id"),
    kind: Kind::Name,
    default: Some("default"),
    help: "the name the operator gives the store (part of the catalog key)",
});

/// `lease.scope` (SPOOL_LEASE_SCOPE).
pub const LEASE_SCOPE: Setting<LeaseScope> = Setting::new(Key {
    name: "lease.scope",
    env: "SPOOL_LEASE_SCOPE",
    flag: Some("--lease-scope"),
    kind: Kind::LeaseScope,
    default: Some("node"),
    help: "node: only adoption needs the lease; catalog: nothing is uploaded or indexed without it",
});

/// `lease.node_name` (SPOOL_NODE_NAME).
pub const NODE_NAME: Setting<Option<String>> = Setting::new(Key {
    name: "lease.node_name",
    env: "SPOOL_NODE_NAME",
    flag: None,
    kind: Kind::Name,
    default: None,
    help: "the node in the node lease's name, the same for every service on one spool root (default: this host's name; set it where containers or simulated nodes have host names of their own)",
});

/// `lease.ttl` (SPOOL_LEASE_TTL).
pub const LEASE_TTL: Setting<Duration> = Setting::new(Key {
    name: "lease.ttl",
    env: "SPOOL_LEASE_TTL",
    flag: Some("--lease-ttl"),
    kind: Kind::Secs {
        min_ms: 5000,
        whole: true,
    },
    default: Some("30s"),
    help:
        "lease time-to-live (renewed every ttl/3; latched after a foreign lease outlives 2 x ttl)",
});

/// `service.poll_interval` (SPOOL_POLL_INTERVAL).
pub const POLL_INTERVAL: Setting<Duration> = Setting::new(Key {
    name: "service.poll_interval",
    env: "SPOOL_POLL_INTERVAL",
    flag: Some("--poll-interval"),
    kind: SECS_LOOP,
    default: Some("1s"),
    help: "the loop's safety-net wake-up",
});

/// `service.recheck_interval` (SPOOL_RECHECK_INTERVAL).
pub const RECHECK_INTERVAL: Setting<Duration> = Setting::new(Key {
    name: "service.recheck_interval",
    env: "SPOOL_RECHECK_INTERVAL",
    flag: Some("--recheck-interval"),
    kind: SECS0,
    default: Some("30s"),
    help: "how often a live sibling is probed again (0: never)",
});

/// `service.max_backoff` (SPOOL_MAX_BACKOFF).
pub const MAX_BACKOFF: Setting<Duration> = Setting::new(Key {
    name: "service.max_backoff",
    env: "SPOOL_MAX_BACKOFF",
    flag: Some("--max-backoff"),
    kind: SECS_LOOP,
    default: Some("30s"),
    help: "longest wait between cycles while a store is down",
});

/// `service.staging_max_age` (SPOOL_STAGING_MAX_AGE).
pub const STAGING_MAX_AGE: Setting<Duration> = Setting::new(Key {
    name: "service.staging_max_age",
    env: "SPOOL_STAGING_MAX_AGE",
    flag: None,
    kind: SECS,
    default: Some("60s"),
    help: "unheld .creating staging copies older than this are removed",
});

/// `service.adoption_slice` (SPOOL_ADOPTION_SLICE).
pub const ADOPTION_SLICE: Setting<Duration> = Setting::new(Key {
    name: "service.adoption_slice",
    env: "SPOOL_ADOPTION_SLICE",
    flag: None,
    kind: SECS_LOOP,
    default: Some("1s"),
    help: "how long one adopting cycle may keep stepping",
});

/// `service.index_batch` (SPOOL_INDEX_BATCH).
pub const INDEX_BATCH: Setting<u64> = Setting::new(Key {
    name: "service.index_batch",
    env: "SPOOL_INDEX_BATCH",
    flag: None,
    kind: Kind::Count(1),
    default: Some("256"),
    help: "most packs indexed in one catalog call",
});

/// `service.index_linger` (SPOOL_INDEX_LINGER).
pub const INDEX_LINGER: Setting<Duration> = Setting::new(Key {
    name: "service.index_linger",
    env: "SPOOL_INDEX_LINGER",
    flag: None,
    kind: SECS0,
    default: Some("50ms"),
    help: "how long an index batch waits for more uploads to land (it also closes at index_batch, and at once when none is in flight); also the least spacing of two index calls that are not full batches (default 0 with a sqlite:// or memory:// catalog)",
});

/// `service.ship` (SPOOL_SHIP).
pub const SHIP: Setting<Ship> = Setting::new(Key {
    name: "service.ship",
    env: "SPOOL_SHIP",
    flag: None,
    kind: Kind::Ship,
    default: Some("self"),
    help: "who uploads and indexes an embedded engine's packs: self (its own service), or daemon (it hands them to the node's `spool run` and removes each once its row is confirmed: one uploader and one index stream per node; with none running they wait)",
});

/// `service.pipeline_depth` (SPOOL_PIPELINE_DEPTH).
pub const PIPELINE_DEPTH: Setting<u64> = Setting::new(Key {
    name: "service.pipeline_depth",
    env: "SPOOL_PIPELINE_DEPTH",
    flag: None,
    kind: Kind::Count(1),
    default: Some("4096"),
    help: "most packs out of their spool and not yet in the catalog (their bytes also at most twice upload.max_in_flight_bytes); what a crash can make a successor upload again: small packs go in bundles, so a few requests",
});

/// `service.stop_flush_timeout` (SPOOL_STOP_FLUSH_TIMEOUT).
pub const STOP_FLUSH_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "service.stop_flush_timeout",
    env: "SPOOL_STOP_FLUSH_TIMEOUT",
    flag: None,
    kind: SECS0,
    default: Some("10s"),
    help: "on SIGTERM/SIGINT, how long the last flush may take before the stop",
});

/// `service.once_timeout` (SPOOL_ONCE_TIMEOUT).
pub const ONCE_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "service.once_timeout",
    env: "SPOOL_ONCE_TIMEOUT",
    flag: None,
    kind: SECS,
    default: Some("10m"),
    help: "how long `spool run --once` may take before it gives up (exit 6) when --timeout is not given",
});

/// `service.unhealthy_after` (SPOOL_UNHEALTHY_AFTER).
pub const UNHEALTHY_AFTER: Setting<Duration> = Setting::new(Key {
    name: "service.unhealthy_after",
    env: "SPOOL_UNHEALTHY_AFTER",
    flag: None,
    kind: SECS,
    default: Some("60s"),
    help: "/healthz turns 503 when work waits and nothing moved for this long while a store fails",
});

/// `upload.max_workers` (SPOOL_UPLOAD_MAX_WORKERS).
pub const UPLOAD_MAX_WORKERS: Setting<u64> = Setting::new(Key {
    name: "upload.max_workers",
    env: "SPOOL_UPLOAD_MAX_WORKERS",
    flag: None,
    kind: Kind::Count(1),
    default: Some("4"),
    help: "packs transferred at once in a round",
});

/// `upload.max_in_flight_bytes` (SPOOL_UPLOAD_MAX_IN_FLIGHT_BYTES).
pub const UPLOAD_MAX_IN_FLIGHT_BYTES: Setting<u64> = Setting::new(Key {
    name: "upload.max_in_flight_bytes",
    env: "SPOOL_UPLOAD_MAX_IN_FLIGHT_BYTES",
    flag: None,
    kind: Kind::Bytes(1),
    default: Some("256MiB"),
    help: "bytes of packs in one round (a bigger pack is refused)",
});

/// `upload.multipart_threshold` (SPOOL_UPLOAD_MULTIPART_THRESHOLD).
pub const UPLOAD_MULTIPART_THRESHOLD: Setting<u64> = Setting::new(Key {
    name: "upload.multipart_threshold",
    env: "SPOOL_UPLOAD_MULTIPART_THRESHOLD",
    flag: None,
    kind: Kind::Bytes(1),
    default: Some("32MiB"),
    help: "packs above this go up as multipart uploads",
});

/// `upload.part_size` (SPOOL_UPLOAD_PART_SIZE).
pub const UPLOAD_PART_SIZE: Setting<u64> = Setting::new(Key {
    name: "upload.part_size",
    env: "SPOOL_UPLOAD_PART_SIZE",
    flag: None,
    kind: Kind::Bytes(1),
    default: Some("8MiB"),
    help: "multipart part size (S3 wants at least 5MiB)",
});

/// `upload.small_pack_workers` (SPOOL_UPLOAD_SMALL_PACK_WORKERS).
pub const UPLOAD_SMALL_PACK_WORKERS: Setting<u64> = Setting::new(Key {
    name: "upload.small_pack_workers",
    env: "SPOOL_UPLOAD_SMALL_PACK_WORKERS",
    flag: None,
    kind: Kind::Count(1),
    default: Some("16"),
    help: "packs of at most 16 MiB in flight at once (latency-bound; at least max_workers)",
});

/// `upload.part_concurrency` (SPOOL_UPLOAD_PART_CONCURRENCY).
pub const UPLOAD_PART_CONCURRENCY: Setting<u64> = Setting::new(Key {
    name: "upload.part_concurrency",
    env: "SPOOL_UPLOAD_PART_CONCURRENCY",
    flag: None,
    kind: Kind::Count(1),
    default: Some("2"),
    help: "parts of one multipart upload in flight",
});

/// `upload.max_attempts` (SPOOL_UPLOAD_MAX_ATTEMPTS).
pub const UPLOAD_MAX_ATTEMPTS: Setting<u64> = Setting::new(Key {
    name: "upload.max_attempts",
    env: "SPOOL_UPLOAD_MAX_ATTEMPTS",
    flag: None,
    kind: Kind::Count(1),
    default: Some("4"),
    help: "attempts per pack, the first included",
});

/// `upload.backoff_initial` (SPOOL_UPLOAD_BACKOFF_INITIAL).
pub const UPLOAD_BACKOFF_INITIAL: Setting<Duration> = Setting::new(Key {
    name: "upload.backoff_initial",
    env: "SPOOL_UPLOAD_BACKOFF_INITIAL",
    flag: None,
    kind: SECS,
    default: Some("250ms"),
    help: "backoff before the second attempt (doubles)",
});

/// `upload.backoff_max` (SPOOL_UPLOAD_BACKOFF_MAX).
pub const UPLOAD_BACKOFF_MAX: Setting<Duration> = Setting::new(Key {
    name: "upload.backoff_max",
    env: "SPOOL_UPLOAD_BACKOFF_MAX",
    flag: None,
    kind: SECS,
    default: Some("5s"),
    help: "cap of the backoff between attempts",
});

/// `upload.bundle_bytes` (SPOOL_UPLOAD_BUNDLE_BYTES).
pub const UPLOAD_BUNDLE_BYTES: Setting<u64> = Setting::new(Key {
    name: "upload.bundle_bytes",
    env: "SPOOL_UPLOAD_BUNDLE_BYTES",
    flag: None,
    kind: Kind::Bytes(0),
    default: Some("8MiB"),
    help: "packs smaller than this share objects (bundles) of up to this size, one PUT each; 0 sends every pack alone (file:// stores never bundle; at most multipart_threshold and max_in_flight_bytes)",
});

/// `upload.bundle_linger` (SPOOL_UPLOAD_BUNDLE_LINGER).
pub const UPLOAD_BUNDLE_LINGER: Setting<Duration> = Setting::new(Key {
    name: "upload.bundle_linger",
    env: "SPOOL_UPLOAD_BUNDLE_LINGER",
    flag: None,
    kind: SECS0,
    default: Some("1s"),
    help: "how long the first small pack waits for others to fill its bundle (the latency a bundle adds; `spool run --once`, a flush and a stop never wait)",
});

/// `upload.orphan_grace` (SPOOL_UPLOAD_ORPHAN_GRACE).
pub const UPLOAD_ORPHAN_GRACE: Setting<Duration> = Setting::new(Key {
    name: "upload.orphan_grace",
    env: "SPOOL_UPLOAD_ORPHAN_GRACE",
    flag: None,
    kind: Kind::Secs {
        min_ms: 2_000,
        whole: false,
    },
    default: Some("1h"),
    help: "the destination's grace, recorded in the store prefix by the first drain there (its record's wins after): `spool sweep` reads a bundle no row names only once this old; a drain never indexes a bundle older than half of it (it uploads the packs again); at least four times catalog.request_timeout",
});

/// `client.connect_timeout` (SPOOL_CLIENT_CONNECT_TIMEOUT).
pub const CLIENT_CONNECT_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "client.connect_timeout",
    env: "SPOOL_CLIENT_CONNECT_TIMEOUT",
    flag: None,
    kind: SECS_NET,
    default: Some("5s"),
    help: "object store TCP connect timeout",
});

/// `client.request_timeout` (SPOOL_CLIENT_REQUEST_TIMEOUT).
pub const CLIENT_REQUEST_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "client.request_timeout",
    env: "SPOOL_CLIENT_REQUEST_TIMEOUT",
    flag: None,
    kind: SECS_NET,
    default: Some("120s"),
    help: "object store whole-request timeout",
});

/// `client.max_retries` (SPOOL_CLIENT_MAX_RETRIES).
pub const CLIENT_MAX_RETRIES: Setting<u64> = Setting::new(Key {
    name: "client.max_retries",
    env: "SPOOL_CLIENT_MAX_RETRIES",
    flag: None,
    kind: Kind::Count(0),
    default: Some("2"),
    help: "object_store's own retries per request",
});

/// `client.retry_timeout` (SPOOL_CLIENT_RETRY_TIMEOUT).
pub const CLIENT_RETRY_TIMEOUT: Setting<Duration> = Setting::new(Key {
    name: "client.retry_timeout",
    env: "SPOOL_CLIENT_RETRY_TIMEOUT",
    flag: None,
    kind: SECS_NET,
    default: Some("10s"),
    help: "cap on object_store's retrying of one request",
});

/// `client.allow_http` (SPOOL_CLIENT_ALLOW_HTTP).
pub const CLIENT_ALLOW_HTTP: Setting<bool> = Setting::new(Key {
    name: "client.allow_http",
    env: "SPOOL_CLIENT_ALLOW_HTTP",
    flag: None,
    kind: Kind::Bool,
    default: None,
    help: "allow plain http:// store endpoints (default: $AWS_ALLOW_HTTP, else false)",
});

/// `metrics.addr` (SPOOL_METRICS_ADDR).
pub const METRICS_ADDR: Setting<Option<SocketAddr>> = Setting::new(Key {
    name: "metrics.addr",
    env: "SPOOL_METRICS_ADDR",
    flag: Some("--metrics-addr"),
    kind: Kind::Addr,
    default: None,
    help: "serve /metrics and /healthz on this address (unset: off)",
});

/// `metrics.linger` (SPOOL_METRICS_LINGER).
pub const METRICS_LINGER: Setting<Duration> = Setting::new(Key {
    name: "metrics.linger",
    env: "SPOOL_METRICS_LINGER",
    flag: None,
    kind: SECS0,
    default: Some("0s"),
    help: "after a latch or a timeout, keep serving /metrics and /healthz this long before \
         exiting, so the last state can be scraped (a signal cuts it short)",
});

/// Every key, in the order `spool config show` prints them.
pub const KEYS: &[&Key] = &[
    &ROOT.key,
    &RANK.key,
    &MAX_BYTES.key,
    &ALLOW_SHARED_FILESYSTEM.key,
    &MODE.key,
    &GROUP.key,
    &CATALOG.key,
    &CATALOG_REQUEST_TIMEOUT.key,
    &CATALOG_CLUSTER.key,
    &STORE.key,
    &STORE_ID.key,
    &LEASE_SCOPE.key,
    &NODE_NAME.key,
    &LEASE_TTL.key,
    &POLL_INTERVAL.key,
    &RECHECK_INTERVAL.key,
    &MAX_BACKOFF.key,
    &STAGING_MAX_AGE.key,
    &ADOPTION_SLICE.key,
    &INDEX_BATCH.key,
    &INDEX_LINGER.key,
    &SHIP.key,
    &PIPELINE_DEPTH.key,
    &STOP_FLUSH_TIMEOUT.key,
    &ONCE_TIMEOUT.key,
    &UNHEALTHY_AFTER.key,
    &UPLOAD_MAX_WORKERS.key,
    &UPLOAD_MAX_IN_FLIGHT_BYTES.key,
    &UPLOAD_MULTIPART_THRESHOLD.key,
    &UPLOAD_PART_SIZE.key,
    &UPLOAD_SMALL_PACK_WORKERS.key,
    &UPLOAD_PART_CONCURRENCY.key,
    &UPLOAD_MAX_ATTEMPTS.key,
    &UPLOAD_BACKOFF_INITIAL.key,
    &UPLOAD_BACKOFF_MAX.key,
    &UPLOAD_BUNDLE_BYTES.key,
    &UPLOAD_BUNDLE_LINGER.key,
    &UPLOAD_ORPHAN_GRACE.key,
    &CLIENT_CONNECT_TIMEOUT.key,
    &CLIENT_REQUEST_TIMEOUT.key,
    &CLIENT_MAX_RETRIES.key,
    &CLIENT_RETRY_TIMEOUT.key,
    &CLIENT_ALLOW_HTTP.key,
    &METRICS_ADDR.key,
    &METRICS_LINGER.key,
];

/// Looks a key up by name.
pub(crate) fn key_named(name: &str) -> Option<&'static Key> {
    KEYS.iter().copied().find(|k| k.name == name)
}

/// The TOML sections, in table order, each once.
pub fn sections() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for k in KEYS {
        if !out.contains(&k.section()) {
            out.push(k.section());
        }
    }
    out
}
