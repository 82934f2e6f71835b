//! A full filesystem degrades, never deadlocks, black-box through the
//! `spool` binary on a small tmpfs (mounted by the test; root only, as CI
//! runs): with no free inode, or no free byte, a daemon that was not
//! running starts (it takes a dead sibling's directory in place, or with
//! none the key directory's reserve: no new inode), ships that sibling's packs and a live hand-off owner's, and the
//! owner learns of each confirmation (its own pending slot renamed: no inode)
//! and frees its packs. The store and catalog live off the tmpfs.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use spool_tests::{describe, output, ready_under, spool, KillOnDrop};

/// A tmpfs mounted at a fresh directory, unmounted (lazily) on drop, also
/// when the test panics.
struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    fn mount(at: &Path, options: &str) -> Tmpfs {
        assert!(
            nix::unistd::geteuid().is_root(),
            "mounting a tmpfs needs root (CI runs as root)"
        );
        std::fs::create_dir_all(at).unwrap();
        let out = output(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", options, "spool-full-test"])
                .arg(at),
        );
        assert!(out.status.success(), "mount: {}", describe(&out));
        Tmpfs {
            at: at.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Creates files under `dir` until the filesystem refuses one (no inode
/// left), or writes one file until it refuses a byte (`bytes`).
fn fill(dir: &Path, bytes: bool) -> usize {
    std::fs::create_dir_all(dir).unwrap();
    if bytes {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.join("ballast")).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let mut n = 0;
        while f.write_all(&chunk).is_ok() {
            n += chunk.len();
        }
        // the last partial page too
        while f.write_all(&[0u8]).is_ok() {
            n += 1;
        }
        let _ = f.sync_all();
        n
    } else {
        let mut n = 0;
        while std::fs::File::create(dir.join(format!("f{n}"))).is_ok() {
            n += 1;
        }
        n
    }
}

/// What a case holds when the filesystem fills up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Before {
    /// A dead producer's directory with 5 packs, and a live hand-off owner
    /// with 3: the daemon takes the dead directory as its own.
    DeadAndLive,
    /// Only the empty directory (lock file and all) a killed daemon left,
    /// and a live hand-off owner with 3 packs: the daemon takes the empty
    /// one, and nothing frees an inode but the owner's own removals, which
    /// wait for confirmations the daemon makes without a new inode.
    EmptyAndLive,
    /// Only a live hand-off owner with 3 packs, and no daemon ever ran on
    /// the node: the daemon takes the reserve the owner's claim left in
    /// the key directory while there was room (`.reserve`: a directory
    /// and its lock file, made ahead), and ships.
    LiveAlone,
}

fn case(bytes: bool, before: Before) {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(
        &tmp.path().join("mnt"),
        if bytes {
            "size=2m"
        } else {
            "size=64m,nr_inodes=96"
        },
    );
    let what = if bytes { "bytes" } else { "inodes" };
    let root = fs.at.join("spool");
    let store = format!("file://{}", tmp.path().join("store").display());
    let catalog = format!("sqlite://{}", tmp.path().join("catalog.db").display());
    let with_destination = |c: &mut Command| {
        c.args(["--store", &store, "--catalog", &catalog, "--spool-root"])
            .arg(&root);
    };
    let mut staged = BTreeSet::new();
    if before == Before::DeadAndLive {
        // an exited hand-off producer: a dead sibling holding packs
        let mut cmd = spool();
        cmd.args(["produce", "--packs", "5", "--pack-bytes", "2048"]);
        with_destination(&mut cmd);
        let out = output(&mut cmd);
        assert!(out.status.success(), "{}", describe(&out));
        staged.extend(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string),
        );
    }
    // a live hand-off producer
    let mut cmd = spool();
    cmd.args(["produce", "--packs", "3", "--pack-bytes", "2048", "--hold"]);
    with_destination(&mut cmd);
    let mut live = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(live.stdout.take().unwrap()).lines();
    let want = staged.len() + 3;
    while staged.len() < want {
        staged.insert(lines.next().unwrap().unwrap());
    }
    if before == Before::EmptyAndLive {
        // what a killed daemon leaves: its empty rank directory, locked by
        // nobody
        let key = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.is_dir())
            .unwrap();
        let left = key.join("r0-0000beef");
        std::fs::create_dir(&left).unwrap();
        std::fs::write(left.join(".owner.lock"), b"host h\npid 1\nclaim\n").unwrap();
    }
    let filled = fill(&fs.at.join("filler"), bytes);
    assert!(filled > 0);
    assert!(
        std::fs::create_dir(fs.at.join("probe")).is_err()
            || std::fs::write(fs.at.join("probe").join("x"), b"x").is_err(),
        "the tmpfs is not full"
    );
    // a daemon that was not running starts, and everything ships
    let log = tmp.path().join("daemon.log");
    let mut cmd = spool();
    cmd.args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
        .env("RUST_LOG", "info");
    with_destination(&mut cmd);
    let daemon = KillOnDrop(
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready_under(&root).is_empty() {
        assert!(
            Instant::now() < deadline,
            "full ({what}): not shipped and freed within 30 s: {:?}\nthe daemon's log:\n{}",
            ready_under(&root),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(daemon);
    drop(live);
    let out = output(spool().args(["ls", "--json", "--catalog", &catalog]));
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for id in &staged {
        assert!(text.contains(id.as_str()), "{id} not indexed: {text}");
    }
}

#[test]
fn with_no_free_inode_a_daemon_starts_ships_and_the_owner_frees_its_packs() {
    case(false, Before::DeadAndLive);
}

#[test]
fn with_no_free_byte_a_daemon_starts_ships_and_the_owner_frees_its_packs() {
    case(true, Before::DeadAndLive);
}

#[test]
fn with_no_free_inode_confirmations_cost_none_and_the_owner_frees_its_packs() {
    case(false, Before::EmptyAndLive);
}

#[test]
fn with_no_free_inode_and_only_live_owners_a_daemon_starts_from_the_reserve() {
    case(false, Before::LiveAlone);
}

#[test]
fn with_no_free_byte_and_only_live_owners_a_daemon_starts_from_the_reserve() {
    case(true, Before::LiveAlone);
}

/// A producer whose stages fail on a full filesystem retries them (a new
/// temp file each time, hundreds in 3 s) and says so once, not once per
/// attempt: the warning is throttled per cause (`spool_core::throttle`),
/// every attempt still a `debug` line.
#[test]
fn a_stage_retried_on_a_full_filesystem_is_warned_about_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("mnt"), "size=1m");
    let log = tmp.path().join("producer.log");
    let producer = KillOnDrop(
        spool()
            .args(["produce", "--packs", "30", "--pack-bytes", "65536"])
            .arg("--spool-root")
            .arg(fs.at.join("spool"))
            .env("RUST_LOG", "warn,spool_core::sink=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_secs(3));
    drop(producer);
    let text = std::fs::read_to_string(&log).unwrap();
    let retries = |level: &str| {
        text.lines()
            .filter(|l| l.contains(level) && l.contains("failed (will retry)"))
            .count()
    };
    assert!(
        retries("DEBUG") >= 5,
        "the stage was not retried on the full filesystem:\n{text}"
    );
    assert_eq!(
        retries("WARN"),
        1,
        "one warning per cause wanted, {} attempts:\n{text}",
        retries("DEBUG") + retries("WARN")
    );
}
