//! The crash-safe spool directory (SPEC §4.2). See the crate docs ("The
//! spool directory") for the file names, the stage protocol, the accounting
//! and what each walk skips.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::layout::RankDirName;
use crate::lk::{self, Claim, LockMode, LockOptions, Purpose};
use crate::pack::{self, PackId, PackSummary};
use crate::Error;

/// Reserved for a future upload hand-off; no walk enters it.
pub const REFS_DIR: &str = "_refs";

/// How a [`Spool`] opens its directory.
#[derive(Debug, Clone, Default)]
pub struct SpoolConfig {
    /// Take the owner lock (default), or check that this process holds it.
    pub lock_mode: LockMode,
    /// Lock options (the shared-filesystem override reaches every check).
    pub lock: LockOptions,
    /// Byte budget of the directory (`None`: unbounded).
    pub max_bytes: Option<u64>,
    /// Charge what dead sibling rank directories hold against `max_bytes`
    /// (SPEC §4.2). Only meaningful for a rank directory of the layout.
    pub charge_dead_siblings: bool,
}

/// What a stage sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedPack {
    /// `<dir>[/w<k>]/<id>.ready`.
    pub path: PathBuf,
    /// The pack's id.
    pub id: PackId,
    /// Its size.
    pub bytes: u64,
}

/// A sealed pack found by a scan or a recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyPack {
    /// `<dir>[/w<k>]/<id>.ready`.
    pub path: PathBuf,
    /// The pack's id (its file name).
    pub id: PackId,
    /// Its size.
    pub bytes: u64,
    /// The worker ordinal whose subdirectory holds it (`None`: the top).
    pub ordinal: Option<u32>,
}

/// A pack set aside by recovery (or by [`Spool::quarantine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Its new path (`<id>.quarantined` or `<id>.rejected`).
    pub path: PathBuf,
    /// Its id.
    pub id: PackId,
    /// Why.
    pub reason: String,
}

/// What [`Spool::recover`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Temp files of dead writers that were removed.
    pub swept: Vec<PathBuf>,
    /// Packs that failed validation, now `<id>.quarantined`.
    pub quarantined: Vec<SetAside>,
    /// Packs that validated, still `<id>.ready`.
    pub valid: Vec<ReadyPack>,
}

/// One step of an incremental recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryStep {
    /// The pack validated.
    Valid(ReadyPack, PackSummary),
    /// The pack failed and was quarantined.
    Quarantined(SetAside),
}

/// An incremental recovery in progress ([`Spool::begin_recovery`]): the
/// listing of ready packs still to validate. Memory is one entry per pack
/// listed, never their bytes.
#[derive(Debug)]
pub struct Recovery {
    /// Temp files swept by `begin_recovery`.
    pub swept: Vec<PathBuf>,
    /// `.ready` entries that were not regular files (symlinks), quarantined
    /// by `begin_recovery`.
    pub set_aside: Vec<SetAside>,
    pending: VecDeque<ReadyPack>,
    finished: bool,
}

impl Recovery {
    /// Packs still to validate.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }
    /// Whether the last step ran (the account is rebuilt).
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

/// The byte account of a spool (what counts against `max_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of open, ready, quarantined and rejected files, as of the last
    /// walk plus what stages and removals have done since.
    pub committed: u64,
    /// Bytes reserved by stages in flight.
    pub reserved: u64,
    /// Bytes of dead siblings charged (0 without `charge_dead_siblings`).
    pub dead_sibling_bytes: u64,
}

impl Usage {
    /// Everything counted against the budget.
    pub fn used(&self) -> u64 {
        self.committed + self.reserved + self.dead_sibling_bytes
    }
}

/// Counts and bytes of each kind of file in a spool directory (for
/// `spool status`; read without the lock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirCounts {
    /// Sealed packs.
    pub ready: (u64, u64),
    /// Temp files (stages in flight, or torn by a crash).
    pub open: (u64, u64),
    /// Quarantined packs.
    pub quarantined: (u64, u64),
    /// Rejected packs.
    pub rejected: (u64, u64),
}

