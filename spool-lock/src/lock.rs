//! Takes (create-locked, lock-in-place), the nesting check, the claim and
//! its release, `held_by_caller`. The design is the crate docs'.
//!
//! A take leaves nothing behind when it fails: missing parents are made by
//! [`create_parents`] (each new entry fsynced) and removed again while
//! empty; a refused take removes the directory and lock file it created;
//! and when the parent's fsync after a create-locked rename fails, the new
//! directory is removed while still locked, so no unlocked empty directory
//! is ever left to read as a dead sibling.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::error::not_regular;
use crate::fdinfo::held_by_this_process;
use crate::holders::{flock_holders, Holders};
use crate::names::{host_name, random_u32, LOCK_FILE_NAME, RESERVE_NAME};
use crate::node_local::check_node_local;
use crate::probe::{held_spool, holder_of, read_owner, read_record};
use crate::record::{OwnerRecord, Producer, Purpose};
use crate::seams::{self, HookPoint};
use crate::sys::RegFd;
use crate::{Access, Error, LockOptions};

/// How often a take retries a flock refused with `EWOULDBLOCK` when it
/// cannot tell who holds the lock (`/proc/locks` unreadable or silent):
/// a probe's momentary shared lock must not make a legitimate take fail.
const TAKE_RETRIES: u32 = 20;
/// Pause between those retries.
const TAKE_RETRY_PAUSE: Duration = Duration::from_millis(1);
/// How long a take keeps retrying while `/proc/locks` shows only shared
/// locks (probes) on the inode.
const PROBE_WAIT_LIMIT: Duration = Duration::from_secs(1);
/// How many times a take re-opens a lock file that was unlinked or replaced
/// between its open and its flock.
pub(crate) const REOPEN_LIMIT: u32 = 16;

/// Both descriptors of a held lock: the lock file's and the directory's.
#[derive(Debug)]
struct Held {
    file: RegFd,
    dir: RegFd,
}

impl Held {
    fn is_live(&self) -> bool {
        self.file.is_live() && self.dir.is_live()
    }

    /// Closes the directory first, then the file, so a probe in between
    /// never sees "directory held, file free" (which reads as replaced).
    fn close(self) {
        let Held { file, dir } = self;
        drop(dir);
        seams::run_hook_on_fd(HookPoint::ReleaseBetweenCloses, file.raw());
        drop(file);
    }
}

/// A lock just taken, before the nesting check decides whether to keep it.
struct Taken {
    dir: PathBuf,
    held: Held,
    created_dir: bool,
    created_file: bool,
    /// Who staged the directory's packs, as the record written says.
    producer: Option<Producer>,
}

/// What [`flock_retrying`] ended with.
enum Flocked {
    /// The exclusive lock is ours.
    Taken,
    /// An exclusive holder has it (or refusals outlasted the retries
    /// without `/proc/locks` naming anyone).
    Held,
    /// Only shared locks, and they outlasted the probe wait: the pids.
    HeldShared(Vec<u32>),
}

/// `flock(LOCK_EX|LOCK_NB)`, retried while what refuses it is a probe's
/// momentary shared lock. A shared lock that outlasts the probe wait is a
/// reader that does not let go ([`Flocked::HeldShared`]), never mistaken
/// for the owner the record names.
fn flock_retrying(fd: &RegFd, path: &Path) -> Result<Flocked, Error> {
    let start = std::time::Instant::now();
    let mut unknown = 0;
    loop {
        if fd
            .try_flock(libc::LOCK_EX)
            .map_err(|e| Error::io("flock", path, e))?
        {
            return Ok(Flocked::Taken);
        }
        seams::run_hook(HookPoint::FlockRefused, path);
        let st = fd.fstat().map_err(|e| Error::io("fstat", path, e))?;
        let holders = if seams::proc_locks_hidden(path) {
            Holders::Unknown
        } else {
            flock_holders(&st)
        };
        match holders {
            Holders::Exclusive => return Ok(Flocked::Held),
            Holders::SharedOnly(_) if start.elapsed() < PROBE_WAIT_LIMIT => {}
            Holders::SharedOnly(pids) => return Ok(Flocked::HeldShared(pids)),
            Holders::Unknown if unknown < TAKE_RETRIES => unknown += 1,
            Holders::Unknown => return Ok(Flocked::Held),
        }
        std::thread::sleep(TAKE_RETRY_PAUSE);
    }
}

/// This process's record, carrying `carried` (the producer an earlier
/// record named, for every purpose but a fresh claim's).
fn this_record(purpose: Purpose, carried: Option<Producer>) -> OwnerRecord {
    OwnerRecord {
        host: host_name(),
        pid: Some(std::process::id()),
        purpose,
        carried,
    }
}

/// This process as a producer.
fn this_producer() -> Producer {
    Producer {
        host: host_name(),
        pid: Some(std::process::id()),
    }
}

/// Is `fd` still the file at `path` (same dev/inode, not unlinked)?
fn still_at_path(fd: &RegFd, path: &Path) -> Result<bool, Error> {
    use std::os::unix::fs::MetadataExt;
    let st = fd.fstat().map_err(|e| Error::io("fstat", path, e))?;
    if st.st_nlink == 0 {
        return Ok(false);
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(m.dev() == st.st_dev && m.ino() == st.st_ino),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io("stat", path, e)),
    }
}

/// The refusal when this very process holds `dir` (a second take).
fn refusal_if_ours(dir: &Path) -> Option<Error> {
    held_by_this_process(dir)
        .unwrap_or(false)
        .then(|| Error::HeldByThisProcess {
            dir: dir.to_path_buf(),
            pid: std::process::id(),
            lock_path: dir.join(LOCK_FILE_NAME),
        })
}

/// The refusal for a lock file someone else holds.
fn refusal_file_held(dir: &Path) -> Error {
    if let Some(ours) = refusal_if_ours(dir) {
        return ours;
    }
    let record = read_owner(dir).ok().and_then(|s| s.record);
    Error::OwnedByOther {
        dir: dir.to_path_buf(),
        holder: holder_of(record.as_ref()),
        lock_path: dir.join(LOCK_FILE_NAME),
    }
}

