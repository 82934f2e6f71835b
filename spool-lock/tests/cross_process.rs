//! Cross-process tests: real child processes (the exec'd
//! `spool-lock-helper`, and fork children that only make async-signal-safe
//! calls) against the real kernel flock.
#![forbid(unsafe_code)]

mod common;

use common::{alive, pid_in, Helper, KillOnDrop};
use spool_lock::{
    acquire, held_by_this_process, read_owner, testing, try_adopt, verify_held_by_caller, Error,
    LockOptions, Purpose, LOCK_FILE_NAME,
};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn opts() -> LockOptions {
    LockOptions::default()
}

#[test]
fn a_second_process_is_refused_naming_the_holder_and_sigkill_frees_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut holder = Helper::spawn_in("hold", &dir, &[]);
    holder.expect("held");
    let err = acquire(&dir, &opts()).unwrap_err();
    assert!(err.is_owned_by_another(), "{err}");
    let msg = err.to_string();
    let want = format!(
        "spool directory {} is owned by pid {} on host {} (it holds {}/.owner.lock)",
        dir.display(),
        holder.pid(),
        spool_lock::host_name(),
        dir.display()
    );
    assert!(msg.starts_with(&want), "{msg}\nwanted: {want}");
    // The record names the holder and why it holds it.
    let status = read_owner(&dir).unwrap();
    assert!(status.held);
    let record = status.record.unwrap();
    assert_eq!(record.pid, Some(holder.pid()));
    assert_eq!(record.purpose, Purpose::Claim);
    // The kernel drops the lock with its holder: free at once.
    holder.kill();
    assert!(!read_owner(&dir).unwrap().held);
    acquire(&dir, &opts()).unwrap().release().unwrap();
}

/// Waits (up to 5 s) until `read_owner(dir)` names `pid` as a shared holder.
fn wait_shared_by(dir: &Path, pid: u32) -> spool_lock::OwnerStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = read_owner(dir).unwrap();
        if status.shared_by.contains(&pid) || std::time::Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_process_holding_a_shared_flock_is_named_by_probes_and_refuses_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    acquire(&dir, &opts()).unwrap().release().unwrap();
    // A reader (flock(1), a real process) holding a shared flock on the
    // lock file.
    {
        let target = dir.join(LOCK_FILE_NAME);
        let reader = Command::new("flock")
            .args(["-s", "-o"])
            .arg(&target)
            .args(["sleep", "60"])
            // flock's `sleep` child outlives the kill of flock (it holds
            // no lock: -o); it must not hold the test's output open.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = reader.id();
        let guard = KillOnDrop(pid as i32);
        let status = wait_shared_by(&dir, pid);
        assert_eq!(status.shared_by, vec![pid], "{}", target.display());
        assert!(!status.held, "a shared holder read as an exclusive one");
        let err = acquire(&dir, &opts()).unwrap_err();
        assert!(matches!(err, Error::HeldShared { .. }), "{err}");
        assert!(err.to_string().contains(&format!("pid {pid}")), "{err}");
        assert!(!err.is_owned_by_another(), "{err}");
        drop(guard);
        let mut reader = reader;
        reader.wait().unwrap();
        assert!(read_owner(&dir).unwrap().shared_by.is_empty());
        acquire(&dir, &opts()).unwrap().release().unwrap();
    }
}

#[test]
fn held_by_caller_beside_another_process_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut holder = Helper::spawn_in("hold", &dir, &[]);
    holder.expect("held");
    let err = verify_held_by_caller(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::OwnedByOther { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("pid {}", holder.pid())),
        "{err}"
    );
    assert!(!held_by_this_process(&dir).unwrap());
    // With fdinfo hiding lock lines the record decides, and it names
    // another pid: still refused, naming that holder.
    testing::set_fdinfo_hides_locks(true);
    let err = verify_held_by_caller(&dir, &opts()).unwrap_err();
    testing::set_fdinfo_hides_locks(false);
    assert!(
        err.to_string().contains(&format!("pid {}", holder.pid())),
        "{err}"
    );
    holder.finish();
}

#[test]
fn try_adopt_records_adopting_and_a_rival_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let claim = try_adopt(&dir, &opts()).unwrap();
    assert_eq!(
        read_owner(&dir).unwrap().record.unwrap().purpose,
        Purpose::Adopting
    );
    let mut rival = Helper::spawn_in("try", &dir, &["adopt"]);
    let line = rival.expect("refused");
    assert!(line.contains("owned=true"), "{line}");
    assert!(
        line.contains(&format!("pid {}", std::process::id())),
        "{line}"
    );
    claim.mark_blocked("a pack cannot be uploaded").unwrap();
    let status = read_owner(&dir).unwrap();
    assert_eq!(
        status.record.unwrap().purpose,
        Purpose::Blocked("a pack cannot be uploaded".into())
    );
    claim.release().unwrap();
    // The mark survives the release (other services skip the directory)...
    let status = read_owner(&dir).unwrap();
    assert!(!status.held);
    assert!(matches!(
        status.record.unwrap().purpose,
        Purpose::Blocked(_)
    ));
    // ...and the next take rewrites the record.
    let claim = acquire(&dir, &opts()).unwrap();
    assert_eq!(
        read_owner(&dir).unwrap().record.unwrap().purpose,
        Purpose::Claim
    );
    claim.release().unwrap();
}

