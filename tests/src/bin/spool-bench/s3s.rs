//! `spool run --once` of a dead producer's backlog into s3s-fs (a Rust S3
//! server over a directory, which unlike moto is not the bottleneck) and
//! the real ClickHouse, against `rclone copy --transfers 8` and `s5cmd cp`
//! (the fastest common client, `SPOOL_BENCH_S5CMD`) of the same bytes to
//! the same server: wall and CPU (user + system) of each side and
//! of each server process, and where the drain's wall time goes as far as
//! it can be seen from outside the process (BENCHMARKS.md, "spool run
//! --once against s3s-fs").

use anyhow::{bail, Context, Result};
use spool_core::claim_rank_dir;
use spool_lock::LockOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::make_pack;
use crate::service::{cpu_seconds, cpu_seconds_of, drop_caches, held_spool, Db};
use crate::upload::runtime;
use crate::{env, rclone_remote, size_label, Ctx, Figure};

/// Which pack shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// 4,000 × 16 KiB in a full run.
    Tiny,
    /// 1,000 × 1 MiB in a full run.
    Small,
    /// 64 × 16 MiB in a full run.
    Large,
}

/// The goals, as ratios against rclone: wall ≥ 1.5× faster, client CPU
/// ≤ 0.5× rclone's.
const WALL_GOAL: f64 = 1.5;
const CPU_GOAL: f64 = 2.0;

/// S3 Standard's list price of a PUT (US East, $0.005 per 1,000): what a
/// million packs cost in requests at a given number of PUTs per pack.
const PUT_DOLLARS: f64 = 0.005 / 1000.0;

/// The goals against s5cmd: small packs (bundled) ≥ 10× its objects/s;
/// packs of 1 MiB and up within 10 % of its MiB/s at no more client CPU.
fn s5cmd_goals(shape: Shape) -> (f64, f64) {
    match shape {
        Shape::Tiny => (10.0, 1.0),
        Shape::Small | Shape::Large => (0.9, 1.0),
    }
}

/// Seconds since the epoch.
fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// CPU seconds (user + system) so far of the server `cargo xtask bench`
/// started, by the variable holding its pid; `None` when run by hand.
fn server_cpu(var: &str) -> Option<f64> {
    let pid = std::env::var(var).ok()?;
    cpu_seconds_of(&pid).ok().map(|(own, _)| own)
}

/// `(s3s-fs, ClickHouse)` CPU seconds so far.
fn servers_cpu() -> (Option<f64>, Option<f64>) {
    (
        server_cpu("SPOOL_BENCH_S3S_PID"),
        server_cpu("SPOOL_BENCH_CLICKHOUSE_PID"),
    )
}

/// `s3s-fs X s, ClickHouse Y s` spent since `before`.
fn servers_spent(before: (Option<f64>, Option<f64>)) -> String {
    let now = servers_cpu();
    let d = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2} s", b - a),
        _ => "not measured".into(),
    };
    format!(
        "s3s-fs {}, ClickHouse {}",
        d(before.0, now.0),
        d(before.1, now.1)
    )
}

/// One run of a child process: wall seconds, CPU seconds (user + system,
/// waited for), and its start as a wall-clock time.
struct Ran {
    wall: f64,
    cpu: f64,
    start: f64,
}

