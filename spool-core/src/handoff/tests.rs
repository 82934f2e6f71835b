//! The hand-off protocol on real directories: consent, list, confirm,
//! release, collect, settle; and the refs the daemon refuses.

use super::*;
use crate::spool::SpoolConfig;
use crate::PackWriter;
use spool_lock::Access;

fn take() -> SpoolConfig {
    SpoolConfig::default()
}

/// A rank directory `<tmp>/<key>/<rank>` opened (taken) by this process.
fn owner(tmp: &Path) -> Spool {
    let key = tmp.join("0123456789ab");
    std::fs::create_dir_all(&key).unwrap();
    Spool::open(&key.join("r0-h-1-1"), &take()).unwrap()
}

fn stage(spool: &Spool, ordinal: Option<u32>) -> PackId {
    let id = PackId::generate();
    let mut w = PackWriter::new(id, crate::pack::now_ms());
    w.push_record(b"record");
    spool.stage(ordinal, id, &w.finish()).unwrap();
    id
}

#[test]
fn ref_names_round_trip_and_other_names_are_none() {
    let id = PackId::generate();
    assert_eq!(parse_ref_name(&ref_name(None, id)), Some((None, id)));
    assert_eq!(parse_ref_name(&ref_name(Some(3), id)), Some((Some(3), id)));
    for bad in [
        "x.ref",
        &format!("{id}.ready"),
        &format!("wx.{id}.ref"),
        ".ref",
    ] {
        assert_eq!(parse_ref_name(bad), None, "{bad}");
    }
}

/// The whole protocol: consented packs are listed (confirmed ones left
/// out), the owner removes a pack only once it is confirmed, and the
/// daemon then collects the confirmation. The daemon's steps write nothing
/// in the owner's directory.
#[test]
fn a_pack_leaves_its_owner_only_once_confirmed_and_the_daemon_writes_nothing_there() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let (a, b) = (stage(&spool, None), stage(&spool, Some(2)));
    let unconsented = stage(&spool, None);
    spool.consent(None, a).unwrap();
    spool.consent(Some(2), b).unwrap();
    let listed = list_consented(&dir).unwrap();
    let ids: Vec<PackId> = listed.packs.iter().map(|p| p.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&a) && ids.contains(&b) && !ids.contains(&unconsented));
    assert!(listed.refused.is_empty(), "{:?}", listed.refused);
    // nothing confirmed: the owner keeps everything
    assert_eq!(spool.release_confirmed().unwrap(), 0);
    let before = tree(&dir);
    confirm(&dir, &[(Some(2), b)], &Access::PRIVATE).unwrap();
    assert_eq!(
        tree(&dir),
        before,
        "the daemon wrote into the owner's directory"
    );
    let listed = list_consented(&dir).unwrap();
    assert_eq!(
        listed.packs.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![a]
    );
    assert_eq!(listed.confirmed, 1);
    assert_eq!(spool.release_confirmed().unwrap(), 1);
    assert!(!dir.join("w2").join(format!("{b}.ready")).exists());
    assert!(dir.join(format!("{a}.ready")).exists());
    assert!(dir.join(format!("{unconsented}.ready")).exists());
    assert_eq!(collect_confirmations(&dir).unwrap(), 1);
    // what is left: the pending slot of the pack not confirmed yet
    let left: Vec<String> = std::fs::read_dir(confirmations_dir(&dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec![pending_name(&ref_name(None, a))]);
}

/// A confirmation costs the daemon no inode: it is the slot the owner made
/// at consent, renamed (the same inode).
#[test]
fn a_confirmation_is_the_owners_pending_slot_renamed_no_new_inode() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let a = stage(&spool, None);
    spool.consent(None, a).unwrap();
    let name = ref_name(None, a);
    let slot = confirmations_dir(&dir).join(pending_name(&name));
    let inode = std::fs::metadata(&slot).unwrap().ino();
    confirm(&dir, &[(None, a)], &Access::PRIVATE).unwrap();
    assert!(!slot.exists());
    assert_eq!(
        std::fs::metadata(confirmations_dir(&dir).join(&name))
            .unwrap()
            .ino(),
        inode
    );
    assert_eq!(spool.release_confirmed().unwrap(), 1);
}

/// Every path under `dir`, with its kind and size.
fn tree(dir: &Path) -> Vec<(PathBuf, bool, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), m.is_dir(), if m.is_dir() { 0 } else { m.len() }));
        }
    }
    out.sort();
    out
}

