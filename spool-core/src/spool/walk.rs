//! The one walk of a spool directory (its skips are the crate docs'), the
//! byte account it sums, and the small fs helpers every part shares.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use std::collections::HashMap;

use super::names::{file_kind, ordinal_dir_name, parse_ordinal_dir, FileKind};
use crate::at::AtDir;
use crate::lk;
use crate::pack::PackId;
use crate::Error;

/// One pack file met by a walk.
pub(super) struct Entry {
    pub(super) path: PathBuf,
    pub(super) kind: FileKind,
    pub(super) id: PackId,
    pub(super) ordinal: Option<u32>,
    /// A regular file (not a symlink or anything else).
    pub(super) regular: bool,
    /// What it is when not regular (`"a FIFO"`, ...), for reports.
    pub(super) what: &'static str,
    pub(super) len: u64,
}

/// Walks a spool directory: its pack files and those of its `w<k>/`
/// subdirectories. Skips `_refs/`, nested spools (a subdirectory with a
/// `.owner.lock` of its own), any other subdirectory, files that are not
/// pack files; never follows a symlink. `visit` returns `false` to stop.
pub(super) fn walk(
    dir: &Path,
    mut visit: impl FnMut(Entry) -> Result<bool, Error>,
) -> Result<(), Error> {
    let mut dirs: Vec<(PathBuf, Option<u32>)> = vec![(dir.to_path_buf(), None)];
    let mut first = true;
    while let Some((d, ordinal)) = dirs.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && first => {
                return Err(Error::DirectoryVanished { dir: d })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("read directory", &d, e)),
        };
        first = false;
        for entry in rd {
            let entry = entry.map_err(|e| Error::io("read directory", &d, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let meta = match std::fs::symlink_metadata(entry.path()) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("stat", entry.path(), e)),
            };
            if meta.is_dir() {
                if ordinal.is_none() {
                    if let Some(k) = parse_ordinal_dir(name) {
                        if lk::is_nested_spool(&entry.path()) {
                            tracing::debug!(dir = %entry.path().display(), "walk skips a nested spool");
                        } else {
                            dirs.push((entry.path(), Some(k)));
                        }
                    }
                }
                continue;
            }
            let Some((kind, id)) = file_kind(name) else {
                continue;
            };
            let regular = meta.file_type().is_file();
            let go_on = visit(Entry {
                path: entry.path(),
                kind,
                id,
                ordinal,
                regular,
                what: file_type_name(meta.file_type()),
                len: if regular { meta.len() } else { 0 },
            })?;
            if !go_on {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// What a file is, for reports: `"a regular file"`, `"a symlink"`,
/// `"a FIFO"`, `"a socket"`, `"a device"`, `"a directory"`.
pub fn file_type_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() {
        "a regular file"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "something else"
    }
}

/// The directories holding walked entries (the spool directory and its
/// `w<k>/` subdirectories), each opened once: the spool directory by its
/// path, a subdirectory relative to it without following a link. Whoever
/// removes or fsyncs what a walk met works through these, so a `w<k>/`
/// swapped for a link after the walk looked is an error naming it, never a
/// way out of the spool.
pub(super) struct EntryDirs<'a> {
    spool_dir: &'a Path,
    top: Option<AtDir>,
    subs: HashMap<u32, Option<AtDir>>,
}

impl<'a> EntryDirs<'a> {
    pub(super) fn new(spool_dir: &'a Path) -> EntryDirs<'a> {
        EntryDirs {
            spool_dir,
            top: None,
            subs: HashMap::new(),
        }
    }

    /// The directory holding entries of `ordinal` (`None`: the spool
    /// directory itself); `Ok(None)` when it is gone.
    pub(super) fn of(&mut self, ordinal: Option<u32>) -> Result<Option<&AtDir>, Error> {
        if self.top.is_none() {
            self.top = Some(AtDir::open_layout(self.spool_dir, 0)?.ok_or_else(|| {
                Error::DirectoryVanished {
                    dir: self.spool_dir.to_path_buf(),
                }
            })?);
        }
        let top = self.top.as_ref().expect("opened above");
        let Some(k) = ordinal else {
            return Ok(Some(top));
        };
        if let std::collections::hash_map::Entry::Vacant(v) = self.subs.entry(k) {
            v.insert(top.open_dir(ordinal_dir_name(k))?);
        }
        Ok(self.subs.get(&k).and_then(Option::as_ref))
    }
}

pub(super) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a pack swapped for a FIFO after the walk looked must
        // not block the open (no effect on regular files)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

/// Bytes of every pack file (open, ready, quarantined, rejected) under a
/// spool directory, with the walk's skips.
pub(super) fn account(dir: &Path, mut skip: impl FnMut(&Entry) -> bool) -> Result<u64, Error> {
    let mut total = 0u64;
    walk(dir, |e| {
        if !skip(&e) {
            total += e.len;
        }
        Ok(true)
    })?;
    Ok(total)
}
