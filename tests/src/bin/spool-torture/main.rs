//! `spool-torture`: the seeded crash, fault, disk and two-node torture with
//! an oracle (RELIABILITY.md "Crash torture"), run by `cargo xtask torture`
//! (which builds this binary with `spool-with-seams` and `fault-proxy`
//! beside it, starts the servers a variant needs, and runs it) and by the
//! CI passes of `cargo xtask test`.
//!
//! ```text
//! spool-torture [--seed S] [--minutes M] [--runs N] [--run-secs S]
//!               [--store file|s3] [--catalog sqlite|clickhouse]
//!               [--faults|--no-faults] [--disk [--tmpfs-mib N] [--no-ro]]
//!               [--keep] [--bin PATH] [--spool PATH]
//! spool-torture --lease-netns [--replicas] [--seed S] [--minutes M] [--spool PATH]
//! spool-torture ci | ci-disk | ci-faults | ci-lease-netns | ci-lease-netns-replicas
//! ```
//!
//! It links the product: packs are validated by spool-core's
//! `pack::validate_bytes`, the catalog is read through spool-catalog, the
//! store through object_store, and the kill points a process is armed at
//! are spool-core's `seams::KILL_POINTS`. A process armed at a kill point
//! or paused runs `spool-with-seams` (`--bin`); every other one runs the
//! `spool` that ships (`--spool`, else `$SPOOL_BIN`, which `cargo xtask
//! test` sets to a `spool` built without test seams, else the one beside
//! this binary).
//!
//! - [`crash`]: one seeded run of real `spool` processes on one spool root,
//!   SIGKILLed at random and at the kill points ([`monitor`] watches live
//!   owners' directories, [`opens`] the `.open` rule, [`oracle`] judges the
//!   end state);
//! - [`destination`]: the store and catalog of a run, as the oracle reads
//!   them (a `file://` store or moto, SQLite or ClickHouse);
//! - [`faults`]: the fault proxies in front of moto and ClickHouse;
//! - [`disk`]: the spool root on a tmpfs that fills up and turns read-only;
//! - [`netns`]: two nodes in network namespaces under one catalog lease,
//!   on one ClickHouse or on three replicas of which one at a time is
//!   killed or stalled;
//! - [`figures`]: what runs measured, summed, and the summary line.
//!
//! The servers (`--store s3`, `--catalog clickhouse`) are the ones `cargo
//! xtask servers up` prints (`SPOOL_TEST_S3_*`, `SPOOL_TEST_CLICKHOUSE_*`);
//! `cargo xtask torture` starts them when that environment is not set. The
//! two-node pass starts a ClickHouse of its own on its bridge's address
//! through `$SPOOL_TORTURE_XTASK servers clickhouse --listen ADDR`.
#![forbid(unsafe_code)]

mod crash;
mod destination;
mod disk;
mod faults;
mod figures;
mod monitor;
mod netns;
mod opens;
mod oracle;
mod plants;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use figures::Figures;

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
/// [`CATALOG_REQUEST_TIMEOUT`] in milliseconds.
const CATALOG_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// The destination's orphan grace: four catalog request bounds, the least
/// a prefix record accepts.
const ORPHAN_GRACE: &str = "20s";

/// How long CI's two-node lease pass injects link faults.
const CI_LEASE_NETNS_SECS: f64 = 20.0;

/// What the torture was asked.
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
    /// The `spool-with-seams` binary the runs start for processes armed
    /// at a kill point or paused (`fault-proxy` is taken from beside it).
    pub bin: PathBuf,
    /// The `spool` binary every other process runs: the one that ships.
    pub spool: PathBuf,
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

impl Options {
    /// A single run of `run_secs` of `seed` on a `file://` store and SQLite.
    fn one_run(seed: u64, run_secs: f64) -> Result<Options> {
        Ok(Options {
            seed,
            minutes: None,
            runs: Some(1),
            run_secs,
            keep: false,
            bin: beside_me("spool-with-seams")?,
            spool: shipped_spool()?,
            s3: false,
            clickhouse: false,
            faults: false,
            disk: None,
        })
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("ci-disk") => ci_disk(),
        Some("ci-faults") => ci_faults(),
        Some(pass @ ("ci-lease-netns" | "ci-lease-netns-replicas")) => {
            let replicas = pass.ends_with("replicas").then_some(netns::REPLICAS);
            netns::lease_netns(
                &shipped_spool()?,
                seed_of_the_day(),
                CI_LEASE_NETNS_SECS,
                replicas,
            )?;
            Ok(())
        }
        _ => torture_cmd(&args),
    }
}

