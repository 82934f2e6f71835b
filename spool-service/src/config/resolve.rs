//! Resolution: for each key, a flag wins over its environment variable,
//! which wins over the file, which wins over the built-in default; then the
//! derived values (`spool.rank` from `$RANK`, `client.allow_http` from
//! `$AWS_ALLOW_HTTP`), the lease check, and the embedded store and catalog
//! under the spool root. Each value remembers its [`Source`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::environment::{derived_allow_http, derived_rank, Environment, ProcessEnv, CONFIG_ENV};
use super::file::{config_path, read_file};
use super::keys::{self, key_named, Key, KEYS};
use super::keys::{Setting, SettingValue};
use super::kind::Value;
use super::parse::{parse_value, refuse};
use super::source::Source;
use super::{destination, ConfigError};

/// A value given on the command line (or by an embedder in its place): the
/// key, the raw value, and how it was spelled (`--lease-ttl`, `--set
/// lease.ttl`) for messages.
#[derive(Debug, Clone)]
pub struct FlagValue {
    /// The key.
    pub key: &'static Key,
    /// The value as given.
    pub raw: String,
    /// The flag's spelling.
    pub flag: String,
    /// Given as an embedder's keyword argument named `flag`, not on the
    /// command line ([`FlagValue::argument`]).
    pub argument: bool,
}

impl FlagValue {
    /// A value for a key through its own flag (or `--set` if it has none).
    pub fn new(key: &'static Key, raw: impl Into<String>) -> FlagValue {
        FlagValue {
            key,
            raw: raw.into(),
            flag: key.flag.unwrap_or("--set").to_string(),
            argument: false,
        }
    }

    /// A value for a key given as an embedder's keyword argument (its
    /// [`Key::argument_name`]); refusals name it as `argument NAME`.
    pub fn argument(key: &'static Key, raw: impl Into<String>) -> FlagValue {
        FlagValue {
            key,
            raw: raw.into(),
            flag: key.argument_name(),
            argument: true,
        }
    }

