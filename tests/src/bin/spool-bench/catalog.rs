//! spool-catalog: index throughput by batch size on the
//! real ClickHouse and on SQLite, each beside a plain insert of the same
//! rows, unfenced and (256-row batches) fenced by a held lease, and the
//! latency of lease claims and renewals.

use anyhow::{bail, Context, Result};
use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog, LeaseClaim, LeaseConfig, PackRow};
use spool_tests::catalog_suite::row;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::upload::runtime;
use crate::{env, percentile, Ctx, Figure};

/// Every column of the packs table, the baseline's (`indexed_at_ms` the
/// client's clock).
const COLUMNS: &str = "pack_id, object_key, store_id, sha256, bytes, records, source_host, source_pid, rank_dir, ordinal, created_at_ms, indexed_at_ms, trailer_sha256";

fn fig(ctx: &Ctx, name: String, unit: &str, detail: String) -> Figure {
    Figure::new(ctx, "catalog", name, unit, detail)
}

/// Rows numbered from `from`, all distinct.
fn rows(from: u64, n: usize) -> Vec<PackRow> {
    (0..n as u64)
        .map(|i| row(from + i, 1_700_000_000_000 + from + i))
        .collect()
}

fn now_ms() -> u64 {
    spool_core::pack::now_ms()
}

