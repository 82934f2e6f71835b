//! Every primitive of `at` against planted entries: a symlink to a victim
//! directory outside the root, a FIFO, a device, a file where a directory
//! belongs, a directory where a file belongs, a name that is not UTF-8.
//! The victim is checked byte for byte after each.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use super::*;

/// A victim directory outside the root, with two files; its content (name
/// → bytes) to compare with later.
fn victim(tmp: &Path) -> (PathBuf, BTreeMap<String, Vec<u8>>) {
    let v = tmp.join("victim");
    std::fs::create_dir(&v).unwrap();
    std::fs::write(v.join("precious"), b"keep me").unwrap();
    std::fs::write(v.join(".shipper"), b"not yours").unwrap();
    (v.clone(), snapshot(&v))
}

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect()
}

/// `<tmp>/root/<key>` opened as a key directory.
fn key(tmp: &Path) -> AtDir {
    let k = tmp.join("root").join("0123456789ab");
    std::fs::create_dir_all(&k).unwrap();
    AtDir::open_layout(&k, 1).unwrap().unwrap()
}

fn is_unexpected(r: Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::UnexpectedEntry { .. }))
}

#[test]
fn a_symlinked_directory_is_never_entered_created_through_or_emptied() {
    let tmp = tempfile::tempdir().unwrap();
    let (v, before) = victim(tmp.path());
    let key = key(tmp.path());
    std::os::unix::fs::symlink(&v, key.join("_shipped")).unwrap();
    assert!(is_unexpected(key.open_dir("_shipped")));
    assert!(is_unexpected(key.create_dir("_shipped", &Access::PRIVATE)));
    assert!(is_unexpected(key.remove_dir("_shipped")));
    assert!(is_unexpected(key.remove_file("_shipped")));
    // a layout path through the link is refused as well
    assert!(is_unexpected(AtDir::open_layout(&key.join("_shipped"), 2)));
    assert_eq!(snapshot(&v), before);
    assert!(key
        .join("_shipped")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_symlinked_file_is_never_read_written_or_its_target_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let (v, before) = victim(tmp.path());
    let key = key(tmp.path());
    let link = key.join(".shipper");
    std::os::unix::fs::symlink(v.join(".shipper"), &link).unwrap();
    assert!(is_unexpected(key.read_small(".shipper", 256)));
    assert!(is_unexpected(key.create_file(".shipper", &Access::PRIVATE)));
    assert!(is_unexpected(key.remove_file(".shipper")));
    // replacing it swaps the link itself for a file, never writes its target
    key.replace_file(".shipper", b"mine\n", &Access::PRIVATE)
        .unwrap();
    assert_eq!(std::fs::read(&link).unwrap(), b"mine\n");
    assert!(link.symlink_metadata().unwrap().file_type().is_file());
    assert_eq!(snapshot(&v), before);
}

#[test]
fn a_fifo_or_a_device_is_an_error_at_once_never_a_blocked_read() {
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    nix::unistd::mkfifo(&key.join(".shipper"), Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", key.join("dev")).unwrap();
    let t = Instant::now();
    assert!(is_unexpected(key.read_small(".shipper", 256)));
    assert!(is_unexpected(key.create_file(".shipper", &Access::PRIVATE)));
    assert!(is_unexpected(key.remove_file(".shipper")));
    assert!(is_unexpected(key.open_dir(".shipper")));
    assert!(is_unexpected(key.read_small("dev", 256)));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // replacing it swaps the FIFO's entry for a file without opening it
    key.replace_file(".shipper", b"r0\n", &Access::PRIVATE)
        .unwrap();
    assert_eq!(key.read_small(".shipper", 256).unwrap().unwrap(), b"r0\n");
}

#[test]
fn a_character_device_is_refused_without_reading_it() {
    // mknod of a device needs root; the FIFO case covers the rest
    let root = nix::unistd::geteuid().is_root();
    if !spool_lock::testing::required(root, "root, to mknod a device") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    // /dev/zero's numbers: an endless read if it were ever read
    nix::sys::stat::mknod(
        &key.join("ref"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 5),
    )
    .unwrap();
    assert_eq!(key.kind("ref").unwrap(), Some(Kind::Device));
    assert!(is_unexpected(key.read_small("ref", 256)));
    assert!(is_unexpected(key.remove_file("ref")));
}

#[test]
fn a_file_where_a_directory_belongs_and_a_directory_where_a_file_belongs() {
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    std::fs::write(key.join("_shipped"), b"x").unwrap();
    std::fs::create_dir(key.join(".shipper")).unwrap();
    std::fs::write(key.join(".shipper").join("inside"), b"y").unwrap();
    assert!(is_unexpected(key.open_dir("_shipped")));
    assert!(is_unexpected(key.create_dir("_shipped", &Access::PRIVATE)));
    assert!(is_unexpected(key.remove_dir("_shipped")));
    assert!(is_unexpected(key.read_small(".shipper", 256)));
    assert!(is_unexpected(key.create_file(".shipper", &Access::PRIVATE)));
    assert!(is_unexpected(key.remove_file(".shipper")));
    assert!(is_unexpected(key.replace_file(
        ".shipper",
        b"x",
        &Access::PRIVATE
    )));
    assert_eq!(
        std::fs::read(key.join(".shipper").join("inside")).unwrap(),
        b"y"
    );
    assert_eq!(std::fs::read(key.join("_shipped")).unwrap(), b"x");
}

#[test]
fn a_name_that_is_not_utf8_is_listed_as_foreign_and_refused_by_utf8_names() {
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    let bad = OsStr::from_bytes(b"r\xff.ref");
    std::fs::write(key.path().join(bad), b"").unwrap();
    std::fs::write(key.join("good"), b"").unwrap();
    let names = key.names().unwrap();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&Name::Foreign(bad.to_os_string())));
    assert!(names.contains(&Name::Utf8("good".into())));
    assert!(is_unexpected(key.utf8_names()));
}

