//! The storage service's adoption rules on the real
//! `StorageService` with real directories, real locks and real child
//! processes, over the memory catalog and the fault-scripting store. The
//! liveness bounds (a flush returns, a stop is prompt, a dead holder is
//! adopted within the recheck interval, a latch lets go) are in `serial`.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::{ObjectStoreExt, PutPayload};
use spool_catalog::Catalog;
use spool_core::registry::Registry;
use spool_core::sink::{Sink, SinkConfig};
use spool_core::spool::SpoolConfig;
use spool_lock::LockMode;
use spool_service::{Error, Snapshot, StorageService};
use spool_tests::service::{
    block_on, destination, files, is_adopting, is_held, stage, tree, wait_for, Fixture,
    HelperChild, Staged,
};
use spool_upload::testing::{Action, Injected, Op, Rule};

/// The service-helper's report: `blocked` (with its 3 packs) blocked and
/// left in place, `adopted` adopted and removed, own packs at their pace.
fn blocked_one_adopted_the_other(child: &mut HelperChild, blocked: &Path, adopted: &Path) {
    let line = child.expect_line("blocked ");
    assert_eq!(line, format!("blocked {}", blocked.display()));
    assert_eq!(child.expect_line("adopted_spools "), "adopted_spools 1");
    assert_eq!(child.expect_line("adoption_owed "), "adoption_owed false");
    assert_own_packs_ship_at_pace(child);
    child.expect_line("done");
    assert_eq!(files(blocked, "ready"), 3, "its packs stay in place");
    assert!(!adopted.exists(), "the other dead sibling was adopted");
}

/// In the service-helper's SQLite catalog `db`: every pack of `adopted`
/// indexed, none of `blocked`.
fn assert_indexed_and_not(db: PathBuf, adopted: &[Staged], blocked: &[Staged]) {
    let catalog = spool_catalog::SqliteCatalog::new(db, "spool_").unwrap();
    block_on(async {
        for (id, _) in adopted {
            assert!(catalog.get(&id.to_hex()).await.unwrap().is_some());
        }
        for (id, _) in blocked {
            assert!(catalog.get(&id.to_hex()).await.unwrap().is_none());
        }
    });
}

/// The service-helper's report after a sibling was blocked: the loop did
/// not back off (registry wakes on, at least 8 cycles in 3 s), each own
/// pack staged one at a time was indexed within a second, a flush drained
/// at once.
fn assert_own_packs_ship_at_pace(child: &mut HelperChild) {
    let cycles: u64 = child.expect_line("cycles_in_3s ")["cycles_in_3s ".len()..]
        .parse()
        .unwrap();
    assert!(
        cycles >= 8,
        "only {cycles} cycles in 3 s: the loop backed off"
    );
    let ship: u64 = child.expect_line("own_ship_ms ")["own_ship_ms ".len()..]
        .parse()
        .unwrap();
    assert!(
        ship < 1000,
        "an own pack took {ship} ms to ship beside the blocked sibling (the registry wake is off?)"
    );
    let flush = child.expect_line("flush_ms ");
    let ms: u64 = flush.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(flush.ends_with("Ok(true)") && ms < 1000, "{flush}");
}

fn started(c: spool_service::ServiceConfig) -> StorageService {
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    svc
}

/// Waits (up to 30 s) until the service has drained and removed `dir`.
fn adopted(svc: &StorageService, dir: &Path) {
    assert!(
        wait_for(Duration::from_secs(30), || !dir.exists()),
        "{} not adopted: {:?}",
        dir.display(),
        svc.snapshot()
    );
}