/// The refusal for a directory whose own lock someone else holds while its
/// lock file is free.
fn refusal_dir_held(dir: &Path) -> Error {
    refusal_if_ours(dir).unwrap_or_else(|| Error::LockFileReplaced {
        dir: dir.to_path_buf(),
        lock_path: dir.join(LOCK_FILE_NAME),
    })
}

/// Locks an existing directory in place: flock its lock file (creating it
/// if missing), re-check it is still the file at the path, flock the
/// directory, write the record. `Ok(None)` when the directory vanished.
fn lock_in_place(dir: &Path, purpose: Purpose, access: &Access) -> Result<Option<Taken>, Error> {
    lock_in_place_as(dir, Some(purpose), access)
}

/// [`lock_in_place`], writing the owner record only when `purpose` is
/// given (`None` keeps the record there, for [`clear_blocked`], which must
/// read the old record under the lock before it decides what to write).
fn lock_in_place_as(
    dir: &Path,
    purpose: Option<Purpose>,
    access: &Access,
) -> Result<Option<Taken>, Error> {
    let lock_path = dir.join(LOCK_FILE_NAME);
    for _ in 0..REOPEN_LIMIT {
        seams::run_hook(HookPoint::OpeningLockFile, &lock_path);
        // The directory first, never through a link at its own name (a
        // rank directory swapped for one after a walk listed it): the lock
        // file is then opened, created and removed relative to it.
        let Some(at) = open_dir_nofollow(dir, &lock_path)? else {
            return Ok(None);
        };
        let forget_lock_file = || {
            let _ = nix::unistd::unlinkat(
                at.as_fd(),
                LOCK_FILE_NAME,
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        };
        let (file, created_file) = match open_lock_file_at(&at, dir, &lock_path, access)? {
            LockFileAt::Opened { file, created } => (file, created),
            LockFileAt::Gone => continue,
            LockFileAt::DirVanished => return Ok(None),
        };
        seams::run_hook(HookPoint::LockFileOpened, &lock_path);
        match flock_retrying(&file, &lock_path)? {
            Flocked::Taken => {}
            Flocked::Held => {
                drop(file);
                return Err(refusal_file_held(dir));
            }
            Flocked::HeldShared(pids) => {
                if created_file {
                    forget_lock_file();
                }
                drop(file);
                return Err(Error::HeldShared {
                    dir: dir.to_path_buf(),
                    lock_path,
                    pids,
                });
            }
        }
        // Re-check after lock: a remover may have unlinked (or replaced) the
        // file between our open and our flock; then we hold a lock nobody
        // else can see. Open and lock again.
        if !still_at_path(&file, &lock_path)? {
            tracing::debug!(dir = %dir.display(), "lock file of {} was replaced between open and flock; opening it again", dir.display());
            continue;
        }
        let dfd = match flock_dir_still_at(dir, &at) {
            Ok(Ok(dfd)) => dfd,
            refused => {
                // Leave nothing behind: the file we added goes (we still
                // hold it, and it is still the one at the path); the
                // refusal looks at what is left once we let go.
                if created_file {
                    forget_lock_file();
                }
                drop(file);
                return Err(match refused {
                    Err(e) => e,
                    Ok(Err(Flocked::HeldShared(pids))) => Error::HeldShared {
                        dir: dir.to_path_buf(),
                        lock_path: dir.to_path_buf(),
                        pids,
                    },
                    Ok(_) => refusal_dir_held(dir),
                });
            }
        };
        let producer = write_owner_record(&file, purpose, &lock_path)?;
        return Ok(Some(Taken {
            dir: dir.to_path_buf(),
            held: Held { file, dir: dfd },
            created_dir: false,
            created_file,
            producer,
        }));
    }
    Err(Error::LockFileUnstable {
        dir: dir.to_path_buf(),
        lock_path,
        attempts: REOPEN_LIMIT,
    })
}

/// Opens `dir` itself (`O_DIRECTORY | O_NOFOLLOW`): `Ok(None)` when it is
/// gone; a link at its name is refused as the link it is (`ELOOP`, as the
/// lock file's own `O_NOFOLLOW` would say; the kernel says `ENOTDIR`).
fn open_dir_nofollow(dir: &Path, lock_path: &Path) -> Result<Option<RegFd>, Error> {
    match RegFd::open(
        dir,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOTDIR)
                && std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) =>
        {
            Err(Error::io(
                "open",
                lock_path,
                io::Error::from_raw_os_error(libc::ELOOP),
            ))
        }
        Err(e) => Err(Error::io("open", lock_path, e)),
    }
}

/// What [`open_lock_file_at`] found.
enum LockFileAt {
    /// The lock file, made now (`created`) or found.
    Opened { file: RegFd, created: bool },
    /// It was there and is gone again: open once more.
    Gone,
    /// The directory was removed under its descriptor.
    DirVanished,
}

