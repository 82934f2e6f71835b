//! The threads of a crash run: the readers of each process's stdout
//! (`ID SHA256` per durable pack) and stderr, the monitor of live owners'
//! directories (a change nobody but the owner may make is a problem), the
//! watch of dead owners' directories for the `.open` rule ([`crate::opens`])
//! and the watch of the catalog (a row read before its object is a
//! problem). What they find goes into [`Shared`].

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::destination::{Catalog, StoreAt};
use crate::figures::Figures;
use crate::{hex, opens, walk_files};
use spool_core::spool::REFS_DIR;

/// A digest of one file of a live directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sig {
    size: u64,
    mtime_ns: i128,
    sha: [u8; 32],
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sha = hex(&self.sha);
        write!(
            f,
            "{} bytes, mtime {} ns, sha256 {}",
            self.size,
            self.mtime_ns,
            &sha[..16]
        )
    }
}

/// A live owner, as the monitor watches it.
#[derive(Default)]
pub struct Owner {
    /// Its rank directory (from its stderr).
    dir: Option<PathBuf>,
    /// It lives (the scheduler has not signalled it, it has not finished).
    live: bool,
    /// Its files may not disappear (no service of its own removes them).
    check_lost: bool,
    /// Its `.open` files are stages in flight that may not disappear.
    paused: bool,
    /// Packs it will report before it exits by itself (sink-only).
    expect: Option<u64>,
    reported: u64,
    last: Option<BTreeMap<PathBuf, Sig>>,
    pid: u32,
    /// What it is, for reports.
    what: String,
    /// Once dead: its directory's adoptions, for the `.open` rule.
    watch: opens::Watch,
    /// Dead and its directory gone (or the rule reported): no more looks.
    settled: bool,
    /// Its packs (`[w<k>/]<id>.ready`) at the last hand-off look.
    ready_seen: BTreeSet<PathBuf>,
    /// `.open` files of a paused owner that disappeared while it lived:
    /// judged once its log is complete ([`Board::paused_opens_gone`]).
    opens_gone: Vec<PathBuf>,
}

/// What [`Board`] holds.
#[derive(Default)]
struct Shared {
    /// pack id → (sha256, reporting process).
    durable: BTreeMap<String, (String, usize)>,
    owners: BTreeMap<usize, Owner>,
    problems: Vec<String>,
    live_touched: u64,
    duplicates: u64,
    /// Catalog rows seen (while the run went on) before their object.
    early_rows: BTreeSet<String>,
    /// Adoptions seen past their sweep ([`Figures::adoptions_swept`]).
    adoptions_swept: u64,
    /// Handed-off packs (and their refs) gone from a live sink-only
    /// owner's directory: its owner removes each once the shipper confirmed
    /// its row, so each must be indexed ([`Board::handed_off_gone`]).
    handed_off_gone: Vec<(String, String)>,
    /// Packs (`.ready`) seen released by a live owner after their
    /// confirmation, and how many of them while a fault window was open.
    handed_off: BTreeSet<String>,
    handed_off_in_faults: u64,
    /// Refs seen appear in live owners' directories (consents), and how
    /// many of them while a fault window was open.
    refs_published: u64,
    refs_in_faults: u64,
    /// A fault window is open on some proxy (set by the scheduler).
    fault_open: bool,
}

impl Owner {
    /// A producer just started: live, watched as `what` says.
    pub fn new(
        pid: u32,
        what: String,
        check_lost: bool,
        paused: bool,
        expect: Option<u64>,
    ) -> Owner {
        Owner {
            live: true,
            check_lost,
            paused,
            expect,
            pid,
            what,
            ..Owner::default()
        }
    }
}

/// What the reader and monitor threads share with the scheduler, behind
/// one lock.
#[derive(Clone, Default)]
pub struct Board(Arc<Mutex<Shared>>);

impl Board {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a broken rule.
    pub fn problem(&self, p: String) {
        self.lock().problems.push(p);
    }

    /// Records broken rules.
    pub fn problems(&self, ps: Vec<String>) {
        self.lock().problems.extend(ps);
    }

    /// Whether a rule broke so far.
    pub fn failed(&self) -> bool {
        !self.lock().problems.is_empty()
    }

    /// Watches process `i` as a live owner.
    pub fn add_owner(&self, i: usize, owner: Owner) {
        self.lock().owners.insert(i, owner);
    }

