//! The real environment's verdicts on real directories and real errno
//! values: a transient failure (EMFILE) is never a
//! permanent "not ours".

use std::os::fd::AsRawFd;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use spool_lock::LockOptions;

use super::{is_permanent, is_read_only, probe_sync, take_sync};
use crate::adoption::{AdoptRefusal, ProbeVerdict};

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

#[test]
fn emfile_is_transient_for_probe_and_take_and_the_sibling_is_taken_once_it_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let key = crate::service::tests::destination("a")
        .catalog_key()
        .unwrap();
    let claim = spool_core::claim_rank_dir(tmp.path(), &key, 1, &LockOptions::default()).unwrap();
    let dir = claim.dir().to_path_buf();
    crate::service::tests::stage(&dir, 1);
    claim.release().unwrap();

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
}
