//! The real environment's verdicts on real directories and real errno
//! values: a transient failure (EMFILE) is never a
//! permanent "not ours".

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use spool_lock::LockOptions;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_core::siblings::{self, Owner};

use super::{is_permanent, is_read_only, is_transient, probe_sync, take_sync, Env, HeldSiblings};
use crate::adoption::{AdoptRefusal, AdoptionEnv, PackOutcome, ProbeVerdict};
use crate::bound::Bound;
use crate::drain::{Drain, DrainParts};
use crate::service::tests::{block_on, logged, stage, Fixture};

/// Lowers this process's descriptor limit to its lowest free descriptor
/// number (every open fails with EMFILE) until dropped. nextest runs each
/// test in a process of its own, so nothing else sees it.
struct NoMoreFiles {
    soft: u64,
    hard: u64,
}

impl NoMoreFiles {
    fn now() -> NoMoreFiles {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let lowest_free = std::fs::File::open("/dev/null").unwrap().as_raw_fd();
        setrlimit(Resource::RLIMIT_NOFILE, lowest_free as u64, hard).unwrap();
        assert!(std::fs::File::open("/dev/null").is_err(), "EMFILE is on");
        NoMoreFiles { soft, hard }
    }
}

impl Drop for NoMoreFiles {
    fn drop(&mut self) {
        setrlimit(Resource::RLIMIT_NOFILE, self.soft, self.hard).unwrap();
    }
}

/// A rank directory under `root` claimed, given `packs` packs and let go,
/// as a producer that exited leaves it.
fn dead_sibling(root: &Path, packs: usize) -> std::path::PathBuf {
    let key = crate::service::tests::destination("a")
        .catalog_key()
        .unwrap();
    let claim = spool_core::claim_rank_dir(root, &key, 1, &LockOptions::default()).unwrap();
    let dir = claim.dir().to_path_buf();
    crate::service::tests::stage(&dir, packs);
    claim.release().unwrap();
    dir
}

#[test]
fn emfile_is_transient_for_probe_and_take_and_the_sibling_is_taken_once_it_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dead_sibling(tmp.path(), 1);

    let (probe, take) = {
        let _limit = NoMoreFiles::now();
        (probe_sync(&dir), take_sync(&dir, LockOptions::default()))
    };
    // no verdict from the probe: the take decides
    assert_eq!(probe, ProbeVerdict::Dead);
    match take {
        Err(AdoptRefusal::Retryable(why)) => {
            // the cause is spool-lock's typed error, errno and all
            let errno = std::error::Error::source(&why)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .and_then(|e| e.raw_os_error());
            assert_eq!(errno, Some(24), "names EMFILE: {why}");
            assert!(why.downcast_ref::<spool_lock::Error>().is_some(), "{why:?}");
        }
        other => panic!("EMFILE must be retryable, never unadoptable: {other:?}"),
    }
    // the next pass, with descriptors again, takes it
    let (claim, spool) = take_sync(&dir, LockOptions::default()).expect("taken once EMFILE passed");
    assert_eq!(spool.scan(&Default::default()).unwrap().len(), 1);
    drop(spool);
    claim.release().unwrap();
}

/// A sibling whose lock another process took between the probe and the
/// take (here `flock -x` on its lock file) is refused as live: probed
/// again when due, never a failure that backs the loop off.
#[test]
fn a_take_beside_another_process_holding_the_lock_is_refused_as_live() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = dead_sibling(tmp.path(), 0);
    let lock = dir.join(spool_lock::LOCK_FILE_NAME);
    // its own process group: the lock and the `sleep` holding it go at once
    let mut holder = std::process::Command::new("flock")
        .arg("-x")
        .arg(&lock)
        .args(["sleep", "30"])
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("util-linux's flock");
    let held = || {
        !std::process::Command::new("flock")
            .args(["-x", "-n"])
            .arg(&lock)
            .arg("true")
            .status()
            .unwrap()
            .success()
    };
    let t = Instant::now();
    while !held() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "flock never took {lock:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let take = take_sync(&dir, LockOptions::default());
    let group = nix::unistd::Pid::from_raw(holder.id() as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    holder.wait().unwrap();
    match take {
        Err(AdoptRefusal::Live(why)) => assert!(why.to_string().contains("r1"), "{why}"),
        other => panic!("a held sibling must be refused as live: {other:?}"),
    }
}

