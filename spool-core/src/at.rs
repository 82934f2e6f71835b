//! Working inside a spool root without trusting what is in it: the one
//! place in spool-core that opens, lists, creates, reads, writes, renames
//! and removes entries of the hand-off's directories (`_refs/`,
//! `<key>/_shipped/`), every one of them relative to a directory
//! descriptor. The layout works through it too: a claim opens the catalog
//! key directory here (its rank directory is created relative to that
//! descriptor, by spool-lock's `acquire_new_at`), the listings of keys and
//! rank directories read entry kinds here, and a pack is removed, swept,
//! purged, set aside or requeued relative to the directory holding it.
//!
//! # The rule
//!
//! A spool root is untrusted input (crate docs, "What is inside a spool
//! root"): anyone who can write into it (a producer user in group mode, a
//! careless neighbour) can plant a symlink, a FIFO, a device, a file where a
//! directory belongs or a directory where a file belongs. So:
//!
//! - The spool root itself (the operator's path) is the only path ever
//!   resolved through links; everything below it is opened one component at
//!   a time with `openat(O_NOFOLLOW | O_DIRECTORY)` ([`AtDir::open_layout`],
//!   [`AtDir::open_dir`]).
//! - Entries are created, removed and renamed with `*at` calls on that
//!   descriptor (`mkdirat`, `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`,
//!   `unlinkat`, `renameat`): such a call acts on the entry in the directory
//!   itself, never on what a link in its place points to.
//! - Files are opened `O_NOFOLLOW | O_NONBLOCK`, checked to be regular
//!   (`fstat` of the open descriptor) and read with a bound: a FIFO or a
//!   device where a file belongs is an error at once, never a blocked read.
//! - An entry of the wrong kind is [`Error::UnexpectedEntry`]: it names the
//!   path, what is there and what spool expects. Whoever meets it sets the
//!   directory aside instead of retrying it in a loop (adoption ships a
//!   dead owner's packs, then blocks it: it still holds other files; the
//!   shipper refuses a live owner; one under `<key>/_shipped/` is left and
//!   logged); nothing is followed, read or removed through it.
//!
//! Names that are not UTF-8 are listed as such ([`Name::Foreign`]) so that a
//! caller reports them instead of skipping them silently.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use spool_lock::Access;

use crate::Error;

/// What an entry of a directory is (never what a link points to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    Regular,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
    /// A block or character device.
    Device,
}

impl Kind {
    /// How a report says it: `"a regular file"`, `"a symlink"`, ...
    pub fn described(self) -> &'static str {
        match self {
            Kind::Regular => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Device => "a device",
        }
    }

    fn of_mode(mode: u32) -> Kind {
        match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            SFlag::S_IFIFO => Kind::Fifo,
            SFlag::S_IFSOCK => Kind::Socket,
            SFlag::S_IFBLK | SFlag::S_IFCHR => Kind::Device,
            _ => Kind::Regular,
        }
    }
}

/// One name listed in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// A UTF-8 name.
    Utf8(String),
    /// A name that is not UTF-8 (shown lossily in reports).
    Foreign(OsString),
}

/// A directory of a spool root, opened without following a link, that
/// every operation below works relative to.
#[derive(Debug)]
pub struct AtDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl AtDir {
    /// Opens a directory of the layout, `<root>/<key>[/<more>...]`, given
    /// by its path: the spool root (two levels above a rank directory, the
    /// operator's path) is resolved as given, every component below it is
    /// opened without following a link. `depth` is how many components lie
    /// below the root (1 for a key directory, 2 for a rank directory).
    /// `Ok(None)` when a component does not exist.
    pub fn open_layout(path: &Path, depth: usize) -> Result<Option<AtDir>, Error> {
        let comps: Vec<&OsStr> = path.iter().collect();
        if depth == 0 || comps.len() <= depth {
            return AtDir::open_root(path);
        }
        let root: PathBuf = comps[..comps.len() - depth].iter().collect();
        let Some(mut dir) = AtDir::open_root(&root)? else {
            return Ok(None);
        };
        for name in &comps[comps.len() - depth..] {
            match dir.open_dir(name)? {
                Some(d) => dir = d,
                None => return Ok(None),
            }
        }
        Ok(Some(dir))
    }

