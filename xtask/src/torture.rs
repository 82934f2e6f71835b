//! `cargo xtask torture`: seeded crash torture with an oracle (
//! RELIABILITY.md "Crash torture").
//!
//! ```text
//! cargo xtask torture [--seed S] [--minutes M] [--runs N] [--run-secs S]
//!                     [--store file|s3] [--catalog sqlite|clickhouse]
//!                     [--faults|--no-faults] [--keep] [--bin PATH]
//! ```
//!
//! With `--store s3` / `--catalog clickhouse` the destination is real moto /
//! ClickHouse ([`remote`]), by default through fault proxies that open
//! seeded fault windows ([`faults`]; RELIABILITY.md "Fault torture").
//! Every run times each engine close (its last durable pack to its exit;
//! bound: its deadline + 2 s) and each stop (SIGTERM to exit; bound 5 s)
//! and fails past them.
//!
//! Each run works on one spool root (`<work>/spool`, the layout
//! `root/<catalog key>/r<rank>-<inc>/`) with one destination (a `file://`
//! store and an SQLite catalog beside the root, outside it). A seeded
//! scheduler starts real `spool` processes — all through the test helper
//! `spool-with-seams` (copied into the run's directory first, so another
//! build cannot swap it mid-run):
//! - engine producers (`produce --serve`), some with a worker ordinal, some
//!   armed to SIGKILL themselves at a kill point (`--kill-at NAME:N`);
//! - sink-only producers (`produce`, no service) that exit when done (their
//!   directory is then a dead sibling), and holders (`--hold`) that keep
//!   their lock after staging until the scheduler ends them;
//! - paused holders (`--pause-before-publish`): live owners with a stage in
//!   flight (an `.open` file) until released or killed;
//! - two or three `spool run` daemons on the same store and catalog, some
//!   armed at a kill point; a killed daemon is restarted.
//!
//! It SIGKILLs producers and daemons at random moments. Then it stops
//! producing, lets the survivors drain (bounded), stops the daemons and
//! runs a final `spool run --once`.
//!
//! A monitor thread digests every live owner's directory continuously (file
//! names, sizes, mtimes, SHA-256 of every file) and records every change
//! nobody but the owner may make. The owner of a directory is marked dead
//! *before* the scheduler signals it, so an adopter's work after that is
//! never mistaken for a touch.
//!
//! **Oracle** after the run: every pack a producer reported durable (`ID
//! SHA256` on its stdout, `--print-sha256`) is in the store exactly once,
//! valid and with that checksum, and in the catalog exactly once with it;
//! no catalog row without its object (same size and checksum); no object
//! the catalog does not list; no live directory lost or changed a file
//! while its owner lived; no `.open` outlived its owner past one adoption
//! (checked while the run goes on, [`opens`]); no unexpected exit;
//! nothing left under the root but the catalog key's empty directory (a
//! quarantined or rejected pack is a failure: none is injected). A failing run prints its seed and the
//! command that reproduces its choices (timing still varies).

mod disk;
mod faults;
mod netns;
mod opens;
mod remote;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The kill points of spool-core's `seams` (the helper refuses others;
/// xtask links no spool crate, so the list is copied, and a test compares
/// it with spool-core's).
const KILL_POINTS: &[&str] = &[
    "after_try_adopt",
    "scan_entry",
    "before_index",
    "after_index",
    "remove_dir",
    "lease_claim",
];

/// Service knobs every service of a run gets: short, so a run of seconds
/// sees leases expire, siblings re-checked and adoption happen.
const LEASE_TTL: &str = "5";
const POLL: &str = "0.2";
const RECHECK: &str = "0.5";
/// Unheld `.creating` staging copies (a claim SIGKILLed mid-way) older
/// than this are removed by adoption (60 s by default).
const STAGING_MAX_AGE: &str = "2s";
/// A daemon's last flush after SIGTERM (`service.stop_flush_timeout`).
const STOP_FLUSH_TIMEOUT: &str = "2s";
/// The longest SIGTERM-to-exit of a daemon or holder the torture accepts:
/// the stop flush (2 s) + 3 s.
const STOP_BOUND: Duration = Duration::from_secs(5);
/// An engine producer's `--timeout`: each flush's and the close's deadline.
const ENGINE_TIMEOUT: u64 = 20;
/// How far past its deadline an engine's close may return.
const OVERRUN_BOUND: Duration = Duration::from_secs(2);
/// The object store client's and the catalog's per-request bounds in a
/// run (`client.request_timeout`, `catalog.request_timeout`): short, so a
/// stalled request costs seconds, not minutes, of a run.
const CLIENT_REQUEST_TIMEOUT: &str = "10s";
const CATALOG_REQUEST_TIMEOUT: &str = "5s";

/// What `cargo xtask torture` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The first run's seed; later runs' seeds come from it.
    pub seed: u64,
    /// Keep running new runs until this long has passed.
    pub minutes: Option<f64>,
    /// How many runs (default 1 without `--minutes`).
    pub runs: Option<u64>,
    /// How long each run's production phase lasts.
    pub run_secs: f64,
    /// Keep each run's directory (always kept when it fails).
    pub keep: bool,
    /// A `spool-with-seams` binary to use instead of building one
    /// (`fault-proxy` is taken from beside it).
    pub bin: Option<PathBuf>,
    /// `--store s3`: moto instead of a `file://` store.
    pub s3: bool,
    /// `--catalog clickhouse`: ClickHouse instead of SQLite.
    pub clickhouse: bool,
    /// `--faults`: fault proxies in front of the real servers (on by
    /// default with either; `--no-faults` turns them off).
    pub faults: bool,
    /// `--disk`: the spool root on a small tmpfs that fills up and turns
    /// read-only ([`disk`]).
    pub disk: Option<disk::DiskOptions>,
}

/// The figures of runs, summed.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Runs done.
    pub runs: u64,
    /// SIGKILLs sent by the scheduler.
    pub kills_random: u64,
    /// Processes that killed themselves at an armed kill point.
    pub kills_at_points: u64,
    /// Fault windows opened (none in the crash torture; the fault
    /// torture's), by kind in `faults_by`.
    pub faults: u64,
    /// Fault windows by kind (`faults::KINDS`), per server.
    pub faults_by: BTreeMap<String, u64>,
    /// Requests the fault proxies hit, by what was done to them.
    pub requests_hit: BTreeMap<String, u64>,
    /// Engine closes timed (last durable pack to exit) and the longest.
    pub closes: u64,
    /// The longest engine close, from its last durable pack to its exit.
    pub longest_close: Duration,
    /// How far the longest close went past its deadline (`--timeout`).
    pub longest_overrun: Duration,
    /// Stops timed (SIGTERM to exit, daemons and holders) and the longest.
    pub stops: u64,
    /// The longest SIGTERM-to-exit.
    pub longest_stop: Duration,
    /// Packs producers reported durable.
    pub packs: u64,
    /// Reported packs missing, damaged or unindexed at the end.
    pub lost: u64,
    /// Packs stored or indexed more than once.
    pub duplicates: u64,
    /// Changes to a live owner's directory by someone else.
    pub live_touched: u64,
    /// Catalog rows read while their object was not in the store yet.
    pub rows_before_object: u64,
    /// Objects made by a producer killed before it reported them (fine).
    pub unreported: u64,
    /// Deaths at each kill point.
    pub points: BTreeMap<String, u64>,
    /// Adoptions of a dead owner's directory seen past their sweep (the
    /// adopter removed a ready pack; [`opens`]): each had to leave no
    /// `.open` behind.
    pub adoptions_swept: u64,
    /// Daemons that latched and exited 7 (fault runs only): a lease holder
    /// whose renewals the faults cut was deposed, and a foreign lease
    /// outlived 2 × TTL. Restarted like any dead daemon.
    pub latched: u64,
    /// `--disk`: the full-disk and read-only figures.
    pub disk: Option<disk::DiskFigures>,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.runs += o.runs;
        self.kills_random += o.kills_random;
        self.kills_at_points += o.kills_at_points;
        self.faults += o.faults;
        self.packs += o.packs;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.live_touched += o.live_touched;
        self.rows_before_object += o.rows_before_object;
        self.unreported += o.unreported;
        self.latched += o.latched;
        self.adoptions_swept += o.adoptions_swept;
        if let Some(d) = &o.disk {
            self.disk.get_or_insert_with(Default::default).add(d);
        }
        for (k, n) in &o.points {
            *self.points.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.faults_by {
            *self.faults_by.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.requests_hit {
            *self.requests_hit.entry(k.clone()).or_default() += n;
        }
        self.closes += o.closes;
        self.stops += o.stops;
        self.longest_close = self.longest_close.max(o.longest_close);
        self.longest_overrun = self.longest_overrun.max(o.longest_overrun);
        self.longest_stop = self.longest_stop.max(o.longest_stop);
    }

    fn line(&self) -> String {
        let points: Vec<String> = self
            .points
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let by = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let faults = if self.faults == 0 {
            "0".to_string()
        } else {
            format!(
                "{} ({}; requests hit: {})",
                self.faults,
                by(&self.faults_by),
                by(&self.requests_hit)
            )
        };
        let disk = self
            .disk
            .as_ref()
            .map_or(String::new(), |d| format!(" {}", d.line()));
        format!(
            "runs {} kills {} (random {}, at kill points {}: {}) faults {}{disk} packs {} lost {} duplicates {} live_touched {} rows_before_object {} (unreported objects {}) adoptions_swept {} latched {} longest_flush_overrun {:.2} s (longest engine close {:.2} s of {}, deadline {ENGINE_TIMEOUT} s, bound +{} s) longest_stop {:.2} s (of {}, bound {} s)",
            self.runs,
            self.kills_random + self.kills_at_points,
            self.kills_random,
            self.kills_at_points,
            points.join(", "),
            faults,
            self.packs,
            self.lost,
            self.duplicates,
            self.live_touched,
            self.rows_before_object,
            self.unreported,
            self.adoptions_swept,
            self.latched,
            self.longest_overrun.as_secs_f64(),
            self.longest_close.as_secs_f64(),
            self.closes,
            OVERRUN_BOUND.as_secs(),
            self.longest_stop.as_secs_f64(),
            self.stops,
            STOP_BOUND.as_secs()
        )
    }
}

