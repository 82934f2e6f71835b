//! The hand-off: a live sink-only owner consents, pack by pack, to the
//! node's shipper (the daemon holding the node's adopter lease) shipping
//! its packs, and removes each one itself once the daemon confirmed its
//! row. Nobody but the owner creates, renames or removes a file in the
//! owner's directory.
//!
//! # Files
//!
//! ```text
//! <key>/<rank>/_refs/<id>.ref                 consent (the owner's; empty)
//! <key>/<rank>/_refs/w<k>.<id>.ref            consent for w<k>/<id>.ready
//! <key>/_shipped/<rank>/<ref name>            confirmation (the daemon's; empty)
//! <key>/_shipped/.shipper                      the serving daemon's rank directory name
//! ```
//!
//! A ref's name says which pack it consents to (its ordinal and id), so a
//! ref is created whole, with no content to read half-written. The
//! confirmation of a pack bears its ref's name, in a directory beside the
//! rank directories (not a rank directory: no walk, sibling listing or
//! adoption ever takes it for one), so the daemon writes nothing into the
//! owner's directory.
//!
//! # The protocol, and why no crash loses or duplicates a pack
//!
//! 1. **Owner** stages `<id>.ready` (durable: linked and its directory
//!    fsynced), then creates its ref ([`Spool::consent`]). No fsync: a ref
//!    a crash loses only means the pack is not consented, and a crashed
//!    owner's directory is adopted whole anyway.
//! 2. **Daemon** lists the refs of a live owner ([`list_consented`]),
//!    skips those already confirmed, reads each pack read-only (never
//!    following a symlink, never outside the owner's directory), validates,
//!    uploads and indexes it through its own drain and fence.
//! 3. **Daemon**, once the catalog answered `Ok` to the row, creates the
//!    confirmation and fsyncs its directory ([`confirm`]).
//! 4. **Owner** reads its confirmations ([`Spool::release_confirmed`]),
//!    removes each confirmed pack (then its ref): the row is in the
//!    catalog and the object in the store.
//! 5. **Daemon** removes a confirmation whose ref is gone
//!    ([`collect_confirmations`]).
//!
//! A crash of the owner before 4 leaves its directory to adoption, which
//! first settles the hand-off ([`Spool::settle_hand_off`]): packs with a
//! confirmation are removed, never uploaded or indexed again; the refs and
//! confirmations go; the rest is adopted as any dead sibling's. A crash of
//! the daemon before 3 leaves the pack consented and unconfirmed: the next
//! daemon ships it again (the store finds the object there, the catalog
//! keeps one row per pack id). Between 3 and 4 the owner holds a confirmed
//! pack: it removes it on its next look, or adoption does.
//!
//! The crash torture kills each side at each step (spool-core's `seams`:
//! `after_consent`, `before_confirm`, `after_confirm`, `before_release`,
//! `after_release`).
//!
//! # What each side may touch
//!
//! | | owner's directory | `_shipped/<rank>/` |
//! |---|---|---|
//! | owner | everything (it owns it) | reads |
//! | daemon | reads `_refs/` and consented packs | creates, removes |
//! | adopter (holds the lock) | everything | removes |

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::pack::PackId;
use crate::spool::{ordinal_dir_name, parse_ordinal_dir, ReadyPack, Spool, REFS_DIR};
use crate::Error;

/// The directory beside the rank directories (under the catalog key) that
/// holds the daemon's confirmations, one subdirectory per owner.
pub const SHIPPED_DIR: &str = "_shipped";

/// The file under `<key>/_shipped/` that names the rank directory of the
/// daemon serving the owners under the key (one line: its name), for
/// operators (`spool status`, `spool lock owner`); whoever reads it checks
/// that directory is live, since a killed daemon leaves it behind.
pub const SHIPPER_FILE: &str = ".shipper";