/// A ref to a symlink, to a directory, under a `w<k>` that is a symlink,
/// or with a name that is no ref's is refused with why; nothing behind it
/// is listed.
#[test]
fn refs_to_symlinks_directories_or_outside_the_directory_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (s, d) = (PackId::generate(), PackId::generate());
    std::fs::write(outside.join(format!("{s}.ready")), b"x").unwrap();
    std::os::unix::fs::symlink(
        outside.join(format!("{s}.ready")),
        dir.join(format!("{s}.ready")),
    )
    .unwrap();
    std::fs::create_dir(dir.join(format!("{d}.ready"))).unwrap();
    let w = PackId::generate();
    std::os::unix::fs::symlink(&outside, dir.join("w7")).unwrap();
    std::fs::write(outside.join(format!("{w}.ready")), b"x").unwrap();
    for (o, id) in [(None, s), (None, d), (Some(7), w)] {
        spool.consent(o, id).unwrap();
    }
    std::fs::write(dir.join(REFS_DIR).join("junk"), b"").unwrap();
    let listed = list_consented(&dir).unwrap();
    assert!(listed.packs.is_empty(), "{:?}", listed.packs);
    let whys: Vec<String> = listed.refused.iter().map(|r| r.why.clone()).collect();
    assert_eq!(whys.len(), 4, "{whys:?}");
    assert!(
        whys.iter()
            .any(|w| w.contains("symlink (not a regular file)")),
        "{whys:?}"
    );
    assert!(
        whys.iter()
            .any(|w| w.contains("directory (not a regular file)")),
        "{whys:?}"
    );
    assert!(whys.iter().any(|w| w.contains("w7")), "{whys:?}");
    assert!(whys.iter().any(|w| w.contains("is not named")), "{whys:?}");
}

/// The adopter of a dead owner removes the packs the daemon confirmed
/// (never shipping them again), then every ref and confirmation, and
/// keeps the rest for adoption.
#[test]
fn settling_a_dead_owners_hand_off_removes_confirmed_packs_refs_and_confirmations() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let (a, b) = (stage(&spool, None), stage(&spool, Some(1)));
    spool.consent(None, a).unwrap();
    spool.consent(Some(1), b).unwrap();
    confirm(&dir, &[(None, a)], &Access::PRIVATE).unwrap();
    let settled = spool.settle_hand_off().unwrap();
    assert_eq!(settled.removed, 1);
    assert!(settled.left.is_empty(), "{:?}", settled.left);
    assert!(!dir.join(format!("{a}.ready")).exists());
    assert!(dir.join("w1").join(format!("{b}.ready")).exists());
    assert!(!dir.join(REFS_DIR).exists());
    assert!(!confirmations_dir(&dir).exists());
    assert!(
        !dir.parent().unwrap().join(SHIPPED_DIR).exists(),
        "an empty _shipped left"
    );
    assert!(list_consented(&dir).unwrap().packs.is_empty());
}

// ---- planted entries (crate::at) ---------------------------------------

/// A victim directory outside the spool root with files named like what
/// the hand-off removes (a ref, a confirmation, a pack, the shipper
/// record); its content, to compare byte for byte.
struct Victim {
    dir: PathBuf,
    before: Vec<(PathBuf, bool, u64)>,
    bytes: Vec<(String, Vec<u8>)>,
}

impl Victim {
    fn new(tmp: &Path, names: &[String]) -> Victim {
        let dir = tmp.join("victim");
        std::fs::create_dir_all(&dir).unwrap();
        for n in names
            .iter()
            .chain([&"precious".to_string(), &SHIPPER_FILE.to_string()])
        {
            std::fs::write(dir.join(n), format!("victim {n}")).unwrap();
        }
        let mut v = Victim {
            dir,
            before: Vec::new(),
            bytes: Vec::new(),
        };
        v.before = tree(&v.dir);
        v.bytes = v.read();
        v
    }

    fn read(&self) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<_> = std::fs::read_dir(&self.dir)
            .unwrap()
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    }

    fn check(&self, step: &str) {
        assert_eq!(
            tree(&self.dir),
            self.before,
            "{step}: the victim's tree changed"
        );
        assert_eq!(
            self.read(),
            self.bytes,
            "{step}: the victim's bytes changed"
        );
    }
}

fn unexpected(e: &Error) -> bool {
    e.is_unexpected_entry()
}

