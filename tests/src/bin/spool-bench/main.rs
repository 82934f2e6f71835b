//! `spool-bench`: the benchmarks behind BENCHMARKS.md, run by
//! `cargo xtask bench` (which builds this binary with `--release`, starts
//! the servers a case needs, and runs one case per process so moto can be
//! restarted between heavy runs).
//!
//! Every figure is a ratio against a baseline run side by side, in the same
//! process run, on the same disk and the same servers. Nothing here asserts
//! a throughput; `tests/tests/bench_smoke.rs` only checks that the binary
//! runs and renders its report.
//!
//! ```text
//! spool-bench plan [GROUP|CASE...]
//! spool-bench run [--quick|--smoke] --scratch DIR --results FILE CASE...
//! spool-bench report --results FILE [--write BENCHMARKS.md]
//! spool-bench rss-child (idle|verify|recover) DIR     (internal)
//! ```
//!
//! Cases: `core` (stage, validate, peak RSS), `upload-s3-large`,
//! `upload-s3-small`, `upload-file` (spool-upload vs rclone / cp + sync),
//! `upload-s3-parts` (multipart part concurrency 2 and 4 against 1),
//! `catalog` (index throughput, lease latency), `service-drain-small`,
//! `service-drain-large`, `service-drain-tiny` (end-to-end drain vs
//! `rclone move`, and CPU seconds per GiB against rclone's),
//! `service-latency` (seal-to-indexed with and without the registry, and
//! on the embedded defaults),
//! `service-handoff-latency` (seal to row readable across processes: a
//! live sink-only producer handing off to a `spool run` daemon),
//! `service-drain-s3s-16k`, `service-drain-s3s-1m`, `service-drain-s3s-16m`
//! (`spool run --once` of a dead producer's backlog into s3s-fs against
//! `rclone copy --transfers 8`, wall and CPU of each side and server),
//! `backlog-100k` (a 100 000-pack backlog drained on the embedded
//! defaults: a steady rate, peak RSS, `spool status` and `ls` on it),
//! `reindex-100k` (`spool reindex` of 100 000 packs in 8 MiB bundles into
//! a lost SQLite catalog: rows per second, peak RSS).
#![forbid(unsafe_code)]

mod backlog;
mod catalog;
mod core;
mod handoff;
mod null_store;
mod python;
mod reindex;
mod report;
mod s3s;
mod service;
mod upload;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use report::Figure;

/// How large a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// The figures of BENCHMARKS.md.
    Full,
    /// A smoke run of every group (< 1 min with the servers).
    Quick,
    /// Tiny, for the test that exercises the binary.
    Smoke,
}

impl Size {
    /// Picks the value for this size.
    pub fn pick<T>(self, full: T, quick: T, smoke: T) -> T {
        match self {
            Size::Full => full,
            Size::Quick => quick,
            Size::Smoke => smoke,
        }
    }
}

/// What every case gets.
pub struct Ctx {
    /// Run size.
    pub size: Size,
    /// Scratch directory on the disk being measured (emptied by the case).
    pub scratch: PathBuf,
    /// Where figures are appended (JSON lines).
    pub results: PathBuf,
}

impl Ctx {
    /// A fresh, empty directory under the scratch directory.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.scratch.join(name);
        if d.exists() {
            std::fs::remove_dir_all(&d).with_context(|| format!("clearing {}", d.display()))?;
        }
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(d)
    }

    /// Records a figure: prints it and appends it to the results file.
    pub fn record(&self, f: Figure) -> Result<()> {
        println!("{}", f.line());
        let mut line = serde_json::to_string(&f)?;
        line.push('\n');
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.results)
            .with_context(|| format!("opening {}", self.results.display()))?
            .write_all(line.as_bytes())?;
        Ok(())
    }
}

/// Reads a server address the xtask set.
pub fn env(var: &str) -> Result<String> {
    std::env::var(var).with_context(|| {
        format!("{var} is not set: run the benchmarks through `cargo xtask bench`, which starts the servers")
    })
}