/// What [`verify_dir`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Packs that validated.
    pub valid: Vec<ReadyPack>,
    /// Packs that did not: path and reason.
    pub corrupt: Vec<(PathBuf, String)>,
}

/// The kind of a file in a spool directory, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `<id>.ready`
    Ready,
    /// `.<id>.<8 hex>.open`
    Open,
    /// `<id>.quarantined`
    Quarantined,
    /// `<id>.rejected`
    Rejected,
}

/// Classifies a file name; `None` for anything that is not a pack file
/// (those are never counted, swept, listed or removed).
pub fn classify(name: &str) -> Option<(FileKind, PackId)> {
    if let Some(rest) = name.strip_prefix('.') {
        let rest = rest.strip_suffix(".open")?;
        let (id, rand) = rest.split_once('.')?;
        if rand.len() != 8 || !rand.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        return Some((FileKind::Open, PackId::from_hex(id).ok()?));
    }
    let (id, ext) = name.split_once('.')?;
    let kind = match ext {
        "ready" => FileKind::Ready,
        "quarantined" => FileKind::Quarantined,
        "rejected" => FileKind::Rejected,
        _ => return None,
    };
    Some((kind, PackId::from_hex(id).ok()?))
}

/// The worker subdirectory name for an ordinal.
pub fn ordinal_dir_name(ordinal: u32) -> String {
    format!("w{ordinal}")
}

/// Parses a canonical worker subdirectory name (`w<decimal>`).
pub fn parse_ordinal_dir(name: &str) -> Option<u32> {
    let digits = name.strip_prefix('w')?;
    if digits.is_empty()
        || !digits.bytes().all(|c| c.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

/// One pack file met by a walk.
struct Entry {
    path: PathBuf,
    kind: FileKind,
    id: PackId,
    ordinal: Option<u32>,
    /// A regular file (not a symlink or anything else).
    regular: bool,
    len: u64,
}

/// Walks a spool directory: its pack files and those of its `w<k>/`
/// subdirectories. Skips `_refs/`, nested spools (a subdirectory with a
/// `.owner.lock` of its own), any other subdirectory, files that are not
/// pack files; never follows a symlink. `visit` returns `false` to stop.
fn walk(dir: &Path, mut visit: impl FnMut(Entry) -> Result<bool, Error>) -> Result<(), Error> {
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
            let Some((kind, id)) = classify(name) else {
                continue;
            };
            let regular = meta.file_type().is_file();
            let go_on = visit(Entry {
                path: entry.path(),
                kind,
                id,
                ordinal,
                regular,
                len: if regular { meta.len() } else { 0 },
            })?;
            if !go_on {
                return Ok(());
            }
        }
    }
    Ok(())
}

fn fsync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io("fsync directory", dir, e))
}

fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn rename_noreplace(from: &Path, to: &Path) -> Result<(), Error> {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE)
        .map_err(|e| Error::io("rename (no replace)", to, io::Error::from(e)))
}

/// Bytes of every pack file (open, ready, quarantined, rejected) under a
/// spool directory, with the walk's skips.
fn account(dir: &Path, mut skip: impl FnMut(&Entry) -> bool) -> Result<u64, Error> {
    let mut total = 0u64;
    walk(dir, |e| {
        if !skip(&e) {
            total += e.len;
        }
        Ok(true)
    })?;
    Ok(total)
}

/// A stage in flight in this [`Spool`] (the reconcile leaves its files to
/// the stage's own accounting).
#[derive(Debug, Default)]
struct Flight {
    count: u32,
    /// Bytes of a `.ready` of this id that a reconcile skipped.
    skipped_ready: u64,
}

#[derive(Debug, Default)]
struct State {
    committed: u64,
    reserved: u64,
    dead_sibling_bytes: u64,
    in_flight: HashMap<PackId, Flight>,
}

/// An open spool directory (SPEC §4.2).
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    config: SpoolConfig,
    claim: Option<Claim>,
    state: Mutex<State>,
}

