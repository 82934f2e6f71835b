//! spool-service: end-to-end drain (own directory + an adopted
//! dead sibling: validate, upload, index) into moto and the real ClickHouse
//! against `rclone move` of the same files, and seal-to-indexed latency with
//! the registry wake-up against the poll interval alone.

use anyhow::{bail, Context, Result};
use object_store::ObjectStore;
use spool_catalog::{Catalog, CatalogUrl, ClickHouseCatalog};
use spool_core::registry::Registry;
use spool_core::sink::{Sink, SinkConfig};
use spool_core::spool::SpoolConfig;
use spool_core::{claim_rank_dir, Destination, Spool};
use spool_lock::{LockMode, LockOptions};
use spool_service::{ServiceConfig, StorageService};
use spool_upload::{ClientConfig, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::make_pack;
use crate::upload::runtime;
use crate::{env, percentile, rclone, run_cmd, size_label, timed, Ctx, Figure};

const MIB: f64 = (1 << 20) as f64;

/// Which pack shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// 1,000 × 1 MiB in a full run.
    Small,
    /// 64 × 16 MiB in a full run.
    Large,
    /// 10,000 × 16 KiB in a full run.
    Tiny,
}

/// CPU seconds (user + system) this process has used so far, and those of
/// its waited-for children, from `/proc/self/stat` (no FFI needed).
pub fn cpu_seconds() -> Result<(f64, f64)> {
    cpu_seconds_of("self")
}

/// [`cpu_seconds`] of process `pid` (`"self"` or a number).
pub(crate) fn cpu_seconds_of(pid: &str) -> Result<(f64, f64)> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // fields after the command name (which may hold spaces), 1-based from 3
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("{path} without a command name"))?;
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime 14, stime 15, cutime 16, cstime 17 → indexes 11..=14 here
    let tick = 100.0; // USER_HZ on Linux
    Ok(((f[11] + f[12]) / tick, (f[13] + f[14]) / tick))
}

/// The user + system CPU seconds so far of the servers `cargo xtask bench`
/// started for this case (`SPOOL_BENCH_CLICKHOUSE_PID`,
/// `SPOOL_BENCH_MOTO_PID`), as `(clickhouse, moto)`; `None` when run by
/// hand without them.
fn server_cpu() -> Option<(f64, f64)> {
    let of = |var: &str| {
        let pid = std::env::var(var).ok()?;
        cpu_seconds_of(&pid).ok().map(|(own, _)| own)
    };
    Some((
        of("SPOOL_BENCH_CLICKHOUSE_PID")?,
        of("SPOOL_BENCH_MOTO_PID")?,
    ))
}

/// What the servers spent during one side of a drain, for the figure's
/// note: `(clickhouse, moto)` CPU seconds between `before` and now.
fn servers_spent(before: Option<(f64, f64)>) -> Option<(f64, f64)> {
    let (c0, m0) = before?;
    let (c1, m1) = server_cpu()?;
    Some((c1 - c0, m1 - m0))
}

