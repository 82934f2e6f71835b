//! Entries planted in a spool root, black-box through the `spool` binary:
//! a symlink, a FIFO, a device, a file where a directory belongs, a
//! directory where a file belongs, a name that is not UTF-8, at each place
//! the hand-off reads or writes (a dead owner's `_refs/`, the key's
//! `_shipped/`, an owner's confirmations, an orphan's, the shipper record).
//!
//! For each: a victim directory outside the root is unchanged byte for
//! byte; `run --once` returns within a bound and ships every pack of every
//! sibling (the planted one's too); a sibling holding an entry spool did
//! not make is set aside once (blocked, the reason in its owner record,
//! shown by `status` and `lock owner`) and a second run does not retry it;
//! `status` and `lock owner` never hang on what they read.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use spool_tests::{describe, indexed_ids, output, spool};

/// The victim: a directory outside the spool root holding files named like
/// what the hand-off removes or writes.
struct Victim {
    dir: PathBuf,
    before: BTreeMap<PathBuf, (bool, Vec<u8>)>,
}

impl Victim {
    fn new(tmp: &Path, names: &[String]) -> Victim {
        let dir = tmp.join("victim");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for n in names
            .iter()
            .map(String::as_str)
            .chain(["precious", ".shipper", "sub/inner"])
        {
            std::fs::write(dir.join(n), format!("victim's {n}")).unwrap();
        }
        let before = content(&dir);
        Victim { dir, before }
    }

    fn check(&self, case: &str) {
        assert_eq!(
            content(&self.dir),
            self.before,
            "{case}: the victim outside the root changed"
        );
    }
}

