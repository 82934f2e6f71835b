//! The windows in which another process may change a directory under a
//! take (a directory that vanishes, is replaced by a file or a symlink, or
//! is made by someone else meanwhile), what `/proc/locks` may leave unsaid
//! (a blocked waiter, a holder it does not list), and what a take meets on
//! paths it cannot read. Each window is opened with a lock hook
//! (`testing::set_lock_hook`) at the exact point, so every case is
//! deterministic.
#![forbid(unsafe_code)]

use spool_lock::{
    acquire, create_parents, read_owner, testing, try_adopt, Access, Error, HookPoint, LockOptions,
    LOCK_FILE_NAME,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts() -> LockOptions {
    LockOptions::default()
}

/// Runs `f` once, at the first pass through `at` under `prefix`.
fn hook_once(prefix: &Path, at: HookPoint, f: impl Fn(&Path) + Send + Sync + 'static) {
    let done = AtomicBool::new(false);
    testing::set_lock_hook(
        prefix,
        Arc::new(move |point, path: &Path| {
            if point == at && !done.swap(true, Ordering::SeqCst) {
                f(path);
            }
        }),
    );
}

/// Waits (≤ 5 s) until `/proc/locks` shows a blocked waiter (`->`) on
/// the inode of `path` (other processes' waiters, such as a build waiting
/// for a lock, are on other inodes).
/// Asserts that `result` is an [`Error::Io`] of `op` on `path` with `errno`;
/// `what` names the case in the panic otherwise.
fn assert_io_error<T: std::fmt::Debug>(
    result: Result<T, Error>,
    op: &str,
    path: &Path,
    errno: i32,
    what: &str,
) {
    assert_io_error_where(result, op, |p| p == path, errno, what);
}

/// [`assert_io_error`] on a path that is a staging copy (`….creating`).
fn assert_staging_io_error<T: std::fmt::Debug>(
    result: Result<T, Error>,
    op: &str,
    errno: i32,
    what: &str,
) {
    let is_staging = |p: &Path| p.to_string_lossy().ends_with(".creating");
    assert_io_error_where(result, op, is_staging, errno, what);
}

fn assert_io_error_where<T: std::fmt::Debug>(
    result: Result<T, Error>,
    op: &str,
    path_is: impl Fn(&Path) -> bool,
    errno: i32,
    what: &str,
) {
    match result {
        Err(Error::Io {
            op: got_op,
            path,
            source,
        }) => {
            assert_eq!(got_op, op, "{what}");
            assert!(path_is(&path), "{what}: {}", path.display());
            assert_eq!(source.raw_os_error(), Some(errno), "{what}: {source}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// The names in `dir`, in the order `read_dir` gives them.
fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect()
}

fn wait_for_a_waiter(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let inode = format!(":{} ", std::fs::metadata(path).unwrap().ino());
    let until = Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains("->") && l.contains(&inode))
    {
        assert!(Instant::now() < until, "no blocked waiter in /proc/locks");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_directory_that_vanishes_before_its_lock_file_opens_is_created_afresh() {
    // The take saw the directory, then (before the lock file's open) a
    // remover took it away: the take starts over and creates it, rather
    // than failing on the missing lock file's directory.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    hook_once(tmp.path(), HookPoint::OpeningLockFile, |lock: &Path| {
        std::fs::remove_dir(lock.parent().unwrap()).unwrap();
    });
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    let claim = taken.expect("the vanished directory is created afresh");
    assert!(read_owner(&dir).unwrap().held);
    claim.release().unwrap();
}

#[test]
fn a_directory_replaced_by_a_file_before_its_own_flock_is_refused() {
    // Between the lock file's flock and the directory's open, the
    // directory is renamed away and a regular file put in its place: the
    // take must not flock that file and call it the directory.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let moved = tmp.path().join("spool.moved");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join(LOCK_FILE_NAME), b"").unwrap();
    let (d, m) = (dir.clone(), moved.clone());
    hook_once(tmp.path(), HookPoint::OpeningDirectory, move |_| {
        std::fs::rename(&d, &m).unwrap();
        std::fs::write(&d, b"not a directory").unwrap();
    });
    let taken = try_adopt(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert_io_error(
        taken,
        "open directory",
        &dir,
        libc::ENOTDIR,
        "a file in the directory's place",
    );
    assert_eq!(std::fs::read(&dir).unwrap(), b"not a directory");
    assert!(!read_owner(&moved).unwrap().held, "nothing left held");
}

#[test]
fn a_file_made_in_place_of_a_missing_parent_is_an_error_naming_it() {
    // Someone else made a *file* where create_parents was about to make a
    // directory: that is no parent (only a directory made meanwhile is
    // theirs and fine), and what this call made is removed again.
    let tmp = tempfile::tempdir().unwrap();
    let outer = tmp.path().join("a");
    let inner = outer.join("b");
    let i = inner.clone();
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, path: &Path| {
            if point == HookPoint::CreatingDirectory && path == i {
                std::fs::write(path, b"a file").unwrap();
            }
        }),
    );
    let made = create_parents(&inner, &Access::default());
    testing::clear_lock_hook(tmp.path());
    match made {
        Err(Error::Io { op, path, .. }) => {
            assert_eq!((op, path.as_path()), ("create", inner.as_path()));
        }
        other => panic!("a file where a parent should be: {other:?}"),
    }
    // `a` held only the planted file, so it stays (remove_dir refuses);
    // with the file gone the parent made by this call would be empty.
    assert!(std::fs::metadata(&inner).unwrap().is_file());

    // A directory made meanwhile by someone else: accepted, not claimed.
    let tmp = tempfile::tempdir().unwrap();
    let inner = tmp.path().join("a").join("b");
    let i = inner.clone();
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, path: &Path| {
            if point == HookPoint::CreatingDirectory && path == i {
                std::fs::create_dir(path).unwrap();
            }
        }),
    );
    let made = create_parents(&inner, &Access::default());
    testing::clear_lock_hook(tmp.path());
    assert_eq!(made.unwrap(), vec![tmp.path().join("a")]);
    assert!(inner.is_dir());
}