/// Opens the lock file in the directory open at `at`, creating it (with
/// `access`) when missing; what is there and is not a regular file (a
/// link, a directory, a FIFO, a socket, a device) is refused, never
/// followed or blocked on.
fn open_lock_file_at(
    at: &RegFd,
    dir: &Path,
    lock_path: &Path,
    access: &Access,
) -> Result<LockFileAt, Error> {
    let lock_name = OsStr::new(LOCK_FILE_NAME);
    match RegFd::open_at(
        at.as_fd(),
        lock_name,
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        access.file_mode(),
    ) {
        Ok(file) => {
            if let Err(e) = access.apply(file.as_fd(), false) {
                let _ = nix::unistd::unlinkat(
                    at.as_fd(),
                    lock_name,
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                );
                return Err(Error::io("set the mode and group of", lock_path, e));
            }
            Ok(LockFileAt::Opened {
                file,
                created: true,
            })
        }
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            seams::run_hook(HookPoint::OpeningExistingLockFile, lock_path);
            match RegFd::open_at(
                at.as_fd(),
                lock_name,
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                0,
            ) {
                Ok(file) => {
                    // A FIFO, socket or device opens (O_NONBLOCK keeps a
                    // FIFO from blocking) but is no lock file.
                    let st = file.fstat().map_err(|e| Error::io("stat", lock_path, e))?;
                    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                        return Err(not_regular(dir, lock_path, st.st_mode));
                    }
                    Ok(LockFileAt::Opened {
                        file,
                        created: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(LockFileAt::Gone),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ELOOP | libc::EISDIR | libc::ENXIO)
                    ) =>
                {
                    // O_NOFOLLOW refuses a symlink (ELOOP); O_RDWR a
                    // directory (EISDIR); a FIFO without reader or a
                    // socket gives ENXIO
                    let mode = std::fs::symlink_metadata(lock_path)
                        .map(|m| std::os::unix::fs::MetadataExt::mode(&m))
                        .unwrap_or(0);
                    Err(not_regular(dir, lock_path, mode))
                }
                Err(e) => Err(Error::io("open", lock_path, e)),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(LockFileAt::DirVanished),
        Err(e) => Err(Error::io("open", lock_path, e)),
    }
}

/// Opens `dir` by its path again and flocks it, provided it is still the
/// directory open at `at` (never a link or another directory put at its
/// path since): `Ok(Err(_))` says who holds it.
fn flock_dir_still_at(dir: &Path, at: &RegFd) -> Result<Result<RegFd, Flocked>, Error> {
    seams::run_hook(HookPoint::OpeningDirectory, dir);
    let dfd = RegFd::open(
        dir,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
    .and_then(|d| {
        let (now, was) = (d.fstat()?, at.fstat()?);
        if (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino) {
            Ok(d)
        } else {
            Err(io::Error::other("another directory was put at its path"))
        }
    })
    .map_err(|e| Error::io("open directory", dir, e))?;
    Ok(match flock_retrying(&dfd, dir)? {
        Flocked::Taken => Ok(dfd),
        refused => Err(refused),
    })
}

/// Under both locks: reads whom the record names as the producer, before it
/// is rewritten (a claim takes over; any other take carries the producer it
/// found), and writes this process's record when `purpose` is given.
/// Returns the producer the take carries.
fn write_owner_record(
    file: &RegFd,
    purpose: Option<Purpose>,
    lock_path: &Path,
) -> Result<Option<Producer>, Error> {
    let previous = read_record(file);
    let producer = match &purpose {
        Some(Purpose::Claim) => Some(this_producer()),
        _ => previous.as_ref().and_then(OwnerRecord::producer),
    };
    if let Some(purpose) = purpose {
        let carried = match purpose {
            Purpose::Claim => None,
            _ => producer.clone(),
        };
        file.overwrite(this_record(purpose, carried).render().as_bytes())
            .map_err(|e| Error::io("write owner record to", lock_path, e))?;
    }
    Ok(producer)
}

/// The staging name of a directory being created: `.<name>.<8 hex>.creating`.
pub fn is_staging_name(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let Some(rest) = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".creating"))
    else {
        return false;
    };
    match rest.rsplit_once('.') {
        Some((base, hex)) => {
            !base.is_empty()
                && hex.len() == 8
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }
        None => false,
    }
}

enum Created {
    Taken(Taken),
    AlreadyExists,
    /// [`Staging::Reserve`] found no reserve.
    NoReserve,
}

/// Where a new directory's staging copy comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Staging {
    /// Made now (`mkdirat`; its lock file created).
    Fresh,
    /// The parent's reserve ([`RESERVE_NAME`], made ahead by
    /// [`make_reserve_at`]) renamed: no new inode and no new byte, for a
    /// full filesystem.
    Reserve,
}

/// Creates `dir` with its lock already held: a staging copy
/// `<parent>/.<name>.<8 hex>.creating` with both locks taken inside, renamed
/// into place with `renameat2(RENAME_NOREPLACE)`, then the parent fsynced.
fn create_locked(
    parent: &Path,
    name: &OsStr,
    purpose: Purpose,
    access: &Access,
) -> Result<Created, Error> {
    let parent_fd =
        std::fs::File::open(parent).map_err(|e| Error::io("open directory", parent, e))?;
    create_locked_at(
        parent_fd.as_fd(),
        parent,
        name,
        purpose,
        access,
        Staging::Fresh,
    )
}

/// [`create_locked`] in the directory open at `parent_fd` (whose path,
/// `parent`, only names things in reports and seams): every step is
/// relative to that descriptor or to the staging copy's (`mkdirat`,
/// `openat(O_NOFOLLOW)`, `renameat2`, `unlinkat`), so a link planted at a
/// path component never redirects it.
fn create_locked_at(
    parent_fd: BorrowedFd<'_>,
    parent: &Path,
    name: &OsStr,
    purpose: Purpose,
    access: &Access,
    from: Staging,
) -> Result<Created, Error> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let dir = parent.join(name);
    let Some(staging_name) = make_staging_copy(parent_fd, parent, name, access, from)? else {
        return Ok(Created::NoReserve);
    };
    let staging = parent.join(&staging_name);
    // The staging copy as made (unlocked; only its entries are made and
    // removed through it, and it tells the copy still in place from
    // anything put there since).
    let made = match nix::fcntl::openat(
        parent_fd,
        staging_name.as_os_str(),
        nix::fcntl::OFlag::O_RDONLY
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = unlinkat(
                parent_fd,
                staging_name.as_os_str(),
                UnlinkatFlags::RemoveDir,
            );
            return Err(Error::io("open directory", &staging, e.into()));
        }
    };
    // Removes what the staging copy holds (its lock file, relative to its
    // own descriptor) and the copy itself, while empty.
    let cleanup = || {
        let _ = unlinkat(made.as_fd(), LOCK_FILE_NAME, UnlinkatFlags::NoRemoveDir);
        let _ = unlinkat(
            parent_fd,
            staging_name.as_os_str(),
            UnlinkatFlags::RemoveDir,
        );
    };
    let copy = StagingCopy {
        parent_fd,
        name: &staging_name,
        path: &staging,
        made: made.as_fd(),
    };
    let held = match copy.lock(purpose, access, from) {
        Ok(held) => held,
        Err(e) => {
            cleanup();
            return Err(e);
        }
    };
    let renamed = nix::fcntl::renameat2(
        parent_fd,
        staging_name.as_os_str(),
        parent_fd,
        name,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    );
    if let Err(e) = renamed {
        cleanup();
        held.close();
        return match e {
            nix::errno::Errno::EEXIST | nix::errno::Errno::ENOTEMPTY => Ok(Created::AlreadyExists),
            nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS => {
                Err(Error::NoReplaceUnsupported {
                    dir,
                    source: io::Error::from(e),
                })
            }
            e => Err(Error::io(
                "rename staging directory to",
                &dir,
                io::Error::from(e),
            )),
        };
    }
    if let Err(e) = sync_parent(parent_fd, parent) {
        // The new directory is in place but its entry may not be durable:
        // do not hand out a claim on it, and never leave it behind unlocked
        // (a lock-less empty directory reads as a dead sibling). Remove it
        // while the lock is still held, then let go.
        let _ = unlinkat(held.dir.as_fd(), LOCK_FILE_NAME, UnlinkatFlags::NoRemoveDir);
        let _ = unlinkat(parent_fd, name, UnlinkatFlags::RemoveDir);
        held.close();
        return Err(Error::io("fsync", parent, e));
    }
    Ok(Created::Taken(Taken {
        dir,
        held,
        created_dir: true,
        created_file: true,
        producer: Some(this_producer()),
    }))
}

