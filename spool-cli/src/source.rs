//! Where `ls` and `cat` read from: the catalog and store URLs resolved as
//! for `spool run` ([`crate::config`]: flags over `SPOOL_*` variables over
//! the config file, the embedded defaults under the spool root when none
//! names one: `sqlite:///ROOT/.catalog.db`, `file://ROOT/.store`, which
//! `spool status ROOT` skips), and the time arguments of `ls`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::{DateTime, NaiveDate, Utc};

use crate::config::{keys, Config, FlagValue};
use crate::exit::{coded, ExitCode};

/// `--catalog URL` / `--spool-root ROOT`.
#[derive(Debug, Clone, clap::Args)]
pub struct CatalogArgs {
    /// The catalog [env: SPOOL_CATALOG] (destination.catalog):
    /// `clickhouse://HOST:PORT/DB[?table_prefix=P&user=U&password=W]` or
    /// `sqlite:///ABS/PATH.db`.
    #[arg(long, value_name = "URL")]
    pub catalog: Option<String>,
    /// The spool root [env: SPOOL_ROOT] (spool.root): its embedded
    /// `sqlite:///ROOT/.catalog.db` (and, for `cat`, `file:///ROOT/.store`)
    /// unless a catalog (store) is configured, as for `spool run`.
    #[arg(long, value_name = "ROOT")]
    pub spool_root: Option<PathBuf>,
}

impl CatalogArgs {
    /// The configuration these flags, the `SPOOL_*` variables and the
    /// config file (`--config FILE`, `$SPOOL_CONFIG` or `./spool.toml`)
    /// resolve to, in the same precedence as for `spool run` (a flag over
    /// its variable over the file, the embedded store and catalog under the
    /// spool root when none names one), so `ls` and `cat` read where `run`
    /// ships. `store` is `cat`'s `--store`.
    pub fn config(&self, store: Option<&str>, config_file: Option<&Path>) -> Result<Config> {
        let mut flags = Vec::new();
        if let Some(root) = &self.spool_root {
            if !root.is_dir() {
                return Err(coded(
                    ExitCode::Other,
                    format!(
                        "spool root {} does not exist (or is not a directory)",
                        root.display()
                    ),
                ));
            }
            let root = root
                .canonicalize()
                .with_context(|| format!("cannot resolve spool root {}", root.display()))?;
            flags.push(FlagValue::new(
                &keys::ROOT.key,
                root.to_string_lossy().into_owned(),
            ));
        }
        if let Some(url) = &self.catalog {
            flags.push(FlagValue::new(&keys::CATALOG.key, url.clone()));
        }
        if let Some(url) = store {
            flags.push(FlagValue::new(&keys::STORE.key, url.to_string()));
        }
        Config::load(config_file, &flags).map_err(|e| coded(ExitCode::Usage, e.to_string()))
    }
}

/// A single-threaded tokio runtime for one command's catalog and store
/// calls (SQLite work runs on its blocking pool).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Parses a point in time for `--since` / `--until`: RFC 3339
/// (`2026-11-29T12:00:00Z`, `2026-11-29T13:00:00+01:00`), a date
/// (`2026-11-29`, midnight UTC), `now`, or a duration before now (`90s`,
/// `15m`, `1h`, `2d`, `1w`, `1h30m`). Returns milliseconds since the epoch.
pub fn parse_time(text: &str, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    if t == "now" {
        return Ok(now_ms);
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return u64::try_from(dt.timestamp_millis())
            .map_err(|_| format!("{text:?} is before 1970"));
    }
    if let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        let ms = d
            .and_hms_opt(0, 0, 0)
            .map(|dt| dt.and_utc().timestamp_millis())
            .unwrap_or(0);
        return u64::try_from(ms).map_err(|_| format!("{text:?} is before 1970"));
    }
    match humantime::parse_duration(t) {
        Ok(d) => Ok(now_ms.saturating_sub(d.as_millis().min(u64::MAX as u128) as u64)),
        Err(_) => Err(format!(
            "{text:?} is not a time: give RFC 3339 (2026-11-29T12:00:00Z), a date (2026-11-29), \
             `now`, or how long ago (90s, 15m, 1h, 2d, 1w)"
        )),
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC, to the second.
pub fn format_ms(ms: u64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms as i64)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// Bytes in a short human form (`512 B`, `4.0 KiB`, `1.5 GiB`).
pub fn human_bytes(n: u64) -> String {
    indicatif::BinaryBytes(n).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn times_in_every_accepted_form() {
        assert_eq!(parse_time("now", NOW), Ok(NOW));
        assert_eq!(parse_time("1h", NOW), Ok(NOW - 3_600_000));
        assert_eq!(parse_time("2d", NOW), Ok(NOW - 2 * 86_400_000));
        assert_eq!(parse_time("1h30m", NOW), Ok(NOW - 5_400_000));
        assert_eq!(
            parse_time("2026-11-29T12:00:00Z", NOW),
            Ok(1_795_953_600_000)
        );
        assert_eq!(
            parse_time("2026-11-29T13:00:00+01:00", NOW),
            Ok(1_795_953_600_000)
        );
        assert_eq!(parse_time("2026-11-29", NOW), Ok(1_795_910_400_000));
        let err = parse_time("yesterday-ish", NOW).unwrap_err();
        assert!(err.contains("RFC 3339") && err.contains("2d"), "{err}");
        assert!(parse_time("1969-12-31", NOW).is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_ms(1_795_953_600_123), "2026-11-29T12:00:00Z");
        assert_eq!(human_bytes(512), "512 B");
    }
}