/// Writes back and drops the page cache so that both sides read their
/// packs from disk (as root; a no-op where that is refused).
pub(crate) fn drop_caches() {
    let _ = std::process::Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

/// A fresh ClickHouse database for one case, dropped by [`Db::drop_now`].
pub(crate) struct Db {
    pub(crate) url: String,
    database: String,
    admin: ClickHouseCatalog,
}

impl Db {
    pub(crate) fn fresh(tag: &str) -> Result<Db> {
        let base = env("SPOOL_TEST_CLICKHOUSE_URL")?;
        let CatalogUrl::ClickHouse(mut t) = CatalogUrl::parse(&base)? else {
            bail!("SPOOL_TEST_CLICKHOUSE_URL is not a clickhouse:// URL: {base}");
        };
        t.database = format!("spool_bench_{tag}_{}", std::process::id());
        Ok(Db {
            url: format!("clickhouse://{}/{}", t.authority(), t.database),
            database: t.database.clone(),
            admin: ClickHouseCatalog::new(t),
        })
    }

    /// Drops the database. A server still too busy to answer (merging a
    /// drain's parts) is reported and not an error: the figures are taken
    /// by then, and `cargo xtask bench` discards the server after the case.
    pub(crate) fn drop_now(&self) -> Result<()> {
        if let Err(e) = runtime()?.block_on(self.admin.testing_drop_database()) {
            eprintln!(
                "spool-bench: warning: could not drop the benchmark database {}: {e}",
                self.database
            );
        }
        Ok(())
    }
}

/// A service configuration for `dir` on moto (prefix `prefix`) and `db`.
fn service_config(
    dir: &Path,
    dest: &Destination,
    prefix: &str,
    db: &Db,
    registry: Arc<Registry>,
) -> Result<ServiceConfig> {
    let client = ClientConfig {
        allow_http: true,
        ..ClientConfig::default()
    };
    let bucket = env("SPOOL_TEST_S3_BUCKET")?;
    let store = Store::from_url(&format!("s3://{bucket}/{prefix}"), &client)?;
    let catalog = spool_catalog::open(&db.url)?;
    let mut c = ServiceConfig::new(dir, dest.clone(), store, catalog as Arc<dyn Catalog>);
    c.lock_mode = LockMode::HeldByCaller;
    c.registry = registry;
    // The service's own variable, for measuring another linger by hand
    // (`SPOOL_INDEX_LINGER=5ms cargo xtask bench service-drain-tiny`).
    if let Ok(raw) = std::env::var("SPOOL_INDEX_LINGER") {
        c.index_linger = spool_service::config::parse_duration(&raw)
            .with_context(|| format!("SPOOL_INDEX_LINGER={raw:?} is not a duration"))?;
    }
    c.upload.bundle_linger = bundle_linger()?;
    Ok(c)
}

/// `upload.bundle_linger`: the default, or `SPOOL_UPLOAD_BUNDLE_LINGER`
/// for measuring another by hand.
fn bundle_linger() -> Result<Duration> {
    match std::env::var("SPOOL_UPLOAD_BUNDLE_LINGER") {
        Ok(raw) => spool_service::config::parse_duration(&raw)
            .with_context(|| format!("SPOOL_UPLOAD_BUNDLE_LINGER={raw:?} is not a duration")),
        Err(_) => Ok(spool_upload::UploadConfig::default().bundle_linger),
    }
}

fn destination(db: &Db, prefix: &str) -> Result<Destination> {
    Ok(Destination {
        catalog_url: db.url.clone(),
        database: db.database.clone(),
        table_prefix: "spool_".into(),
        store_url: format!("s3://{}/{prefix}", env("SPOOL_TEST_S3_BUCKET")?),
        store_id: "default".into(),
    })
}

pub(crate) fn held_spool(dir: &Path) -> Result<Spool> {
    Ok(Spool::open(
        dir,
        &SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..SpoolConfig::default()
        },
    )?)
}

/// Stages half the packs into the own rank directory and half into a dead
/// sibling (claimed, staged, released), writes the same bytes into a plain
/// directory for rclone, starts the service and waits until every pack is
/// indexed and the sibling is gone; then `rclone move` of the copy.
pub fn drain(ctx: &Ctx, shape: Shape) -> Result<()> {
    let (n, bytes) = match shape {
        Shape::Small => ctx
            .size
            .pick((1000, 1 << 20), (40, 256 << 10), (4, 16 << 10)),
        Shape::Large => ctx.size.pick((64, 16 << 20), (8, 4 << 20), (2, 1 << 20)),
        Shape::Tiny => ctx
            .size
            .pick((10_000, 16 << 10), (400, 16 << 10), (8, 16 << 10)),
    };
    let db = Db::fresh(&format!("drain_{shape:?}").to_lowercase())?;
    // the drain goals, as ratios against rclone
    let goal = match shape {
        Shape::Small => 1.5,
        Shape::Large => 1.2,
        Shape::Tiny => 2.0,
    };
    let result = drain_in(ctx, &db, n, bytes, goal);
    let dropped = db.drop_now();
    result?;
    dropped
}