    /// Process `i` is no live owner any more (signalled or exited).
    pub fn owner_gone(&self, i: usize) {
        if let Some(o) = self.lock().owners.get_mut(&i) {
            o.live = false;
        }
    }

    /// Process `i`'s paused stage was released: its `.open` may go.
    pub fn unpaused(&self, i: usize) {
        if let Some(o) = self.lock().owners.get_mut(&i) {
            o.paused = false;
        }
    }

    /// Handed-off files gone from live owners' directories: (pack id, what
    /// the monitor saw). Each pack must be indexed: its owner removes it
    /// only once the shipper confirmed its row.
    pub fn handed_off_gone(&self) -> Vec<(String, String)> {
        self.lock().handed_off_gone.clone()
    }

    /// Whether a fault window is open (the scheduler says, each tick).
    pub fn set_fault_open(&self, open: bool) {
        self.lock().fault_open = open;
    }

    /// What producers reported durable: pack id → (sha256, process).
    pub fn durable(&self) -> BTreeMap<String, (String, usize)> {
        self.lock().durable.clone()
    }

    /// `.open` files of paused owners that disappeared while they lived:
    /// (process, path). Each is a touch of a live writer's file unless the
    /// owner's own log says it gave that stage up.
    pub fn paused_opens_gone(&self) -> Vec<(usize, PathBuf)> {
        let s = self.lock();
        s.owners
            .iter()
            .flat_map(|(i, o)| o.opens_gone.iter().map(|p| (*i, p.clone())))
            .collect()
    }

    /// A live owner's file touched by someone else (found after the run).
    pub fn live_touched(&self, problem: String) {
        let mut s = self.lock();
        s.live_touched += 1;
        s.problems.push(problem);
    }

    /// Adds what the threads counted to a run's `figures`; returns the
    /// rules broken.
    pub fn tally(&self, figures: &mut Figures) -> Vec<String> {
        let s = self.lock();
        figures.packs = s.durable.len() as u64;
        figures.live_touched = s.live_touched;
        figures.rows_before_object = s.early_rows.len() as u64;
        figures.adoptions_swept = s.adoptions_swept;
        figures.handed_off = s.handed_off.len() as u64;
        figures.handed_off_in_faults = s.handed_off_in_faults;
        figures.refs_published = s.refs_published;
        figures.refs_in_faults = s.refs_in_faults;
        figures.duplicates += s.duplicates;
        s.problems.clone()
    }
}

/// A producer's stdout: `ID SHA256` per durable pack.
pub fn read_reports(
    out: impl Read,
    i: usize,
    shared: &Board,
    last: &Mutex<(u64, Option<Instant>)>,
) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let mut parts = line.split_whitespace();
        let (Some(id), Some(sha)) = (parts.next(), parts.next()) else {
            continue;
        };
        {
            let mut l = last.lock().unwrap_or_else(|e| e.into_inner());
            *l = (l.0 + 1, Some(Instant::now()));
        }
        let mut s = shared.lock();
        if let Some((_, other)) = s.durable.get(id) {
            let other = *other;
            s.duplicates += 1;
            s.problems
                .push(format!("pack id {id} reported by #{other} and #{i}"));
        }
        s.durable.insert(id.to_string(), (sha.to_string(), i));
        if let Some(o) = s.owners.get_mut(&i) {
            o.reported += 1;
            // a sink-only producer's last pack: it lets go next
            if o.expect == Some(o.reported) {
                o.live = false;
            }
        }
    }
}

/// A process's stderr: kept (for reports), and the rank directory it
/// claimed noted for the monitor.
pub fn read_stderr(err: impl Read, i: usize, shared: &Board, buf: &Mutex<String>) {
    for line in BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        if let Some(dir) = line.strip_prefix("spool: rank directory ") {
            if let Some(o) = shared.lock().owners.get_mut(&i) {
                o.dir = Some(PathBuf::from(dir.trim()));
            }
        }
        let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() < 1 << 20 {
            b.push_str(&line);
            b.push('\n');
        }
    }
}