/// `VALUES` tuples of the rows: every column of [`COLUMNS`], the client's
/// clock as `indexed_at_ms`.
fn values(rows: &[PackRow]) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let now = now_ms();
    rows.iter()
        .map(|r| {
            format!(
                "({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {now}, {})",
                q(&r.pack_id),
                q(&r.object_key),
                q(&r.store_id),
                q(&r.sha256),
                r.bytes,
                r.records,
                q(&r.source_host),
                r.source_pid,
                q(&r.rank_dir),
                r.ordinal.unwrap_or(0),
                r.created_at_ms,
                q(&r.trailer_sha256),
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the time of the unfenced ClickHouse index goes: the same bare
/// HTTP client sending spool's own statement (`Catalog::index`'s text,
/// from spool-catalog's `testing` seam: `indexed_at_ms` left to its column
/// default) and the baseline's, alternating, 256-row batches. Equal
/// figures put any gap of `Catalog::index` to the baseline in the client
/// path (crate, hyper, the runtime), not the statement.
fn probe_statement(ctx: &Ctx, url: &str, host: &str, port: u16, table: &str) -> Result<()> {
    let total = ctx.size.pick(16384, 1024, 256);
    let (mut t_ours, mut t_plain) = (Duration::ZERO, Duration::ZERO);
    let mut next = 10_000_000u64;
    for _ in 0..total / 256 {
        let (a, b) = (rows(next, 256), rows(next + 256, 256));
        next += 512;
        let ours = spool_catalog::testing::clickhouse_index_statement(url, &a)?;
        let t = Instant::now();
        http_post(host, port, &ours)?;
        t_ours += t.elapsed();
        let t = Instant::now();
        http_post(
            host,
            port,
            &format!("INSERT INTO {table} ({COLUMNS}) VALUES {}", values(&b)),
        )?;
        t_plain += t.elapsed();
    }
    ctx.record(Figure {
        ours: total as f64 / t_ours.as_secs_f64(),
        baseline: Some(total as f64 / t_plain.as_secs_f64()),
        baseline_name: "plain HTTP `INSERT … VALUES` (13 columns, the client's clock)".into(),
        ..fig(
            ctx,
            "probe: the statement alone, batches of 256".into(),
            "packs/s",
            format!("{total} rows; ours: the statement `Catalog::index` sends (12 columns, `indexed_at_ms` by column default), through the same bare HTTP client as the baseline"),
        )
    })
}

/// One statement over plain HTTP (`Connection: close`, `TCP_NODELAY`).
fn http_post(host: &str, port: u16, sql: &str) -> Result<()> {
    let mut s = TcpStream::connect((host, port))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sql}",
        sql.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    if !out.starts_with("HTTP/1.1 200") {
        bail!(
            "ClickHouse answered: {}",
            out.lines().next().unwrap_or_default()
        );
    }
    Ok(())
}

/// Runs the group on ClickHouse (a fresh database, dropped afterwards) and
/// on SQLite (a file in the scratch directory).
pub fn run(ctx: &Ctx) -> Result<()> {
    let rt = runtime()?;
    let base = env("SPOOL_TEST_CLICKHOUSE_URL")?;
    let CatalogUrl::ClickHouse(mut t) = CatalogUrl::parse(&base)? else {
        bail!("SPOOL_TEST_CLICKHOUSE_URL is not a clickhouse:// URL: {base}");
    };
    t.database = format!("spool_bench_{}", std::process::id());
    let url = format!("clickhouse://{}/{}", t.authority(), t.database);
    let admin = ClickHouseCatalog::new(t.clone());
    let ch = spool_catalog::open(&url)?;
    let (host, port, db) = (t.hosts[0].0.clone(), t.hosts[0].1, t.database.clone());
    let result = (|| -> Result<()> {
        rt.block_on(ch.ensure_schema())?;
        let table = format!("`{db}`.`spool_packs`");
        let version = rt.block_on(admin.server_version())?;
        index(ctx, &rt, &format!("ClickHouse {version}"), &ch, |rows| {
            http_post(
                &host,
                port,
                &format!("INSERT INTO {table} ({COLUMNS}) VALUES {}", values(rows)),
            )
        })?;
        probe_statement(ctx, &url, &host, port, &table)?;
        lease(ctx, &rt, "ClickHouse", &ch)
    })();
    let dropped = rt.block_on(admin.testing_drop_database());
    result?;
    dropped.context("dropping the benchmark database")?;

    let dir = ctx.dir("catalog-sqlite")?;
    let ours_db = dir.join("ours.db");
    let sq = spool_catalog::open(&format!("sqlite://{}", ours_db.display()))?;
    rt.block_on(sq.ensure_schema())?;
    let mut plain = rusqlite::Connection::open(dir.join("plain.db"))?;
    plain.pragma_update(None, "journal_mode", "WAL")?;
    // The same table as ours (primary key, the time index, nullable
    // ordinal): the baseline does the same writes, bare.
    plain.execute_batch(
        "CREATE TABLE packs (pack_id TEXT NOT NULL PRIMARY KEY, object_key TEXT NOT NULL, store_id TEXT NOT NULL, sha256 TEXT NOT NULL, bytes INTEGER NOT NULL, records INTEGER NOT NULL, source_host TEXT NOT NULL, source_pid INTEGER NOT NULL, rank_dir TEXT NOT NULL, ordinal INTEGER, created_at_ms INTEGER NOT NULL, indexed_at_ms INTEGER NOT NULL, trailer_sha256 TEXT NOT NULL);\
         CREATE INDEX packs_by_created ON packs (created_at_ms);",
    )?;
    index(ctx, &rt, "SQLite", &sq, |rows| {
        let tx = plain.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut st = tx.prepare_cached(&format!(
                "INSERT INTO packs ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT(pack_id) DO UPDATE SET object_key = excluded.object_key, store_id = excluded.store_id, sha256 = excluded.sha256, bytes = excluded.bytes, records = excluded.records, source_host = excluded.source_host, source_pid = excluded.source_pid, rank_dir = excluded.rank_dir, ordinal = excluded.ordinal, created_at_ms = excluded.created_at_ms, indexed_at_ms = excluded.indexed_at_ms, trailer_sha256 = excluded.trailer_sha256"
            ))?;
            let now = now_ms() as i64;
            for r in rows {
                st.execute(rusqlite::params![
                    r.pack_id,
                    r.object_key,
                    r.store_id,
                    r.sha256,
                    r.bytes as i64,
                    r.records as i64,
                    r.source_host,
                    r.source_pid as i64,
                    r.rank_dir,
                    r.ordinal.map(i64::from),
                    r.created_at_ms as i64,
                    now,
                    r.trailer_sha256
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    })?;
    lease(ctx, &rt, "SQLite", &sq)?;
    drop(sq);
    drop(plain);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// `Catalog::index` in batches of 1, 16 and 256 unfenced (as a node-scope
/// service indexes its own packs), and in batches of 256 fenced by a held
/// lease (as a catalog-scope service or an adopter indexes), against
/// `plain` inserting the same number of rows in the same batches,
/// alternating statement by statement.
fn index(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    backend: &str,
    cat: &Arc<dyn Catalog>,
    mut plain: impl FnMut(&[PackRow]) -> Result<()>,
) -> Result<()> {
    let clickhouse = backend.starts_with("ClickHouse");
    let cfg = LeaseConfig::default();
    let LeaseClaim::Held(guard) = rt.block_on(cat.acquire("bench/fence", "bench", &cfg))? else {
        bail!("the benchmark fence lease was not free on {backend}");
    };
    let mut next = 0u64;
    for (batch, fenced) in [(1usize, false), (16, false), (256, false), (256, true)] {
        let total = match batch {
            1 => ctx.size.pick(300, 30, 5),
            16 => ctx.size.pick(3200, 320, 32),
            _ => ctx.size.pick(16384, 1024, 256),
        };
        let ours_rows = rows(next, total);
        let plain_rows = rows(next + total as u64, total);
        next += 2 * total as u64;
        let fence = fenced.then_some(&guard);
        // Statement by statement, ours then the plain one, so both see the
        // same server and machine load.
        let (mut t_ours, mut t_plain) = (Duration::ZERO, Duration::ZERO);
        for (ours, theirs) in ours_rows.chunks(batch).zip(plain_rows.chunks(batch)) {
            let t = Instant::now();
            rt.block_on(cat.index(ours, fence))?;
            t_ours += t.elapsed();
            let t = Instant::now();
            plain(theirs)?;
            t_plain += t.elapsed();
        }
        let ours = total as f64 / t_ours.as_secs_f64();
        let base = total as f64 / t_plain.as_secs_f64();
        let (base_name, how) = match (clickhouse, fenced) {
            (true, false) => (
                "plain HTTP `INSERT … VALUES` (13 columns, the client's clock; one connection per statement, `TCP_NODELAY`)",
                "ours: `INSERT … VALUES` as SQL text (12 columns; `indexed_at_ms` filled by its column default, the server clock), one kept-alive `TCP_NODELAY` connection through the `clickhouse` crate",
            ),
            (true, true) => (
                "plain HTTP `INSERT … VALUES` (unfenced)",
                "ours: `INSERT … SELECT … ARRAY JOIN` (column arrays) `WHERE throwIf(<fence> != 1) = 0`, one statement, no read-back",
            ),
            (false, false) => (
                "rusqlite upsert, same table, one transaction per batch",
                "ours: `SqliteCatalog::index` (WAL, one `BEGIN IMMEDIATE` per batch, one cached `INSERT … VALUES … ON CONFLICT` per row, on the blocking pool)",
            ),
            (false, true) => (
                "rusqlite upsert, same table, one transaction per batch (unfenced)",
                "ours: `SqliteCatalog::index` fenced: the fence read once per batch inside its `BEGIN IMMEDIATE`, then the same upserts",
            ),
        };
        let what = if fenced { "fenced, " } else { "" };
        ctx.record(Figure {
            ours,
            baseline: Some(base),
            baseline_name: base_name.into(),
            // ClickHouse at 256 rows and SQLite unfenced at
            // least as fast as the bare insert.
            goal: ((batch == 256 || !clickhouse) && !fenced).then_some(1.0),
            ..fig(
                ctx,
                format!("index on {backend}, {what}batches of {batch}"),
                "packs/s",
                format!(
                    "{total} rows, {}; {how}",
                    if fenced {
                        "fenced by a held lease"
                    } else {
                        "unfenced"
                    }
                ),
            )
        })?;
    }
    rt.block_on(cat.release(&guard))?;
    Ok(())
}

/// Latency of acquiring (a fresh claim: head read, append, read-back) and
/// of renewing, p50 and p99, with the default timing (30 s TTL).
fn lease(
    ctx: &Ctx,
    rt: &tokio::runtime::Runtime,
    backend: &str,
    cat: &Arc<dyn Catalog>,
) -> Result<()> {
    let n = ctx.size.pick(200, 20, 3);
    let cfg = LeaseConfig::default();
    let (mut claims, mut renews) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let LeaseClaim::Held(g) = rt.block_on(cat.acquire("bench/lease", "bench", &cfg))? else {
            bail!("the benchmark lease was not free on {backend}");
        };
        claims.push(t.elapsed());
        let t = Instant::now();
        let LeaseClaim::Held(g) = rt.block_on(cat.renew(&g))? else {
            bail!("renewing the benchmark lease failed on {backend}");
        };
        renews.push(t.elapsed());
        rt.block_on(cat.release(&g))?;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for (what, xs) in [("claim (acquire)", &claims), ("renew", &renews)] {
        for p in [50.0, 99.0] {
            ctx.record(Figure {
                ours: ms(percentile(xs, p)),
                higher_is_better: false,
                ..fig(
                    ctx,
                    format!("lease {what} on {backend}, p{p:.0}"),
                    "ms",
                    format!("{n} claims, each: head read, append, read-back"),
                )
            })?;
        }
    }
    Ok(())
}
