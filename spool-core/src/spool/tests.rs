//! Unit tests of the spool directory (in-process; the cross-process cases
//! live in `tests/tests/spool_*.rs`).

use super::*;
use crate::layout::RankDirName;
use crate::pack::PackWriter;
use proptest::prelude::*;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;

fn pack_bytes(id: PackId, payload: usize) -> Vec<u8> {
    let mut w = PackWriter::new(id, id.timestamp_ms());
    w.push_record(&vec![0xab; payload]);
    w.finish()
}

/// `total` bytes to stage under a fresh id (a stage does not validate;
/// the capacity tests need exact small sizes such as 100 bytes).
fn pack_of_len(total: usize) -> (PackId, Vec<u8>) {
    let id = PackId::generate();
    let p = (0..total).map(|i| (i * 31 + total) as u8).collect();
    (id, p)
}

/// Waits (≤ 10 s) until `dir` holds `count` temp files (`.open`): stages
/// paused before their publish.
fn wait_for_temp_files(dir: &Path, count: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let open = std::fs::read_dir(dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".open"))
                .count()
        });
        if open >= count {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} stages pause in {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn take() -> SpoolConfig {
    SpoolConfig::default()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A `Take` open shows the claim it holds (the one `into_claim` gives
/// back); a `HeldByCaller` open holds none: the caller's claim stays the
/// caller's.
#[test]
fn a_take_open_shows_its_claim_and_a_held_by_caller_open_none() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let claim = spool.claim().expect("a take holds its claim");
    assert_eq!(claim.dir(), dir);
    assert!(claim.is_held());
    let other = tmp.path().join("held");
    let caller = lk::acquire(&other, &LockOptions::default()).unwrap();
    let held = Spool::open(
        &other,
        &SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..take()
        },
    )
    .unwrap();
    assert!(held.claim().is_none());
    assert!(held.into_claim().is_none());
    assert!(caller.is_held(), "the caller's claim stays held");
    caller.release().unwrap();
}

/// A reconcile while stages are in flight (paused before their publish by
/// the test seam) leaves their files to them: here two stages of one id (a
/// retry racing its original) beside a quarantined earlier copy of that
/// id. The copy is counted at once; the stage that publishes adds the
/// pack, the one that finds it there identical adds nothing, so the
/// account ends as a fresh walk's.
#[test]
fn a_reconcile_during_stages_in_flight_counts_each_file_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = std::sync::Arc::new(Spool::open(&dir, &take()).unwrap());
    let id = PackId::generate();
    let bytes = pack_bytes(id, 100);
    let n = bytes.len() as u64;
    let copy = b"an earlier copy, quarantined";
    std::fs::write(dir.join(format!("{id}.quarantined")), copy).unwrap();
    let q = copy.len() as u64;
    let release = tmp.path().join("release");
    set_pause_before_publish(Some(&release)).unwrap();
    let stages: Vec<_> = (0..2)
        .map(|_| {
            let (spool, bytes) = (spool.clone(), bytes.clone());
            std::thread::spawn(move || spool.stage(None, id, &bytes).unwrap())
        })
        .collect();
    wait_for_temp_files(&dir, 2);
    assert_eq!(
        spool.reconcile().unwrap().committed,
        q,
        "the temp files are the stages'"
    );
    std::fs::write(&release, b"").unwrap();
    for s in stages {
        s.join().unwrap();
    }
    set_pause_before_publish(None).unwrap();
    assert_eq!(spool.usage().committed, q + n);
    assert_eq!(
        spool.reconcile().unwrap().committed,
        q + n,
        "as a fresh walk"
    );
}

#[test]
fn stage_publishes_a_ready_pack_and_leaves_no_temp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let id = PackId::generate();
    let bytes = pack_bytes(id, 10);
    let staged = spool.stage(None, id, &bytes).unwrap();
    assert_eq!(staged.path, dir.join(format!("{id}.ready")));
    assert_eq!(std::fs::read(&staged.path).unwrap(), bytes);
    assert_eq!(
        names(&dir),
        vec![".owner.lock".to_string(), format!("{id}.ready")]
    );
    assert_eq!(spool.usage().committed, bytes.len() as u64);
    assert_eq!(spool.usage().reserved, 0);
    // A worker ordinal stages under w<k>/, which scan includes.
    let id2 = PackId::generate();
    let s2 = spool.stage(Some(3), id2, &pack_bytes(id2, 1)).unwrap();
    assert_eq!(s2.path, dir.join("w3").join(format!("{id2}.ready")));
    let listed = spool.scan(&AtomicBool::new(false)).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed.iter().find(|p| p.id == id2).unwrap().ordinal,
        Some(3)
    );
}

#[test]
fn a_stage_never_replaces_a_sealed_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = Spool::open(tmp.path(), &take()).unwrap();
    let id = PackId::generate();
    let a = pack_bytes(id, 10);
    let b = pack_bytes(id, 11);
    spool.stage(None, id, &a).unwrap();
    let used = spool.usage().committed;
    // Identical: idempotent, counted once.
    spool.stage(None, id, &a).unwrap();
    assert_eq!(spool.usage().committed, used);
    // Different bytes: conflict, the original intact, no temp file left.
    let e = spool.stage(None, id, &b).unwrap_err();
    assert!(matches!(e, Error::Conflict { .. }), "{e}");
    assert!(e.to_string().contains(&format!("{id}.ready")), "{e}");
    assert_eq!(
        std::fs::read(tmp.path().join(format!("{id}.ready"))).unwrap(),
        a
    );
    assert_eq!(names(tmp.path()).len(), 2, "{:?}", names(tmp.path()));
    // Same length, different bytes: still a conflict.
    let mut c = a.clone();
    c[50] ^= 1;
    assert!(matches!(
        spool.stage(None, id, &c),
        Err(Error::Conflict { .. })
    ));
    assert_eq!(spool.usage().committed, used);
}

#[test]
fn a_stage_into_a_vanished_directory_fails_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    for ordinal in [None, Some(1)] {
        let id = PackId::generate();
        let e = spool.stage(ordinal, id, &pack_bytes(id, 1)).unwrap_err();
        assert!(matches!(e, Error::DirectoryVanished { .. }), "{e}");
        assert!(!dir.exists(), "the stage recreated {}", dir.display());
    }
    assert_eq!(spool.usage(), Usage::default());
}