/// Every entry under `dir`: whether a directory, and a file's bytes.
fn content(dir: &Path) -> BTreeMap<PathBuf, (bool, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
                out.insert(e.path(), (true, Vec::new()));
            } else {
                out.insert(e.path(), (false, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out
}

/// Where a case plants its entry.
#[derive(Clone, Copy, Debug)]
enum Plant {
    /// The dead owner's `_refs` a link to the victim.
    RefsLink,
    /// A regular file where the dead owner's `_refs` belongs.
    RefsFile,
    /// A subdirectory inside `_refs`.
    RefsSubdir,
    /// A FIFO inside `_refs`.
    RefsFifo,
    /// A character device inside `_refs` (root only: CI runs as root).
    RefsDevice,
    /// A name that is not UTF-8 inside `_refs`.
    RefsForeignName,
    /// The dead owner's confirmations directory a link to the victim.
    ConfirmationsLink,
    /// `<key>/_shipped` a link to the victim.
    ShippedLink,
    /// A file where `<key>/_shipped` belongs.
    ShippedFile,
    /// An orphan's confirmations directory a link to the victim.
    OrphanLink,
    /// The shipper record a FIFO.
    RecordFifo,
    /// The shipper record a link to the victim's `.shipper`.
    RecordLink,
    /// A directory where the shipper record belongs.
    RecordDir,
    /// A ref inside `_refs` that is a link to a victim file.
    RefLinkInside,
    /// A regular file where the dead owner's confirmations directory
    /// belongs.
    ConfirmationsFile,
    /// A FIFO where the dead owner's confirmations directory belongs.
    ConfirmationsFifo,
    /// The dead owner's pending slots links to the victim's files of the
    /// same names.
    PendingSlotLinks,
    /// A directory (holding a file) where a pending slot belongs.
    PendingSlotDir,
    /// A FIFO where `<key>/_shipped` belongs.
    ShippedFifo,
    /// A name that is not UTF-8 under `<key>/_shipped`.
    ShippedForeignName,
    /// The shipper record a character device (root only).
    RecordDevice,
}

impl Plant {
    /// Whether the dead owner holding it is set aside (the entry is in its
    /// own directory).
    fn in_owner(self) -> bool {
        matches!(
            self,
            Plant::RefsLink
                | Plant::RefsFile
                | Plant::RefsSubdir
                | Plant::RefsFifo
                | Plant::RefsDevice
                | Plant::RefsForeignName
                | Plant::RefLinkInside
        )
    }

    fn plant(self, key: &Path, owner: &Path, victim: &Victim) {
        let refs = owner.join("_refs");
        let shipped = key.join("_shipped");
        let fifo = |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        };
        let link = |to: &Path, at: &Path| std::os::unix::fs::symlink(to, at).unwrap();
        match self {
            Plant::RefsLink => {
                std::fs::remove_dir_all(&refs).unwrap();
                link(&victim.dir, &refs);
            }
            Plant::RefsFile => {
                std::fs::remove_dir_all(&refs).unwrap();
                std::fs::write(&refs, b"not a directory").unwrap();
            }
            Plant::RefsSubdir => {
                std::fs::create_dir(refs.join("sub")).unwrap();
                std::fs::write(refs.join("sub").join("x.ref"), b"").unwrap();
            }
            Plant::RefsFifo => fifo(&refs.join("f.ref")),
            Plant::RefsDevice => {
                assert!(
                    nix::unistd::geteuid().is_root(),
                    "planting a device needs root (CI runs as root)"
                );
                nix::sys::stat::mknod(
                    &refs.join("zero.ref"),
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                    nix::sys::stat::makedev(1, 5),
                )
                .unwrap();
            }
            Plant::RefsForeignName => {
                std::fs::write(refs.join(std::ffi::OsStr::from_bytes(b"\xff\xfe.ref")), b"")
                    .unwrap()
            }
            Plant::ConfirmationsLink => {
                let own = shipped.join(owner.file_name().unwrap());
                let _ = std::fs::remove_dir_all(&own);
                std::fs::create_dir_all(&shipped).unwrap();
                link(&victim.dir, &own);
            }
            Plant::ShippedLink => {
                let _ = std::fs::remove_dir_all(&shipped);
                link(&victim.dir, &shipped)
            }
            Plant::ShippedFile => {
                let _ = std::fs::remove_dir_all(&shipped);
                std::fs::write(&shipped, b"not a directory").unwrap()
            }
            Plant::OrphanLink => {
                std::fs::create_dir_all(&shipped).unwrap();
                link(&victim.dir, &shipped.join("r7-0badf00d"));
            }
            Plant::RecordFifo => {
                std::fs::create_dir_all(&shipped).unwrap();
                fifo(&shipped.join(".shipper"));
            }
            Plant::RecordLink => {
                std::fs::create_dir_all(&shipped).unwrap();
                link(&victim.dir.join(".shipper"), &shipped.join(".shipper"));
            }
            Plant::RecordDir => {
                std::fs::create_dir_all(shipped.join(".shipper")).unwrap();
            }
            Plant::RefLinkInside => {
                let first = std::fs::read_dir(&refs)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .min()
                    .unwrap();
                std::fs::remove_file(refs.join(&first)).unwrap();
                link(&victim.dir.join(&first), &refs.join(&first));
            }
            Plant::ConfirmationsFile | Plant::ConfirmationsFifo => {
                let own = shipped.join(owner.file_name().unwrap());
                let _ = std::fs::remove_dir_all(&own);
                std::fs::create_dir_all(&shipped).unwrap();
                if let Plant::ConfirmationsFile = self {
                    std::fs::write(&own, b"not a directory").unwrap();
                } else {
                    fifo(&own);
                }
            }
            Plant::PendingSlotLinks | Plant::PendingSlotDir => {
                let own = shipped.join(owner.file_name().unwrap());
                std::fs::create_dir_all(&own).unwrap();
                let slots: Vec<_> = std::fs::read_dir(&own)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                assert!(!slots.is_empty(), "{self:?}: no pending slot in {own:?}");
                for slot in slots {
                    std::fs::remove_file(own.join(&slot)).unwrap();
                    if let Plant::PendingSlotLinks = self {
                        link(&victim.dir.join(&slot), &own.join(&slot));
                    } else {
                        std::fs::create_dir(own.join(&slot)).unwrap();
                        std::fs::write(own.join(&slot).join("inner"), b"x").unwrap();
                        break;
                    }
                }
            }
            Plant::ShippedFifo => {
                let _ = std::fs::remove_dir_all(&shipped);
                fifo(&shipped);
            }
            Plant::ShippedForeignName => {
                std::fs::create_dir_all(&shipped).unwrap();
                std::fs::write(
                    shipped.join(std::ffi::OsStr::from_bytes(b"r9-\xff\xfe")),
                    b"",
                )
                .unwrap();
            }
            Plant::RecordDevice => {
                assert!(
                    nix::unistd::geteuid().is_root(),
                    "planting a device needs root (CI runs as root)"
                );
                std::fs::create_dir_all(&shipped).unwrap();
                nix::sys::stat::mknod(
                    &shipped.join(".shipper"),
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                    nix::sys::stat::makedev(1, 5),
                )
                .unwrap();
            }
        }
    }
}

const ALL: [Plant; 21] = [
    Plant::RefsLink,
    Plant::RefsFile,
    Plant::RefsSubdir,
    Plant::RefsFifo,
    Plant::RefsDevice,
    Plant::RefsForeignName,
    Plant::ConfirmationsLink,
    Plant::ShippedLink,
    Plant::ShippedFile,
    Plant::OrphanLink,
    Plant::RecordFifo,
    Plant::RecordLink,
    Plant::RecordDir,
    Plant::RefLinkInside,
    Plant::ConfirmationsFile,
    Plant::ConfirmationsFifo,
    Plant::PendingSlotLinks,
    Plant::PendingSlotDir,
    Plant::ShippedFifo,
    Plant::ShippedForeignName,
    Plant::RecordDevice,
];

/// Two sink-only producers that exited (dead siblings with consented
/// packs): their rank directories, the key directory, and every id.
fn two_dead_owners(root: &Path) -> (PathBuf, Vec<PathBuf>, Vec<String>) {
    let mut ids = Vec::new();
    for n in [3, 4] {
        let out = output(
            spool()
                .args(["produce", "--packs", &n.to_string(), "--spool-root"])
                .arg(root),
        );
        assert!(out.status.success(), "{}", describe(&out));
        ids.extend(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string),
        );
    }
    let key = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && !p.ends_with(".store"))
        .unwrap();
    // (the producers' confirmation slots are under `<key>/_shipped`)
    let mut owners: Vec<PathBuf> = std::fs::read_dir(&key)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n != "_shipped") && !spool_tests::is_reserve(p))
        .collect();
    owners.sort();
    assert_eq!(owners.len(), 2, "{owners:?}");
    assert!(owners.iter().all(|o| o.join("_refs").is_dir()));
    (key, owners, ids)
}

