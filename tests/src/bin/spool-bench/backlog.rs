//! `backlog-100k`: a dead producer's backlog of 100 000 packs of 16 KiB
//! drained by the release `spool run --once` on the embedded defaults
//! (`file://ROOT/.store`, SQLite catalog under the root). Measured: the
//! drain's rate over its first and its last tenth (from the packs left in
//! the producer's directory, sampled every half second), the drain
//! process's peak RSS (`getrusage` of the waited child) against 64 MiB +
//! `max_in_flight_bytes`, and how long `spool status` takes on the backlog
//! and `spool ls` on the 100 000 rows after it.

use anyhow::{bail, Context, Result};
use spool_core::claim_rank_dir;
use spool_lock::LockOptions;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::core::make_pack;
use crate::{env, Ctx, Figure};

/// The default `upload.max_in_flight_bytes` (256 MiB): the RSS bound is
/// 64 MiB above it.
const MAX_IN_FLIGHT_MIB: f64 = 256.0;

pub fn run(ctx: &Ctx) -> Result<()> {
    let n = ctx.size.pick(100_000, 5_000, 200);
    let bin = PathBuf::from(env("SPOOL_BENCH_SPOOL")?);
    let root = ctx.dir("backlog-root")?;
    let logs = ctx.dir("backlog-logs")?;
    // `spool status ROOT`; every other command `--spool-root ROOT`
    let spool = |args: &[&str], log: &str| -> Result<Command> {
        let mut cmd = Command::new(&bin);
        cmd.args(args);
        if args[0] != "status" {
            cmd.arg("--spool-root");
        }
        cmd.arg(&root)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(logs.join(log))?);
        Ok(cmd)
    };
    // `spool run --once` with nothing to drain makes the catalog key's
    // directory the embedded destination has
    ok(
        spool(&["run", "--once"], "first.log")?.status()?,
        "the first run",
    )?;
    let key = std::fs::read_dir(&root)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| spool_core::layout::is_catalog_key(n))
        .context("no catalog key directory under the root after a run")?;
    // the dead producer: packs written as a crashed producer leaves them
    // (then one sync), its lock let go
    let producer = claim_rank_dir(&root, &key, 1, &LockOptions::default())?;
    let dir = producer.dir().to_path_buf();
    let t = Instant::now();
    for i in 0..n {
        let (id, body) = make_pack(16 << 10, i as u64);
        std::fs::write(dir.join(format!("{id}.ready")), &body)?;
    }
    nix::unistd::sync();
    let staged = t.elapsed().as_secs_f64();
    producer.release()?;

    let status = timed_cmd(&mut spool(&["status"], "status.log")?)?;

    let started = Instant::now();
    let mut child = spool(&["run", "--once", "--timeout", "3600"], "drain.log")?
        .spawn()
        .context("starting spool run --once")?;
    // (seconds since start, packs drained)
    let mut samples: Vec<(f64, usize)> = Vec::new();
    let status_drain = loop {
        let left = ready_in(&dir);
        samples.push((started.elapsed().as_secs_f64(), n - left.min(n)));
        if let Some(st) = child.try_wait()? {
            break st;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let wall = started.elapsed().as_secs_f64();
    ok(status_drain, "the drain")?;
    samples.push((wall, n - ready_in(&dir).min(n)));
    let peak_mib = children_peak_rss_mib()?;
    if dir.exists() {
        bail!(
            "spool run --once exited 0 but left {} ({} packs)",
            dir.display(),
            ready_in(&dir)
        );
    }
    let ls = timed_cmd(&mut spool(&["ls"], "ls.log")?)?;
    let status_after = timed_cmd(&mut spool(&["status"], "status-after.log")?)?;

    // the first and the last tenth, each timed between the moments the
    // drained count crossed its ends (interpolated between samples)
    let cross = |count: usize| -> f64 {
        let after = samples.iter().position(|(_, d)| *d >= count);
        match after {
            Some(0) => samples[0].0,
            Some(i) => {
                let ((t0, d0), (t1, d1)) = (samples[i - 1], samples[i]);
                t0 + (t1 - t0) * (count - d0) as f64 / (d1 - d0).max(1) as f64
            }
            None => wall,
        }
    };
    let tenth = n / 10;
    let first = tenth as f64 / (cross(tenth) - cross(1)).max(1e-3);
    let last = tenth as f64 / (cross(n) - cross(n - tenth)).max(1e-3);
    let what = format!("{n} × 16 KiB");
    let note = format!(
        "one dead producer's rank directory ({what}, written and synced in {staged:.0} s) drained by the release `spool run --once` on the embedded defaults in {wall:.1} s ({:.0} packs/s overall); a tenth is {tenth} packs, timed between the moments the count of packs gone from the directory (sampled every half second, interpolated between samples) crossed its ends; first tenth {first:.0} packs/s, last tenth {last:.0} packs/s",
        n as f64 / wall
    );
    ctx.record(
        Figure::new(
            ctx,
            "backlog",
            format!("drain of {what}: the last tenth's rate against the first's"),
            "packs/s",
            note.clone(),
        )
        .ours(last)
        .vs("the first tenth", first)
        .goal(1.0),
    )?;
    ctx.record(
        Figure::new(
            ctx,
            "backlog",
            format!("peak RSS draining {what}"),
            "MiB",
            format!("the `spool run --once` above (`getrusage` of the waited child), default upload settings (max_in_flight_bytes {MAX_IN_FLIGHT_MIB:.0} MiB)"),
        )
        .ours(peak_mib)
        .vs(
            "goal: 64 MiB + max_in_flight_bytes",
            64.0 + MAX_IN_FLIGHT_MIB,
        )
        .lower_is_better()
        .goal(1.0),
    )?;
    for (name, secs, what_on) in [
        (
            "spool status",
            status,
            format!("the backlog of {n} ready packs in a dead sibling"),
        ),
        (
            "spool status",
            status_after,
            format!("the drained root, {n} rows in the catalog"),
        ),
        (
            "spool ls",
            ls,
            format!("the {n} rows in the catalog, every row printed"),
        ),
    ] {
        ctx.record(
            Figure::new(
                ctx,
                "backlog",
                format!("{name} on {what_on}"),
                "s",
                format!("the release `{name}` from spawn to exit, output to /dev/null"),
            )
            .ours(secs)
            .vs("goal: 1 s", 1.0)
            .lower_is_better()
            .goal(1.0),
        )?;
    }
    std::fs::remove_dir_all(&root).ok();
    Ok(())
}

/// The ready packs in `dir` (0 once it is gone).
fn ready_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".ready"))
                .count()
        })
        .unwrap_or(0)
}

fn ok(status: std::process::ExitStatus, what: &str) -> Result<()> {
    if !status.success() {
        bail!("{what} exited {status} (its log is under the scratch's backlog-logs)");
    }
    Ok(())
}

/// Runs `cmd` to its end; its wall time in seconds.
fn timed_cmd(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let st = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    let secs = t.elapsed().as_secs_f64();
    ok(st, &format!("{cmd:?}"))?;
    Ok(secs)
}

/// The largest peak RSS of the children waited for so far, in MiB.
fn children_peak_rss_mib() -> Result<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    Ok(usage.max_rss() as f64 / 1024.0) // kilobytes on Linux
}