/// What blocks a sibling and what is retried: another user's files block
/// it (once, never a loop); a read-only filesystem blocks it
/// until a recheck (neither permanent nor a backoff); a full disk or a
/// descriptor limit is retried.
#[test]
fn eacces_blocks_a_sibling_erofs_waits_for_a_recheck_enospc_and_emfile_are_retried() {
    let io = |errno| spool_lock::Error::Io {
        op: "open",
        path: "/spool/key/r1-00000001/.owner.lock".into(),
        source: std::io::Error::from_raw_os_error(errno),
    };
    assert!(
        !is_permanent(&io(30)),
        "EROFS is rechecked, not blocked for good"
    );
    assert!(is_read_only(&io(30)), "EROFS is a read-only take");
    let wrapped = spool_core::Error::from(io(30));
    assert!(
        is_read_only(&wrapped),
        "EROFS under Spool::open's error: {wrapped:?}"
    );
    assert!(!is_read_only(&io(13)) && !is_read_only(&io(28)));
    assert!(!is_permanent(&io(28)), "ENOSPC must be retried");
    assert!(!is_permanent(&io(24)), "EMFILE must be retried");
    assert!(is_permanent(&io(13)), "EACCES blocks the sibling");
    // a sibling that Spool::open fails on is retried only for a shortage
    assert!(is_transient(&io(24)) && is_transient(&io(28)));
    assert!(!is_transient(&io(13)) && !is_transient(&io(30)));
}

/// A lock file that is a symlink is no transient failure: the probe says
/// "not ours" (with spool-lock's words), never "dead, let the take try".
/// A directory that is gone is "vanished" to the probe and to the take.
#[test]
fn a_sibling_whose_lock_file_is_a_symlink_is_not_ours() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r1-00000001");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.join(spool_lock::LOCK_FILE_NAME)).unwrap();
    match probe_sync(&dir) {
        ProbeVerdict::NotOurs(why) => assert!(why.to_string().contains("symlink"), "{why}"),
        other => panic!("a symlinked lock file must not be probed as dead: {other:?}"),
    }
    assert_eq!(probe_sync(&tmp.path().join("gone")), ProbeVerdict::Vanished);
    assert!(matches!(
        take_sync(&tmp.path().join("gone"), LockOptions::default()),
        Err(AdoptRefusal::Vanished)
    ));
}

/// A drain over `own` (held by the caller) into the fixture's store and
/// catalog, for an [`Env`] of its own.
fn drain(fx: &Fixture, own: &Path) -> Drain {
    let config = fx.config(own);
    Drain::new(DrainParts {
        uploader: spool_upload::Uploader::new(config.store.clone(), config.upload.clone()).unwrap(),
        catalog: fx.catalog.clone(),
        store_id: "default".into(),
        host: "h".into(),
        index_batch: 4,
        pipeline_depth: 4,
        index_linger: Duration::from_millis(5),
        fenced: false,
        lease: None,
        own: Arc::new(crate::service::tests::held_spool(own)),
        progress: Default::default(),
        inflight: Default::default(),
        identity: fx.identity(),
    })
}