/// Digests every live owner's directory until `stop`, recording changes
/// only the owner may make.
pub fn monitor(shared: &Board, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let watched: Vec<(usize, PathBuf)> = shared
            .lock()
            .owners
            .iter()
            .filter(|(_, o)| o.live)
            .filter_map(|(i, o)| o.dir.clone().map(|d| (*i, d)))
            .collect();
        for (i, dir) in watched {
            let now = digest(&dir);
            let mut s = shared.lock();
            let Some(o) = s.owners.get_mut(&i) else {
                continue;
            };
            // dead since the digest began: whatever changed is not a touch
            if !o.live {
                continue;
            }
            let mut touched = Vec::new();
            let mut handed_off = Vec::new();
            if let (Some(now), true) = (&now, o.check_lost) {
                // only the owner creates files in its directory, and only
                // of its own kinds: a confirmation (or a renamed file) in
                // it is someone else's
                touched.extend(now.keys().filter(|n| !owners_kind(n)).map(|n| {
                    format!(
                        "{} appeared: not a file its owner makes (a confirmation belongs under <key>/{}/)",
                        dir.join(n).display(),
                        spool_core::handoff::SHIPPED_DIR
                    )
                }));
            }
            if let Some(before) = &o.last {
                match &now {
                    None if o.check_lost => {
                        touched.push(format!("directory {} vanished", dir.display()))
                    }
                    None => {}
                    Some(now) => {
                        for (name, sig) in before {
                            let is_open = name.to_string_lossy().ends_with(".open");
                            match now.get(name) {
                                // a stage its owner is still writing
                                // (seen mid-write: it only grows)
                                Some(n) if is_open && n.size >= sig.size && n != sig => {}
                                Some(n) if n != sig => touched.push(format!(
                                    "{} changed ({sig} -> {n})",
                                    dir.join(name).display()
                                )),
                                Some(_) => {}
                                None if is_open && !o.paused => {}
                                // a sink-only owner hands off: it removes a
                                // pack (then its ref) once confirmed
                                None if o.check_lost && handed_off_id(name).is_some() => handed_off
                                    .push((
                                        handed_off_id(name).unwrap_or_default(),
                                        format!("{} disappeared", dir.join(name).display()),
                                        name.extension().is_some_and(|e| e == "ready"),
                                    )),
                                // a paused owner's stage that failed (a
                                // full disk) goes by its own hand: judged
                                // against its log once it is complete
                                None if is_open && o.paused => {
                                    o.opens_gone.push(dir.join(name));
                                }
                                None if o.check_lost || is_open => touched
                                    .push(format!("{} disappeared", dir.join(name).display())),
                                None => {}
                            }
                        }
                    }
                }
            }
            // consents published since the last digest
            let refs = match (&o.last, &now) {
                (Some(before), Some(now)) => now
                    .keys()
                    .filter(|n| !before.contains_key(*n) && n.starts_with(REFS_DIR))
                    .count() as u64,
                _ => 0,
            };
            let (pid, what) = (o.pid, o.what.clone());
            if now.is_some() {
                o.last = now;
            }
            // An owner that died by itself (an engine's kill point) may be
            // adopted before the scheduler reaps it: a change seen once it
            // is gone is no touch of a live owner's files.
            let died = !touched.is_empty() && !process_alive(pid);
            if died {
                o.live = false;
            }
            s.refs_published += refs;
            if s.fault_open {
                s.refs_in_faults += refs;
            }
            for (id, seen, ready) in handed_off {
                if ready && !died && s.handed_off.insert(id.clone()) && s.fault_open {
                    s.handed_off_in_faults += 1;
                }
                s.handed_off_gone
                    .push((id, format!("live directory of #{i} {what}: {seen}")));
            }
            if died {
                continue;
            }
            if !touched.is_empty() {
                s.live_touched += touched.len() as u64;
                for t in touched {
                    s.problems.push(format!(
                        "live directory of #{i} {what} (pid {pid}, alive): {t}"
                    ));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(40));
    }
}

/// The pack id of a handed-off file: `[w<k>/]<id>.ready` or
/// `_refs/[w<k>.]<id>.ref`.
fn handed_off_id(name: &Path) -> Option<String> {
    let file = name.file_name()?.to_str()?;
    if let Some(id) = file.strip_suffix(".ready") {
        return Some(id.to_string());
    }
    let in_refs = name
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "_refs");
    spool_core::handoff::parse_ref_name(file)
        .filter(|_| in_refs)
        .map(|(_, id)| id.to_hex())
}

