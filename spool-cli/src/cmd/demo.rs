//! `spool demo`: the whole product on one machine, in a minute, with real
//! processes and nothing to install, in a scratch directory (removed at the
//! end unless `--keep`) on the embedded store and catalog:
//!
//! 1. The node's daemon starts (`spool run`), then `--ranks` sink-only
//!    producers as child processes (`spool produce --rank K`): each hands
//!    every pack it stages to the daemon, which ships and confirms it while
//!    the producer lives. All but the victim exit once every pack is
//!    confirmed.
//! 2. Once the victim (ten times the packs, so that it is still staging
//!    however long the others take to exit) has staged `--packs`, the daemon
//!    stops (SIGTERM); the victim hands off a few more that nobody
//!    confirms and is SIGKILLed: a dead sibling holding them.
//! 3. `spool run --once` adopts that directory, ships it and removes it.
//! 4. Every id a producer reported is read back as `spool cat` reads it
//!    (row, object, checksum). The table counts packs produced, uploaded,
//!    indexed, handed off, adopted, left in a spool and **lost**; exit 0
//!    only if nothing was lost and the daemon drained.
//!
//! Progress: a bar per producer and one for the daemon on a terminal,
//! plain lines otherwise; `--json` prints the result as one JSON object.

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use spool_core::PackId;
use spool_service::fetch::fetch_pack;
use spool_service::Error;

use crate::exit::ExitCode;

/// Arguments of `spool demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to run (a fresh subdirectory is made there); default: the
    /// system's temp directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the scratch directory (store, catalog, logs) afterwards.
    #[arg(long)]
    pub keep: bool,
    /// How many producer ranks (one of them is SIGKILLed).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=32))]
    pub ranks: u64,
    /// Packs each producer stages.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(2..))]
    pub packs: u64,
    /// Approximate bytes per pack.
    #[arg(long, default_value_t = 64 * 1024)]
    pub pack_bytes: u64,
    /// Seconds between a producer's packs.
    #[arg(long, default_value_t = 0.02, value_name = "SECS")]
    pub pack_interval: f64,
    /// How long the daemon may take to drain, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub timeout: u64,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The lease TTL every child uses: short, so a dead holder's lease is
/// waited out in seconds (5 s is the shortest that leaves room for the fence margin).
const DEMO_LEASE_TTL: &str = "5";

/// What one producer did.
#[derive(Debug, Default, Clone)]
struct Rank {
    ids: Vec<String>,
    dir: Option<PathBuf>,
    killed: bool,
    exit: Option<i32>,
}

/// Runs `spool demo`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(args.pack_interval.is_finite() && args.pack_interval >= 0.0) {
        anyhow::bail!("--pack-interval must be zero or more seconds");
    }
    let base = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("spool-demo-")
        .tempdir_in(&base)
        .with_context(|| format!("cannot make a scratch directory in {}", base.display()))?;
    let work = scratch
        .path()
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", scratch.path().display()))?;
    let root = work.join("root");
    let logs = work.join("logs");
    std::fs::create_dir_all(&root)?;
    std::fs::create_dir_all(&logs)?;

    let tty = !args.json && std::io::stderr().is_terminal();
    let ui = Ui::new(tty);
    ui.line(format!(
        "spool demo in {} — {} producer rank(s), {} packs of ~{} bytes each; store {}, catalog {}",
        work.display(),
        args.ranks,
        args.packs,
        args.pack_bytes,
        crate::dest::embedded_store_url(&root),
        crate::dest::embedded_catalog_url(&root),
    ));
    let started = Instant::now();
    let result = drive(&args, &root, &logs, &ui);
    ui.clear();
    let outcome = match result {
        Ok(o) => o,
        Err(err) => {
            eprintln!("spool demo: {}", crate::exit::message_of(&err));
            eprintln!("spool demo: logs kept in {}", logs.display());
            let _ = scratch.keep();
            return Ok(ExitCode::Other);
        }
    };
    let report = verify(&root, &outcome)?;
    let elapsed = started.elapsed();
    print_report(&args, &work, &root, &outcome, &report, elapsed)?;
    let ok = report.lost == 0
        && report.left == 0
        && report.victim_dir_gone
        && outcome.daemon_exit == Some(0);
    if args.keep || !ok {
        let kept = scratch.keep();
        eprintln!("spool demo: kept {}", kept.display());
    }
    Ok(if ok { ExitCode::Ok } else { ExitCode::Other })
}