/// The daemon of `own_dir` records that it serves the owners beside it
/// (written whole: a temp file renamed over the last).
pub fn record_shipper(own_dir: &Path) -> Result<(), Error> {
    let Some(key_dir) = own_dir.parent() else {
        return Ok(());
    };
    let shipped = key_dir.join(SHIPPED_DIR);
    make_dir(&shipped)?;
    let name = own_dir.file_name().unwrap_or_default().to_string_lossy();
    let tmp = shipped.join(format!("{SHIPPER_FILE}.{}", std::process::id()));
    std::fs::write(&tmp, format!("{name}\n")).map_err(|e| Error::io("write", &tmp, e))?;
    let to = shipped.join(SHIPPER_FILE);
    std::fs::rename(&tmp, &to).map_err(|e| Error::io("rename", &to, e))
}

/// The daemon of `own_dir` no longer serves: its record goes (if it is
/// still the one recorded), and `_shipped/` with it once empty.
pub fn forget_shipper(own_dir: &Path) {
    let Some(key_dir) = own_dir.parent() else {
        return;
    };
    if shipper_of(key_dir).as_deref() == Some(own_dir) {
        clear_shipper(key_dir);
    }
}

/// Removes the record of the owners' shipper under `key_dir`, whoever it
/// names (the lease holder serving no owner clears one a killed daemon
/// left), and `_shipped/` with it once empty.
pub fn clear_shipper(key_dir: &Path) {
    let shipped = key_dir.join(SHIPPED_DIR);
    let _ = std::fs::remove_file(shipped.join(SHIPPER_FILE));
    let _ = std::fs::remove_dir(&shipped);
}

/// The rank directory the last daemon to serve the owners under `key_dir`
/// recorded, if any (not checked to be live).
pub fn shipper_of(key_dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(key_dir.join(SHIPPED_DIR).join(SHIPPER_FILE)).ok()?;
    let name = text.lines().next()?.trim();
    let plain = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    plain.then(|| key_dir.join(name))
}

/// The name of the ref consenting to pack `id` (under `w<ordinal>/` when
/// set).
pub fn ref_name(ordinal: Option<u32>, id: PackId) -> String {
    match ordinal {
        None => format!("{id}.ref"),
        Some(k) => format!("{}.{id}.ref", ordinal_dir_name(k)),
    }
}

/// What a ref's name consents to: `(ordinal, id)`; `None` for any other
/// name.
pub fn parse_ref_name(name: &str) -> Option<(Option<u32>, PackId)> {
    let stem = name.strip_suffix(".ref")?;
    let (ordinal, id) = match stem.split_once('.') {
        None => (None, stem),
        Some((w, id)) => (Some(parse_ordinal_dir(w)?), id),
    };
    Some((ordinal, PackId::from_hex(id).ok()?))
}

/// Where the confirmations of rank directory `rank_dir`'s packs are:
/// `<key>/_shipped/<rank>/`.
pub fn confirmations_dir(rank_dir: &Path) -> PathBuf {
    let name = rank_dir.file_name().unwrap_or_default();
    rank_dir
        .parent()
        .unwrap_or(Path::new("/"))
        .join(SHIPPED_DIR)
        .join(name)
}

/// The pack a ref consents to, in `rank_dir`.
fn pack_path(rank_dir: &Path, ordinal: Option<u32>, id: PackId) -> PathBuf {
    match ordinal {
        None => rank_dir.join(format!("{id}.ready")),
        Some(k) => rank_dir
            .join(ordinal_dir_name(k))
            .join(format!("{id}.ready")),
    }
}

/// The names in `dir` (none when it does not exist).
fn names_in(dir: &Path) -> Result<Vec<String>, Error> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read directory", dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        if let Some(n) = entry.file_name().to_str() {
            out.push(n.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// Creates the empty file `path` (kept if it exists).
fn touch(path: &Path) -> Result<(), Error> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("create", path, e)),
    }
}

/// Removes `path`; already gone is fine.
fn unlink(path: &Path) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
        _ => Ok(()),
    }
}

/// Creates `dir` and its parent if missing.
fn make_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))
}

impl Spool {
    /// The owner consents to the node's shipper shipping its staged pack
    /// `id` (step 1 of the protocol in the module doc).
    pub fn consent(&self, ordinal: Option<u32>, id: PackId) -> Result<(), Error> {
        let refs = self.dir().join(REFS_DIR);
        make_dir(&refs)?;
        touch(&refs.join(ref_name(ordinal, id)))
    }

