//! The one parser of a key's value: every value, from any source, goes
//! through [`parse_value`] for its key's [`Kind`], and a refusal names the
//! key, the value (credentials masked), where it came from and what is
//! allowed.

use std::path::PathBuf;

use spool_catalog::{mask_url, CatalogUrl, LeaseScope};

use super::error::ConfigError;
use super::keys::Key;
use super::kind::{parse_bytes, parse_duration, show_ms, Kind, Value};
use super::source::Source;

/// The refusal of `raw` for `k`, given by `source`: `why`, and what is
/// allowed.
pub(crate) fn refuse(k: &Key, raw: &str, source: &Source, why: &str) -> ConfigError {
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
        Kind::Ship => Value::Ship(match raw_t.to_ascii_lowercase().as_str() {
            "self" => crate::Ship::Itself,
            "daemon" => crate::Ship::Daemon,
            _ => return Err(bad("is not who ships")),
        }),
        Kind::Addr => Value::Addr(
            raw_t
                .parse()
                .map_err(|_| bad("is not an address IP:PORT"))?,
        ),
        Kind::AccessMode => {
            let sharing: spool_lock::Sharing =
                raw_t.parse().map_err(|_| bad("is not an access mode"))?;
            Value::Text(sharing.to_string())
        }
        Kind::Group => {
            spool_lock::Access::parse(Some("0750"), Some(raw_t))
                .map_err(|e| bad(&format!("is refused: {e}")))?;
            Value::Text(raw_t.to_string())
        }
    })
}