/// The progress display: bars on a terminal, plain lines otherwise.
struct Ui {
    multi: MultiProgress,
    tty: bool,
}

impl Ui {
    fn new(tty: bool) -> Ui {
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Ui {
            multi: MultiProgress::with_draw_target(target),
            tty,
        }
    }

    fn bar(&self, len: u64, prefix: String) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new(len));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos:>4}/{len:4} {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(prefix);
        bar
    }

    fn line(&self, text: String) {
        if self.tty {
            let _ = self.multi.println(text);
        } else {
            eprintln!("{text}");
        }
    }

    fn clear(&self) {
        let _ = self.multi.clear();
    }
}

/// What the producers and the daemon did.
struct Outcome {
    ranks: Vec<Rank>,
    victim: usize,
    /// Packs the running daemon shipped for live producers (hand-off).
    handed_off: u64,
    /// Ready packs in the victim's directory right after the kill: handed
    /// off, not yet confirmed, adopted by the next daemon.
    adopted: Vec<String>,
    daemon_exit: Option<i32>,
    daemon_result: Option<serde_json::Value>,
}

fn spool_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the spool executable")
}

/// `spool SUBCOMMAND --spool-root ROOT` on the embedded destination under
/// `root`, whatever the caller's configuration names: the store and
/// catalog given as flags, no `SPOOL_*` variable and no `./spool.toml`
/// (run in `root`), so every producer and the daemon agree with the
/// read-back.
fn child(exe: &Path, subcommand: &str, root: &Path) -> Command {
    let mut cmd = Command::new(exe);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("SPOOL_") {
            cmd.env_remove(name);
        }
    }
    cmd.current_dir(root)
        .arg(subcommand)
        .arg("--spool-root")
        .arg(root)
        .arg("--store")
        .arg(crate::dest::embedded_store_url(root))
        .arg("--catalog")
        .arg(crate::dest::embedded_catalog_url(root));
    cmd
}