/// Makes the staging copy of `parent/name` in the directory open at
/// `parent_fd`, `.<name>.<8 hex>.creating`: a new directory, or the
/// parent's reserve renamed (`None` when there is no reserve). Returns its
/// name.
fn make_staging_copy(
    parent_fd: BorrowedFd<'_>,
    parent: &Path,
    name: &OsStr,
    access: &Access,
    from: Staging,
) -> Result<Option<std::ffi::OsString>, Error> {
    for _ in 0..8 {
        let candidate = std::ffi::OsString::from(format!(
            ".{}.{:08x}.creating",
            name.to_string_lossy(),
            random_u32()
        ));
        let path = parent.join(&candidate);
        seams::run_hook(HookPoint::CreatingDirectory, &path);
        let made = match from {
            Staging::Fresh => access.create_dir_at(parent_fd, &candidate, &path),
            // the reserve becomes the staging copy: a rename, no new inode
            Staging::Reserve => nix::fcntl::renameat2(
                parent_fd,
                RESERVE_NAME,
                parent_fd,
                candidate.as_os_str(),
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(io::Error::from),
        };
        match made {
            Ok(()) => return Ok(Some(candidate)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) if from == Staging::Reserve && e.kind() == io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(Error::io("create staging directory", &path, e)),
        }
    }
    Err(Error::io(
        "create staging directory in",
        parent,
        io::Error::from(io::ErrorKind::AlreadyExists),
    ))
}

/// A staging copy [`make_staging_copy`] made, open at `made`.
struct StagingCopy<'a> {
    parent_fd: BorrowedFd<'a>,
    name: &'a OsStr,
    path: &'a Path,
    made: BorrowedFd<'a>,
}

impl StagingCopy<'_> {
    /// Takes both locks inside the copy and writes the owner record: the
    /// lock file flocked (created now, or the reserve's as it is), the
    /// copy opened again by name and flocked only while it is still the one
    /// made (a file or another directory put in its place is never locked
    /// and renamed into place as the spool directory), then fsynced.
    fn lock(&self, purpose: Purpose, access: &Access, from: Staging) -> Result<Held, Error> {
        let staging_lock = self.path.join(LOCK_FILE_NAME);
        let file = self.open_lock_file(&staging_lock, access, from)?;
        seams::run_hook(HookPoint::LockFileOpened, &staging_lock);
        if !matches!(flock_retrying(&file, &staging_lock)?, Flocked::Taken) {
            return Err(refusal_file_held(self.path));
        }
        let dfd = RegFd::open_at(
            self.parent_fd,
            self.name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| Error::io("open directory", self.path, e))?;
        let now = dfd.fstat().map_err(|e| Error::io("stat", self.path, e))?;
        let was =
            nix::sys::stat::fstat(self.made).map_err(|e| Error::io("stat", self.path, e.into()))?;
        if (now.st_dev, now.st_ino) != (was.st_dev, was.st_ino) {
            return Err(Error::io(
                "open directory",
                self.path,
                io::Error::other("the staging copy was replaced while being made"),
            ));
        }
        if !matches!(flock_retrying(&dfd, self.path)?, Flocked::Taken) {
            return Err(refusal_dir_held(self.path));
        }
        file.overwrite(this_record(purpose, None).render().as_bytes())
            .map_err(|e| Error::io("write owner record to", &staging_lock, e))?;
        dfd.sync().map_err(|e| Error::io("fsync", self.path, e))?;
        Ok(Held { file, dir: dfd })
    }

    /// The copy's lock file: created now (with `access`) in a fresh copy; a
    /// reserve's, made with the spool's access by whoever made the reserve
    /// (perhaps another user of the group), opened as it is and refused
    /// unless a regular file.
    fn open_lock_file(
        &self,
        staging_lock: &Path,
        access: &Access,
        from: Staging,
    ) -> Result<RegFd, Error> {
        let name = OsStr::new(LOCK_FILE_NAME);
        match from {
            Staging::Fresh => {
                let file = RegFd::open_at(
                    self.made,
                    name,
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                    access.file_mode(),
                )
                .map_err(|e| Error::io("create", staging_lock, e))?;
                access
                    .apply(file.as_fd(), false)
                    .map_err(|e| Error::io("set the mode and group of", staging_lock, e))?;
                Ok(file)
            }
            Staging::Reserve => {
                let file = RegFd::open_at(
                    self.made,
                    name,
                    libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                    0,
                )
                .map_err(|e| Error::io("open", staging_lock, e))?;
                let st = file
                    .fstat()
                    .map_err(|e| Error::io("stat", staging_lock, e))?;
                if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(not_regular(self.path, staging_lock, st.st_mode));
                }
                Ok(file)
            }
        }
    }
}

