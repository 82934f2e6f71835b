//! The hand-off, black-box through the `spool` binary: a live sink-only
//! producer (`spool produce` in the layout, no `--serve`) is shipped by the
//! node's daemon (`spool run`) while it lives, and removes each pack itself
//! once its row is confirmed; with no daemon it ships by exiting; killed
//! mid-stream its directory is adopted and nothing is lost or shipped
//! twice.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use spool_tests::{describe, indexed_ids, output, spool, KillOnDrop};

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

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon, `spool run` on `root`, polling only every 60 s: whatever
/// it ships sooner it learnt of from the kernel, not a poll. It probes
/// live siblings again every second (a dead producer is adopted soon).
fn daemon(root: &Path) -> KillOnDrop {
    std::fs::create_dir_all(root).unwrap();
    KillOnDrop(
        spool()
            .args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
            .arg("--spool-root")
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn spool run"),
    )
}

/// A sink-only producer in the layout under `root`: `packs` packs
/// `interval` seconds apart, then it holds its lock until stopped.
fn producer(root: &Path, packs: u32, interval: &str) -> (KillOnDrop, Receiver<String>) {
    let mut child = KillOnDrop(
        spool()
            .args([
                "produce",
                "--packs",
                &packs.to_string(),
                "--pack-interval",
                interval,
            ])
            .args(["--hold", "--spool-root"])
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn spool produce"),
    );
    let ids = lines(child.stdout.take().unwrap());
    (child, ids)
}

/// Every `.ready` file under `root`'s rank directories (any depth).
fn ready_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if !p.ends_with(".store") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "ready") {
                out.push(p);
            }
        }
    }
    out
}

/// The daemon ships a live producer's packs while it lives: every one is
/// indexed, and every one leaves the producer's directory (removed by the
/// producer itself once confirmed), all before the producer exits, and
/// long before the daemon's 60 s poll.
#[test]
fn a_live_sink_only_producer_is_shipped_by_the_daemon_while_it_lives() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let _daemon = daemon(&root);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (mut prod, ids) = producer(&root, 40, "0.05");
    let mut staged = BTreeSet::new();
    while staged.len() < 40 {
        let id = ids
            .recv_timeout(Duration::from_secs(30))
            .expect("the producer reports each pack");
        staged.insert(id);
    }
    wait_for("every pack indexed", Duration::from_secs(30), || {
        indexed_ids(&root).is_superset(&staged)
    });
    wait_for(
        "every pack released by its producer",
        Duration::from_secs(10),
        || ready_under(&root).is_empty(),
    );
    assert!(
        prod.try_wait().unwrap().is_none(),
        "the producer exited: its packs were shipped by exiting, not handed off"
    );
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "shipped only after {:?} (the daemon polls every 60 s)",
        started.elapsed()
    );
    kill(Pid::from_raw(prod.id() as i32), Signal::SIGTERM).unwrap();
    let status = prod.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(indexed_ids(&root), staged, "a row that is no staged pack's");
}

/// With no daemon, a hand-off producer's packs wait in its directory; once
/// it exits, `run --once` adopts them as any dead sibling's: each indexed
/// once, and no ref or confirmation left behind.
#[test]
fn without_a_daemon_a_hand_off_producer_ships_by_exiting() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let out = output(
        spool()
            .args(["produce", "--packs", "3", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let staged: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(staged.len(), 3);
    assert_eq!(ready_under(&root).len(), 3);
    let out = output(
        spool()
            .args(["run", "--once", "--timeout", "60", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(indexed_ids(&root), staged);
    assert!(ready_under(&root).is_empty());
    let leftovers: Vec<PathBuf> = walk(&root)
        .into_iter()
        .filter(|p| {
            p.components()
                .any(|c| c.as_os_str() == "_refs" || c.as_os_str() == "_shipped")
                && p.is_file()
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every path under `root`.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}

/// A producer SIGKILLed mid-stream, its packs partly shipped and
/// confirmed: the daemon adopts its directory, and every pack it staged
/// ends indexed, none left in a spool.
#[test]
fn a_producer_killed_mid_hand_off_is_adopted_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let _daemon = daemon(&root);
    std::thread::sleep(Duration::from_millis(500));
    let (mut prod, ids) = producer(&root, 1000, "0.02");
    let mut staged = BTreeSet::new();
    while staged.len() < 30 {
        staged.insert(ids.recv_timeout(Duration::from_secs(30)).expect("a pack"));
    }
    wait_for("some packs shipped", Duration::from_secs(30), || {
        !indexed_ids(&root).is_empty()
    });
    prod.kill().unwrap();
    prod.wait().unwrap();
    // what it reported before dying, and nothing more
    staged.extend(ids.try_iter());
    wait_for(
        "the dead producer's packs adopted",
        Duration::from_secs(90),
        || indexed_ids(&root).is_superset(&staged) && ready_under(&root).is_empty(),
    );
}

/// With no daemon, `spool status` says per live owner how many handed-off
/// packs wait, and why.
#[test]
fn status_says_why_handed_off_packs_wait_without_a_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let (mut prod, ids) = producer(&root, 3, "0.01");
    for _ in 0..3 {
        ids.recv_timeout(Duration::from_secs(30)).expect("a pack");
    }
    let out = output(spool().args(["status", "--json"]).arg(&root));
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v["rank_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "live")
        .expect("the live producer's row")
        .clone();
    assert_eq!(row["hand_off"]["waiting"], 3, "{row}");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("waiting for the node's shipper"),
        "{reason}"
    );
    let text = output(spool().arg("status").arg(&root));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("3 handed-off pack(s) waiting"),
        "{}",
        describe(&text)
    );
    prod.kill().unwrap();
    prod.wait().unwrap();
}
