//! Staging a sealed pack (temp file, fsync, `link()`, directory fsync), the
//! reservation and the committed account.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::charge::dead_sibling_bytes;
use super::names::{ordinal_dir_name, FileKind};
use super::pause::pause_before_publish;
use super::walk::{account, fsync_dir, open_nofollow};
use super::{Spool, StagedPack, State, Usage};
use crate::pack::PackId;
use crate::Error;

impl Spool {
    /// Re-derives the committed account from a walk (and the dead-sibling
    /// charge). Reservations in flight are left as they are, and the files
    /// of stages in flight are left to those stages' own accounting.
    pub fn reconcile(&self) -> Result<Usage, Error> {
        let mut st = self.state();
        self.reconcile_locked(&mut st)?;
        Ok(Usage {
            committed: st.committed,
            reserved: st.reserved,
            dead_sibling_bytes: st.dead_sibling_bytes,
        })
    }

    pub(super) fn reconcile_locked(&self, st: &mut State) -> Result<(), Error> {
        let State {
            in_flight,
            committed,
            ..
        } = st;
        for f in in_flight.values_mut() {
            f.skipped_ready = 0;
        }
        *committed = account(&self.dir, |e| match in_flight.get_mut(&e.id) {
            Some(f) if matches!(e.kind, FileKind::Open | FileKind::Ready) => {
                if e.kind == FileKind::Ready {
                    f.skipped_ready += e.len;
                }
                true
            }
            _ => false,
        })?;
        st.dead_sibling_bytes = if self.config.charge_dead_siblings {
            dead_sibling_bytes(&self.dir)
        } else {
            0
        };
        Ok(())
    }

    fn reserve(&self, id: PackId, n: u64) -> Result<(), Error> {
        let mut st = self.state();
        if let Some(budget) = self.config.max_bytes {
            let over = |st: &State| st.committed + st.reserved + st.dead_sibling_bytes + n > budget;
            if over(&st) {
                // Refresh before refusing: capacity returns as packs are
                // removed (by a service on this directory) and as adoption
                // drains dead siblings.
                self.reconcile_locked(&mut st)?;
                if over(&st) {
                    let used = st.committed + st.reserved + st.dead_sibling_bytes;
                    if st.full_logged {
                        tracing::debug!(dir = %self.dir.display(), used, budget, needed = n,
                            dead_sibling_bytes = st.dead_sibling_bytes, "spool still full, stage refused");
                    } else {
                        st.full_logged = true;
                        tracing::warn!(dir = %self.dir.display(), used, budget, needed = n,
                            dead_sibling_bytes = st.dead_sibling_bytes, "spool full, stage refused");
                    }
                    return Err(Error::Full {
                        dir: self.dir.clone(),
                        used,
                        budget,
                        dead_sibling_bytes: st.dead_sibling_bytes,
                        needed: n,
                    });
                }
            }
        }
        st.reserved += n;
        st.full_logged = false;
        st.in_flight.entry(id).or_default().count += 1;
        Ok(())
    }

    /// Stages a sealed pack: writes `.<id>.<rand>.open`
    /// (`O_CREAT|O_EXCL|O_NOFOLLOW`), fsyncs it, publishes it with `link()`
    /// to `<id>.ready` (which never replaces an existing file), unlinks the
    /// temp file and fsyncs the directory. With `ordinal = Some(k)` the pack
    /// goes under `w<k>/` (created if missing, never its parent).
    ///
    /// Staging an id that is already sealed with identical bytes succeeds;
    /// with different bytes it is [`Error::Conflict`] and the sealed pack is
    /// untouched. A directory that vanished gives
    /// [`Error::DirectoryVanished`] and nothing is created. Over budget:
    /// [`Error::Full`]. The bytes are not validated here: the sink stages
    /// what [`pack::PackWriter`] made.
    pub fn stage(
        &self,
        ordinal: Option<u32>,
        id: PackId,
        bytes: &[u8],
    ) -> Result<StagedPack, Error> {
        let n = bytes.len() as u64;
        self.reserve(id, n)?;
        let result = self.stage_files(ordinal, id, bytes);
        let mut st = self.state();
        st.reserved -= n;
        let flight = st.in_flight.get_mut(&id).expect("reserved above");
        flight.count -= 1;
        let add = match &result {
            Ok((_, true)) => n,
            Ok((_, false)) => std::mem::take(&mut flight.skipped_ready),
            Err(_) => 0,
        };
        if flight.count == 0 {
            st.in_flight.remove(&id);
        }
        st.committed += add;
        drop(st);
        result.map(|(path, _)| StagedPack { path, id, bytes: n })
    }

