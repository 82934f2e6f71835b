//! One seeded crash run (RELIABILITY.md "Crash torture").
//!
//! Each run works on one spool root (`<work>/spool`, the layout
//! `root/<catalog key>/r<rank>-<inc>/`) with one destination (a `file://`
//! store and an SQLite catalog beside the root, outside it; or moto and
//! ClickHouse, [`crate::destination`], through [`crate::faults`]' proxies).
//! A seeded scheduler starts real `spool` processes — those armed at a kill
//! point or paused through the test helper `spool-with-seams`, the others
//! through the `spool` that ships (both copied into the run's directory
//! first, so another build cannot swap them mid-run):
//! - engine producers (`produce --serve`), some with a worker ordinal, some
//!   armed to SIGKILL themselves at a kill point (`--kill-at NAME:N`, a
//!   name of spool-core's `seams::KILL_POINTS`);
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
//! runs a final `spool run --once`. Every run times each engine close (its
//! last durable pack to its exit; bound: its deadline + 2 s) and each stop
//! (SIGTERM to exit; bound 5 s) and fails past them.
//!
//! While it runs, [`crate::monitor`]'s threads watch live owners'
//! directories (the owner of a directory is marked dead *before* the
//! scheduler signals it, so an adopter's work after that is never mistaken
//! for a touch), dead owners' `.open` files and the catalog; after it,
//! [`crate::oracle`] judges the store, the catalog and what every producer
//! reported durable; no unexpected exit is allowed (a quarantined or
//! rejected pack is a failure: none is injected).