/// Every kind of corruption is quarantined by recovery and never listed.
#[test]
fn recovery_quarantines_every_kind_of_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spool = Spool::open(dir, &take()).unwrap();
    let mut corrupt = Vec::new();
    let write = |id: PackId, bytes: &[u8]| {
        std::fs::write(dir.join(format!("{id}.ready")), bytes).unwrap();
    };
    // flipped byte in the payload, in the header, in the trailer's hash
    for at in [60usize, 20, 0] {
        let id = PackId::generate();
        let mut p = pack_bytes(id, 40);
        let n = p.len();
        let i = if at == 0 { n - 1 } else { at };
        p[i] ^= 0x10;
        write(id, &p);
        corrupt.push(id);
    }
    // truncation (mid-record, and to zero)
    for keep in [50usize, 0] {
        let id = PackId::generate();
        write(id, &pack_bytes(id, 40)[..keep]);
        corrupt.push(id);
    }
    // wrong magic
    let id = PackId::generate();
    let mut p = pack_bytes(id, 4);
    p[..8].copy_from_slice(b"NOTAPACK");
    write(id, &p);
    corrupt.push(id);
    // unknown major version
    let id = PackId::generate();
    let mut p = pack_bytes(id, 4);
    p[8] = 9;
    write(id, &p);
    corrupt.push(id);
    // a trailer that lies (length), checksum recomputed
    let id = PackId::generate();
    let mut p = pack_bytes(id, 4);
    let n = p.len();
    p[n - 48] ^= 1;
    let h: [u8; 32] = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(
        &p[..n - 32],
    ))
    .into();
    p[n - 32..].copy_from_slice(&h);
    write(id, &p);
    corrupt.push(id);
    // a valid pack under another id's name
    let id = PackId::generate();
    write(id, &pack_bytes(PackId::generate(), 4));
    corrupt.push(id);
    // a symlink named like a pack (pointing at a valid pack outside)
    let id = PackId::generate();
    let outside = tmp.path().join("..").join(format!("outside-{id}"));
    std::fs::write(&outside, pack_bytes(id, 4)).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join(format!("{id}.ready"))).unwrap();
    corrupt.push(id);
    // a torn write (temp file) and two good packs
    let torn = dir.join(format!(".{}.0badf00d.open", PackId::generate()));
    std::fs::write(&torn, b"partial").unwrap();
    let good: Vec<PackId> = (0..2)
        .map(|_| {
            let id = PackId::generate();
            spool.stage(None, id, &pack_bytes(id, 30)).unwrap();
            id
        })
        .collect();

    // verify reports without changing anything
    let v = verify_dir(dir, &AtomicBool::new(false)).unwrap();
    assert_eq!(v.valid.len(), 2);
    assert_eq!(v.corrupt.len(), corrupt.len(), "{:#?}", v.corrupt);
    assert!(torn.exists());

    let report = spool.recover().unwrap();
    assert_eq!(report.swept, vec![torn.clone()]);
    assert!(!torn.exists());
    let mut valid: Vec<PackId> = report.valid.iter().map(|p| p.id).collect();
    valid.sort();
    let mut want = good.clone();
    want.sort();
    assert_eq!(valid, want);
    let mut q: Vec<PackId> = report.quarantined.iter().map(|q| q.id).collect();
    q.sort();
    corrupt.sort();
    assert_eq!(q, corrupt, "{:#?}", report.quarantined);
    for id in &corrupt {
        assert!(dir
            .join(format!("{id}.quarantined"))
            .symlink_metadata()
            .is_ok());
        assert!(dir.join(format!("{id}.ready")).symlink_metadata().is_err());
    }
    let listed: Vec<PackId> = spool
        .scan(&AtomicBool::new(false))
        .unwrap()
        .iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(listed, want);
    // quarantined packs still count; purging frees them
    let counts = inspect(dir).unwrap();
    assert_eq!(counts.quarantined.0, corrupt.len() as u64);
    assert_eq!(
        spool.usage().committed,
        counts.ready.1 + counts.quarantined.1
    );
    let (n, _) = spool.purge_quarantined().unwrap();
    assert_eq!(n, corrupt.len() as u64);
    assert_eq!(spool.usage().committed, inspect(dir).unwrap().ready.1);
    let _ = std::fs::remove_file(outside);
}

#[test]
fn incremental_recovery_validates_one_pack_per_step_and_can_be_cancelled() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = Spool::open(tmp.path(), &take()).unwrap();
    for _ in 0..3 {
        let id = PackId::generate();
        spool.stage(None, id, &pack_bytes(id, 10)).unwrap();
    }
    let mut rec = spool.begin_recovery().unwrap();
    assert_eq!(rec.remaining(), 3);
    let cancelled = AtomicBool::new(true);
    assert!(matches!(
        spool.continue_recovery(&mut rec, &cancelled),
        Err(Error::Cancelled)
    ));
    assert_eq!(rec.remaining(), 3, "a cancelled step keeps its pack");
    let go = AtomicBool::new(false);
    for left in [2, 1, 0] {
        assert!(matches!(
            spool.continue_recovery(&mut rec, &go).unwrap(),
            Some(RecoveryStep::Valid(..))
        ));
        assert_eq!(rec.remaining(), left);
    }
    assert!(!rec.is_finished());
    assert_eq!(spool.continue_recovery(&mut rec, &go).unwrap(), None);
    assert!(rec.is_finished());
}

#[test]
fn remove_all_takes_a_batch_across_worker_dirs_refuses_strangers_and_keeps_the_account() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = Spool::open(tmp.path(), &take()).unwrap();
    for ordinal in [None, None, Some(1), Some(1), Some(2)] {
        let id = PackId::generate();
        spool.stage(ordinal, id, &pack_bytes(id, 10)).unwrap();
    }
    let mut packs = spool.scan(&AtomicBool::new(false)).unwrap();
    assert_eq!(packs.len(), 5);
    assert!(spool.usage().committed > 0);
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let stranger = ReadyPack {
        path: victim.clone(),
        ..packs[0].clone()
    };
    std::fs::remove_file(&packs[4].path).unwrap(); // gone already: fine
    packs.push(stranger);
    let failed = spool.remove_all(&packs);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, victim);
    assert!(matches!(failed[0].1, Error::NotAPack { .. }));
    assert!(victim.exists(), "a path not its own is never removed");
    assert!(spool.scan(&AtomicBool::new(false)).unwrap().is_empty());
    // what it removed left the account; the one gone behind its back is
    // the reconcile's to notice
    assert_eq!(spool.usage().committed, packs[4].bytes);
    spool.reconcile().unwrap();
    assert_eq!(spool.usage().committed, 0);
    assert!(
        spool.remove_all(&packs[..4]).is_empty(),
        "removing again is fine"
    );
}

#[test]
fn remove_and_set_aside_refuse_paths_that_are_not_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = Spool::open(tmp.path(), &take()).unwrap();
    let id = PackId::generate();
    spool.stage(None, id, &pack_bytes(id, 10)).unwrap();
    let pack = spool.scan(&AtomicBool::new(false)).unwrap().remove(0);
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    for path in [
        victim.clone(),
        tmp.path().join("..").join(format!("{id}.ready")),
        tmp.path().join(format!("w1/../{id}.ready")),
    ] {
        let evil = ReadyPack {
            path,
            ..pack.clone()
        };
        assert!(matches!(spool.remove(&evil), Err(Error::NotAPack { .. })));
        assert!(matches!(
            spool.quarantine(&evil, "x"),
            Err(Error::NotAPack { .. })
        ));
    }
    assert!(victim.exists());
    spool.remove(&pack).unwrap();
    assert_eq!(spool.usage().committed, 0);
    spool.remove(&pack).unwrap(); // already gone: fine
                                  // reject renames to .rejected, counted, not listed
    let id = PackId::generate();
    let s = spool.stage(None, id, &pack_bytes(id, 10)).unwrap();
    let pack = spool.scan(&AtomicBool::new(false)).unwrap().remove(0);
    spool.reject(&pack, "store said 403").unwrap();
    assert!(tmp.path().join(format!("{id}.rejected")).exists());
    assert!(spool.scan(&AtomicBool::new(false)).unwrap().is_empty());
    assert_eq!(spool.reconcile().unwrap().committed, s.bytes);
}