/// Runs `cmd`, which must return within `bound`.
fn bounded(case: Plant, what: &str, cmd: &mut std::process::Command) -> std::process::Output {
    let t = Instant::now();
    let out = output(cmd.stdin(std::process::Stdio::null()));
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "{case:?}: {what} took {took:?}\n{}",
        describe(&out)
    );
    out
}

fn run_once(case: Plant, root: &Path) -> std::process::Output {
    bounded(
        case,
        "run --once",
        spool()
            .args(["run", "--once", "--timeout", "30", "--spool-root"])
            .arg(root),
    )
}

/// One case: the plant, then a run that ships everything, sets aside the
/// planted owner (if the entry is in it) once, and touches nothing outside
/// the root; `status` and `lock owner` answer at once.
fn case(plant: Plant) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("spool");
    let (key, owners, ids) = two_dead_owners(&root);
    let planted = &owners[0];
    // the victim holds files named like the refs and their slots
    let ref_names: Vec<String> = std::fs::read_dir(planted.join("_refs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .flat_map(|n| [format!("{n}.pending"), n])
        .collect();
    let victim = Victim::new(tmp.path(), &ref_names);
    plant.plant(&key, planted, &victim);

    let out = run_once(plant, &root);
    victim.check(&format!("{plant:?}: run --once"));
    let indexed = indexed_ids(&root);
    for id in &ids {
        assert!(
            indexed.contains(id),
            "{plant:?}: {id} not shipped\n{}",
            describe(&out)
        );
    }
    if plant.in_owner() {
        // set aside once, with why; exit 1 says a person must act
        assert_eq!(out.status.code(), Some(1), "{plant:?}\n{}", describe(&out));
        let owner = output(spool().args(["lock", "owner"]).arg(planted));
        let text = String::from_utf8_lossy(&owner.stdout);
        assert!(
            text.contains("blocked:") && text.contains("_refs"),
            "{plant:?}: lock owner says {text}"
        );
        // status says so too, with the same reason
        let status = output(spool().args(["status", "--json"]).arg(&root));
        let v: serde_json::Value = serde_json::from_slice(&status.stdout)
            .unwrap_or_else(|e| panic!("{plant:?}: {e}\n{}", describe(&status)));
        let row = v["rank_dirs"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["path"] == planted.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{plant:?}: no row for {planted:?}: {v}"));
        assert_eq!(row["state"], "blocked", "{plant:?}: {row}");
        assert!(
            row["reason"].as_str().is_some_and(|r| r.contains("_refs")),
            "{plant:?}: {row}"
        );
        // a second run does not take it up again
        let again = run_once(plant, &root);
        assert_eq!(
            again.status.code(),
            Some(1),
            "{plant:?}\n{}",
            describe(&again)
        );
        let log = String::from_utf8_lossy(&again.stderr);
        assert!(
            !log.contains(&format!("adopting dead sibling {}", planted.display())),
            "{plant:?}: a blocked sibling was taken up again\n{log}"
        );
    } else {
        assert!(out.status.success(), "{plant:?}\n{}", describe(&out));
        assert!(
            !owners[0].exists() && !owners[1].exists(),
            "{plant:?}: both drained"
        );
    }
    victim.check(&format!("{plant:?}: second run"));
    // operators' reads answer at once whatever is planted
    let status = bounded(
        plant,
        "status",
        spool().args(["status", "--json"]).arg(&root),
    );
    assert!(
        matches!(status.status.code(), Some(0 | 1)),
        "{plant:?}\n{}",
        describe(&status)
    );
    if planted.exists() {
        bounded(
            plant,
            "lock owner",
            spool().args(["lock", "owner"]).arg(planted),
        );
    }
    victim.check(&format!("{plant:?}: status"));
}

#[test]
fn every_plant_in_a_dead_owners_refs_sets_it_aside_once_and_the_rest_ships() {
    for plant in ALL.into_iter().filter(|p| p.in_owner()) {
        case(plant);
    }
}

#[test]
fn every_plant_under_the_keys_shipped_touches_nothing_outside_and_stalls_nothing() {
    for plant in ALL.into_iter().filter(|p| !p.in_owner()) {
        case(plant);
    }
}

/// Liveness bounds (nextest's serial group).
mod serial {
    use super::*;
    use spool_tests::{ready_under, KillOnDrop};
    use std::process::Stdio;

    /// A running daemon meets a FIFO where the shipper record belongs and
    /// a live owner whose `_refs` is a link out of the root: neither stalls
    /// it. A dead sibling's packs and another live owner's hand-off ship
    /// within seconds, and nothing outside the root changes.
    #[test]
    fn a_fifo_record_and_a_linked_refs_stall_no_sibling_and_no_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("spool");
        let hold = |packs: &str| {
            let mut c = KillOnDrop(
                spool()
                    .args(["produce", "--packs", packs, "--hold", "--spool-root"])
                    .arg(&root)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            let out = c.stdout.take().unwrap();
            let n: usize = packs.parse().unwrap();
            let ids: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(out))
                .take(n)
                .map(Result::unwrap)
                .collect();
            (c, ids)
        };
        // the planted live owner, then the healthy one
        let (_bad, _) = hold("2");
        let (key, owners, mut ids) = {
            let out = output(
                spool()
                    .args(["produce", "--packs", "3", "--spool-root"])
                    .arg(&root),
            );
            assert!(out.status.success(), "{}", describe(&out));
            let key = std::fs::read_dir(&root)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.is_dir() && !p.ends_with(".store"))
                .unwrap();
            let owners: Vec<PathBuf> = std::fs::read_dir(&key)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("_refs").is_dir())
                .collect();
            let ids: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            (key, owners, ids)
        };
        // the live planted owner: the one whose lock is held
        let planted = owners
            .iter()
            .find(|o| {
                spool_core::siblings::probe(o)
                    .is_ok_and(|p| p.owner() == spool_core::siblings::Owner::Live)
            })
            .unwrap()
            .clone();
        let victim = Victim::new(tmp.path(), &[]);
        std::fs::remove_dir_all(planted.join("_refs")).unwrap();
        std::os::unix::fs::symlink(&victim.dir, planted.join("_refs")).unwrap();
        std::fs::create_dir_all(key.join("_shipped")).unwrap();
        let record = key.join("_shipped").join(".shipper");
        let _ = std::fs::remove_file(&record);
        nix::unistd::mkfifo(&record, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (_good, good_ids) = hold("3");
        ids.extend(good_ids);
        let _daemon = KillOnDrop(
            spool()
                .args(["run", "--poll-interval", "60", "--recheck-interval", "1"])
                .arg("--spool-root")
                .arg(&root)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let t = Instant::now();
        loop {
            let left: Vec<PathBuf> = ready_under(&root)
                .into_iter()
                .filter(|p| !p.starts_with(&planted))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "not shipped within 10 s beside the plants: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // every id of the dead sibling and the healthy owner is indexed
        let indexed = spool_tests::indexed_ids(&root);
        for id in &ids {
            assert!(indexed.contains(id), "{id} not indexed");
        }
        victim.check("a running daemon beside a FIFO record and a linked _refs");
    }
}

/// Plants in the layout itself, above the hand-off: the catalog key
/// directory `<root>/<key>` (a link out of the root, a regular file, a
/// FIFO) and a rank directory or a `w<k>/` subdirectory replaced by a link.
/// Nothing outside the root is created, written or removed; no command
/// hangs; a plant spool cannot work through is refused naming the path.
mod layout_plants {
    use super::*;

    /// What is planted at `<root>/<key>`.
    #[derive(Clone, Copy, Debug)]
    enum KeyPlant {
        Link,
        File,
        Fifo,
    }

    /// A root whose key directory exists (one spooled pack, then drained
    /// by a run) and its key's name.
    fn root_with_key(tmp: &Path) -> (PathBuf, String) {
        let root = tmp.join("spool");
        let out = output(
            spool()
                .args(["produce", "--packs", "1", "--spool-root"])
                .arg(&root),
        );
        assert!(out.status.success(), "{}", describe(&out));
        let key = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .find(|e| e.file_type().unwrap().is_dir() && e.file_name() != ".store")
            .unwrap()
            .file_name()
            .to_string_lossy()
            .into_owned();
        (root, key)
    }

    fn timed(what: &str, cmd: &mut std::process::Command) -> std::process::Output {
        let t = Instant::now();
        let out = output(cmd.stdin(std::process::Stdio::null()));
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what} took {:?}\n{}",
            t.elapsed(),
            describe(&out)
        );
        out
    }

    #[test]
    fn a_key_directory_that_is_a_link_a_file_or_a_fifo_is_refused_and_nothing_outside_changes() {
        for plant in [KeyPlant::Link, KeyPlant::File, KeyPlant::Fifo] {
            let tmp = tempfile::tempdir().unwrap();
            let (root, key) = root_with_key(tmp.path());
            let victim = Victim::new(tmp.path(), &[".owner.lock".to_string()]);
            let key_dir = root.join(&key);
            std::fs::remove_dir_all(&key_dir).unwrap();
            match plant {
                KeyPlant::Link => std::os::unix::fs::symlink(&victim.dir, &key_dir).unwrap(),
                KeyPlant::File => std::fs::write(&key_dir, b"not a directory").unwrap(),
                KeyPlant::Fifo => {
                    nix::unistd::mkfifo(&key_dir, nix::sys::stat::Mode::from_bits_truncate(0o600))
                        .unwrap()
                }
            }
            let found = match plant {
                KeyPlant::Link => "a symlink",
                KeyPlant::File => "a regular file",
                KeyPlant::Fifo => "a FIFO",
            };
            for (what, args) in [
                ("produce", vec!["produce", "--packs", "1"]),
                ("run --once", vec!["run", "--once", "--timeout", "30"]),
            ] {
                let out = timed(
                    &format!("{plant:?}: {what}"),
                    spool().args(&args).arg("--spool-root").arg(&root),
                );
                victim.check(&format!("{plant:?}: {what}"));
                assert!(
                    !out.status.success(),
                    "{plant:?}: {what}\n{}",
                    describe(&out)
                );
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(
                    err.contains(&key_dir.display().to_string())
                        && err.contains(found)
                        && err.contains("remove or move it"),
                    "{plant:?}: {what} does not name {} as {found} and what to do\n{}",
                    key_dir.display(),
                    describe(&out)
                );
            }
            let status = timed(
                &format!("{plant:?}: status"),
                spool().args(["status", "--json"]).arg(&root),
            );
            assert!(
                matches!(status.status.code(), Some(0 | 1)),
                "{plant:?}\n{}",
                describe(&status)
            );
            victim.check(&format!("{plant:?}: status"));
        }
    }
    /// A link named like a rank directory under the key, and a dead
    /// owner's `w1/` a link, both to a victim holding files named like
    /// packs: `run --once` ships every pack of the real siblings within a
    /// bound, sets the dead owner holding the link aside (exit 1, its
    /// packs shipped first), and never lists, sweeps, quarantines or
    /// removes anything in the victim.
    #[test]
    fn a_rank_directory_or_worker_directory_that_is_a_link_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("spool");
        let (key, owners, ids) = two_dead_owners(&root);
        let packs: Vec<String> = (0..3)
            .map(|i| format!("{:032x}.ready", 0xabc0 + i))
            .chain([format!(".{:032x}.0000abcd.open", 0xabcf)])
            .collect();
        let victim = Victim::new(tmp.path(), &packs);
        std::os::unix::fs::symlink(&victim.dir, key.join("r9-0badf00d")).unwrap();
        std::os::unix::fs::symlink(&victim.dir, owners[0].join("w1")).unwrap();
        let out = timed(
            "run --once",
            spool()
                .args(["run", "--once", "--timeout", "30", "--spool-root"])
                .arg(&root),
        );
        victim.check("run --once beside a linked rank and worker directory");
        let indexed = indexed_ids(&root);
        for id in &ids {
            assert!(indexed.contains(id), "{id} not shipped\n{}", describe(&out));
        }
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        let owner = output(spool().args(["lock", "owner"]).arg(&owners[0]));
        let text = String::from_utf8_lossy(&owner.stdout);
        assert!(
            text.contains("blocked:") && text.contains("w1"),
            "lock owner says {text}"
        );
        let status = timed("status", spool().args(["status", "--json"]).arg(&root));
        assert!(
            matches!(status.status.code(), Some(0 | 1)),
            "{}",
            describe(&status)
        );
        victim.check("status beside a linked rank and worker directory");
        assert!(key
            .join("r9-0badf00d")
            .symlink_metadata()
            .unwrap()
            .is_symlink());
    }
}