/// `cargo xtask torture ARGS`.
pub fn torture_cmd(root: &Path, args: &[String]) -> Result<()> {
    let mut o = Options {
        seed: seed_from_clock(),
        minutes: None,
        runs: None,
        run_secs: 20.0,
        keep: false,
        bin: None,
        s3: false,
        clickhouse: false,
        faults: false,
        disk: None,
    };
    let mut faults = None;
    let mut lease_netns = false;
    let mut read_only = true;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--seed" => o.seed = value("--seed")?.parse().context("--seed: a number")?,
            "--minutes" => o.minutes = Some(value("--minutes")?.parse().context("--minutes")?),
            "--runs" => o.runs = Some(value("--runs")?.parse().context("--runs")?),
            "--run-secs" => o.run_secs = value("--run-secs")?.parse().context("--run-secs")?,
            "--keep" => o.keep = true,
            "--lease-netns" => lease_netns = true,
            "--bin" => o.bin = Some(value("--bin")?.into()),
            "--store" => {
                o.s3 = match value("--store")?.as_str() {
                    "file" => false,
                    "s3" => true,
                    v => bail!("--store {v}: `file` or `s3` (moto)"),
                }
            }
            "--catalog" => {
                o.clickhouse = match value("--catalog")?.as_str() {
                    "sqlite" => false,
                    "clickhouse" => true,
                    v => bail!("--catalog {v}: `sqlite` or `clickhouse`"),
                }
            }
            "--disk" => {
                o.disk.get_or_insert(disk::DiskOptions {
                    mib: disk::DEFAULT_MIB,
                    read_only: true,
                });
            }
            "--tmpfs-mib" => {
                let mib = value("--tmpfs-mib")?.parse().context("--tmpfs-mib: MiB")?;
                o.disk = Some(disk::DiskOptions {
                    mib,
                    read_only: true,
                });
            }
            "--no-ro" => read_only = false,
            "--faults" => faults = Some(true),
            "--no-faults" => faults = Some(false),
            other => bail!(
                "unknown option {other}; usage: cargo xtask torture [--seed S] [--minutes M] \
                 [--runs N] [--run-secs S] [--store file|s3] [--catalog sqlite|clickhouse] \
                 [--faults|--no-faults] [--disk] [--tmpfs-mib N] [--no-ro] [--keep] [--bin PATH] \
                 | --lease-netns [--seed S] [--minutes M]"
            ),
        }
    }
    if lease_netns {
        let bin = seams_binary(root, &o)?;
        let secs = o.minutes.map_or(45.0, |m| m * 60.0);
        netns::lease_netns(root, &bin, o.seed, secs)?;
        return Ok(());
    }
    o.faults = faults.unwrap_or(o.s3 || o.clickhouse);
    if let Some(d) = &mut o.disk {
        d.read_only = read_only;
        if !disk::in_namespace() {
            // the tmpfs is mounted in a private mount namespace of its own
            let all: Vec<String> = std::iter::once("torture".to_string())
                .chain(args.iter().cloned())
                .chain(["--seed".to_string(), o.seed.to_string()])
                .collect();
            return disk::reexec(&all);
        }
    }
    if o.faults && !o.s3 && !o.clickhouse {
        bail!("--faults needs a real server to put the proxy in front of: --store s3 and/or --catalog clickhouse");
    }
    let figures = torture(root, &o)?;
    eprintln!("torture: {}", figures.line());
    Ok(())
}

/// CI's short pass (`cargo xtask test`): seeds 1 and 2 and the date's,
/// 15 s of production each (about a minute in all).
pub fn ci(root: &Path) -> Result<()> {
    build_helpers()?;
    let bin = crate::target_dir(root).join("debug/spool-with-seams");
    let mut total = Figures::default();
    for seed in [1, 2, seed_of_the_day()] {
        let o = Options {
            seed,
            minutes: None,
            runs: Some(1),
            run_secs: 15.0,
            keep: false,
            bin: Some(bin.clone()),
            s3: false,
            clickhouse: false,
            faults: false,
            disk: None,
        };
        total.add(&torture(root, &o)?);
    }
    eprintln!("torture: {}", total.line());
    Ok(())
}

/// CI's short disk pass (`cargo xtask test`): one 15 s run of the day's
/// seed with the spool root on a 32 MiB tmpfs that fills and turns
/// read-only ([`disk`]); skipped, saying why, when not root.
pub fn ci_disk(root: &Path) -> Result<()> {
    if let Some(why) = disk::unavailable() {
        eprintln!("torture --disk: SKIPPED: {why}");
        return Ok(());
    }
    let bin = crate::target_dir(root).join("debug/spool-with-seams");
    let seed = seed_of_the_day().to_string();
    let args = [
        "torture",
        "--disk",
        "--runs",
        "1",
        "--run-secs",
        "15",
        "--seed",
        &seed,
        "--bin",
    ];
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.push(bin.display().to_string());
    disk::reexec(&all)
}

/// CI's short fault pass (`cargo xtask test`, after the real tier, with its
/// servers): one run of the day's seed against moto + ClickHouse through
/// the fault proxies, 20 s of production (about 40 s in all).
pub fn ci_faults(root: &Path, servers: &[(String, String)]) -> Result<()> {
    build_helpers()?;
    let o = Options {
        seed: seed_of_the_day(),
        minutes: None,
        runs: Some(1),
        run_secs: 20.0,
        keep: false,
        bin: Some(crate::target_dir(root).join("debug/spool-with-seams")),
        s3: true,
        clickhouse: true,
        faults: true,
        disk: None,
    };
    let env = |k: &str| servers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let remote = remote::Remote::start_with(root, &o, &env)?;
    let figures = runs(root, &o, &remote)?;
    eprintln!("torture (faults): {}", figures.line());
    Ok(())
}