#[test]
fn walks_skip_refs_foreign_files_and_nested_spools() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let refs = dir.join(REFS_DIR);
    std::fs::create_dir(&refs).unwrap();
    let id = PackId::generate();
    std::fs::write(refs.join(format!("{id}.ready")), pack_bytes(id, 100)).unwrap();
    std::fs::write(refs.join(format!(".{id}.12345678.open")), b"x").unwrap();
    std::fs::write(dir.join("notes.txt"), vec![0; 1000]).unwrap();
    std::fs::write(dir.join(format!("{id}.ready.bak")), vec![0; 1000]).unwrap();
    // a nested spool shaped like a worker directory
    let nested = dir.join("w7");
    std::fs::create_dir(&nested).unwrap();
    std::fs::write(nested.join(crate::lk::LOCK_FILE_NAME), b"").unwrap();
    let nid = PackId::generate();
    std::fs::write(nested.join(format!("{nid}.ready")), pack_bytes(nid, 100)).unwrap();
    let ntemp = nested.join(format!(".{nid}.12345678.open"));
    std::fs::write(&ntemp, b"in flight").unwrap();

    let spool = Spool::open(dir, &take()).unwrap();
    assert_eq!(spool.usage().committed, 0);
    let r = spool.recover().unwrap();
    assert_eq!(r, RecoveryReport::default());
    assert!(ntemp.exists() && refs.join(format!(".{id}.12345678.open")).exists());
    assert!(spool.scan(&AtomicBool::new(false)).unwrap().is_empty());
    assert!(verify_dir(dir, &AtomicBool::new(false))
        .unwrap()
        .valid
        .is_empty());
}

#[test]
fn capacity_reserves_before_writing_and_names_the_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = SpoolConfig {
        max_bytes: Some(450),
        ..take()
    };
    let spool = Spool::open(tmp.path(), &cfg).unwrap();
    let (id, p) = pack_of_len(200);
    spool.stage(None, id, &p).unwrap();
    let (id2, p2) = pack_of_len(200);
    spool.stage(None, id2, &p2).unwrap();
    let (id3, p3) = pack_of_len(100);
    match spool.stage(None, id3, &p3).unwrap_err() {
        Error::Full {
            used,
            budget,
            needed,
            dead_sibling_bytes,
            ..
        } => assert_eq!(
            (used, budget, needed, dead_sibling_bytes),
            (400, 450, 100, 0)
        ),
        e => panic!("{e}"),
    }
    assert!(!tmp.path().join(format!("{id3}.ready")).exists());
    // A removal by someone else (a service's own Spool) is seen by the
    // reconcile before refusing.
    std::fs::remove_file(tmp.path().join(format!("{id}.ready"))).unwrap();
    spool.stage(None, id3, &p3).unwrap();
    assert_eq!(spool.usage().committed, 300);
}

/// Many threads staging into one budget never overcommit it: at every
/// moment committed + reserved stays within the budget, and so do the
/// bytes on disk at the end.
#[test]
fn concurrent_stages_never_overcommit() {
    let tmp = tempfile::tempdir().unwrap();
    let budget = 20_000u64;
    let cfg = SpoolConfig {
        max_bytes: Some(budget),
        ..take()
    };
    let spool = Spool::open(tmp.path(), &cfg).unwrap();
    let stop = AtomicBool::new(false);
    let (ok, full) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let u = spool.usage();
                assert!(u.used() <= budget, "{u:?}");
            }
        });
        let workers: Vec<_> = (0..6)
            .map(|t| {
                let spool = &spool;
                s.spawn(move || {
                    let (mut ok, mut full) = (0, 0);
                    for i in 0..40 {
                        let (id, p) = pack_of_len(150 + (t * 37 + i * 11) % 700);
                        match spool.stage(Some(t as u32 % 2), id, &p) {
                            Ok(_) => ok += 1,
                            Err(Error::Full { .. }) => full += 1,
                            Err(e) => panic!("{e}"),
                        }
                        if i % 7 == 0 {
                            spool.reconcile().unwrap();
                        }
                    }
                    (ok, full)
                })
            })
            .collect();
        // Join everything before unwrapping, so a failing worker cannot
        // leave the watcher spinning.
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Relaxed);
        watcher.join().unwrap();
        results
            .into_iter()
            .map(|r| r.unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert!(ok > 0 && full > 0, "ok {ok} full {full}");
    let on_disk = inspect(tmp.path()).unwrap();
    assert!(on_disk.ready.1 <= budget);
    assert_eq!(spool.usage().committed, on_disk.ready.1);
    assert_eq!(spool.usage().reserved, 0);
}

/// A rank directory layout under a temp root: `<root>/<key>/r<n>-<inc>`.
fn rank_dir(root: &Path, rank: u64, inc: u32) -> PathBuf {
    let d = root.join("0123456789ab").join(
        RankDirName {
            rank,
            incarnation: inc,
        }
        .to_string(),
    );
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fill(dir: &Path, n: usize, len: usize) {
    for _ in 0..n {
        let (id, p) = pack_of_len(len);
        std::fs::write(dir.join(format!("{id}.ready")), p).unwrap();
    }
}

/// A process holding `dir`'s lock: `flock(1)` on its lock file, holding it
/// while its child `sleep` runs (`-o`: the child gets no descriptor of it;
/// killing flock frees the lock).
fn foreign_holder(dir: &Path) -> Child {
    let lock = dir.join(crate::lk::LOCK_FILE_NAME);
    // Its own process group, so that `end_foreign_holder` ends flock's
    // `sleep` too (killing flock alone leaves it running for a minute,
    // holding the test's output: nextest's LEAK); no output to hold anyway.
    let child = Command::new("flock")
        .args(["-n", "-o", lock.to_str().unwrap(), "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if crate::lk::read_owner(dir).unwrap().held {
            return child;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    end_foreign_holder(child);
    panic!("flock child never held {}", lock.display());
}

/// Kills [`foreign_holder`]'s process group (flock and its `sleep`) and
/// reaps flock.
fn end_foreign_holder(mut child: Child) {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    let _ = child.kill();
    child.wait().unwrap();
    // flock's `sleep` dies with its group, but asynchronously: wait (a few
    // seconds at most) until no process of the group is left, so no
    // caller sees a holder that is on its way out
    let pgid = nix::unistd::Pid::from_raw(-(child.id() as i32));
    for _ in 0..500 {
        if nix::sys::signal::kill(pgid, None).is_err() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn charge_dead_siblings_every_case() {
    let tmp = tempfile::tempdir().unwrap();
    let own = rank_dir(tmp.path(), 0, 1);
    let dead = rank_dir(tmp.path(), 1, 2);
    fill(&dead, 3, 100);
    let cfg = SpoolConfig {
        max_bytes: Some(450),
        charge_dead_siblings: true,
        ..take()
    };
    let spool = Spool::open(&own, &cfg).unwrap();
    assert_eq!(spool.usage().dead_sibling_bytes, 300);
    // One 100-byte pack fits beside the dead 300; the next is refused,
    // naming the dead bytes.
    let (id, p) = pack_of_len(100);
    spool.stage(None, id, &p).unwrap();
    let (id2, p2) = pack_of_len(100);
    let e = spool.stage(None, id2, &p2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Full {
                dead_sibling_bytes: 300,
                used: 400,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("300 of them in dead sibling"), "{e}");
    // Without the charge the same budget admits it.
    let free = Spool::open(
        &rank_dir(tmp.path(), 0, 3),
        &SpoolConfig {
            max_bytes: Some(450),
            ..take()
        },
    )
    .unwrap();
    for _ in 0..4 {
        let (i, q) = pack_of_len(100);
        free.stage(None, i, &q).unwrap();
    }
    drop(free.into_claim().unwrap().release());
    std::fs::remove_dir_all(tmp.path().join("0123456789ab").join("r0-00000003")).unwrap();
    // Capacity returns as the sibling drains.
    for e in std::fs::read_dir(&dead).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    spool.stage(None, id2, &p2).unwrap();
    fill(&dead, 3, 100);
    spool.reconcile().unwrap();
    assert_eq!(spool.usage().dead_sibling_bytes, 300);

    // Held by another live process: not charged.
    let child = foreign_holder(&dead);
    assert_eq!(sibling_charge(&dead), SiblingCharge::LiveElsewhere);
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 0);
    end_foreign_holder(child);
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 300);

    // A claim this process keeps: not charged.
    let kept = crate::lk::acquire(&dead, &LockOptions::default()).unwrap();
    assert_eq!(sibling_charge(&dead), SiblingCharge::KeptClaim);
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 0);
    kept.release().unwrap();
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 300);

    // Held by this process as an adoption: charged.
    let adopted = crate::lk::try_adopt(&dead, &LockOptions::default()).unwrap();
    assert_eq!(sibling_charge(&dead), SiblingCharge::AdoptedHere);
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 300);
    // Marked blocked and let go: not charged.
    adopted.mark_blocked("a pack the store refuses").unwrap();
    adopted.release().unwrap();
    assert_eq!(sibling_charge(&dead), SiblingCharge::Blocked);
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 0);
    // Taken again, the mark is gone and it is charged once dead.
    crate::lk::acquire(&dead, &LockOptions::default())
        .unwrap()
        .release()
        .unwrap();
    assert_eq!(spool.reconcile().unwrap().dead_sibling_bytes, 300);
    // (Another user's directory: tests/tests/spool_processes.rs, with a
    // child that drops privileges.)
}

