//! Black-box tests of `spool produce`: the real binary, the real sink, the
//! real lock, real signals.
#![forbid(unsafe_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use spool_core::PackId;
use spool_tests::{describe, output, spool, spool_with_seams};

fn is_pack_id(line: &str) -> bool {
    line.len() == 32
        && line
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks that `dir/<id>.ready` exists and validates as that id.
fn assert_ready(dir: &Path, id: &str) {
    let path = dir.join(format!("{id}.ready"));
    let file = fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let id = PackId::from_hex(id).unwrap();
    spool_core::validate(file, Some(id), &AtomicBool::new(false))
        .unwrap_or_else(|e| panic!("{} does not validate: {e}", path.display()));
}

fn names(dir: &Path, suffix: &str) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(suffix))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Lines of a child's stdout, as they come.
fn lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn spawn_produce(args: &[&str]) -> Child {
    spool()
        .arg("produce")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spool produce")
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `spool produce --dir DIR ARGS...` to completion.
fn produce(dir: &Path, args: &[&str]) -> Output {
    output(spool().args(["produce", "--dir"]).arg(dir).args(args))
}

/// Runs it and returns the ids it printed, failing unless it succeeded.
fn produce_ok(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = produce(dir, args);
    assert!(out.status.success(), "{}", describe(&out));
    spool_tests::stdout_lines(&out)
}

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-00000001");
    (tmp, dir)
}

#[test]
fn produce_stages_n_valid_packs_and_prints_each_id() {
    let (_tmp, dir) = scratch();
    let ids = produce_ok(
        &dir,
        &["--packs", "3", "--records", "4", "--pack-bytes", "2000"],
    );
    assert_eq!(ids.len(), 3, "{ids:?}");
    for id in &ids {
        assert!(is_pack_id(id), "{id:?}");
        assert_ready(&dir, id);
    }
    assert_eq!(names(&dir, ".ready").len(), 3);
    assert!(names(&dir, ".open").is_empty(), "no temp file left");
}

#[test]
fn an_ordinal_stages_under_its_worker_directory() {
    let (_tmp, dir) = scratch();
    for id in produce_ok(&dir, &["--packs", "2", "--ordinal", "7"]) {
        assert_ready(&dir.join("w7"), &id);
    }
    assert!(names(&dir, ".ready").is_empty(), "nothing at the top");
    assert_eq!(names(&dir.join("w7"), ".ready").len(), 2);
}

/// A full budget is refused at once (the producer's choice here is to
/// refuse), not after the flush timeout (once or twice), with the refusal
/// logged once, not once a retry.
#[test]
fn a_full_spool_exits_5_at_once_naming_the_directory() {
    let (_tmp, dir) = scratch();
    let t = std::time::Instant::now();
    let out = output(spool().args(["produce", "--dir"]).arg(&dir).args([
        "--packs",
        "2",
        "--max-bytes",
        "100",
        "--timeout",
        "60",
    ]));
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&dir.display().to_string()), "{stderr}");
    assert!(stderr.contains("the spool is full:"), "{stderr}");
    let refusals = stderr.matches("stage refused").count();
    assert_eq!(refusals, 1, "{stderr}");
    assert!(out.stdout.is_empty(), "nothing reported staged");
}

#[test]
fn hold_keeps_the_lock_until_sigterm() {
    let (_tmp, dir) = scratch();
    let dir_arg = dir.to_str().unwrap();
    let mut holder = spawn_produce(&["--dir", dir_arg, "--packs", "2", "--hold"]);
    let ids = lines(holder.stdout.take().unwrap());
    for _ in 0..2 {
        let id = ids
            .recv_timeout(Duration::from_secs(30))
            .expect("the holder reports its packs");
        assert_ready(&dir, &id);
    }

    // Another producer is refused, naming the holder's pid.
    let out = produce(&dir, &["--packs", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&holder.id().to_string()), "{stderr}");
    assert_eq!(names(&dir, ".ready").len(), 2);

    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = holder.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "SIGTERM ignored");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");

    // The lock is free again.
    produce_ok(&dir, &["--packs", "1"]);
    assert_eq!(names(&dir, ".ready").len(), 3);
}

#[test]
fn a_sigkilled_holder_leaves_its_packs_and_no_lock() {
    let (_tmp, dir) = scratch();
    let dir_arg = dir.to_str().unwrap();
    let mut holder = spawn_produce(&["--dir", dir_arg, "--packs", "1", "--hold"]);
    let ids = lines(holder.stdout.take().unwrap());
    let id = ids.recv_timeout(Duration::from_secs(30)).unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_ready(&dir, &id);
    produce_ok(&dir, &["--packs", "1"]);
}