fn drive(args: &Args, root: &Path, logs: &Path, ui: &Ui) -> anyhow::Result<Outcome> {
    let exe = spool_exe()?;
    let victim = if args.ranks > 1 { 1 } else { 0 };

    // 1. The node's daemon, running until stopped.
    let (mut daemon, daemon_lines, spinner) = start_daemon(&exe, root, logs, ui)?;

    // 2. Sink-only producers: each hands its packs to the daemon while it
    //    lives. The victim has ten times the packs, so it is still staging
    //    when the others are done, however long their confirmations take
    //    on a loaded machine (with twice the packs it once finished first,
    //    leaving nothing to adopt).
    let (ranks, mut children, readers) = start_producers(&exe, args, root, logs, ui, victim)?;
    let staged = |k: usize| ranks.lock().unwrap_or_else(|e| e.into_inner())[k].ids.len();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut exits = vec![None; children.len()];
    for (k, child) in children.iter_mut().enumerate() {
        if k != victim {
            let status = child.wait()?;
            exits[k] = status.code();
            if !status.success() {
                ui.line(format!(
                    "rank {k} exited with {status}; see {}",
                    logs.join(format!("rank-{k}.log")).display()
                ));
            }
        }
    }
    // Waits until the victim has staged `n` packs (or, `exit_ok`, exited).
    let wait_staged = |children: &mut [Child], n: usize, exit_ok: bool| -> anyhow::Result<()> {
        while staged(victim) < n {
            if let Some(status) = children[victim].try_wait()? {
                if exit_ok {
                    return Ok(());
                }
                anyhow::bail!(
                    "rank {victim} exited ({status}) before it could be killed; see {}",
                    logs.join(format!("rank-{victim}.log")).display()
                );
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "rank {victim} staged only {} packs in 120 s",
                    staged(victim)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    };
    // At least half the victim's packs handed off while the daemon runs.
    wait_staged(&mut children, args.packs as usize, false)?;

    // 3. The daemon stops: what the victim hands off from now on waits,
    //    unconfirmed, in its directory.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .context("SIGTERM the daemon")?;
    let running = daemon_lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .last();
    daemon.wait()?;
    let handed_off = running
        .as_ref()
        .and_then(|r| r.pointer("/snapshot/hand_off/shipped"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    spinner.finish_with_message(format!(
        "daemon: shipped {handed_off} pack(s) handed off by live producers, then stopped (SIGTERM)"
    ));

    // 4. The victim hands off a few more, then is SIGKILLed mid-stream.
    wait_staged(&mut children, staged(victim) + 3, true)?;
    children[victim].kill().context("SIGKILL the victim")?; // SIGKILL
    let _ = children[victim].wait();
    let victim_dir = rank_dir(&logs.join(format!("rank-{victim}.log")));
    let unconfirmed: Vec<String> = victim_dir.as_deref().map(ready_ids).unwrap_or_default();
    ui.line(format!(
        "rank {victim} SIGKILLed after {} staged pack(s); {} handed off and not yet confirmed stay in {}",
        staged(victim),
        unconfirmed.len(),
        victim_dir
            .as_deref()
            .map_or("its rank directory".into(), |d| d.display().to_string())
    ));
    for (k, reader) in readers.into_iter().enumerate() {
        if let Ok(bar) = reader.join() {
            if k == victim {
                bar.abandon_with_message("SIGKILLed");
            } else {
                bar.finish_with_message("exited: every pack confirmed, directory removed");
            }
        }
    }

    // 5. A daemon again (`spool run --once`) adopts the dead directory.
    let (daemon_exit, daemon_result) = adopt(&exe, args, root, logs, ui)?;

    let mut ranks = ranks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (k, rank) in ranks.iter_mut().enumerate() {
        rank.killed = k == victim;
        rank.exit = exits[k];
        rank.dir = rank_dir(&logs.join(format!("rank-{k}.log")));
    }
    Ok(Outcome {
        ranks,
        victim,
        handed_off,
        adopted: unconfirmed,
        daemon_exit,
        daemon_result,
    })
}

/// What [`start_producers`] started: what each rank reported staged, the
/// children, the threads reading their stdout (each ends with its bar).
type Producers = (
    Arc<Mutex<Vec<Rank>>>,
    Vec<Child>,
    Vec<std::thread::JoinHandle<ProgressBar>>,
);

/// Starts the sink-only producers (`spool produce --rank K`), the
/// victim with ten times the packs.
fn start_producers(
    exe: &Path,
    args: &Args,
    root: &Path,
    logs: &Path,
    ui: &Ui,
    victim: usize,
) -> anyhow::Result<Producers> {
    let ranks: Arc<Mutex<Vec<Rank>>> =
        Arc::new(Mutex::new(vec![Rank::default(); args.ranks as usize]));
    let mut children: Vec<Child> = Vec::new();
    let mut readers = Vec::new();
    for k in 0..args.ranks as usize {
        let packs = if k == victim {
            10 * args.packs
        } else {
            args.packs
        };
        let log = std::fs::File::create(logs.join(format!("rank-{k}.log")))?;
        let mut child = child(exe, "produce", root)
            .args(["--rank", &k.to_string()])
            .args(["--packs", &packs.to_string()])
            .args(["--pack-bytes", &args.pack_bytes.to_string()])
            .args(["--pack-interval", &args.pack_interval.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start a producer")?;
        let stdout = child.stdout.take().context("producer stdout")?;
        let bar = ui.bar(packs, format!("rank {k}"));
        bar.set_message(if k == victim {
            "handing off (will be SIGKILLed)"
        } else {
            "handing off"
        });
        let ranks = ranks.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                ranks.lock().unwrap_or_else(|e| e.into_inner())[k]
                    .ids
                    .push(line);
                bar.inc(1);
            }
            bar
        }));
        children.push(child);
    }
    Ok((ranks, children, readers))
}

/// Starts the node's daemon (`spool run --json`, until stopped) and waits
/// for its `started` line: the child, its remaining JSON lines, its
/// spinner.
fn start_daemon(
    exe: &Path,
    root: &Path,
    logs: &Path,
    ui: &Ui,
) -> anyhow::Result<(
    Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
    ProgressBar,
)> {
    let spinner = ui.multi.add(ProgressBar::new_spinner());
    spinner.set_message("daemon: spool run (ships what live producers hand off)");
    spinner.enable_steady_tick(Duration::from_millis(120));
    let mut daemon = child(exe, "run", root)
        .args(["--json", "--lease-ttl", DEMO_LEASE_TTL])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(logs.join("daemon.log"))?))
        .spawn()
        .context("cannot start the daemon")?;
    let mut daemon_lines = BufReader::new(daemon.stdout.take().context("daemon stdout")?).lines();
    daemon_lines
        .next()
        .transpose()?
        .context("the daemon exited before it started; see its log")?;
    Ok((daemon, daemon_lines, spinner))
}

