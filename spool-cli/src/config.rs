//! The command line's part of the configuration: the clap flags that set
//! keys (`--lease-ttl 10`, `--set lease.ttl=10` for any key), shared by
//! `spool run` and `spool config show`. Everything else — the key table,
//! value kinds, the TOML file, the environment, resolution and the typed
//! accessors — is the library's, [`spool_service::config`], which the
//! Python binding reads the same way.

use std::path::Path;

pub use spool_catalog::mask_url;
use spool_service::config::keys::Key;
pub use spool_service::config::{
    keys, parse_bytes, parse_duration, Config, ConfigError, FlagValue, PLAIN_ENV, SECRET_ENV,
};

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
    /// Lease TTL, whole seconds ≥ 5 [env: SPOOL_LEASE_TTL] (default: 30).
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
    /// The values these flags give, each with its key and spelling.
    pub fn values(&self) -> Result<Vec<FlagValue>, ConfigError> {
        let mut out = Vec::new();
        let named: [(&'static Key, &Option<String>); 11] = [
            (&keys::ROOT.key, &self.spool_root),
            (&keys::STORE.key, &self.store),
            (&keys::CATALOG.key, &self.catalog),
            (&keys::STORE_ID.key, &self.store_id),
            (&keys::RANK.key, &self.rank),
            (&keys::LEASE_SCOPE.key, &self.lease_scope),
            (&keys::LEASE_TTL.key, &self.lease_ttl),
            (&keys::POLL_INTERVAL.key, &self.poll_interval),
            (&keys::RECHECK_INTERVAL.key, &self.recheck_interval),
            (&keys::MAX_BACKOFF.key, &self.max_backoff),
            (&keys::METRICS_ADDR.key, &self.metrics_addr),
        ];
        for (key, v) in named {
            if let Some(v) = v {
                out.push(FlagValue::new(key, v.clone()));
            }
        }
        if self.allow_shared_filesystem {
            out.push(FlagValue::new(&keys::ALLOW_SHARED_FILESYSTEM.key, "true"));
        }
        for s in &self.set {
            out.push(FlagValue::from_set(s)?);
        }
        Ok(out)
    }
}

/// Resolves the configuration with these flags (`config_file` is the
/// global `--config`).
pub fn load(config_file: Option<&Path>, flags: &ConfigFlags) -> Result<Config, ConfigError> {
    Config::load(config_file, &flags.values()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_sets_its_key_and_is_named_in_the_source() {
        let flags = ConfigFlags {
            lease_ttl: Some("40".into()),
            allow_shared_filesystem: true,
            set: vec!["upload.max_workers=8".into()],
            ..Default::default()
        };
        let v = flags.values().unwrap();
        let names: Vec<_> = v.iter().map(|f| (f.key.name, f.flag.as_str())).collect();
        assert_eq!(
            names,
            [
                ("lease.ttl", "--lease-ttl"),
                ("spool.allow_shared_filesystem", "--allow-shared-filesystem"),
                ("upload.max_workers", "--set upload.max_workers"),
            ]
        );
        let bad = ConfigFlags {
            set: vec!["upload.max_wrkers=8".into()],
            ..Default::default()
        };
        assert!(bad.values().unwrap_err().0.contains("known keys"));
    }
}