// ---- model-based accounting ---------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Stage { len: usize, ordinal: Option<u32> },
    Restage { which: usize, same: bool },
    Remove { which: usize },
    Quarantine { which: usize },
    Purge,
    Reconcile,
    ForeignFile { len: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (100usize..600, prop::option::of(0u32..2)).prop_map(|(len, ordinal)| Op::Stage { len, ordinal }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(which, same)| Op::Restage { which, same }),
        2 => any::<usize>().prop_map(|which| Op::Remove { which }),
        1 => any::<usize>().prop_map(|which| Op::Quarantine { which }),
        1 => Just(Op::Purge),
        1 => Just(Op::Reconcile),
        1 => (1usize..500).prop_map(|len| Op::ForeignFile { len }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    /// The spool's account against a model: a map of files and their
    /// sizes; Full exactly when the model says the pack does not fit.
    #[test]
    fn accounting_matches_a_model(ops in prop::collection::vec(op(), 1..40), budget in 500u64..3000) {
        let tmp = tempfile::tempdir().unwrap();
        let spool = Spool::open(tmp.path(), &SpoolConfig { max_bytes: Some(budget), ..take() }).unwrap();
        // id -> (bytes, len, ready?)
        let mut ready: Vec<(PackId, Vec<u8>, Option<u32>)> = Vec::new();
        let mut quarantined: u64 = 0;
        for op in ops {
            let model_used = ready.iter().map(|r| r.1.len() as u64).sum::<u64>() + quarantined;
            match op {
                Op::Stage { len, ordinal } => {
                    let (id, p) = pack_of_len(len);
                    let fits = model_used + len as u64 <= budget;
                    match spool.stage(ordinal, id, &p) {
                        Ok(_) => { prop_assert!(fits); ready.push((id, p, ordinal)); }
                        Err(Error::Full { used, .. }) => { prop_assert!(!fits); prop_assert_eq!(used, model_used); }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Restage { which, same } if !ready.is_empty() => {
                    let (id, p, ord) = ready[which % ready.len()].clone();
                    let q = if same { p.clone() } else { let mut q = p.clone(); q[45] ^= 1; q };
                    let fits = model_used + p.len() as u64 <= budget;
                    match spool.stage(ord, id, &q) {
                        Ok(_) => prop_assert!(same && fits),
                        Err(Error::Conflict { .. }) => prop_assert!(!same && fits),
                        Err(Error::Full { .. }) => prop_assert!(!fits),
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Remove { which } if !ready.is_empty() => {
                    let (id, _, ord) = ready.remove(which % ready.len());
                    let listed = spool.scan(&AtomicBool::new(false)).unwrap();
                    let pack = listed.into_iter().find(|p| p.id == id && p.ordinal == ord).unwrap();
                    spool.remove(&pack).unwrap();
                }
                Op::Quarantine { which } if !ready.is_empty() => {
                    let (id, p, ord) = ready.remove(which % ready.len());
                    let listed = spool.scan(&AtomicBool::new(false)).unwrap();
                    let pack = listed.into_iter().find(|x| x.id == id && x.ordinal == ord).unwrap();
                    spool.quarantine(&pack, "model").unwrap();
                    quarantined += p.len() as u64;
                }
                Op::Purge => { spool.purge_quarantined().unwrap(); quarantined = 0; }
                Op::Reconcile => { spool.reconcile().unwrap(); }
                Op::ForeignFile { len } => {
                    std::fs::write(tmp.path().join(format!("foreign-{}", rand::random::<u32>())), vec![0; len]).unwrap();
                }
                _ => {}
            }
            let model = ready.iter().map(|r| r.1.len() as u64).sum::<u64>() + quarantined;
            let u = spool.usage();
            prop_assert_eq!(u.committed, model);
            prop_assert_eq!(u.reserved, 0);
            prop_assert!(u.used() <= budget);
        }
        prop_assert_eq!(spool.reconcile().unwrap().committed,
            ready.iter().map(|r| r.1.len() as u64).sum::<u64>() + quarantined);
    }
}

#[test]
fn a_pack_that_cannot_be_read_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.ready", PackId::generate()));
    let e = validate_file(&path, PackId::generate(), &AtomicBool::new(false)).unwrap_err();
    assert!(matches!(e, Error::PackRead { .. }), "{e}");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
}

#[test]
fn verify_progress_counts_the_listed_packs_and_bytes_from_the_first_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut bytes = 0u64;
    for payload in [300, 500] {
        let id = PackId::generate();
        let p = pack_bytes(id, payload);
        std::fs::write(dir.join(format!("{id}.ready")), &p).unwrap();
        bytes += p.len() as u64;
    }
    let mut seen = Vec::new();
    let report = verify_dir_with_progress(dir, &AtomicBool::new(false), |p| seen.push(p)).unwrap();
    assert_eq!(report.valid.len(), 2);
    // The first report names the whole listing before anything is checked;
    // the last one has checked all of it.
    let first = seen.first().copied().unwrap();
    let last = seen.last().copied().unwrap();
    assert_eq!(
        (first.done, first.done_bytes, first.total, first.total_bytes),
        (0, 0, 2, bytes)
    );
    assert_eq!(
        (last.done, last.done_bytes, last.total, last.total_bytes),
        (2, bytes, 2, bytes)
    );
}

#[test]
fn verify_skips_a_pack_gone_since_the_listing_and_fails_on_one_it_cannot_read() {
    // Two listed packs; at the first progress report (after the listing,
    // before any check) the first one changes under the walk.
    fn listed_then(change: impl Fn(&Path)) -> (Result<VerifyReport, Error>, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut paths = Vec::new();
        for payload in [300, 500] {
            let id = PackId::generate();
            let p = dir.join(format!("{id}.ready"));
            std::fs::write(&p, pack_bytes(id, payload)).unwrap();
            paths.push(p);
        }
        paths.sort();
        let (first, second) = (paths[0].clone(), paths[1].clone());
        let mut changed = false;
        let r = verify_dir_with_progress(dir, &AtomicBool::new(false), |_| {
            if !std::mem::replace(&mut changed, true) {
                change(&first);
            }
        });
        (r, first, second)
    }
    // Removed by its uploader meanwhile: not a problem, the rest is checked.
    let (r, _, second) = listed_then(|p| std::fs::remove_file(p).unwrap());
    let report = r.unwrap();
    let valid: Vec<_> = report.valid.iter().map(|p| p.path.clone()).collect();
    assert_eq!(valid, vec![second]);
    assert!(report.corrupt.is_empty(), "{:?}", report.corrupt);
    // Replaced by a symlink (never followed): a read error naming it.
    let (r, first, _) = listed_then(|p| {
        std::fs::remove_file(p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", p).unwrap();
    });
    let e = r.unwrap_err();
    assert!(matches!(e, Error::PackRead { .. }), "{e}");
    assert!(e.to_string().contains(&first.display().to_string()), "{e}");
}

/// A recovery step skips a pack removed since the listing (its uploader
/// shipped it) and goes on; one it cannot read (replaced by a symlink,
/// never followed) fails the step naming it, and stays first for the next
/// call, which validates it once it is readable again.
#[test]
fn recovery_skips_a_pack_gone_since_the_listing_and_fails_on_one_it_cannot_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let mut packs: Vec<(PackId, Vec<u8>)> = (0..3)
        .map(|i| {
            let id = PackId::generate();
            let bytes = pack_bytes(id, 100 + i);
            spool.stage(None, id, &bytes).unwrap();
            (id, bytes)
        })
        .collect();
    packs.sort_by_key(|(id, _)| *id);
    let path = |id: PackId| dir.join(format!("{id}.ready"));
    let mut rec = spool.begin_recovery().unwrap();
    std::fs::remove_file(path(packs[0].0)).unwrap();
    let unreadable = path(packs[1].0);
    std::fs::remove_file(&unreadable).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &unreadable).unwrap();
    let never = AtomicBool::new(false);
    for _ in 0..2 {
        let e = spool.continue_recovery(&mut rec, &never).unwrap_err();
        assert!(matches!(e, Error::PackRead { .. }), "{e}");
        assert!(
            e.to_string().contains(&unreadable.display().to_string()),
            "{e}"
        );
    }
    std::fs::remove_file(&unreadable).unwrap();
    std::fs::write(&unreadable, &packs[1].1).unwrap();
    let mut valid = Vec::new();
    while let Some(step) = spool.continue_recovery(&mut rec, &never).unwrap() {
        match step {
            RecoveryStep::Valid(p, _) => valid.push(p.path),
            RecoveryStep::Quarantined(q) => panic!("quarantined {q:?}"),
        }
    }
    assert_eq!(valid, vec![unreadable, path(packs[2].0)]);
}

#[test]
fn usage_counts_committed_reserved_and_dead_sibling_bytes_against_the_budget() {
    let u = Usage {
        committed: 1000,
        reserved: 200,
        dead_sibling_bytes: 30,
    };
    assert_eq!(u.used(), 1230);
    assert_eq!(Usage::default().used(), 0);
}

#[test]
fn a_restage_of_a_pack_larger_than_one_compare_buffer_is_idempotent_and_a_late_difference_conflicts(
) {
    // The existing file is compared in 1 MiB reads: a 3 MiB pack takes
    // several, and only the last one differs below.
    let tmp = tempfile::tempdir().unwrap();
    let spool = Spool::open(tmp.path(), &take()).unwrap();
    let id = PackId::generate();
    let a = pack_bytes(id, 3 << 20);
    spool.stage(None, id, &a).unwrap();
    let used = spool.usage().committed;
    spool.stage(None, id, &a).unwrap();
    assert_eq!(spool.usage().committed, used);
    let mut b = a.clone();
    let at = b.len() - 40; // in the last record, before the trailer
    b[at] ^= 1;
    assert!(matches!(
        spool.stage(None, id, &b),
        Err(Error::Conflict { .. })
    ));
}

#[test]
fn worker_directories_are_w_and_a_canonical_decimal_only() {
    for (name, want) in [
        ("w0", Some(0)),
        ("w7", Some(7)),
        ("w10", Some(10)),
        ("w01", None),
        ("w00", None),
        ("w", None),
        ("w1a", None),
        ("w+1", None),
        ("x1", None),
    ] {
        assert_eq!(parse_ordinal_dir(name), want, "{name}");
    }
    assert_eq!(parse_ordinal_dir(&ordinal_dir_name(42)), Some(42));
}

/// What a report calls each kind of file met where a pack was expected.
#[test]
fn file_type_names_say_what_a_file_is() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    std::fs::write(p("file"), b"x").unwrap();
    std::os::unix::fs::symlink("file", p("link")).unwrap();
    nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(p("socket")).unwrap();
    std::fs::create_dir(p("dir")).unwrap();
    let name = |path: &Path| file_type_name(std::fs::symlink_metadata(path).unwrap().file_type());
    for (n, what) in [
        ("file", "a regular file"),
        ("link", "a symlink"),
        ("fifo", "a FIFO"),
        ("socket", "a socket"),
        ("dir", "a directory"),
    ] {
        assert_eq!(name(&p(n)), what, "{n}");
    }
    assert_eq!(name(Path::new("/dev/null")), "a device");
}

/// A walk of a path that is not a directory fails naming it as an I/O
/// error, not as a vanished directory (which a missing one is).
#[test]
fn a_scan_of_a_file_is_an_io_error_and_of_a_missing_directory_a_vanished_one() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let never = AtomicBool::new(false);
    let e = scan_dir(&file, &never).unwrap_err();
    assert!(
        matches!(e, Error::Io { ref path, .. } if *path == file),
        "{e}"
    );
    let gone = tmp.path().join("gone");
    let e = scan_dir(&gone, &never).unwrap_err();
    assert!(
        matches!(e, Error::DirectoryVanished { ref dir } if *dir == gone),
        "{e}"
    );
}