/// Whether `name` (relative to a live owner's directory) is a file its
/// owner makes: its lock file, a pack or a stage in flight (at the top or
/// under `w<k>/`), or a ref under `_refs/`.
pub(crate) fn owners_kind(name: &Path) -> bool {
    use spool_core::spool::{file_kind, parse_ordinal_dir, FileKind, REFS_DIR};
    let parts: Vec<&str> = name.iter().filter_map(|c| c.to_str()).collect();
    let pack = |f: &str| matches!(file_kind(f), Some((FileKind::Ready | FileKind::Open, _)));
    match parts.as_slice() {
        [".owner.lock"] => true,
        [f] => pack(f),
        [w, f] if parse_ordinal_dir(w).is_some() => pack(f),
        [refs, f] if *refs == REFS_DIR => spool_core::handoff::parse_ref_name(f).is_some(),
        _ => false,
    }
}

/// A pack `name` seen gone from live owner `dir` by `seen_gone` that was
/// removed before the shipper confirmed it (by someone else, or by its
/// owner breaking the hand-off's rule): its confirmation was made after
/// `seen_gone` (its mtime, which the kernel's coarse clock never puts
/// later than the truth), or there is none while its ref is still there.
///
/// Sound without a snapshot of both: the pack was seen gone before the
/// confirmation is looked for, and the ref is looked for after that. The
/// protocol orders confirmation < pack removed < ref removed <
/// confirmation collected, so a ref still there now means the
/// confirmation was still there when looked for.
pub(crate) fn unconfirmed_release(
    dir: &Path,
    name: &Path,
    seen_gone: std::time::SystemTime,
) -> Option<String> {
    use spool_core::handoff::{confirmations_dir, ref_name};
    let file = name.file_name()?.to_str()?;
    let id = spool_core::PackId::from_hex(file.strip_suffix(".ready")?).ok()?;
    let ordinal = match name.parent().and_then(Path::to_str) {
        Some("") | None => None,
        Some(w) => Some(spool_core::spool::parse_ordinal_dir(w)?),
    };
    let r = ref_name(ordinal, id);
    let confirmation = confirmations_dir(dir).join(&r);
    let made = std::fs::symlink_metadata(&confirmation).map(|m| m.modified());
    let early = match made {
        Ok(Ok(made)) if made > seen_gone => format!(
            "its confirmation {} was made {:?} after the pack was seen gone",
            confirmation.display(),
            made.duration_since(seen_gone).unwrap_or_default()
        ),
        Ok(_) => return None,
        Err(_) if dir.join(spool_core::spool::REFS_DIR).join(&r).exists() => format!(
            "its ref is still there and no confirmation of it is in {}",
            confirmations_dir(dir).display()
        ),
        Err(_) => return None,
    };
    Some(format!(
        "{} disappeared before its confirmation: {early}",
        dir.join(name).display()
    ))
}