    /// Opens the spool root `path` (links in it followed: it is the
    /// operator's).
    fn open_root(path: &Path) -> Result<Option<AtDir>, Error> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        match nix::fcntl::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(AtDir {
                fd,
                path: path.to_path_buf(),
            })),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(Error::io("open directory", path, e.into())),
        }
    }

    /// The directory's path (for reports; never used to reach it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of entry `name` (for reports).
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// What entry `name` is, without following it; `None` if absent.
    pub fn kind(&self, name: impl AsRef<OsStr>) -> Result<Option<Kind>, Error> {
        Ok(self.stat(name)?.map(|(k, _)| k))
    }

    /// What entry `name` is and its length, without following it; `None`
    /// if absent.
    pub fn stat(&self, name: impl AsRef<OsStr>) -> Result<Option<(Kind, u64)>, Error> {
        let name = name.as_ref();
        match fstatat(
            self.fd.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Some((Kind::of_mode(st.st_mode), st.st_size.max(0) as u64))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(Error::io("stat", self.join(name), e.into())),
        }
    }

    /// How long ago entry `name` was last modified (its mtime), without
    /// following it; `None` if absent.
    pub fn age(&self, name: impl AsRef<OsStr>) -> Result<Option<std::time::Duration>, Error> {
        let name = name.as_ref();
        match fstatat(
            self.fd.as_fd(),
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => {
                let mtime = std::time::UNIX_EPOCH
                    + std::time::Duration::new(
                        st.st_mtime.max(0) as u64,
                        st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
                    );
                Ok(Some(mtime.elapsed().unwrap_or_default()))
            }
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(Error::io("stat", self.join(name), e.into())),
        }
    }

    /// The unexpected-entry error for `name`, which is `found` where spool
    /// expects `expected`.
    pub fn unexpected(&self, name: impl AsRef<OsStr>, found: &str, expected: &str) -> Error {
        Error::UnexpectedEntry {
            path: self.join(name.as_ref()),
            found: found.to_string(),
            expected: expected.to_string(),
        }
    }

    /// Opens subdirectory `name` without following a link; `None` if it
    /// does not exist. Anything but a directory there is
    /// [`Error::UnexpectedEntry`].
    pub fn open_dir(&self, name: impl AsRef<OsStr>) -> Result<Option<AtDir>, Error> {
        let name = name.as_ref();
        let flags = OFlag::O_RDONLY
            | OFlag::O_DIRECTORY
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK;
        match openat(self.fd.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(AtDir {
                fd,
                path: self.join(name),
            })),
            Err(Errno::ENOENT) => Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => Err(self.unexpected_kind(name, "a directory")),
            Err(e) => Err(Error::io("open directory", self.join(name), e.into())),
        }
    }

    /// Opens subdirectory `name`, creating it with `access` (mode and
    /// group) if missing.
    pub fn create_dir(&self, name: impl AsRef<OsStr>, access: &Access) -> Result<AtDir, Error> {
        self.ensure_dir(name, access).map(|(dir, _)| dir)
    }

    /// [`AtDir::create_dir`], saying whether this call created it (`true`)
    /// or found it there (`false`): whoever creates a directory of the
    /// layout fsyncs this one ([`AtDir::sync`]) and removes it again on a
    /// refusal ([`AtDir::remove_dir`]). Anything but a directory at `name`
    /// (a link, a file, a FIFO) is [`Error::UnexpectedEntry`].
    pub fn ensure_dir(
        &self,
        name: impl AsRef<OsStr>,
        access: &Access,
    ) -> Result<(AtDir, bool), Error> {
        let name = name.as_ref();
        match mkdirat(
            self.fd.as_fd(),
            name,
            Mode::from_bits_truncate(access.dir_mode()),
        ) {
            Ok(()) => {
                let dir = self.open_existing_dir(name)?;
                access
                    .apply(dir.fd.as_fd(), true)
                    .map_err(|e| Error::io("set mode and group of", dir.path(), e))?;
                Ok((dir, true))
            }
            Err(Errno::EEXIST) => Ok((self.open_existing_dir(name)?, false)),
            Err(e) => Err(Error::io("create directory", self.join(name), e.into())),
        }
    }

    /// [`AtDir::open_dir`] of a directory just made or found: gone again
    /// is an I/O error.
    fn open_existing_dir(&self, name: &OsStr) -> Result<AtDir, Error> {
        self.open_dir(name)?.ok_or_else(|| {
            Error::io(
                "open directory",
                self.join(name),
                io::ErrorKind::NotFound.into(),
            )
        })
    }

    /// The names in the directory, sorted (`.` and `..` left out).
    pub fn names(&self) -> Result<Vec<Name>, Error> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| Error::io("read directory", &self.path, e))?;
        let mut dir = nix::dir::Dir::from_fd(fd)
            .map_err(|e| Error::io("read directory", &self.path, e.into()))?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| Error::io("read directory", &self.path, e.into()))?;
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            out.push(match std::str::from_utf8(bytes) {
                Ok(s) => Name::Utf8(s.to_string()),
                Err(_) => Name::Foreign(OsStr::from_bytes(bytes).to_os_string()),
            });
        }
        out.sort_by(|a, b| name_bytes(a).cmp(name_bytes(b)));
        Ok(out)
    }

    /// The UTF-8 names in the directory, sorted; a name that is not UTF-8
    /// is [`Error::UnexpectedEntry`] (whoever lists it cannot name what it
    /// consents to or confirms).
    pub fn utf8_names(&self) -> Result<Vec<String>, Error> {
        self.names()?
            .into_iter()
            .map(|n| match n {
                Name::Utf8(s) => Ok(s),
                Name::Foreign(os) => {
                    Err(self.unexpected(&os, "a name that is not UTF-8", "only names spool writes"))
                }
            })
            .collect()
    }

    /// Creates the empty regular file `name` with `access`; an existing
    /// regular file is kept (`Ok(false)`), anything else there is
    /// [`Error::UnexpectedEntry`].
    pub fn create_file(&self, name: impl AsRef<OsStr>, access: &Access) -> Result<bool, Error> {
        let name = name.as_ref();
        let flags = OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_EXCL
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK;
        let mode = Mode::from_bits_truncate(access.file_mode());
        match openat(self.fd.as_fd(), name, flags, mode) {
            Ok(fd) => {
                access
                    .apply(fd.as_fd(), false)
                    .map_err(|e| Error::io("set mode and group of", self.join(name), e))?;
                Ok(true)
            }
            Err(Errno::EEXIST) => match self.kind(name)? {
                Some(Kind::Regular) => Ok(false),
                Some(k) => Err(self.unexpected(name, k.described(), "a regular file")),
                None => Err(Error::io(
                    "create",
                    self.join(name),
                    io::Error::other("it appeared and vanished while being created"),
                )),
            },
            Err(e) => Err(Error::io("create", self.join(name), e.into())),
        }
    }

    /// Removes the entry `name` if it is a regular file (`Ok(true)`), or
    /// was already gone (`Ok(false)`). Anything else there is
    /// [`Error::UnexpectedEntry`] and stays. `unlinkat` removes the entry
    /// itself: even a link swapped in after the check is only unlinked,
    /// never followed.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> Result<bool, Error> {
        let name = name.as_ref();
        match self.kind(name)? {
            None => return Ok(false),
            Some(Kind::Regular) => {}
            Some(k) => return Err(self.unexpected(name, k.described(), "a regular file")),
        }
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(Error::io("remove", self.join(name), e.into())),
        }
    }

    /// Removes the entry `name` whatever file it is (a regular file, a
    /// link, a FIFO: `unlinkat` removes the entry itself and never follows
    /// it): `Ok(true)` if removed, `Ok(false)` if already gone. A directory
    /// there is [`Error::UnexpectedEntry`] and stays.
    pub fn remove_entry(&self, name: impl AsRef<OsStr>) -> Result<bool, Error> {
        let name = name.as_ref();
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EISDIR) => Err(self.unexpected(name, Kind::Dir.described(), "a file")),
            Err(e) => Err(Error::io("remove", self.join(name), e.into())),
        }
    }

    /// Removes the empty subdirectory `name`: `Ok(true)` if removed,
    /// `Ok(false)` if gone or not empty. Never follows a link (`unlinkat`
    /// with `AT_REMOVEDIR` refuses one).
    pub fn remove_dir(&self, name: impl AsRef<OsStr>) -> Result<bool, Error> {
        let name = name.as_ref();
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT | Errno::ENOTEMPTY | Errno::EEXIST) => Ok(false),
            Err(Errno::ENOTDIR) => Err(self.unexpected_kind(name, "a directory")),
            Err(e) => Err(Error::io("remove directory", self.join(name), e.into())),
        }
    }

    /// Reads the regular file `name`, at most `limit` bytes; `None` if
    /// absent. Opened without following a link and without blocking (a
    /// FIFO or a device is [`Error::UnexpectedEntry`] at once); a longer
    /// file is [`Error::UnexpectedEntry`] too.
    pub fn read_small(
        &self,
        name: impl AsRef<OsStr>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, Error> {
        let name = name.as_ref();
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = match openat(self.fd.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => return Err(self.unexpected(name, "a symlink", "a regular file")),
            Err(e) => return Err(Error::io("open", self.join(name), e.into())),
        };
        let st = fstat(fd.as_fd()).map_err(|e| Error::io("stat", self.join(name), e.into()))?;
        let kind = Kind::of_mode(st.st_mode);
        if kind != Kind::Regular {
            return Err(self.unexpected(name, kind.described(), "a regular file"));
        }
        if st.st_size as u64 > limit {
            return Err(self.unexpected(
                name,
                &format!("a file of {} bytes", st.st_size),
                &format!("a file of at most {limit} bytes"),
            ));
        }
        let mut out = Vec::new();
        File::from(fd)
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| Error::io("read", self.join(name), e))?;
        Ok(Some(out))
    }

    /// Replaces file `name` with `bytes`, whole: a temp file beside it
    /// (created `O_EXCL | O_NOFOLLOW` with `access`), written, fsynced,
    /// renamed over `name` with `renameat`, which replaces whatever entry
    /// is there (a link, a FIFO) without following or opening it. A
    /// directory at `name` is [`Error::UnexpectedEntry`].
    pub fn replace_file(&self, name: &str, bytes: &[u8], access: &Access) -> Result<(), Error> {
        if self.kind(name)? == Some(Kind::Dir) {
            return Err(self.unexpected(name, Kind::Dir.described(), "a regular file"));
        }
        // a writer killed between its temp file and the rename left one:
        // the next replacement sweeps it (one writer per name at a time)
        self.remove_replace_temps(name)?;
        let tmp = format!("{name}.{:08x}.tmp", rand::random::<u32>());
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mode = Mode::from_bits_truncate(access.file_mode());
        let fd = openat(self.fd.as_fd(), tmp.as_str(), flags, mode)
            .map_err(|e| Error::io("create", self.join(&tmp), e.into()))?;
        let written = access
            .apply(fd.as_fd(), false)
            .and_then(|()| {
                let mut f = File::from(fd);
                f.write_all(bytes)?;
                f.sync_all()
            })
            .map_err(|e| Error::io("write", self.join(&tmp), e))
            .and_then(|()| {
                renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name)
                    .map_err(|e| Error::io("rename", self.join(name), e.into()))
            });
        if written.is_err() {
            let _ = unlinkat(self.fd.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        written
    }

    /// Removes the temp files [`AtDir::replace_file`] makes for `name`
    /// (`<name>.<8 hex>.tmp`, regular files only) that a killed writer
    /// left; how many.
    pub fn remove_replace_temps(&self, name: &str) -> Result<usize, Error> {
        let mut removed = 0;
        for n in self.names()? {
            let Name::Utf8(n) = n else { continue };
            let is_temp = n
                .strip_prefix(name)
                .and_then(|r| r.strip_prefix('.'))
                .and_then(|r| r.strip_suffix(".tmp"))
                .is_some_and(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
            if is_temp && self.kind(&n)? == Some(Kind::Regular) && self.remove_file(&n)? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Renames regular file `from` to `to` within this directory
    /// (`renameat`, which never follows a link; no new inode). `Ok(false)`
    /// when `from` is absent; anything but a regular file at `from` is
    /// [`Error::UnexpectedEntry`].
    pub fn rename_regular(&self, from: &str, to: &str) -> Result<bool, Error> {
        match self.kind(from)? {
            None => return Ok(false),
            Some(Kind::Regular) => {}
            Some(k) => return Err(self.unexpected(from, k.described(), "a regular file")),
        }
        if self.kind(to)? == Some(Kind::Dir) {
            return Err(self.unexpected(to, Kind::Dir.described(), "a regular file"));
        }
        match renameat(self.fd.as_fd(), from, self.fd.as_fd(), to) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(Error::io("rename", self.join(to), e.into())),
        }
    }

    /// Renames entry `from` to `to` within this directory, refusing to
    /// replace anything at `to` (`renameat2(RENAME_NOREPLACE)`, which
    /// never follows a link at either name). An error whose source is
    /// `AlreadyExists` says `to` was there.
    pub fn rename_noreplace(&self, from: &OsStr, to: &OsStr) -> Result<(), Error> {
        use nix::fcntl::{renameat2, RenameFlags};
        renameat2(
            self.fd.as_fd(),
            from,
            self.fd.as_fd(),
            to,
            RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(|e| Error::io("rename (no replace)", self.join(to), io::Error::from(e)))
    }

    /// Opens the directory at `path` as it resolves now (links in it
    /// followed: a caller compares [`AtDir::identity`] with the one it
    /// expects before working in it). The bare errno on failure, for the
    /// caller to report as its operation.
    pub fn open_path(path: &Path) -> Result<AtDir, Errno> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        nix::fcntl::open(path, flags, Mode::empty()).map(|fd| AtDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory's identity: its device and inode.
    pub fn identity(&self) -> Result<(u64, u64), Error> {
        let st = fstat(self.fd.as_fd())
            .map_err(|e| Error::io("stat", &self.path, io::Error::from(e)))?;
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// Creates the regular file `name` with `mode` and opens it for
    /// writing: never replacing an entry, never through a link
    /// (`O_CREAT | O_EXCL | O_NOFOLLOW`). The caller sets its mode and
    /// group on the descriptor.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        openat(self.fd.as_fd(), name, flags, Mode::from_bits_truncate(mode))
            .map(File::from)
            .map_err(io::Error::from)
    }

    /// Opens the regular file `name` for reading, never through a link and
    /// never blocking on a FIFO; anything but a regular file is an error.
    pub fn open_read(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let file = openat(self.fd.as_fd(), name, flags, Mode::empty()).map(File::from)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(file)
    }

    /// Links the entry `from` to the new name `to` in this directory
    /// (`linkat` without `AT_SYMLINK_FOLLOW`: a link is linked, never
    /// followed; an existing `to` is never replaced: `AlreadyExists`).
    pub fn link_new(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        nix::unistd::linkat(
            self.fd.as_fd(),
            from,
            self.fd.as_fd(),
            to,
            nix::fcntl::AtFlags::empty(),
        )
        .map_err(io::Error::from)
    }

    /// Fsyncs the directory (its entries' creation and removal).
    pub fn sync(&self) -> Result<(), Error> {
        nix::unistd::fsync(self.fd.as_fd())
            .map_err(|e| Error::io("fsync directory", &self.path, e.into()))
    }

    /// The unexpected-entry error for `name` where `expected` belongs,
    /// naming what is there.
    fn unexpected_kind(&self, name: &OsStr, expected: &str) -> Error {
        let found = match self.kind(name) {
            Ok(Some(k)) => k.described(),
            _ => "something else",
        };
        self.unexpected(name, found, expected)
    }
}

impl AsFd for AtDir {
    /// The directory's descriptor, for spool-lock's `*_at` entry points
    /// (a rank directory is created locked relative to its key directory).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn name_bytes(n: &Name) -> &[u8] {
    match n {
        Name::Utf8(s) => s.as_bytes(),
        Name::Foreign(os) => os.as_bytes(),
    }
}

#[cfg(test)]
mod tests;
