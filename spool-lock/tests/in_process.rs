//! In-process tests: double takes, `held_by_caller`, the fdinfo and statfs
//! seams, release and drop.
#![forbid(unsafe_code)]

use spool_lock::{
    acquire, check_node_local, clear_blocked, held_by_this_process, held_claims, is_nested_spool,
    read_owner, remove_stale_staging, testing, try_adopt, verify_held_by_caller, Error,
    LockOptions, LOCK_FILE_NAME, SHARED_FILESYSTEMS,
};
use spool_lock::{Purpose, Unblocked};
use std::time::Duration;

fn opts() -> LockOptions {
    LockOptions::default()
}

#[test]
fn two_takes_in_one_process_refuse_each_other_naming_this_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    for err in [
        acquire(&dir, &opts()).unwrap_err(),
        try_adopt(&dir, &opts()).unwrap_err(),
    ] {
        assert!(matches!(err, Error::HeldByThisProcess { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("this process"), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(!err.is_owned_by_another());
    }
    claim.release().unwrap();
}

#[test]
fn held_by_caller_opens_beside_this_process_lock_and_refuses_when_nothing_holds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    // The directory present, no lock file: the distinct error.
    std::fs::create_dir(&dir).unwrap();
    let err = verify_held_by_caller(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    assert!(err.to_string().contains("nobody holds"), "{err}");

    let claim = acquire(&dir, &opts()).unwrap();
    assert!(held_by_this_process(&dir).unwrap());
    verify_held_by_caller(&dir, &opts()).unwrap();
    claim.release().unwrap();

    // Present with a lock file nobody holds: the same distinct error.
    assert!(dir.join(LOCK_FILE_NAME).exists());
    assert!(!held_by_this_process(&dir).unwrap());
    let err = verify_held_by_caller(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
}

#[test]
fn with_fdinfo_hiding_lock_lines_the_owner_record_decides() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    testing::set_fdinfo_hides_locks(true);
    let held = held_by_this_process(&dir);
    let verified = verify_held_by_caller(&dir, &opts());
    claim.release().unwrap();
    let after = verify_held_by_caller(&dir, &opts());
    testing::set_fdinfo_hides_locks(false);
    assert!(held.unwrap(), "the record names this host and pid");
    verified.unwrap();
    assert!(matches!(after, Err(Error::NotHeld { .. })), "{after:?}");
}

#[test]
fn held_by_caller_still_refuses_a_shared_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    testing::set_filesystem_type(tmp.path(), 0x6969);
    let refused = verify_held_by_caller(&dir, &opts());
    let admitted = verify_held_by_caller(
        &dir,
        &LockOptions {
            allow_shared_filesystem: true,
            ..opts()
        },
    );
    testing::clear_filesystem_type(tmp.path());
    let err = refused.unwrap_err();
    assert!(err.is_shared_filesystem(), "{err}");
    assert!(err.to_string().contains("NFS"), "{err}");
    admitted.unwrap();
    claim.release().unwrap();
}

#[test]
fn every_network_filesystem_is_refused_by_name_and_admitted_with_the_override() {
    let tmp = tempfile::tempdir().unwrap();
    // The list the node-local check names (kept here, not read from the crate, so a
    // magic dropped from the crate turns this red).
    let refused: &[(u32, &str)] = &[
        (0x6969, "NFS"),
        (0x0BD0_0BD0, "Lustre"),
        (0x1983_0326, "BeeGFS"),
        (0xFF53_4D42, "CIFS"),
        (0xFE53_4D42, "SMB2"),
        (0x6573_5546, "FUSE"),
        (0x4750_4653, "GPFS"),
        (0x0102_1997, "9p"),
        (0x5346_414F, "AFS"),
        (0x6B41_4653, "kAFS"),
        (0x2003_0528, "OrangeFS"),
    ];
    assert_eq!(refused.len(), SHARED_FILESYSTEMS.len());
    for (magic, name) in refused {
        testing::set_filesystem_type(tmp.path(), *magic);
        let err = check_node_local(tmp.path(), false).unwrap_err();
        assert!(err.is_shared_filesystem(), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("({name},")), "{name}: {msg}");
        if *name == "FUSE" {
            assert!(msg.contains("local to this node"), "{msg}");
        }
        check_node_local(tmp.path(), true).unwrap();
        // A take is refused before it creates anything.
        let dir = tmp.path().join(format!("spool-{magic:x}"));
        assert!(acquire(&dir, &opts()).unwrap_err().is_shared_filesystem());
        assert!(!dir.exists());
    }
    // ext4 (ext2/3 share it), xfs, btrfs, zfs, tmpfs, overlayfs, CephFS pass.
    for magic in [
        0xEF53u32,
        0x5846_5342,
        0x9123_683E,
        0x2FC1_2FC1,
        0x0102_1994,
        0x794C_7630,
        0x00C3_6400,
    ] {
        testing::set_filesystem_type(tmp.path(), magic);
        check_node_local(tmp.path(), false).unwrap();
    }
    testing::clear_filesystem_type(tmp.path());
    check_node_local(tmp.path(), false).unwrap();
}