/// The blocked policy, checked once `dir` is blocked with
/// `left` packs in place: listed, not owed, the loop still at its poll
/// rate, a flush returns at once, the rest of its packs indexed.
fn assert_blocked(fx: &Fixture, svc: &StorageService, dir: &Path, left: usize, rest: &[Staged]) {
    assert!(
        wait_for(Duration::from_secs(20), || svc
            .snapshot()
            .blocked_siblings
            .contains(&dir.to_path_buf())),
        "{} not blocked: {:?}",
        dir.display(),
        svc.snapshot()
    );
    assert_eq!(files(dir, "ready"), left, "its packs stay in place");
    assert!(!is_held(dir), "a blocked sibling is let go");
    let snap = svc.snapshot();
    assert!(
        !snap.adoption_owed,
        "a blocked sibling is not owed: {snap:?}"
    );
    assert!(snap.last_error.unwrap().contains("blocked"));
    for (id, _) in rest {
        assert!(block_on(fx.indexed(id)), "the rest of its packs go up");
    }
    block_on(fx.read_back(rest));
    // The loop keeps its poll rate: ~15 cycles in 3 s at a 200 ms poll,
    // where a loop backing off (100 ms doubling, 10 s max) runs at most 5.
    let c0 = svc.snapshot().cycles;
    std::thread::sleep(Duration::from_secs(3));
    let ran = svc.snapshot().cycles - c0;
    assert!(ran >= 8, "only {ran} cycles in 3 s: the loop backed off");
    let t = Instant::now();
    assert!(svc.flush(Duration::from_secs(10)).unwrap());
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "flush took {:?}",
        t.elapsed()
    );
}

#[test]
fn an_own_pack_refused_for_good_is_rejected_and_adoption_proceeds() {
    let fx = Fixture::new();
    let own = fx.claim(0);
    let mine = stage(own.dir(), 2);
    let bad = mine[0].0.to_hex();
    // pack-specific: a different object already at its key
    let key = spool_upload::object_key(
        &object_store::path::Path::from(fx.prefix.as_str()),
        &mine[0].0,
    );
    block_on(
        fx.store
            .inner()
            .put(&key, b"someone else's bytes".to_vec().into()),
    )
    .unwrap();
    let (dir, theirs) = fx.dead_sibling(1, 3);
    let svc = started(fx.config(own.dir()));
    adopted(&svc, &dir);
    assert!(own.dir().join(format!("{bad}.rejected")).exists());
    assert_eq!(files(own.dir(), "ready"), 0);
    block_on(fx.read_back(&mine[1..]));
    block_on(fx.read_back(&theirs));
    // the snapshot is published after the cycle that did the work
    assert!(
        wait_for(Duration::from_secs(5), || {
            let snap = svc.snapshot();
            (snap.rejected, snap.adopted_spools) == (1, 1)
        }),
        "{:?}",
        svc.snapshot()
    );
}

/// Flips one byte of `path`'s trailer, `from_end` bytes before its end,
/// in place (the same inode, as bit rot or a stray writer would).
fn damage_trailer(path: &Path, from_end: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let at = f.metadata().unwrap().len() - from_end;
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x5a]).unwrap();
    f.sync_all().unwrap();
}

/// End to end on the service: a pack whose trailer was damaged
/// after staging is quarantined — caught by validation when the damage
/// came before the service saw it, by the upload's re-check when it came
/// after (the store down, the pack already validated) — and never renamed
/// `.rejected`, uploaded or indexed; the service keeps shipping the rest,
/// and a pack staged afterwards.
#[test]
fn a_pack_whose_trailer_was_damaged_after_staging_is_quarantined_and_the_rest_ship() {
    let fx = Fixture::new();
    let own = fx.claim(0);
    let packs = stage(own.dir(), 4);
    let path = |i: usize| own.dir().join(format!("{}.ready", packs[i].0.to_hex()));
    // Before the service starts: a byte of the trailer's pack id.
    let trailer = spool_core::pack::TRAILER_LEN as u64;
    damage_trailer(&path(0), trailer - 8);
    // The store refuses every PUT until healed, so the others are
    // validated (and their summaries kept) before anything lands.
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let svc = started(fx.config(own.dir()));
    assert!(
        wait_for(Duration::from_secs(10), || fx.store.calls(Op::Put) >= 3),
        "{:?}",
        svc.snapshot()
    );
    // After validation: the last byte of its trailer's hash. Only the
    // upload's re-check of the staged bytes can see this one.
    damage_trailer(&path(1), 1);
    fx.store.clear();
    assert!(
        svc.flush(Duration::from_secs(20)).unwrap(),
        "{:?}",
        svc.snapshot()
    );
    for (id, _) in &packs[..2] {
        let hex = id.to_hex();
        assert!(
            own.dir().join(format!("{hex}.quarantined")).exists(),
            "pack {hex} quarantined: {:?}",
            tree(own.dir())
        );
        assert!(!own.dir().join(format!("{hex}.rejected")).exists());
        assert!(!own.dir().join(format!("{hex}.ready")).exists());
        assert!(!block_on(fx.indexed(id)), "a corrupt pack was indexed");
        let key = spool_upload::object_key(&object_store::path::Path::from(fx.prefix.as_str()), id);
        assert!(
            block_on(fx.store.inner().head(&key)).is_err(),
            "a corrupt pack was uploaded"
        );
    }
    block_on(fx.read_back(&packs[2..]));
    // the snapshot is published after the cycle that did the work
    assert!(
        wait_for(Duration::from_secs(5), || {
            let snap = svc.snapshot();
            (snap.quarantined, snap.rejected, snap.indexed) == (2, 0, 2)
        }),
        "{:?}",
        svc.snapshot()
    );
    // The service keeps shipping.
    let later = stage(own.dir(), 1);
    assert!(svc.flush(Duration::from_secs(20)).unwrap());
    block_on(fx.read_back(&later));
    assert_eq!(files(own.dir(), "ready"), 0);
    drop(svc);
    own.release().unwrap();
}

