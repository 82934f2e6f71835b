//! Staging a sealed pack (temp file, fsync, `link()`, directory fsync), the
//! reservation and the committed account.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use nix::errno::Errno;

use super::charge::dead_sibling_bytes;
use super::names::{ordinal_dir_name, FileKind};
use super::pause::pause_before_publish;
use super::walk::account;
use super::{Spool, StagedPack, State, Usage};
use crate::at::AtDir;
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
    ///
    /// Every step is relative to the directory's descriptor: the spool
    /// directory is opened by its path and must be the very directory this
    /// spool opened (its device and inode), so a link or another directory
    /// put at its path is never staged into; `w<k>/`, the temp file and
    /// the published name are made relative to it, never through a link.
    /// Right before the publish the directory must still be at its path:
    /// one moved away or replaced meanwhile gets nothing published
    /// (removed, [`Error::DirectoryVanished`]; a file there, the link's
    /// error).
    fn stage_files(
        &self,
        ordinal: Option<u32>,
        id: PackId,
        bytes: &[u8],
    ) -> Result<(PathBuf, bool), Error> {
        let access = self.config.lock.access;
        let own = match AtDir::open_path(&self.dir) {
            Ok(d) if d.identity()? == self.identity => d,
            Ok(_) | Err(Errno::ENOENT) => {
                return Err(Error::DirectoryVanished {
                    dir: self.dir.clone(),
                })
            }
            Err(e) => {
                let at = match ordinal {
                    None => self.dir.join(format!(".{id}.open")),
                    Some(k) => self.dir.join(ordinal_dir_name(k)),
                };
                return Err(Error::io("create", &at, e.into()));
            }
        };
        let target = match ordinal {
            None => own,
            Some(k) => {
                let name = ordinal_dir_name(k);
                match own.ensure_dir(&name, &access) {
                    Ok((sub, created)) => {
                        if created {
                            own.sync()?;
                        }
                        sub
                    }
                    Err(e) if e.is_unexpected_entry() => {
                        return Err(Error::NotAPack {
                            path: self.dir.join(&name),
                            dir: self.dir.clone(),
                            why: "the worker subdirectory is not a directory (a symlink?)",
                        })
                    }
                    Err(e) if e.is_not_found() => {
                        return Err(Error::DirectoryVanished {
                            dir: self.dir.clone(),
                        })
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let ready_name = format!("{id}.ready");
        let ready = target.join(&ready_name);
        let temp_name = format!(".{id}.{:08x}.open", rand::random::<u32>());
        let temp = target.join(&temp_name);
        let forget_temp = || {
            let _ = target.remove_file(&temp_name);
        };
        let mut file = match target.create_new(temp_name.as_ref(), access.file_mode()) {
            // Private (or the group mode asked for) whatever the umask: the
            // mode and group are set on the descriptor before a byte is
            // written, and the published pack is this very inode.
            Ok(f) => match access.apply(std::os::fd::AsFd::as_fd(&f), false) {
                Ok(()) => f,
                Err(e) => {
                    drop(f);
                    forget_temp();
                    return Err(Error::io("set the mode and group of", &temp, e));
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::DirectoryVanished {
                    dir: target.path().to_path_buf(),
                })
            }
            Err(e) => return Err(Error::io("create", &temp, e)),
        };
        let written = file
            .write_all(bytes)
            .map_err(|e| Error::io("write", &temp, e))
            .and_then(|()| file.sync_all().map_err(|e| Error::io("fsync", &temp, e)));
        drop(file);
        if let Err(e) = written {
            forget_temp();
            return Err(e);
        }
        pause_before_publish(&temp);
        // still at its path? (a stage never publishes into a directory moved
        // away or replaced while it wrote)
        match AtDir::open_path(target.path()) {
            Ok(d) if d.identity()? == target.identity()? => {}
            Ok(_) | Err(Errno::ENOENT) => {
                forget_temp();
                return Err(Error::DirectoryVanished {
                    dir: target.path().to_path_buf(),
                });
            }
            Err(e) => {
                forget_temp();
                return Err(Error::io("link", &ready, e.into()));
            }
        }
        let published = match target.link_new(temp_name.as_ref(), ready_name.as_ref()) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                forget_temp();
                match same_contents(&target, &ready_name, bytes) {
                    Ok(true) => false,
                    Ok(false) => {
                        let existing = target
                            .stat(&ready_name)
                            .ok()
                            .flatten()
                            .map_or(0, |(_, len)| len);
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
                forget_temp();
                return Err(Error::DirectoryVanished {
                    dir: target.path().to_path_buf(),
                });
            }
            Err(e) => {
                forget_temp();
                return Err(Error::io("link", &ready, e));
            }
        };
        if published {
            if let Err(e) = target.remove_file(&temp_name) {
                tracing::warn!(dir = %target.path().display(), "cannot remove temp file {}: {e}; recovery sweeps it", temp.display());
            }
        }
        target.sync()?;
        Ok((ready, published))
    }
}

/// Compares the file `name` in `dir` with `bytes` without following a
/// symlink or blocking.
fn same_contents(dir: &AtDir, name: &str, bytes: &[u8]) -> io::Result<bool> {
    let mut f = dir.open_read(name.as_ref())?;
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