/// A stage into a worker subdirectory whose spool directory was replaced
/// by a file fails as an I/O error naming the subdirectory (only a missing
/// spool directory is [`Error::DirectoryVanished`]).
#[test]
fn a_worker_stage_into_a_spool_replaced_by_a_file_is_an_io_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"a file now").unwrap();
    let id = PackId::generate();
    let e = spool.stage(Some(3), id, &pack_bytes(id, 10)).unwrap_err();
    assert!(
        matches!(e, Error::Io { ref path, .. } if *path == dir.join("w3")),
        "{e}"
    );
}

/// A pack file is opened without following a symlink (a read error naming
/// it, though the target is a valid pack) and without blocking on a FIFO
/// (no writer: it reads as empty, so corrupt), each at once.
#[test]
fn validating_a_symlink_or_a_fifo_named_as_a_pack_is_a_read_error_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let id = PackId::generate();
    let target = tmp.path().join("a-valid-pack");
    std::fs::write(&target, pack_bytes(id, 10)).unwrap();
    let link = tmp.path().join(format!("{id}.ready"));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = tmp.path().join(format!("w1-{id}.ready"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for path in [link, fifo] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(validate_file(&p, id, &AtomicBool::new(false)));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("validating {} blocked", path.display()));
        let e = r.unwrap_err();
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("w1-")
        {
            assert!(e.is_corrupt(), "{e}");
        } else {
            assert!(matches!(e, Error::PackRead { .. }), "{e}");
        }
    }
}