    /// How many packs the owner consented to and has not removed yet
    /// (confirmed or not): its refs.
    pub fn consented_packs(&self) -> Result<usize, Error> {
        let names = names_in(&self.dir().join(REFS_DIR))?;
        Ok(names.iter().filter(|n| parse_ref_name(n).is_some()).count())
    }

    /// The owner removes every consented pack the daemon confirmed, then
    /// its ref (step 4). Returns how many packs it removed.
    pub fn release_confirmed(&self) -> Result<usize, Error> {
        let confirmed = names_in(&confirmations_dir(self.dir()))?;
        let refs = self.dir().join(REFS_DIR);
        let mut packs = Vec::new();
        let mut names = Vec::new();
        for name in confirmed {
            let Some((ordinal, id)) = parse_ref_name(&name) else {
                continue;
            };
            if !refs.join(&name).exists() {
                continue; // released before
            }
            let path = pack_path(self.dir(), ordinal, id);
            packs.push(ReadyPack {
                bytes: std::fs::symlink_metadata(&path).map_or(0, |m| m.len()),
                path,
                id,
                ordinal,
            });
            names.push(name);
        }
        if !packs.is_empty() {
            crate::seams::kill_point("before_release");
        }
        if let Some((path, e)) = self.remove_all(&packs).into_iter().next() {
            return Err(Error::io("remove confirmed pack", path, io_of(e)));
        }
        if !packs.is_empty() {
            crate::seams::kill_point("after_release");
        }
        for name in &names {
            unlink(&refs.join(name))?;
        }
        Ok(packs.len())
    }

    /// The adopter of a dead owner's directory settles its hand-off before
    /// anything else: packs the daemon confirmed are removed (they are in
    /// the store and the catalog), then the refs, then the confirmations.
    /// Returns how many packs it removed.
    pub fn settle_hand_off(&self) -> Result<usize, Error> {
        let shipped = confirmations_dir(self.dir());
        let confirmed = names_in(&shipped)?;
        let packs: Vec<ReadyPack> = confirmed
            .iter()
            .filter_map(|n| parse_ref_name(n))
            .map(|(ordinal, id)| ReadyPack {
                path: pack_path(self.dir(), ordinal, id),
                id,
                bytes: 0,
                ordinal,
            })
            .collect();
        if let Some((path, e)) = self.remove_all(&packs).into_iter().next() {
            return Err(Error::io("remove confirmed pack", path, io_of(e)));
        }
        let refs = self.dir().join(REFS_DIR);
        for name in names_in(&refs)? {
            unlink(&refs.join(name))?;
        }
        match std::fs::remove_dir(&refs) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io("remove directory", &refs, e))
            }
            _ => {}
        }
        for name in confirmed {
            unlink(&shipped.join(name))?;
        }
        match std::fs::remove_dir(&shipped) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io("remove directory", &shipped, e));
            }
            _ => {}
        }
        // `<key>/_shipped` itself once no owner has confirmations (it fails,
        // harmlessly, while one has)
        if let Some(parent) = shipped.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        Ok(packs.len())
    }
}

/// The `io::Error` behind `e` (or one that says it).
fn io_of(e: Error) -> io::Error {
    match e {
        Error::Io { source, .. } => source,
        e => io::Error::other(e.to_string()),
    }
}

/// A ref the daemon will not ship: why, said once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRef {
    /// The ref.
    pub path: PathBuf,
    /// What is wrong with it or with the file it names.
    pub why: String,
}

/// What a live owner consented to, as the daemon reads it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Consents {
    /// Packs consented and not yet confirmed, in id order.
    pub packs: Vec<ReadyPack>,
    /// Refs that name no pack the daemon may read.
    pub refused: Vec<RefusedRef>,
    /// How many consented packs are confirmed (waiting for the owner to
    /// remove them).
    pub confirmed: usize,
}