/// The real environment's steps on real directories, each checked by
/// what it leaves on disk: stale staging copies removed and counted (by
/// the age asked for, not the lock options'); stray files named; a
/// blocked sibling marked and let go; recovery's log names only what it
/// did.
#[test]
fn the_real_environment_counts_names_marks_and_lets_go_of_what_it_found() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let key_dir = own.dir().parent().unwrap().to_path_buf();
    let mut drain = drain(&fx, own.dir());
    let mut held = HeldSiblings::new();
    let mut env = Env {
        drain: &mut drain,
        held: &mut held,
        key_dir: key_dir.clone(),
        own_dir: own.dir().to_path_buf(),
        lock: spool_lock::LockOptions::default(), // staging_max_age 60 s
        bound: Bound::new(Instant::now() + Duration::from_secs(30), Default::default()),
        cancel_flag: Arc::new(AtomicBool::new(false)),
    };

    // two unheld staging copies, a second old: removed for an age of 0,
    // however long the lock options' own staging_max_age
    for name in [
        ".r7-00000007.0badf00d.creating",
        ".r8-00000008.0badf00e.creating",
    ] {
        std::fs::create_dir(key_dir.join(name)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        block_on(env.remove_stale_staging_copies(Duration::from_secs(3600))),
        0,
        "younger than asked: kept"
    );
    assert_eq!(
        block_on(env.remove_stale_staging_copies(Duration::from_millis(10))),
        2
    );
    assert_eq!(block_on(env.remove_stale_staging_copies(Duration::ZERO)), 0);

    // a plain dead sibling: recovery logs nothing it did not do
    let plain = fx.dead_sibling(1, 2);
    block_on(env.try_adopt(&plain)).unwrap();
    let (packs, log) = logged(|| block_on(env.begin_recovery(&plain)));
    assert_eq!(packs.unwrap().len(), 2);
    assert!(
        !log.contains("shipper had confirmed") && !log.contains("temp files"),
        "{log}"
    );

    // a dead owner's confirmed hand-off and a torn temp file: both logged
    let busy = fx.claim(&fx.dest, 2);
    let busy_dir = busy.dir().to_path_buf();
    let ids = stage(&busy_dir, 2);
    let spool = crate::service::tests::held_spool(&busy_dir);
    spool.consent(None, ids[0]).unwrap();
    drop(spool);
    spool_core::handoff::confirm(&busy_dir, &[(None, ids[0])], &spool_lock::Access::PRIVATE)
        .unwrap();
    busy.release().unwrap();
    block_on(env.try_adopt(&busy_dir)).unwrap();
    let (packs, log) = logged(|| block_on(env.begin_recovery(&busy_dir)));
    assert_eq!(
        packs.unwrap().len(),
        1,
        "the confirmed pack is settled, not shipped"
    );
    assert!(
        log.contains("shipper had confirmed") && !log.contains("temp files"),
        "{log}"
    );
    let torn = busy_dir.join(format!(".{}.0badf00d.open", spool_core::PackId::generate()));
    std::fs::write(&torn, b"partial").unwrap();
    let (packs, log) = logged(|| block_on(env.begin_recovery(&busy_dir)));
    let packs = packs.unwrap();
    assert_eq!(packs.len(), 1);
    assert!(
        !log.contains("shipper had confirmed") && log.contains("temp files"),
        "{log}"
    );
    assert!(!torn.exists());
    let done = block_on(env.upload_and_index_round(&busy_dir, &packs));
    assert!(matches!(done[..], [(_, PackOutcome::Indexed)]), "{done:?}");

    // stray files, at the top or nested, are named; the lock file and an
    // empty subdirectory are not
    assert_eq!(block_on(env.other_files(&busy_dir)), None);
    std::fs::create_dir(busy_dir.join("empty")).unwrap();
    assert_eq!(block_on(env.other_files(&busy_dir)), None);
    std::fs::write(busy_dir.join("notes.txt"), b"x").unwrap();
    let found = block_on(env.other_files(&busy_dir)).expect("a stray file is named");
    assert!(
        found.contains("notes.txt") && found.contains("not a pack"),
        "{found}"
    );

    // blocked: marked with the reason, then let go (not held here)
    block_on(env.mark_blocked(&busy_dir, "notes.txt is not a pack"));
    block_on(env.release(&busy_dir));
    let owner = siblings::probe(&busy_dir).unwrap().owner();
    assert_eq!(owner, Owner::Blocked("notes.txt is not a pack".into()));
    // the plain one, let go without a mark: dead again, for a successor
    block_on(env.release(&plain));
    assert_eq!(siblings::probe(&plain).unwrap().owner(), Owner::Dead);
}