#[test]
fn a_new_directory_swapped_for_a_symlink_is_refused_and_its_target_left_alone() {
    // Between the mkdir and the open that sets its mode, the new directory
    // is replaced by a symlink to a directory elsewhere: the mode must not
    // be applied through the symlink to that directory.
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
    let new = tmp.path().join("new");
    let target = elsewhere.clone();
    hook_once(tmp.path(), HookPoint::DirectoryMade, move |p: &Path| {
        std::fs::remove_dir(p).unwrap();
        std::os::unix::fs::symlink(&target, p).unwrap();
    });
    let made = Access::default().create_dir(&new);
    testing::clear_lock_hook(tmp.path());
    let err = made.expect_err("a symlink in the new directory's place");
    // O_DIRECTORY | O_NOFOLLOW on a symlink: ENOTDIR (or ELOOP).
    assert!(
        matches!(err.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
        "{err}"
    );
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "the symlink's target keeps its mode");
}

#[test]
fn the_nesting_walk_skips_a_subdirectory_it_cannot_read() {
    // A subdirectory whose path is longer than PATH_MAX: listed by its
    // parent, but its own listing fails (ENAMETOOLONG), as an unreadable
    // one would for a user other than root. Nothing held can be seen
    // there, so the take goes on; only the directory taken failing to list
    // is an error.
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = tmp.path().to_path_buf();
    while dir.as_os_str().len() < 3900 {
        dir = dir.join("d".repeat(200));
    }
    std::fs::create_dir_all(&dir).unwrap();
    let name = "e".repeat(250);
    let made = std::process::Command::new("mkdir")
        .arg(&name)
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    let err = std::fs::read_dir(dir.join(&name)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
    let claim = acquire(&dir, &opts()).expect("an unreadable subdirectory holds nothing");
    claim.release().unwrap();
}

#[test]
fn a_nested_spool_removed_while_the_nesting_walk_reads_it_holds_nothing() {
    // The walk under the directory taken found `sub/.lock` (an old spool,
    // nobody holds it); before it reads whether it is held, a remover takes
    // `sub` away. Gone is not held: the take goes on.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join(LOCK_FILE_NAME), b"").unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    hook_once(&sub, HookPoint::CheckingNestedSpool, move |path: &Path| {
        s.fetch_add(1, Ordering::SeqCst);
        std::fs::remove_dir_all(path).unwrap();
    });
    let claim = acquire(&dir, &opts()).expect("a vanished spool holds nothing");
    testing::clear_lock_hook(&sub);
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the walk never reached it");
    assert!(!sub.exists());
    claim.release().unwrap();
}