#[test]
fn release_and_remove_if_empty_removes_a_drained_directory_and_keeps_one_with_a_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let drained = tmp.path().join("key").join("r0-00000001");
    let claim = acquire(&drained, &opts()).unwrap();
    std::fs::create_dir_all(drained.join("w0").join("x")).unwrap();
    assert!(held_claims().contains(&claim.dir().to_path_buf()));
    let path = claim.dir().to_path_buf();
    assert!(claim.release_and_remove_if_empty().unwrap());
    assert!(!drained.exists());
    assert!(!held_claims().contains(&path));

    let full = tmp.path().join("key").join("r0-00000002");
    let claim = acquire(&full, &opts()).unwrap();
    let path = claim.dir().to_path_buf();
    std::fs::write(full.join("0123456789abcdef0123456789abcdef.ready"), b"pack").unwrap();
    assert!(!claim.release_and_remove_if_empty().unwrap());
    assert!(full.join("0123456789abcdef0123456789abcdef.ready").exists());
    assert!(!read_owner(&full).unwrap().held, "kept, unowned");
    assert!(!held_claims().contains(&path));
    assert!(is_nested_spool(&full));
}

#[test]
fn a_claim_dropped_without_release_still_reads_as_held_by_this_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    let path = claim.dir().to_path_buf();
    drop(claim);
    assert!(held_by_this_process(&dir).unwrap());
    assert!(read_owner(&dir).unwrap().held);
    assert!(held_claims().contains(&path));
    assert!(matches!(
        acquire(&dir, &opts()),
        Err(Error::HeldByThisProcess { .. })
    ));
}

#[test]
fn the_kernel_not_the_record_answers_whether_this_process_holds_the_lock() {
    // A record rewritten to name another pid on another host does not
    // make this process's own flock read as someone else's: fdinfo lists
    // the flock on this process's descriptor, and it decides.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    std::fs::write(
        dir.join(LOCK_FILE_NAME),
        "host: another-host\npid: 1\npurpose: claim\n",
    )
    .unwrap();
    let record = read_owner(&dir).unwrap().record.unwrap();
    assert_eq!(
        (record.host.as_str(), record.pid),
        ("another-host", Some(1))
    );
    assert!(
        held_by_this_process(&dir).unwrap(),
        "this process's flock read as not its own"
    );
    verify_held_by_caller(&dir, &opts()).unwrap();
    // With fdinfo hiding its lock lines only the record is left, and it
    // names another process.
    testing::set_fdinfo_hides_locks(true);
    let hidden = held_by_this_process(&dir);
    testing::set_fdinfo_hides_locks(false);
    assert!(!hidden.unwrap());
    claim.release().unwrap();
    assert!(!held_by_this_process(&dir).unwrap());
}

#[test]
fn owner_records_name_this_host_as_the_kernel_spells_it() {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(spool_lock::host_name(), kernel.trim());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    let record = read_owner(&dir).unwrap().record.unwrap();
    assert_eq!(record.host, kernel.trim());
    claim.release().unwrap();
}

#[test]
fn leftover_staging_directories_never_stop_a_take() {
    // A crash mid-create leaves `.<name>.<8 hex>.creating` behind; a later
    // take draws another name beside it.
    let tmp = tempfile::tempdir().unwrap();
    for hex in ["00000000", "00000001"] {
        std::fs::create_dir(tmp.path().join(format!(".spool.{hex}.creating"))).unwrap();
    }
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    assert!(read_owner(&dir).unwrap().held);
    claim.release().unwrap();
}