/// fsync of a parent directory (through the fault seam in test builds).
fn sync_parent(fd: BorrowedFd<'_>, parent: &Path) -> io::Result<()> {
    if seams::parent_fsync_fails(parent) {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    nix::unistd::fsync(fd).map_err(io::Error::from)
}

/// Creates the missing directories of `path` (with `access`), fsyncing the
/// parent of each one created, so a claim's `<root>/<key>/` survives a
/// crash. Returns the directories it created, outermost first; on an error
/// it removes them again (while empty).
pub fn create_parents(path: &Path, access: &Access) -> Result<Vec<PathBuf>, Error> {
    let mut missing = Vec::new();
    for p in path.ancestors() {
        match std::fs::symlink_metadata(p) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(p.to_path_buf()),
            Err(e) => return Err(Error::io("stat", p, e)),
        }
    }
    let mut created = Vec::new();
    for dir in missing.into_iter().rev() {
        seams::run_hook(HookPoint::CreatingDirectory, &dir);
        let result = match access.create_dir(&dir) {
            Ok(()) => {
                created.push(dir.clone());
                let parent = dir.parent().unwrap_or(Path::new("/"));
                std::fs::File::open(parent)
                    .and_then(|f| sync_parent(f.as_fd(), parent))
                    .map_err(|e| Error::io("fsync", parent, e))
            }
            // Made by someone else meanwhile: theirs, not ours to remove.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
            Err(e) => Err(Error::io("create", &dir, e)),
        };
        if let Err(e) = result {
            remove_created(&created);
            return Err(e);
        }
    }
    Ok(created)
}

/// Removes directories [`create_parents`] made, innermost first, each only
/// while empty (`remove_dir` refuses otherwise).
pub fn remove_created(created: &[PathBuf]) {
    for dir in created.iter().rev() {
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
}

/// Which nesting directions a take checks.
#[derive(Clone, Copy)]
enum Nesting {
    /// Ancestors and descendants (`acquire`).
    Both,
    /// Ancestors only (`try_adopt`: a held descendant is left alone by the
    /// walks).
    AncestorsOnly,
}

/// Refuses `dir` when an ancestor or (for `Both`) a descendant is a spool
/// directory whose lock is held. Unheld lock files and staging copies never
/// refuse. Runs AFTER the take published its lock, so of two racing takes
/// (outer, inner) at least one sees the other.
fn check_nesting(dir: &Path, nesting: Nesting) -> Result<(), Error> {
    for outer in dir.ancestors().skip(1) {
        if let Some(holder) = held_spool(outer)? {
            return Err(Error::NestedUnderHeld {
                dir: dir.to_path_buf(),
                outer: outer.to_path_buf(),
                holder,
            });
        }
    }
    if let Nesting::Both = nesting {
        check_descendants(dir, dir)?;
    }
    Ok(())
}

fn check_descendants(root: &Path, dir: &Path) -> Result<(), Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // Removed while we walk, or not ours to read: nothing held we can see.
        Err(e) if dir != root => {
            tracing::debug!(dir = %dir.display(), %e, "nesting walk skips {}", dir.display());
            return Ok(());
        }
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if !ft.is_dir() {
            continue;
        }
        let sub = entry.path();
        if let Some(holder) = held_spool(&sub)? {
            return Err(Error::ContainsHeld {
                dir: root.to_path_buf(),
                inner: sub,
                holder,
            });
        }
        check_descendants(root, &sub)?;
    }
    Ok(())
}

/// Keeps the lock of a take the nesting check accepted, or lets it go and
/// cleans up after a refusal.
fn finish(taken: Taken, nesting: Nesting) -> Result<Claim, Error> {
    finish_at(taken, nesting, None)
}

/// [`finish`]; with `at` (the parent's descriptor and the directory's
/// name) a refusal cleans up relative to descriptors, not by path.
fn finish_at(
    taken: Taken,
    nesting: Nesting,
    at: Option<(BorrowedFd<'_>, &OsStr)>,
) -> Result<Claim, Error> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    if let Err(refusal) = check_nesting(&taken.dir, nesting) {
        let lock_path = taken.dir.join(LOCK_FILE_NAME);
        match at {
            Some((parent, name)) => {
                if taken.created_file {
                    let dir = taken.held.dir.as_fd();
                    let _ = unlinkat(dir, LOCK_FILE_NAME, UnlinkatFlags::NoRemoveDir);
                }
                if taken.created_dir {
                    // Removed only while still empty.
                    let _ = unlinkat(parent, name, UnlinkatFlags::RemoveDir);
                }
            }
            None => {
                if taken.created_file {
                    let _ = std::fs::remove_file(&lock_path);
                }
                if taken.created_dir {
                    // Removed only while still empty.
                    let _ = std::fs::remove_dir(&taken.dir);
                }
            }
        }
        taken.held.close();
        return Err(refusal);
    }
    Ok(Claim::register(taken.dir, taken.held, taken.producer))
}

fn absolute(dir: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(dir).map_err(|e| Error::io("resolve", dir, e))
}

/// Takes `dir`'s lock for a claim: creates `dir` already locked when it is
/// missing (parents are created as plain directories), else locks it in
/// place. Runs the node-local check first and the nesting check after the
/// lock is taken. The owner record says `claim`.
///
/// A refusal names the holder and leaves nothing behind: a directory this
/// call created is removed while still empty, a lock file it added is
/// unlinked.
pub fn acquire(dir: &Path, opts: &LockOptions) -> Result<Claim, Error> {
    let dir = absolute(dir)?;
    for _ in 0..REOPEN_LIMIT {
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {
                let dir = dir
                    .canonicalize()
                    .map_err(|e| Error::io("resolve", &dir, e))?;
                check_node_local(&dir, opts.allow_shared_filesystem)?;
                if let Some(taken) = lock_in_place(&dir, Purpose::Claim, &opts.access)? {
                    return finish(taken, Nesting::Both);
                }
            }
            Ok(_) => {
                return Err(Error::io(
                    "lock",
                    &dir,
                    io::Error::from_raw_os_error(libc::ENOTDIR),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
                    return Err(Error::io("create", &dir, e));
                };
                // Parents are created with the spool's access and fsynced;
                // a refused take removes the ones it made (while empty).
                let created = create_parents(parent, &opts.access)?;
                let result = parent
                    .canonicalize()
                    .map_err(|e| Error::io("resolve", parent, e))
                    .and_then(|parent| {
                        check_node_local(&parent, opts.allow_shared_filesystem)?;
                        create_locked(&parent, name, Purpose::Claim, &opts.access)
                    });
                match result {
                    Ok(Created::Taken(taken)) => {
                        let claimed = finish(taken, Nesting::Both);
                        if claimed.is_err() {
                            remove_created(&created);
                        }
                        return claimed;
                    }
                    // (a fresh staging copy is never the reserve)
                    Ok(Created::AlreadyExists | Created::NoReserve) => continue,
                    Err(e) => {
                        remove_created(&created);
                        return Err(e);
                    }
                }
            }
            Err(e) => return Err(Error::io("stat", &dir, e)),
        }
    }
    Err(Error::LockFileUnstable {
        lock_path: dir.join(LOCK_FILE_NAME),
        dir,
        attempts: REOPEN_LIMIT,
    })
}