/// CI's short two-node lease pass (`cargo xtask test`, after the real
/// tier): the day's seed, [`CI_LEASE_NETNS_SECS`] of link faults, with a
/// ClickHouse of its own; skipped, saying why, when not root or without
/// network namespaces (RELIABILITY.md "Two nodes, one lease").
pub fn ci_lease_netns(root: &Path) -> Result<()> {
    build_helpers()?;
    let bin = crate::target_dir(root).join("debug/spool-with-seams");
    netns::lease_netns(root, &bin, seed_of_the_day(), CI_LEASE_NETNS_SECS)?;
    Ok(())
}

/// How long CI's two-node lease pass injects link faults.
const CI_LEASE_NETNS_SECS: f64 = 30.0;

/// A seed from the clock (printed, so any run can be repeated).
fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}

/// Today's date as a number (`YYYYMMDD`, UTC): CI's seed of the day.
pub fn seed_of_the_day() -> u64 {
    let days = seed_from_clock() / 86_400;
    // civil-from-days (Howard Hinnant's algorithm)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y * 10_000 + m * 100 + d) as u64
}

/// Runs the torture as `o` says; fails (after printing the seed and the
/// command of the first failing run) if any run broke a rule.
pub fn torture(root: &Path, o: &Options) -> Result<Figures> {
    let bin = seams_binary(root, o)?;
    let remote = remote::Remote::start(root, o)?;
    runs(
        root,
        &Options {
            bin: Some(bin),
            ..o.clone()
        },
        &remote,
    )
}

/// The `spool-with-seams` binary a pass runs: `o.bin` when given (`--bin`),
/// else the workspace's, built first (with `spool` and the other helper
/// binaries beside it, e.g. `fault-proxy`).
fn seams_binary(root: &Path, o: &Options) -> Result<PathBuf> {
    if let Some(b) = &o.bin {
        return Ok(b.clone());
    }
    build_helpers()?;
    Ok(crate::target_dir(root).join("debug/spool-with-seams"))
}

/// Builds `spool` and the test helper binaries (`spool-with-seams`,
/// `fault-proxy`).
fn build_helpers() -> Result<()> {
    crate::run(crate::cargo().args(["build", "-p", "spool-cli", "-p", "spool-tests", "--bins"]))
}

/// The runs of [`torture`] with `o.bin` built and the servers up.
fn runs(root: &Path, o: &Options, remote: &remote::Remote) -> Result<Figures> {
    let bin = o.bin.clone().context("a built spool-with-seams")?;
    let work = crate::target_dir(root).join("xtask/torture");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let runs = o
        .runs
        .unwrap_or(if o.minutes.is_some() { u64::MAX } else { 1 });
    let until = o
        .minutes
        .map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0));
    let mut seeds = Rng(o.seed);
    let mut total = Figures::default();
    let mut failures = Vec::new();
    for n in 0..runs {
        if until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        let seed = if n == 0 {
            o.seed
        } else {
            seeds.next() % 1_000_000_000
        };
        let dir = work.join(format!("seed-{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("torture: run {} seed {seed} in {}", n + 1, dir.display());
        let (figures, problems) = Run::new(seed, &dir, &bin, o, remote)?.go()?;
        eprintln!("torture: seed {seed}: {}", figures.line());
        total.add(&figures);
        if problems.is_empty() {
            if !o.keep {
                let _ = std::fs::remove_dir_all(&dir);
            }
        } else {
            eprintln!(
                "torture: seed {seed} FAILED ({} problem(s)):",
                problems.len()
            );
            for p in &problems {
                eprintln!("torture:   {p}");
            }
            eprintln!(
                "torture: reproduce with: cargo xtask torture --seed {seed} --runs 1 --run-secs {}{} \
                 (its directory is kept: {})",
                o.run_secs,
                variant(o),
                dir.display()
            );
            failures.push(seed);
        }
    }
    if !failures.is_empty() {
        eprintln!("torture: {}", total.line());
        bail!(
            "torture: {} run(s) failed: seeds {failures:?}",
            failures.len()
        );
    }
    Ok(total)
}

/// The options that pick the variant, as `cargo xtask torture` spells them.
fn variant(o: &Options) -> String {
    let mut v = String::new();
    if o.s3 {
        v.push_str(" --store s3");
    }
    if o.clickhouse {
        v.push_str(" --catalog clickhouse");
    }
    if (o.s3 || o.clickhouse) && !o.faults {
        v.push_str(" --no-faults");
    }
    if let Some(d) = &o.disk {
        v.push_str(&format!(" --disk --tmpfs-mib {}", d.mib));
        if !d.read_only {
            v.push_str(" --no-ro");
        }
    }
    v
}

/// The port of `127.0.0.1:PORT`.
fn remote_port(addr: &str) -> Result<u16> {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("{addr} is not IP:PORT"))
}

/// Where a run's store is, as the oracle reads it.
#[derive(Clone)]
enum StoreAt {
    /// A `file://` store's directory.
    File(PathBuf),
    /// moto: port (direct, not the proxy), bucket, the run's prefix.
    S3 {
        port: u16,
        bucket: String,
        prefix: String,
    },
}

impl StoreAt {
    /// Every object: its key (relative to the store's root) and bytes.
    fn objects(&self) -> Result<Vec<(String, Vec<u8>)>> {
        match self {
            StoreAt::File(dir) => {
                let mut files = Vec::new();
                walk_files(dir, &mut files);
                Ok(files
                    .into_iter()
                    .map(|f| {
                        let key = f.strip_prefix(dir).unwrap_or(&f).display().to_string();
                        (key, std::fs::read(&f).unwrap_or_default())
                    })
                    .collect())
            }
            StoreAt::S3 {
                port,
                bucket,
                prefix,
            } => {
                let mut out = Vec::new();
                for key in remote::s3_keys(*port, bucket, prefix)? {
                    let bytes = remote::s3_get(*port, bucket, &key)?.unwrap_or_default();
                    out.push((key, bytes));
                }
                Ok(out)
            }
        }
    }

    /// Whether the object a catalog row names is there.
    fn has(&self, key: &str) -> bool {
        match self {
            StoreAt::File(dir) => dir.join(key).exists(),
            StoreAt::S3 { port, bucket, .. } => {
                // moto may be busy: an unanswered HEAD is no evidence
                remote::s3_exists(*port, bucket, key).unwrap_or(true)
            }
        }
    }
}

/// splitmix64: small, seedable, good enough to pick actions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// A random action of the scheduler: its chance per tick, whom it picks
/// from, and the signal it sends (`None`: release a paused stage).
type Action = (f64, fn(Kind) -> bool, Option<&'static str>);

/// What a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `produce --serve`.
    Engine,
    /// `produce` (sink-only), exits when done.
    SinkOnly,
    /// `produce --hold`.
    Holder,
    /// `produce --hold` with every stage paused before its publish.
    Paused,
    /// `spool run`.
    Daemon,
}

/// One process of a run.
struct Proc {
    kind: Kind,
    child: Child,
    pid: u32,
    /// Armed kill point, if any.
    kill_at: Option<String>,
    /// The scheduler signalled it (SIGKILL or SIGTERM).
    signalled: Option<&'static str>,
    /// Its exit, once reaped.
    exit: Option<ExitStatus>,
    stderr: Arc<Mutex<String>>,
    /// The thread reading its stderr (joined once it exited, so a kill
    /// point's last line is read before the exit is judged).
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// A paused holder's release file.
    release: Option<PathBuf>,
    /// When the scheduler sent it SIGTERM, and how many packs it had
    /// reported by then.
    term_at: Option<Instant>,
    reported_at_term: u64,
    /// When its stderr closed (it exited), seen by the reader thread.
    ended: Arc<Mutex<Option<Instant>>>,
    /// An engine's packs to stage, and when it reported its last one.
    packs: u64,
    last_report: Arc<Mutex<(u64, Option<Instant>)>>,
}

/// A digest of one file of a live directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sig {
    size: u64,
    mtime_ns: i128,
    sha: [u8; 32],
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sha = hex(&self.sha);
        write!(
            f,
            "{} bytes, mtime {} ns, sha256 {}",
            self.size,
            self.mtime_ns,
            &sha[..16]
        )
    }
}