#[test]
fn a_blocked_waiter_is_not_read_as_an_exclusive_holder() {
    // A reader holds a shared flock on the lock file and another process
    // waits (blocked) for an exclusive one: `/proc/locks` lists the waiter
    // as `-> FLOCK ... WRITE`. That is no holder: the take sees only the
    // reader's shared lock, waits out the probe limit and names the reader.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let reader = FlockChild::shared(&lock_path);
    let waiter = FlockChild::waiting(&lock_path);
    wait_for_a_waiter(&lock_path);
    let taken = acquire(&dir, &opts());
    drop(waiter);
    match taken {
        Err(Error::HeldShared { dir: d, pids, .. }) => {
            assert_eq!((d, pids), (dir, vec![reader.0.id()]));
        }
        other => panic!("a shared holder and a blocked waiter: {other:?}"),
    }
}

#[test]
fn when_proc_locks_names_no_holder_a_take_retries_twenty_times_then_refuses() {
    // /proc/locks silent about the holder (as for one in another pid
    // namespace): the take cannot tell a probe from an owner, retries the
    // flock TAKE_RETRIES = 20 times (1 + 20 attempts), then refuses.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let holder = std::fs::File::open(&lock_path).unwrap();
    holder.lock().unwrap();
    let refused = Arc::new(AtomicUsize::new(0));
    let (count, lp) = (refused.clone(), lock_path.clone());
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, path: &Path| {
            if point == HookPoint::FlockRefused && path == lp {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }),
    );
    testing::set_proc_locks_hidden(tmp.path(), true);
    let taken = acquire(&dir, &opts());
    testing::set_proc_locks_hidden(tmp.path(), false);
    testing::clear_lock_hook(tmp.path());
    drop(holder);
    assert!(taken.is_err(), "{taken:?}");
    assert_eq!(refused.load(Ordering::SeqCst), 21, "1 attempt + 20 retries");
}

#[test]
fn a_symlinked_lock_file_is_named_by_read_owner_not_read_as_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.join(LOCK_FILE_NAME)).unwrap();
    match read_owner(&dir) {
        Err(Error::LockFileNotRegular { kind, .. }) => assert_eq!(kind, "a symlink"),
        other => panic!("a symlinked lock file: {other:?}"),
    }
}

/// A child, killed on drop: a `flock(1)` one (util-linux; `-F`: the lock
/// is the child's own, under its pid), or another program.
struct FlockChild(std::process::Child);