/// The daemon lists what live owner `rank_dir` consented to (step 2):
/// every ref, its pack checked to be a regular file inside the directory
/// (no symlink on the way), those already confirmed left out. Reads only.
pub fn list_consented(rank_dir: &Path) -> Result<Consents, Error> {
    let refs = rank_dir.join(REFS_DIR);
    let mut out = Consents::default();
    match std::fs::symlink_metadata(&refs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            out.refused.push(RefusedRef {
                path: refs,
                why: "is not a directory (a symlink?): nothing under it is read".into(),
            });
            return Ok(out);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io("stat", &refs, e)),
    }
    let confirmed: HashSet<String> = names_in(&confirmations_dir(rank_dir))?
        .into_iter()
        .collect();
    for name in names_in(&refs)? {
        let path = refs.join(&name);
        let Some((ordinal, id)) = parse_ref_name(&name) else {
            out.refused.push(RefusedRef {
                path,
                why: "is not named <id>.ref or w<k>.<id>.ref".into(),
            });
            continue;
        };
        if confirmed.contains(&name) {
            out.confirmed += 1;
            continue;
        }
        if let Some(k) = ordinal {
            let w = rank_dir.join(ordinal_dir_name(k));
            if std::fs::symlink_metadata(&w).is_ok_and(|m| !m.is_dir()) {
                out.refused.push(RefusedRef {
                    path,
                    why: format!(
                        "names a pack under {}, which is not a directory (a symlink?)",
                        w.display()
                    ),
                });
                continue;
            }
        }
        let pack = pack_path(rank_dir, ordinal, id);
        match std::fs::symlink_metadata(&pack) {
            Ok(m) if m.file_type().is_file() => out.packs.push(ReadyPack {
                path: pack,
                id,
                bytes: m.len(),
                ordinal,
            }),
            Ok(m) => out.refused.push(RefusedRef {
                path,
                why: format!(
                    "names {}, which is a {} (not a regular file)",
                    pack.display(),
                    crate::spool::file_type_name(m.file_type())
                ),
            }),
            // removed by its owner since (or never staged): nothing to ship
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("stat", &pack, e)),
        }
    }
    out.packs.sort_by_key(|p| p.id);
    Ok(out)
}

/// The daemon confirms packs of `rank_dir` whose rows the catalog
/// confirmed (step 3): one confirmation each, then one fsync of their
/// directory.
pub fn confirm(rank_dir: &Path, packs: &[(Option<u32>, PackId)]) -> Result<(), Error> {
    if !packs.is_empty() {
        crate::seams::kill_point("before_confirm");
    }
    let dir = confirmations_dir(rank_dir);
    make_dir(&dir)?;
    for (ordinal, id) in packs {
        touch(&dir.join(ref_name(*ordinal, *id)))?;
    }
    crate::spool::fsync_dir(&dir)?;
    if !packs.is_empty() {
        crate::seams::kill_point("after_confirm");
    }
    Ok(())
}

/// The daemon removes the confirmations of `rank_dir` whose ref is gone
/// (the owner released the pack), and the confirmations directory of an
/// owner directory that is gone (step 5). Returns how many it removed.
pub fn collect_confirmations(rank_dir: &Path) -> Result<usize, Error> {
    let dir = confirmations_dir(rank_dir);
    let refs = rank_dir.join(REFS_DIR);
    let mut removed = 0;
    for name in names_in(&dir)? {
        if !refs.join(&name).exists() {
            unlink(&dir.join(&name))?;
            removed += 1;
        }
    }
    if !rank_dir.exists() {
        let _ = std::fs::remove_dir(&dir);
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    Ok(removed)
}

/// The daemon removes the confirmations of owners under `key_dir` whose
/// directory is gone (an owner that exited with a confirmation left, its
/// directory then drained), and `_shipped` once empty. Returns how many
/// owners' confirmations it removed.
pub fn collect_orphaned_confirmations(key_dir: &Path) -> Result<usize, Error> {
    let shipped = key_dir.join(SHIPPED_DIR);
    let mut removed = 0;
    for name in names_in(&shipped)? {
        if name.starts_with('.') || key_dir.join(&name).exists() {
            continue; // the shipper's record (or its temp file), or a live owner's
        }
        let dir = shipped.join(&name);
        for marker in names_in(&dir)? {
            unlink(&dir.join(marker))?;
        }
        match std::fs::remove_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io("remove directory", &dir, e))
            }
            _ => removed += 1,
        }
    }
    let _ = std::fs::remove_dir(&shipped);
    Ok(removed)
}

#[cfg(test)]
mod tests;