#[test]
fn a_lock_file_removed_behind_this_process_still_reads_as_held_by_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    std::fs::remove_file(dir.join(LOCK_FILE_NAME)).unwrap();
    assert!(held_by_this_process(&dir).unwrap());
    verify_held_by_caller(&dir, &opts()).unwrap();
    let err = acquire(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::HeldByThisProcess { .. }), "{err}");
    assert!(
        !dir.join(LOCK_FILE_NAME).exists(),
        "the refused take left a lock file"
    );
    claim.release().unwrap();
}

#[test]
fn stale_staging_copies_are_removed_and_fresh_or_held_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join(".r0-00000001.0000abcd.creating");
    let held = tmp.path().join(".r0-00000002.0000abce.creating");
    let fresh = tmp.path().join(".r0-00000003.0000abcf.creating");
    for d in [&old, &held, &fresh] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join(LOCK_FILE_NAME), b"").unwrap();
    }
    let hold = std::fs::File::open(held.join(LOCK_FILE_NAME)).unwrap();
    hold.try_lock().unwrap();
    // Backdate the old and the held copy by an hour; the fresh one keeps
    // the mtime it was created with. No sleeps: a loaded CI machine must
    // not be able to age the fresh copy past the limit.
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for d in [&old, &held] {
        std::fs::File::open(d)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    }
    let o = LockOptions {
        staging_max_age: Duration::from_secs(600),
        ..opts()
    };
    let removed = remove_stale_staging(tmp.path(), &o).unwrap();
    assert_eq!(removed, vec![old.clone()]);
    assert!(!old.exists() && held.exists() && fresh.exists());
    drop(hold);
}

#[test]
fn a_max_age_of_zero_removes_every_unheld_staging_copy_even_one_dated_ahead() {
    // staging_max_age 0: no copy is young enough to keep, not even one
    // whose mtime is ahead of this clock (its age reads as 0).
    let tmp = tempfile::tempdir().unwrap();
    let ahead = tmp.path().join(".r0-00000001.0000abcd.creating");
    std::fs::create_dir(&ahead).unwrap();
    std::fs::write(ahead.join(LOCK_FILE_NAME), b"").unwrap();
    let in_an_hour = std::time::SystemTime::now() + Duration::from_secs(3600);
    std::fs::File::open(&ahead)
        .unwrap()
        .set_modified(in_an_hour)
        .unwrap();
    let o = LockOptions {
        staging_max_age: Duration::ZERO,
        ..opts()
    };
    assert_eq!(
        remove_stale_staging(tmp.path(), &o).unwrap(),
        vec![ahead.clone()]
    );
    assert!(!ahead.exists());
}

#[test]
fn a_new_directory_is_created_from_a_staging_copy_and_leaves_none_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("key").join("r0-00000001");
    let claim = acquire(&dir, &opts()).unwrap();
    let names: Vec<_> = std::fs::read_dir(tmp.path().join("key"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("r0-00000001")]);
    assert!(spool_lock::is_staging_name(std::ffi::OsStr::new(
        ".r0-00000001.0123abcd.creating"
    )));
    assert!(!spool_lock::is_staging_name(std::ffi::OsStr::new(
        "r0-00000001.0123abcd.creating"
    )));
    claim.release().unwrap();
}

#[test]
fn a_directory_is_a_nested_spool_only_with_a_lock_file_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(spool_lock::lock_path(&dir), dir.join(LOCK_FILE_NAME));
    assert!(!spool_lock::is_nested_spool(&dir));
    std::fs::write(dir.join(LOCK_FILE_NAME), b"").unwrap();
    assert!(spool_lock::is_nested_spool(&dir));
}

#[test]
fn only_dot_name_dot_eight_lowercase_hex_dot_creating_is_a_staging_name() {
    // remove_stale_staging removes only what this names: anything else is
    // someone's directory.
    for (name, staging) in [
        (".r0-00000001.0123abcd.creating", true),
        (".a.b.0123abcd.creating", true),
        ("..0123abcd.creating", false),
        (".r0.0123abc.creating", false),
        (".r0.0123abcde.creating", false),
        (".r0.0123ABCD.creating", false),
        (".r0.0123abcg.creating", false),
        (".r0.zzzzzzzz.creating", false),
        (".0123abcd.creating", false),
        (".r0.0123abcd.created", false),
    ] {
        let got = spool_lock::is_staging_name(std::ffi::OsStr::new(name));
        assert_eq!(got, staging, "{name}");
    }
}