/// Creates the directory `name` in the directory open at `parent` (whose
/// path `parent_path` names it in reports and in the claim), with its lock
/// already held, for a claim (record `claim`). Unlike [`acquire`] nothing
/// is resolved by path: the staging copy, its lock file, the rename into
/// place and any clean-up are relative to `parent`'s descriptor or the new
/// directory's (`mkdirat`, `openat(O_NOFOLLOW)`, `renameat2`, `unlinkat`),
/// so a link planted at `parent_path` or one of its components never
/// redirects what is created. `Ok(None)` when `name` already exists (the
/// caller picks another name). Runs the node-local check first and the
/// nesting check (which only reads) after the lock is taken.
pub fn acquire_new_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    name: &OsStr,
    opts: &LockOptions,
) -> Result<Option<Claim>, Error> {
    create_new_at(parent, parent_path, name, opts, Staging::Fresh)
}

/// [`acquire_new_at`] on a full filesystem: the new directory is the
/// parent's reserve ([`RESERVE_NAME`], made ahead by [`make_reserve_at`]),
/// renamed to a staging copy, locked there and renamed into place, as a
/// fresh one would be, at no new inode or byte. `Ok(None)` when the parent
/// holds no reserve, or `name` is taken meanwhile.
pub fn acquire_reserve_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    name: &OsStr,
    opts: &LockOptions,
) -> Result<Option<Claim>, Error> {
    create_new_at(parent, parent_path, name, opts, Staging::Reserve)
}

/// [`acquire_new_at`] and [`acquire_reserve_at`]: the staging copy `from`.
fn create_new_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    name: &OsStr,
    opts: &LockOptions,
    from: Staging,
) -> Result<Option<Claim>, Error> {
    check_node_local(parent_path, opts.allow_shared_filesystem)?;
    match create_locked_at(
        parent,
        parent_path,
        name,
        Purpose::Claim,
        &opts.access,
        from,
    )? {
        Created::Taken(taken) => finish_at(taken, Nesting::Both, Some((parent, name))).map(Some),
        Created::AlreadyExists | Created::NoReserve => Ok(None),
    }
}

/// Makes the reserve of the directory open at `parent` (path
/// `parent_path`, for reports) unless it has one: a directory
/// [`RESERVE_NAME`] holding a lock file with an owner record in it, made
/// with `access` under a staging name and renamed into place, so a later
/// [`acquire_reserve_at`] on a full filesystem has a directory (two
/// inodes, and the record's bytes) to take. Unlocked and hidden: no walk
/// takes it for a spool directory. `Ok(false)` when one is there already.
pub fn make_reserve_at(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    access: &Access,
) -> Result<bool, Error> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let reserve = parent_path.join(RESERVE_NAME);
    match nix::sys::stat::fstatat(
        parent,
        RESERVE_NAME,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(_) => return Ok(false),
        Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(Error::io("stat", &reserve, e.into())),
    }
    let staging_name = format!(".reserve.{:08x}.creating", random_u32());
    let staging = parent_path.join(&staging_name);
    access
        .create_dir_at(parent, OsStr::new(&staging_name), &staging)
        .map_err(|e| Error::io("create", &staging, e))?;
    let lock_path = staging.join(LOCK_FILE_NAME);
    let made = (|| -> Result<bool, Error> {
        let dir = RegFd::open_at(
            parent,
            OsStr::new(&staging_name),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| Error::io("open directory", &staging, e))?;
        let file = RegFd::open_at(
            dir.as_fd(),
            OsStr::new(LOCK_FILE_NAME),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            access.file_mode(),
        )
        .map_err(|e| Error::io("create", &lock_path, e))?;
        access
            .apply(file.as_fd(), false)
            .map_err(|e| Error::io("set the mode and group of", &lock_path, e))?;
        // the bytes a record takes, paid now
        file.overwrite(this_record(Purpose::Claim, None).render().as_bytes())
            .and_then(|()| file.sync())
            .and_then(|()| dir.sync())
            .map_err(|e| Error::io("write", &lock_path, e))?;
        match nix::fcntl::renameat2(
            parent,
            OsStr::new(&staging_name),
            parent,
            RESERVE_NAME,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {}
            Err(nix::errno::Errno::EEXIST | nix::errno::Errno::ENOTEMPTY) => {
                let _ = unlinkat(dir.as_fd(), LOCK_FILE_NAME, UnlinkatFlags::NoRemoveDir);
                return Ok(false);
            }
            Err(e) => return Err(Error::io("rename into place", &reserve, e.into())),
        }
        sync_parent(parent, parent_path).map_err(|e| Error::io("fsync", parent_path, e))?;
        Ok(true)
    })();
    if !matches!(made, Ok(true)) {
        // whatever is left of the staging copy, while it is not the reserve
        if let Ok(dir) = RegFd::open_at(
            parent,
            OsStr::new(&staging_name),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        ) {
            let _ = unlinkat(dir.as_fd(), LOCK_FILE_NAME, UnlinkatFlags::NoRemoveDir);
        }
        let _ = unlinkat(parent, OsStr::new(&staging_name), UnlinkatFlags::RemoveDir);
    }
    made
}

