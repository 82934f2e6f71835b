//! spool-core across real processes: SIGKILL at random points of staging,
//! a paused writer beside another process's recover, another user's
//! sibling (a child that drops privileges), nesting in practice.
//!
//! The helper is `spool-core-helper` (this package's test-only binary); the
//! `spool` binary is driven where the CLI is what is tested.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use spool_core::spool::{file_kind, FileKind, Spool, SpoolConfig};
use spool_core::PackId;

fn helper() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spool-core-helper"));
    c.env("RUST_LOG", "warn").stdin(Stdio::null());
    c
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// SIGKILL a producer at random points of staging, 500+ times (seeded;
/// `SPOOL_CRASH_SEED`, `SPOOL_CRASH_ITERATIONS` override). Afterwards
/// every `.ready` validates, every pack the producer reported staged is
/// present, torn writes appear only as `.open`, and a recovery sweeps
/// exactly those and quarantines nothing.
#[test]
fn sigkill_at_random_points_of_staging() {
    let seed: u64 = std::env::var("SPOOL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0001);
    let iterations: usize = std::env::var("SPOOL_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(520);
    eprintln!("crash test: seed {seed}, {iterations} iterations");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let root = tempfile::tempdir().unwrap();
    let (mut with_torn, mut with_ready, mut reported_total, mut completed) = (0, 0, 0, 0);
    for i in 0..iterations {
        let dir = root.path().join(format!("it{i}"));
        let child_seed: u64 = rng.random();
        let ordinal = if rng.random_bool(0.3) {
            Some(rng.random_range(0..3u32))
        } else {
            None
        };
        let delay = Duration::from_micros(rng.random_range(0..15_000));
        let mut cmd = helper();
        cmd.args([
            "stage",
            dir.to_str().unwrap(),
            &child_seed.to_string(),
            "40",
            "2048",
        ]);
        if let Some(k) = ordinal {
            cmd.arg(k.to_string());
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("done") {
            completed += 1;
        }
        let reported: Vec<PackId> = text
            .lines()
            .filter_map(|l| l.strip_prefix("staged "))
            .map(|s| s.parse().unwrap())
            .collect();
        reported_total += reported.len();
        let ctx = format!("iteration {i} (seed {seed}, child seed {child_seed}, delay {delay:?})");
        if !dir.exists() {
            assert!(
                reported.is_empty(),
                "{ctx}: reported packs but no directory"
            );
            continue;
        }
        let pack_dir = match ordinal {
            Some(k) if dir.join(format!("w{k}")).exists() => dir.join(format!("w{k}")),
            _ => dir.clone(),
        };
        let mut torn = 0;
        for d in [&dir, &pack_dir] {
            for name in files(d) {
                if name == ".owner.lock" || (d == &dir && name.starts_with('w') && pack_dir != dir)
                {
                    continue;
                }
                match file_kind(&name) {
                    Some((FileKind::Ready, id)) => {
                        let path = d.join(&name);
                        spool_core::spool::validate_file(&path, id, &AtomicBool::new(false))
                            .unwrap_or_else(|e| panic!("{ctx}: {name} does not validate: {e}"));
                    }
                    Some((FileKind::Open, _)) => torn += 1,
                    _ => panic!("{ctx}: unexpected file {name} in {}", d.display()),
                }
            }
            if pack_dir == dir {
                break;
            }
        }
        for id in &reported {
            assert!(
                pack_dir.join(format!("{id}.ready")).exists(),
                "{ctx}: reported pack {id} is missing"
            );
        }
        let ready = files(&pack_dir)
            .iter()
            .filter(|n| n.ends_with(".ready"))
            .count();
        assert!(ready >= reported.len());
        if torn > 0 {
            with_torn += 1;
        }
        if ready > 0 {
            with_ready += 1;
        }
        // The next owner recovers: sweeps exactly the torn files,
        // quarantines nothing, keeps every pack.
        let spool = Spool::open(&dir, &SpoolConfig::default()).unwrap();
        let r = spool.recover().unwrap();
        assert_eq!(r.swept.len(), torn, "{ctx}");
        assert!(r.quarantined.is_empty(), "{ctx}: {:?}", r.quarantined);
        assert_eq!(r.valid.len(), ready, "{ctx}");
        spool.into_claim().unwrap().release().unwrap();
    }
    eprintln!(
        "crash test: {iterations} kills; {with_ready} left ready packs, {with_torn} left a torn \
         temp file, {completed} finished before the kill, {reported_total} packs reported staged"
    );
    // The kills must land at varied points, not all before or after.
    assert!(with_torn > 0, "no kill landed mid-stage: widen the delays");
    assert!(with_ready > 0 && completed < iterations);
}

fn read_line(child: &mut Child, reader: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "helper {} ended early", child.id());
    line.trim_end().to_string()
}

/// A paused writer (its stage held just before publish): another process's
/// recover, with take or held_by_caller, is refused naming it; its `.open`
/// survives; its stage then completes.
#[test]
fn a_paused_writer_survives_another_process_recover() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let release = tmp.path().join("release");
    let mut writer = helper()
        .args([
            "stage-paused",
            dir.to_str().unwrap(),
            release.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(writer.stdout.take().unwrap());
    let line = read_line(&mut writer, &mut out);
    let id: PackId = line.strip_prefix("staging ").unwrap().parse().unwrap();
    let open_file = || -> Option<PathBuf> {
        files(&dir)
            .into_iter()
            .find(|n| n.starts_with(&format!(".{id}.")) && n.ends_with(".open"))
            .map(|n| dir.join(n))
    };
    wait_for("the paused writer's temp file", || open_file().is_some());
    let temp = open_file().unwrap();
    let pid = writer.id().to_string();

    // The real `spool recover` (take): exit 3, naming the writer.
    let out_cli =
        spool_tests::output(spool_tests::spool().args(["recover", dir.to_str().unwrap()]));
    assert_eq!(
        out_cli.status.code(),
        Some(3),
        "{}",
        spool_tests::describe(&out_cli)
    );
    let err = String::from_utf8_lossy(&out_cli.stderr);
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    // held_by_caller from another process: refused, naming it.
    let o = helper()
        .args(["recover", dir.to_str().unwrap(), "held_by_caller"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", spool_tests::describe(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("pid {pid}")));
    // verify never takes the lock and changes nothing.
    let v =
        spool_tests::output(spool_tests::spool().args(["verify", dir.to_str().unwrap(), "--json"]));
    assert_eq!(v.status.code(), Some(0), "{}", spool_tests::describe(&v));
    assert!(temp.exists(), "the writer's temp file was swept");

    std::fs::write(&release, b"").unwrap();
    assert_eq!(read_line(&mut writer, &mut out), format!("staged {id}"));
    assert!(writer.wait().unwrap().success());
    assert!(!temp.exists());
    spool_core::spool::validate_file(
        &dir.join(format!("{id}.ready")),
        id,
        &AtomicBool::new(false),
    )
    .unwrap();
}

fn write_blob(dir: &Path, len: usize) {
    std::fs::write(
        dir.join(format!("{}.ready", PackId::generate())),
        vec![1u8; len],
    )
    .unwrap();
}

/// Another user's dead sibling is not charged: a child that dropped its
/// privileges cannot take or empty it. The same child as root charges it.
#[test]
fn another_users_sibling_is_not_charged() {
    if !spool_tests::required(
        spool_tests::is_root(),
        "root, to drop privileges in the child",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = tmp.path().join("0123456789ab");
    let own = key.join("r0-00000001");
    let theirs = key.join("r1-00000002");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::create_dir_all(&theirs).unwrap();
    write_blob(&theirs, 300);
    let nobody = 65534u32;
    nix::unistd::chown(
        &own,
        Some(nix::unistd::Uid::from_raw(nobody)),
        Some(nix::unistd::Gid::from_raw(nobody)),
    )
    .unwrap();
    let run = |uid: Option<u32>| {
        let mut c = helper();
        c.args(["charge", own.to_str().unwrap(), "450"]);
        if let Some(u) = uid {
            c.arg(u.to_string());
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", spool_tests::describe(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(run(Some(nobody)), "dead_sibling_bytes 0");
    // The lock file the unprivileged child left belongs to nobody; root
    // can take it.
    assert_eq!(run(None), "dead_sibling_bytes 300");
}

/// Nesting in practice: a dead rank directory (a pack and a stage in
/// flight) under a flat root. The root can be taken, counts and recovers
/// nothing of it, stages its own packs; the rank directory cannot be taken
/// (by another process) while the root is held.
#[test]
fn a_dead_rank_directory_under_a_flat_root_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let rank = root.join("0123456789ab").join("r0-0000abcd");
    std::fs::create_dir_all(rank.parent().unwrap()).unwrap();
    // a pack staged by a process that is gone
    let o = helper()
        .args(["stage", rank.to_str().unwrap(), "1", "1", "100"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", spool_tests::describe(&o));
    // and a stage in flight when it was killed
    let release = tmp.path().join("never");
    let mut w = helper()
        .args([
            "stage-paused",
            rank.to_str().unwrap(),
            release.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the stage in flight", || {
        files(&rank).iter().any(|n| n.ends_with(".open"))
    });
    w.kill().unwrap();
    w.wait().unwrap();
    let before = files(&rank);

    let spool = Spool::open(&root, &SpoolConfig::default()).unwrap();
    assert_eq!(spool.usage().committed, 0);
    let r = spool.recover().unwrap();
    assert!(
        r.swept.is_empty() && r.valid.is_empty() && r.quarantined.is_empty(),
        "{r:?}"
    );
    let id = PackId::generate();
    let mut pw = spool_core::PackWriter::new(id, 0);
    pw.push_record(b"own");
    spool.stage(None, id, &pw.finish()).unwrap();
    assert_eq!(spool.scan(&AtomicBool::new(false)).unwrap().len(), 1);
    assert_eq!(
        files(&rank),
        before,
        "the root's recovery touched the rank directory"
    );
    // Another process cannot take the rank directory while the root is held.
    let o = spool_tests::output(spool_tests::spool().args(["recover", rank.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(3), "{}", spool_tests::describe(&o));
    assert_eq!(files(&rank), before);
    spool.into_claim().unwrap().release().unwrap();
}

/// A process forked without exec (a DataLoader worker) and its parent, both
/// minting ids within one millisecond, never mint the same id: the random
/// bits come from the OS, not from a generator whose state fork copies.
#[test]
fn a_forked_child_and_its_parent_never_mint_the_same_pack_id() {
    let out = helper().args(["fork-ids", "500"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let ids: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("id ")).collect();
    assert_eq!(ids.len(), 1000, "both sides report: {text}");
    let distinct: std::collections::HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "parent and child minted {} ids twice",
        ids.len() - distinct.len()
    );
}

/// A rank directory with two packs (one at the top, one under `w1/`),
/// claimed under `root` with `access`, staged and released (dead). Returns
/// (key dir, rank dir, top pack, worker pack).
fn dead_rank_dir(root: &Path, access: spool_lock::Access) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let opts = spool_lock::LockOptions {
        access,
        ..spool_lock::LockOptions::default()
    };
    spool_lock::create_parents(root, &access).unwrap();
    let claim = spool_core::claim_rank_dir(root, "0123456789ab", 0, &opts).unwrap();
    let config = SpoolConfig {
        lock: opts,
        ..SpoolConfig::default()
    };
    let spool = Spool::open_claimed(claim, &config).unwrap();
    let mut staged = Vec::new();
    for ordinal in [None, Some(1)] {
        let id = PackId::generate();
        let mut pw = spool_core::PackWriter::new(id, 0);
        pw.push_record(b"secret");
        staged.push(spool.stage(ordinal, id, &pw.finish()).unwrap().path);
    }
    let dir = spool.dir().to_path_buf();
    spool.into_claim().unwrap().release().unwrap();
    let key = dir.parent().unwrap().to_path_buf();
    (key, dir, staged[0].clone(), staged[1].clone())
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A child that dropped to `nobody` with `gid` as its only group tries to
/// read `pack` and hold shared flocks on `dir`'s lock file and directory.
/// Killed and reaped when dropped, so a failing assertion never leaves it
/// holding its locks.
fn intruder(dir: &Path, pack: &Path, gid: u32) -> (spool_tests::KillOnDrop, Vec<String>) {
    let child = helper()
        .args([
            "intrude",
            "65534",
            &gid.to_string(),
            dir.to_str().unwrap(),
            pack.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = spool_tests::KillOnDrop(child);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "intruder ended: {lines:?}"
        );
        let line = line.trim().to_string();
        if line == "holding" {
            return (child, lines);
        }
        lines.push(line);
    }
}

/// Private by default. Whatever the umask (0 here), rank
/// directories, key directories and worker subdirectories are 0700,
/// packs and lock files 0600; another local user (a privilege-dropped
/// child) cannot read a pack, cannot open or flock `.owner.lock` or the
/// directory, and so cannot stall an adopter, which takes the directory
/// at once beside it.
#[test]
fn private_by_default_another_user_cannot_read_lock_or_stall_adoption() {
    if !spool_tests::required(
        spool_tests::is_root(),
        "root, to drop privileges in the child",
    ) {
        return;
    }
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("root");
    let (key, dir, pack, worker_pack) = dead_rank_dir(&root, spool_lock::Access::default());
    for d in [&root, &key, &dir, &dir.join("w1")] {
        assert_eq!(mode_of(d), 0o700, "{}", d.display());
    }
    for f in [&pack, &worker_pack, &dir.join(".owner.lock")] {
        assert_eq!(mode_of(f), 0o600, "{}", f.display());
    }
    // Even with the path made reachable, the rank directory's own modes
    // keep the intruder out.
    for d in [&root, &key] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (mut child, said) = intruder(&dir, &pack, 65534);
    assert_eq!(said, ["pack denied", "lockfile denied", "dir denied"]);
    let start = Instant::now();
    let claim = spool_lock::try_adopt(&dir, &spool_lock::LockOptions::default()).unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    claim.release().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Group mode. `spool.mode = "0750"` with a group
/// gives directories 0750 and files 0640 of that group (the umask cannot
/// narrow them): a member reads packs, and can hold a shared flock on the
/// lock file and the directory. That delays a take, never blocks it for
/// good: the take is refused naming the reader's pid ("held shared by pid
/// N", also in `spool status`), and succeeds once the reader lets go.
#[test]
fn group_mode_a_members_shared_flock_delays_adoption_and_is_named() {
    if !spool_tests::required(
        spool_tests::is_root(),
        "root, to drop privileges in the child",
    ) {
        return;
    }
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("root");
    let group = 65534u32;
    let access = spool_lock::Access::parse(Some("0750"), Some(&group.to_string())).unwrap();
    let (key, dir, pack, worker_pack) = dead_rank_dir(&root, access);
    use std::os::unix::fs::MetadataExt;
    for d in [&root, &key, &dir, &dir.join("w1")] {
        assert_eq!(mode_of(d), 0o750, "{}", d.display());
        assert_eq!(
            std::fs::metadata(d).unwrap().gid(),
            group,
            "{}",
            d.display()
        );
    }
    for f in [&pack, &worker_pack, &dir.join(".owner.lock")] {
        assert_eq!(mode_of(f), 0o640, "{}", f.display());
        assert_eq!(
            std::fs::metadata(f).unwrap().gid(),
            group,
            "{}",
            f.display()
        );
    }
    let (mut child, said) = intruder(&dir, &pack, group);
    assert_eq!(said, ["pack ok", "lockfile shared", "dir shared"]);
    let pid = child.id();
    let status = spool_lock::read_owner(&dir).unwrap();
    assert!(!status.held);
    assert_eq!(status.shared_by, vec![pid]);
    let start = Instant::now();
    let err = spool_lock::try_adopt(&dir, &spool_lock::LockOptions::default()).unwrap_err();
    let waited = start.elapsed();
    assert!(
        matches!(&err, spool_lock::Error::HeldShared { pids, .. } if pids == &vec![pid]),
        "{err}"
    );
    assert!(
        !err.is_owned_by_another(),
        "a reader is not an owner: {err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("held shared by pid {pid}")),
        "{err}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "the take waited {waited:?}"
    );
    let o = spool_tests::output(spool_tests::spool().args(["status", root.to_str().unwrap()]));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("held shared by pid {pid}")),
        "{}",
        spool_tests::describe(&o)
    );
    // Nothing left behind by the refused take; the reader goes, the take
    // succeeds.
    assert!(dir.join(".owner.lock").exists());
    child.kill().unwrap();
    child.wait().unwrap();
    let claim = spool_lock::try_adopt(&dir, &spool_lock::LockOptions::default()).unwrap();
    claim.release().unwrap();
}