/// A live owner, as the monitor watches it.
#[derive(Default)]
struct Owner {
    /// Its rank directory (from its stderr).
    dir: Option<PathBuf>,
    /// It lives (the scheduler has not signalled it, it has not finished).
    live: bool,
    /// Its files may not disappear (no service of its own removes them).
    check_lost: bool,
    /// Its `.open` files are stages in flight that may not disappear.
    paused: bool,
    /// Packs it will report before it exits by itself (sink-only).
    expect: Option<u64>,
    reported: u64,
    last: Option<BTreeMap<PathBuf, Sig>>,
    pid: u32,
    /// What it is, for reports.
    what: String,
    /// Once dead: its directory's adoptions, for the `.open` rule.
    watch: opens::Watch,
    /// Dead and its directory gone (or the rule reported): no more looks.
    settled: bool,
}

/// What the reader and monitor threads share with the scheduler.
#[derive(Default)]
struct Shared {
    /// pack id → (sha256, reporting process).
    durable: BTreeMap<String, (String, usize)>,
    owners: BTreeMap<usize, Owner>,
    problems: Vec<String>,
    live_touched: u64,
    duplicates: u64,
    /// Catalog rows seen (while the run went on) before their object.
    early_rows: BTreeSet<String>,
    /// Adoptions seen past their sweep ([`Figures::adoptions_swept`]).
    adoptions_swept: u64,
}