/// Probes (`read_owner`) hammering a directory never make a legitimate take
/// of it fail: they take a momentary shared lock, and a take retries briefly.
#[test]
fn probes_never_make_a_concurrent_take_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probers: Vec<_> = (0..2)
        .map(|_| {
            let (dir, stop) = (dir.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = read_owner(&dir);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut failures = Vec::new();
    for _ in 0..300 {
        match acquire(&dir, &opts()) {
            Ok(c) => c.release().unwrap(),
            Err(e) => failures.push(e.to_string()),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let probes: u64 = probers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(probes > 0);
    assert!(
        failures.is_empty(),
        "{} of 300 takes failed beside probes: {:?}",
        failures.len(),
        failures.first()
    );
}

/// Liveness bounds (generous margins; nextest runs `serial` one at a time).
mod serial {
    use super::*;
    use std::time::Instant;

    /// Probes and refused takes return promptly, and a FIFO planted as the
    /// lock file cannot make a probe block.
    #[test]
    fn probes_and_refusals_return_within_a_second() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spool");
        let claim = acquire(&dir, &opts()).unwrap();
        let t = Instant::now();
        assert!(read_owner(&dir).unwrap().held);
        assert!(matches!(
            acquire(&dir, &opts()),
            Err(Error::HeldByThisProcess { .. })
        ));
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        claim.release().unwrap();

        let fifo_dir = tmp.path().join("fifo");
        std::fs::create_dir(&fifo_dir).unwrap();
        nix::unistd::mkfifo(
            &fifo_dir.join(LOCK_FILE_NAME),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let t = Instant::now();
        let status = read_owner(&fifo_dir).unwrap();
        assert!(!status.held && status.record.is_none());
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
}

#[test]
fn clear_blocked_clears_a_mark_once_and_leaves_anything_else_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    // No directory: an error naming it.
    let err = clear_blocked(&dir, &opts()).unwrap_err();
    assert!(err.to_string().contains("spool"), "{err}");
    // A directory without a lock file: nothing to clear, and no file made.
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(
        clear_blocked(&dir, &opts()).unwrap(),
        Unblocked::NotBlocked { record: None }
    );
    assert!(!dir.join(LOCK_FILE_NAME).exists());

    // An adopter gives up and marks it.
    let claim = try_adopt(&dir, &opts()).unwrap();
    claim.mark_blocked("pack 0123 refused: 403").unwrap();
    // Held (by this very process): refused, the mark stays.
    let err = clear_blocked(&dir, &opts()).unwrap_err();
    assert!(matches!(err, Error::HeldByThisProcess { .. }), "{err}");
    claim.release().unwrap();
    let before = read_owner(&dir).unwrap();
    assert_eq!(
        before.record.as_ref().unwrap().purpose,
        Purpose::Blocked("pack 0123 refused: 403".into())
    );

    match clear_blocked(&dir, &opts()).unwrap() {
        Unblocked::Cleared { why, previous } => {
            assert_eq!(why, "pack 0123 refused: 403");
            assert_eq!(previous, before.record.unwrap());
        }
        other => panic!("expected Cleared, got {other:?}"),
    }
    let after = read_owner(&dir).unwrap();
    assert!(!after.held, "the lock is let go");
    assert_eq!(after.record.as_ref().unwrap().purpose, Purpose::Claim);
    assert!(held_claims().iter().all(|d| !d.ends_with("spool")));

    // Idempotent: a record that is not a mark is left byte for byte (a
    // foreign pid, so a rewrite by this process would show).
    let text = b"host: elsewhere\npid: 1\npurpose: adopting\n".to_vec();
    std::fs::write(dir.join(LOCK_FILE_NAME), &text).unwrap();
    assert!(matches!(
        clear_blocked(&dir, &opts()).unwrap(),
        Unblocked::NotBlocked { record: Some(_) }
    ));
    assert_eq!(std::fs::read(dir.join(LOCK_FILE_NAME)).unwrap(), text);
}

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// What a take creates is private whatever the
/// umask (0 here): missing parents and the directory 0700, the lock file
/// 0600. The 0770 group mode is not narrowed by a umask of 077 either.
#[test]
fn a_take_creates_private_directories_and_lock_files_whatever_the_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("root").join("key").join("r0-00000001");
    let claim = acquire(&dir, &opts()).unwrap();
    for d in [
        tmp.path().join("root"),
        tmp.path().join("root/key"),
        dir.clone(),
    ] {
        assert_eq!(mode_of(&d), 0o700, "{}", d.display());
    }
    assert_eq!(mode_of(&dir.join(LOCK_FILE_NAME)), 0o600);
    claim.release().unwrap();

    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let group = LockOptions {
        access: spool_lock::Access::parse(Some("0770"), None).unwrap(),
        ..opts()
    };
    let dir = tmp.path().join("shared").join("r0-00000002");
    let claim = acquire(&dir, &group).unwrap();
    assert_eq!(mode_of(&tmp.path().join("shared")), 0o770);
    assert_eq!(mode_of(&dir), 0o770);
    assert_eq!(mode_of(&dir.join(LOCK_FILE_NAME)), 0o660);
    claim.release().unwrap();
    // A lock file added to an existing directory gets the mode too.
    let existing = tmp.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    acquire(&existing, &opts()).unwrap().release().unwrap();
    assert_eq!(mode_of(&existing.join(LOCK_FILE_NAME)), 0o600);
}

/// A refused take removes what it created, the parents it
/// made included (while empty).
#[test]
fn a_refused_take_removes_the_parents_it_created() {
    let tmp = tempfile::tempdir().unwrap();
    let outer = tmp.path().join("outer");
    let held = acquire(&outer, &opts()).unwrap();
    let err = acquire(&outer.join("a/b/spool"), &opts()).unwrap_err();
    assert!(matches!(err, Error::NestedUnderHeld { .. }), "{err}");
    assert!(
        !outer.join("a").exists(),
        "the refused take left the parents it created"
    );
    held.release().unwrap();
    // Parents that existed before are kept.
    std::fs::create_dir_all(tmp.path().join("kept/x")).unwrap();
    let held = acquire(&tmp.path().join("kept"), &opts()).unwrap();
    acquire(&tmp.path().join("kept/x/y/spool"), &opts()).unwrap_err();
    assert!(tmp.path().join("kept/x").is_dir());
    assert!(!tmp.path().join("kept/x/y").exists());
    held.release().unwrap();
}

/// The parents a claim creates are fsynced (the fault seam
/// fails the fsync of the new `root/`'s entry for `key/` and the take
/// fails naming it), and the failed take leaves nothing it created.
#[test]
fn created_parents_are_fsynced_and_a_failed_fsync_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    testing::set_parent_fsync_fails(&root, true);
    let err = acquire(&root.join("key/r0-00000001"), &opts()).unwrap_err();
    testing::set_parent_fsync_fails(&root, false);
    match &err {
        Error::Io { op, path, .. } => {
            assert_eq!((*op, path.as_path()), ("fsync", root.as_path()), "{err}")
        }
        other => panic!("expected the fsync of {} to fail: {other}", root.display()),
    }
    assert!(!root.exists(), "the failed take left {}", root.display());
}

/// A failed parent fsync after the staging rename does not
/// leave an unlocked new directory (which would read as a dead sibling):
/// the take fails and the directory is gone.
#[test]
fn a_failed_parent_fsync_after_the_rename_leaves_no_unlocked_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("key");
    std::fs::create_dir(&key).unwrap();
    testing::set_parent_fsync_fails(&key, true);
    let err = acquire(&key.join("r0-00000001"), &opts()).unwrap_err();
    testing::set_parent_fsync_fails(&key, false);
    assert!(matches!(&err, Error::Io { op: "fsync", .. }), "{err}");
    let left: Vec<_> = std::fs::read_dir(&key)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // And the name is free for the next take.
    acquire(&key.join("r0-00000001"), &opts())
        .unwrap()
        .release()
        .unwrap();
}

/// An adoption names the directory's producer (the dead
/// claimant the owner record names), never the adopter, and the producer
/// survives an adopter's death, a `blocked` mark and its clearing.
#[test]
fn an_adoption_names_the_dead_producer_and_carries_it_across_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-0badcafe");
    std::fs::create_dir(&dir).unwrap();
    // A dead producer's record (a foreign pid and host: this process
    // taking it must not show up as the producer).
    std::fs::write(
        dir.join(LOCK_FILE_NAME),
        b"host: node-dead\npid: 999999\npurpose: claim\n",
    )
    .unwrap();
    let producer_of = |claim: &spool_lock::Claim| {
        let p = claim.producer().expect("the record names a producer");
        (p.host.clone(), p.pid)
    };
    let dead = ("node-dead".to_string(), Some(999_999));

    let first = try_adopt(&dir, &opts()).unwrap();
    assert_eq!(producer_of(&first), dead);
    // The record now names this adopter, carrying the producer.
    let rec = read_owner(&dir).unwrap().record.unwrap();
    assert_eq!(rec.purpose, Purpose::Adopting);
    assert_eq!(rec.pid, Some(std::process::id()));
    assert_eq!(rec.producer().map(|p| (p.host, p.pid)), Some(dead.clone()));
    // The adopter "dies" (lets go without draining): the next adopter
    // still finds the producer, not the first adopter.
    first.release().unwrap();
    let second = try_adopt(&dir, &opts()).unwrap();
    assert_eq!(producer_of(&second), dead);
    // A mark and its clearing carry it too.
    second.mark_blocked("disk full").unwrap();
    second.release().unwrap();
    let blocked = read_owner(&dir).unwrap().record.unwrap();
    assert_eq!(
        blocked.producer().map(|p| (p.host, p.pid)),
        Some(dead.clone())
    );
    assert!(matches!(
        clear_blocked(&dir, &opts()).unwrap(),
        Unblocked::Cleared { .. }
    ));
    let third = try_adopt(&dir, &opts()).unwrap();
    assert_eq!(producer_of(&third), dead);
    third.release().unwrap();

    // A claim is its own producer.
    let own = acquire(&tmp.path().join("r1-0badcafe"), &opts()).unwrap();
    assert_eq!(
        own.producer().map(|p| p.pid),
        Some(Some(std::process::id()))
    );
    own.release().unwrap();
    // A record that cannot tell (an adopter's, from before producers were
    // carried): no producer, never the adopter's own pid.
    let old = tmp.path().join("r2-0badcafe");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(
        old.join(LOCK_FILE_NAME),
        b"host: node-dead\npid: 999998\npurpose: adopting\n",
    )
    .unwrap();
    let c = try_adopt(&old, &opts()).unwrap();
    assert_eq!(c.producer(), None);
    c.release().unwrap();
}

