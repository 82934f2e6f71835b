//! `spool ls`: lists catalog entries (one row per pack) in a time window.

use std::io::Write;

use anyhow::{Context, Result};
use spool_catalog::PackRow;

use crate::exit::{coded, ExitCode};
use crate::source::{format_ms, human_bytes, open_catalog, parse_time, runtime, CatalogArgs};

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
    /// source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms).
    #[arg(long)]
    pub json: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
List the packs in the catalog, oldest first, by creation time.

Reads the catalog only (never the store, never a spool directory). The
catalog is --catalog URL, or with --spool-root ROOT the embedded one at
ROOT/.catalog.db, or else the configuration's (--config FILE,
$SPOOL_CONFIG or ./spool.toml; SPOOL_CATALOG, SPOOL_ROOT):
destination.catalog, or the embedded one under spool.root. An SQLite
catalog that does not exist is an error (ls never creates one).

The table shows each pack's id, creation time (UTC), size, record count,
where it came from (host, pid, rank directory) and its object key. A line
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
    let url = args.target.catalog_url(config_file)?;
    let catalog = open_catalog(&url)?;
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
            writeln!(out, "{}", serde_json::to_string(row)?)?;
        }
    } else {
        print_table(&mut out, &rows)?;
    }
    out.flush()?;
    eprintln!(
        "{} of {} packs in the window shown; the catalog {} holds {} packs",
        rows.len(),
        in_window,
        catalog.server(),
        total
    );
    Ok(ExitCode::Ok)
}

fn print_table(out: &mut impl Write, rows: &[PackRow]) -> std::io::Result<()> {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.pack_id.clone(),
                format_ms(r.created_at_ms),
                human_bytes(r.bytes),
                r.records.to_string(),
                format!("{} pid {} {}", r.source_host, r.source_pid, r.rank_dir),
                r.object_key.clone(),
            ]
        })
        .collect();
    let head = [
        "PACK ID",
        "CREATED",
        "SIZE",
        "RECORDS",
        "SOURCE",
        "OBJECT KEY",
    ];
    let mut width = head.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cols: [&str; 6]| {
        writeln!(
            out,
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:<w4$}  {}",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4],
        )
    };
    line(out, head)?;
    for row in &cells {
        line(out, [&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]])?;
    }
    Ok(())
}
