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
use spool_tests::{describe, indexed_ids, output, ready_under, spool, walk, KillOnDrop};

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

/// Adds the ids `ids` reports to `staged` until it holds `n`.
fn await_ids(ids: &Receiver<String>, staged: &mut BTreeSet<String>, n: usize) {
    while staged.len() < n {
        let id = ids
            .recv_timeout(Duration::from_secs(30))
            .expect("the producer reports each pack");
        staged.insert(id);
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

/// The daemon of [`daemon`], its stderr (its log) written to `log`.
fn daemon_logging(root: &Path, log: &Path) -> KillOnDrop {
    std::fs::create_dir_all(root).unwrap();
    KillOnDrop(
        spool()
            .args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
            .arg("--spool-root")
            .arg(root)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn spool run"),
    )
}

/// The catalog key's directory under `root` (the one directory that is
/// not the embedded store).
fn key_dir(root: &Path) -> PathBuf {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && !p.ends_with(".store"))
        .expect("a catalog key directory")
}

/// The rank directory of the one producer under `root` that consented to
/// a pack.
fn owner_dir(root: &Path) -> PathBuf {
    std::fs::read_dir(key_dir(root))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("_refs").is_dir())
        .expect("a producer's rank directory")
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

/// `spool status --json ROOT`'s row of rank directory `dir`.
fn status_row(root: &Path, dir: &Path) -> serde_json::Value {
    let out = output(spool().args(["status", "--json"]).arg(root));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["rank_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == serde_json::json!(dir))
        .expect("the producer's row")
        .clone()
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
    await_ids(&ids, &mut staged, 40);
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

/// A sink-only producer that exits beside a daemon releases as an engine
/// does: it waits while the daemon's confirmations come and removes its
/// packs, so it leaves nothing to adopt (its rank directory is gone at
/// its exit), and every pack is indexed once.
#[test]
fn a_sink_only_producer_exiting_beside_a_daemon_waits_for_its_confirmations() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let _daemon = daemon(&root);
    std::thread::sleep(Duration::from_millis(500));
    let out = output(
        spool()
            .args(["produce", "--packs", "40", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let staged: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(staged.len(), 40);
    let left: Vec<PathBuf> = std::fs::read_dir(key_dir(&root))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(spool_core::RankDirName::parse)
                .is_some_and(|r| !r.is_manual())
                && p.join("_refs").exists()
        })
        .collect();
    assert!(left.is_empty(), "the producer left {left:?} to adoption");
    wait_for("every pack indexed", Duration::from_secs(30), || {
        indexed_ids(&root).is_superset(&staged)
    });
    assert_eq!(indexed_ids(&root), staged);
}

/// With no daemon, a hand-off producer's packs wait in its directory; once
/// it exits, `run --once` adopts them as any dead sibling's: each indexed
/// once, and no ref or confirmation left behind.
#[test]
fn without_a_daemon_a_hand_off_producer_ships_by_exiting() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let staged = spool_tests::produce_ids(&root, 3);
    assert_eq!(staged.len(), 3);
    assert_eq!(ready_under(&root).len(), 3);
    spool_tests::run_once(&root);
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

/// An embedded engine told to ship through the daemon (`service.ship =
/// "daemon"`) starts no service of its own: with no daemon its packs wait
/// in its directory, consented and unindexed, while it lives; once a daemon
/// starts they are shipped and the engine removes them itself, and its
/// close (it waits for confirmations while they come) ends drained, exit 0.
/// `spool run` refuses the key as its own flag (it is the daemon) and
/// ignores it in a shared configuration file.
#[test]
fn an_engine_set_to_ship_by_the_daemon_hands_its_packs_off_and_ships_nothing_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    std::fs::create_dir_all(&root).unwrap();
    let mut prod = KillOnDrop(
        spool()
            .args(["produce", "--serve", "--set", "service.ship=daemon"])
            .args(["--packs", "5", "--hold", "--spool-root"])
            .arg(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn spool produce --serve"),
    );
    let ids = lines(prod.stdout.take().unwrap());
    let mut staged = BTreeSet::new();
    await_ids(&ids, &mut staged, 5);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ready_under(&root).len(), 5, "the engine shipped by itself");
    // it built no store or catalog client: the embedded ones were never made
    for made in [".store", ".catalog.db"] {
        assert!(!root.join(made).exists(), "a hand-off engine made {made}");
    }
    assert!(
        indexed_ids(&root).is_empty(),
        "the engine indexed by itself"
    );
    let refs = walk(&root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "ref"))
        .count();
    assert_eq!(refs, 5, "every staged pack is consented");

    let _daemon = daemon(&root);
    wait_for("every pack indexed", Duration::from_secs(30), || {
        indexed_ids(&root) == staged
    });
    wait_for(
        "every pack released by the engine",
        Duration::from_secs(10),
        || ready_under(&root).is_empty(),
    );
    assert!(prod.try_wait().unwrap().is_none(), "the producer exited");
    kill(Pid::from_raw(prod.id() as i32), Signal::SIGTERM).unwrap();
    let status = prod.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut prod.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("handed off to the node's daemon"),
        "the producer does not say who ships: {stderr}"
    );

    let out = output(
        spool()
            .args([
                "run",
                "--once",
                "--set",
                "service.ship=daemon",
                "--spool-root",
            ])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("spool run is that daemon"),
        "{}",
        describe(&out)
    );
    // the same key in a configuration file the producers share (or their
    // environment) does not stop the daemon: it ships itself
    let file = tmp.path().join("shared.toml");
    std::fs::write(&file, "[service]\nship = \"daemon\"\n").unwrap();
    let out = output(
        spool()
            .arg("--config")
            .arg(&file)
            .args(["run", "--once", "--timeout", "30", "--spool-root"])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("drained:"),
        "{}",
        describe(&out)
    );
}