/// Takes the lock of an existing directory for adoption (record
/// `adopting`). Refused when anyone holds it, and under a held ancestor; a
/// held descendant is left to the walks, which skip nested spools.
///
/// `try_adopt` does not read the `blocked` mark: an adopter reads it first
/// with [`read_owner`] and skips blocked directories; taking one (an
/// operator clearing the mark, say) rewrites the record, which clears it.
pub fn try_adopt(dir: &Path, opts: &LockOptions) -> Result<Claim, Error> {
    let dir = absolute(dir)?
        .canonicalize()
        .map_err(|e| Error::io("resolve", dir, e))?;
    check_node_local(&dir, opts.allow_shared_filesystem)?;
    match lock_in_place(&dir, Purpose::Adopting, &opts.access)? {
        Some(taken) => finish(taken, Nesting::AncestorsOnly),
        None => Err(Error::io(
            "adopt",
            &dir,
            io::Error::from(io::ErrorKind::NotFound),
        )),
    }
}

/// The `held_by_caller` check: accepted only when THIS process holds
/// `dir`'s lock (see [`held_by_this_process`]). Runs the node-local check
/// too. Beside another process's lock: [`Error::OwnedByOther`] (or
/// [`Error::LockFileReplaced`]); nothing holding it: [`Error::NotHeld`].
pub fn verify_held_by_caller(dir: &Path, opts: &LockOptions) -> Result<(), Error> {
    let dir = absolute(dir)?;
    check_node_local(&dir, opts.allow_shared_filesystem)?;
    if held_by_this_process(&dir)? {
        return Ok(());
    }
    let status = read_owner(&dir)?;
    let lock_path = dir.join(LOCK_FILE_NAME);
    if !status.held {
        return Err(Error::NotHeld { dir, lock_path });
    }
    if status.lock_file_replaced {
        return Err(Error::LockFileReplaced { dir, lock_path });
    }
    Err(Error::OwnedByOther {
        holder: status.holder(),
        dir,
        lock_path,
    })
}

/// What [`clear_blocked`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unblocked {
    /// The owner record said `blocked: <why>`. It now names this process
    /// with purpose `claim` (as any take leaves it), and the lock is let go:
    /// the directory reads as dead, and the next adopter takes it.
    Cleared {
        /// The reason the mark gave.
        why: String,
        /// The record as it was (who marked it, and when it was last held).
        previous: OwnerRecord,
    },
    /// Nothing to clear: the record does not say `blocked` (`None`: there
    /// is no lock file, or nothing readable in it). Nothing was changed.
    NotBlocked {
        /// The record as it is.
        record: Option<OwnerRecord>,
    },
}

/// Clears a `blocked: <why>` mark (written by [`Claim::mark_blocked`]) once
/// an operator fixed its cause, so adopters take the directory again.
///
/// Takes the lock in place (refused, naming the holder, when anyone holds
/// it: a live owner's directory is never touched), reads the owner record
/// under the lock, rewrites it only when it says `blocked`, fsyncs it and
/// lets go. Idempotent: a directory that is not blocked (or has no lock
/// file, which is then not created) is left exactly as it was and reported
/// as [`Unblocked::NotBlocked`]. Runs the node-local check, and refuses
/// under a held ancestor like [`try_adopt`].
pub fn clear_blocked(dir: &Path, opts: &LockOptions) -> Result<Unblocked, Error> {
    let dir = absolute(dir)?
        .canonicalize()
        .map_err(|e| Error::io("resolve", dir, e))?;
    check_node_local(&dir, opts.allow_shared_filesystem)?;
    let lock_path = dir.join(LOCK_FILE_NAME);
    match std::fs::symlink_metadata(&lock_path) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Unblocked::NotBlocked { record: None })
        }
        // another user's directory: not "no mark", a refusal
        Err(e) => return Err(Error::io("stat", &lock_path, e)),
    }
    let Some(taken) = lock_in_place_as(&dir, None, &opts.access)? else {
        return Err(Error::io(
            "unblock",
            &dir,
            io::Error::from(io::ErrorKind::NotFound),
        ));
    };
    let created_file = taken.created_file;
    let claim = finish(taken, Nesting::AncestorsOnly)?;
    let held = claim.live_held()?;
    let outcome = match read_record(&held.file) {
        Some(previous) => match &previous.purpose {
            Purpose::Blocked(why) => {
                let why = why.clone();
                held.file
                    .overwrite(
                        this_record(Purpose::Claim, previous.producer())
                            .render()
                            .as_bytes(),
                    )
                    .and_then(|()| held.file.sync())
                    .map_err(|e| Error::io("write owner record to", &lock_path, e))?;
                tracing::info!(dir = %dir.display(), why, "cleared the blocked mark of spool directory {} (it said: {why})", dir.display());
                Unblocked::Cleared { why, previous }
            }
            _ => Unblocked::NotBlocked {
                record: Some(previous),
            },
        },
        None => {
            if created_file {
                // The lock file vanished between the look and the take: do
                // not leave an empty one behind.
                let _ = std::fs::remove_file(&lock_path);
            }
            Unblocked::NotBlocked { record: None }
        }
    };
    claim.release()?;
    Ok(outcome)
}

/// Removes the unheld staging copies (`.<name>.<8 hex>.creating`) in
/// `parent` older than `opts.staging_max_age`, whose lock this call can
/// take; younger ones are left alone (a claim between its mkdir and its
/// flock holds no lock yet). Returns the removed paths.
pub fn remove_stale_staging(parent: &Path, opts: &LockOptions) -> Result<Vec<PathBuf>, Error> {
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(parent).map_err(|e| Error::io("list", parent, e))?;
    for entry in entries.flatten() {
        if !is_staging_name(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let age = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .unwrap_or_default();
        if !meta.is_dir() || age < opts.staging_max_age {
            continue;
        }
        let taken = match lock_in_place(&path, Purpose::Adopting, &opts.access) {
            Ok(Some(t)) => t,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(path = %path.display(), %e, "stale staging copy {} left alone", path.display());
                continue;
            }
        };
        let _ = std::fs::remove_file(path.join(LOCK_FILE_NAME));
        match std::fs::remove_dir(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed stale staging copy {} (age {:?})", path.display(), age);
                removed.push(path);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), %e, "stale staging copy {} is not empty; left in place", path.display());
            }
        }
        taken.held.close();
    }
    Ok(removed)
}