impl FlockChild {
    /// Holds a shared flock on `path` (returns once it is held).
    fn shared(path: &Path) -> FlockChild {
        use std::io::BufRead;
        let mut child = std::process::Command::new("flock")
            .args(["-F", "-s", "-n"])
            .arg(path)
            .args(["sh", "-c", "echo locked; exec sleep 60"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("flock(1) from util-linux");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        FlockChild(child)
    }

    /// Waits (blocked) for an exclusive flock on `path`.
    fn waiting(path: &Path) -> FlockChild {
        let child = std::process::Command::new("flock")
            .arg("-F")
            .arg(path)
            .args(["sleep", "60"])
            .spawn()
            .expect("flock(1) from util-linux");
        FlockChild(child)
    }
}

impl Drop for FlockChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn shared_readers_are_reported_only_when_nothing_holds_the_lock() {
    // Another process holds a shared flock on the lock file.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let reader = FlockChild::shared(&lock_path);
    let status = read_owner(&dir).unwrap();
    assert!(!status.held);
    assert_eq!(status.shared_by, vec![reader.0.id()]);
    // The directory's own lock held (the lock file replaced behind its
    // owner): held, so no shared reader is reported.
    let dir_lock = std::fs::File::open(&dir).unwrap();
    dir_lock.lock().unwrap();
    let status = read_owner(&dir).unwrap();
    drop(dir_lock);
    assert!(status.held && status.lock_file_replaced, "{status:?}");
    assert!(status.shared_by.is_empty(), "{status:?}");
}

/// `base/spool` with an empty lock file in it: (the directory, its lock
/// file).
fn spool_with_empty_lock_file(base: &Path) -> (PathBuf, PathBuf) {
    let dir = base.join("spool");
    std::fs::create_dir(&dir).unwrap();
    let lock_path = dir.join(LOCK_FILE_NAME);
    std::fs::write(&lock_path, b"").unwrap();
    (dir, lock_path)
}

/// A take of a spool whose (empty) lock file is renamed away between the
/// take's open and its flock, with an empty file put in its place when
/// `replace`: the take must succeed (`expect` says why), hold the lock
/// file at the path (written, not replaced) and never write the moved one.
/// Returns the owner status read while it held the lock.
fn take_with_the_lock_file_moved_away(replace: bool, expect: &str) -> spool_lock::OwnerStatus {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let moved = tmp.path().join("moved.lock");
    let m = moved.clone();
    hook_once(tmp.path(), HookPoint::LockFileOpened, move |lock: &Path| {
        std::fs::rename(lock, &m).unwrap();
        if replace {
            std::fs::write(lock, b"").unwrap();
        }
    });
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    let claim = taken.expect(expect);
    let status = read_owner(&dir).unwrap();
    assert!(status.held && !status.lock_file_replaced, "{status:?}");
    assert!(std::fs::metadata(&lock_path).unwrap().len() > 0);
    assert_eq!(
        std::fs::read(&moved).unwrap(),
        b"",
        "the moved file was not written"
    );
    claim.release().unwrap();
    status
}

#[test]
fn a_lock_file_moved_away_and_replaced_between_open_and_flock_is_opened_again() {
    // Between the take's open and its flock, the lock file is renamed
    // elsewhere (still linked, so its link count stays 1) and a new one
    // put at the path. The take's flock lands on the moved file: same
    // device, another inode. It must open the new file and lock that,
    // not keep a lock nobody finds at `.owner.lock`.
    let status = take_with_the_lock_file_moved_away(true, "the replaced lock file is opened again");
    assert_eq!(status.holder().pid, Some(std::process::id()));
}

#[test]
fn a_device_in_place_of_the_lock_file_is_refused_naming_a_device() {
    // A character device (1:3, as /dev/null) at `.owner.lock`: it opens
    // and flocks, but it is no lock file, and the refusal says what it is.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let lock_path = dir.join(LOCK_FILE_NAME);
    let made = nix::sys::stat::mknod(
        &lock_path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    );
    let needs = "CAP_MKNOD (root), to make a device lock file";
    if !spool_lock::testing::required(made != Err(nix::errno::Errno::EPERM), needs) {
        return;
    }
    made.unwrap();
    for taken in [acquire(&dir, &opts()), try_adopt(&dir, &opts())] {
        match taken {
            Err(Error::LockFileNotRegular {
                kind, lock_path: p, ..
            }) => {
                assert_eq!((kind, p.as_path()), ("a device", lock_path.as_path()));
            }
            other => panic!("a device as lock file: {other:?}"),
        }
    }
}

#[test]
fn a_directory_turned_into_a_symlink_loop_is_an_error_not_a_vanished_directory() {
    // Before the lock file's open, the directory is replaced by a symlink
    // to itself: the open fails with ELOOP. Only a directory that is gone
    // (ENOENT, nothing at the path) reads as vanished; this is an error
    // naming the lock file, not "adopt: not found".
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    hook_once(tmp.path(), HookPoint::OpeningLockFile, |lock: &Path| {
        let d = lock.parent().unwrap();
        std::fs::remove_file(lock).unwrap();
        std::fs::remove_dir(d).unwrap();
        std::os::unix::fs::symlink(d, d).unwrap();
    });
    let taken = try_adopt(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert_io_error(
        taken,
        "open",
        &lock_path,
        libc::ELOOP,
        "a directory turned into a symlink loop",
    );
}

#[test]
fn a_directory_swapped_for_a_link_to_a_victim_before_its_take_is_refused_and_the_victim_untouched()
{
    // An adopter listed a dead sibling (a real directory), and before its
    // take the directory is moved away and a link to a victim put at its
    // name: the take opens the directory without following the link and
    // is refused (ELOOP, naming the lock file); nothing is created in or
    // written to the victim.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let v = victim.clone();
    // what the victim held once a lock file was open (never anything: the
    // take must not create its lock file there, even for a moment)
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let swapped = AtomicBool::new(false);
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, path: &Path| match point {
            HookPoint::OpeningLockFile if !swapped.swap(true, Ordering::SeqCst) => {
                let d = path.parent().unwrap();
                std::fs::rename(d, d.with_file_name("moved")).unwrap();
                std::os::unix::fs::symlink(&v, d).unwrap();
            }
            HookPoint::LockFileOpened => {
                let entries = std::fs::read_dir(&v).unwrap().count();
                s.lock().unwrap().push(entries);
            }
            _ => {}
        }),
    );
    let taken = try_adopt(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert!(taken.is_err(), "took a directory through a link: {taken:?}");
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "the victim is untouched"
    );
    assert!(
        seen.lock().unwrap().iter().all(|&n| n == 0),
        "a lock file was made in the victim before the take was refused: {:?}",
        seen.lock().unwrap()
    );
    let _ = lock_path;
}

/// Plants a directory at each of the first `count` staging names a
/// create-locked take under `base` picks, as another take that drew the
/// same random name would; returns the names planted.
fn plant_staging_names(base: &Path, count: usize) -> Arc<std::sync::Mutex<Vec<PathBuf>>> {
    let planted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let p = planted.clone();
    testing::set_lock_hook(
        base,
        Arc::new(move |point, path: &Path| {
            let staging = path.to_string_lossy().ends_with(".creating");
            let mut p = p.lock().unwrap();
            if point == HookPoint::CreatingDirectory && staging && p.len() < count {
                std::fs::create_dir(path).unwrap();
                p.push(path.to_path_buf());
            }
        }),
    );
    planted
}

#[test]
fn a_staging_name_taken_meanwhile_is_skipped_for_another_eight_times_at_most() {
    // The staging copy's random name already exists (another take drew
    // it): the take draws another, and leaves the other one's alone.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let planted = plant_staging_names(tmp.path(), 1);
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    let claim = taken.expect("another staging name is drawn");
    let planted = planted.lock().unwrap().clone();
    assert_eq!(planted.len(), 1);
    assert!(
        planted[0].is_dir(),
        "the other take's staging copy is left alone"
    );
    assert!(read_owner(&dir).unwrap().held);
    claim.release().unwrap();

    // Every one of the 8 names drawn taken: a refusal naming the parent.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let planted = plant_staging_names(tmp.path(), usize::MAX);
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    match taken {
        Err(Error::Io { op, path, source }) => {
            assert_eq!(
                (op, path.as_path()),
                ("create staging directory in", tmp.path())
            );
            assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists);
        }
        other => panic!("every staging name taken: {other:?}"),
    }
    assert_eq!(planted.lock().unwrap().len(), 8);
    assert!(!dir.exists());
}