    /// The file work of a stage. Returns the ready path and whether this
    /// stage published it (false: an identical pack was already there).
    fn stage_files(
        &self,
        ordinal: Option<u32>,
        id: PackId,
        bytes: &[u8],
    ) -> Result<(PathBuf, bool), Error> {
        let target = match ordinal {
            None => self.dir.clone(),
            Some(k) => {
                let sub = self.dir.join(ordinal_dir_name(k));
                match self.config.lock.access.create_dir(&sub) {
                    Ok(()) => fsync_dir(&self.dir)?,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        let m = std::fs::symlink_metadata(&sub)
                            .map_err(|e| Error::io("stat", &sub, e))?;
                        if !m.is_dir() {
                            return Err(Error::NotAPack {
                                path: sub,
                                dir: self.dir.clone(),
                                why: "the worker subdirectory is not a directory (a symlink?)",
                            });
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(Error::DirectoryVanished {
                            dir: self.dir.clone(),
                        })
                    }
                    Err(e) => return Err(Error::io("create", &sub, e)),
                }
                sub
            }
        };
        let ready = target.join(format!("{id}.ready"));
        let temp = target.join(format!(".{id}.{:08x}.open", rand::random::<u32>()));
        let access = self.config.lock.access;
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(access.file_mode())
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
        {
            // Private (or the group mode asked for) whatever the umask: the
            // mode and group are set on the descriptor before a byte is
            // written, and the published pack is this very inode.
            Ok(f) => match access.apply(std::os::fd::AsFd::as_fd(&f), false) {
                Ok(()) => f,
                Err(e) => {
                    drop(f);
                    let _ = std::fs::remove_file(&temp);
                    return Err(Error::io("set the mode and group of", &temp, e));
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::DirectoryVanished { dir: target })
            }
            Err(e) => return Err(Error::io("create", &temp, e)),
        };
        let written = file
            .write_all(bytes)
            .map_err(|e| Error::io("write", &temp, e))
            .and_then(|()| file.sync_all().map_err(|e| Error::io("fsync", &temp, e)));
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        pause_before_publish(&temp);
        let published = match std::fs::hard_link(&temp, &ready) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&temp);
                match same_contents(&ready, bytes) {
                    Ok(true) => false,
                    Ok(false) => {
                        let existing = std::fs::symlink_metadata(&ready)
                            .map(|m| m.len())
                            .unwrap_or(0);
                        return Err(Error::Conflict {
                            path: ready,
                            existing,
                            staged: bytes.len() as u64,
                        });
                    }
                    Err(e) => return Err(Error::io("compare with", &ready, e)),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = std::fs::remove_file(&temp);
                return Err(Error::DirectoryVanished { dir: target });
            }
            Err(e) => {
                let _ = std::fs::remove_file(&temp);
                return Err(Error::io("link", &ready, e));
            }
        };
        if published {
            if let Err(e) = std::fs::remove_file(&temp) {
                tracing::warn!(dir = %target.display(), "cannot remove temp file {}: {e}; recovery sweeps it", temp.display());
            }
        }
        fsync_dir(&target)?;
        Ok((ready, published))
    }
}

/// Compares a file with `bytes` without following a symlink.
fn same_contents(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut f = open_nofollow(path)?;
    if f.metadata()?.len() != bytes.len() as u64 {
        return Ok(false);
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0usize;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(at == bytes.len());
        }
        if at + n > bytes.len() || buf[..n] != bytes[at..at + n] {
            return Ok(false);
        }
        at += n;
    }
}