fn lock(s: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// One seeded run.
struct Run {
    seed: u64,
    rng: Rng,
    dir: PathBuf,
    root: PathBuf,
    /// The store as the oracle reads it.
    store_at: StoreAt,
    /// The store and catalog URLs every process of the run gets (through
    /// the fault proxies with `--faults`).
    store: String,
    catalog: String,
    /// The catalog URL the oracle reads (never through a proxy).
    catalog_read: String,
    /// The environment every process of the run gets.
    env: Vec<(String, String)>,
    /// `--faults`: the proxies.
    proxies: Vec<faults::FaultProxy>,
    /// A ClickHouse database made for the run (port, name): dropped after
    /// a passing run.
    database: Option<(u16, String)>,
    bin: PathBuf,
    run_secs: f64,
    /// How many daemons run at once.
    daemons: usize,
    /// `--disk`: the run's tmpfs (the spool root is on it).
    disk: Option<disk::Disk>,
    /// The threads reading producers' reports (joined before the oracle).
    stdout_readers: Vec<std::thread::JoinHandle<()>>,
    procs: Vec<Proc>,
    shared: Arc<Mutex<Shared>>,
    figures: Figures,
}

impl Run {
    fn new(seed: u64, dir: &Path, bin: &Path, o: &Options, remote: &remote::Remote) -> Result<Run> {
        let store_dir = dir.join("store");
        for d in [&store_dir, &dir.join("bin")] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let own_bin = dir.join("bin/spool-with-seams");
        std::fs::copy(bin, &own_bin)
            .with_context(|| format!("copying {} (built?)", bin.display()))?;
        let dir = dir.canonicalize()?;
        let (root, disk) = match &o.disk {
            Some(d) => {
                let disk = disk::Disk::mount(&dir, d)?;
                (disk.mount.join("spool"), Some(disk))
            }
            None => {
                let root = dir.join("spool");
                std::fs::create_dir_all(&root)
                    .with_context(|| format!("creating {}", root.display()))?;
                (root, None)
            }
        };
        let mut proxies = Vec::new();
        if o.faults {
            let from = bin.with_file_name("fault-proxy");
            let own = dir.join("bin/fault-proxy");
            std::fs::copy(&from, &own)
                .with_context(|| format!("copying {} (built?)", from.display()))?;
            if let Some((port, _)) = &remote.s3 {
                proxies.push(faults::FaultProxy::start(&own, "s3", *port)?);
            }
            if let Some(port) = remote.clickhouse {
                proxies.push(faults::FaultProxy::start(&own, "clickhouse", port)?);
            }
        }
        let via = |name: &str, port: u16| {
            proxies
                .iter()
                .find(|p| p.name == name)
                .map_or(port, |p| p.port)
        };
        let mut env: Vec<(String, String)> = vec![
            ("RUST_LOG".into(), "warn".into()),
            ("SPOOL_STAGING_MAX_AGE".into(), STAGING_MAX_AGE.into()),
            ("SPOOL_STOP_FLUSH_TIMEOUT".into(), STOP_FLUSH_TIMEOUT.into()),
            (
                "SPOOL_CLIENT_REQUEST_TIMEOUT".into(),
                CLIENT_REQUEST_TIMEOUT.into(),
            ),
            (
                "SPOOL_CATALOG_REQUEST_TIMEOUT".into(),
                CATALOG_REQUEST_TIMEOUT.into(),
            ),
        ];
        // a name of the run's own in the shared servers
        let tag = format!("torture-{seed}-{}", std::process::id());
        let (store, store_at) = match &remote.s3 {
            Some((port, bucket)) => {
                let endpoint = format!("http://127.0.0.1:{}", via("s3", *port));
                for (k, v) in [
                    ("AWS_ENDPOINT", endpoint.as_str()),
                    ("AWS_ALLOW_HTTP", "true"),
                    ("AWS_REGION", "us-east-1"),
                    ("AWS_ACCESS_KEY_ID", "spool-test"),
                    ("AWS_SECRET_ACCESS_KEY", "spool-test"),
                ] {
                    env.push((k.into(), v.into()));
                }
                (
                    format!("s3://{bucket}/{tag}"),
                    StoreAt::S3 {
                        port: *port,
                        bucket: bucket.clone(),
                        prefix: tag.clone(),
                    },
                )
            }
            None => (
                format!("file://{}", dir.join("store").display()),
                StoreAt::File(dir.join("store")),
            ),
        };
        let (catalog, catalog_read, database) = match remote.clickhouse {
            Some(port) => {
                let db = tag.replace('-', "_");
                remote::clickhouse(port, &format!("DROP DATABASE IF EXISTS {db}"))?;
                remote::clickhouse(port, &format!("CREATE DATABASE {db}"))?;
                (
                    format!("clickhouse://127.0.0.1:{}/{db}", via("clickhouse", port)),
                    format!("clickhouse://127.0.0.1:{port}/{db}"),
                    Some((port, db)),
                )
            }
            None => {
                let c = format!("sqlite://{}", dir.join("catalog.db").display());
                (c.clone(), c, None)
            }
        };
        Ok(Run {
            seed,
            rng: Rng(seed),
            store,
            store_at,
            catalog,
            catalog_read,
            env,
            proxies,
            database,
            root,
            disk,
            bin: dir.join("bin/spool-with-seams"),
            dir,
            run_secs: o.run_secs,
            daemons: 2,
            stdout_readers: Vec::new(),
            procs: Vec::new(),
            shared: Arc::default(),
            figures: Figures {
                disk: o.disk.map(|_| disk::DiskFigures::default()),
                ..Figures::default()
            },
        })
    }

    fn problem(&self, p: String) {
        lock(&self.shared).problems.push(p);
    }

    /// The destination flags every command of the run gets.
    fn dest(&self) -> Vec<String> {
        vec![
            "--spool-root".into(),
            self.root.display().to_string(),
            "--store".into(),
            self.store.clone(),
            "--catalog".into(),
            self.catalog.clone(),
        ]
    }

    fn go(mut self) -> Result<(Figures, Vec<String>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let monitor = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            std::thread::spawn(move || monitor(&shared, &stop))
        };
        let adoptions = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            std::thread::spawn(move || watch_adoptions(&shared, &stop))
        };
        let watch = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            let (bin, catalog, store) = (
                self.bin.clone(),
                self.catalog_read.clone(),
                self.store_at.clone(),
            );
            std::thread::spawn(move || watch_catalog(&bin, &catalog, &store, &shared, &stop))
        };
        let result = self.schedule();
        stop.store(true, Ordering::SeqCst);
        let _ = monitor.join();
        let _ = adoptions.join();
        let _ = watch.join();
        // never leave a process behind, whatever happened
        for p in &mut self.procs {
            if p.exit.is_none() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
        result?;
        for r in std::mem::take(&mut self.stdout_readers) {
            let _ = r.join();
        }
        self.oracle()?;
        for p in &self.proxies {
            for (k, n) in p.hits() {
                *self
                    .figures
                    .requests_hit
                    .entry(format!("{} {k}", p.name))
                    .or_default() += n;
            }
        }
        self.proxies.clear();
        if let Some(d) = self.disk.take() {
            if !lock(&self.shared).problems.is_empty() {
                d.keep(&self.dir.join("spool-left"));
            }
            if let Some(f) = &mut self.figures.disk {
                f.add(&d.figures);
            }
            d.unmount(&mut self.rng)?;
        }
        let shared = lock(&self.shared);
        if shared.problems.is_empty() {
            if let Some((port, db)) = &self.database {
                let _ = remote::clickhouse(*port, &format!("DROP DATABASE IF EXISTS {db}"));
            }
        }
        let mut figures = self.figures.clone();
        figures.runs = 1;
        figures.packs = shared.durable.len() as u64;
        figures.live_touched = shared.live_touched;
        figures.rows_before_object = shared.early_rows.len() as u64;
        figures.adoptions_swept = shared.adoptions_swept;
        figures.duplicates += shared.duplicates;
        Ok((figures, shared.problems.clone()))
    }

    /// The production phase, then the drain.
    fn schedule(&mut self) -> Result<()> {
        self.daemons = 2 + self.rng.below(2) as usize;
        for _ in 0..self.daemons {
            self.spawn_daemon(true)?;
        }
        let end = Instant::now() + Duration::from_secs_f64(self.run_secs);
        let mut restarts: Vec<Instant> = Vec::new();
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50 + self.rng.below(250)));
            let dead_daemons = self.reap();
            for _ in 0..dead_daemons {
                restarts.push(Instant::now() + Duration::from_millis(200 + self.rng.below(1500)));
            }
            let now = Instant::now();
            let due = restarts.iter().filter(|t| **t <= now).count();
            restarts.retain(|t| *t > now);
            for _ in 0..due {
                self.spawn_daemon(true)?;
            }
            let producers = self.live(|k| k != Kind::Daemon).len();
            if producers < 6 && self.rng.chance(0.35) {
                self.spawn_producer()?;
            }
            // (chance, whom, what): at most one of each per tick
            let actions: [Action; 4] = [
                (0.10, |k| k != Kind::Daemon, Some("KILL")),
                (0.05, |k| k == Kind::Daemon, Some("KILL")),
                (0.05, |k| k == Kind::Holder, Some("TERM")),
                (0.05, |k| k == Kind::Paused, None), // release its stage
            ];
            for (chance, whom, what) in actions {
                if !self.rng.chance(chance) {
                    continue;
                }
                let candidates = self.live(whom);
                if candidates.is_empty() {
                    continue;
                }
                let i = *self.rng.pick(&candidates);
                match what {
                    Some(sig) => self.signal(i, sig),
                    None => self.unpause(i),
                }
            }
            self.inject()?;
            if let Some(d) = &mut self.disk {
                d.tick(&mut self.rng, false)?;
            }
        }
        for p in &mut self.proxies {
            p.tick(true)?;
        }
        // the drain has room and a writable spool
        if let Some(d) = &mut self.disk {
            d.tick(&mut self.rng, true)?;
        }
        self.drain()
    }

    /// `--faults`: ends the fault windows that are due and, by chance,
    /// opens a new one on a proxy that has none.
    fn inject(&mut self) -> Result<()> {
        for k in 0..self.proxies.len() {
            self.proxies[k].tick(false)?;
            if self.proxies[k].busy() || !self.rng.chance(0.12) {
                continue;
            }
            let kind = self.proxies[k].open(&mut self.rng)?;
            self.figures.faults += 1;
            let name = format!("{} {kind}", self.proxies[k].name);
            *self.figures.faults_by.entry(name).or_default() += 1;
        }
        Ok(())
    }

    /// Stops producing and lets everything drain (each wait bounded).
    fn drain(&mut self) -> Result<()> {
        eprintln!("torture: seed {}: draining", self.seed);
        for i in self.live(|k| k == Kind::Paused) {
            if self.rng.chance(0.5) {
                self.unpause(i);
                std::thread::sleep(Duration::from_millis(100));
                self.signal(i, "TERM");
            } else {
                self.signal(i, "KILL");
            }
        }
        for i in self.live(|k| k == Kind::Holder) {
            self.signal(i, "TERM");
        }
        // producers finish by themselves (engines drain and close); the
        // ones just signalled too: a holder publishing its paused stage on
        // the way out would otherwise stage after the daemons' drain below
        // (and hold its directory live through the final `run --once`)
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            self.reap();
            let left = self.live_or_unreaped(|k| k != Kind::Daemon);
            if left.is_empty() {
                break;
            }
            if Instant::now() > until {
                for i in left {
                    self.problem(format!(
                        "{} (pid {}) did not finish within 60 s of the drain; killed",
                        self.name(i),
                        self.procs[i].pid
                    ));
                    self.signal(i, "KILL");
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // every daemon back (unarmed), so survivors drain the siblings
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            self.reap();
            while self.live_or_unreaped(|k| k == Kind::Daemon).len() < self.daemons {
                self.spawn_daemon(false)?;
            }
            if Instant::now() >= until || self.backlog() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // --disk: the windows are over, so the daemons themselves must
        // drain everything; a sibling left behind is one a daemon gave up
        // on for a transient ENOSPC / EROFS (the final run would hide it)
        let left = self.backlog();
        if self.disk.is_some() && left > 0 {
            self.problem(format!(
                "{left} rank director(y/ies) under {} not drained by the daemons within 30 s of the last full / read-only window (a sibling given up on for a transient error?)",
                self.root.display()
            ));
        }
        for i in self.live(|k| k == Kind::Daemon) {
            self.signal(i, "TERM");
        }
        let until = Instant::now() + Duration::from_secs(20);
        while !self.live_or_unreaped(|k| k == Kind::Daemon).is_empty() && Instant::now() < until {
            self.reap();
            std::thread::sleep(Duration::from_millis(100));
        }
        for i in self.live_or_unreaped(|k| k == Kind::Daemon) {
            self.problem(format!(
                "daemon {} (pid {}) did not stop within 20 s of SIGTERM; killed",
                self.name(i),
                self.procs[i].pid
            ));
            let _ = self.procs[i].child.kill();
        }
        self.reap();
        // a final drain, as an operator would run it
        let out = Command::new(&self.bin)
            .arg("run")
            .arg("--once")
            .args(["--timeout", "60"])
            .args(self.dest())
            .args(["--lease-ttl", LEASE_TTL, "--poll-interval", POLL])
            .args(["--recheck-interval", RECHECK, "--max-backoff", "1"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .context("running the final spool run --once")?;
        if !out.status.success() {
            self.problem(format!(
                "the final `spool run --once` exited {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Rank directories under the root that still hold a file other than
    /// a lock file (what is left to drain).
    fn backlog(&self) -> usize {
        let mut n = 0;
        for key in read_dir(&self.root) {
            for rank in read_dir(&key) {
                let mut files = Vec::new();
                walk_files(&rank, &mut files);
                if files.iter().any(|f| !f.ends_with(".owner.lock")) {
                    n += 1;
                }
            }
        }
        n
    }

    /// Indexes of processes of a kind that the scheduler has not
    /// signalled and that have not exited.
    fn live(&self, kind: impl Fn(Kind) -> bool) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| {
                let p = &self.procs[i];
                kind(p.kind) && p.signalled.is_none() && p.exit.is_none()
            })
            .collect()
    }

    /// Indexes of processes of a kind that have not exited, signalled or
    /// not.
    fn live_or_unreaped(&self, kind: impl Fn(Kind) -> bool) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| kind(self.procs[i].kind) && self.procs[i].exit.is_none())
            .collect()
    }

    fn name(&self, i: usize) -> String {
        let p = &self.procs[i];
        match &p.kill_at {
            Some(k) => format!("#{i} {:?} (--kill-at {k})", p.kind),
            None => format!("#{i} {:?}", p.kind),
        }
    }

    /// Marks process `i` dead for the monitor, then signals it.
    fn signal(&mut self, i: usize, sig: &'static str) {
        if let Some(o) = lock(&self.shared).owners.get_mut(&i) {
            o.live = false;
        }
        let p = &mut self.procs[i];
        p.signalled = Some(sig);
        if sig == "TERM" {
            p.term_at = Some(Instant::now());
            p.reported_at_term = p.last_report.lock().unwrap_or_else(|e| e.into_inner()).0;
        }
        if sig == "KILL" {
            self.figures.kills_random += 1;
            let _ = p.child.kill();
        } else {
            let _ = Command::new("kill")
                .args(["-TERM", &p.pid.to_string()])
                .status();
        }
    }

    fn unpause(&mut self, i: usize) {
        if let Some(o) = lock(&self.shared).owners.get_mut(&i) {
            o.paused = false;
        }
        if let Some(r) = self.procs[i].release.take() {
            let _ = std::fs::write(r, b"");
        }
    }

    /// Reaps what exited, judges each exit; returns how many daemons died.
    fn reap(&mut self) -> usize {
        let mut dead_daemons = 0;
        for i in 0..self.procs.len() {
            if self.procs[i].exit.is_some() {
                continue;
            }
            let Ok(Some(status)) = self.procs[i].child.try_wait() else {
                continue;
            };
            self.procs[i].exit = Some(status);
            if let Some(reader) = self.procs[i].stderr_reader.take() {
                let _ = reader.join();
            }
            if let Some(o) = lock(&self.shared).owners.get_mut(&i) {
                o.live = false;
            }
            self.time_exit(i, status);
            let p = &self.procs[i];
            let by_signal = std::os::unix::process::ExitStatusExt::signal(&status);
            let stderr = p.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let at_point = stderr.contains("spool: kill point ");
            if p.kind == Kind::Daemon {
                dead_daemons += 1;
            }
            if let Some(f) = &mut self.figures.disk {
                f.count(&stderr, p.kind == Kind::Daemon);
            }
            let disk = self.figures.disk.is_some();
            let expected = match (p.signalled, by_signal) {
                // its own kill point (also while it stops after a SIGTERM)
                (_, Some(9)) if at_point => {
                    self.figures.kills_at_points += 1;
                    let point = p.kill_at.as_deref().unwrap_or("?");
                    let point = point.split(':').next().unwrap_or(point).to_string();
                    *self.figures.points.entry(point).or_default() += 1;
                    true
                }
                (Some("KILL"), Some(9)) => true,
                // a holder or daemon told to stop: exit 0 (or the signal
                // itself, if it came before the process took it over)
                (Some("TERM"), None) if status.success() => true,
                (Some("TERM"), Some(15)) => true,
                // an engine whose close could not drain in time: its
                // packs stay for adoption, not a broken rule
                (None, None) if p.kind == Kind::Engine && status.code() == Some(6) => true,
                // A deposed lease holder that sees a foreign
                // lease outlive 2 × TTL latches and exits 7; only faults
                // (stalled or refused renewals) depose a live holder
                (None, None)
                    if p.kind == Kind::Daemon
                        && status.code() == Some(7)
                        && stderr.contains("latched")
                        && !self.proxies.is_empty() =>
                {
                    self.figures.latched += 1;
                    true
                }
                // --disk: a daemon (re)started inside a window cannot
                // claim its own rank directory and exits 1 saying why; it
                // is restarted like any dead daemon
                (None, None)
                    if disk
                        && p.kind == Kind::Daemon
                        && status.code() == Some(1)
                        && stderr.contains("cannot start the service")
                        && disk::refused(&stderr) =>
                {
                    if let Some(f) = &mut self.figures.disk {
                        f.refused_starts += 1;
                    }
                    true
                }
                // --disk: a producer whose stage, flush, open or release
                // met ENOSPC / EROFS (or the budget) and said so (also
                // if the scheduler's signal came after that exit)
                (_, None)
                    if disk
                        && p.kind != Kind::Daemon
                        && matches!(status.code(), Some(1 | 5))
                        && disk::refused(&stderr) =>
                {
                    if let Some(f) = &mut self.figures.disk {
                        f.refused_exits += 1;
                    }
                    true
                }
                // a paused holder killed after its release: still a kill
                (_, None) => status.success(),
                _ => false,
            };
            if !expected {
                let tail: String = stderr
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(" | ");
                let what = format!(
                    "{} (pid {}) exited unexpectedly: {status} (signalled: {:?}); stderr: {tail}",
                    self.name(i),
                    p.pid,
                    p.signalled
                );
                self.problem(what);
            }
        }
        dead_daemons
    }

    /// Times an exit: a stop (SIGTERM to exit) and an engine's close (its
    /// last durable pack to its exit, when it reported every pack), and
    /// records a wait past its bound as a problem.
    fn time_exit(&mut self, i: usize, status: ExitStatus) {
        let p = &self.procs[i];
        let Some(ended) = *p.ended.lock().unwrap_or_else(|e| e.into_inner()) else {
            return;
        };
        if std::os::unix::process::ExitStatusExt::signal(&status) == Some(9) {
            return; // killed: no stop, no close
        }
        if let (Some(term), Some("TERM")) = (p.term_at, p.signalled) {
            let took = ended.saturating_duration_since(term);
            self.figures.stops += 1;
            self.figures.longest_stop = self.figures.longest_stop.max(took);
            if took > STOP_BOUND {
                let reported = p.last_report.lock().unwrap_or_else(|e| e.into_inner()).0;
                let what = format!(
                    "{} (pid {}) took {:.2} s from SIGTERM to exit (bound {} s: stop_flush_timeout {STOP_FLUSH_TIMEOUT} + 3 s); \
                     it had reported {} of its {} pack(s) at SIGTERM, {reported} at exit",
                    self.name(i),
                    p.pid,
                    took.as_secs_f64(),
                    STOP_BOUND.as_secs(),
                    p.reported_at_term,
                    p.packs
                );
                self.problem(what);
            }
        }
        let (reported, last) = *p.last_report.lock().unwrap_or_else(|e| e.into_inner());
        if p.kind == Kind::Engine && p.signalled.is_none() && reported == p.packs {
            if let Some(last) = last {
                let took = ended.saturating_duration_since(last);
                let deadline = Duration::from_secs(ENGINE_TIMEOUT);
                let overrun = took.saturating_sub(deadline);
                self.figures.closes += 1;
                self.figures.longest_close = self.figures.longest_close.max(took);
                self.figures.longest_overrun = self.figures.longest_overrun.max(overrun);
                if overrun > OVERRUN_BOUND {
                    let what = format!(
                        "{} (pid {}) closed {:.2} s after its last pack: {:.2} s past its {ENGINE_TIMEOUT} s deadline (bound +{} s)",
                        self.name(i),
                        p.pid,
                        took.as_secs_f64(),
                        overrun.as_secs_f64(),
                        OVERRUN_BOUND.as_secs()
                    );
                    self.problem(what);
                }
            }
        }
    }

    fn spawn_daemon(&mut self, may_arm: bool) -> Result<()> {
        let kill_at = (may_arm && self.rng.chance(0.6)).then(|| {
            let point = *self.rng.pick(KILL_POINTS);
            format!("{point}:{}", 1 + self.rng.below(3))
        });
        let mut cmd = Command::new(&self.bin);
        if let Some(k) = &kill_at {
            cmd.args(["--kill-at", k]);
        }
        cmd.arg("run")
            .args(self.dest())
            .args(["--lease-ttl", LEASE_TTL, "--poll-interval", POLL])
            .args(["--recheck-interval", RECHECK, "--max-backoff", "1"]);
        self.spawn(Kind::Daemon, cmd, kill_at, None, None)
    }

    fn spawn_producer(&mut self) -> Result<()> {
        let r = self.rng.below(100);
        let kind = match r {
            0..=39 => Kind::Engine,
            40..=64 => Kind::SinkOnly,
            65..=84 => Kind::Holder,
            _ => Kind::Paused,
        };
        let packs = 3 + self.rng.below(13);
        let records = 4 + self.rng.below(13);
        // --disk: packs big enough that a few fill what the ballast left
        let pack_bytes = if self.disk.is_some() {
            16 * 1024 + self.rng.below(400 * 1024)
        } else {
            1024 + self.rng.below(15 * 1024)
        };
        let interval = self.rng.between(0.02, 0.3);
        let mut cmd = Command::new(&self.bin);
        let mut kill_at = None;
        let mut release = None;
        if kind == Kind::Engine && self.rng.chance(0.4) {
            let point = *self.rng.pick(KILL_POINTS);
            let k = format!("{point}:{}", 1 + self.rng.below(4));
            cmd.args(["--kill-at", &k]);
            kill_at = Some(k);
        }
        if kind == Kind::Paused {
            let file = self.dir.join(format!("release-{}", self.procs.len()));
            cmd.arg("--pause-before-publish").arg(&file);
            release = Some(file);
        }
        cmd.arg("produce")
            .args(self.dest())
            .args(["--packs", &packs.to_string()])
            .args(["--records", &records.to_string()])
            .args(["--pack-bytes", &pack_bytes.to_string()])
            .args(["--pack-interval", &format!("{interval:.3}")])
            .arg("--print-sha256");
        if self.rng.chance(0.4) {
            cmd.args(["--ordinal", &self.rng.below(4).to_string()]);
        }
        match kind {
            Kind::Engine => {
                cmd.args(["--serve", "--timeout", &ENGINE_TIMEOUT.to_string()]);
                cmd.args(["--lease-ttl", LEASE_TTL, "--poll-interval", POLL]);
                cmd.args(["--recheck-interval", RECHECK]);
            }
            // --disk: a flush deadline a full or read-only window can
            // outlast, so some producers fail and say why
            // (a holder's: its release flush, within the stop bound)
            Kind::Holder if self.disk.is_some() => {
                cmd.args(["--hold", "--timeout", "2"]);
            }
            Kind::SinkOnly if self.disk.is_some() => {
                let t = 2 + self.rng.below(5);
                cmd.args(["--timeout", &t.to_string()]);
            }
            Kind::Holder => {
                cmd.args(["--hold", "--timeout", "20"]);
            }
            Kind::Paused => {
                cmd.args(["--hold", "--timeout", "600"]);
            }
            _ => {
                cmd.args(["--timeout", "20"]);
            }
        }
        let expect = (kind == Kind::SinkOnly).then_some(packs);
        self.spawn(kind, cmd, kill_at, release, expect)?;
        if let Some(p) = self.procs.last_mut() {
            p.packs = packs;
        }
        Ok(())
    }

    fn spawn(
        &mut self,
        kind: Kind,
        mut cmd: Command,
        kill_at: Option<String>,
        release: Option<PathBuf>,
        expect: Option<u64>,
    ) -> Result<()> {
        let i = self.procs.len();
        let mut child = cmd
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let pid = child.id();
        if kind != Kind::Daemon {
            lock(&self.shared).owners.insert(
                i,
                Owner {
                    live: true,
                    check_lost: kind != Kind::Engine,
                    paused: kind == Kind::Paused,
                    expect,
                    pid,
                    what: match &kill_at {
                        Some(k) => format!("{kind:?} --kill-at {k}"),
                        None => format!("{kind:?}"),
                    },
                    ..Owner::default()
                },
            );
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let ended: Arc<Mutex<Option<Instant>>> = Arc::default();
        let last_report: Arc<Mutex<(u64, Option<Instant>)>> = Arc::default();
        let reader;
        {
            let (out, shared, last) = (
                child.stdout.take(),
                self.shared.clone(),
                last_report.clone(),
            );
            let stdout_reader = std::thread::spawn(move || {
                if let Some(mut out) = out {
                    if kind == Kind::Daemon {
                        let _ = std::io::copy(&mut out, &mut std::io::sink());
                    } else {
                        read_reports(out, i, &shared, &last);
                    }
                }
            });
            let (err, shared, buf, end) = (
                child.stderr.take(),
                self.shared.clone(),
                stderr.clone(),
                ended.clone(),
            );
            reader = std::thread::spawn(move || {
                if let Some(err) = err {
                    read_stderr(err, i, &shared, &buf);
                }
                *end.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            });
            self.stdout_readers.push(stdout_reader);
        }
        self.procs.push(Proc {
            kind,
            child,
            pid,
            kill_at,
            signalled: None,
            exit: None,
            stderr,
            stderr_reader: Some(reader),
            release,
            term_at: None,
            reported_at_term: 0,
            ended,
            packs: 0,
            last_report,
        });
        Ok(())
    }

    /// The oracle (see the module docs).
    fn oracle(&mut self) -> Result<()> {
        // the store: every object, by pack id
        let mut objects: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut contents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (key, bytes) in self.store_at.objects()? {
            let name = key.rsplit('/').next().unwrap_or_default();
            if let Some(id) = name.strip_suffix(".pack") {
                objects.entry(id.to_string()).or_default().push(key.clone());
                contents.entry(id.to_string()).or_insert(bytes);
            }
        }
        // the catalog, as read
        let out = Command::new(&self.bin)
            .args(["ls", "--json", "--catalog", &self.catalog_read])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .context("running spool ls")?;
        if !out.status.success() {
            self.problem(format!(
                "spool ls --catalog {} failed: {}",
                self.catalog_read,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut rows: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let row: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("a row of spool ls: {line}"))?;
            let id = row["pack_id"].as_str().unwrap_or_default().to_string();
            rows.entry(id).or_default().push(row);
        }
        let mut problems = Vec::new();
        let mut lost = 0;
        let mut duplicates = 0;
        // every object: valid, listed once with its size and checksum
        let mut object_sha = BTreeMap::new();
        for (id, paths) in &objects {
            if paths.len() > 1 {
                duplicates += 1;
                problems.push(format!(
                    "pack {id} is in the store {} times: {paths:?}",
                    paths.len()
                ));
            }
            let bytes = contents.get(id).map(Vec::as_slice).unwrap_or_default();
            match pack_checksum(bytes) {
                Some(sha) => {
                    object_sha.insert(id.clone(), (sha.clone(), bytes.len() as u64));
                }
                None => problems.push(format!(
                    "object {} does not validate (its trailer's SHA-256 is not its bytes')",
                    paths[0]
                )),
            }
            match rows.get(id).map(Vec::len) {
                None => problems.push(format!("object {} is in no catalog row", paths[0])),
                Some(1) => {}
                Some(n) => {
                    duplicates += 1;
                    problems.push(format!("pack {id} is indexed {n} times as read"));
                }
            }
        }
        // every row: its object there, same size and checksum
        for (id, rs) in &rows {
            let row = &rs[0];
            match object_sha.get(id) {
                None if !objects.contains_key(id) => problems.push(format!(
                    "catalog row {id} (object {}) has no object in the store",
                    row["object_key"]
                )),
                None => {}
                Some((sha, len))
                    if row["sha256"].as_str() != Some(sha.as_str())
                        || row["bytes"].as_u64() != Some(*len) =>
                {
                    problems.push(format!(
                        "catalog row {id} says sha256 {} bytes {}, its object has {sha} {len}",
                        row["sha256"], row["bytes"]
                    ));
                }
                Some(_) => {}
            }
        }
        // every reported pack: stored and indexed with the reported checksum
        let durable = lock(&self.shared).durable.clone();
        for (id, (sha, by)) in &durable {
            let stored = object_sha.get(id).map(|(s, _)| s);
            let indexed = rows
                .get(id)
                .and_then(|r| r[0]["sha256"].as_str().map(str::to_string));
            if stored != Some(sha) || indexed.as_ref() != Some(sha) {
                lost += 1;
                problems.push(format!(
                    "pack {id} (reported durable by {} with sha256 {sha}) is lost: stored {:?}, indexed {:?}",
                    self.name(*by),
                    stored,
                    indexed
                ));
            }
        }
        self.figures.unreported = objects
            .keys()
            .filter(|id| !durable.contains_key(*id))
            .count() as u64;
        // nothing left under the root but the key's empty directory
        let mut left = Vec::new();
        for key in read_dir(&self.root) {
            if !key.is_dir() {
                left.push(key);
                continue;
            }
            for entry in read_dir(&key) {
                let mut files = Vec::new();
                walk_files(&entry, &mut files);
                if files.is_empty() && entry.is_dir() {
                    files.push(entry);
                }
                left.extend(files);
            }
        }
        for l in &left {
            problems.push(format!("left under the spool root: {}", l.display()));
        }
        self.figures.lost = lost;
        self.figures.duplicates = duplicates;
        lock(&self.shared).problems.extend(problems);
        Ok(())
    }
}

/// The trailer checksum of a pack's bytes (hex) if it is right: the last
/// 32 bytes are the SHA-256 of everything before them.
fn pack_checksum(bytes: &[u8]) -> Option<String> {
    if bytes.len() < 72 {
        return None;
    }
    let (body, hash) = bytes.split_at(bytes.len() - 32);
    (Sha256::digest(body).as_slice() == hash).then(|| hex(hash))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A producer's stdout: `ID SHA256` per durable pack.
fn read_reports(
    out: impl Read,
    i: usize,
    shared: &Mutex<Shared>,
    last: &Mutex<(u64, Option<Instant>)>,
) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let mut parts = line.split_whitespace();
        let (Some(id), Some(sha)) = (parts.next(), parts.next()) else {
            continue;
        };
        {
            let mut l = last.lock().unwrap_or_else(|e| e.into_inner());
            *l = (l.0 + 1, Some(Instant::now()));
        }
        let mut s = lock(shared);
        if let Some((_, other)) = s.durable.get(id) {
            let other = *other;
            s.duplicates += 1;
            s.problems
                .push(format!("pack id {id} reported by #{other} and #{i}"));
        }
        s.durable.insert(id.to_string(), (sha.to_string(), i));
        if let Some(o) = s.owners.get_mut(&i) {
            o.reported += 1;
            // a sink-only producer's last pack: it lets go next
            if o.expect == Some(o.reported) {
                o.live = false;
            }
        }
    }
}

/// A process's stderr: kept (for reports), and the rank directory it
/// claimed noted for the monitor.
fn read_stderr(err: impl Read, i: usize, shared: &Mutex<Shared>, buf: &Mutex<String>) {
    for line in BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = line.strip_prefix("spool: rank directory ") {
            if let Some(o) = lock(shared).owners.get_mut(&i) {
                o.dir = Some(PathBuf::from(dir.trim()));
            }
        }
        let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() < 1 << 20 {
            b.push_str(&line);
            b.push('\n');
        }
    }
}

/// Digests every live owner's directory until `stop`, recording changes
/// only the owner may make.
fn monitor(shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let watched: Vec<(usize, PathBuf)> = lock(shared)
            .owners
            .iter()
            .filter(|(_, o)| o.live)
            .filter_map(|(i, o)| o.dir.clone().map(|d| (*i, d)))
            .collect();
        for (i, dir) in watched {
            let now = digest(&dir);
            let mut s = lock(shared);
            let Some(o) = s.owners.get_mut(&i) else {
                continue;
            };
            // dead since the digest began: whatever changed is not a touch
            if !o.live {
                continue;
            }
            let mut touched = Vec::new();
            if let Some(before) = &o.last {
                match &now {
                    None if o.check_lost => {
                        touched.push(format!("directory {} vanished", dir.display()))
                    }
                    None => {}
                    Some(now) => {
                        for (name, sig) in before {
                            let is_open = name.to_string_lossy().ends_with(".open");
                            match now.get(name) {
                                Some(n) if n != sig => touched.push(format!(
                                    "{} changed ({sig} -> {n})",
                                    dir.join(name).display()
                                )),
                                Some(_) => {}
                                None if is_open && !o.paused => {}
                                None if o.check_lost || is_open => touched
                                    .push(format!("{} disappeared", dir.join(name).display())),
                                None => {}
                            }
                        }
                    }
                }
            }
            let (pid, what) = (o.pid, o.what.clone());
            if now.is_some() {
                o.last = now;
            }
            // An owner that died by itself (an engine's kill point) may be
            // adopted before the scheduler reaps it: a change seen once it
            // is gone is no touch of a live owner's files.
            if !touched.is_empty() && !process_alive(pid) {
                o.live = false;
                continue;
            }
            if !touched.is_empty() {
                s.live_touched += touched.len() as u64;
                for t in touched {
                    s.problems.push(format!(
                        "live directory of #{i} {what} (pid {pid}, alive): {t}"
                    ));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(40));
    }
}

/// Looks at every dead owner's directory every 5 ms until `stop` (names
/// only, so a look is cheap and an adoption's drain is seen mid-way).
fn watch_adoptions(shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        watch_dead(shared);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One look at every dead owner's directory (names only): once an
/// adopter has removed one of its ready packs, no `.open` may be left in
/// it ([`opens`]).
fn watch_dead(shared: &Mutex<Shared>) {
    let dead: Vec<(usize, PathBuf)> = lock(shared)
        .owners
        .iter()
        .filter(|(_, o)| !o.live && !o.settled)
        .filter_map(|(i, o)| o.dir.clone().map(|d| (*i, d)))
        .collect();
    for (i, dir) in dead {
        let look = opens::look(&dir);
        let mut s = lock(shared);
        let Some(o) = s.owners.get_mut(&i) else {
            continue;
        };
        let pid = o.pid;
        let what = o.what.clone();
        match o.watch.see(pid, look) {
            opens::Seen::Nothing => {}
            opens::Seen::Gone => o.settled = true,
            opens::Seen::Swept { .. } => s.adoptions_swept += 1,
            opens::Seen::Outlived { pid: adopter, open } => {
                o.settled = true;
                let names: Vec<String> = open.iter().map(|f| f.display().to_string()).collect();
                s.problems.push(format!(
                    "a `.open` outlived its owner past one adoption: {} of dead #{i} {what} (pid {pid}) \
                     still holds {} after its adopter (pid {adopter} in the owner record) removed a ready pack or blocked it with none left: \
                     that adopter's recovery should have swept it",
                    dir.display(),
                    names.join(", ")
                ));
            }
        }
    }
}

/// Whether `pid` runs (exists and is not a zombie).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Reads the catalog (`spool ls --json`) over and over while the run goes
/// on: a row is only ever inserted after its object is durable, so every
/// row read must have its object already (rows are read first, objects
/// looked at after).
fn watch_catalog(
    bin: &Path,
    catalog: &str,
    store: &StoreAt,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(250));
        let Ok(out) = Command::new(bin)
            .args(["ls", "--json", "--catalog", catalog])
            .env("RUST_LOG", "off")
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        if !out.status.success() {
            continue; // not created yet, or busy: the next read tells
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(row) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(id), Some(key)) = (row["pack_id"].as_str(), row["object_key"].as_str())
            else {
                continue;
            };
            if !store.has(key) {
                let mut s = lock(shared);
                if s.early_rows.insert(id.to_string()) {
                    s.problems.push(format!(
                        "catalog row {id} was read while its object {key} was not in the store"
                    ));
                }
            }
        }
    }
}

/// Every file under `dir` (relative path → digest), or `None` if `dir`
/// is gone.
fn digest(dir: &Path) -> Option<BTreeMap<PathBuf, Sig>> {
    if !dir.is_dir() {
        return None;
    }
    let mut files = Vec::new();
    walk_files(dir, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let Ok(meta) = std::fs::symlink_metadata(&f) else {
            continue; // gone between the listing and now: next round says
        };
        let Ok(bytes) = std::fs::read(&f) else {
            continue;
        };
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        let rel = f.strip_prefix(dir).unwrap_or(&f).to_path_buf();
        out.insert(
            rel,
            Sig {
                size: meta.len(),
                mtime_ns,
                sha: Sha256::digest(&bytes).into(),
            },
        );
    }
    Some(out)
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Every non-directory under `dir`, recursively.
fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for p in read_dir(dir) {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => walk_files(&p, out),
            Ok(_) => out.push(p),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