/// A dead owner's `_refs` replaced by a link to a directory outside the
/// root: settling its hand-off removes nothing there, reports the link,
/// and still removes what the shipper confirmed.
#[test]
fn a_symlinked_refs_is_left_and_reported_by_settling_never_emptied() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let a = stage(&spool, None);
    spool.consent(None, a).unwrap();
    confirm(&dir, &[(None, a)], &Access::PRIVATE).unwrap();
    let victim = Victim::new(tmp.path(), &[ref_name(None, a), format!("{a}.ready")]);
    std::fs::remove_dir_all(dir.join(REFS_DIR)).unwrap();
    std::os::unix::fs::symlink(&victim.dir, dir.join(REFS_DIR)).unwrap();
    let settled = spool.settle_hand_off().unwrap();
    victim.check("settle");
    assert_eq!(settled.removed, 1);
    assert!(!dir.join(format!("{a}.ready")).exists());
    assert_eq!(settled.left.len(), 1, "{:?}", settled.left);
    assert!(unexpected(&settled.left[0]));
    assert!(
        settled.left[0].to_string().contains("a symlink"),
        "{}",
        settled.left[0]
    );
    // a live owner's listing refuses it too, reading nothing under it
    let listed = list_consented(&dir).unwrap();
    assert!(listed.packs.is_empty());
    assert_eq!(listed.refused.len(), 1);
    assert!(spool.consented_packs().is_err());
    assert!(spool.consent(None, a).is_err());
    victim.check("list, count, consent");
}

/// Links under `<key>/_shipped` (at `_shipped` itself, at an owner's
/// confirmations directory, at an orphan's): no collection, confirmation,
/// settling or shipper record touches the victim.
#[test]
fn links_under_shipped_never_let_the_daemon_remove_or_write_outside_the_root() {
    for plant in ["shipped", "owner", "orphan", "record"] {
        let tmp = tempfile::tempdir().unwrap();
        let spool = owner(tmp.path());
        let dir = spool.dir().to_path_buf();
        let key_dir = dir.parent().unwrap().to_path_buf();
        let a = stage(&spool, None);
        spool.consent(None, a).unwrap();
        let victim = Victim::new(
            tmp.path(),
            &[ref_name(None, a), pending_name(&ref_name(None, a))],
        );
        let shipped = key_dir.join(SHIPPED_DIR);
        // (the consent made `_shipped/<rank>/` with the pack's pending slot;
        // the victim holds a file of that name too)
        let own = shipped.join(dir.file_name().unwrap());
        match plant {
            "shipped" => {
                std::fs::remove_dir_all(&shipped).unwrap();
                std::os::unix::fs::symlink(&victim.dir, &shipped).unwrap()
            }
            "owner" => {
                std::fs::remove_dir_all(&own).unwrap();
                std::os::unix::fs::symlink(&victim.dir, &own).unwrap();
            }
            "orphan" => {
                std::os::unix::fs::symlink(&victim.dir, shipped.join("r9-deadbeef")).unwrap();
            }
            _ => {
                std::os::unix::fs::symlink(
                    victim.dir.join(SHIPPER_FILE),
                    shipped.join(SHIPPER_FILE),
                )
                .unwrap();
            }
        }
        let step = |what: &str| victim.check(&format!("{plant}: {what}"));
        let confirmed = confirm(&dir, &[(None, a)], &Access::PRIVATE);
        step("confirm");
        let _ = collect_confirmations(&dir);
        step("collect");
        let orphans = collect_orphaned_confirmations(&key_dir);
        step("collect orphans");
        let _ = record_shipper(
            &key_dir.join("r1-00000001"),
            &record("r1-00000001"),
            &Access::PRIVATE,
        );
        step("record the shipper");
        let _ = shipper_of(&key_dir);
        clear_shipper_temps(&key_dir);
        clear_shipper(&key_dir);
        forget_shipper(&key_dir.join("r1-00000001"));
        step("clear the record");
        let _ = spool.release_confirmed();
        step("release");
        let settled = spool.settle_hand_off();
        step("settle");
        remove_empty_confirmations(&dir);
        step("let go");
        match plant {
            "shipped" | "owner" => {
                assert!(
                    confirmed.as_ref().is_err_and(unexpected),
                    "{plant}: {confirmed:?}"
                );
                // the pack was never confirmed: it is still there
                assert!(dir.join(format!("{a}.ready")).exists(), "{plant}");
                assert!(!settled.unwrap().left.is_empty(), "{plant}");
            }
            "orphan" => {
                assert!(
                    orphans.as_ref().is_err_and(unexpected),
                    "{plant}: {orphans:?}"
                );
            }
            _ => {}
        }
    }
}