/// A daemon that cannot write its confirmations (the owner's
/// `_shipped/<rank>/` is immutable, `chattr +i`, as root, which permission
/// bits do not stop; else mode 0555) says so once, ships nothing twice,
/// leaves the packs with their owner, and confirms them once it can.
#[test]
fn a_daemon_that_cannot_confirm_says_so_once_and_confirms_once_it_can() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let log = tmp.path().join("daemon.log");
    let (mut prod, ids) = producer(&root, 3, "0.01");
    let mut staged = BTreeSet::new();
    await_ids(&ids, &mut staged, 3);
    let rank_dir = owner_dir(&root);
    let shipped = key_dir(&root)
        .join("_shipped")
        .join(rank_dir.file_name().unwrap());
    assert!(shipped.is_dir(), "the owner watches {}", shipped.display());
    let root_user = nix::unistd::geteuid().is_root();
    let lock_down = |on: bool| {
        if root_user {
            let flag = if on { "+i" } else { "-i" };
            let ok = std::process::Command::new("chattr")
                .arg(flag)
                .arg(&shipped)
                .status()
                .expect("chattr (e2fsprogs)");
            assert!(ok.success(), "chattr {flag} {}", shipped.display());
        } else {
            use std::os::unix::fs::PermissionsExt;
            let mode = if on { 0o555 } else { 0o755 };
            std::fs::set_permissions(&shipped, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    };
    lock_down(true);
    let _daemon = daemon_logging(&root, &log);
    wait_for("every pack indexed", Duration::from_secs(30), || {
        indexed_ids(&root) == staged
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ready_under(&root).len(),
        3,
        "a pack left its owner unconfirmed"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        said.matches("cannot confirm").count(),
        1,
        "not said exactly once: {said}"
    );
    assert!(said.contains("_shipped"), "the error names no path: {said}");
    // Operators see who serves the waiting packs: status and lock owner
    // name the daemon.
    let daemon_pid = u64::from(_daemon.id());
    let row = status_row(&root, &rank_dir);
    assert_eq!(row["served_by"]["pid"], daemon_pid, "{row}");
    assert_eq!(row["served_by"]["live"], true, "{row}");
    // shipped but unconfirmed is said as such, never "being shipped"
    assert_eq!(row["hand_off"]["unconfirmed"], 3, "{row}");
    assert_eq!(row["hand_off"]["waiting"], 0, "{row}");
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not confirmed")
                && r.contains("_shipped")
                && !r.contains("being shipped")),
        "{row}"
    );
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("spool run pid {daemon_pid}"))),
        "{row}"
    );
    let out = output(spool().args(["lock", "owner", "--json"]).arg(&rank_dir));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["served_by"]["pid"], daemon_pid, "{v}");
    lock_down(false);
    wait_for(
        "the packs confirmed and released by their owner",
        Duration::from_secs(40),
        || ready_under(&root).is_empty(),
    );
    assert_eq!(indexed_ids(&root), staged);
    assert!(prod.try_wait().unwrap().is_none(), "the producer exited");
    prod.kill().unwrap();
    prod.wait().unwrap();
}