/// An entry the walk cannot stat for another reason than its removal
/// fails the walk naming it: here a pack whose path is beyond PATH_MAX (the
/// directory's own path is within it, so its listing works).
#[test]
fn a_scan_fails_on_an_entry_it_cannot_stat() {
    let tmp = tempfile::tempdir().unwrap();
    let short = tmp.path().join("s");
    std::fs::create_dir(&short).unwrap();
    let id = PackId::generate();
    std::fs::write(short.join(format!("{id}.ready")), pack_bytes(id, 10)).unwrap();
    let mut deep = tmp.path().to_path_buf();
    while deep.as_os_str().len() < 3800 {
        deep.push("d".repeat(200));
    }
    std::fs::create_dir_all(&deep).unwrap();
    // the directory's path: 4070 bytes; its pack's: 4070 + 1 + 38 > 4096
    deep.push("s".repeat(4070 - deep.as_os_str().len() - 1));
    assert_eq!(deep.as_os_str().len(), 4070);
    std::fs::rename(&short, &deep).unwrap();
    let e = scan_dir(&deep, &AtomicBool::new(false)).unwrap_err();
    assert!(matches!(e, Error::Io { op: "stat", .. }), "{e}");
}

/// Asserts `e` is an [`Error::Io`] of `op` on `path` with `errno`.
fn assert_io(e: &Error, op: &str, path: &Path, errno: i32) {
    match e {
        Error::Io {
            op: got,
            path: p,
            source,
        } => {
            assert_eq!((*got, p.as_path()), (op, path), "{e}");
            assert_eq!(source.raw_os_error(), Some(errno), "{e}");
        }
        other => panic!("expected {op} {}: {other:?}", path.display()),
    }
}

#[test]
fn an_own_stage_into_a_spool_replaced_by_a_file_is_an_io_error_not_a_vanished_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"a file now").unwrap();
    let id = PackId::generate();
    let e = spool.stage(None, id, &pack_bytes(id, 10)).unwrap_err();
    match &e {
        Error::Io { op, path, source } => {
            assert_eq!(*op, "create", "{e}");
            assert!(path.starts_with(&dir), "{e}");
            assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        }
        other => panic!("a stage into a file: {other:?}"),
    }
    assert_eq!(std::fs::read(&dir).unwrap(), b"a file now");
}

/// Stages one pack into `w1/` in a thread, pauses it before the publish,
/// runs `meanwhile` on the worker directory, and returns the stage's
/// result.
fn stage_with_the_worker_dir_changed_before_publish(
    meanwhile: impl FnOnce(&Path),
) -> (tempfile::TempDir, PathBuf, Result<StagedPack, Error>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = std::sync::Arc::new(Spool::open(&dir, &take()).unwrap());
    let sub = dir.join("w1");
    let release = tmp.path().join("release");
    set_pause_before_publish(Some(&release)).unwrap();
    let id = PackId::generate();
    let s = spool.clone();
    let stage = std::thread::spawn(move || s.stage(Some(1), id, &pack_bytes(id, 10)));
    wait_for_temp_files(&sub, 1);
    meanwhile(&sub);
    std::fs::write(&release, b"").unwrap();
    let result = stage.join().unwrap();
    set_pause_before_publish(None).unwrap();
    (tmp, sub, result)
}

#[test]
fn a_worker_directory_moved_away_before_the_publish_is_a_vanished_directory() {
    let moved = std::sync::Arc::new(std::sync::Mutex::new(PathBuf::new()));
    let m = moved.clone();
    let (_tmp, sub, result) = stage_with_the_worker_dir_changed_before_publish(move |sub| {
        let to = sub.with_file_name("w1.moved");
        std::fs::rename(sub, &to).unwrap();
        *m.lock().unwrap() = to;
    });
    match result {
        Err(Error::DirectoryVanished { dir }) => assert_eq!(dir, sub),
        other => panic!("a worker directory moved away: {other:?}"),
    }
    let moved = moved.lock().unwrap().clone();
    assert!(
        !names(&moved).iter().any(|n| n.ends_with(".ready")),
        "nothing published where it went"
    );
}

#[test]
fn a_worker_directory_replaced_by_a_file_before_the_publish_is_a_link_error_naming_the_pack() {
    let (_tmp, sub, result) = stage_with_the_worker_dir_changed_before_publish(|sub| {
        std::fs::rename(sub, sub.with_file_name("w1.moved")).unwrap();
        std::fs::write(sub, b"a file now").unwrap();
    });
    let e = result.unwrap_err();
    match &e {
        Error::Io { op, path, source } => {
            assert_eq!(*op, "link", "{e}");
            assert!(
                path.starts_with(&sub) && path.extension().unwrap() == "ready",
                "{e}"
            );
            assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        }
        other => panic!("a worker directory replaced by a file: {other:?}"),
    }
    assert_eq!(std::fs::read(&sub).unwrap(), b"a file now");
}

#[test]
fn removing_a_pack_that_cannot_be_stated_or_is_no_longer_a_file_is_an_error_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    for ordinal in [Some(2), None] {
        let id = PackId::generate();
        spool.stage(ordinal, id, &pack_bytes(id, 10)).unwrap();
    }
    let packs = spool.scan(&AtomicBool::new(false)).unwrap();
    let in_w2 = packs.iter().find(|p| p.ordinal == Some(2)).unwrap();
    let own = packs.iter().find(|p| p.ordinal.is_none()).unwrap();
    // `w2` became a file: an unexpected entry where a directory belongs,
    // which is no "gone"
    let w2 = dir.join("w2");
    std::fs::rename(&w2, dir.join("w2.moved")).unwrap();
    std::fs::write(&w2, b"a file now").unwrap();
    match spool.remove(in_w2).unwrap_err() {
        Error::UnexpectedEntry { path, found, .. } => {
            assert_eq!((path, found.as_str()), (w2.clone(), "a regular file"));
        }
        other => panic!("a file in w2's place: {other:?}"),
    }
    assert_eq!(std::fs::read(&w2).unwrap(), b"a file now");
    // The own pack became a symlink: refused, the link left alone.
    std::fs::rename(&own.path, dir.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), &own.path).unwrap();
    match spool.remove(own).unwrap_err() {
        Error::UnexpectedEntry { path, found, .. } => {
            assert_eq!((path, found.as_str()), (own.path.clone(), "a symlink"));
        }
        other => panic!("a symlink in a pack's place: {other:?}"),
    }
    // `w2` a link to a directory outside holding a pack of that name: its
    // target is never removed
    let outside = tmp.path().join("outside");
    std::fs::rename(dir.join("w2.moved"), &outside).unwrap();
    std::fs::remove_file(&w2).unwrap();
    std::os::unix::fs::symlink(&outside, &w2).unwrap();
    assert!(spool.remove(in_w2).unwrap_err().is_unexpected_entry());
    assert!(outside.join(format!("{}.ready", in_w2.id)).is_file());
    assert!(own
        .path
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(dir.join("elsewhere").is_file());
}