/// The process-wide registry of claims not yet released: (id, directory).
static CLAIMS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
/// Locks of claims dropped without release: kept until process exit.
static KEPT: Mutex<Vec<Held>> = Mutex::new(Vec::new());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn claims() -> std::sync::MutexGuard<'static, Vec<(u64, PathBuf)>> {
    CLAIMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The directories this process holds claims on (taken and not released,
/// including claims dropped without release, which stay held until exit).
pub fn held_claims() -> Vec<PathBuf> {
    claims().iter().map(|(_, d)| d.clone()).collect()
}

/// A held lock on a spool directory (from [`acquire`] or [`try_adopt`]).
///
/// Registered process-wide until released. Dropping it without
/// [`Claim::release`] keeps the lock until the process exits (with a
/// warning naming the directory): it never silently unlocks a directory a
/// sink may still write.
#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    held: Option<Held>,
    id: u64,
    producer: Option<Producer>,
}

impl Claim {
    fn register(dir: PathBuf, held: Held, producer: Option<Producer>) -> Claim {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        claims().push((id, dir.clone()));
        Claim {
            dir,
            held: Some(held),
            id,
            producer,
        }
    }

    /// Who staged the packs in this directory: this process for a claim
    /// ([`acquire`]); for an adoption ([`try_adopt`]), the producer the
    /// owner record named when the lock was taken (read under the lock,
    /// carried across earlier adopters and `blocked` marks). `None` when
    /// the record could not tell (missing, garbled, or an adopter's record
    /// from a build that did not carry producers).
    pub fn producer(&self) -> Option<&Producer> {
        self.producer.as_ref()
    }

    fn unregister(&self) {
        claims().retain(|(id, _)| *id != self.id);
    }

    /// The (absolute) directory this claim holds.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/.owner.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE_NAME)
    }

    /// False in a fork child's copy: the child's descriptors were closed by
    /// the fork handler, so it holds nothing.
    pub fn is_held(&self) -> bool {
        self.held.as_ref().is_some_and(Held::is_live)
    }

    /// The raw descriptor numbers this claim holds (lock file, directory);
    /// for fork tests, which check a child's copies are closed.
    #[cfg(any(test, feature = "testing"))]
    pub fn raw_descriptors(&self) -> Option<[i32; 2]> {
        self.held.as_ref().map(|h| [h.file.raw(), h.dir.raw()])
    }

    /// Writes `blocked: <why>` into the owner record (durably), for an
    /// adopter about to give up on the directory. Other services skip it
    /// until an operator clears the mark (the next take rewrites it).
    pub fn mark_blocked(&self, why: &str) -> Result<(), Error> {
        let lock_path = self.lock_path();
        let held = self.live_held()?;
        held.file
            .overwrite(
                this_record(Purpose::Blocked(why.to_owned()), self.producer.clone())
                    .render()
                    .as_bytes(),
            )
            .and_then(|()| held.file.sync())
            .map_err(|e| Error::io("write owner record to", &lock_path, e))?;
        tracing::info!(dir = %self.dir.display(), why, "marked spool directory {} blocked: {why}", self.dir.display());
        Ok(())
    }

    fn live_held(&self) -> Result<&Held, Error> {
        match &self.held {
            Some(h) if h.is_live() => Ok(h),
            _ => Err(Error::NotHeld {
                dir: self.dir.clone(),
                lock_path: self.lock_path(),
            }),
        }
    }

    fn take_held(&mut self) -> Option<Held> {
        let held = self.held.take();
        self.unregister();
        held
    }

    /// Lets go of the lock; the directory stays, unowned.
    pub fn release(mut self) -> Result<(), Error> {
        seams::run_hook(HookPoint::ReleaseBeforeClose, &self.dir);
        if let Some(held) = self.take_held() {
            held.close();
        }
        Ok(())
    }

    /// Lets go of the lock, removing the directory when nothing but its
    /// lock file (and empty subdirectories) remains; otherwise it stays,
    /// unowned. Returns whether it was removed. The claim leaves the
    /// process registry either way.
    pub fn release_and_remove_if_empty(mut self) -> Result<bool, Error> {
        seams::run_hook(HookPoint::ReleaseBeforeClose, &self.dir);
        let Some(held) = self.take_held() else {
            return Ok(false);
        };
        if !held.is_live() {
            return Ok(false);
        }
        let result = remove_if_empty(&self.dir);
        held.close();
        result
    }
}

/// With the lock still held: if `dir` holds only its lock file and empty
/// subdirectories, removes them and the directory.
fn remove_if_empty(dir: &Path) -> Result<bool, Error> {
    let mut empty_dirs = Vec::new();
    if !only_empty_dirs(dir, true, &mut empty_dirs)? {
        return Ok(false);
    }
    for sub in empty_dirs.iter().rev() {
        if std::fs::remove_dir(sub).is_err() {
            return Ok(false);
        }
    }
    let lock_path = dir.join(LOCK_FILE_NAME);
    match std::fs::remove_file(&lock_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove", &lock_path, e)),
    }
    seams::run_hook(HookPoint::RemovingDirectory, dir);
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        // Something arrived after the check: keep it (unowned, adoptable).
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            tracing::info!(dir = %dir.display(), "spool directory {} gained files while being removed; kept", dir.display());
            return Ok(false);
        }
        Err(e) => return Err(Error::io("remove", dir, e)),
    }
    if let Some(parent) = dir.parent() {
        if let Ok(p) = std::fs::File::open(parent) {
            let _ = p.sync_all();
        }
    }
    Ok(true)
}

fn only_empty_dirs(dir: &Path, top: bool, subdirs: &mut Vec<PathBuf>) -> Result<bool, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        if top && entry.file_name() == LOCK_FILE_NAME {
            continue;
        }
        let ft = entry
            .file_type()
            .map_err(|e| Error::io("stat", entry.path(), e))?;
        if !ft.is_dir() {
            return Ok(false);
        }
        let sub = entry.path();
        subdirs.push(sub.clone());
        if !only_empty_dirs(&sub, false, subdirs)? {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        if !held.is_live() {
            // A fork child's copy: its descriptors were closed by the fork
            // handler, and dropping it closes nothing.
            return;
        }
        tracing::warn!(
            dir = %self.dir.display(),
            "claim on spool directory {} dropped without release: its lock stays held until this process exits, so the next process adopts it",
            self.dir.display()
        );
        KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(held);
    }
}