/// Runs `cmd` to completion, failing with `log`'s tail when it fails.
fn run_measured(cmd: &mut Command, log: &Path) -> Result<Ran> {
    let (_, children0) = cpu_seconds()?;
    let start = SystemTime::now();
    let t = std::time::Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds()?.1 - children0;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        bail!(
            "{cmd:?} failed ({status}); the end of {}:\n{}",
            log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(Ran {
        wall,
        cpu,
        start: unix(start),
    })
}

/// When s3s-fs finished writing each object file under `dir`
/// (recursively; s3s-fs keeps its metadata files outside the bucket's
/// directory): the modification times, sorted.
struct Stored {
    times: Vec<f64>,
}

impl Stored {
    fn of(dir: &Path) -> Result<Stored> {
        let mut times = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
                let e = e?;
                let meta = e.metadata()?;
                if meta.is_dir() {
                    stack.push(e.path());
                } else {
                    times.push(unix(meta.modified()?));
                }
            }
        }
        times.sort_by(f64::total_cmp);
        if times.is_empty() {
            bail!("no object stored under {}", dir.display());
        }
        Ok(Stored { times })
    }

    fn first(&self) -> f64 {
        self.times[0]
    }

    fn last(&self) -> f64 {
        self.times[self.times.len() - 1]
    }

    /// The longest time between two consecutive objects stored, and the
    /// time spent in such gaps of more than 100 ms (no object landing).
    fn gaps(&self) -> (f64, f64) {
        let gaps = self.times.windows(2).map(|w| w[1] - w[0]);
        let longest = gaps.clone().fold(0.0, f64::max);
        // `0.0 +`: an empty f64 sum is -0.0, printed "-0.00"
        (longest, 0.0 + gaps.filter(|g| *g > 0.1).sum::<f64>())
    }

    /// `longest gap X s, Y s in gaps over 100 ms`.
    fn gaps_note(&self) -> String {
        let (longest, stalled) = self.gaps();
        format!("longest gap between two objects stored {longest:.3} s, {stalled:.2} s in gaps over 100 ms")
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-12-04T20:55:01.123456Z` as seconds since the epoch.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let h: f64 = t.next()?.parse().ok()?;
    let mi: f64 = t.next()?.parse().ok()?;
    let sec: f64 = t.next()?.parse().ok()?;
    Some(days_from_civil(y, mo, da) as f64 * 86_400.0 + h * 3600.0 + mi * 60.0 + sec)
}

/// The time of the first JSON log line (`spool --log-format json`) whose
/// message starts with each of `prefixes`, in order.
fn log_times(log: &Path, prefixes: &[&str]) -> Result<Vec<Option<f64>>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut out = vec![None; prefixes.len()];
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let msg = v
            .pointer("/fields/message")
            .and_then(|m| m.as_str())
            .unwrap_or("");
        let at = v
            .get("timestamp")
            .and_then(|t| t.as_str())
            .and_then(parse_rfc3339);
        for (i, p) in prefixes.iter().enumerate() {
            if out[i].is_none() && msg.starts_with(p) {
                out[i] = at;
            }
        }
    }
    Ok(out)
}

/// The spool root's `spool run --once` command against s3s-fs (store
/// prefix `prefix`) and the catalog `db`, logging JSON lines to `log`.
fn spool_once(root: &Path, store_url: &str, db: &Db, log: &Path) -> Result<Command> {
    let bin = PathBuf::from(env("SPOOL_BENCH_SPOOL")?);
    let key = env("SPOOL_BENCH_S3S_KEY")?;
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--once", "--json", "--timeout", "900"])
        .arg("--spool-root")
        .arg(root)
        .args(["--store", store_url, "--catalog", &db.url])
        .env("AWS_ENDPOINT", env("SPOOL_BENCH_S3S_ENDPOINT")?)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", &key)
        .env("AWS_SECRET_ACCESS_KEY", &key)
        .env("RUST_LOG", "info")
        .env("SPOOL_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log.with_extension("jsonl"))?)
        .stderr(std::fs::File::create(log)?);
    Ok(cmd)
}

/// Where the drain's time went by the service's own counters: the last
/// `--json` event's `snapshot.stage_ms` (the run's events beside its
/// `log`), as `list 12, validate 340, ... ms`.
fn stage_ms(log: &Path) -> Result<String> {
    let path = log.with_extension("jsonl");
    let text = std::fs::read_to_string(&path)?;
    let last: serde_json::Value = text
        .lines()
        .last()
        .map(serde_json::from_str)
        .transpose()?
        .with_context(|| format!("no event in {}", path.display()))?;
    let stages = ["list", "validate", "upload", "index", "remove", "idle"];
    let parts: Vec<String> = stages
        .iter()
        .map(|s| format!("{s} {}", last["snapshot"]["stage_ms"][s]))
        .collect();
    Ok(format!("{} ms", parts.join(", ")))
}

/// Stages the backlog into a dead producer's rank directory and the same
/// bytes into a plain directory; runs `spool run --once` on it, then
/// `rclone copy --transfers 8` of the copy, page cache dropped before each.
/// `upload.bundle_bytes`' default (spool-upload's `UploadConfig`).
const DEFAULT_BUNDLE_BYTES: u64 = 8 << 20;

/// `s5cmd cp` of every file in `dir` to `dest` (the fastest common
/// client: one request per object, 256 in flight by default), its stderr
/// to `log`.
fn s5cmd_cp(dir: &Path, dest: &str, log: &Path) -> Result<Command> {
    let key_secret = env("SPOOL_BENCH_S3S_KEY")?;
    let mut s5 = Command::new(env("SPOOL_BENCH_S5CMD")?);
    s5.arg("--endpoint-url")
        .arg(env("SPOOL_BENCH_S3S_ENDPOINT")?)
        .arg("cp")
        .arg(format!("{}/*", dir.display()))
        .arg(dest)
        .env("AWS_ACCESS_KEY_ID", &key_secret)
        .env("AWS_SECRET_ACCESS_KEY", &key_secret)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?);
    Ok(s5)
}

/// The files of `from`, in name order, concatenated into files of `to`
/// of at least `size` bytes each (the last may be smaller), synced; how
/// many.
fn join_files(from: &Path, to: &Path, size: u64) -> Result<usize> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(from)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    let mut written = 0;
    let mut buf = Vec::new();
    let mut flush = |buf: &mut Vec<u8>| -> Result<()> {
        let f = std::fs::File::create(to.join(format!("joined-{written:04}")))?;
        std::io::Write::write_all(&mut &f, buf)?;
        f.sync_all()?;
        buf.clear();
        written += 1;
        Ok(())
    };
    for name in names {
        buf.extend_from_slice(&std::fs::read(name)?);
        if buf.len() as u64 >= size {
            flush(&mut buf)?;
        }
    }
    if !buf.is_empty() {
        flush(&mut buf)?;
    }
    Ok(written)
}

pub fn drain(ctx: &Ctx, shape: Shape) -> Result<()> {
    let (n, bytes) = match shape {
        Shape::Tiny => ctx
            .size
            .pick((4000, 16 << 10), (400, 16 << 10), (8, 16 << 10)),
        Shape::Small => ctx
            .size
            .pick((1000, 1 << 20), (40, 256 << 10), (4, 16 << 10)),
        Shape::Large => ctx.size.pick((64, 16 << 20), (8, 4 << 20), (2, 1 << 20)),
    };
    let tag = format!("s3s_{shape:?}").to_lowercase();
    let db = Db::fresh(&tag)?;
    let idle_db = Db::fresh(&format!("{tag}_idle"))?;
    let result = drain_in(ctx, &db, &idle_db, (n, bytes), shape);
    let dropped = db.drop_now().and(idle_db.drop_now());
    result?;
    dropped
}

fn drain_in(
    ctx: &Ctx,
    db: &Db,
    idle_db: &Db,
    (n, bytes): (usize, usize),
    shape: Shape,
) -> Result<()> {
    let bucket = env("SPOOL_BENCH_S3S_BUCKET")?;
    let data = PathBuf::from(env("SPOOL_BENCH_S3S_DATA")?);
    let logs = ctx.dir("s3s-logs")?;

    // The fixed cost: `spool run --once` with nothing to drain, on its own
    // database and store prefix.
    let idle_root = ctx.dir("s3s-idle-root")?;
    let idle_log = logs.join("idle.log");
    let idle = run_measured(
        &mut spool_once(
            &idle_root,
            &format!("s3://{bucket}/idle"),
            idle_db,
            &idle_log,
        )?,
        &idle_log,
    )?;

    // The dead producer's backlog, and the same bytes for rclone.
    let root = ctx.dir("s3s-root")?;
    let plain = ctx.dir("s3s-rclone")?;
    let store_url = format!("s3://{bucket}/ours");
    let dest = spool_service::config::destination(&db.url, &store_url, "default")?;
    let key = dest.catalog_key()?;
    let producer = claim_rank_dir(&root, &key, 1, &LockOptions::default())?;
    let producer_dir = producer.dir().to_path_buf();
    let mut total = 0u64;
    {
        let spool = held_spool(&producer_dir)?;
        for i in 0..n {
            let (id, body) = make_pack(bytes, i as u64);
            spool.stage(None, id, &body)?;
            std::fs::write(plain.join(format!("{id}.ready")), &body)?;
            total += body.len() as u64;
        }
    }
    producer.release()?; // dead: nobody holds it

    let log = logs.join("drain.log");
    let mut cmd = spool_once(&root, &store_url, db, &log)?;
    drop_caches();
    let servers0 = servers_cpu();
    let ours = run_measured(&mut cmd, &log)?;
    let ours_servers = servers_spent(servers0);
    if producer_dir.exists() {
        bail!(
            "spool run --once exited 0 but left {}",
            producer_dir.display()
        );
    }
    let count = runtime()?.block_on(spool_catalog::open(&db.url)?.count())?;
    let ours_stored = Stored::of(&data.join("ours"))?;
    // one PUT per object: bundles, and packs that went alone
    let objects = ours_stored.times.len();
    if count != n as u64 || objects > n {
        bail!("spool run --once indexed {count} rows and stored {objects} objects for {n} packs");
    }
    let puts_per_pack = objects as f64 / n as f64;
    let marks = log_times(
        &log,
        &[
            "claimed ",
            "listed dead spool directory",
            "adopted spool directory",
            "storage service stopped",
        ],
    )?;

    let key_secret = env("SPOOL_BENCH_S3S_KEY")?;
    let mut rc = rclone_remote(
        &ctx.scratch,
        "s3s",
        &env("SPOOL_BENCH_S3S_ENDPOINT")?,
        &key_secret,
        8,
    )?;
    let rc_log = logs.join("rclone.log");
    rc.arg("copy")
        .arg(&plain)
        .arg(format!("s3s:{bucket}/rclone-copy"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&rc_log)?);
    drop_caches();
    let servers0 = servers_cpu();
    let base = run_measured(&mut rc, &rc_log)?;
    let base_servers = servers_spent(servers0);
    let base_stored = Stored::of(&data.join("rclone-copy"))?;
    if base_stored.times.len() < n {
        bail!(
            "rclone copy stored {} files of {n}",
            base_stored.times.len()
        );
    }
    // s5cmd, the fastest common client: one request per object, 256 in
    // flight by default.
    let s5_log = logs.join("s5cmd.log");
    let mut s5 = s5cmd_cp(&plain, &format!("s3://{bucket}/s5cmd-cp/"), &s5_log)?;
    drop_caches();
    let servers0 = servers_cpu();
    let s5cmd = run_measured(&mut s5, &s5_log)?;
    let s5_servers = servers_spent(servers0);
    let s5_stored = Stored::of(&data.join("s5cmd-cp"))?;
    if s5_stored.times.len() < n {
        bail!("s5cmd cp stored {} files of {n}", s5_stored.times.len());
    }
    // The store's ceiling for these bytes: the same files concatenated
    // into objects of the default bundle size, put by s5cmd (small packs
    // only: larger ones go alone anyway).
    let ceiling = match shape {
        Shape::Tiny => {
            let joined = ctx.dir("s3s-joined")?;
            let objects = join_files(&plain, &joined, DEFAULT_BUNDLE_BYTES)?;
            let log = logs.join("s5cmd-joined.log");
            let mut cmd = s5cmd_cp(&joined, &format!("s3://{bucket}/s5cmd-joined/"), &log)?;
            drop_caches();
            let ran = run_measured(&mut cmd, &log)?;
            std::fs::remove_dir_all(&joined).ok();
            Some((objects, ran))
        }
        _ => None,
    };
    let (first, last) = (ours_stored.first(), ours_stored.last());
    let (base_first, base_last) = (base_stored.first(), base_stored.last());

    // Where the drain's wall time went, from outside: the log's
    // milestones and the stored objects' modification times, each from
    // the process's start.
    let at = |t: Option<f64>| match t {
        Some(t) => format!("{:.2} s", t - ours.start),
        None => "—".into(),
    };
    let window = last - first;
    let breakdown = format!(
        "from the start of `spool run --once`: service started {}, sibling listed {}, first object stored {:.2} s, last object stored {:.2} s (upload window {window:.2} s; {}), sibling drained and removed {}, service stopped {}, exit {:.2} s; wall − upload window {:.2} s; the service's stage times (wall time with at least one operation of the stage in flight; idle: none): {}; `spool run --once` with nothing to drain on the same servers {:.2} s",
        at(marks[0]),
        at(marks[1]),
        first - ours.start,
        last - ours.start,
        ours_stored.gaps_note(),
        at(marks[2]),
        at(marks[3]),
        ours.wall,
        ours.wall - window,
        stage_ms(&log)?,
        idle.wall,
    );
    let rclone_window = format!(
        "rclone: first object stored {:.2} s, last {:.2} s (upload window {:.2} s; {}), exit {:.2} s",
        base_first - base.start,
        base_last - base.start,
        base_last - base_first,
        base_stored.gaps_note(),
        base.wall,
    );
    let what = format!("{n} × {}", size_label(bytes));
    let mib = total as f64 / (1 << 20) as f64;
    ctx.record(
        Figure::new(
            ctx,
            "s3s",
            format!("drain {what} ({mib:.0} MiB), wall"),
            "s",
            format!(
                "one dead producer's rank directory; `spool run --once` (validate, upload, index, remove) against `rclone copy` of the same files, page cache dropped before each; {breakdown}; {rclone_window}"
            ),
        )
        .ours(ours.wall)
        .vs("rclone copy --transfers 8", base.wall)
        .lower_is_better()
        .goal(WALL_GOAL),
    )?;
    ctx.record(
        Figure::new(
            ctx,
            "s3s",
            format!("drain {what}, client CPU (goal: ≤ 0.5× rclone's)"),
            "CPU s",
            format!(
                "user + system seconds of the `spool` process ({:.2} s) and of rclone ({:.2} s) for the drain above; the servers' CPU during ours: {ours_servers}; during rclone's: {base_servers}",
                ours.cpu, base.cpu
            ),
        )
        .ours(ours.cpu)
        .vs("rclone copy --transfers 8", base.cpu)
        .lower_is_better()
        .goal(CPU_GOAL),
    )?;
    // The same drain against s5cmd: what a client pays per object at best
    // (one request per pack), and what bundles are measured against.
    let (wall_goal, cpu_goal) = s5cmd_goals(shape);
    ctx.record(
        Figure::new(
            ctx,
            "s3s",
            format!("drain {what}, wall against s5cmd"),
            "s",
            format!(
                "the drain above against `s5cmd cp` (v2.3.0, 256 requests in flight) of the same files, page cache dropped before it: {:.0} objects/s, {:.0} MiB/s; ours {:.0} packs/s, {:.0} MiB/s (goal: ≥ {wall_goal}× s5cmd)",
                n as f64 / s5cmd.wall,
                mib / s5cmd.wall,
                n as f64 / ours.wall,
                mib / ours.wall
            ),
        )
        .ours(ours.wall)
        .vs("s5cmd cp", s5cmd.wall)
        .lower_is_better()
        .goal(wall_goal),
    )?;
    if let Some((objects, ran)) = &ceiling {
        let goal_wall = s5cmd.wall / wall_goal;
        ctx.record(
            Figure::new(
                ctx,
                "s3s",
                format!("drain {what}, wall against the store's ceiling for its bytes"),
                "s",
                format!(
                    "the drain above against `s5cmd cp` of the same {mib:.0} MiB concatenated into {objects} files of upload.bundle_bytes (8 MiB), page cache dropped before it: {:.0} MiB/s, the most this store took of these bytes from any client here. {wall_goal}× s5cmd's objects/s for {n} packs is a drain of {goal_wall:.2} s: {:.2}× this ceiling's wall, and the drain also lists, hashes, indexes and removes what it puts",
                    mib / ran.wall,
                    goal_wall / ran.wall,
                ),
            )
            .ours(ours.wall)
            .vs("s5cmd cp, 8 MiB objects", ran.wall)
            .lower_is_better(),
        )?;
    }
    ctx.record(
        Figure::new(
            ctx,
            "s3s",
            format!("drain {what}, PUT requests per pack"),
            "PUTs",
            format!(
                "objects the drain stored ({objects}, one PUT each: bundles of packs under upload.bundle_bytes, and packs alone) per pack; s5cmd and rclone put one object per file. At S3 Standard's $0.005 per 1,000 PUTs a million packs cost ${:.2} in PUTs (s5cmd: ${:.2})",
                puts_per_pack * 1e6 * PUT_DOLLARS,
                1e6 * PUT_DOLLARS
            ),
        )
        .ours(puts_per_pack)
        .vs("s5cmd cp", 1.0)
        .lower_is_better(),
    )?;
    ctx.record(
        Figure::new(
            ctx,
            "s3s",
            format!("drain {what}, client CPU against s5cmd"),
            "CPU s",
            format!(
                "user + system seconds of the `spool` process ({:.2} s) and of s5cmd ({:.2} s); the servers' CPU during s5cmd's: {s5_servers}",
                ours.cpu, s5cmd.cpu
            ),
        )
        .ours(ours.cpu)
        .vs("s5cmd cp", s5cmd.cpu)
        .lower_is_better()
        .goal(cpu_goal),
    )?;
    for d in [&root, &plain, &idle_root] {
        std::fs::remove_dir_all(d).ok();
    }
    for sub in ["ours", "rclone-copy", "s5cmd-cp", "s5cmd-joined", "idle"] {
        std::fs::remove_dir_all(data.join(sub)).ok();
    }
    Ok(())
}