    /// Parses `--set KEY=VALUE`.
    pub fn from_set(s: &str) -> Result<FlagValue, ConfigError> {
        let (name, value) = s.split_once('=').ok_or_else(|| {
            ConfigError(format!(
                "--set {:?}: expected KEY=VALUE, e.g. --set upload.max_workers=8",
                spool_catalog::mask_url(s)
            ))
        })?;
        let key = key_named(name.trim()).ok_or_else(|| unknown_key(name.trim(), "--set"))?;
        Ok(FlagValue {
            key,
            raw: value.to_string(),
            flag: format!("--set {}", key.name),
            argument: false,
        })
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

/// The effective configuration: one [`Entry`] per key of [`KEYS`]; read a
/// value with its typed handle, `keys::POLL_INTERVAL.get(&cfg)`.
#[derive(Debug, Clone)]
pub struct Config {
    entries: BTreeMap<&'static str, Entry>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl Config {
    /// Resolves every key from `flags`, the process environment, the file
    /// (`config_file`, else `$SPOOL_CONFIG`, else `./spool.toml` if present)
    /// and the defaults.
    pub fn load(config_file: Option<&Path>, flags: &[FlagValue]) -> Result<Config, ConfigError> {
        Config::load_with(config_file, flags, &ProcessEnv)
    }

    /// [`Config::load`] reading variables from `env`.
    pub fn load_with(
        config_file: Option<&Path>,
        flags: &[FlagValue],
        env: &dyn Environment,
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
        let file = config_path(config_file, env.var(CONFIG_ENV));
        if let Some(path) = &file {
            for (name, raw) in read_file(path)? {
                let k = key_named(&name).ok_or_else(|| unknown_key(&name, "file"))?;
                set(k, &raw, Source::File(path.clone()))?;
            }
        }
        for k in KEYS {
            if let Some(v) = env.var(k.env).filter(|v| !v.is_empty()) {
                set(k, &v, Source::Env(k.env.to_string()))?;
            }
        }
        for f in flags {
            let source = if f.argument {
                Source::Argument(f.flag.clone())
            } else {
                Source::Flag(f.flag.clone())
            };
            set(f.key, &f.raw, source)?;
        }
        // Derived values: from other variables, when no source set the key.
        let (rank, rank_var) = derived_rank(env);
        let (allow_http, http_var) = derived_allow_http(env);
        for (key, value, var) in [
            (&keys::RANK.key, Value::Count(rank), rank_var),
            (
                &keys::CLIENT_ALLOW_HTTP.key,
                Value::Bool(allow_http),
                http_var,
            ),
        ] {
            let k = key_named(key.name).expect("in KEYS");
            entries.entry(k.name).or_insert_with(|| Entry {
                key: k,
                value: Some(value),
                source: var.map_or(Source::Default, |v| Source::Env(v.into())),
            });
        }
        let mut config = Config { entries, file };
        config.check_lease()?;
        config.embedded_defaults()?;
        config.local_catalog_linger();
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
        let e = &self.entries[keys::LEASE_TTL.key.name];
        let ttl = keys::LEASE_TTL.get(self);
        spool_catalog::LeaseConfig::new(ttl).map_err(|err| {
            refuse(
                e.key,
                &ttl.as_secs().to_string(),
                &e.source,
                &format!("is refused: {err}"),
            )
        })?;
        Ok(())
    }

    /// With no source setting `service.index_linger`: the default for
    /// the catalog ([`super::service_config::default_index_linger`], 0 for a
    /// local one).
    fn local_catalog_linger(&mut self) {
        let Some(url) = keys::CATALOG.get(self) else {
            return;
        };
        let linger = keys::INDEX_LINGER.key.name;
        if let Some(e) = self.entries.get_mut(linger) {
            if matches!(e.source, Source::Default) {
                e.value = Some(Value::Secs(super::service_config::default_index_linger(
                    &url,
                )));
            }
        }
    }

    /// With a spool root and no store or catalog: the embedded ones.
    fn embedded_defaults(&mut self) -> Result<(), ConfigError> {
        let Some(root) = keys::ROOT.get(self) else {
            return Ok(());
        };
        let root = canonical(&root);
        // spelled by `destination`, like `spool produce --spool-root`: one
        // spelling, one catalog key
        for (key, url) in [
            (&keys::STORE.key, destination::embedded_store_url(&root)),
            (&keys::CATALOG.key, destination::embedded_catalog_url(&root)),
        ] {
            if !self.entries.contains_key(key.name) {
                let k = key_named(key.name).expect("in KEYS");
                let value = parse_value(k, &url, &Source::Embedded)?;
                self.entries.insert(
                    k.name,
                    Entry {
                        key: k,
                        value: Some(value),
                        source: Source::Embedded,
                    },
                );
            }
        }
        let name = keys::ROOT.key.name;
        let e = self.entries.get_mut(name).expect("the root is set");
        e.value = Some(Value::Path(root));
        Ok(())
    }

    /// Every key, in [`KEYS`] order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        KEYS.iter().map(|k| &self.entries[k.name])
    }

    /// A key's resolved value (for [`keys::Setting::get`]).
    pub(crate) fn value(&self, name: &str) -> Option<&Value> {
        self.entries.get(name).and_then(|e| e.value.as_ref())
    }

    /// Where a key's value came from.
    pub fn source(&self, key: &Key) -> Option<&Source> {
        self.entries.get(key.name).map(|e| &e.source)
    }
}

/// `path` absolute with its links resolved, also when it does not exist
/// yet: its deepest existing ancestor canonicalized, the rest appended. So
/// a spool root is spelled the same before and after it is created (one
/// embedded store and catalog URL, one catalog key).
fn canonical(path: &std::path::Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            return rest.iter().rev().fold(c, |p, part| p.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return abs,
        }
    }
}

/// Reading a typed key (a [`Setting`] of `keys.rs`) from a resolved
/// configuration.
impl<T: SettingValue> Setting<T> {
    /// The key's value in `cfg`.
    pub fn get(&self, cfg: &Config) -> T {
        T::from_value(cfg.value(self.key.name)).unwrap_or_else(|| {
            // A table error, not a user's: resolution gives every key with a
            // default (or a derived value) a value of its kind, and the unit
            // test `every_setting_reads_its_default` reads them all.
            panic!("configuration key {} read as the wrong type", self.key.name)
        })
    }
    /// The key's built-in default as a `T` (the library constructors'
    /// defaults, e.g. [`crate::ServiceConfig::new`]'s, are read from here,
    /// so the table is the one place they are written). Only for keys with
    /// a default.
    pub fn default_value(&self) -> T {
        let raw = self
            .key
            .default
            .unwrap_or_else(|| panic!("configuration key {} has no default", self.key.name));
        let value = super::parse::parse_value(&self.key, raw, &Source::Default)
            .unwrap_or_else(|e| panic!("the default of {} is refused: {e}", self.key.name));
        T::from_value(Some(&value))
            .unwrap_or_else(|| panic!("configuration key {} read as the wrong type", self.key.name))
    }
}