#[test]
fn an_oversized_file_is_refused_by_a_bounded_read() {
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    std::fs::write(key.join("big"), vec![b'x'; 4096]).unwrap();
    assert!(is_unexpected(key.read_small("big", 256)));
    assert_eq!(key.read_small("big", 4096).unwrap().unwrap().len(), 4096);
}

#[test]
fn what_it_creates_gets_the_spools_mode() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    let shared = Access::parse(Some("0770"), None).unwrap();
    let d = key.create_dir("_shipped", &shared).unwrap();
    assert!(d.create_file("a.ref", &shared).unwrap());
    assert!(
        !d.create_file("a.ref", &shared).unwrap(),
        "kept when it exists"
    );
    d.replace_file(".shipper", b"r0\n", &shared).unwrap();
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(key.join("_shipped")), 0o770);
    assert_eq!(mode(d.join("a.ref")), 0o660);
    assert_eq!(mode(d.join(".shipper")), 0o660);
    assert!(d.remove_file("a.ref").unwrap());
    assert!(!d.remove_file("a.ref").unwrap());
}

#[test]
fn a_killed_writer_s_temp_file_is_swept_by_the_next_replacement_and_nothing_else_is() {
    let tmp = tempfile::tempdir().unwrap();
    let key = key(tmp.path());
    let dir = tmp.path().join("root").join("0123456789ab");
    // what a writer killed between its temp file and the rename leaves
    std::fs::write(dir.join(".shipper.61c682a1.tmp"), b"half").unwrap();
    // not a temp of this name, or not a regular file: left alone
    std::fs::write(dir.join(".shipper.xyz.tmp"), b"other").unwrap();
    std::fs::write(dir.join(".shipperx.61c682a1.tmp"), b"other").unwrap();
    std::os::unix::fs::symlink(tmp.path(), dir.join(".shipper.0badcafe.tmp")).unwrap();
    key.replace_file(".shipper", b"r0\n", &Access::PRIVATE)
        .unwrap();
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            ".shipper",
            ".shipper.0badcafe.tmp",
            ".shipper.xyz.tmp",
            ".shipperx.61c682a1.tmp"
        ]
    );
    assert_eq!(std::fs::read(dir.join(".shipper")).unwrap(), b"r0\n");
}
