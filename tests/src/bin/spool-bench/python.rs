//! spool-py (issue 14 §9): the Python binding's per-call cost and
//! throughput, from `spool-py/bench/bench.py` run with the interpreter in
//! `$SPOOL_BENCH_PYTHON` (`cargo xtask bench python` sets it to a
//! virtualenv holding a `--release` build of the extension), beside the
//! Rust sink writing the same 1 MiB records on the same disk.

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

/// The `python` case.
pub fn run(ctx: &Ctx) -> Result<()> {
    let python = std::env::var("SPOOL_BENCH_PYTHON").context(
        "SPOOL_BENCH_PYTHON is not set: run this case with `cargo xtask bench python`, \
         which builds the extension with --release into a virtualenv and sets it",
    )?;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spool-py/bench/bench.py");
    let big = match ctx.size {
        Size::Full => 256,
        Size::Quick => 32,
        Size::Smoke => 4,
    };
    let rust = rust_sink_1mib(ctx, big)?;
    let out = Command::new(&python)
        .arg(&script)
        .arg(ctx.scratch.join("python"))
        .arg(format!("{:?}", ctx.size))
        .output()
        .with_context(|| format!("could not run {python} {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("bench.py printed {}", String::from_utf8_lossy(&out.stdout)))?;
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
            format!("{big} records of 1 MiB each way, then `flush` (durable), on the scratch disk; ours: `spool.Sink.write` from Python; baseline: spool-core's `Sink::write`"),
        )
        .ours(num("mib_1mib_python")?)
        .vs("Rust sink", rust)
        .goal(0.9),
    )?;
    Ok(())
}
