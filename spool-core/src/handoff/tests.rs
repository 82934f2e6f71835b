//! The hand-off protocol on real directories: consent, list, confirm,
//! release, collect, settle; and the refs the daemon refuses.

use super::*;
use crate::spool::SpoolConfig;
use crate::PackWriter;

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
    confirm(&dir, &[(Some(2), b)]).unwrap();
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
    assert!(names_in(&confirmations_dir(&dir)).unwrap().is_empty());
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
    confirm(&dir, &[(None, a)]).unwrap();
    assert_eq!(spool.settle_hand_off().unwrap(), 1);
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