/// Looks at every dead owner's directory every 5 ms until `stop` (names
/// only, so a look is cheap and an adoption's drain is seen mid-way), and
/// at every live sink-only owner's packs ([`watch_hand_offs`]).
pub fn watch_adoptions(shared: &Board, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        watch_dead(shared);
        watch_hand_offs(shared);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One look at the packs of every live sink-only owner (names only): a
/// pack gone since the last look must have been confirmed before it went
/// ([`unconfirmed_release`]).
fn watch_hand_offs(shared: &Board) {
    let live: Vec<(usize, PathBuf)> = shared
        .lock()
        .owners
        .iter()
        .filter(|(_, o)| o.live && o.check_lost)
        .filter_map(|(i, o)| o.dir.clone().map(|d| (*i, d)))
        .collect();
    for (i, dir) in live {
        let now = ready_names(&dir);
        let listed = std::time::SystemTime::now();
        let gone: Vec<PathBuf> = {
            let mut s = shared.lock();
            let Some(o) = s.owners.get_mut(&i) else {
                continue;
            };
            let before = std::mem::replace(&mut o.ready_seen, now);
            before
                .into_iter()
                .filter(|n| !o.ready_seen.contains(n))
                .collect()
        };
        let early: Vec<String> = gone
            .iter()
            .filter_map(|n| unconfirmed_release(&dir, n, listed))
            .collect();
        if early.is_empty() {
            continue;
        }
        let mut s = shared.lock();
        let Some(o) = s.owners.get_mut(&i) else {
            continue;
        };
        // signalled meanwhile, or dead by itself (adopted): not a live
        // owner's directory any more
        if !o.live || !process_alive(o.pid) {
            continue;
        }
        let (pid, what) = (o.pid, o.what.clone());
        s.live_touched += early.len() as u64;
        for e in early {
            s.problems.push(format!(
                "live directory of #{i} {what} (pid {pid}, alive): {e}"
            ));
        }
    }
}

/// The packs of `dir` (`<id>.ready` and `w<k>/<id>.ready`), relative.
fn ready_names(dir: &Path) -> BTreeSet<PathBuf> {
    use spool_core::spool::{file_kind, parse_ordinal_dir, FileKind};
    let mut out = BTreeSet::new();
    let ready = |n: &str| matches!(file_kind(n), Some((FileKind::Ready, _)));
    for p in crate::read_dir(dir) {
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if ready(name) {
            out.insert(PathBuf::from(name));
        } else if parse_ordinal_dir(name).is_some() {
            for q in crate::read_dir(&p) {
                if let Some(f) = q.file_name().and_then(|n| n.to_str()).filter(|f| ready(f)) {
                    out.insert(Path::new(name).join(f));
                }
            }
        }
    }
    out
}

/// One look at every dead owner's directory (names only): once an
/// adopter has removed one of its ready packs, no `.open` may be left in
/// it ([`opens`]).
fn watch_dead(shared: &Board) {
    let dead: Vec<(usize, PathBuf)> = shared
        .lock()
        .owners
        .iter()
        .filter(|(_, o)| !o.live && !o.settled)
        .filter_map(|(i, o)| o.dir.clone().map(|d| (*i, d)))
        .collect();
    for (i, dir) in dead {
        let look = opens::look(&dir);
        let mut s = shared.lock();
        let Some(o) = s.owners.get_mut(&i) else {
            continue;
        };
        let pid = o.pid;
        let what = o.what.clone();
        match o.watch.see(pid, look) {
            opens::Seen::Nothing => {}
            opens::Seen::Gone => o.settled = true,
            opens::Seen::Swept { .. } => s.adoptions_swept += 1,
            opens::Seen::Outlived { pid: adopter, open } => {
                o.settled = true;
                let names: Vec<String> = open.iter().map(|f| f.display().to_string()).collect();
                s.problems.push(format!(
                    "a `.open` outlived its owner past one adoption: {} of dead #{i} {what} (pid {pid}) \
                     still holds {} after its adopter (pid {adopter} in the owner record) removed a ready pack or blocked it with none left: \
                     that adopter's recovery should have swept it",
                    dir.display(),
                    names.join(", ")
                ));
            }
        }
    }
}

/// Whether `pid` runs (exists and is not a zombie).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Reads the catalog (`spool ls --json`) over and over while the run goes
/// on: a row is only ever inserted after its object is durable, so every
/// row read must have its object already (rows are read first, objects
/// looked at after).
pub fn watch_catalog(catalog: &Catalog, store: &StoreAt, shared: &Board, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(250));
        // not created yet, or busy: the next read tells
        let Ok(rows) = catalog.rows() else {
            continue;
        };
        for row in rows {
            if !store.has(&row.object_key) {
                let mut s = shared.lock();
                if s.early_rows.insert(row.pack_id.clone()) {
                    s.problems.push(format!(
                        "catalog row {} was read while its object {} was not in the store",
                        row.pack_id, row.object_key
                    ));
                }
            }
        }
    }
}

/// A regular file's metadata and bytes, opened without following a link
/// or blocking; `None` for anything else, or when it is gone.
fn read_regular(f: &Path) -> Option<(std::fs::Metadata, Vec<u8>)> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(f)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some((meta, bytes))
}

/// Every regular file under `dir` (relative path → digest), or `None` if
/// `dir` is gone.
fn digest(dir: &Path) -> Option<BTreeMap<PathBuf, Sig>> {
    if !dir.is_dir() {
        return None;
    }
    let mut files = Vec::new();
    walk_files(dir, &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        // a link, FIFO or device is a plant (plants.rs), never an owner's
        // file: never followed, never opened (a FIFO would block)
        let Some((meta, bytes)) = read_regular(&f) else {
            continue; // gone between the listing and now: next round says
        };
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        let rel = f.strip_prefix(dir).unwrap_or(&f).to_path_buf();
        out.insert(
            rel,
            Sig {
                size: meta.len(),
                mtime_ns,
                sha: Sha256::digest(&bytes).into(),
            },
        );
    }
    Some(out)
}
