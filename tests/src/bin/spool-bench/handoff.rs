//! `service-handoff-latency`: seal to row readable across processes. This
//! process is a live sink-only producer (a [`Sink`] with `hand_off` on, in a
//! rank directory it claims); the node's daemon is a `spool run` process of
//! its own (`SPOOL_BENCH_SPOOL`, polling only every 60 s, so it learns of
//! each pack from the kernel). Each one-record pack is sealed after a
//! random idle gap (0–1 s) and timed from the start of the sink's flush
//! until the catalog, read from here, counts its row. Once on the embedded
//! defaults (`file://ROOT/.store`, `sqlite:///ROOT/.catalog.db`), once on
//! moto and ClickHouse, whose floor (a lone PUT plus a lone insert after
//! the same idle gaps) is measured in the same run.

use anyhow::{bail, Context, Result};
use spool_core::claim_rank_dir;
use spool_lock::LockOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::service::{latency_floor, timed_sink, Db};
use crate::upload::runtime;
use crate::{env, percentile, Ctx, Figure};

/// The daemon, killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs both destinations and records their figures.
pub fn latency(ctx: &Ctx) -> Result<()> {
    let k = ctx.size.pick(100, 10, 3);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let embedded = run(ctx, "handoff-embedded", None, k)?;
    for (p, goal) in [(50.0, 25.0), (99.0, 100.0)] {
        ctx.record(
            Figure::new(
                ctx,
                "service",
                format!("hand-off seal-to-readable latency, embedded defaults, p{p:.0}"),
                "ms",
                format!(
                    "{k} one-record packs sealed by a live sink-only producer (`Sink` with hand_off) after idle gaps of 0–1 s, until the row is readable from another connection; the node's daemon is a `spool run` process (file:// store, SQLite catalog under its root, poll interval 60 s)"
                ),
            )
            .ours(ms(percentile(&embedded, p)))
            .vs(&format!("goal: {goal} ms"), goal)
            .lower_is_better()
            .goal(1.0),
        )?;
    }
    let db = Db::fresh("handoff")?;
    let result = (|| -> Result<()> {
        let remote = run(ctx, "handoff-remote", Some(&db), k)?;
        let floor_db = Db::fresh("handoff_floor")?;
        let floor = latency_floor(ctx, &floor_db, k);
        floor_db.drop_now()?;
        let (puts, inserts) = floor?;
        let floor: Vec<Duration> = puts.iter().zip(&inserts).map(|(a, b)| *a + *b).collect();
        let floor_p50 = ms(percentile(&floor, 50.0));
        for p in [50.0, 99.0] {
            let mut figure = Figure::new(
                ctx,
                "service",
                format!("hand-off seal-to-readable latency, moto + ClickHouse, p{p:.0}"),
                "ms",
                format!(
                    "the same {k} packs through a `spool run` daemon to moto and ClickHouse; the floor, a lone conditional PUT plus a lone single-row insert after the same idle gaps, in the same run: p{p:.0} {:.1} ms",
                    ms(percentile(&floor, p))
                ),
            )
            .ours(ms(percentile(&remote, p)))
            .lower_is_better();
            figure = if p == 50.0 {
                figure
                    .vs(
                        &format!("goal: floor + 25 ms ({floor_p50:.1} ms)"),
                        floor_p50 + 25.0,
                    )
                    .goal(1.0)
            } else {
                figure.vs("floor", ms(percentile(&floor, p)))
            };
            ctx.record(figure)?;
        }
        Ok(())
    })();
    let dropped = db.drop_now();
    result?;
    dropped
}

/// One destination: `db`'s ClickHouse and moto, or the embedded defaults
/// when `None`. Each pack's seal-to-readable time.
fn run(ctx: &Ctx, tag: &str, db: Option<&Db>, k: usize) -> Result<Vec<Duration>> {
    let root = ctx.dir(tag)?;
    let mut cmd = Command::new(PathBuf::from(env("SPOOL_BENCH_SPOOL")?));
    cmd.args(["run", "--poll-interval", "60", "--spool-root"])
        .arg(&root)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(
            ctx.dir(&format!("{tag}-log"))?.join("daemon.log"),
        )?);
    let catalog_url = match db {
        Some(db) => {
            let store = format!("s3://{}/{tag}", env("SPOOL_TEST_S3_BUCKET")?);
            cmd.args(["--store", &store, "--catalog", &db.url]);
            db.url.clone()
        }
        None => format!("sqlite://{}", root.join(".catalog.db").display()),
    };
    let daemon = Daemon(cmd.spawn().context("starting spool run")?);
    // The daemon claims its own directory under the catalog key's.
    let key = wait("the daemon's catalog key directory", || {
        key_dir(&root).ok().flatten()
    })?;
    let own = claim_rank_dir(&root, &key, 1, &LockOptions::default())?;
    let sink = timed_sink(own.dir(), Default::default(), true)?;
    let rt = runtime()?;
    let catalog = spool_catalog::open(&catalog_url)?;
    // readable once the daemon made the schema
    let count = || rt.block_on(catalog.count()).ok();
    wait("the daemon's catalog schema", count)?;
    let mut out = Vec::new();
    for i in 0..k {
        std::thread::sleep(Duration::from_millis(rand::random_range(0..1000)));
        let before = count().unwrap_or(0);
        sink.write(format!("record {i}").as_bytes())?;
        let t = Instant::now();
        sink.flush(Duration::from_secs(10))?;
        wait("a handed-off pack's row", || {
            count().filter(|n| *n > before).map(|_| ())
        })?;
        out.push(t.elapsed());
    }
    sink.release()?;
    drop(sink);
    drop(daemon);
    drop(own);
    std::fs::remove_dir_all(&root).ok();
    Ok(out)
}

/// The one directory under `root` that is not a dot-file (the catalog
/// key's), if there is one yet.
fn key_dir(root: &Path) -> Result<Option<String>> {
    for e in std::fs::read_dir(root)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// Polls `f` every 0.2 ms until it gives a value, failing after 30 s.
fn wait<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if t.elapsed() > Duration::from_secs(30) {
            bail!("{what} did not come within 30 s");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