/// Seconds of `f`.
pub fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

/// The `p`-th percentile (0..=100) of `xs` (nearest rank).
pub fn percentile(xs: &[Duration], p: f64) -> Duration {
    let mut v = xs.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The median of `xs`.
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// `16 MiB`, `256 KiB`.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Runs an external command, failing with its stderr.
pub fn run_cmd(cmd: &mut std::process::Command) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A writable rclone config for the moto endpoint (remote `moto`), without
/// the CA bundle variables that make Debian's rclone refuse to start.
pub fn rclone(scratch: &Path) -> Result<std::process::Command> {
    rclone_remote(
        scratch,
        "moto",
        &env("SPOOL_TEST_S3_ENDPOINT")?,
        "spool-test",
        4,
    )
}

/// [`rclone`] for the S3 server at `endpoint` (remote `name`, access key
/// and secret both `key`) with `transfers` parallel uploads.
pub fn rclone_remote(
    scratch: &Path,
    name: &str,
    endpoint: &str,
    key: &str,
    transfers: usize,
) -> Result<std::process::Command> {
    let conf = scratch.join(format!("rclone-{name}.conf"));
    std::fs::write(
        &conf,
        format!(
            "[{name}]\ntype = s3\nprovider = Other\nendpoint = {endpoint}\naccess_key_id = {key}\nsecret_access_key = {key}\nregion = us-east-1\nforce_path_style = true\n"
        ),
    )?;
    let mut cmd = std::process::Command::new("rclone");
    cmd.arg("--config")
        .arg(&conf)
        .args(["--transfers", &transfers.to_string()])
        .args(["--s3-no-check-bucket", "-q"])
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("RCLONE_CA_CERT");
    Ok(cmd)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("plan") => plan(&args[1..]),
        Some("run") => run(&args[1..]),
        Some("report") => report::main(&args[1..]),
        Some("rss-child") => core::rss_child(&args[1..]),
        _ => {
            eprintln!(
                "usage: spool-bench plan [GROUP|CASE...]\n       spool-bench run [--quick|--smoke] --scratch DIR --results FILE CASE...\n       spool-bench report --results FILE [--write BENCHMARKS.md]"
            );
            std::process::exit(2);
        }
    }
}

/// Every case by group, with the servers `cargo xtask bench` starts for it
/// (`moto`, `clickhouse`, `s3s`: s3s-fs) before running it in a process of
/// its own (moto keeps every object in memory, so it is restarted between
/// heavy runs).
const CASES: &[(&str, &str, &[&str])] = &[
    ("core", "core", &[]),
    ("upload", "upload-s3-large", &["moto"]),
    ("upload", "upload-s3-small", &["moto"]),
    ("upload", "upload-file", &[]),
    ("upload", "upload-s3-parts", &["moto"]),
    ("catalog", "catalog", &["clickhouse"]),
    ("service", "service-drain-small", &["clickhouse", "moto"]),
    ("service", "service-drain-large", &["clickhouse", "moto"]),
    ("service", "service-drain-tiny", &["clickhouse", "moto"]),
    ("service", "service-latency", &["clickhouse", "moto"]),
    (
        "service",
        "service-handoff-latency",
        &["clickhouse", "moto"],
    ),
    ("service", "service-drain-rss", &[]),
    ("s3s", "service-drain-s3s-16k", &["clickhouse", "s3s"]),
    ("s3s", "service-drain-s3s-1m", &["clickhouse", "s3s"]),
    ("s3s", "service-drain-s3s-16m", &["clickhouse", "s3s"]),
    ("backlog", "backlog-100k", &[]),
    ("reindex", "reindex-100k", &[]),
    ("python", "python", &[]),
];