#[test]
fn verify_reports_the_quarantined_files_and_why_and_names_what_an_odd_file_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let good = PackId::generate();
    spool.stage(None, good, &pack_bytes(good, 10)).unwrap();
    let set_aside = dir.join(format!("{}.quarantined", PackId::generate()));
    std::fs::write(&set_aside, b"not a pack").unwrap();
    // A symlink named as a quarantined pack is no quarantined pack.
    let link = dir.join(format!("{}.quarantined", PackId::generate()));
    std::os::unix::fs::symlink(&set_aside, &link).unwrap();
    let fifo = dir.join(format!("{}.ready", PackId::generate()));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let v = verify_dir(&dir, &AtomicBool::new(false)).unwrap();
    assert_eq!(v.valid.len(), 1);
    assert_eq!(v.quarantined.len(), 1, "{:#?}", v.quarantined);
    assert_eq!(v.quarantined[0].0, set_aside);
    assert!(
        !v.quarantined[0].1.is_empty() && !v.quarantined[0].1.contains("validates now"),
        "{:?}",
        v.quarantined[0].1
    );
    assert_eq!(
        v.corrupt,
        vec![(
            fifo,
            "not a regular file but a FIFO: never read, set aside by recovery".to_string()
        )]
    );
}

#[test]
fn a_pack_that_fills_the_budget_exactly_is_staged_and_one_byte_more_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = SpoolConfig {
        max_bytes: Some(300),
        ..take()
    };
    let spool = Spool::open(tmp.path(), &cfg).unwrap();
    let (id, p) = pack_of_len(300);
    spool.stage(None, id, &p).unwrap();
    assert_eq!(spool.usage().committed, 300);
    let (id, p) = pack_of_len(1);
    assert!(matches!(
        spool.stage(None, id, &p),
        Err(Error::Full {
            used: 300,
            budget: 300,
            needed: 1,
            ..
        })
    ));
}

#[test]
fn a_reconcile_during_a_restage_of_a_published_pack_keeps_its_bytes_counted() {
    // The pack is published; a second, identical stage of it pauses before
    // its publish; a reconcile meanwhile leaves the `.ready` to the stage in
    // flight, which finds it already there and counts it back.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = std::sync::Arc::new(Spool::open(&dir, &take()).unwrap());
    let id = PackId::generate();
    let bytes = pack_bytes(id, 100);
    let n = bytes.len() as u64;
    spool.stage(None, id, &bytes).unwrap();
    let release = tmp.path().join("release");
    set_pause_before_publish(Some(&release)).unwrap();
    let (s, b) = (spool.clone(), bytes.clone());
    let restage = std::thread::spawn(move || s.stage(None, id, &b).unwrap());
    wait_for_temp_files(&dir, 1);
    assert_eq!(
        spool.reconcile().unwrap().committed,
        0,
        "left to the stage in flight"
    );
    std::fs::write(&release, b"").unwrap();
    restage.join().unwrap();
    set_pause_before_publish(None).unwrap();
    assert_eq!(spool.usage().committed, n);
    assert_eq!(spool.reconcile().unwrap().committed, n, "as a fresh walk");
}

#[test]
fn a_temp_file_name_needs_eight_lowercase_hex_digits() {
    let id = PackId::generate();
    assert_eq!(
        file_kind(&format!(".{id}.0badf00d.open")),
        Some((FileKind::Open, id))
    );
    for rand in ["0badf00z", "abc", "0badf00d0", "0BADF00D"] {
        assert_eq!(file_kind(&format!(".{id}.{rand}.open")), None, "{rand}");
    }
}

#[test]
fn recovery_never_sweeps_the_temp_file_of_a_stage_in_flight() {
    // A stage of this very Spool is paused before its publish: its
    // `.open` is live, not a torn write, and the stage publishes after.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = std::sync::Arc::new(Spool::open(&dir, &take()).unwrap());
    let id = PackId::generate();
    let bytes = pack_bytes(id, 100);
    let release = tmp.path().join("release");
    set_pause_before_publish(Some(&release)).unwrap();
    let (s, b) = (spool.clone(), bytes.clone());
    let stage = std::thread::spawn(move || s.stage(None, id, &b));
    wait_for_temp_files(&dir, 1);
    let report = spool.recover().unwrap();
    assert!(report.swept.is_empty(), "{:?}", report.swept);
    std::fs::write(&release, b"").unwrap();
    let staged = stage.join().unwrap();
    set_pause_before_publish(None).unwrap();
    let staged = staged.expect("the stage publishes");
    assert_eq!(std::fs::read(&staged.path).unwrap(), bytes);
}

/// Makes `path` immutable (`chattr +i`: even root cannot unlink it) until
/// dropped; `None` where the filesystem has no such attribute.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Option<Immutable> {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn a_pack_file_that_cannot_be_unlinked_is_an_error_naming_it_never_read_as_gone() {
    // An unlink refused (EPERM: an immutable file) is an error in each
    // place that removes pack files: the removal after upload, the purge
    // of quarantined packs and recovery's sweep of torn writes. Only
    // ENOENT (someone removed it first) reads as done.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let id = PackId::generate();
    spool.stage(None, id, &pack_bytes(id, 10)).unwrap();
    let pack = spool.scan(&AtomicBool::new(false)).unwrap().remove(0);
    let quarantined = dir.join(format!("{}.quarantined", PackId::generate()));
    std::fs::write(&quarantined, b"set aside").unwrap();
    let torn = dir.join(format!(".{}.0badf00d.open", PackId::generate()));
    std::fs::write(&torn, b"partial").unwrap();
    let ready = Immutable::set(&pack.path);
    let needs = format!(
        "chattr +i (root, a filesystem that has it) under {}",
        dir.display()
    );
    if !spool_lock::testing::required(ready.is_some(), &needs) {
        return;
    }
    let _quarantined = Immutable::set(&quarantined).unwrap();
    let _torn = Immutable::set(&torn).unwrap();
    assert_io(
        &spool.remove(&pack).unwrap_err(),
        "remove",
        &pack.path,
        libc::EPERM,
    );
    assert_io(
        &spool.purge_quarantined().unwrap_err(),
        "remove",
        &quarantined,
        libc::EPERM,
    );
    assert_io(&spool.recover().unwrap_err(), "remove", &torn, libc::EPERM);
    assert!(pack.path.exists() && quarantined.exists() && torn.exists());
}

