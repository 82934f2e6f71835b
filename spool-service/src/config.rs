//! Configuration: the service's own [`ServiceConfig`], and the `spool`
//! configuration every embedder shares — the command and the
//! Python binding read the same TOML file, `SPOOL_*` variables and flags
//! the same way. One concern per file:
//!
//! - `keys.rs` — the one table of keys ([`keys::KEYS`]), each a typed
//!   handle read with `keys::POLL_INTERVAL.get(&cfg)`;
//! - `kind.rs` — what values a key takes ([`Kind`], [`Value`]);
//! - `parse.rs` — the one parser of a key's value ([`parse_value`]);
//! - `source.rs` — where a value came from ([`Source`]);
//! - `error.rs` — [`ConfigError`], what every part refuses with;
//! - `file.rs` — which TOML file, and its schema (derived from the table);
//! - `environment.rs` — the `SPOOL_*` variables and the derived ones;
//! - `resolve.rs` — flag > environment > file > default, each value with
//!   its [`Source`], the lease check and the embedded defaults;
//! - `accessors.rs` — the configs of the other crates built from it;
//! - `destination.rs` — URLs to a destination, the embedded defaults;
//! - `service_config.rs` — [`ServiceConfig`].
//!
//! # Validation
//!
//! Every value — from any source — goes through the same parser of its
//! kind, and a refused value names the key, the value (credentials masked
//! by [`spool_catalog::mask_url`]), where it came from and what is allowed.
//! An unknown section or field of the file is refused naming it, the file
//! and the known keys. Every refusal is a [`ConfigError`] (the `spool`
//! command exits 2 on it).
//!
//! # Secrets
//!
//! A store URL with credentials in it is refused (object_store reads
//! credentials from the `AWS_*`/`GOOGLE_*`/`AZURE_*` variables, never from
//! the URL). The store variables holding secrets are listed in
//! [`SECRET_ENV`], shown only as "set".
//!
//! # Embedded defaults
//!
//! With a spool root and no store or catalog, the destination is the
//! single-machine default under the root: `file://ROOT/.store` and
//! `sqlite:///ROOT/.catalog.db` ([`embedded_store_url`],
//! [`embedded_catalog_url`]; the names are spool-core's
//! `EMBEDDED_STORE_DIR` and `EMBEDDED_CATALOG_FILE`); every spool walk
//! skips both names.

mod accessors;
mod destination;
mod environment;
mod error;
mod file;
pub mod keys;
mod kind;
mod parse;
mod resolve;
mod service_config;
mod source;

pub use destination::{destination, embedded_catalog_url, embedded_store_url};
pub use environment::{Environment, ProcessEnv, CONFIG_ENV, PLAIN_ENV, SECRET_ENV};
pub use error::ConfigError;
pub use kind::{parse_bytes, parse_duration, Kind, Value};
pub use parse::parse_value;
pub use resolve::{Config, Entry, FlagValue};
pub use service_config::ServiceConfig;
pub use source::Source;

#[cfg(test)]
mod tests;