/// `spool-bench plan [GROUP|CASE...]`: the cases of the named groups and
/// cases (all when none is named) for `cargo xtask bench`, one line each:
/// `GROUP CASE [SERVER...]`; an unknown name fails, listing the known ones.
fn plan(args: &[String]) -> Result<()> {
    let named = |g: &str, c: &str| args.is_empty() || args.iter().any(|a| a == g || a == c);
    for a in args {
        if !CASES.iter().any(|(g, c, _)| a == g || a == c) {
            let cases: Vec<&str> = CASES.iter().map(|(_, c, _)| *c).collect();
            bail!(
                "unknown benchmark group or case {a:?}; groups: core, upload, catalog, \
                 service, s3s, backlog, reindex, python; cases: {}",
                cases.join(", ")
            );
        }
    }
    for (group, case, servers) in CASES.iter().filter(|(g, c, _)| named(g, c)) {
        println!("{group} {case} {}", servers.join(" "));
    }
    Ok(())
}

fn run(args: &[String]) -> Result<()> {
    let mut size = Size::Full;
    let mut scratch = None;
    let mut results = None;
    let mut cases = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => size = Size::Quick,
            "--smoke" => size = Size::Smoke,
            "--scratch" => scratch = it.next().map(PathBuf::from),
            "--results" => results = it.next().map(PathBuf::from),
            other if other.starts_with("--") => bail!("unknown option {other}"),
            case => cases.push(case.to_string()),
        }
    }
    let (Some(scratch), Some(results)) = (scratch, results) else {
        bail!("--scratch DIR and --results FILE are required");
    };
    std::fs::create_dir_all(&scratch)?;
    let ctx = Ctx {
        size,
        scratch: std::path::absolute(scratch)?,
        results,
    };
    for case in &cases {
        eprintln!("spool-bench: {case} ({size:?})");
        match case.as_str() {
            "core" => core::run(&ctx)?,
            "upload-s3-large" => upload::s3(&ctx, upload::Shape::Large)?,
            "upload-s3-small" => upload::s3(&ctx, upload::Shape::Small)?,
            "upload-file" => upload::file(&ctx)?,
            "upload-s3-parts" => upload::s3_parts(&ctx)?,
            "catalog" => catalog::run(&ctx)?,
            "service-drain-small" => service::drain(&ctx, service::Shape::Small)?,
            "service-drain-large" => service::drain(&ctx, service::Shape::Large)?,
            "service-drain-tiny" => service::drain(&ctx, service::Shape::Tiny)?,
            "service-latency" => service::latency(&ctx)?,
            "service-handoff-latency" => handoff::latency(&ctx)?,
            "service-drain-rss" => service::drain_rss(&ctx)?,
            "service-drain-s3s-16k" => s3s::drain(&ctx, s3s::Shape::Tiny)?,
            "service-drain-s3s-1m" => s3s::drain(&ctx, s3s::Shape::Small)?,
            "service-drain-s3s-16m" => s3s::drain(&ctx, s3s::Shape::Large)?,
            "backlog-100k" => backlog::run(&ctx)?,
            "reindex-100k" => reindex::run(&ctx)?,
            "python" => python::run(&ctx)?,
            other => bail!("unknown case {other}"),
        }
    }
    Ok(())
}

/// The filesystem the current directory (the workspace, where xtask puts
/// the scratch data) lives on: type, device, mount point and options.
pub fn workspace_mount() -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && cwd.starts_with(f[1])).then(|| (f[0], f[1], f[2], f[3]))
        })
        .max_by_key(|(_, mnt, _, _)| mnt.len());
    match best {
        Some((dev, mnt, fs, opts)) => {
            let name = dev.rsplit('/').next().unwrap_or(dev);
            let rot = std::fs::read_to_string(format!("/sys/block/{name}/queue/rotational"))
                .map(|r| {
                    if r.trim() == "0" {
                        ", non-rotational"
                    } else {
                        ", rotational"
                    }
                })
                .unwrap_or("");
            format!("{fs} on {dev} at {mnt} ({opts}{rot})")
        }
        None => "unknown".into(),
    }
}