#[test]
fn destinations_sharing_a_root_never_adopt_each_others_directories() {
    let a = Fixture::new();
    let b = a.on_same_root(destination("b"));
    let own_a = a.claim(0);
    let own_b = b.claim(0);
    let (dead_a, packs_a) = a.dead_sibling(1, 2);
    let (dead_b, packs_b) = b.dead_sibling(1, 3);
    let svc_a = started(a.config(own_a.dir()));
    adopted(&svc_a, &dead_a);
    // B's dead directory stays whole while A runs
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(files(&dead_b, "ready"), 3);
    assert_eq!(block_on(a.objects()), 2, "A's store holds only A's packs");
    let svc_b = started(b.config(own_b.dir()));
    adopted(&svc_b, &dead_b);
    block_on(a.read_back(&packs_a));
    block_on(b.read_back(&packs_b));
    assert_eq!(block_on(b.objects()), 3);
    for (id, _) in &packs_b {
        assert!(!block_on(a.indexed(id)), "B's pack {id} in A's catalog");
    }
    // and each refuses the other's directory as its own
    let err = StorageService::new(a.config(own_b.dir())).unwrap_err();
    assert!(matches!(err, Error::NotARankDir { .. }), "{err}");
    let plain = a.root.join("plain");
    std::fs::create_dir(&plain).unwrap();
    let err = StorageService::new(a.config(&plain)).unwrap_err();
    assert!(matches!(err, Error::NotARankDir { .. }), "{err}");
    let nested = own_a.dir().join("r1-0000beef");
    std::fs::create_dir(&nested).unwrap();
    let err = StorageService::new(a.config(&nested)).unwrap_err();
    assert!(matches!(err, Error::NotARankDir { .. }), "{err}");
}

#[test]
fn staged_counts_the_packs_sinks_of_this_directory_published() {
    let fx = Fixture::new();
    let own = fx.claim(0);
    let registry = Arc::new(Registry::new());
    let mut c = fx.config(own.dir());
    c.registry = registry.clone();
    c.adopt = false;
    let svc = started(c);
    assert_eq!(svc.snapshot().staged, 0);
    let sink_config = |ordinal| SinkConfig {
        spool: SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..SpoolConfig::default()
        },
        ordinal,
        seal_records: 1,
        registry: registry.clone(),
        ..SinkConfig::default()
    };
    let s0 = Sink::open(own.dir(), sink_config(None)).unwrap();
    let s1 = Sink::open(own.dir(), sink_config(Some(1))).unwrap();
    for i in 0..3u8 {
        s0.write(&[i; 10]).unwrap();
    }
    s1.write(b"one").unwrap();
    s0.flush(Duration::from_secs(10)).unwrap();
    s1.flush(Duration::from_secs(10)).unwrap();
    // A sink elsewhere publishes into the same registry: not ours.
    let other = fx.claim(1);
    let s2 = Sink::open(other.dir(), sink_config(None)).unwrap();
    s2.write(b"theirs").unwrap();
    s2.flush(Duration::from_secs(10)).unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || svc.snapshot().staged == 4
            && svc.snapshot().indexed == 4),
        "{:?}",
        svc.snapshot()
    );
    s0.release().unwrap();
    s1.release().unwrap();
    s2.release().unwrap();
}