#[test]
fn a_staging_copy_replaced_by_a_file_before_its_own_open_is_refused_and_nothing_renamed_into_place()
{
    // Between the staging lock file's open and the staging directory's
    // own open, the staging copy is renamed away and a regular file put in
    // its place: the take must not lock that file as the directory and
    // rename it into place as the spool directory.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let moved = tmp.path().join("staging.moved");
    let m = moved.clone();
    hook_once(tmp.path(), HookPoint::LockFileOpened, move |lock: &Path| {
        let staging = lock.parent().unwrap();
        std::fs::rename(staging, &m).unwrap();
        std::fs::write(staging, b"not a directory").unwrap();
    });
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert_staging_io_error(
        taken,
        "open directory",
        libc::ENOTDIR,
        "a file in the staging copy's place",
    );
    assert!(!dir.exists(), "nothing renamed into place");
    assert!(!read_owner(&moved).unwrap().held, "nothing left held");
}

#[test]
fn create_parents_names_an_ancestor_it_cannot_stat_rather_than_making_it() {
    // `file/sub`, where `file` is a regular file: stat says ENOTDIR. That
    // is no missing directory to create, but an error naming the path.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let inner = file.join("sub");
    assert_io_error(
        create_parents(&inner, &Access::default()),
        "stat",
        &inner,
        libc::ENOTDIR,
        "a file as an ancestor",
    );
}

#[test]
fn a_lock_file_moved_away_between_open_and_flock_is_made_again() {
    // Between the take's open and its flock, the lock file is renamed
    // elsewhere and nothing put in its place (still linked, so its link
    // count stays 1; the path is empty): the take makes a new lock file
    // and locks that, rather than failing on the missing path.
    take_with_the_lock_file_moved_away(false, "the moved lock file is made again");
}

