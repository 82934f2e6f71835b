//! `spool-fleet run`: the coordinator. It makes the run's database and
//! scratch directory, starts the host processes (a few, each running many
//! nodes; every node that will be killed in a host of its own), samples
//! `system.parts` every second, SIGKILLs and restarts the victims at random
//! times, stops production after the set minutes, waits for every node to
//! drain, runs the crash oracle and prints the report.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};

use crate::host::HostReport;
use crate::options::Options;
use crate::report::{ReplicaKill, Report, Sampled};
use crate::server::Server;

/// A host process and the nodes it runs.
struct Host {
    first: usize,
    count: usize,
    child: Child,
    stdin: Option<ChildStdin>,
}

/// What a host's standard output said.
enum Said {
    Up,
    Report(usize, Box<HostReport>),
    Gone(usize),
}

/// Runs the fleet; returns the report (its verdict decides the exit code)
/// and what to remove once it is out.
pub fn run(o: &Options) -> Result<(Report, Leftovers)> {
    let server = Server::from_url(&o.clickhouse)?;
    let version = server.version()?;
    // the replica to kill, checked before anything starts
    let replicas = match o.kill_replica {
        None => None,
        Some(r) => {
            let Some(all) = spool_tests::servers::replicas() else {
                bail!("--kill-replica {r}: no replicas described in the environment (run through cargo xtask fleet --replicas N)");
            };
            if r > all.len() {
                bail!("--kill-replica {r}: there are {} replicas", all.len());
            }
            Some(Arc::new(all))
        }
    };
    let database = format!("fleet_{}", std::process::id());
    let create = format!("CREATE DATABASE IF NOT EXISTS {database}");
    server.on_each(&create, Duration::from_secs(60))?;
    // The engines' catalog is their host's (one client per process), so
    // `catalog.cluster` must be in its URL too: without it the tables are
    // created on the first server alone and no insert asks for a quorum.
    let catalog_url = server.catalog_url(&database);
    let catalog_url = match o
        .settings
        .iter()
        .find_map(|s| s.strip_prefix("catalog.cluster="))
    {
        Some(cluster) => spool_catalog::CatalogUrl::with_cluster(&catalog_url, cluster)?,
        None => catalog_url,
    };
    let scratch = std::path::absolute(&o.scratch)?;
    // Two runs on one scratch directory would clear each other's live
    // spools: the first holds `<scratch>.lock` for its whole run.
    let lock_path = scratch.with_extension("lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        bail!(
            "another fleet run uses {} (it holds {})",
            scratch.display(),
            lock_path.display()
        );
    }
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("clearing {}", scratch.display()))?;
    }
    for d in ["nodes", "logs", "store"] {
        std::fs::create_dir_all(scratch.join(d))?;
    }
    let (store_url, store_dir) = match &o.store {
        Some((url, dir)) => (url.clone(), dir.clone()),
        None => (
            format!("file://{}", scratch.join("store").display()),
            scratch.join("store"),
        ),
    };
    // one schema install before a thousand engines race for it
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(spool_catalog::open(&catalog_url)?.ensure_schema())?;

    let (tx, rx) = mpsc::channel();
    let spawn = |first: usize, count: usize, idx: usize| -> Result<Host> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("host")
            .args(["--first", &first.to_string(), "--count", &count.to_string()])
            .args([
                "--ranks",
                &o.ranks.to_string(),
                "--rate",
                &o.rate.to_string(),
            ])
            .arg("--scratch")
            .arg(&scratch)
            .args(["--catalog", &catalog_url, "--store", &store_url])
            .args(["--phase-seed", &o.seed.to_string()])
            .args(["--drain-timeout", &o.drain_timeout.as_secs().to_string()])
            .args(["--ship", o.ship.as_str()]);
        for s in &o.settings {
            cmd.args(["--set", s]);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "error");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a host process")?;
        let out = child.stdout.take().expect("piped");
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line == "up" {
                    let _ = tx.send(Said::Up);
                } else if let Ok(r) = serde_json::from_str::<HostReport>(&line) {
                    let _ = tx.send(Said::Report(idx, Box::new(r)));
                }
            }
            let _ = tx.send(Said::Gone(idx));
        });
        let stdin = child.stdin.take();
        Ok(Host {
            first,
            count,
            child,
            stdin,
        })
    };

    // victims first, one node per host; the rest split over `processes`
    let mut groups: Vec<(usize, usize)> = (0..o.kill).map(|i| (i, 1)).collect();
    let rest = o.nodes - o.kill;
    let per = rest.div_ceil(o.processes).max(1);
    let mut next = o.kill;
    while next < o.nodes {
        let c = per.min(o.nodes - next);
        groups.push((next, c));
        next += c;
    }
    let started = Instant::now();
    let mut hosts = Vec::new();
    for (i, (first, count)) in groups.iter().enumerate() {
        hosts.push(spawn(*first, *count, i)?);
    }
    let mut up = 0;
    while up < hosts.len() {
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(Said::Up) => up += 1,
            Ok(Said::Gone(i)) => bail!(
                "host {i} (nodes {}..) exited while starting",
                hosts[i].first
            ),
            Ok(Said::Report(..)) => {}
            Err(_) => bail!("the hosts did not start within 300 s"),
        }
    }
    let startup = started.elapsed();
    eprintln!(
        "spool-fleet: {} host(s) up in {startup:.1?}; producing for {} min",
        hosts.len(),
        o.minutes
    );
    let load_start = load();
    let events0 = server.events()?;
    let cpu0 = o.server_pid.and_then(cpu_secs);
    let objects0 = count_objects(&store_dir);
    let window_start = Instant::now();

    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampled = Arc::new(Mutex::new(Sampled::default()));
    let sampler = {
        let (server, database, stop, sampled) = (
            server.clone(),
            database.clone(),
            stop_sampling.clone(),
            sampled.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                match server.parts(&database) {
                    Ok(parts) => sampled.lock().expect("sampled").add(&parts),
                    Err(e) => sampled.lock().expect("sampled").error(e.to_string()),
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
            }
        })
    };

    // kill times, spread over the middle of the run; the replica's kill
    // and restart among them
    let window = Duration::from_secs_f64(o.minutes * 60.0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let mut events: Vec<(Duration, Event)> = (0..o.kill)
        .map(|v| (window.mul_f64(rng.random_range(0.2..0.6)), Event::Node(v)))
        .collect();
    if let Some(r) = o.kill_replica {
        events.push((window.mul_f64(0.3), Event::ReplicaKill(r - 1)));
        events.push((window.mul_f64(0.6), Event::ReplicaStart(r - 1)));
    }
    events.sort_by_key(|(at, _)| *at);
    let mut killed = Vec::new();
    let mut replica_kill = o.kill_replica.map(|r| ReplicaKill {
        replica: r,
        ..ReplicaKill::default()
    });
    let healthy_at = Arc::new(Mutex::new(None));
    let mut health_watch = None;
    for (at, event) in events {
        sleep_until(window_start + at);
        let victim = match event {
            Event::Node(v) => {
                kill_node(&mut hosts, v, &window_start, &mut killed, &spawn)?;
                continue;
            }
            Event::ReplicaKill(i) | Event::ReplicaStart(i) => i,
        };
        let (Some(all), Some(rk)) = (&replicas, &mut replica_kill) else {
            bail!("replica {} to kill, but no replicas", victim + 1);
        };
        match event {
            Event::Node(_) => {}
            Event::ReplicaKill(i) => {
                all.kill(i);
                rk.killed_at = window_start.elapsed().as_secs_f64();
                eprintln!(
                    "spool-fleet: replica {} SIGKILLed at {:.1} s",
                    i + 1,
                    rk.killed_at
                );
            }
            Event::ReplicaStart(i) => {
                all.start(i);
                rk.restarted_at = window_start.elapsed().as_secs_f64();
                eprintln!(
                    "spool-fleet: replica {} started again at {:.1} s",
                    i + 1,
                    rk.restarted_at
                );
                // healthy: writable, every peer active, nothing left to fetch
                let (all, healthy_at) = (all.clone(), healthy_at.clone());
                health_watch = Some(std::thread::spawn(move || {
                    let until = Instant::now() + Duration::from_secs(600);
                    while Instant::now() < until {
                        if all.is_healthy(i) {
                            *healthy_at.lock().expect("healthy_at") =
                                Some(window_start.elapsed().as_secs_f64());
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }));
            }
        }
    }
    sleep_until(window_start + window);
    let events1 = server.events()?;
    let server_cpu_secs = o
        .server_pid
        .and_then(cpu_secs)
        .zip(cpu0)
        .map(|(b, a)| b - a);
    let window_secs = window_start.elapsed().as_secs_f64();
    let objects_put = count_objects(&store_dir).saturating_sub(objects0);
    let load_end = load();

    eprintln!("spool-fleet: stopping production; draining");
    let drain_start = Instant::now();
    for h in &mut hosts {
        if let Some(mut s) = h.stdin.take() {
            let _ = s.write_all(b"stop\n");
        }
    }
    let mut reports: Vec<Option<HostReport>> = vec![None; hosts.len()];
    let mut done = vec![false; hosts.len()];
    let deadline = Instant::now() + o.drain_timeout + Duration::from_secs(60);
    while done.iter().any(|d| !d) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Said::Report(i, r)) => {
                reports[i] = Some(*r);
                done[i] = true;
            }
            // a victim's old process says so too: only an exit counts
            Ok(Said::Gone(i)) => done[i] |= matches!(hosts[i].child.try_wait(), Ok(Some(_))),
            Ok(Said::Up) => {}
            Err(_) => break,
        }
    }
    for h in &mut hosts {
        let _ = h.child.kill();
        let _ = h.child.wait();
    }
    let drain_secs = drain_start.elapsed().as_secs_f64();
    stop_sampling.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    // a replica not healthy by now is reported so (the watch goes on
    // alone until the process ends)
    drop(health_watch);
    if let Some(rk) = &mut replica_kill {
        rk.healthy_at = *healthy_at.lock().expect("healthy_at");
    }
    let missing_reports = reports.iter().filter(|r| r.is_none()).count();

    eprintln!("spool-fleet: drained in {drain_secs:.1} s; checking");
    let verdict = crate::oracle::check(&scratch, &store_dir, &catalog_url, &server, &database)?;
    let report = Report::new(
        o,
        crate::report::Run {
            version,
            startup_secs: startup.as_secs_f64(),
            window_secs,
            drain_secs,
            load_start,
            load_end,
            events0,
            events1,
            killed,
            missing_reports,
            server_cpu_secs,
            objects_put,
            replica_kill,
        },
        reports.into_iter().flatten().collect(),
        std::mem::take(&mut *sampled.lock().expect("sampled")),
        verdict,
    );
    Ok((
        report,
        Leftovers {
            server,
            database,
            scratch,
            keep: o.keep,
        },
    ))
}