/// `cargo xtask torture ARGS`.
fn torture_cmd(args: &[String]) -> Result<()> {
    let mut o = Options::one_run(seed_from_clock(), 20.0)?;
    o.runs = None;
    let mut faults = None;
    let mut lease_netns = false;
    let mut replicas = None;
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
            "--replicas" => replicas = Some(netns::REPLICAS),
            "--bin" => o.bin = value("--bin")?.into(),
            "--spool" => o.spool = value("--spool")?.into(),
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
                 | --lease-netns [--replicas] [--seed S] [--minutes M]"
            ),
        }
    }
    if lease_netns {
        let secs = o.minutes.map_or(45.0, |m| m * 60.0);
        netns::lease_netns(&o.spool, o.seed, secs, replicas)?;
        return Ok(());
    }
    o.faults = faults.unwrap_or(o.s3 || o.clickhouse);
    if let Some(d) = &mut o.disk {
        d.read_only = read_only;
        if !disk::in_namespace() {
            // the tmpfs is mounted in a private mount namespace of its own
            let all: Vec<String> = args
                .iter()
                .cloned()
                .chain(["--seed".to_string(), o.seed.to_string()])
                .collect();
            return disk::reexec(&all);
        }
    }
    if o.faults && !o.s3 && !o.clickhouse {
        bail!("--faults needs a real server to put the proxy in front of: --store s3 and/or --catalog clickhouse");
    }
    let figures = runs(&o)?;
    eprintln!("torture: {}", figures.line());
    Ok(())
}

/// CI's short pass (`cargo xtask test`): seed 1 and the date's, 12 s of
/// production each (about 40 s in all).
fn ci() -> Result<()> {
    let mut total = Figures::default();
    for seed in [1, seed_of_the_day()] {
        total.add(&runs(&Options::one_run(seed, 12.0)?)?);
    }
    eprintln!("torture: {}", total.line());
    Ok(())
}

/// CI's short disk pass (`cargo xtask test`): one 10 s run of the day's
/// seed with the spool root on a 32 MiB tmpfs that fills and turns
/// read-only ([`disk`]); skipped, saying why, when not root, and failed
/// then under `SPOOL_REQUIRE_ALL=1` ([`spool_tests::required`]), as CI sets.
fn ci_disk() -> Result<()> {
    if let Some(why) = disk::unavailable() {
        eprintln!("torture --disk: SKIPPED: {why}");
        spool_tests::required(false, "root (torture --disk)");
        return Ok(());
    }
    let seed = seed_of_the_day().to_string();
    let args = ["--disk", "--runs", "1", "--run-secs", "10", "--seed", &seed];
    disk::reexec(&args.map(str::to_string))
}

/// CI's short fault pass (`cargo xtask test`, after the real tier, with its
/// servers in the environment): one run of the day's seed against moto +
/// ClickHouse through the fault proxies, 20 s of production (about 40 s in
/// all).
fn ci_faults() -> Result<()> {
    let o = Options {
        s3: true,
        clickhouse: true,
        faults: true,
        ..Options::one_run(seed_of_the_day(), 20.0)?
    };
    let figures = runs(&o)?;
    eprintln!("torture (faults): {}", figures.line());
    Ok(())
}

/// A binary built beside this one (`spool-with-seams`, `fault-proxy`).
fn beside_me(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding the spool-torture binary")?;
    Ok(me.with_file_name(name))
}

/// The `spool` that ships: `$SPOOL_BIN` (`spool_tests::SPOOL_BIN`, which
/// `cargo xtask test` sets), else the one beside this binary.
fn shipped_spool() -> Result<PathBuf> {
    match std::env::var_os(spool_tests::SPOOL_BIN).filter(|v| !v.is_empty()) {
        Some(bin) => Ok(bin.into()),
        None => beside_me("spool"),
    }
}

/// The cargo target directory this binary was built into (its runs'
/// directories are under `TARGET/xtask/`).
fn target_dir() -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding the spool-torture binary")?;
    me.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not in TARGET/PROFILE/", me.display()))
}

/// A seed from the clock (printed, so any run can be repeated).
fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}

/// Today's date as a number (`YYYYMMDD`, UTC): CI's seed of the day.
fn seed_of_the_day() -> u64 {
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
fn runs(o: &Options) -> Result<Figures> {
    let remote = destination::Remote::from_env(o)?;
    let work = target_dir()?.join("xtask/torture");
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
        let (figures, problems) = crash::Run::new(seed, &dir, o, &remote)?.go()?;
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

/// The port of `127.0.0.1:PORT` (or of an `http://127.0.0.1:PORT` URL).
fn port_of(addr: &str) -> Result<u16> {
    addr.trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| format!("{addr} is not IP:PORT"))
}

/// splitmix64: small, seedable, good enough to pick actions.
struct Rng(u64);

impl Rng {
    /// The next number.
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    /// A number in `[lo, hi)`.
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// One of `items`.
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The entries of `dir`, sorted (none if it cannot be read).
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

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 (hex) of a pack's bytes, from its trailer, if spool-core's
/// validator takes the pack whole (framing, footer, trailer, hash).
fn pack_checksum(bytes: &[u8]) -> Option<String> {
    spool_core::pack::validate_bytes(bytes, None)
        .ok()
        .map(|s| hex(&s.sha256))
}

#[cfg(test)]
mod tests;