impl Spool {
    /// Opens a spool directory: the node-local check, the owner lock per
    /// mode (`Take` creates the directory locked if it does not exist;
    /// `HeldByCaller` checks this process holds it), and the accounting
    /// walk (plus the dead-sibling charge when configured). Nothing else:
    /// recovery is explicit.
    pub fn open(dir: &Path, config: &SpoolConfig) -> Result<Spool, Error> {
        let dir = std::path::absolute(dir).map_err(|e| Error::io("resolve", dir, e))?;
        let parent = dir.parent().unwrap_or(&dir);
        lk::check_node_local(
            if dir.exists() { &dir } else { parent },
            config.lock.allow_shared_filesystem,
        )?;
        let claim = match config.lock_mode {
            LockMode::Take => Some(lk::acquire(&dir, &config.lock)?),
            LockMode::HeldByCaller => {
                lk::verify_held_by_caller(&dir, &config.lock)?;
                None
            }
        };
        let spool = Spool {
            dir,
            config: config.clone(),
            claim,
            state: Mutex::new(State::default()),
        };
        {
            let mut st = spool.state();
            spool.reconcile_locked(&mut st)?;
        }
        tracing::debug!(dir = %spool.dir.display(), usage = ?spool.usage(), "spool opened");
        Ok(spool)
    }