/// A sibling held by another process: a real `spool-core-helper` with
/// ready packs and a stage paused before its publish.
fn other_process_sibling(
    fx: &Fixture,
    rank: u64,
    ready: usize,
) -> (PathBuf, HelperChild, Vec<String>) {
    let dir = fx.key_dir().join(format!("r{rank}-0000a{rank:03x}"));
    let release = fx.root.join(format!("release-{rank}"));
    let ready_s = ready.to_string();
    let mut child = HelperChild::spawn(&[
        "stage-paused",
        dir.to_str().unwrap(),
        release.to_str().unwrap(),
        &ready_s,
    ]);
    let ids = (0..ready)
        .map(|_| child.expect_line("staged ")["staged ".len()..].to_string())
        .collect();
    child.expect_line("staging ");
    assert!(
        wait_for(Duration::from_secs(5), || files(&dir, "open") == 1),
        "the paused stage's temp file did not appear"
    );
    (dir, child, ids)
}

mod serial {
    use super::*;

    /// A loop whose adoption waits at a gate (here: own packs owed to an
    /// unreachable catalog) keeps its backoff although a live sibling's
    /// recheck is past due: the recheck cannot run until the gate opens,
    /// so it does not cut the wait short. (It did: the loop ran a cycle
    /// every ~1.5 ms, logging and retrying the index each time, for as
    /// long as the catalog was down or the lease was another's — seen in
    /// the two-node lease torture, RELIABILITY.md.)
    #[test]
    fn a_past_due_recheck_behind_a_gate_does_not_spin_the_loop() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let kept = fx.claim(1);
        let mut c = fx.config(own.dir());
        c.recheck_interval = Duration::from_millis(300);
        let svc = started(c);
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().live_siblings
                == 1),
            "{:?}",
            svc.snapshot()
        );
        fx.memory().set_reachable(false);
        stage(own.dir(), 1);
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().pending_index
                == 1),
            "{:?}",
            svc.snapshot()
        );
        // past the recheck: the loop backs off (100 ms doubling to 500 ms),
        // about 6 cycles in 2 s; a spinning one runs hundreds
        std::thread::sleep(Duration::from_millis(600));
        let c0 = svc.snapshot().cycles;
        std::thread::sleep(Duration::from_secs(2));
        let ran = svc.snapshot().cycles - c0;
        assert!(
            ran <= 40,
            "{ran} cycles in 2 s with the catalog down: the loop spins"
        );
        // the gate opens: the owed pack is indexed, the loop goes on
        fx.memory().set_reachable(true);
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().pending_index
                == 0),
            "{:?}",
            svc.snapshot()
        );
        drop(svc);
        kept.release().unwrap();
    }

    #[test]
    fn a_sibling_with_a_pack_over_the_in_flight_bound_is_blocked() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let claim = fx.claim(1);
        let dir = claim.dir().to_path_buf();
        let rest = stage(&dir, 3);
        let big = spool_tests::packs::write_pack(&dir, 300_000).0;
        claim.release().unwrap();
        let mut c = fx.config(own.dir());
        c.upload.max_in_flight_bytes = 100_000;
        c.max_backoff = Duration::from_secs(10);
        let svc = started(c);
        assert_blocked(&fx, &svc, &dir, 1, &rest);
        assert!(big.path.exists());
    }

    #[test]
    fn a_sibling_with_a_different_object_at_a_key_is_blocked() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let claim = fx.claim(1);
        let dir = claim.dir().to_path_buf();
        let mut packs = stage(&dir, 4);
        claim.release().unwrap();
        let (clash, _) = packs.pop().unwrap();
        let key = spool_upload::object_key(&object_store::path::Path::from(""), &clash);
        block_on(
            fx.store
                .inner()
                .put(&key, PutPayload::from_static(b"another object")),
        )
        .unwrap();
        let mut c = fx.config(own.dir());
        c.max_backoff = Duration::from_secs(10);
        let svc = started(c);
        assert_blocked(&fx, &svc, &dir, 1, &packs);
        assert!(dir.join(format!("{}.ready", clash.to_hex())).exists());
        let got = block_on(async { fx.store.inner().get(&key).await.unwrap().bytes().await });
        assert_eq!(
            got.unwrap().as_ref(),
            b"another object",
            "never overwritten"
        );
    }

    /// Another user's directory: the service runs as `nobody` in a child
    /// process (as root this process would open anything); root's dead
    /// sibling, whose lock file it cannot open, is blocked with its packs in
    /// place while `nobody`'s own dead sibling is adopted.
    #[test]
    fn a_sibling_whose_lock_file_is_another_users_is_blocked() {
        use std::os::unix::fs::PermissionsExt;
        const NOBODY: u32 = 65534;
        let fx = Fixture::new();
        let open =
            |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        open(&fx.root);
        std::fs::create_dir_all(fx.key_dir()).unwrap();
        open(&fx.key_dir());
        let (roots, root_packs) = fx.dead_sibling(1, 3);
        let (nobodys, nobody_packs) = fx.dead_sibling(2, 2);
        for p in tree(&nobodys)
            .iter()
            .map(|n| nobodys.join(n))
            .chain([nobodys.clone()])
        {
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let (store, db) = (fx.root.join("store"), fx.root.join("catalog"));
        for d in [&store, &db] {
            std::fs::create_dir(d).unwrap();
            open(d);
        }
        let db = db.join("c.db");
        let mut child = HelperChild::spawn_bin(
            "service-helper",
            &[
                "serve-as",
                &NOBODY.to_string(),
                fx.root.to_str().unwrap(),
                "a",
                store.to_str().unwrap(),
                db.to_str().unwrap(),
                "30",
            ],
        );
        blocked_one_adopted_the_other(&mut child, &roots, &nobodys);
        assert_indexed_and_not(db, &nobody_packs, &root_packs);
    }

    /// EROFS: a sibling on a read-only mount (a read-only
    /// bind mount over it, in a private mount namespace of the service's
    /// process) can be probed but never taken: it is blocked once with its
    /// packs in place, the cycle is not failed (no backoff) and own packs
    /// keep shipping at their pace, while the other dead sibling is adopted.
    #[test]
    fn a_sibling_on_a_read_only_mount_is_blocked_once_and_own_packs_keep_shipping() {
        if !spool_tests::required(spool_tests::is_root(), "root, for a mount namespace") {
            return;
        }
        let fx = Fixture::new();
        let (ro, ro_packs) = fx.dead_sibling(1, 3);
        let (rw, rw_packs) = fx.dead_sibling(2, 2);
        let (store, db) = (fx.root.join("store"), fx.root.join("catalog"));
        for d in [&store, &db] {
            std::fs::create_dir(d).unwrap();
        }
        let db = db.join("c.db");
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#)
            .arg("sh")
            .arg(&ro)
            .arg(spool_tests::service::helper_bin("service-helper"))
            .args(["serve-as", "-"])
            .arg(&fx.root)
            .arg("a")
            .arg(&store)
            .arg(&db)
            .arg("30");
        let mut child = HelperChild::spawn_command(cmd);
        blocked_one_adopted_the_other(&mut child, &ro, &rw);
        assert_indexed_and_not(db, &rw_packs, &ro_packs);
    }

    /// ELOOP: a sibling whose `.owner.lock` is a symlink (the
    /// lock is opened `O_NOFOLLOW`) is blocked once, the symlink and its
    /// packs left alone; the loop does not back off and own packs staged
    /// meanwhile ship within a second each (the registry wakes stay on).
    #[test]
    fn a_sibling_whose_lock_file_is_a_symlink_is_blocked_once_and_own_packs_keep_shipping() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (looped, _) = fx.dead_sibling(1, 3);
        let lock = looped.join(spool_lock::LOCK_FILE_NAME);
        std::fs::remove_file(&lock).unwrap();
        std::os::unix::fs::symlink(spool_lock::LOCK_FILE_NAME, &lock).unwrap();
        let (dead, _) = fx.dead_sibling(2, 2);
        let mut c = fx.config(own.dir());
        // a backoff would show: no wakes, and few cycles
        c.max_backoff = Duration::from_secs(10);
        let registry = c.registry.clone();
        let svc = started(c);
        assert!(
            wait_for(Duration::from_secs(10), || {
                let s = svc.snapshot();
                s.blocked_siblings == vec![looped.clone()] && !dead.exists()
            }),
            "{:?}",
            svc.snapshot()
        );
        let why = svc.snapshot().last_error.unwrap_or_default();
        assert!(
            why.contains(&looped.display().to_string()),
            "the block names the directory: {why}"
        );
        let cycles = svc.snapshot().cycles;
        std::thread::sleep(Duration::from_secs(3));
        let ran = svc.snapshot().cycles - cycles;
        assert!(ran >= 8, "only {ran} cycles in 3 s: the loop backed off");
        let spool = svc.spool().unwrap().clone();
        for i in 0..5 {
            let before = svc.snapshot().indexed;
            let id = spool_core::PackId::generate();
            let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
            w.push_record(format!("own {i}").as_bytes());
            let t = Instant::now();
            spool.stage(None, id, &w.finish()).unwrap();
            registry.notify(spool.dir());
            assert!(
                wait_for(Duration::from_secs(1), || svc.snapshot().indexed > before),
                "own pack {i} not shipped within 1 s beside the blocked sibling: {:?}",
                svc.snapshot()
            );
            assert!(t.elapsed() < Duration::from_secs(1));
        }
        assert_eq!(files(&looped, "ready"), 3, "its packs stay in place");
        assert!(
            std::fs::symlink_metadata(&lock)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the symlink is left alone"
        );
        assert_eq!(svc.snapshot().blocked_siblings, vec![looped.clone()]);
    }

    #[test]
    fn live_siblings_are_left_alone_and_a_dead_holder_is_adopted_within_the_recheck() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (other, mut child, child_ids) = other_process_sibling(&fx, 1, 3);
        let kept = fx.claim(2);
        stage(kept.dir(), 2);
        let (other_before, kept_before) = (tree(&other), tree(kept.dir()));
        let mut c = fx.config(own.dir());
        c.recheck_interval = Duration::from_secs(2);
        let svc = started(c);
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().live_siblings
                == 2),
            "{:?}",
            svc.snapshot()
        );
        // several rechecks later, still exactly as they were
        std::thread::sleep(Duration::from_secs(5));
        let snap = svc.snapshot();
        assert_eq!(snap.live_siblings, 2, "{snap:?}");
        assert!(!snap.adoption_owed, "live siblings are not owed: {snap:?}");
        assert_eq!(tree(&other), other_before);
        assert_eq!(tree(kept.dir()), kept_before);
        assert_eq!(
            block_on(fx.objects()),
            0,
            "none of their packs in the store"
        );
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 0);

        child.kill();
        let t = Instant::now();
        assert!(
            wait_for(Duration::from_secs(8), || !other.exists()),
            "dead holder not adopted: {:?}",
            svc.snapshot()
        );
        assert!(
            t.elapsed() < Duration::from_secs(2) + Duration::from_secs(3),
            "adopted after {:?}, recheck interval 2 s",
            t.elapsed()
        );
        for id in &child_ids {
            let id = spool_core::PackId::from_hex(id).unwrap();
            assert!(block_on(fx.indexed(&id)), "pack {id} of the dead holder");
        }
        assert_eq!(
            block_on(fx.objects()),
            3,
            "the paused stage was swept, not sent"
        );
        assert_eq!(tree(kept.dir()), kept_before, "the kept claim is untouched");
        // the count is refreshed by the recheck after the adoption, not by it
        assert!(
            wait_for(Duration::from_secs(5), || svc.snapshot().live_siblings == 1),
            "{:?}",
            svc.snapshot()
        );
        drop(svc);
        kept.release().unwrap();
    }

    #[test]
    fn a_store_cut_mid_adoption_keeps_the_directory_and_the_loop_finishes_later() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (dir, packs) = fx.dead_sibling(1, 6);
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::ConnectionRefused)).after(2));
        fx.store
            .script(Rule::new(Op::Head, Action::Fail(Injected::ConnectionRefused)).after(2));
        let mut c = fx.config(own.dir());
        c.upload.max_workers = 2;
        let svc = started(c);
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().upload_failures
                >= 2),
            "{:?}",
            svc.snapshot()
        );
        assert!(dir.exists());
        assert_eq!(files(&dir, "ready"), 4, "the rest stays where it was");
        let t = Instant::now();
        assert!(
            svc.flush(Duration::from_secs(5)).unwrap(),
            "nothing own is owed"
        );
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "flush took {:?}",
            t.elapsed()
        );
        assert!(svc.snapshot().adoption_owed);
        fx.store.clear();
        adopted(&svc, &dir);
        block_on(fx.read_back(&packs));
    }

    #[test]
    fn stop_during_a_stalled_adoption_is_prompt_and_a_successor_finishes() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (dir, packs) = fx.dead_sibling(1, 4);
        fx.store.script(Rule::new(Op::Put, Action::Stall));
        fx.store.script(Rule::new(Op::Head, Action::Stall));
        let mut svc = started(fx.config(own.dir()));
        // A fresh pack goes up as one conditional PUT (no HEAD first).
        assert!(wait_for(Duration::from_secs(10), || fx
            .store
            .calls(Op::Put)
            + fx.store.calls(Op::Head)
            > 0));
        assert!(is_adopting(&dir));
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "stop took {:?}",
            t.elapsed()
        );
        assert!(!is_held(&dir), "let go");
        assert_eq!(files(&dir, "ready"), 4, "kept whole");
        fx.store.release_stalls();
        fx.store.clear();
        let succ = fx.claim(2);
        let svc2 = started(fx.config(succ.dir()));
        adopted(&svc2, &dir);
        block_on(fx.read_back(&packs));
    }

    #[test]
    fn flush_never_adopts_and_really_runs_a_cycle() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (dir, _) = fx.dead_sibling(1, 1);
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
        let mut c = fx.config(own.dir());
        c.max_backoff = Duration::from_secs(60);
        c.poll_interval = Duration::from_secs(60);
        let svc = started(c);
        // failed adoption rounds at ~0.1, 0.3, 0.7, 1.5, 3.1 s; the next
        // one only at ~6.3 s: the loop idles in its backoff
        assert!(
            wait_for(Duration::from_secs(10), || svc.snapshot().upload_failures
                >= 5),
            "{:?}",
            svc.snapshot()
        );
        let before = svc.snapshot();
        let t = Instant::now();
        assert!(svc.flush(Duration::from_millis(500)).unwrap());
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "flush took {:?}",
            t.elapsed()
        );
        let after = svc.snapshot();
        assert!(after.cycles > before.cycles, "the flush ran a cycle");
        assert_eq!(
            after.upload_failures, before.upload_failures,
            "no adoption round"
        );
        assert_eq!(after.adopted_packs, before.adopted_packs);
        assert!(dir.exists());
    }

    #[test]
    fn back_to_back_flushes_from_two_threads_do_not_stop_adoption() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (other, mut child, ids) = other_process_sibling(&fx, 1, 20);
        let mut c = fx.config(own.dir());
        c.recheck_interval = Duration::from_secs(1);
        c.upload.max_workers = 2;
        let svc = started(c);
        assert!(wait_for(Duration::from_secs(10), || svc
            .snapshot()
            .live_siblings
            == 1));
        let done = std::sync::atomic::AtomicBool::new(false);
        let flushes = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::SeqCst) {
                        assert!(svc.flush(Duration::from_secs(10)).unwrap());
                        flushes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(300));
            child.kill();
            let ok = wait_for(Duration::from_secs(30), || !other.exists());
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            assert!(
                ok,
                "not adopted under back-to-back flushes: {:?}",
                svc.snapshot()
            );
        });
        assert!(
            flushes.into_inner() > 10,
            "the flushes really ran back to back"
        );
        for id in &ids {
            let id = spool_core::PackId::from_hex(id).unwrap();
            assert!(block_on(fx.indexed(&id)));
        }
    }

    #[test]
    fn a_flush_beside_a_large_dead_backlog_waits_for_at_most_one_step() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let claim = fx.claim(1);
        let dir = claim.dir().to_path_buf();
        for _ in 0..64 {
            spool_tests::service::write_sparse_pack(&dir, 64 << 20);
        }
        claim.release().unwrap();
        // Keep the backlog out of the store whatever happens.
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))).after(1));
        // a slice of 2 s: one step in flight (at most the slice and a
        // validation chunk) is told from two (at least twice the slice)
        // with a second of margin on a loaded machine
        let mut c = fx.config(own.dir());
        c.adoption_slice = Duration::from_secs(2);
        let mut svc = started(c);
        assert!(wait_for(Duration::from_secs(10), || is_adopting(&dir)));
        std::thread::sleep(Duration::from_millis(300));
        let mine = stage(own.dir(), 1);
        let t = Instant::now();
        assert!(svc.flush(Duration::from_secs(10)).unwrap());
        assert!(
            t.elapsed() < Duration::from_millis(3000),
            "flush took {:?}",
            t.elapsed()
        );
        block_on(fx.read_back(&mine));
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "stop took {:?}",
            t.elapsed()
        );
        assert!(!is_held(&dir));
        assert_eq!(
            block_on(fx.objects()),
            1,
            "the backlog stayed out of the store"
        );
    }

    #[test]
    fn stop_during_the_validation_of_a_large_backlog_is_prompt_and_leaves_it_whole() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let claim = fx.claim(1);
        let dir = claim.dir().to_path_buf();
        for _ in 0..16 {
            spool_tests::service::write_sparse_pack(&dir, 256 << 20);
        }
        claim.release().unwrap();
        let before = tree(&dir);
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
        let mut svc = started(fx.config(own.dir()));
        assert!(wait_for(Duration::from_secs(10), || is_adopting(&dir)));
        let t = Instant::now();
        svc.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "stop took {:?}",
            t.elapsed()
        );
        assert!(!is_held(&dir), "unlocked");
        assert_eq!(
            tree(&dir),
            before,
            "whole: nothing quarantined, nothing removed"
        );
        assert_eq!(files(&dir, "ready"), 16);
    }

    #[test]
    fn a_latched_service_lets_go_of_its_sibling_at_once() {
        let fx = Fixture::new();
        let own = fx.claim(0);
        let (dir, _) = fx.dead_sibling(1, 3);
        fx.store
            .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
        let mut c = fx.config(own.dir());
        // the shortest TTL (its fence margin lowered to 2 s): latch at 10 s
        c.lease_ttl = Duration::from_secs(5);
        c.max_backoff = Duration::from_secs(60);
        c.poll_interval = Duration::from_secs(60);
        c.recheck_interval = Duration::from_secs(120);
        let name = c
            .lease_scope
            .lease_name(&fx.dest.catalog_key().unwrap(), &spool_lock::host_name());
        let catalog = c.catalog.clone();
        let svc = started(c);
        assert!(
            wait_for(Duration::from_secs(10), || is_adopting(&dir)
                && svc.snapshot().upload_failures >= 3),
            "{:?}",
            svc.snapshot()
        );
        // Another adopter takes the lease once ours has lapsed on the
        // catalog's clock, and keeps it.
        fx.memory().advance_clock(Duration::from_secs(6));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let foreign = rt.block_on(async {
            spool_catalog::LeaseKeeper::new(
                catalog,
                name,
                spool_catalog::LeaseHolder::parse("another-adopter"),
                spool_catalog::LeaseConfig::new(Duration::from_secs(5)).unwrap(),
            )
            .unwrap()
            .spawn()
        });
        assert!(wait_for(Duration::from_secs(5), || foreign.state().held()));
        let taken = Instant::now();
        // Deposed at its next renewal (ttl/3), the service keeps the
        // sibling (adoption pauses) until the foreign lease has outlived
        // 2 x TTL; then it latches and lets go at once, although its loop
        // sleeps up to 60 s and its next discovery is 120 s away.
        std::thread::sleep(Duration::from_secs(7));
        assert!(
            is_held(&dir),
            "let go before the latch: {:?}",
            svc.snapshot()
        );
        assert!(!svc.snapshot().latched);
        let latch_by = Duration::from_secs(2) + Duration::from_secs(10);
        assert!(
            wait_for(Duration::from_secs(40), || !is_held(&dir)),
            "sibling still held after the latch: {:?}",
            svc.snapshot()
        );
        assert!(
            taken.elapsed() < latch_by + Duration::from_secs(5),
            "let go {:?} after the takeover (latch due by {latch_by:?})",
            taken.elapsed()
        );
        assert_eq!(files(&dir, "ready"), 3, "every pack still in it");
        let snap: Snapshot = svc.snapshot();
        assert!(snap.latched && !snap.lease_held, "{snap:?}");
        drop(svc);
        rt.block_on(async { foreign.stop().await }).unwrap();
    }
}
