//! The kill points of the crash torture (spool-core's `seams`, driven by
//! `spool-with-seams --kill-at NAME[:N]`, see `cargo xtask torture`): each
//! is reached by a real `spool run --once` draining a dead sibling, the
//! process dies there by SIGKILL naming the point, and a successor `spool
//! run --once` ships every pack the producer reported, with the SHA-256 it
//! printed (`spool produce --print-sha256`), and leaves nothing behind.
//! The hand-off's points (`seams::HAND_OFF_POINTS`) are reached by a live
//! holder (`spool produce --hold`) and the daemon shipping it (`spool
//! run`), one side armed: it dies there, the other side (or a successor
//! daemon) carries on, and every reported pack is indexed once.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use spool_tests::{describe, output, spool, spool_with_seams, KillOnDrop};

use spool_core::seams::{HAND_OFF_POINTS, KILL_POINTS, OWNER_POINTS};

/// One destination beside (not under) a spool root.
struct Dest {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    store: String,
    catalog: String,
}

impl Dest {
    fn new() -> Dest {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("store")).unwrap();
        Dest {
            root: base.join("spool"),
            store: format!("file://{}", base.join("store").display()),
            catalog: format!("sqlite://{}", base.join("catalog.db").display()),
            _tmp: tmp,
        }
    }

    fn args(&self, cmd: &mut Command) {
        cmd.arg("--spool-root").arg(&self.root).args([
            "--store",
            &self.store,
            "--catalog",
            &self.catalog,
        ]);
    }

    fn run_once(&self, mut cmd: Command) -> std::process::Output {
        cmd.args(["run", "--once", "--timeout", "60"]);
        self.args(&mut cmd);
        cmd.args(["--lease-ttl", "5", "--poll-interval", "0.2"]);
        cmd.args(["--recheck-interval", "0.5"]);
        output(&mut cmd)
    }

    /// pack id → sha256, as `spool ls --json` reads the catalog.
    fn rows(&self) -> BTreeMap<String, String> {
        let out = output(spool().args(["ls", "--json", "--catalog", &self.catalog]));
        assert!(out.status.success(), "{}", describe(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    row["pack_id"].as_str().unwrap().to_string(),
                    row["sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// Every file left under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if spool_tests::is_reserve(&p) {
            continue; // the key directory's reserve, kept on purpose
        }
        if p.is_dir() {
            let inner = files_under(&p);
            if inner.is_empty() && p.parent() != Some(dir) {
                out.push(p);
            }
            out.extend(inner);
        } else {
            out.push(p);
        }
    }
    out
}

/// A dead sibling: a sink-only producer's 3 packs, as `ID SHA256` lines.
fn dead_sibling(d: &Dest) -> BTreeMap<String, String> {
    let mut cmd = spool();
    cmd.args(["produce", "--packs", "3", "--print-sha256"]);
    d.args(&mut cmd);
    let out = output(&mut cmd);
    assert!(out.status.success(), "{}", describe(&out));
    let reported: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (id, sha) = l.split_once(' ').expect("`ID SHA256`");
            assert_eq!((id.len(), sha.len()), (32, 64), "{l}");
            (id.to_string(), sha.to_string())
        })
        .collect();
    assert_eq!(reported.len(), 3, "{}", describe(&out));
    reported
}

fn kill_then_successor(point: &'static str) {
    let d = Dest::new();
    let reported = dead_sibling(&d);
    let killed = d.run_once(spool_with_seams(&["--kill-at", point]));
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert_eq!(
        killed.status.signal(),
        Some(9),
        "{point}: not killed there\n{}",
        describe(&killed)
    );
    assert!(
        stderr.contains(&format!("spool: kill point {point} hit 1: SIGKILL")),
        "{point}: {}",
        describe(&killed)
    );
    let next = d.run_once(spool());
    assert!(
        next.status.success(),
        "{point}: successor: {}",
        describe(&next)
    );
    assert_eq!(
        d.rows(),
        reported,
        "{point}: the catalog after the successor"
    );
    let left = files_under(&d.root);
    assert!(left.is_empty(), "{point}: left under the root: {left:?}");
}

#[test]
fn every_kill_point_kills_spool_run_there_and_a_successor_ships_every_reported_pack() {
    // the hand-off's points need a live owner: the crash torture's
    let points: Vec<&'static str> = KILL_POINTS
        .iter()
        .filter(|p| !HAND_OFF_POINTS.contains(p))
        .copied()
        .collect();
    let failed = each_in_a_thread(&points, kill_then_successor);
    assert!(failed.is_empty(), "kill points that failed: {failed:?}");
}

/// Runs `check` for each of `points`, each in a thread of its own; the
/// points whose check failed.
fn each_in_a_thread(points: &[&'static str], check: fn(&'static str)) -> Vec<&'static str> {
    let threads: Vec<_> = points
        .iter()
        .map(|&p| std::thread::spawn(move || check(p)))
        .collect();
    threads
        .into_iter()
        .zip(points)
        .filter_map(|(t, p)| t.join().err().map(|_| *p))
        .collect()
}