/// Runs `spool run --once` (the daemon again, adopting the dead
/// directory): its exit code and its last JSON line.
fn adopt(
    exe: &Path,
    args: &Args,
    root: &Path,
    logs: &Path,
    ui: &Ui,
) -> anyhow::Result<(Option<i32>, Option<serde_json::Value>)> {
    let spinner = ui.multi.add(ProgressBar::new_spinner());
    spinner.set_message("daemon: spool run --once (adopting the SIGKILLed rank's directory)");
    spinner.enable_steady_tick(Duration::from_millis(120));
    let daemon_log = std::fs::OpenOptions::new()
        .append(true)
        .open(logs.join("daemon.log"))?;
    let daemon = child(exe, "run", root)
        .args(["--once", "--json", "--lease-ttl", DEMO_LEASE_TTL])
        .args(["--timeout", &args.timeout.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(daemon_log))
        .output()
        .context("cannot run the daemon")?;
    let daemon_result = String::from_utf8_lossy(&daemon.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .next_back();
    let adopted_dirs = daemon_result
        .as_ref()
        .and_then(|r| r.pointer("/snapshot/adopted_spools"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    spinner.finish_with_message(format!(
        "daemon: exited with {} after adopting {adopted_dirs} director{}",
        daemon.status,
        if adopted_dirs == 1 { "y" } else { "ies" }
    ));
    Ok((daemon.status.code(), daemon_result))
}

/// The rank directory a producer reported in its log.
fn rank_dir(log: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("spool: rank directory "))
        .map(PathBuf::from)
}

/// Ids of the ready packs in `dir` (top level and worker subdirectories),
/// as spool-core's scan lists them.
fn ready_ids(dir: &Path) -> Vec<String> {
    spool_core::spool::scan_dir(dir, &AtomicBool::new(false))
        .map(|packs| packs.iter().map(|p| p.id.to_hex()).collect())
        .unwrap_or_default()
}

/// What the read-back found.
struct Report {
    produced: usize,
    indexed: usize,
    uploaded: usize,
    left: usize,
    lost: usize,
    bytes: u64,
    lost_ids: Vec<String>,
    /// The SIGKILLed rank's directory was adopted and removed.
    victim_dir_gone: bool,
}

/// Reads every reported pack back as a reader would (`spool cat`'s
/// [`fetch_pack`]: its row, its object, validation against the row).
fn verify(root: &Path, outcome: &Outcome) -> anyhow::Result<Report> {
    let catalog = spool_catalog::open(&crate::dest::embedded_catalog_url(root))?;
    let store = spool_upload::Store::from_url(
        &crate::dest::embedded_store_url(root),
        &spool_upload::ClientConfig::default(),
    )?;
    let runtime = crate::source::runtime()?;
    let spooled: std::collections::HashSet<String> = spool_core::layout::catalog_key_dirs(root)?
        .iter()
        .flat_map(|(_, key_dir)| spool_core::siblings::rank_dirs(key_dir).unwrap_or_default())
        .flat_map(|d| ready_ids(&d))
        .collect();
    let mut report = Report {
        produced: 0,
        indexed: 0,
        uploaded: 0,
        left: spooled.len(),
        lost: 0,
        bytes: 0,
        lost_ids: Vec::new(),
        victim_dir_gone: outcome.ranks[outcome.victim]
            .dir
            .as_deref()
            .is_some_and(|d| !d.exists()),
    };
    for id in outcome.ranks.iter().flat_map(|r| r.ids.iter()) {
        report.produced += 1;
        let mut scratch = tempfile::tempfile()?;
        let fetched = runtime.block_on(fetch_pack(
            catalog.as_ref(),
            &store,
            PackId::from_hex(id)?,
            &mut scratch,
        ));
        report.indexed += usize::from(!matches!(fetched, Err(Error::PackNotIndexed { .. })));
        match fetched {
            Ok(f) => {
                report.uploaded += 1;
                report.bytes += f.row.bytes;
            }
            Err(_) if spooled.contains(id) => {}
            Err(_) => {
                report.lost += 1;
                report.lost_ids.push(id.clone());
            }
        }
    }
    Ok(report)
}

fn print_report(
    args: &Args,
    work: &Path,
    root: &Path,
    outcome: &Outcome,
    report: &Report,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let (store, catalog) = (
        crate::dest::embedded_store_url(root),
        crate::dest::embedded_catalog_url(root),
    );
    // the counts, each with its JSON name and what it means
    let counts: [(&str, u64, &str); 7] = [
        ("produced", report.produced as u64, ""),
        (
            "uploaded",
            report.uploaded as u64,
            "read back from the store, checksum verified",
        ),
        ("indexed", report.indexed as u64, ""),
        (
            "handed_off",
            outcome.handed_off,
            "shipped by the daemon while their producers lived",
        ),
        (
            "adopted",
            outcome.adopted.len() as u64,
            "handed off by the SIGKILLed rank, not yet confirmed: adopted by the next daemon",
        ),
        ("left_in_spool", report.left as u64, ""),
        ("lost", report.lost as u64, ""),
    ];
    if args.json {
        let mut out = serde_json::Map::new();
        for (name, n, _) in counts {
            out.insert(name.into(), n.into());
        }
        let ranks: Vec<_> = outcome
            .ranks
            .iter()
            .enumerate()
            .map(|(k, r)| {
                json!({"rank": k, "staged": r.ids.len(), "killed": r.killed,
                       "exit_code": r.exit, "dir": r.dir})
            })
            .collect();
        let rest = json!({
            "lost_ids": report.lost_ids, "victim_dir_removed": report.victim_dir_gone,
            "bytes": report.bytes, "elapsed_s": elapsed.as_secs_f64(), "ranks": ranks,
            "daemon_exit_code": outcome.daemon_exit, "daemon": outcome.daemon_result,
            "dir": work, "store": store, "catalog": catalog,
        });
        out.extend(rest.as_object().cloned().unwrap_or_default());
        outln!("{}", serde_json::Value::Object(out));
        return Ok(());
    }
    outln!();
    outln!("{:<8} {:>8} {:>10}  ended", "rank", "staged", "role");
    for (k, r) in outcome.ranks.iter().enumerate() {
        let ended = match (r.killed, report.victim_dir_gone, r.exit) {
            (true, true, _) => {
                "SIGKILLed mid-stream; the daemon adopted and removed its directory".into()
            }
            (true, false, _) => {
                "SIGKILLed mid-stream; its directory is STILL THERE (not adopted)".into()
            }
            (false, _, Some(0)) => "exited cleanly (every pack confirmed by the daemon)".into(),
            (false, _, other) => format!("exit {other:?}"),
        };
        let role = if k == outcome.victim {
            "victim"
        } else {
            "producer"
        };
        outln!("{:<8} {:>8} {:>10}  {ended}", k, r.ids.len(), role);
    }
    outln!();
    for (name, n, why) in counts {
        let label = format!("packs {}", name.replace('_', " "));
        let why = if why.is_empty() {
            String::new()
        } else {
            format!("  ({why})")
        };
        outln!("{label:<20}{n:>8}{why}");
    }
    outln!("{:<20}{:>8}", "bytes", report.bytes);
    outln!("{:<20}{:>7.1}s", "time", elapsed.as_secs_f64());
    let daemon = outcome
        .daemon_exit
        .map_or("by signal".into(), |c| c.to_string());
    outln!("{:<20}exit {daemon}", "daemon");
    outln!("{:<20}{store}", "store");
    outln!("{:<20}{catalog}", "catalog");
    if !report.lost_ids.is_empty() {
        outln!("{:<20}{}", "lost ids", report.lost_ids.join(" "));
    }
    if args.keep {
        outln!(
            "{:<20}{} (try: spool ls --spool-root {})",
            "kept",
            work.display(),
            root.display()
        );
    }
    Ok(())
}