/// The sweep and the purge remove what the walk met relative to the
/// directory holding it, opened without following a link: a `w<k>/` that is
/// (or became, after the walk looked) a link out of the spool is an error
/// naming it or skipped, and nothing in the link's target is removed.
#[test]
fn the_sweep_and_the_purge_never_remove_through_a_worker_directory_that_is_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let id = PackId::generate();
    let victims = [format!("{id}.quarantined"), format!(".{id}.0000abcd.open")];
    for n in &victims {
        std::fs::write(victim.join(n), b"the victim's").unwrap();
    }
    let spool = Spool::open(&dir, &take()).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("w1")).unwrap();
    // the walk itself never enters the link
    assert_eq!(spool.purge_quarantined().unwrap(), (0, 0));
    let rec = spool.begin_recovery().unwrap();
    assert!(rec.swept.is_empty(), "{:?}", rec.swept);
    // and a w1 the walk saw as a directory, a link by the time of the
    // removal: an error naming it
    let mut dirs = walk::EntryDirs::new(&dir);
    let e = dirs.of(Some(1)).unwrap_err();
    assert!(
        matches!(e, Error::UnexpectedEntry { ref path, ref found, .. } if *path == dir.join("w1") && found == "a symlink"),
        "{e}"
    );
    for n in &victims {
        assert_eq!(
            std::fs::read(victim.join(n)).unwrap(),
            b"the victim's",
            "{n}"
        );
    }
    spool.into_claim().unwrap().release().unwrap();
}

/// Setting a pack aside and removing it work relative to the directory
/// holding it: once the pack's `w<k>/` is swapped for a link to a victim
/// holding a file of the pack's name, a quarantine, a rejection and a
/// removal are errors naming the link, and the victim is unchanged.
#[test]
fn set_aside_and_removal_never_rename_or_remove_through_a_worker_directory_swapped_for_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let id = PackId::generate();
    spool.stage(Some(1), id, &pack_bytes(id, 10)).unwrap();
    let pack = spool
        .scan(&AtomicBool::new(false))
        .unwrap()
        .into_iter()
        .find(|p| p.id == id)
        .unwrap();
    assert_eq!(pack.ordinal, Some(1));
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join(format!("{id}.ready")), b"the victim's").unwrap();
    std::fs::rename(dir.join("w1"), tmp.path().join("w1.moved")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("w1")).unwrap();
    let is_link_error = |e: &Error| matches!(e, Error::UnexpectedEntry { path, found, .. } if *path == dir.join("w1") && found == "a symlink");
    let e = spool.quarantine(&pack, "test").unwrap_err();
    assert!(is_link_error(&e), "{e}");
    let e = spool.reject(&pack, "test").unwrap_err();
    assert!(is_link_error(&e), "{e}");
    let e = spool.remove(&pack).unwrap_err();
    assert!(is_link_error(&e), "{e}");
    assert_eq!(names(&victim), [format!("{id}.ready")]);
    assert_eq!(
        std::fs::read(victim.join(format!("{id}.ready"))).unwrap(),
        b"the victim's"
    );
    spool.into_claim().unwrap().release().unwrap();
}

/// A spool directory moved away and a link to a victim put at its path (a
/// group member of a shared key directory could): no stage writes through
/// the link, own or worker, and the victim is untouched; the same for
/// another directory put there.
#[test]
fn a_stage_never_writes_through_a_link_or_into_another_directory_at_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let spool = Spool::open(&dir, &take()).unwrap();
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::rename(&dir, tmp.path().join("s.moved")).unwrap();
    for plant in ["link", "directory"] {
        if plant == "link" {
            std::os::unix::fs::symlink(&victim, &dir).unwrap();
        } else {
            std::fs::remove_file(&dir).unwrap();
            std::fs::create_dir(&dir).unwrap();
        }
        for ordinal in [None, Some(1)] {
            let id = PackId::generate();
            let e = spool.stage(ordinal, id, &pack_bytes(id, 10)).unwrap_err();
            assert!(
                matches!(e, Error::DirectoryVanished { ref dir } if *dir == tmp.path().join("s")),
                "{plant}, {ordinal:?}: {e}"
            );
        }
        assert_eq!(names(&victim), Vec::<String>::new(), "{plant}: the victim");
        if plant == "directory" {
            assert_eq!(names(&dir), Vec::<String>::new(), "{plant}: nothing in it");
        }
    }
}

/// Requeue renames only what was set aside and asked for: a rejected pack
/// and a quarantined one that validates now become ready; a quarantined
/// one that still does not validate stays, saying why; a ready pack, an
/// open temp file and a FIFO named like a rejected pack are never touched
/// or listed (nor blocked on).
#[test]
fn requeue_renames_only_the_set_aside_packs_asked_for_and_a_quarantined_one_only_if_it_validates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let spool = Spool::open(&dir, &take()).unwrap();
    let set_aside = |suffix: &str, bytes: &[u8]| {
        let id = PackId::generate();
        std::fs::write(dir.join(format!("{}.{suffix}", id.to_hex())), bytes).unwrap();
        id
    };
    let ready = PackId::generate();
    spool.stage(None, ready, &pack_bytes(ready, 10)).unwrap();
    let rejected = PackId::generate();
    std::fs::write(
        dir.join(format!("{}.rejected", rejected.to_hex())),
        pack_bytes(rejected, 10),
    )
    .unwrap();
    let good = PackId::generate();
    std::fs::write(
        dir.join(format!("{}.quarantined", good.to_hex())),
        pack_bytes(good, 10),
    )
    .unwrap();
    let corrupt = set_aside("quarantined", b"not a pack");
    let fifo = dir.join(format!("{}.rejected", PackId::generate().to_hex()));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();

    // only the quarantined ones asked for
    let out = spool.requeue(false, true).unwrap();
    let mut seen: Vec<(String, Option<String>)> = out
        .iter()
        .map(|r| {
            (
                r.from().file_name().unwrap().to_string_lossy().into_owned(),
                r.kept().map(str::to_owned),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let kept_corrupt = seen
        .iter()
        .find(|(name, _)| name.starts_with(&corrupt.to_hex()))
        .unwrap();
    assert!(
        kept_corrupt
            .1
            .as_deref()
            .is_some_and(|why| why.contains("still does not validate")),
        "{seen:?}"
    );
    assert!(dir
        .join(format!("{}.quarantined", corrupt.to_hex()))
        .exists());
    assert!(dir.join(format!("{}.ready", good.to_hex())).exists());
    assert!(dir.join(format!("{}.rejected", rejected.to_hex())).exists());

    // a rejected copy of a pack that is ready again is kept: never replaced
    std::fs::write(
        dir.join(format!("{}.rejected", ready.to_hex())),
        pack_bytes(ready, 10),
    )
    .unwrap();

    // then the rejected ones: the real ones, never the FIFO or the ready pack
    let out = spool.requeue(true, false).unwrap();
    let names: Vec<_> = out.iter().map(|r| r.from()).collect();
    assert_eq!(out.len(), 2, "{names:?}");
    let of = |id: PackId| {
        out.iter()
            .find(|r| r.from().to_string_lossy().contains(&id.to_hex()))
            .unwrap()
    };
    assert_eq!(of(rejected).kept(), None);
    let why = of(ready).kept();
    assert!(
        why.is_some_and(|w| w.ends_with("already exists")),
        "{why:?}"
    );
    assert!(dir.join(format!("{}.ready", rejected.to_hex())).exists());
    assert!(dir.join(format!("{}.ready", ready.to_hex())).exists());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}