#[test]
fn a_lock_file_that_cannot_be_opened_for_writing_is_an_error_with_its_errno() {
    // A regular lock file whose read-write open fails for a reason other
    // than what it is (here ETXTBSY: it is a program being run): the
    // refusal is the open's error, not "not a regular file".
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let lock_path = dir.join(LOCK_FILE_NAME);
    std::fs::copy("/bin/sleep", &lock_path).unwrap();
    let running = FlockChild(
        std::process::Command::new(&lock_path)
            .arg("60")
            .spawn()
            .unwrap(),
    );
    let taken = try_adopt(&dir, &opts());
    drop(running);
    assert_io_error(
        taken,
        "open",
        &lock_path,
        libc::ETXTBSY,
        "a lock file being run",
    );
}

#[test]
fn a_release_closes_the_directory_before_the_lock_file() {
    // A probe between a release's two closes sees the lock held (on the
    // lock file), never "directory held, lock file free", which reads as
    // a lock file replaced behind its owner.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let claim = acquire(&dir, &opts()).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let (s, d) = (seen.clone(), dir.clone());
    hook_once(tmp.path(), HookPoint::ReleaseBetweenCloses, move |_| {
        let status = read_owner(&d).unwrap();
        *s.lock().unwrap() = Some((status.held, status.lock_file_replaced));
    });
    claim.release().unwrap();
    testing::clear_lock_hook(tmp.path());
    let seen = seen.lock().unwrap().take();
    assert_eq!(
        seen,
        Some((true, false)),
        "(held, lock file replaced) between the closes"
    );
    assert!(!read_owner(&dir).unwrap().held);
}

#[test]
fn a_directory_that_turns_into_a_symlink_loop_after_its_lock_files_flock_is_an_error() {
    // Between the lock file's open and its flock, the directory is renamed
    // away and a symlink to itself put in its place: the re-check after
    // the flock cannot stat the path (ELOOP). That is an error naming the
    // lock file, not "replaced, open it again" (which would then fail on
    // the open instead, or loop on a path that is no lock file).
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let moved = tmp.path().join("spool.moved");
    let (d, m) = (dir.clone(), moved.clone());
    hook_once(tmp.path(), HookPoint::LockFileOpened, move |_| {
        std::fs::rename(&d, &m).unwrap();
        std::os::unix::fs::symlink(&d, &d).unwrap();
    });
    let taken = try_adopt(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert_io_error(
        taken,
        "stat",
        &lock_path,
        libc::ELOOP,
        "a directory turned into a symlink loop after the flock",
    );
    assert!(!read_owner(&moved).unwrap().held, "nothing left held");
}

#[test]
fn a_take_of_a_symlink_loop_is_an_error_naming_it_and_creates_nothing() {
    // `spool` is a symlink to itself: stat fails with ELOOP. That is no
    // missing directory to create, but an error naming the path.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::os::unix::fs::symlink(&dir, &dir).unwrap();
    assert_io_error(
        acquire(&dir, &opts()),
        "stat",
        &dir,
        libc::ELOOP,
        "a take of a symlink loop",
    );
    let left = names_in(tmp.path());
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("spool")],
        "nothing made"
    );
}

#[test]
fn a_take_of_a_regular_file_is_refused_as_no_directory_and_leaves_it_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("spool");
    std::fs::write(&file, b"not a directory").unwrap();
    assert_io_error(
        acquire(&file, &opts()),
        "lock",
        &file,
        libc::ENOTDIR,
        "a take of a regular file",
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
}

#[test]
fn a_lock_file_planted_in_a_new_staging_copy_is_refused_and_its_target_left_alone() {
    // Between the staging copy's mkdir and the creation of its lock file,
    // someone plants a symlink named like the lock file, pointing at a
    // file outside: the lock file is created exclusively and without
    // following links, so the take fails and the outside file is never
    // opened, let alone written.
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::write(&outside, b"someone else's file").unwrap();
    let dir = tmp.path().join("spool");
    let target = outside.clone();
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, path: &Path| {
            if point == HookPoint::DirectoryMade && path.to_string_lossy().ends_with(".creating") {
                std::os::unix::fs::symlink(&target, path.join(LOCK_FILE_NAME)).unwrap();
            }
        }),
    );
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    match taken {
        Err(Error::Io { op, path, source }) => {
            assert_eq!(op, "create");
            assert!(path.ends_with(LOCK_FILE_NAME), "{}", path.display());
            assert_eq!(source.raw_os_error(), Some(libc::EEXIST), "{source}");
        }
        other => panic!("a planted lock file in the staging copy: {other:?}"),
    }
    assert_eq!(std::fs::read(&outside).unwrap(), b"someone else's file");
    assert!(!dir.exists(), "nothing renamed into place");
    let left = names_in(tmp.path());
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("outside")],
        "no staging copy left"
    );
}