/// The temp files a daemon killed mid-write left go, and `_shipped/` once
/// empty; a record, and any other file there, stay.
#[test]
fn clearing_shipper_temps_keeps_the_record_and_every_other_file() {
    let tmp = tempfile::tempdir().unwrap();
    let key_dir = tmp.path().join("root").join("0123456789ab");
    let shipped = key_dir.join(SHIPPED_DIR);
    std::fs::create_dir_all(&shipped).unwrap();
    let temp = shipped.join(format!("{SHIPPER_FILE}.0badcafe.tmp"));
    std::fs::write(&temp, b"half").unwrap();
    std::fs::write(shipped.join(SHIPPER_FILE), b"r1-00000001\nnode\tn\n").unwrap();
    std::fs::write(shipped.join("notes.txt"), b"mine").unwrap();
    std::fs::write(shipped.join(format!("{SHIPPER_FILE}.nothex!!.tmp")), b"x").unwrap();
    clear_shipper_temps(&key_dir);
    assert!(!temp.exists(), "the temp is left");
    assert!(
        shipped.join(SHIPPER_FILE).exists(),
        "the record was removed"
    );
    assert!(shipped.join("notes.txt").exists());
    assert!(shipped
        .join(format!("{SHIPPER_FILE}.nothex!!.tmp"))
        .exists());

    for f in [SHIPPER_FILE, "notes.txt", ".shipper.nothex!!.tmp"] {
        std::fs::remove_file(shipped.join(f)).unwrap();
    }
    std::fs::write(&temp, b"half").unwrap();
    clear_shipper_temps(&key_dir);
    assert!(!shipped.exists(), "an empty _shipped/ is left");
}

/// A FIFO where the shipper record belongs is an error at once for a
/// reader (`spool status`, the shipper), never a blocked open.
#[test]
fn a_fifo_as_the_shipper_record_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let key_dir = tmp.path().join("root").join("0123456789ab");
    std::fs::create_dir_all(key_dir.join(SHIPPED_DIR)).unwrap();
    nix::unistd::mkfifo(
        &key_dir.join(SHIPPED_DIR).join(SHIPPER_FILE),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let t = std::time::Instant::now();
    assert!(shipper_of(&key_dir).is_err_and(|e| unexpected(&e)));
    clear_shipper(&key_dir);
    assert!(
        key_dir.join(SHIPPED_DIR).join(SHIPPER_FILE).exists(),
        "a FIFO is left, not removed"
    );
    // the daemon's record replaces it without opening it
    record_shipper(
        &key_dir.join("r1-00000001"),
        &record("r1-00000001"),
        &Access::PRIVATE,
    )
    .unwrap();
    assert_eq!(
        shipper_of(&key_dir).unwrap(),
        Some(key_dir.join("r1-00000001"))
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
}

/// Entries spool did not make inside `_refs` (a subdirectory, a FIFO, a
/// name that is not UTF-8) are left and reported by settling, the
/// regular refs removed; a live owner's listing refuses each.
#[test]
fn stray_entries_in_refs_are_left_and_reported_never_a_loop() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let a = stage(&spool, None);
    spool.consent(None, a).unwrap();
    let refs = dir.join(REFS_DIR);
    std::fs::create_dir(refs.join("sub")).unwrap();
    std::fs::write(refs.join("sub").join("x"), b"").unwrap();
    nix::unistd::mkfifo(
        &refs.join("fifo.ref"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::write(refs.join(std::ffi::OsStr::from_bytes(b"\xff.ref")), b"").unwrap();
    let listed = list_consented(&dir).unwrap();
    assert_eq!(listed.packs.len(), 1);
    assert_eq!(listed.refused.len(), 3, "{:?}", listed.refused);
    let settled = spool.settle_hand_off().unwrap();
    assert_eq!(settled.left.len(), 3, "{:?}", settled.left);
    assert!(settled.left.iter().all(unexpected));
    assert!(
        !refs.join(ref_name(None, a)).exists(),
        "the owner's own ref stays"
    );
    assert!(refs.join("sub").join("x").exists());
}

/// The hand-off's directories and files get the spool's mode (and a
/// shipper's confirmations the shipper's), so a daemon of another user in
/// the group reads and writes them.
#[test]
fn hand_off_files_follow_the_spools_mode() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("0123456789ab");
    std::fs::create_dir_all(&key).unwrap();
    let shared = spool_lock::Access::parse(Some("0770"), None).unwrap();
    let mut cfg = take();
    cfg.lock.access = shared;
    let spool = Spool::open(&key.join("r0-h-1-1"), &cfg).unwrap();
    let dir = spool.dir().to_path_buf();
    let a = stage(&spool, None);
    spool.consent(None, a).unwrap();
    spool.prepare_confirmations().unwrap();
    confirm(&dir, &[(None, a)], &shared).unwrap();
    record_shipper(&key.join("r1-00000001"), &record("r1-00000001"), &shared).unwrap();
    let mode = |p: PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.join(REFS_DIR)), 0o770);
    assert_eq!(mode(dir.join(REFS_DIR).join(ref_name(None, a))), 0o660);
    assert_eq!(mode(key.join(SHIPPED_DIR)), 0o770);
    assert_eq!(mode(confirmations_dir(&dir)), 0o770);
    assert_eq!(mode(confirmations_dir(&dir).join(ref_name(None, a))), 0o660);
    assert_eq!(mode(key.join(SHIPPED_DIR).join(SHIPPER_FILE)), 0o660);
}