#[test]
fn a_lock_file_that_is_not_a_regular_file_is_refused_naming_what_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    /// What to expect, and how to plant it at the lock file's path.
    type Plant<'a> = (&'a str, &'a dyn Fn(&std::path::Path));
    let plant: [Plant; 4] = [
        ("a symlink", &|p| {
            std::os::unix::fs::symlink("/etc/hostname", p).unwrap();
        }),
        ("a FIFO", &|p| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        }),
        ("a socket", &|p| {
            std::mem::forget(std::os::unix::net::UnixListener::bind(p).unwrap());
        }),
        ("a directory", &|p| std::fs::create_dir(p).unwrap()),
    ];
    for (want, make) in plant {
        let dir = tmp.path().join(want.replace(' ', "-"));
        std::fs::create_dir(&dir).unwrap();
        make(&dir.join(LOCK_FILE_NAME));
        match acquire(&dir, &opts()) {
            Err(Error::LockFileNotRegular {
                kind, lock_path, ..
            }) => {
                assert_eq!(kind, want);
                assert_eq!(lock_path, dir.join(LOCK_FILE_NAME));
            }
            other => panic!("{want}: {other:?}"),
        }
    }
}

#[test]
fn a_claim_is_held_on_two_open_descriptors_until_released() {
    let tmp = tempfile::tempdir().unwrap();
    let claim = acquire(&tmp.path().join("spool"), &opts()).unwrap();
    assert!(claim.is_held());
    let [file, dir] = claim
        .raw_descriptors()
        .expect("a held claim has descriptors");
    assert!(file >= 0 && dir >= 0 && file != dir, "{file} {dir}");
    for fd in [file, dir] {
        // Open descriptors of this process.
        assert!(
            std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok(),
            "{fd}"
        );
    }
    claim.release().unwrap();
}