fn drain_in(ctx: &Ctx, db: &Db, n: usize, bytes: usize, goal: f64) -> Result<()> {
    let root = ctx.dir("drain-root")?;
    let plain = ctx.dir("drain-rclone")?;
    let prefix = "ours-drain";
    let dest = destination(db, prefix)?;
    let key = dest.catalog_key()?;
    let opts = LockOptions::default();
    let own = claim_rank_dir(&root, &key, 0, &opts)?;
    let sibling = claim_rank_dir(&root, &key, 1, &opts)?;
    let sibling_dir = sibling.dir().to_path_buf();
    let mut total = 0u64;
    {
        let own_spool = held_spool(own.dir())?;
        let sib_spool = held_spool(&sibling_dir)?;
        for i in 0..n {
            let (id, body) = make_pack(bytes, i as u64);
            let spool = if i % 2 == 0 { &own_spool } else { &sib_spool };
            spool.stage(None, id, &body)?;
            std::fs::write(plain.join(format!("{id}.ready")), &body)?;
            total += body.len() as u64;
        }
    }
    sibling.release()?; // dead: nobody holds it
    let mib = total as f64 / MIB;
    let cfg = service_config(own.dir(), &dest, prefix, db, Arc::new(Registry::new()))?;
    let mut svc = StorageService::new(cfg)?;
    let limit = Duration::from_secs(900);
    drop_caches();
    let (cpu0, _) = cpu_seconds()?;
    let servers0 = server_cpu();
    let t = Instant::now();
    svc.start()?;
    // milestones on stderr, to see where a drain's time goes
    let mut marks = vec![
        (n as u64 / 4, "1/4"),
        (n as u64 / 2, "1/2"),
        (n as u64 * 3 / 4, "3/4"),
        (n as u64, "all"),
    ];
    marks.reverse();
    let mut sibling_gone = false;
    loop {
        let s = svc.snapshot();
        while marks.last().is_some_and(|(k, _)| s.indexed >= *k) {
            let (_, what) = marks.pop().expect("a mark");
            eprintln!(
                "spool-bench: drain: {what} indexed at {:.2} s ({} cycles)",
                t.elapsed().as_secs_f64(),
                s.cycles
            );
        }
        if !sibling_gone && !sibling_dir.exists() {
            sibling_gone = true;
            eprintln!(
                "spool-bench: drain: sibling removed at {:.2} s",
                t.elapsed().as_secs_f64()
            );
        }
        // indexed is counted live; the adoption figures are published
        // after the cycle that removed the sibling
        if s.indexed >= n as u64 && !sibling_dir.exists() && s.adopted_spools == 1 {
            break;
        }
        if t.elapsed() > limit {
            bail!("not drained within {limit:?}: {s:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ours = t.elapsed().as_secs_f64();
    let ours_cpu = cpu_seconds()?.0 - cpu0;
    let ours_servers = servers_spent(servers0);
    let snap = svc.snapshot();
    svc.stop()?;
    own.release_and_remove_if_empty()?;
    let count = runtime()?.block_on(spool_catalog::open(&db.url)?.count())?;
    if count != n as u64 || snap.adopted_spools != 1 {
        bail!(
            "drained {count} rows of {n}, adopted {} spools: {snap:?}",
            snap.adopted_spools
        );
    }
    let bucket = env("SPOOL_TEST_S3_BUCKET")?;
    let mut rc = rclone(&ctx.scratch)?;
    rc.arg("move")
        .arg(&plain)
        .arg(format!("moto:{bucket}/rclone-move"));
    drop_caches();
    let (_, child0) = cpu_seconds()?;
    let base_servers0 = server_cpu();
    let (_, base) = timed(|| run_cmd(&mut rc))?;
    let base_cpu = cpu_seconds()?.1 - child0;
    let base_servers = servers_spent(base_servers0);
    // Where the two cores went: the servers share them with the drain.
    let servers_note = match (ours_servers, base_servers) {
        (Some((ch, moto)), Some((_, base_moto))) => format!(
            "; CPU of the servers during ours: moto {moto:.1} s, ClickHouse {ch:.1} s; during rclone's: moto {base_moto:.1} s"
        ),
        _ => String::new(),
    };
    let left = std::fs::read_dir(&plain)?.count();
    if left != 0 {
        bail!("rclone move left {left} files in {}", plain.display());
    }
    ctx.record(
        Figure::new(
            ctx,
            "service",
            format!(
                "drain {n} × {} (own + adopted) to moto + ClickHouse",
                size_label(bytes)
            ),
            "MiB/s",
            format!(
                "half the packs in the own rank dir, half in a dead sibling, page cache dropped before each side; ours: `StorageService` start → every pack validated, uploaded, indexed, sibling adopted and removed ({ours:.1} s, {} cycles); rclone only uploads and deletes ({base:.1} s){servers_note}",
                snap.cycles
            ),
        )
        .ours(mib / ours)
        .vs("rclone move --transfers 4", mib / base)
        .goal(goal),
    )?;
    let gib = total as f64 / (1u64 << 30) as f64;
    ctx.record(
        Figure::new(
            ctx,
            "service",
            format!("CPU per GiB drained, {n} × {}", size_label(bytes)),
            "CPU s/GiB",
            format!(
                "user + system seconds of the process running the service ({ours_cpu:.2} s) and of rclone ({base_cpu:.2} s) for the drain above, per GiB of packs"
            ),
        )
        .ours(ours_cpu / gib)
        .vs("rclone move --transfers 4", base_cpu / gib)
        .lower_is_better()
        .goal(1.0),
    )?;
    std::fs::remove_dir_all(&root).ok();
    std::fs::remove_dir_all(&plain).ok();
    Ok(())
}

/// Seal-to-indexed latency of single-record packs sealed by an in-process
/// sink: with the sink and the service sharing one registry (the wake-up),
/// and with the service reading a registry nobody publishes to (the 1 s
/// poll interval alone).
pub fn latency(ctx: &Ctx) -> Result<()> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let kw = ctx.size.pick(100, 10, 3);
    // the embedded defaults first: no server in the way
    let embedded = latency_embedded(ctx, kw)?;
    let totals: Vec<Duration> = embedded.iter().map(|(total, _)| *total).collect();
    let flushes: Vec<Duration> = embedded.iter().map(|(_, f)| *f).collect();
    for (p, goal_ms) in [(50.0, 3.0), (99.0, 10.0)] {
        ctx.record(
            Figure::new(
                ctx,
                "service",
                format!("seal-to-indexed latency, embedded defaults, p{p:.0}"),
                "ms",
                format!(
                    "{kw} one-record packs sealed at random moments (idle gaps of 0–1 s) by `Sink::flush` of an `Engine` on the embedded defaults (`file://ROOT/.store`, SQLite catalog under the root), its service in the same process; until the service's snapshot counts the row; the sink's flush — seal, fsync, link, directory fsync — p{p:.0} {:.1} ms of it",
                    ms(percentile(&flushes, p))
                ),
            )
            .ours(ms(percentile(&totals, p)))
            .vs(&format!("goal: {goal_ms} ms"), goal_ms)
            .lower_is_better()
            .goal(1.0),
        )?;
    }
    let db = Db::fresh("latency")?;
    let result = (|| -> Result<()> {
        let k = ctx.size.pick(40, 5, 3);
        let woken_runs = latency_run(ctx, &db, "wake", kw, true)?;
        let polled: Vec<Duration> = latency_run(ctx, &db, "poll", k, false)?
            .into_iter()
            .map(|(total, _)| total)
            .collect();
        let woken: Vec<Duration> = woken_runs.iter().map(|(total, _)| *total).collect();
        let flushes: Vec<Duration> = woken_runs.iter().map(|(_, f)| *f).collect();
        let rests: Vec<Duration> = woken_runs.iter().map(|(t, f)| *t - *f).collect();
        let (puts, inserts) = latency_floor(ctx, &db, kw)?;
        let floor: Vec<Duration> = puts.iter().zip(&inserts).map(|(a, b)| *a + *b).collect();
        for p in [50.0, 99.0] {
            ctx.record(
                Figure::new(
                    ctx,
                    "service",
                    format!("seal-to-indexed latency, p{p:.0}"),
                    "ms",
                    format!(
                        "{kw} (ours) and {k} (baseline) one-record packs, sealed at random moments by `Sink::flush` in the service's process; ours: the sink and the service share one `Arc<Registry>`; baseline: the service's registry gets no publication"
                    ),
                )
                .ours(ms(percentile(&woken, p)))
                .vs("poll interval (1 s) alone", ms(percentile(&polled, p)))
                .lower_is_better(),
            )?;
        }
        // against the floor measured in this run: p50 within 2 ms of it
        // plus the bundle linger (a lone small pack waits that long for
        // others to share its object)
        let linger = ms(bundle_linger()?);
        for p in [50.0, 99.0] {
            let floor_p = ms(percentile(&floor, p));
            let mut figure = Figure::new(
                ctx,
                "service",
                format!("seal-to-indexed latency, p{p:.0}, against the floor"),
                "ms",
                format!(
                    "the {kw} packs above: the sink's flush — seal, fsync, link, directory fsync — (p{p:.0} {:.1} ms), then the registry wake, scan, the bundle linger ({linger:.0} ms: a lone pack waits that long for others to share its object), validate, one PUT to moto, one insert into ClickHouse, until the snapshot counts the row (p{p:.0} {:.1} ms); the floor, measured alone in the same process after the same idle gaps (0–1 s): one conditional PUT of such a pack through `Uploader::upload_one` p{p:.0} {:.1} ms plus one single-row `Catalog::index` p{p:.0} {:.1} ms (together p{p:.0} {floor_p:.1} ms)",
                    ms(percentile(&flushes, p)),
                    ms(percentile(&rests, p)),
                    ms(percentile(&puts, p)),
                    ms(percentile(&inserts, p))
                ),
            )
            .ours(ms(percentile(&woken, p)))
            .lower_is_better();
            figure = if p == 50.0 {
                figure
                    .vs(
                        &format!(
                            "goal: the floor + the bundle linger + 2 ms ({floor_p:.1} + {linger:.0} + 2)"
                        ),
                        floor_p + linger + 2.0,
                    )
                    .goal(1.0)
            } else {
                figure.vs("the floor + the bundle linger", floor_p + linger)
            };
            ctx.record(figure)?;
        }
        Ok(())
    })();
    let dropped = db.drop_now();
    result?;
    dropped
}

/// Once `svc`'s first cycle (schema, lease, an empty scan) is done: `k`
/// one-record packs sealed by `sink` after idle gaps of 0–1 s, each timed
/// from the start of its flush until `svc`'s snapshot counts its row, with
/// the flush's own part.
fn seal_and_time(sink: &Sink, svc: &StorageService, k: usize) -> Result<Vec<(Duration, Duration)>> {
    let wait = |cond: &dyn Fn() -> bool, what: &str| -> Result<()> {
        let t = Instant::now();
        while !cond() {
            if t.elapsed() > Duration::from_secs(30) {
                bail!("{what} did not happen within 30 s: {:?}", svc.snapshot());
            }
            // a short nap: the poll adds at most 0.1 ms to a figure
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    };
    wait(&|| svc.snapshot().cycles >= 1, "the first cycle")?;
    let mut out = Vec::new();
    for i in 0..k {
        std::thread::sleep(Duration::from_millis(rand::random_range(0..1000)));
        let before = svc.snapshot().indexed;
        sink.write(format!("record {i}").as_bytes())?;
        let t = Instant::now();
        sink.flush(Duration::from_secs(10))?;
        let flushed = t.elapsed();
        wait(
            &|| svc.snapshot().indexed > before,
            "indexing a sealed pack",
        )?;
        out.push((t.elapsed(), flushed));
    }
    Ok(out)
}

/// Seal to indexed on the embedded defaults in one process: an `Engine`
/// on a fresh spool root (`file://ROOT/.store`, SQLite catalog under the
/// root; the service in this process, woken by the sink's registry
/// publication), whose sink seals one-record packs after idle gaps of
/// 0–1 s; each pack from the start of its flush until the service's
/// snapshot counts its row, with the flush's own part.
fn latency_embedded(ctx: &Ctx, k: usize) -> Result<Vec<(Duration, Duration)>> {
    use spool_service::config::{Config, FlagValue};
    let root = ctx.dir("latency-embedded")?;
    let flags = [FlagValue::from_set(&format!(
        "spool.root={}",
        root.display()
    ))?];
    let none = |_: &str| None::<String>;
    let mut ec = Config::load_with(None, &flags, &none)?
        .engine_config(Duration::from_secs(30), spool_service::Ship::Itself)?;
    ec.sinks = vec![SinkConfig {
        seal_age: Duration::from_secs(3600),
        ..SinkConfig::default()
    }];
    let engine = spool_service::Engine::start(ec)?;
    let result = (|| -> Result<Vec<(Duration, Duration)>> {
        let sink = engine.sinks()[0].clone();
        let svc = engine
            .service()
            .context("an engine that ships itself runs its service")?;
        seal_and_time(&sink, svc, k)
    })();
    let report = engine.close();
    if !report.problems.is_empty() {
        bail!("closing the embedded engine: {:?}", report.problems);
    }
    std::fs::remove_dir_all(&root).ok();
    result
}

/// The floor under the service's part of seal-to-indexed: `k` one-record
/// packs each uploaded alone through an [`spool_upload::Uploader`] (one
/// conditional PUT to moto) and `k` single rows each indexed alone into the
/// case's ClickHouse database, each pair after the same random idle gap as
/// the sealed packs get (a request after an idle gap costs about twice one
/// back to back here); the time of each.
pub(crate) fn latency_floor(
    ctx: &Ctx,
    db: &Db,
    k: usize,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let dir = ctx.dir("latency-floor")?;
    let client = ClientConfig {
        allow_http: true,
        ..ClientConfig::default()
    };
    let bucket = env("SPOOL_TEST_S3_BUCKET")?;
    let store = Store::from_url(&format!("s3://{bucket}/latency-floor"), &client)?;
    let up = spool_upload::Uploader::new(store, spool_upload::UploadConfig::default())?;
    let catalog = spool_catalog::open(&db.url)?;
    let rt = runtime()?;
    rt.block_on(catalog.ensure_schema())?;
    let cancel = spool_upload::CancellationToken::new();
    let (mut puts, mut inserts) = (Vec::new(), Vec::new());
    for i in 0..k {
        std::thread::sleep(Duration::from_millis(rand::random_range(0..1000)));
        let (id, bytes) = make_pack(64, i as u64);
        let path = dir.join(format!("{id}.ready"));
        std::fs::write(&path, &bytes)?;
        let item = spool_upload::UploadItem {
            path,
            pack_id: id,
            size: bytes.len() as u64,
        };
        let t = Instant::now();
        let r = rt.block_on(up.upload_one(item, &cancel));
        puts.push(t.elapsed());
        if let Some(f) = r.outcome.failure() {
            bail!("the floor's PUT failed: {}", f.error);
        }
        let row = spool_tests::catalog_suite::row(i as u64, spool_core::pack::now_ms());
        let t = Instant::now();
        rt.block_on(catalog.index(&[row], None))?;
        inserts.push(t.elapsed());
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok((puts, inserts))
}

/// A sink in `dir` (its lock held by the caller) that seals only when
/// flushed, publishing to `registry`, handing its packs off when
/// `hand_off`: the latency cases' producer.
pub(crate) fn timed_sink(dir: &Path, registry: Arc<Registry>, hand_off: bool) -> Result<Sink> {
    Ok(Sink::open(
        dir,
        SinkConfig {
            spool: SpoolConfig {
                lock_mode: LockMode::HeldByCaller,
                ..SpoolConfig::default()
            },
            seal_age: Duration::from_secs(3600),
            registry,
            hand_off,
            ..SinkConfig::default()
        },
    )?)
}

/// Each pack's seal-to-indexed time, and the part of it that was the
/// sink's own flush (seal, fsync, link, directory fsync).
fn latency_run(
    ctx: &Ctx,
    db: &Db,
    tag: &str,
    k: usize,
    shared: bool,
) -> Result<Vec<(Duration, Duration)>> {
    let root = ctx.dir(&format!("latency-{tag}"))?;
    let prefix = format!("latency-{tag}");
    let dest = destination(db, &prefix)?;
    let own = claim_rank_dir(&root, &dest.catalog_key()?, 0, &LockOptions::default())?;
    let sink_registry = Arc::new(Registry::new());
    let service_registry = if shared {
        sink_registry.clone()
    } else {
        Arc::new(Registry::new())
    };
    let mut cfg = service_config(own.dir(), &dest, &prefix, db, service_registry)?;
    cfg.adopt = false;
    cfg.poll_interval = Duration::from_secs(1);
    let mut svc = StorageService::new(cfg)?;
    svc.start()?;
    let sink = timed_sink(own.dir(), sink_registry, false)?;
    let out = seal_and_time(&sink, &svc, k)?;
    sink.release()?;
    drop(sink);
    svc.stop()?;
    own.release_and_remove_if_empty()?;
    std::fs::remove_dir_all(&root).ok();
    Ok(out)
}

/// Peak RSS of a service draining a 10 GiB backlog (a full run) of sparse
/// packs just below `multipart_threshold` (each one PUT held in memory: the
/// uploader's worst case) into a store that keeps nothing and a SQLite
/// catalog, in a fresh process; against its bound, 64 MiB +
/// `max_in_flight_bytes`.
pub fn drain_rss(ctx: &Ctx) -> Result<()> {
    let record_len: u32 = (16 << 20) - (64 << 10);
    let packs = ctx.size.pick(321, 8, 2);
    let dir = ctx.dir("drain-rss")?;
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir)?;
    let mut total = 0;
    for _ in 0..packs {
        let id = spool_core::PackId::generate();
        let p = spool_dir.join(format!("{id}.ready"));
        total += crate::core::write_sparse_pack(&p, id, 2, record_len)?;
    }
    let db = dir.join("catalog.db");
    let idle = crate::core::child(&["idle"])?;
    let r = crate::core::child(&[
        "drain",
        &spool_dir.display().to_string(),
        &db.display().to_string(),
    ])?;
    if r.valid != packs {
        bail!("the drain indexed {} of {packs} packs", r.valid);
    }
    let bound = spool_upload::UploadConfig::default().max_in_flight_bytes;
    let mib = |b: u64| b as f64 / MIB;
    let goal = 64.0 + mib(bound);
    ctx.record(
        Figure::new(
            ctx,
            "service",
            format!("peak RSS draining {:.1} GiB", total as f64 / (1u64 << 30) as f64),
            "MiB",
            format!(
                "{packs} sparse packs of {:.1} MiB (each one PUT held in memory), `StorageService` with default upload knobs (max_in_flight_bytes {:.0} MiB) to a store that keeps nothing and a SQLite catalog, in a fresh process ({:.1} s); an idle spool-bench process peaks at {:.1} MiB",
                mib(total / packs as u64),
                mib(bound),
                r.secs,
                idle.vm_hwm_kib as f64 / 1024.0
            ),
        )
        .ours(r.vm_hwm_kib as f64 / 1024.0)
        .vs("goal: 64 MiB + max_in_flight_bytes", goal)
        .lower_is_better()
        .goal(1.0),
    )?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// `rss-child drain DIR DB`'s work: a `StorageService` over DIR (no
/// adoption) into a [`NullStore`](crate::null_store::NullStore) and the
/// SQLite catalog DB, until every pack is indexed. Returns how many were.
pub fn drain_child(dir: &Path, db: &Path) -> Result<usize> {
    let packs = spool_core::spool::scan_dir(dir, &std::sync::atomic::AtomicBool::new(false))?.len();
    let url = format!("sqlite://{}", db.display());
    let catalog = spool_catalog::open(&url)?;
    let dest = Destination {
        catalog_url: url,
        database: "bench".into(),
        table_prefix: "spool_".into(),
        store_url: "null://discard".into(),
        store_id: "default".into(),
    };
    let store = Arc::new(crate::null_store::NullStore::default());
    let store = Store::new(store as Arc<dyn ObjectStore>, "", "null://discard", true)?;
    let mut c = ServiceConfig::new(dir, dest, store, catalog as Arc<dyn Catalog>);
    c.adopt = false;
    let mut svc = StorageService::new(c)?;
    svc.start()?;
    let t = Instant::now();
    loop {
        let s = svc.snapshot();
        if s.indexed >= packs as u64 {
            break;
        }
        if t.elapsed() > Duration::from_secs(900) {
            bail!("not drained within 900 s: {s:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let indexed = svc.snapshot().indexed as usize;
    svc.stop()?;
    Ok(indexed)
}
