//! `spool ls`: lists catalog entries (one row per pack) in a time window.

use std::io::Write;

use anyhow::{Context, Result};
use spool_catalog::PackRow;

use crate::exit::{coded, ExitCode};
use crate::source::{format_ms, human_bytes, parse_time, runtime, CatalogArgs};

/// Arguments of `spool ls`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: CatalogArgs,
    /// Only packs created at or after T: RFC 3339 (2026-11-29T12:00:00Z),
    /// a date (2026-11-29, midnight UTC), `now`, or how long ago (15m, 1h, 2d).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Only packs created before T (same forms as --since).
    #[arg(long, value_name = "T")]
    pub until: Option<String>,
    /// Show at most the N most recent packs of the window (still printed
    /// oldest first).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// One JSON object per line per pack, with every catalog column
    /// (pack_id, object_key, store_id, sha256, bytes, records, source_host,
    /// source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms,
    /// trailer_sha256); a sink without an ordinal has `"ordinal": null`;
    /// `sha256` is the whole object's (as `sha256sum` prints it),
    /// `trailer_sha256` the pack trailer's checksum.
    #[arg(long)]
    pub json: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
List the packs in the catalog, oldest first, by creation time.

Reads the catalog only (never the store, never a spool directory). The
catalog resolves as for `spool run`: --catalog URL, else SPOOL_CATALOG,
else destination.catalog in the config file (--config FILE, $SPOOL_CONFIG
or ./spool.toml), else the embedded one at ROOT/.catalog.db under the
spool root (--spool-root ROOT, SPOOL_ROOT, spool.root). An SQLite
catalog that does not exist is an error (ls never creates one).

The table shows each pack's id, creation time (UTC), size, record count,
where it came from — the producer's host and pid (from the owner record
of the directory it was staged in, even when an adopter uploaded it), the
rank directory and the sink's worker ordinal (`-` for a sink without one,
`0` for w0/) — and its object key. A line
on stderr says how many packs the window holds and how many the catalog
holds in all.

Examples:
  spool ls --spool-root /var/lib/spool
  spool ls --spool-root /var/lib/spool --since 1h
  spool ls --config /etc/spool/spool.toml --since 2026-11-29
  spool ls --catalog 'clickhouse://ch1:8123/spool' --since 2026-11-29 --until 2026-11-30
  spool ls --spool-root /var/lib/spool --since 2d --limit 20 --json | jq .object_key";

/// Runs `spool ls`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let now = spool_core::pack::now_ms();
    let time = |t: &Option<String>, flag: &str, default: u64| -> Result<u64> {
        match t {
            None => Ok(default),
            Some(t) => {
                parse_time(t, now).map_err(|e| coded(ExitCode::Usage, format!("{flag}: {e}")))
            }
        }
    };
    let from = time(&args.since, "--since", 0)?;
    let to = time(&args.until, "--until", u64::MAX)?;
    if from >= to {
        return Err(coded(
            ExitCode::Usage,
            format!(
                "the window is empty: --since ({}) is not before --until ({})",
                format_ms(from),
                format_ms(to)
            ),
        ));
    }
    let cfg = args.target.config(None, config_file)?;
    let catalog = cfg.open_catalog_to_read()?;
    let rt = runtime()?;
    let (mut rows, total) = rt
        .block_on(async {
            let rows = catalog.list_range(from, to).await?;
            let total = catalog.count().await?;
            Ok::<_, spool_catalog::Error>((rows, total))
        })
        .with_context(|| format!("cannot list packs in catalog {}", catalog.server()))?;
    let in_window = rows.len();
    if let Some(n) = args.limit {
        let skip = rows.len().saturating_sub(n);
        rows.drain(..skip);
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        for row in &rows {
            writeln!(out, "{}", serde_json::to_string(row)?).map_err(crate::exit::stdout_error)?;
        }
    } else {
        print_table(&mut out, &rows).map_err(crate::exit::stdout_error)?;
    }
    out.flush().map_err(crate::exit::stdout_error)?;
    eprintln!(
        "{} of {} packs in the window shown; the catalog {} holds {} packs",
        rows.len(),
        in_window,
        catalog.server(),
        total
    );
    Ok(ExitCode::Ok)
}