#[test]
fn a_paused_stage_is_an_open_file_until_released() {
    let (tmp, dir) = scratch();
    let release = tmp.path().join("release");
    let mut child = spool_with_seams(&["--pause-before-publish", release.to_str().unwrap()])
        .args(["produce", "--dir", dir.to_str().unwrap(), "--packs", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spool-with-seams produce");
    let ids = lines(child.stdout.take().unwrap());
    wait_for(
        "the paused stage's temp file",
        Duration::from_secs(30),
        || !names(&dir, ".open").is_empty(),
    );
    // Held before its publish: not ready, not reported.
    std::thread::sleep(Duration::from_millis(200));
    assert!(names(&dir, ".ready").is_empty());
    assert!(ids.try_recv().is_err(), "nothing reported staged yet");

    fs::write(&release, b"").unwrap();
    let id = ids
        .recv_timeout(Duration::from_secs(30))
        .expect("the stage completes once released");
    assert!(child.wait().unwrap().success());
    assert_ready(&dir, &id);
    assert!(names(&dir, ".open").is_empty(), "the temp file is gone");
}

#[test]
fn the_spool_binary_has_no_test_seam() {
    let out = output(spool().args(["produce", "--help"]));
    assert!(out.status.success(), "{}", describe(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--hold"), "{help}");
    assert!(!help.contains("pause-before-publish"), "{help}");
    // the seam options are refused as usage errors, not hidden
    let (tmp, dir) = scratch();
    let release = tmp.path().join("release");
    let out = output(spool().args([
        "produce",
        "--dir",
        dir.to_str().unwrap(),
        "--pause-before-publish",
        release.to_str().unwrap(),
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let out = output(
        spool()
            .args(["lock", "hold", "--test-filesystem-type", "0x6969"])
            .arg(&dir),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(!dir.join(".owner.lock").exists());
    // no kill point either (the crash torture's seam)
    let out = output(spool().args(["--kill-at", "after_index:1", "run", "--once"]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

#[test]
fn a_memory_store_or_catalog_is_refused_for_serving_with_exit_2() {
    let (tmp, _) = scratch();
    let root = tmp.path().join("root");
    for (flag, url) in [("--store", "memory://"), ("--catalog", "memory://x")] {
        let out = output(spool().args([
            "produce",
            "--spool-root",
            root.to_str().unwrap(),
            "--packs",
            "1",
            "--serve",
            flag,
            url,
        ]));
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("in-memory"),
            "{}",
            describe(&out)
        );
        std::fs::create_dir_all(&root).unwrap();
        let out = output(spool().args([
            "run",
            "--once",
            "--spool-root",
            root.to_str().unwrap(),
            flag,
            url,
        ]));
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("in-memory"),
            "{}",
            describe(&out)
        );
    }
    assert!(
        root.read_dir().unwrap().next().is_none(),
        "nothing was claimed or created"
    );
}

/// Liveness bounds (nextest's serial group).
/// How a destination (spool root, store, catalog) is given: the same way to
/// every command of one case (`Env`: the store and catalog as `SPOOL_*`
/// variables, the root as a flag; `File`: all three in the config file).
#[derive(Debug, Clone, Copy)]
enum Source {
    Flag,
    Env,
    File,
}

/// A destination away from the spool root, given one way.
struct Configured {
    source: Source,
    root: PathBuf,
    store_dir: PathBuf,
    catalog_db: PathBuf,
    file: PathBuf,
}

impl Configured {
    fn new(tmp: &Path, source: Source) -> Configured {
        let root = tmp.join("root");
        let elsewhere = tmp.join("elsewhere");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        let c = Configured {
            source,
            root,
            store_dir: elsewhere.join("store"),
            catalog_db: elsewhere.join("catalog.db"),
            file: tmp.join("spool.toml"),
        };
        fs::write(
            &c.file,
            format!(
                "[spool]\nroot = {:?}\n[destination]\nstore = {:?}\ncatalog = {:?}\n",
                c.root.display().to_string(),
                c.store_url(),
                c.catalog_url()
            ),
        )
        .unwrap();
        c
    }

    fn store_url(&self) -> String {
        format!("file://{}", self.store_dir.display())
    }

    fn catalog_url(&self) -> String {
        format!("sqlite://{}", self.catalog_db.display())
    }

    /// `spool SUBCOMMAND ARGS` with the destination given this case's way
    /// (flags after the subcommand's own arguments).
    fn spool(&self, subcommand: &str, args: &[&str]) -> Output {
        let mut cmd = spool();
        cmd.arg(subcommand).args(args);
        match self.source {
            Source::Flag => {
                cmd.arg("--spool-root")
                    .arg(&self.root)
                    .args(["--catalog", &self.catalog_url()]);
                if subcommand != "ls" {
                    // ls reads the catalog only
                    cmd.args(["--store", &self.store_url()]);
                }
            }
            Source::Env => {
                // the root as a flag, the destination in the environment
                cmd.arg("--spool-root")
                    .arg(&self.root)
                    .env("SPOOL_STORE", self.store_url())
                    .env("SPOOL_CATALOG", self.catalog_url());
            }
            Source::File => {
                cmd.arg("--config").arg(&self.file);
            }
        }
        output(&mut cmd)
    }

    /// The `*.pack` objects under the configured store.
    fn objects(&self) -> usize {
        fn walk(dir: &Path) -> usize {
            fs::read_dir(dir).map_or(0, |entries| {
                entries
                    .flatten()
                    .map(|e| {
                        let p = e.path();
                        if p.is_dir() {
                            walk(&p)
                        } else {
                            usize::from(p.extension().is_some_and(|x| x == "pack"))
                        }
                    })
                    .sum()
            })
        }
        walk(&self.store_dir)
    }
}

/// Every command that ships, stages or reads back resolves the destination
/// from the same flags, SPOOL_* variables and config file: what `produce`
/// ships (`--serve`) or stages (sink-only) is where `run --once`, `ls` and
/// `cat` with the same configuration look, and nothing lands in the
/// embedded store or catalog under the root.
#[test]
fn every_command_ships_where_the_configuration_says_from_each_source() {
    for source in [Source::Flag, Source::Env, Source::File] {
        let tmp = tempfile::tempdir().unwrap();
        let c = Configured::new(tmp.path(), source);
        let why = |out: &Output| format!("{source:?}: {}", describe(out));

        let served = c.spool("produce", &["--packs", "2", "--serve"]);
        assert!(served.status.success(), "{}", why(&served));
        assert_eq!(c.objects(), 2, "{}", why(&served));
        let err = String::from_utf8_lossy(&served.stderr);
        assert!(
            err.contains(&format!("shipping to store {}", c.store_url()))
                && err.contains(&format!("catalog {}", c.catalog_url())),
            "produce --serve says where it ships\n{}",
            why(&served)
        );

        let staged = c.spool("produce", &["--packs", "3"]);
        assert!(staged.status.success(), "{}", why(&staged));
        let ran = c.spool("run", &["--once", "--timeout", "60"]);
        assert!(ran.status.success(), "{}", why(&ran));
        assert!(
            String::from_utf8_lossy(&ran.stdout).contains("drained: 3 pack(s)"),
            "run --once with the same configuration finds the sink-only packs\n{}",
            why(&ran)
        );
        assert_eq!(c.objects(), 5, "{}", why(&ran));
        assert!(
            String::from_utf8_lossy(&staged.stderr)
                .contains(&format!("staging for store {}", c.store_url())),
            "sink-only produce says where its packs are for\n{}",
            why(&staged)
        );

        let listed = c.spool("ls", &["--json"]);
        assert!(listed.status.success(), "{}", why(&listed));
        let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).unwrap();
                row["pack_id"].as_str().unwrap().to_string()
            })
            .collect();
        let mut expected: Vec<String> = [&served, &staged]
            .iter()
            .flat_map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        expected.sort();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, expected, "{}", why(&listed));
        let read = c.spool("cat", &[&ids[0], "--records", "--hex"]);
        assert!(read.status.success(), "{}", why(&read));

        assert!(
            !c.root.join(".store").exists() && !c.root.join(".catalog.db").exists(),
            "{source:?}: nothing goes to the embedded store or catalog under the root"
        );
    }
}

mod serial {
    use super::*;
    use spool_tests::KillOnDrop;

    /// A holder told to stop while it still stages (SIGTERM before its last
    /// pack) stages no more packs and exits at once: a stop never waits for
    /// the rest of the run (the torture's stop bound).
    #[test]
    fn sigterm_while_a_holder_stages_stops_it_after_the_pack_in_flight() {
        let (_tmp, dir) = scratch();
        let dir_arg = dir.to_str().unwrap();
        let mut holder = KillOnDrop(spawn_produce(&[
            "--dir",
            dir_arg,
            "--packs",
            "1000",
            "--pack-interval",
            "0.05",
            "--hold",
        ]));
        let ids = lines(holder.stdout.take().unwrap());
        ids.recv_timeout(Duration::from_secs(30))
            .expect("the holder reports its first pack");
        kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(status) = holder.try_wait().unwrap() {
                break status;
            }
            // 1000 packs 50 ms apart take 50 s: a stop must not wait for them
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "SIGTERM while staging did not stop the holder within 3 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status}");
        let staged = names(&dir, ".ready").len();
        assert!((1..1000).contains(&staged), "{staged} packs staged");
        // what it reported is what it staged, and the lock is free again
        let reported = 1 + ids.iter().count();
        assert_eq!(reported, staged);
        produce_ok(&dir, &["--packs", "1"]);
    }
}