#[test]
fn a_spool_name_too_long_for_its_staging_copy_is_an_error_naming_the_copy() {
    // A 250-byte name is a valid directory name, but its staging copy
    // `.<name>.<8 hex>.creating` is longer than NAME_MAX: the mkdir fails
    // with ENAMETOOLONG, which is said at once, not retried as a name
    // someone else took.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s".repeat(250));
    let tries = Arc::new(AtomicUsize::new(0));
    let t = Arc::clone(&tries);
    testing::set_lock_hook(
        tmp.path(),
        Arc::new(move |point, _path: &Path| {
            if point == HookPoint::CreatingDirectory {
                t.fetch_add(1, Ordering::SeqCst);
            }
        }),
    );
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(tmp.path());
    assert_staging_io_error(
        taken,
        "create staging directory",
        libc::ENAMETOOLONG,
        "a name too long for its staging copy",
    );
    assert_eq!(tries.load(Ordering::SeqCst), 1, "tried once");
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing made"
    );
}

#[test]
fn clear_blocked_that_cannot_stat_the_lock_file_says_so_rather_than_no_mark() {
    // A directory whose own path fits PATH_MAX but whose lock file's does
    // not: stat of the lock file fails (ENAMETOOLONG), as it would for a
    // directory of another user. That is an error naming the lock file,
    // not "not blocked, no lock file".
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = tmp.path().to_path_buf();
    // components of at most 200 bytes, until what is left for the last
    // one fits NAME_MAX
    while 4090 - dir.as_os_str().len() > 250 {
        let seg = (4090 - dir.as_os_str().len() - 201).min(200);
        dir = dir.join("d".repeat(seg));
    }
    std::fs::create_dir_all(&dir).unwrap();
    // the last component is made relative to its parent: its full path
    // is too long for create_dir_all's own walk
    let room = 4090 - dir.as_os_str().len();
    let name = "e".repeat(room);
    let made = std::process::Command::new("mkdir")
        .arg(&name)
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    dir = dir.join(name);
    assert_eq!(dir.as_os_str().len(), 4091);
    let lock_path = dir.join(LOCK_FILE_NAME);
    assert_io_error(
        spool_lock::clear_blocked(&dir, &opts()),
        "stat",
        &lock_path,
        libc::ENAMETOOLONG,
        "clear_blocked beside an unreadable lock file",
    );
}

#[test]
fn a_shared_reader_of_the_directory_refuses_a_take_naming_it_and_leaves_nothing() {
    // Another process holds a shared flock on the directory itself (not
    // on its lock file): the take is refused as held shared, naming the
    // directory and the reader, and the lock file it made is removed.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let reader = FlockChild::shared(&dir);
    match acquire(&dir, &opts()) {
        Err(Error::HeldShared {
            dir: d,
            lock_path,
            pids,
        }) => {
            assert_eq!(
                (d.as_path(), lock_path.as_path()),
                (dir.as_path(), dir.as_path())
            );
            assert_eq!(pids, vec![reader.0.id()]);
        }
        other => panic!("a take beside a shared reader of the directory: {other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no lock file left"
    );
}

#[test]
fn read_owner_of_a_fifo_lock_file_never_blocks() {
    // A FIFO named like the lock file, with no writer: a plain open for
    // reading would wait for one forever. The probe opens without
    // blocking and reports no record.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let fifo = dir.join(LOCK_FILE_NAME);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || {
        let _ = tx.send(read_owner(&d).map(|s| (s.held, s.record.is_none())));
    });
    let answer = rx.recv_timeout(Duration::from_secs(5));
    if answer.is_err() {
        // Let the stuck open go, then fail.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        panic!("read_owner blocked on a FIFO lock file for 5 s");
    }
    match answer.unwrap() {
        Ok((held, no_record)) => assert!(!held && no_record),
        Err(e) => panic!("read_owner of a FIFO lock file: {e}"),
    }
}