/// A live owner whose `_refs/` holds 100 000 refs naming nothing
/// shippable (badly named, or naming packs that do not exist) stalls no
/// one: another owner's packs and its own real ones are shipped promptly,
/// and the daemon's log says a few lines, not one per ref.
#[test]
fn a_flood_of_bad_refs_stalls_no_owner_and_is_reported_in_a_few_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let log = tmp.path().join("daemon.log");
    let (mut flooder, flooder_ids) = producer(&root, 2, "0.01");
    let mut staged = BTreeSet::new();
    await_ids(&flooder_ids, &mut staged, 2);
    let refs = owner_dir(&root).join("_refs");
    for i in 0..50_000u32 {
        std::fs::write(refs.join(format!("junk-{i}.ref")), b"").unwrap();
        std::fs::write(
            refs.join(format!("{:032x}.ref", 0xdead_0000_u64 + u64::from(i))),
            b"",
        )
        .unwrap();
    }
    let _daemon = daemon_logging(&root, &log);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (mut other, other_ids) = producer(&root, 5, "0.05");
    await_ids(&other_ids, &mut staged, 7);
    wait_for("every real pack indexed", Duration::from_secs(30), || {
        indexed_ids(&root) == staged
    });
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "shipping took {took:?}");
    let said = std::fs::read_to_string(&log).unwrap();
    let lines = said.lines().filter(|l| l.contains("refusing")).count();
    assert!(
        (1..=10).contains(&lines),
        "{lines} lines of refusals for 50 000 bad names: {}",
        said.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    assert!(said.contains("49997 more ref(s)"), "{said}");
    for p in [&mut flooder, &mut other] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
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
    await_ids(&ids, &mut staged, 30);
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

/// A daemon killed while it wrote its shipper record leaves the record's
/// temp file (`_shipped/.shipper.<8 hex>.tmp`) and no record: the next
/// daemon serving no owner removes it (and `_shipped/` once empty), and
/// leaves a stranger's file there alone.
#[test]
fn a_shipper_record_half_written_by_a_killed_daemon_is_swept_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let staged = spool_tests::produce_ids(&root, 1);
    let shipped = key_dir(&root).join("_shipped");
    std::fs::create_dir_all(&shipped).unwrap();
    let temp = shipped.join(".shipper.0badcafe.tmp");
    std::fs::write(&temp, b"half a record").unwrap();
    spool_tests::run_once(&root);
    assert!(indexed_ids(&root).is_superset(&staged));
    assert!(!temp.exists(), "the half-written record is left behind");
    assert!(!shipped.exists(), "an empty _shipped/ is left behind");

    // a file that is not the record's temp stays
    std::fs::create_dir_all(&shipped).unwrap();
    let stranger = shipped.join("notes.txt");
    std::fs::write(&stranger, b"mine").unwrap();
    spool_tests::run_once(&root);
    assert_eq!(std::fs::read(&stranger).unwrap(), b"mine");
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

/// The README's cross-user set-up: producers run as one user, the daemon
/// as another, both in one group with `spool.mode = "0770"` and
/// `spool.group` set (privilege-dropped children; the ids need no
/// `/etc/passwd` entry). A live producer's hand-off is shipped and
/// confirmed (the producer removes its packs itself), and an exited
/// producer's directory, `_refs` included, is adopted and removed: every
/// hand-off file carries the group's mode.
#[test]
fn producers_and_the_daemon_as_different_users_in_one_group_ship_and_confirm() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    const PRODUCER: u32 = 61_001;
    const DAEMON: u32 = 61_002;
    const GROUP: u32 = 61_100;
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test drops privileges to two users: it needs root (CI runs as root)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().to_path_buf();
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
    // a copy of the binary both users can run
    let bin = top.join("bin").join("spool");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(spool_tests::spool_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `install -d -m 2770 -g spool /var/lib/spool`
    let root = top.join("spool");
    std::fs::create_dir(&root).unwrap();
    nix::unistd::chown(&root, None, Some(nix::unistd::Gid::from_raw(GROUP))).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let as_user = |uid: u32| {
        let mut c = std::process::Command::new(&bin);
        c.uid(uid)
            .gid(GROUP)
            .env("RUST_LOG", "warn")
            .env("SPOOL_MODE", "0770")
            .env("SPOOL_GROUP", GROUP.to_string())
            .env("HOME", &top);
        c
    };
    // an exited producer: a dead sibling with consented packs
    let out = output(
        as_user(PRODUCER)
            .args(["produce", "--packs", "3", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let mut staged: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let exited = owner_dir(&root);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&exited.join("_refs")), 0o770);
    // a live producer handing off
    let mut live = KillOnDrop(
        as_user(PRODUCER)
            .args([
                "produce",
                "--packs",
                "4",
                "--pack-interval",
                "0.05",
                "--hold",
            ])
            .arg("--spool-root")
            .arg(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ids = lines(live.stdout.take().unwrap());
    await_ids(&ids, &mut staged, 7);
    let log = top.join("daemon.log");
    let _daemon = KillOnDrop(
        as_user(DAEMON)
            .args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
            .arg("--spool-root")
            .arg(&root)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // (the catalog is read only after the daemon stops: a read by root
    // first would create the database root's)
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready_under(&root).is_empty() || exited.exists() {
        assert!(
            Instant::now() < deadline,
            "not shipped within 30 s: ready {:?}, {} exists: {}; the daemon's log:\n{}",
            ready_under(&root),
            exited.display(),
            exited.exists(),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!log_text().contains("ermission denied"), "{}", log_text());
    drop(_daemon);
    drop(live);
    assert_eq!(indexed_ids(&root), staged);
    let shipped = key_dir(&root).join("_shipped");
    if shipped.exists() {
        assert_eq!(mode(&shipped), 0o770);
    }
}

/// A pack the daemon refuses (changed after its owner consented: it fails
/// validation) is said as refused, with why, by `status` (never "being
/// shipped"), and stays with its owner; the others ship.
#[test]
fn a_pack_the_shipper_refuses_is_shown_refused_by_status_not_being_shipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let (mut prod, ids) = producer(&root, 3, "0.01");
    let mut staged = BTreeSet::new();
    await_ids(&ids, &mut staged, 3);
    let rank_dir = owner_dir(&root);
    // one pack changed after consent: same length, other bytes
    let victim = ready_under(&root).into_iter().min().unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let (_daemon, metrics) = daemon_with_metrics(&root);
    wait_for(
        "the two good packs shipped and released",
        Duration::from_secs(30),
        || ready_under(&root) == vec![victim.clone()],
    );
    let row = || status_row(&root, &rank_dir);
    wait_for("the refusal recorded", Duration::from_secs(10), || {
        row()["hand_off"]["refused_by_shipper"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    });
    let row = row();
    assert_eq!(row["hand_off"]["waiting"], 0, "{row}");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("refused by the node's shipper") && !reason.contains("being shipped"),
        "{row}"
    );
    assert!(
        row["hand_off"]["refused_by_shipper"][0]["why"]
            .as_str()
            .is_some_and(|w| !w.is_empty()),
        "{row}"
    );
    // /metrics counts it too, and nothing as unconfirmed
    let text = scrape(&metrics);
    assert_eq!(
        sample(&text, "spool_handed_off_refused_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "spool_handed_off_unconfirmed"),
        Some(0.0),
        "{text}"
    );
    prod.kill().unwrap();
    prod.wait().unwrap();
}

/// The daemon of [`daemon`] serving `/metrics` on a free port: the child
/// and the address it printed in its start event.
fn daemon_with_metrics(root: &Path) -> (KillOnDrop, String) {
    use std::io::BufRead;
    std::fs::create_dir_all(root).unwrap();
    let mut child = KillOnDrop(
        spool()
            .args(["run", "--json", "--metrics-addr", "127.0.0.1:0"])
            .args(["--poll-interval", "60", "--recheck-interval", "1"])
            .arg("--spool-root")
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn spool run"),
    );
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    let addr = v["metrics_addr"].as_str().unwrap().to_string();
    // keep reading, so the daemon never blocks on a full pipe
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, addr)
}

/// `/metrics` of `addr`.
fn scrape(addr: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, text) = rt
        .block_on(spool_tests::http::request(addr, "GET", "/metrics"))
        .unwrap();
    assert_eq!(status, 200, "{text}");
    text
}

/// One sample's value in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Two daemons on one spool root with different node names would both
/// hold a lease and both ship every owner's packs: the second one to come
/// sees the first's record and serves nothing (it says so), so every pack
/// is shipped by one daemon.
#[test]
fn a_second_daemon_with_another_node_name_serves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    std::fs::create_dir_all(&root).unwrap();
    let run = |node: &str, log: &Path| {
        KillOnDrop(
            spool()
                .args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
                .arg("--spool-root")
                .arg(&root)
                .env("SPOOL_NODE_NAME", node)
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .expect("spawn spool run"),
        )
    };
    let (mut prod, ids) = producer(&root, 40, "0.05");
    let mut staged = BTreeSet::new();
    await_ids(&ids, &mut staged, 1);
    let (log_a, log_b) = (tmp.path().join("a.log"), tmp.path().join("b.log"));
    let _a = run("node-a", &log_a);
    let record = key_dir(&root).join("_shipped").join(".shipper");
    wait_for("the first daemon serving", Duration::from_secs(20), || {
        std::fs::read_to_string(&record).is_ok_and(|r| r.contains("node-a"))
    });
    let _b = run("node-b", &log_b);
    await_ids(&ids, &mut staged, 40);
    wait_for(
        "every pack shipped and released",
        Duration::from_secs(40),
        || ready_under(&root).is_empty(),
    );
    let b = std::fs::read_to_string(&log_b).unwrap();
    assert!(
        b.contains("another daemon, of node name \"node-a\""),
        "the second daemon did not say it stands aside:\n{b}"
    );
    assert_eq!(
        b.matches("uploaded pack").count(),
        0,
        "the second daemon shipped an owner's packs:\n{b}"
    );
    prod.kill().unwrap();
    prod.wait().unwrap();
    assert_eq!(indexed_ids(&root), staged);
}