fn record(dir_name: &str) -> ShipperRecord {
    ShipperRecord {
        dir_name: dir_name.into(),
        node: "node-a".into(),
        ..Default::default()
    }
}

/// The shipper record round-trips, and keeps hostile text to one bounded
/// line per field: a reason with line breaks or escapes cannot forge a
/// field, and a flood of refusals is listed up to its bound and counted.
#[test]
fn the_shipper_record_round_trips_and_bounds_what_it_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("root").join("0123456789ab");
    std::fs::create_dir_all(&key).unwrap();
    let mut rec = record("r1-00000001");
    rec.unconfirmed
        .push(("r0-00000002".into(), 3, "EACCES\nnode\tforged".into()));
    for i in 0..40 {
        rec.refused.push((
            "r0-00000002".into(),
            format!("{i}.ref"),
            format!("changed after consent \x1b[31m{}", "x".repeat(500)),
        ));
    }
    record_shipper(&key.join("r1-00000001"), &rec, &Access::PRIVATE).unwrap();
    let back = read_shipper(&key).unwrap().unwrap();
    assert_eq!(back.dir_name, "r1-00000001");
    assert_eq!(back.node, "node-a", "a forged node line was taken");
    assert_eq!(back.refused.len(), RECORDED_REFUSALS);
    assert_eq!(back.refused_more, 40 - RECORDED_REFUSALS as u64);
    assert!(back
        .refused
        .iter()
        .all(|(_, _, why)| why.chars().count() <= 201 && !why.contains('\x1b')));
    assert_eq!(back.unconfirmed.len(), 1);
    assert_eq!(back.unconfirmed[0].1, 3);
    assert!(!back.unconfirmed[0].2.contains('\n'));
    assert_eq!(shipper_of(&key).unwrap(), Some(key.join("r1-00000001")));
}

/// The owner's release wait: it removes what the daemon confirms as it
/// comes and returns 0 once nothing is waiting; with nothing confirmed it
/// gives up after `stalled` without a confirmation, or at the deadline,
/// whichever comes first, saying how many still wait.
#[test]
fn the_release_wait_removes_confirmed_packs_as_they_come_and_gives_up_when_they_stop() {
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let (a, b) = (stage(&spool, None), stage(&spool, Some(1)));
    spool.consent(None, a).unwrap();
    spool.consent(Some(1), b).unwrap();
    // nothing confirmed: given up after the stall, well before the deadline
    let t = Instant::now();
    let far = t + Duration::from_secs(30);
    assert_eq!(
        spool
            .wait_confirmed(far, Some(Duration::from_millis(200)))
            .unwrap(),
        2
    );
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // nothing confirmed, no stall rule: given up at the deadline
    let t = Instant::now();
    assert_eq!(
        spool
            .wait_confirmed(t + Duration::from_millis(150), None)
            .unwrap(),
        2
    );
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    // one confirmed now, the other later: both removed, nothing waits
    confirm(&dir, &[(None, a)], &Access::PRIVATE).unwrap();
    let confirmer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            confirm(&dir, &[(Some(1), b)], &Access::PRIVATE).unwrap();
        })
    };
    assert_eq!(
        spool
            .wait_confirmed(
                Instant::now() + Duration::from_secs(30),
                Some(Duration::from_secs(5))
            )
            .unwrap(),
        0
    );
    confirmer.join().unwrap();
    assert!(!dir.join(format!("{a}.ready")).exists());
    assert!(!dir.join("w1").join(format!("{b}.ready")).exists());
    assert_eq!(spool.consented_packs().unwrap(), 0);
}