#[test]
fn a_taken_directory_moved_away_before_the_nesting_walk_lists_it_is_an_error_and_nothing_stays_held(
) {
    // The take published its lock; while the nesting check reads an old
    // spool above it (a stale lock file, nobody holds it), someone moves
    // the directory taken away. The walk below it cannot list the path:
    // an error naming it, not a take of a directory that is no longer
    // where it was asked for.
    let tmp = tempfile::tempdir().unwrap();
    let outer = tmp.path().join("outer");
    std::fs::create_dir(&outer).unwrap();
    std::fs::write(outer.join(LOCK_FILE_NAME), b"").unwrap();
    let dir = outer.join("spool");
    let moved = outer.join("spool.moved");
    let (d, m) = (dir.clone(), moved.clone());
    hook_once(&outer, HookPoint::CheckingNestedSpool, move |_| {
        std::fs::rename(&d, &m).unwrap();
    });
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(&outer);
    assert_io_error(
        taken,
        "list",
        &dir,
        libc::ENOENT,
        "a directory moved away before the nesting walk",
    );
    assert!(!read_owner(&moved).unwrap().held, "nothing left held");
}

#[test]
fn a_nested_spool_that_cannot_be_probed_is_an_error_naming_its_lock_file_not_read_as_unheld() {
    // The walk under the directory taken found `sub/.lock`; before it
    // reads whether it is held, `sub` is replaced by a regular file. Only
    // a vanished spool reads as unheld: this probe's ENOTDIR is an error.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join(LOCK_FILE_NAME), b"").unwrap();
    hook_once(&sub, HookPoint::CheckingNestedSpool, move |path: &Path| {
        std::fs::remove_dir_all(path).unwrap();
        std::fs::write(path, b"not a directory").unwrap();
    });
    let taken = acquire(&dir, &opts());
    testing::clear_lock_hook(&sub);
    assert_io_error(
        taken,
        "probe lock file",
        &sub.join(LOCK_FILE_NAME),
        libc::ENOTDIR,
        "a nested spool replaced by a file",
    );
    assert!(!read_owner(&dir).unwrap().held, "nothing left held");
}

#[test]
fn a_lock_file_removed_between_its_create_and_its_open_is_made_afresh() {
    // The exclusive create finds a stale lock file (EEXIST); before the
    // take opens it, a cleaner removes it. The open's ENOENT is no
    // error: the take goes round again and creates the lock file.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, lock_path) = spool_with_empty_lock_file(tmp.path());
    let removed = Arc::new(AtomicUsize::new(0));
    let r = removed.clone();
    hook_once(
        tmp.path(),
        HookPoint::OpeningExistingLockFile,
        move |lock: &Path| {
            std::fs::remove_file(lock).unwrap();
            r.fetch_add(1, Ordering::SeqCst);
        },
    );
    let claim = acquire(&dir, &opts()).expect("a lock file removed meanwhile is made again");
    testing::clear_lock_hook(tmp.path());
    assert_eq!(removed.load(Ordering::SeqCst), 1, "the hook never ran");
    assert!(lock_path.is_file());
    assert!(read_owner(&dir).unwrap().held);
    claim.release().unwrap();
}

#[test]
fn a_directory_replaced_by_a_file_between_read_owners_two_probes_is_an_error_naming_it() {
    // read_owner probed the lock file; before it probes the directory,
    // the directory is moved away and a regular file put in its place.
    // The directory probe opens only a directory: ENOTDIR, named.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _lock_path) = spool_with_empty_lock_file(tmp.path());
    let moved = tmp.path().join("moved");
    let m = moved.clone();
    hook_once(
        tmp.path(),
        HookPoint::ProbingDirectory,
        move |path: &Path| {
            std::fs::rename(path, &m).unwrap();
            std::fs::write(path, b"not a directory").unwrap();
        },
    );
    let read = read_owner(&dir);
    testing::clear_lock_hook(tmp.path());
    assert_io_error(
        read,
        "probe directory",
        &dir,
        libc::ENOTDIR,
        "a file in the directory's place at its probe",
    );
    assert_eq!(std::fs::read(&dir).unwrap(), b"not a directory");
}
