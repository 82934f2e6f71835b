//! The kill points of the crash torture (spool-core's `seams`, driven by
//! `spool-with-seams --kill-at NAME[:N]`, see `cargo xtask torture`): each
//! is reached by a real `spool run --once` draining a dead sibling, the
//! process dies there by SIGKILL naming the point, and a successor `spool
//! run --once` ships every pack the producer reported, with the SHA-256 it
//! printed (`spool produce --print-sha256`), and leaves nothing behind.
//! The hand-off's points (`seams::HAND_OFF_POINTS`) need a live owner and
//! the node's shipper: the crash torture arms them.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use spool_tests::{describe, output, spool, spool_with_seams};

use spool_core::seams::{HAND_OFF_POINTS, KILL_POINTS};

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
    let threads: Vec<_> = points
        .iter()
        .map(|&p| std::thread::spawn(move || kill_then_successor(p)))
        .collect();
    let failed: Vec<String> = threads
        .into_iter()
        .zip(&points)
        .filter_map(|(t, p)| t.join().err().map(|_| p.to_string()))
        .collect();
    assert!(failed.is_empty(), "kill points that failed: {failed:?}");
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