#[test]
fn removing_a_drained_directory_whose_lock_file_cannot_be_removed_is_an_error_naming_it() {
    // Behind the holder, `.owner.lock` became a directory (the walk skips
    // that name): its unlink fails with EISDIR, which is an error, not a
    // missing lock file, and the directory stays.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    let lock_path = claim.lock_path();
    assert_eq!(lock_path, claim.dir().join(LOCK_FILE_NAME));
    std::fs::rename(&lock_path, tmp.path().join("moved.lock")).unwrap();
    std::fs::create_dir(&lock_path).unwrap();
    match claim.release_and_remove_if_empty() {
        Err(Error::Io { op, path, source }) => {
            assert_eq!((op, path), ("remove", lock_path.clone()));
            assert_eq!(source.raw_os_error(), Some(libc::EISDIR), "{source}");
        }
        other => panic!("a directory at the lock file's path: {other:?}"),
    }
    assert!(lock_path.is_dir());
}

#[test]
fn removing_a_drained_directory_copes_with_a_missing_lock_file_and_keeps_late_arrivals() {
    let tmp = tempfile::tempdir().unwrap();
    // Its lock file unlinked behind the holder: still removed.
    let dir = tmp.path().join("gone-lock");
    let claim = acquire(&dir, &opts()).unwrap();
    std::fs::remove_file(dir.join(LOCK_FILE_NAME)).unwrap();
    assert!(claim.release_and_remove_if_empty().unwrap());
    assert!(!dir.exists());
    // A pack arriving after the emptiness check: kept, not an error.
    let dir = tmp.path().join("late");
    let claim = acquire(&dir, &opts()).unwrap();
    testing::set_lock_hook(
        &dir,
        std::sync::Arc::new(|point, path: &std::path::Path| {
            if point == spool_lock::HookPoint::RemovingDirectory {
                std::fs::write(path.join("late.ready"), b"x").unwrap();
            }
        }),
    );
    assert!(!claim.release_and_remove_if_empty().unwrap());
    assert!(dir.join("late.ready").exists());
    testing::clear_lock_hook(&dir);
    // The directory removed by someone else meanwhile: an error naming it.
    let dir = tmp.path().join("raced");
    let claim = acquire(&dir, &opts()).unwrap();
    testing::set_lock_hook(
        &dir,
        std::sync::Arc::new(|point, path: &std::path::Path| {
            if point == spool_lock::HookPoint::RemovingDirectory {
                std::fs::rename(path, path.with_extension("moved")).unwrap();
            }
        }),
    );
    let err = claim.release_and_remove_if_empty().unwrap_err();
    assert!(err.to_string().contains("raced"), "{err}");
    testing::clear_lock_hook(&dir);
}