/// What the daemon reads of a live owner without touching it: whether it
/// has a `_refs/` directory (a link there is none), and how long ago it
/// consented to a pack (none once the ref is gone).
#[test]
fn the_daemon_reads_refs_presence_and_consent_age_of_a_live_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    assert!(!has_refs_dir(&dir), "no consent yet, no _refs/");
    let a = stage(&spool, None);
    assert_eq!(consent_age(&dir, None, a), None);
    spool.consent(None, a).unwrap();
    assert!(has_refs_dir(&dir));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let age = consent_age(&dir, None, a).expect("a consented pack has an age");
    assert!(
        age >= std::time::Duration::from_millis(10) && age < std::time::Duration::from_secs(60),
        "{age:?}"
    );
    assert_eq!(consent_age(&dir, Some(3), a), None, "another ordinal's ref");
    // a link named _refs is no refs directory
    let other = tmp.path().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let linked = tmp.path().join("0123456789ab").join("r1-0000000b");
    std::fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(&other, linked.join(REFS_DIR)).unwrap();
    assert!(!has_refs_dir(&linked));
}

/// An owner letting go removes its emptied confirmations directory and
/// `<key>/_shipped` with it, and keeps one that still holds something.
#[test]
fn letting_go_removes_empty_confirmations_and_keeps_others() {
    let tmp = tempfile::tempdir().unwrap();
    let spool = owner(tmp.path());
    let dir = spool.dir().to_path_buf();
    let a = stage(&spool, None);
    spool.consent(None, a).unwrap();
    let shipped = tmp.path().join("0123456789ab").join(SHIPPED_DIR);
    // its pending slot is there: kept
    remove_empty_confirmations(&dir);
    assert!(confirmations_dir(&dir).is_dir());
    confirm(&dir, &[(None, a)], &Access::PRIVATE).unwrap();
    assert_eq!(spool.release_confirmed().unwrap(), 1);
    assert_eq!(collect_confirmations(&dir).unwrap(), 1);
    remove_empty_confirmations(&dir);
    assert!(!confirmations_dir(&dir).exists());
    assert!(!shipped.exists(), "an empty _shipped goes with it");
}

/// A record whose first line names no plain directory is no record (a
/// path, `.`, `..`, nothing); a record with exactly the bound of refusals
/// counts none more.
#[test]
fn a_shipper_record_naming_no_plain_directory_is_none() {
    for bad in ["", "a/b", ".", "..", "/r1-00000001"] {
        assert!(
            ShipperRecord::decode(&format!("{bad}\nnode\tn\n")).is_none(),
            "{bad:?}"
        );
    }
    assert!(ShipperRecord::decode("r1-00000001\nnode\tn\n").is_some());
    let mut rec = record("r1-00000001");
    for i in 0..RECORDED_REFUSALS {
        rec.refused
            .push(("o".into(), format!("{i}.ref"), "why".into()));
    }
    let back = ShipperRecord::decode(&rec.encode()).unwrap();
    assert_eq!(back.refused.len(), RECORDED_REFUSALS);
    assert_eq!(back.refused_more, 0);
}

/// A daemon that stops forgets its own record only (another's stays);
/// clearing removes whichever record is there, and `_shipped` once empty.
#[test]
fn a_daemon_forgets_only_its_own_record_and_clearing_removes_any() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("root").join("0123456789ab");
    std::fs::create_dir_all(&key).unwrap();
    let mine = key.join("r1-00000001");
    record_shipper(&mine, &record("r1-00000001"), &Access::PRIVATE).unwrap();
    forget_shipper(&key.join("r2-00000002"));
    assert_eq!(
        shipper_of(&key).unwrap(),
        Some(mine.clone()),
        "another daemon's forget"
    );
    forget_shipper(&mine);
    assert_eq!(shipper_of(&key).unwrap(), None);
    assert!(!key.join(SHIPPED_DIR).exists(), "_shipped goes once empty");
    record_shipper(&mine, &record("r1-00000001"), &Access::PRIVATE).unwrap();
    clear_shipper(&key);
    assert_eq!(shipper_of(&key).unwrap(), None);
    assert!(!key.join(SHIPPED_DIR).exists());
}