/// 200 trials of two processes released at once on an outer directory and
/// a rank directory inside it: never both win (the nesting check runs after
/// the lock is taken).
#[test]
fn racing_outer_and_inner_takes_never_both_win() {
    let tmp = tempfile::tempdir().unwrap();
    let mut both = 0;
    let mut outer_won = 0;
    let mut inner_won = 0;
    for trial in 0..200 {
        let outer = tmp.path().join(format!("t{trial}"));
        std::fs::create_dir(&outer).unwrap();
        let inner = outer.join("key").join("r0-0000abcd");
        let mut a = Helper::spawn_in("race", &outer, &[]);
        let mut b = Helper::spawn_in("race", &inner, &[]);
        a.send("go");
        b.send("go");
        let ra = a.line();
        let rb = b.line();
        let (wa, wb) = (ra == "won", rb == "won");
        assert!(ra == "won" || ra.starts_with("refused"), "{ra}");
        assert!(rb == "won" || rb.starts_with("refused"), "{rb}");
        if wa && wb {
            both += 1;
        }
        outer_won += wa as u32;
        inner_won += wb as u32;
        a.finish();
        b.finish();
    }
    eprintln!("outer won {outer_won}, inner won {inner_won} of 200");
    assert_eq!(both, 0, "outer and inner both won in {both} of 200 trials");
}

/// A watcher lists the parent over and over while 100 directories are
/// created (each take slowed between the lock file's open and its flock):
/// it never sees one unheld, because a new directory appears locked.
#[test]
fn a_watcher_never_sees_a_new_directory_unheld() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("key");
    std::fs::create_dir(&parent).unwrap();
    testing::set_lock_hook(
        &parent,
        Arc::new(|point, _| {
            if point == spool_lock::HookPoint::LockFileOpened {
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
        }),
    );
    let mut watcher = Helper::spawn_in("watch", &parent, &["100"]);
    watcher.expect("watching");
    let mut claims = Vec::new();
    for i in 0..100 {
        claims.push(acquire(&parent.join(format!("r{i}-0000000{}", i % 10)), &opts()).unwrap());
    }
    let verdict = watcher.line();
    assert_eq!(verdict, "ok 100", "the watcher saw a new directory unheld");
    testing::clear_lock_hook(&parent);
    for c in claims {
        c.release().unwrap();
    }
}

#[test]
fn a_lock_file_removed_behind_a_live_owner_still_keeps_everyone_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut owner = Helper::spawn_in("hold", &dir, &[]);
    owner.expect("held");
    std::fs::remove_file(dir.join(LOCK_FILE_NAME)).unwrap();
    let status = read_owner(&dir).unwrap();
    assert!(status.held && status.lock_file_replaced && !status.lock_file_present);
    let err = acquire(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::LockFileReplaced { .. }), "{err}");
    assert!(err.to_string().contains("replaced"), "{err}");
    // The refused take left no lock file behind.
    assert!(!dir.join(LOCK_FILE_NAME).exists());
    let err = try_adopt(&dir, &opts()).unwrap_err();
    assert!(err.is_owned_by_another(), "{err}");
    let err = verify_held_by_caller(&dir, &opts()).unwrap_err();
    assert!(err.is_owned_by_another(), "{err}");
    // Once the owner dies the directory is adoptable.
    owner.kill();
    assert!(!read_owner(&dir).unwrap().held);
    let claim = try_adopt(&dir, &opts()).unwrap();
    assert!(claim.release_and_remove_if_empty().unwrap());
}

#[test]
fn a_lock_file_unlinked_between_open_and_flock_is_opened_and_locked_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(LOCK_FILE_NAME), b"").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    testing::set_lock_hook(
        &dir,
        Arc::new(move |point, path: &Path| {
            if point == spool_lock::HookPoint::LockFileOpened
                && c.fetch_add(1, Ordering::SeqCst) == 0
            {
                std::fs::remove_file(path).unwrap();
            }
        }),
    );
    let claim = acquire(&dir, &opts()).unwrap();
    testing::clear_lock_hook(&dir);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the take must open and lock again"
    );
    let status = read_owner(&dir).unwrap();
    assert!(status.held && status.lock_file_present && !status.lock_file_replaced);
    let mut rival = Helper::spawn_in("try", &dir, &["adopt"]);
    let line = rival.expect("refused");
    assert!(
        line.contains(&format!("pid {}", std::process::id())),
        "{line}"
    );
    claim.release().unwrap();
}