/// The table's columns: heading, right-aligned.
const TABLE: [(&str, bool); 10] = [
    ("PACK ID", false),
    ("CREATED", false),
    ("SIZE", true),
    ("RECORDS", true),
    ("HOST", false),
    ("PID", true),
    ("RANK DIR", false),
    ("ORDINAL", true),
    ("RANGE", true),
    ("OBJECT KEY", false),
];

/// One table line of a row: where it came from is the producer's host and
/// pid (`-` when the owner record named none) and the sink's ordinal (`-`
/// for a sink without one, `0` for `w0/`); the pack is the object's bytes
/// `RANGE` (first-last, inclusive, as an HTTP range or `curl -r` spells it).
fn cells(r: &PackRow) -> [String; 10] {
    [
        r.pack_id.clone(),
        format_ms(r.created_at_ms),
        human_bytes(r.bytes),
        r.records.to_string(),
        r.source_host.clone(),
        match r.source_pid {
            0 => "-".to_string(),
            pid => pid.to_string(),
        },
        r.rank_dir.clone(),
        r.ordinal.map_or_else(|| "-".to_string(), |k| k.to_string()),
        format!(
            "{}-{}",
            r.object_offset,
            (r.object_offset + r.bytes).saturating_sub(1)
        ),
        r.object_key.clone(),
    ]
}

fn print_table(out: &mut impl Write, rows: &[PackRow]) -> std::io::Result<()> {
    let cells: Vec<[String; 10]> = rows.iter().map(cells).collect();
    let mut width = TABLE.map(|(h, _)| h.chars().count());
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cols: [&str; 10]| {
        let mut text = String::new();
        for (i, c) in cols.iter().enumerate() {
            if i + 1 == cols.len() {
                text.push_str(c);
            } else if TABLE[i].1 {
                text.push_str(&format!("{c:>w$}  ", w = width[i]));
            } else {
                text.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        writeln!(out, "{text}")
    };
    line(out, TABLE.map(|(h, _)| h))?;
    for row in &cells {
        line(out, std::array::from_fn(|i| row[i].as_str()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_host_pid_and_ordinal_with_a_dash_for_none() {
        let row = PackRow {
            object_offset: 0,
            pack_id: "a".repeat(32),
            object_key: "p/v1/date=2026-11-29/x.pack".into(),
            store_id: "default".into(),
            sha256: "b".repeat(64),
            bytes: 2048,
            records: 3,
            source_host: "node7".into(),
            source_pid: 4100,
            rank_dir: "r3-0badcafe".into(),
            ordinal: None,
            created_at_ms: 1_795_965_709_123,
            indexed_at_ms: 0,
            trailer_sha256: "c".repeat(64),
        };
        let w0 = PackRow {
            ordinal: Some(0),
            source_pid: 0,
            object_offset: 4096,
            ..row.clone()
        };
        assert_eq!(
            cells(&row)[4..9],
            ["node7", "4100", "r3-0badcafe", "-", "0-2047"]
        );
        // a pack inside a larger object: its range in it
        assert_eq!(
            cells(&w0)[4..9],
            ["node7", "-", "r3-0badcafe", "0", "4096-6143"]
        );
        let mut out = Vec::new();
        print_table(&mut out, &[row, w0]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let head = text.lines().next().unwrap();
        for h in ["HOST", "PID", "RANK DIR", "ORDINAL", "RANGE", "OBJECT KEY"] {
            assert!(head.contains(h), "{text}");
        }
        assert_eq!(text.lines().count(), 3, "{text}");
    }
}
