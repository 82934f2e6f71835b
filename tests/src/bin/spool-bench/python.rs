//! spool-py: the Python binding's per-call cost and
//! throughput, from `spool-py/bench/bench.py` run with the interpreter in
//! `$SPOOL_BENCH_PYTHON` (`cargo xtask bench python` sets it to a
//! virtualenv holding a `--release` build of the extension), beside the
//! Rust sink writing the same 1 MiB records on the same disk: the two
//! alternate in rounds (who goes first alternating too), each after a
//! `sync`, and the best round of each counts, so neither meets a disk still writing back the other's (or the
//! per-call benchmarks') data.

use anyhow::{bail, Context, Result};
use spool_core::sink::{Sink, SinkConfig};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Ctx, Figure, Size};

fn fig(ctx: &Ctx, name: &str, unit: &str, detail: String) -> Figure {
    Figure::new(ctx, "python", name, unit, detail)
}

/// MiB/s of the Rust sink writing `n` records of 1 MiB and flushing
/// (durable), with the buffer and pack size bench.py gives its sink.
fn rust_sink_1mib(ctx: &Ctx, n: usize) -> Result<f64> {
    let dir = ctx.scratch.join("rust-big");
    let _ = std::fs::remove_dir_all(&dir);
    let sink = Sink::open(
        &dir,
        SinkConfig {
            buffer_bytes: 1 << 30,
            seal_bytes: 64 << 20,
            release_flush_timeout: Duration::from_secs(120),
            ..SinkConfig::default()
        },
    )?;
    let record: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let t = Instant::now();
    for _ in 0..n {
        sink.write(&record)?;
    }
    sink.flush(Duration::from_secs(300))?;
    let took = t.elapsed().as_secs_f64();
    sink.release()?;
    drop(sink);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(n as f64 / took)
}

/// Runs `bench.py SCRATCH SIZE PART` and returns the JSON object it prints.
fn bench_py(ctx: &Ctx, python: &str, part: &str) -> Result<serde_json::Value> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spool-py/bench/bench.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(ctx.scratch.join("python"))
        .arg(format!("{:?}", ctx.size))
        .arg(part)
        .output()
        .with_context(|| format!("could not run {python} {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} {part} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("bench.py printed {}", String::from_utf8_lossy(&out.stdout)))
}

/// `sync(1)`: what earlier writes left dirty goes to disk before a round.
fn sync() -> Result<()> {
    let status = Command::new("sync")
        .status()
        .context("could not run sync")?;
    if !status.success() {
        bail!("sync failed ({status})");
    }
    Ok(())
}

/// How many rounds the 1 MiB comparison alternates (the disk of a shared
/// VM varies ±40 % from one second to the next).
const BIG_ROUNDS: usize = 5;

/// The `python` case.
pub fn run(ctx: &Ctx) -> Result<()> {
    let python = std::env::var("SPOOL_BENCH_PYTHON").context(
        "SPOOL_BENCH_PYTHON is not set: run this case with `cargo xtask bench python`, \
         which builds the extension with --release into a virtualenv and sets it",
    )?;
    let big = match ctx.size {
        Size::Full => 256,
        Size::Quick => 32,
        Size::Smoke => 4,
    };
    let v = bench_py(ctx, &python, "calls")?;
    let (mut rust, mut py_big) = (0f64, 0f64);
    let (mut rust_rounds, mut py_rounds) = (Vec::new(), Vec::new());
    for round in 0..BIG_ROUNDS {
        // Who goes first alternates, so neither always meets the disk
        // right after the other's data.
        let mut r = 0.0;
        let mut p = 0.0;
        for python_turn in [round % 2 == 1, round % 2 == 0] {
            sync()?;
            if python_turn {
                let b = bench_py(ctx, &python, "big")?;
                p = b["mib_1mib_python"]
                    .as_f64()
                    .with_context(|| format!("bench.py big gave no mib_1mib_python: {b}"))?;
            } else {
                r = rust_sink_1mib(ctx, big)?;
            }
        }
        rust = rust.max(r);
        py_big = py_big.max(p);
        rust_rounds.push(format!("{r:.0}"));
        py_rounds.push(format!("{p:.0}"));
    }
    let num = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("bench.py gave no {k}: {v}"))
    };
    let (small, many, py) = (
        num("small")?,
        num("many")?,
        v["python"].as_str().unwrap_or("?"),
    );
    let (write_ns, ba_ns) = (num("write_ns")?, num("bytearray_ns")?);
    ctx.record(
        fig(
            ctx,
            "`Sink.write` of 100-byte records, per call",
            "ns",
            format!("{small} `bytes` records, best of 3, CPython {py}; baseline: the same loop appending them to a `bytearray`"),
        )
        .ours(write_ns)
        .vs("bytearray.extend loop", ba_ns)
        .lower_is_better(),
    )?;
    ctx.record(
        fig(
            ctx,
            "`Sink.write` overhead over the bytearray loop",
            "ns",
            format!("per call: `Sink.write` minus `bytearray.extend` ({write_ns:.0} − {ba_ns:.0} ns); the baseline is the issue's budget of 1 µs"),
        )
        .ours((write_ns - ba_ns).max(1.0))
        .vs("budget", 1000.0)
        .lower_is_better()
        .goal(1.0),
    )?;
    ctx.record(
        fig(
            ctx,
            "`Sink.write_many` of 100-byte records",
            "records/s",
            format!("one call on a list of {many} `bytes` records, best of 3; the baseline is the issue's goal of 2 M records/s"),
        )
        .ours(num("write_many_rps")?)
        .vs("goal", 2e6)
        .goal(1.0),
    )?;
    ctx.record(
        fig(
            ctx,
            "1 MiB records, written and flushed",
            "MiB/s",
            format!("{big} records of 1 MiB each way, then `flush` (durable), on the scratch disk; ours: `spool.Sink.write` from Python; baseline: spool-core's `Sink::write`; best of {BIG_ROUNDS} rounds, each side after a `sync`, who goes first alternating (Rust {}, Python {} MiB/s)", rust_rounds.join(", "), py_rounds.join(", ")),
        )
        .ours(py_big)
        .vs("Rust sink", rust)
        .goal(0.9),
    )?;
    Ok(())
}