#[test]
fn stale_lock_files_above_and_below_never_refuse_held_ones_do() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // A stale lock file on the root (a released claim leaves its file).
    acquire(&root, &opts()).unwrap().release().unwrap();
    assert!(root.join(LOCK_FILE_NAME).exists());
    let rank = root.join("key").join("r0-00000001");
    let claim = acquire(&rank, &opts()).unwrap();
    claim.release().unwrap();
    // A stale staging copy below, with an unheld lock file.
    let staging = root.join("key").join(".r1-00000002.deadbeef.creating");
    std::fs::create_dir(&staging).unwrap();
    std::fs::write(
        staging.join(LOCK_FILE_NAME),
        b"host: x\npid: 1\npurpose: claim\n",
    )
    .unwrap();
    acquire(&root, &opts()).unwrap().release().unwrap();
    acquire(&root.join("key"), &opts())
        .unwrap()
        .release()
        .unwrap();

    // A held rank directory (another process) refuses the root, naming it;
    // the refused take leaves no lock file behind.
    let key2 = tmp.path().join("root2").join("key");
    let held = key2.join("r2-00000003");
    let mut owner = Helper::spawn_in("hold", &held, &[]);
    owner.expect("held");
    let root2 = tmp.path().join("root2");
    let err = acquire(&root2, &opts()).unwrap_err();
    assert!(matches!(err, Error::ContainsHeld { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("pid {}", owner.pid())),
        "{err}"
    );
    assert!(!root2.join(LOCK_FILE_NAME).exists());
    // Nested under it: refused, and the directory it created is gone.
    let nested = held.join("inner");
    let err = acquire(&nested, &opts()).unwrap_err();
    assert!(matches!(err, Error::NestedUnderHeld { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("pid {}", owner.pid())),
        "{err}"
    );
    assert!(!nested.exists());
    // try_adopt refuses under a held ancestor too.
    std::fs::create_dir(&nested).unwrap();
    let err = try_adopt(&nested, &opts()).unwrap_err();
    assert!(matches!(err, Error::NestedUnderHeld { .. }), "{err}");
    assert!(!nested.join(LOCK_FILE_NAME).exists());
    std::fs::remove_dir(&nested).unwrap();
    owner.finish();

    // A held staging copy (a claim in progress) refuses like any held one.
    let root3 = tmp.path().join("root3");
    let staging = root3.join(".r0-00000004.0badf00d.creating");
    std::fs::create_dir_all(&staging).unwrap();
    let f = std::fs::File::create(staging.join(LOCK_FILE_NAME)).unwrap();
    f.try_lock().unwrap();
    let err = acquire(&root3, &opts()).unwrap_err();
    assert!(matches!(err, Error::ContainsHeld { .. }), "{err}");
    assert!(!root3.join(LOCK_FILE_NAME).exists());
    drop(f);
    acquire(&root3, &opts()).unwrap().release().unwrap();
}

#[test]
fn a_fork_child_does_not_keep_the_lock_after_its_parent_dies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut owner = Helper::spawn_in("hold-fork", &dir, &[]);
    let lines = owner.expect_each(&["forked", "held", "child"]);
    let worker = pid_in(&lines[0]);
    let _reap = KillOnDrop(worker);
    // The worker reports (over the pipe) that it ran past fork and its
    // handler: its copies are closed and its claim reads as not held.
    let report = &lines[2];
    assert!(report.ends_with("closed=1 held=0"), "{report}");
    assert!(read_owner(&dir).unwrap().held, "the parent still holds it");
    owner.kill();
    assert!(alive(worker));
    let status = read_owner(&dir).unwrap();
    assert!(!status.held, "the fork child kept its dead parent's lock");
}

fn fork_inside(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    if mode == "fork-in-take" {
        std::fs::create_dir(&dir).unwrap();
    }
    let mut owner = Helper::spawn_in(mode, &dir, &[]);
    let last = if mode == "fork-in-take" {
        "held"
    } else {
        "released"
    };
    let lines = owner.expect_each(&["forked", "child", last]);
    let worker = pid_in(&lines[0]);
    let _reap = KillOnDrop(worker);
    if mode == "fork-in-take" {
        owner.kill();
    }
    assert!(alive(worker));
    let status = read_owner(&dir).unwrap();
    assert!(
        !status.held,
        "{mode}: the worker forked inside kept the lock"
    );
}

#[test]
fn a_fork_from_another_thread_inside_a_take_leaves_the_child_without_the_lock() {
    fork_inside("fork-in-take");
}

#[test]
fn a_fork_from_another_thread_inside_a_release_leaves_the_child_without_the_lock() {
    fork_inside("fork-in-release");
}

#[test]
fn a_fork_child_cannot_mark_its_parents_claim_blocked() {
    // The child's copies of the claim's descriptors were closed at the
    // fork, and a file it opens takes one of their numbers: marking the
    // claim from the child is refused as not held, and writes neither the
    // lock file nor the file that took the number.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut owner = Helper::spawn_in("mark-in-fork", &dir, &[]);
    let lines = owner.expect_each(&["forked", "held", "child"]);
    assert_eq!(lines[2], "child not-held");
    let status = read_owner(&dir).unwrap();
    assert!(status.held, "the parent still holds it");
    assert_eq!(status.record.unwrap().purpose, Purpose::Claim);
    assert_eq!(
        std::fs::read(dir.with_extension("scratch")).unwrap(),
        b"",
        "the child wrote a record through a reused descriptor number"
    );
    owner.finish();
}