/// What a run leaves behind until [`Leftovers::remove`].
pub struct Leftovers {
    server: Server,
    database: String,
    scratch: PathBuf,
    keep: bool,
}

impl Leftovers {
    /// Removes the scratch directory and drops the run's database (unless
    /// `--keep`). The drop is sent once and not waited for long: 18.16 may
    /// take minutes to drop tables it is still merging, and finishes on
    /// its own.
    pub fn remove(self) {
        if self.keep {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
        let drop = format!("DROP DATABASE IF EXISTS {}", self.database);
        if let Err(e) = self.server.on_each(&drop, Duration::from_secs(10)) {
            eprintln!(
                "spool-fleet: {} not dropped yet ({e:#}); the server goes on dropping it",
                self.database
            );
        }
    }
}

/// What happens at a time of the window.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// The victim host of node group `v` is SIGKILLed and restarted.
    Node(usize),
    /// Replica `i` (0-based) is SIGKILLed.
    ReplicaKill(usize),
    /// Replica `i` is started again.
    ReplicaStart(usize),
}

/// SIGKILLs the victim host `victim` and starts it again a second later
/// on the same roots.
fn kill_node(
    hosts: &mut [Host],
    victim: usize,
    window_start: &Instant,
    killed: &mut Vec<(f64, usize)>,
    spawn: &dyn Fn(usize, usize, usize) -> Result<Host>,
) -> Result<()> {
    let h = &mut hosts[victim];
    h.child.kill().context("SIGKILL of a victim host")?;
    let _ = h.child.wait();
    killed.push((window_start.elapsed().as_secs_f64(), h.first));
    std::thread::sleep(Duration::from_secs(1));
    let (first, count) = (h.first, h.count);
    *h = spawn(first, count, victim)?;
    Ok(())
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// CPU seconds (user + system) process `pid` used so far.
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, in clock ticks (USER_HZ, 100 on Linux)
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The 1-minute load average (`/proc/loadavg`), as `uptime` shows it.
fn load() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Objects in the store's directory `dir` (each `.pack` or `.bundle` file:
/// one per PUT).
fn count_objects(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name();
            let object = [".pack", ".bundle"]
                .iter()
                .any(|s| name.to_string_lossy().ends_with(s));
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(_) if object => n += 1,
                _ => {}
            }
        }
    }
    n
}