use anyhow::{Context, Result};
use spool_core::seams::{HAND_OFF_POINTS, KILL_POINTS, OWNER_POINTS};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::destination::{self, Catalog, Remote, StoreAt};
use crate::figures::Figures;
use crate::monitor::{self, Board, Owner};
use crate::{
    disk, faults, oracle, read_dir, walk_files, Options, Rng, CATALOG_REQUEST_TIMEOUT,
    CLIENT_REQUEST_TIMEOUT, ENGINE_TIMEOUT, LEASE_TTL, ORPHAN_GRACE, OVERRUN_BOUND, POLL, RECHECK,
    STAGING_MAX_AGE, STOP_BOUND, STOP_FLUSH_TIMEOUT,
};
/// A random action of the scheduler: its chance per tick, whom it picks
/// from, and the signal it sends (`None`: release a paused stage).
type Action = (f64, fn(Kind) -> bool, Option<&'static str>);

/// What a process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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

/// One seeded run.
pub struct Run {
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
    /// The catalog as the oracle reads it (never through a proxy).
    catalog_read: Catalog,
    /// The environment every process of the run gets.
    env: Vec<(String, String)>,
    /// `--faults`: the proxies.
    proxies: Vec<faults::FaultProxy>,
    /// A ClickHouse database made for the run (its catalog URL): dropped
    /// after a passing run.
    database: Option<String>,
    /// `spool-with-seams`: a process armed at a kill point or paused.
    bin: PathBuf,
    /// The `spool` that ships: every other process.
    spool: PathBuf,
    run_secs: f64,
    /// How many daemons run at once.
    daemons: usize,
    /// `--disk`: the run's tmpfs (the spool root is on it).
    disk: Option<disk::Disk>,
    /// The threads reading producers' reports (joined before the oracle).
    stdout_readers: Vec<std::thread::JoinHandle<()>>,
    procs: Vec<Proc>,
    /// Entries planted in the spool root, and the victim outside it.
    plants: crate::plants::Plants,
    shared: Board,
    figures: Figures,
}

impl Run {
    /// Prepares the run of `seed` in `dir` (its copy of the binaries, its
    /// spool root, its proxies and database).
    pub fn new(seed: u64, dir: &Path, o: &Options, remote: &Remote) -> Result<Run> {
        let bin = &o.bin;
        let store_dir = dir.join("store");
        for d in [&store_dir, &dir.join("bin")] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        for (from, to) in [(bin, "bin/spool-with-seams"), (&o.spool, "bin/spool")] {
            std::fs::copy(from, dir.join(to))
                .with_context(|| format!("copying {} (built?)", from.display()))?;
        }
        let dir = dir.canonicalize()?;
        let plants = crate::plants::Plants::new(&dir)?;
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
            if let Some((endpoint, _)) = &remote.s3 {
                let port = crate::port_of(endpoint)?;
                proxies.push(faults::FaultProxy::start(&own, "s3", port)?);
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
            (
                "RUST_LOG".into(),
                // the sink at debug whatever the level: every stage it gave
                // up is a line (`gave_up_stage`), not only the first of a minute
                format!(
                    "{},spool_core::sink=debug",
                    std::env::var("SPOOL_TORTURE_LOG").unwrap_or_else(|_| "warn".into())
                ),
            ),
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
            Some((direct, bucket)) => {
                let endpoint = format!("http://127.0.0.1:{}", via("s3", crate::port_of(direct)?));
                for (k, v) in [
                    ("AWS_ENDPOINT", endpoint.as_str()),
                    ("AWS_ALLOW_HTTP", "true"),
                    ("AWS_REGION", "us-east-1"),
                    ("AWS_ACCESS_KEY_ID", "spool-test"),
                    ("AWS_SECRET_ACCESS_KEY", "spool-test"),
                    // the least the catalog's request bound allows (4 ×):
                    // the sweep at the end waits it out
                    ("SPOOL_UPLOAD_ORPHAN_GRACE", ORPHAN_GRACE),
                ] {
                    env.push((k.into(), v.into()));
                }
                (
                    format!("s3://{bucket}/{tag}"),
                    StoreAt::s3(direct, bucket, &tag),
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
                let direct = format!("clickhouse://127.0.0.1:{port}/{db}");
                destination::fresh_database(&direct)?;
                (
                    format!("clickhouse://127.0.0.1:{}/{db}", via("clickhouse", port)),
                    Catalog::open(&direct)?,
                    Some(direct),
                )
            }
            None => {
                let c = format!("sqlite://{}", dir.join("catalog.db").display());
                (c.clone(), Catalog::open(&c)?, None)
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
            spool: dir.join("bin/spool"),
            dir,
            run_secs: o.run_secs,
            daemons: 2,
            stdout_readers: Vec::new(),
            procs: Vec::new(),
            plants,
            shared: Board::default(),
            figures: Figures {
                disk: o.disk.map(|_| disk::DiskFigures::default()),
                ..Figures::default()
            },
        })
    }

    fn problem(&self, p: String) {
        self.shared.problem(p);
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

    /// Runs it: the schedule, the drain, the oracle; returns its figures
    /// and the rules it broke.
    pub fn go(mut self) -> Result<(Figures, Vec<String>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let monitor = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            std::thread::spawn(move || monitor::monitor(&shared, &stop))
        };
        let adoptions = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            std::thread::spawn(move || monitor::watch_adoptions(&shared, &stop))
        };
        let watch = {
            let (shared, stop) = (self.shared.clone(), stop.clone());
            let (catalog, store) = (self.catalog_read.clone(), self.store_at.clone());
            std::thread::spawn(move || monitor::watch_catalog(&catalog, &store, &shared, &stop))
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
        self.keep_logs();
        self.judge_paused_opens();
        let durable: std::collections::BTreeMap<String, (String, String)> = self
            .shared
            .durable()
            .iter()
            .map(|(id, (sha, by))| (id.clone(), (sha.clone(), self.name(*by))))
            .collect();
        if let Some(p) = self.plants.check() {
            self.shared.problem(p);
        }
        self.figures.plants = self.plants.count();
        let verdict = oracle::judge(&self.store_at, &self.catalog_read, &durable, &self.root)?;
        self.figures.unreported = verdict.unreported;
        self.figures.lost = verdict.lost;
        self.figures.duplicates = verdict.duplicates;
        self.figures.orphaned_bytes = verdict.orphaned_bytes;
        self.figures.orphan_bundles = verdict.orphan_bundles.len() as u64;
        let swept = oracle::sweep_and_rejudge(
            &self.store_at,
            (&self.catalog_read, &self.catalog),
            &durable,
            &self.root,
            &verdict,
        )?;
        self.shared.problems(verdict.problems);
        self.shared.problems(swept);
        // a handed-off pack leaves its live owner only once its row is
        // confirmed: whatever the monitor saw go must be indexed
        let indexed: std::collections::BTreeSet<String> = self
            .catalog_read
            .rows()?
            .into_iter()
            .map(|r| r.pack_id)
            .collect();
        for (id, seen) in self.shared.handed_off_gone() {
            if !indexed.contains(&id) {
                self.shared
                    .problem(format!("{seen}, and pack {id} is not indexed"));
            }
        }
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
            if self.shared.failed() {
                d.keep(&self.dir.join("spool-left"));
            }
            if let Some(f) = &mut self.figures.disk {
                f.add(&d.figures);
            }
            d.unmount(&mut self.rng)?;
        }
        if !self.shared.failed() {
            if let Some(url) = &self.database {
                let _ = destination::drop_database(url);
            }
        }
        let mut figures = self.figures.clone();
        figures.runs = 1;
        let problems = self.shared.tally(&mut figures);
        Ok((figures, problems))
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
            self.plants.tick(&mut self.rng, &self.root);
            if let Some(p) = self.plants.check() {
                self.shared.problem(p);
            }
        }
        for p in &mut self.proxies {
            p.tick(true)?;
        }
        self.shared.set_fault_open(false);
        // the drain has room and a writable spool
        if let Some(d) = &mut self.disk {
            d.tick(&mut self.rng, true)?;
        }
        // (once the spool is writable again: a read-only window would
        // keep them)
        self.plants.remove(&self.spool);
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
        // hand-offs the monitor sees meanwhile ran through the window
        self.shared
            .set_fault_open(self.proxies.iter().any(faults::FaultProxy::busy));
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
        let out = Command::new(&self.spool)
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
                if rank.ends_with(spool_core::handoff::SHIPPED_DIR) {
                    continue; // the daemons' confirmations, not a rank directory
                }
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
        self.shared.owner_gone(i);
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
        self.shared.unpaused(i);
        if let Some(r) = self.procs[i].release.take() {
            let _ = std::fs::write(r, b"");
        }
    }

    /// A paused owner's `.open` may go only by its own hand: a stage whose
    /// write failed (the disk full) and which it gave up, naming that temp
    /// file in its log ("staging pack … failed (will retry): write <path>").
    fn judge_paused_opens(&self) {
        for (i, path) in self.shared.paused_opens_gone() {
            let p = &self.procs[i];
            let log = p.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if !gave_up_stage(&log, &path) {
                self.shared.live_touched(format!(
                    "live directory of #{i} {:?} (pid {}): {} disappeared, and its owner gave up no stage there",
                    p.kind,
                    p.pid,
                    path.display()
                ));
            }
        }
    }

    /// Each process's stderr, as `logs/<n>-<kind>-<pid>.log` in the run's
    /// directory (kept when the run fails; `SPOOL_TORTURE_LOG=info` for more).
    fn keep_logs(&mut self) {
        for p in &mut self.procs {
            if let Some(reader) = p.stderr_reader.take() {
                let _ = reader.join();
            }
        }
        let logs = self.dir.join("logs");
        let _ = std::fs::create_dir_all(&logs);
        for (i, p) in self.procs.iter().enumerate() {
            let text = p.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let name = format!("{i}-{:?}-{}.log", p.kind, p.pid);
            let _ = std::fs::write(logs.join(name), text);
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
            self.shared.owner_gone(i);
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

    /// Starts a daemon; `may_arm`: maybe armed at a service's kill point
    /// (the run's first two daemons, its likely first shippers, at the
    /// shipper's two hand-off steps, one each, the order the seed's; later
    /// ones 60 %, half of those at one of the shipper's).
    fn spawn_daemon(&mut self, may_arm: bool) -> Result<()> {
        let nth = self.procs.iter().filter(|p| p.kind == Kind::Daemon).count();
        let first = nth < 2;
        let shipper: Vec<&str> = HAND_OFF_POINTS
            .iter()
            .filter(|p| !OWNER_POINTS.contains(p))
            .copied()
            .collect();
        let service: Vec<&str> = KILL_POINTS
            .iter()
            .filter(|p| !HAND_OFF_POINTS.contains(p))
            .copied()
            .collect();
        let kill_at = (may_arm && (first || self.rng.chance(0.6))).then(|| {
            let point = if first {
                shipper[(nth + self.seed as usize) % shipper.len()]
            } else if self.rng.chance(0.5) {
                *self.rng.pick(&shipper)
            } else {
                *self.rng.pick(&service)
            };
            format!("{point}:{}", 1 + self.rng.below(3))
        });
        let mut cmd = match &kill_at {
            Some(k) => {
                let mut cmd = Command::new(&self.bin);
                cmd.args(["--kill-at", k]);
                cmd
            }
            None => Command::new(&self.spool),
        };
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
        // the seams' options lead; with none, the `spool` that ships
        let mut seams: Vec<String> = Vec::new();
        let mut kill_at = None;
        let mut release = None;
        if kind == Kind::Engine && self.rng.chance(0.4) {
            // a service's points (an engine holding the node's lease is
            // its shipper too)
            let service: Vec<&str> = KILL_POINTS
                .iter()
                .filter(|p| !OWNER_POINTS.contains(p))
                .copied()
                .collect();
            let point = *self.rng.pick(&service);
            let k = format!("{point}:{}", 1 + self.rng.below(4));
            seams.extend(["--kill-at".into(), k.clone()]);
            kill_at = Some(k);
        }
        // a live sink-only owner hands its packs off: its own steps
        if matches!(kind, Kind::Holder | Kind::SinkOnly) && self.rng.chance(0.5) {
            let point = *self.rng.pick(OWNER_POINTS);
            let k = format!("{point}:{}", 1 + self.rng.below(3));
            seams.extend(["--kill-at".into(), k.clone()]);
            kill_at = Some(k);
        }
        if kind == Kind::Paused {
            let file = self.dir.join(format!("release-{}", self.procs.len()));
            seams.extend(["--pause-before-publish".into(), file.display().to_string()]);
            release = Some(file);
        }
        let mut cmd = Command::new(if seams.is_empty() {
            &self.spool
        } else {
            &self.bin
        });
        cmd.args(&seams)
            .arg("produce")
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
            let what = match &kill_at {
                Some(k) => format!("{kind:?} --kill-at {k}"),
                None => format!("{kind:?}"),
            };
            let owner = Owner::new(
                pid,
                what,
                kind != Kind::Engine,
                kind == Kind::Paused,
                expect,
            );
            self.shared.add_owner(i, owner);
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
                        monitor::read_reports(out, i, &shared, &last);
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
                    monitor::read_stderr(err, i, &shared, &buf);
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
}

/// Whether a producer's `log` says it gave up the stage written to `open`
/// (its write failed, the sink retries with a new temp file): a line at
/// `warn` or, for all but the first of a minute (`spool_core::throttle`),
/// at `debug`, which the producers' `RUST_LOG` keeps for the sink.
pub(crate) fn gave_up_stage(log: &str, open: &Path) -> bool {
    let needle = format!(": write {}: ", open.display());
    log.lines()
        .any(|l| l.contains("failed (will retry)") && l.contains(&needle))
}