#[test]
fn a_claim_of_an_existing_directory_is_its_own_producer_and_carries_no_other() {
    // The directory's record names a dead producer (an adopter of it died
    // too). A claim takes over: this process is the producer, and the
    // record it writes names this process once, carrying nobody.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-0badcafe");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join(LOCK_FILE_NAME),
        b"host: node-b\npid: 999997\nproducer_host: node-dead\nproducer_pid: 999999\npurpose: adopting\n",
    )
    .unwrap();
    let claim = acquire(&dir, &opts()).unwrap();
    let producer = claim.producer().expect("a claim names its producer");
    assert_eq!(producer.pid, Some(std::process::id()));
    assert_ne!(producer.host, "node-dead");
    let text = std::fs::read_to_string(dir.join(LOCK_FILE_NAME)).unwrap();
    assert!(
        !text.contains("producer_"),
        "a claim carries no producer:\n{text}"
    );
    assert!(text.ends_with("purpose: claim\n"), "{text}");
    let rec = read_owner(&dir).unwrap().record.unwrap();
    assert_eq!(
        rec.producer().map(|p| p.pid),
        Some(Some(std::process::id()))
    );
    claim.release().unwrap();
}

#[test]
fn a_drained_directory_with_nested_empty_subdirectories_is_removed_and_a_file_deep_down_keeps_it() {
    // Worker directories a drain emptied (`w0/`, and a directory inside
    // one) go with it; one file at any depth keeps the whole tree.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("drained");
    let claim = acquire(&dir, &opts()).unwrap();
    std::fs::create_dir_all(dir.join("w0").join("inner")).unwrap();
    std::fs::create_dir(dir.join("w1")).unwrap();
    assert!(claim.release_and_remove_if_empty().unwrap());
    assert!(!dir.exists());

    let dir = tmp.path().join("kept");
    let claim = acquire(&dir, &opts()).unwrap();
    std::fs::create_dir_all(dir.join("w0").join("inner")).unwrap();
    std::fs::write(dir.join("w0").join("inner").join("late.ready"), b"x").unwrap();
    assert!(!claim.release_and_remove_if_empty().unwrap());
    assert!(dir.join("w0").join("inner").join("late.ready").is_file());
}