    /// Opens the directory of a claim this process holds (a rank directory
    /// from [`crate::layout::claim_rank_dir`]) and keeps the claim, as a
    /// `Take` open would: [`Spool::into_claim`] gives it back. The lock mode
    /// in `config` is ignored. On failure the claim is released and the
    /// directory removed if empty (the error is returned).
    pub fn open_claimed(claim: Claim, config: &SpoolConfig) -> Result<Spool, Error> {
        let mut held = config.clone();
        held.lock_mode = LockMode::HeldByCaller;
        match Spool::open(claim.dir(), &held) {
            Ok(mut spool) => {
                spool.config.lock_mode = LockMode::Take;
                spool.claim = Some(claim);
                Ok(spool)
            }
            Err(err) => {
                let dir = claim.dir().to_path_buf();
                if let Err(e) = claim.release_and_remove_if_empty() {
                    tracing::warn!(dir = %dir.display(), "releasing {} after a failed open: {e}", dir.display());
                }
                Err(err)
            }
        }
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The claim this spool took (mode `Take`), if any.
    pub fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Gives up the spool and returns its claim (mode `Take`), so the
    /// caller can release it (or keep it).
    pub fn into_claim(self) -> Option<Claim> {
        self.claim
    }

    /// The current account.
    pub fn usage(&self) -> Usage {
        let st = self.state();
        Usage {
            committed: st.committed,
            reserved: st.reserved,
            dead_sibling_bytes: st.dead_sibling_bytes,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

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

    fn reconcile_locked(&self, st: &mut State) -> Result<(), Error> {
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
                    tracing::warn!(dir = %self.dir.display(), used, budget, needed = n,
                        dead_sibling_bytes = st.dead_sibling_bytes, "spool full, stage refused");
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
        st.in_flight.entry(id).or_default().count += 1;
        Ok(())
    }

    /// Stages a sealed pack (SPEC §4.2): writes `.<id>.<rand>.open`
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
                match std::fs::create_dir(&sub) {
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
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
        {
            Ok(f) => f,
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
        seams::pause_before_publish(&temp);
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

    /// Lists the ready packs (regular files named `<id>.ready`, here and in
    /// `w<k>/`), in id order. Checks `cancel` between entries.
    pub fn scan(&self, cancel: &AtomicBool) -> Result<Vec<ReadyPack>, Error> {
        scan_dir(&self.dir, cancel)
    }

    /// Starts an incremental recovery: sweeps every `.open` temp file (not
    /// those of this spool's own stages in flight), sets aside a `.ready`
    /// that is not a regular file, and lists the ready packs without
    /// hashing them. Only for a directory whose lock this process holds and
    /// where no other `Spool` of this process is staging (the engine
    /// recovers before it opens its sinks).
    pub fn begin_recovery(&self) -> Result<Recovery, Error> {
        let mut swept = Vec::new();
        let mut pending = Vec::new();
        let mut odd = Vec::new();
        let mut touched = std::collections::BTreeSet::new();
        {
            let st = self.state();
            walk(&self.dir, |e| {
                match e.kind {
                    FileKind::Open if !st.in_flight.contains_key(&e.id) => {
                        match std::fs::remove_file(&e.path) {
                            Ok(()) => {}
                            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                            Err(err) => return Err(Error::io("remove", &e.path, err)),
                        }
                        tracing::info!(dir = %self.dir.display(), "swept temp file {}", e.path.display());
                        touched.insert(e.path.parent().map(Path::to_path_buf));
                        swept.push(e.path);
                    }
                    FileKind::Ready if e.regular => pending.push(ReadyPack {
                        path: e.path,
                        id: e.id,
                        bytes: e.len,
                        ordinal: e.ordinal,
                    }),
                    FileKind::Ready => odd.push(ReadyPack {
                        path: e.path,
                        id: e.id,
                        bytes: 0,
                        ordinal: e.ordinal,
                    }),
                    _ => {}
                }
                Ok(true)
            })?;
        }
        for d in touched.into_iter().flatten() {
            fsync_dir(&d)?;
        }
        let mut set_aside = Vec::new();
        for p in odd {
            set_aside.push(self.set_aside(
                &p,
                FileKind::Quarantined,
                "not a regular file (a symlink?)",
            )?);
        }
        pending.sort_by_key(|p| p.id);
        Ok(Recovery {
            swept,
            set_aside,
            pending: pending.into(),
            finished: false,
        })
    }

    /// Validates the next listed pack (one pack's hash per step, checking
    /// `cancel` every 8 MiB); a corrupt one is quarantined. `None` once
    /// every pack is done, after rebuilding the account. A cancelled or
    /// failing step keeps the pack at the front for the next call.
    pub fn continue_recovery(
        &self,
        rec: &mut Recovery,
        cancel: &AtomicBool,
    ) -> Result<Option<RecoveryStep>, Error> {
        while let Some(pack) = rec.pending.pop_front() {
            match validate_file(&pack.path, pack.id, cancel) {
                Ok(summary) => return Ok(Some(RecoveryStep::Valid(pack, summary))),
                Err(e) if e.is_corrupt() => {
                    let reason = e.to_string();
                    let aside = self.set_aside(&pack, FileKind::Quarantined, &reason)?;
                    return Ok(Some(RecoveryStep::Quarantined(aside)));
                }
                Err(Error::PackRead { source }) if source.kind() == io::ErrorKind::NotFound => {
                    continue; // removed since the listing
                }
                Err(e) => {
                    rec.pending.push_front(pack);
                    return Err(e);
                }
            }
        }
        if !rec.finished {
            self.reconcile()?;
            rec.finished = true;
        }
        Ok(None)
    }

    /// Recovers the whole directory in one call: [`begin_recovery`] and
    /// every [`continue_recovery`] step.
    ///
    /// [`begin_recovery`]: Spool::begin_recovery
    /// [`continue_recovery`]: Spool::continue_recovery
    pub fn recover(&self) -> Result<RecoveryReport, Error> {
        let never = AtomicBool::new(false);
        let mut rec = self.begin_recovery()?;
        let mut report = RecoveryReport::default();
        while let Some(step) = self.continue_recovery(&mut rec, &never)? {
            match step {
                RecoveryStep::Valid(p, _) => report.valid.push(p),
                RecoveryStep::Quarantined(q) => report.quarantined.push(q),
            }
        }
        report.swept = rec.swept;
        report.quarantined.extend(rec.set_aside);
        Ok(report)
    }

    /// Checks that `pack` names a ready pack of this spool by its id and
    /// ordinal (never trusting its path), and returns the path.
    fn own_path(&self, pack: &ReadyPack, kind: &str) -> Result<PathBuf, Error> {
        let base = match pack.ordinal {
            None => self.dir.clone(),
            Some(k) => self.dir.join(ordinal_dir_name(k)),
        };
        let path = base.join(format!("{}.{kind}", pack.id));
        if path != pack.path {
            return Err(Error::NotAPack {
                path: pack.path.clone(),
                dir: self.dir.clone(),
                why: "its path is not <dir>[/w<k>]/<id>.ready",
            });
        }
        Ok(path)
    }

    /// Removes a pack after it is uploaded and indexed. Refuses a path that
    /// is not exactly this spool's `<id>.ready`. Removing a pack that is
    /// already gone succeeds.
    pub fn remove(&self, pack: &ReadyPack) -> Result<(), Error> {
        let path = self.own_path(pack, "ready")?;
        let len = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => m.len(),
            Ok(_) => {
                return Err(Error::NotAPack {
                    path,
                    dir: self.dir.clone(),
                    why: "not a regular file",
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("stat", &path, e)),
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("remove", &path, e)),
        }
        fsync_dir(path.parent().unwrap_or(&self.dir))?;
        let mut st = self.state();
        st.committed = st.committed.saturating_sub(len);
        Ok(())
    }

    /// Renames a ready pack to `<id>.quarantined` (kept, counted, never
    /// listed or uploaded), logging the reason.
    pub fn quarantine(&self, pack: &ReadyPack, reason: &str) -> Result<SetAside, Error> {
        self.own_path(pack, "ready")?;
        self.set_aside(pack, FileKind::Quarantined, reason)
    }

    /// Renames a ready pack to `<id>.rejected` (the service's verdict on a
    /// pack that failed non-retryably: kept, counted; a person decides).
    pub fn reject(&self, pack: &ReadyPack, reason: &str) -> Result<SetAside, Error> {
        self.own_path(pack, "ready")?;
        self.set_aside(pack, FileKind::Rejected, reason)
    }

    fn set_aside(&self, pack: &ReadyPack, kind: FileKind, reason: &str) -> Result<SetAside, Error> {
        let ext = match kind {
            FileKind::Quarantined => "quarantined",
            FileKind::Rejected => "rejected",
            _ => unreachable!("only quarantine and reject set aside"),
        };
        let parent = pack.path.parent().unwrap_or(&self.dir).to_path_buf();
        let to = parent.join(format!("{}.{ext}", pack.id));
        rename_noreplace(&pack.path, &to)?;
        fsync_dir(&parent)?;
        tracing::warn!(dir = %self.dir.display(), "pack {} {ext}: {reason}", pack.path.display());
        Ok(SetAside {
            path: to,
            id: pack.id,
            reason: reason.to_string(),
        })
    }

    /// Removes every quarantined pack (an operator's decision). Returns how
    /// many and their bytes.
    pub fn purge_quarantined(&self) -> Result<(u64, u64), Error> {
        let mut found = Vec::new();
        walk(&self.dir, |e| {
            if e.kind == FileKind::Quarantined {
                found.push((e.path, e.len));
            }
            Ok(true)
        })?;
        let (mut count, mut bytes) = (0, 0);
        for (path, len) in found {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    count += 1;
                    bytes += len;
                    tracing::info!(dir = %self.dir.display(), "purged {}", path.display());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", &path, e)),
            }
            fsync_dir(path.parent().unwrap_or(&self.dir))?;
        }
        let mut st = self.state();
        st.committed = st.committed.saturating_sub(bytes);
        Ok((count, bytes))
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

/// Validates one pack file (not following a symlink) against the id its
/// name carries.
pub fn validate_file(path: &Path, id: PackId, cancel: &AtomicBool) -> Result<PackSummary, Error> {
    let file = open_nofollow(path).map_err(|source| Error::PackRead { source })?;
    pack::validate(file, Some(id), cancel).map_err(|e| e.for_pack(path.display()))
}

/// Lists the ready packs of a spool directory in id order (no lock taken).
pub fn scan_dir(dir: &Path, cancel: &AtomicBool) -> Result<Vec<ReadyPack>, Error> {
    let mut out = Vec::new();
    let mut cancelled = false;
    walk(dir, |e| {
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            return Ok(false);
        }
        if e.kind == FileKind::Ready {
            if e.regular {
                out.push(ReadyPack {
                    path: e.path,
                    id: e.id,
                    bytes: e.len,
                    ordinal: e.ordinal,
                });
            } else {
                tracing::warn!(dir = %dir.display(), "scan skips {}: not a regular file", e.path.display());
            }
        }
        Ok(true)
    })?;
    if cancelled {
        return Err(Error::Cancelled);
    }
    out.sort_by_key(|p| p.id);
    Ok(out)
}

/// Counts the files of each kind (no lock taken; for `spool status`).
pub fn inspect(dir: &Path) -> Result<DirCounts, Error> {
    let mut c = DirCounts::default();
    walk(dir, |e| {
        let slot = match e.kind {
            FileKind::Ready => &mut c.ready,
            FileKind::Open => &mut c.open,
            FileKind::Quarantined => &mut c.quarantined,
            FileKind::Rejected => &mut c.rejected,
        };
        slot.0 += 1;
        slot.1 += e.len;
        Ok(true)
    })?;
    Ok(c)
}

/// Where a [`verify_dir_with_progress`] is: packs and bytes checked so far
/// out of those listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyProgress {
    /// Packs checked (valid, corrupt, or gone since the listing).
    pub done: u64,
    /// Bytes of the packs checked.
    pub done_bytes: u64,
    /// Ready packs listed.
    pub total: u64,
    /// Bytes of the ready packs listed.
    pub total_bytes: u64,
}

/// Validates every ready pack without taking the lock or changing
/// anything (`spool verify`). A pack removed while this runs is skipped.
pub fn verify_dir(dir: &Path, cancel: &AtomicBool) -> Result<VerifyReport, Error> {
    verify_dir_with_progress(dir, cancel, |_| {})
}

/// [`verify_dir`], calling `progress` once after the listing and after
/// each pack (for progress bars on large directories).
pub fn verify_dir_with_progress(
    dir: &Path,
    cancel: &AtomicBool,
    mut progress: impl FnMut(VerifyProgress),
) -> Result<VerifyReport, Error> {
    let mut report = VerifyReport::default();
    let mut odd = Vec::new();
    walk(dir, |e| {
        if e.kind == FileKind::Ready && !e.regular {
            odd.push(e.path);
        }
        Ok(true)
    })?;
    for p in odd {
        report
            .corrupt
            .push((p, "not a regular file (a symlink?)".to_string()));
    }
    let packs = scan_dir(dir, cancel)?;
    let mut at = VerifyProgress {
        total: packs.len() as u64,
        total_bytes: packs.iter().map(|p| p.bytes).sum(),
        ..VerifyProgress::default()
    };
    progress(at);
    for pack in packs {
        at.done += 1;
        at.done_bytes += pack.bytes;
        let checked = validate_file(&pack.path, pack.id, cancel);
        progress(at);
        match checked {
            Ok(_) => report.valid.push(pack),
            Err(e) if e.is_corrupt() => {
                let reason = match e {
                    Error::CorruptPack { problem, .. } => problem.to_string(),
                    e => e.to_string(),
                };
                report.corrupt.push((pack.path, reason));
            }
            Err(Error::PackRead { source }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

/// Whether this process could take `dir` and empty it: it can list and
/// write the directory, and read and write its lock file if it has one.
fn could_take_and_empty(dir: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    let rwx = AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK;
    if access(dir, rwx).is_err() {
        return false;
    }
    let lock = dir.join(lk::LOCK_FILE_NAME);
    match std::fs::symlink_metadata(&lock) {
        Ok(_) => access(&lock, AccessFlags::R_OK | AccessFlags::W_OK).is_ok(),
        Err(_) => true,
    }
}

/// Why a sibling is or is not charged (see [`sibling_charge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiblingCharge {
    /// Nobody holds it, not blocked, and this process could take and empty
    /// it: an adoption can drain it. Charged.
    Dead,
    /// This process holds it as an adoption. Charged.
    AdoptedHere,
    /// Another live process holds it (its own budget). Not charged.
    LiveElsewhere,
    /// This process holds it as a claim (a kept claim). Not charged.
    KeptClaim,
    /// Marked blocked by an adopter. Not charged.
    Blocked,
    /// This process could not take or empty it (another user's). Not
    /// charged.
    NotOurs,
}

impl SiblingCharge {
    /// Whether its bytes count against the budget.
    pub fn charged(self) -> bool {
        matches!(self, SiblingCharge::Dead | SiblingCharge::AdoptedHere)
    }
}

/// Classifies one sibling rank directory for `charge_dead_siblings`.
pub fn sibling_charge(sibling: &Path) -> SiblingCharge {
    let status = match lk::read_owner(sibling) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(dir = %sibling.display(), "cannot probe sibling: {e}");
            return SiblingCharge::NotOurs;
        }
    };
    let purpose = status.record.as_ref().map(|r| &r.purpose);
    if status.held {
        let ours = lk::held_by_this_process(sibling).unwrap_or(false);
        return match (ours, purpose) {
            (true, Some(Purpose::Adopting)) => SiblingCharge::AdoptedHere,
            (true, _) => SiblingCharge::KeptClaim,
            (false, _) => SiblingCharge::LiveElsewhere,
        };
    }
    if let Some(Purpose::Blocked(_)) = purpose {
        return SiblingCharge::Blocked;
    }
    if !could_take_and_empty(sibling) {
        return SiblingCharge::NotOurs;
    }
    SiblingCharge::Dead
}

/// Bytes held by the charged siblings of a rank directory (0 when `dir` is
/// not a rank directory).
pub fn dead_sibling_bytes(dir: &Path) -> u64 {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return 0;
    };
    if RankDirName::parse(name).is_none() {
        return 0;
    }
    let Some(parent) = dir.parent() else { return 0 };
    let Ok(rd) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut total = 0;
    for entry in rd.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let name = entry.file_name();
        let rank_dir = name.to_str().and_then(RankDirName::parse).is_some();
        if !is_dir || !rank_dir || path == dir {
            continue;
        }
        let charge = sibling_charge(&path);
        if charge.charged() {
            total += account(&path, |_| false).unwrap_or(0);
        } else {
            tracing::trace!(dir = %path.display(), ?charge, "sibling not charged");
        }
    }
    total
}

/// The "pause before publish" test seam.
mod seams {
    use std::path::Path;

    #[cfg(any(test, feature = "testing"))]
    pub(super) static PAUSE: std::sync::Mutex<Option<std::path::PathBuf>> =
        std::sync::Mutex::new(None);

    /// Blocks a stage (its temp file written and fsynced, not published)
    /// until the configured release file exists.
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn pause_before_publish(temp: &Path) {
        let release = PAUSE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(release) = release {
            tracing::info!(temp = %temp.display(), release = %release.display(), "stage paused before publish");
            while !release.exists() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }

    #[cfg(not(any(test, feature = "testing")))]
    #[inline(always)]
    pub(super) fn pause_before_publish(_temp: &Path) {}
}

/// Makes every later stage in this process pause just before its publish
/// (temp file written and fsynced) until `release_file` exists, or stops
/// pausing (`None`). A test seam: in a build without the `testing` feature
/// it returns [`Error::NoTestSeams`].
pub fn set_pause_before_publish(release_file: Option<&Path>) -> Result<(), Error> {
    #[cfg(any(test, feature = "testing"))]
    {
        *seams::PAUSE.lock().unwrap_or_else(PoisonError::into_inner) =
            release_file.map(Path::to_path_buf);
        Ok(())
    }
    #[cfg(not(any(test, feature = "testing")))]
    {
        let _ = release_file;
        Err(Error::NoTestSeams {
            seam: "pause before publish",
        })
    }
}

#[cfg(test)]
#[path = "spool_tests.rs"]
mod tests;