/// `cmd` armed at `point` when `armed`.
fn maybe_armed(point: &str, armed: bool) -> Command {
    if armed {
        spool_with_seams(&["--kill-at", point])
    } else {
        spool()
    }
}

/// Waits (30 s at most) for `child` to exit.
fn exit_of(child: &mut KillOnDrop, what: &str) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "{what} did not exit within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Adds the holder's reports to `into` until it holds its 3 packs or
/// nothing came for `within`.
fn collect(
    reports: &mpsc::Receiver<(String, String)>,
    into: &mut BTreeMap<String, String>,
    within: Duration,
) {
    while into.len() < 3 {
        let Ok((id, sha)) = reports.recv_timeout(within) else {
            return;
        };
        into.insert(id, sha);
    }
}

/// `.ready` files under `dir`, at any depth.
fn ready_in(dir: &Path) -> usize {
    files_under(dir)
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "ready"))
        .count()
}

fn hand_off_kill_then_successor(point: &'static str) {
    let d = Dest::new();
    std::fs::create_dir_all(&d.root).unwrap();
    let owner_side = OWNER_POINTS.contains(&point);
    let mut cmd = maybe_armed(point, owner_side);
    cmd.args(["produce", "--packs", "3", "--print-sha256", "--hold"]);
    cmd.args(["--pack-interval", "0.2"]);
    d.args(&mut cmd);
    let mut holder = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (tx, reports) = mpsc::channel();
    let out = holder.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let (id, sha) = line.split_once(' ').expect("`ID SHA256`");
            let _ = tx.send((id.to_string(), sha.to_string()));
        }
    });
    let daemon = |armed: bool| {
        let mut cmd = maybe_armed(point, armed);
        cmd.arg("run");
        d.args(&mut cmd);
        cmd.args(["--lease-ttl", "5", "--poll-interval", "0.2"]);
        cmd.args(["--recheck-interval", "0.5"]);
        KillOnDrop(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut first = daemon(!owner_side);
    let mut reported = BTreeMap::new();
    let (armed, what) = if owner_side {
        (&mut holder, "the holder")
    } else {
        (&mut first, "the daemon")
    };
    let status = exit_of(armed, what);
    assert_eq!(status.signal(), Some(9), "{point}: {what} exited {status}");
    if owner_side {
        // the daemon adopts the dead owner's directory
        collect(&reports, &mut reported, Duration::from_millis(100));
        drop(first);
    } else {
        // the owner keeps its packs; a new daemon ships and confirms them
        collect(&reports, &mut reported, Duration::from_secs(10));
        assert_eq!(reported.len(), 3, "{point}: the holder reports its packs");
        let owner = files_under(&d.root)
            .into_iter()
            .find(|f| f.extension().is_some_and(|e| e == "ready"))
            .and_then(|f| {
                f.ancestors()
                    .find(|a| a.parent().map(Path::parent) == Some(Some(&d.root)))
                    .map(Path::to_path_buf)
            });
        if point == "before_confirm" {
            let owner = owner.expect("the holder still holds its packs");
            assert_eq!(
                ready_in(&owner),
                3,
                "{point}: nothing confirmed, nothing removed"
            );
        }
        let _next = daemon(false);
        let deadline = Instant::now() + Duration::from_secs(30);
        while ready_in(&d.root) > 0 {
            assert!(
                Instant::now() < deadline,
                "{point}: the successor did not ship the holder's packs"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-TERM", &holder.id().to_string()])
            .status();
        let status = exit_of(&mut holder, "the holder");
        assert!(status.success(), "{point}: the holder exited {status}");
    }
    let next = d.run_once(spool());
    assert!(
        next.status.success(),
        "{point}: successor: {}",
        describe(&next)
    );
    let rows = d.rows();
    for (id, sha) in &reported {
        assert_eq!(
            rows.get(id),
            Some(sha),
            "{point}: reported pack {id} not indexed as reported"
        );
    }
    let listed = output(spool().args(["ls", "--json", "--catalog", &d.catalog]));
    let lines = String::from_utf8_lossy(&listed.stdout).lines().count();
    assert_eq!(lines, rows.len(), "{point}: a pack indexed twice as read");
    let left = files_under(&d.root);
    assert!(left.is_empty(), "{point}: left under the root: {left:?}");
}

#[test]
fn every_hand_off_kill_point_kills_its_side_and_nothing_is_lost_or_indexed_twice() {
    let failed = each_in_a_thread(HAND_OFF_POINTS, hand_off_kill_then_successor);
    assert!(
        failed.is_empty(),
        "hand-off kill points that failed: {failed:?}"
    );
}

#[test]
fn an_unknown_kill_point_is_refused_naming_the_known_ones() {
    let out = output(spool_with_seams(&["--kill-at", "nowhere:2"]).arg("--version"));
    assert!(!out.status.success(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nowhere") && stderr.contains("after_try_adopt"),
        "{}",
        describe(&out)
    );
}