#[test]
fn acquire_new_at_works_in_the_directory_it_was_given_never_through_a_link_at_its_path() {
    // A take in an open parent succeeds, and a name already there is
    // `None`. Then the parent's path is moved away and a link to a victim
    // put there: the take is refused (its nesting check no longer finds
    // the new directory at its path) and cleans up through descriptors, in
    // the parent it was given: nothing is created in the victim, nothing
    // left in the parent.
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("key");
    std::fs::create_dir(&parent).unwrap();
    let fd = std::fs::File::open(&parent).unwrap();
    let at = || std::os::fd::AsFd::as_fd(&fd);
    let name = std::ffi::OsStr::new("r0-0000000a");
    let claim = spool_lock::acquire_new_at(at(), &parent, name, &opts())
        .unwrap()
        .expect("a fresh name");
    assert_eq!(claim.dir(), parent.join(name));
    assert!(parent.join(name).join(LOCK_FILE_NAME).is_file());
    let again = spool_lock::acquire_new_at(at(), &parent, name, &opts()).unwrap();
    assert!(again.is_none(), "an existing name is left to the caller");
    claim.release().unwrap();

    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let moved = tmp.path().join("moved");
    std::fs::rename(&parent, &moved).unwrap();
    std::os::unix::fs::symlink(&victim, &parent).unwrap();
    let other = std::ffi::OsStr::new("r0-0000000b");
    assert!(spool_lock::acquire_new_at(at(), &parent, other, &opts()).is_err());
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "the victim is untouched"
    );
    let left: Vec<_> = std::fs::read_dir(&moved)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != name)
        .collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

#[test]
fn a_reserve_is_made_once_and_taken_once_as_a_new_locked_directory() {
    // No reserve: nothing to take. One made: a second make leaves it. The
    // take renames it into place locked (its lock file the reserve's own:
    // the same inode), and leaves no reserve and no staging copy behind;
    // a second take finds none. A link where the reserve belongs is never
    // taken or followed.
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("key");
    std::fs::create_dir(&parent).unwrap();
    let fd = std::fs::File::open(&parent).unwrap();
    let at = || std::os::fd::AsFd::as_fd(&fd);
    let name = std::ffi::OsStr::new("r0-0000000c");
    let taken = spool_lock::acquire_reserve_at(at(), &parent, name, &opts()).unwrap();
    assert!(taken.is_none(), "no reserve to take");
    assert!(spool_lock::make_reserve_at(at(), &parent, &opts().access).unwrap());
    assert!(!spool_lock::make_reserve_at(at(), &parent, &opts().access).unwrap());
    let reserve = parent.join(spool_lock::RESERVE_NAME);
    let inode = std::fs::metadata(reserve.join(LOCK_FILE_NAME))
        .unwrap()
        .ino();
    let claim = spool_lock::acquire_reserve_at(at(), &parent, name, &opts())
        .unwrap()
        .expect("the reserve taken");
    assert_eq!(claim.dir(), parent.join(name));
    let lock = parent.join(name).join(LOCK_FILE_NAME);
    assert_eq!(std::fs::metadata(&lock).unwrap().ino(), inode);
    assert!(spool_lock::read_owner(&parent.join(name)).unwrap().held);
    let left: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec![name.to_os_string()], "only the taken directory");
    let other = std::ffi::OsStr::new("r0-0000000d");
    assert!(
        spool_lock::acquire_reserve_at(at(), &parent, other, &opts())
            .unwrap()
            .is_none()
    );
    claim.release().unwrap();

    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, &reserve).unwrap();
    assert!(!spool_lock::make_reserve_at(at(), &parent, &opts().access).unwrap());
    assert!(spool_lock::acquire_reserve_at(at(), &parent, other, &opts()).is_err());
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "the victim is untouched"
    );
}
