//! The hand-off: a live sink-only owner consents, pack by pack, to the
//! node's shipper (the daemon holding the node lease) shipping
//! its packs, and removes each one itself once the daemon confirmed its
//! row. Nobody but the owner creates, renames or removes a file in the
//! owner's directory.
//!
//! # Files
//!
//! ```text
//! <key>/<rank>/_refs/<id>.ref                 consent (the owner's; empty)
//! <key>/<rank>/_refs/w<k>.<id>.ref            consent for w<k>/<id>.ready
//! <key>/_shipped/<rank>/<ref name>.pending    its confirmation's slot (the owner's; empty)
//! <key>/_shipped/<rank>/<ref name>            confirmation (the slot, renamed by the daemon)
//! <key>/_shipped/.shipper                      the shipper record (ShipperRecord)
//! ```
//!
//! The shipper record names the serving daemon's rank directory and node
//! name, the refs it refused (why, at most [`RECORDED_REFUSALS`] listed)
//! and the owners it cannot confirm to (how many packs, why): `spool
//! status` reads it, so a refused or unconfirmable pack is said as such,
//! never "being shipped".
//!
//! Every one of them is reached from the spool root down without following
//! a link, read with a bound and never on a blocking open (`crate::at`),
//! and created with the spool's `spool.mode` / `spool.group`, like packs.
//!
//! # A full filesystem
//!
//! The owner pays for a confirmation when it consents (the `.pending`
//! slot, beside the ref); the daemon confirms by renaming the slot, which
//! costs no inode and no byte. So on a filesystem with no free inode or
//! byte the daemon still tells the owner what it may free, and each pack
//! the owner then removes frees room. (A hard link would not do: tmpfs
//! charges one against its inode limit.) A consent that cannot make its
//! slot fails, and the pack ships when its owner exits.
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
//!    fsynced), then creates its confirmation's slot and its ref
//!    ([`Spool::consent`]). No fsync: a ref a crash loses only means the
//!    pack is not consented, and a crashed owner's directory is adopted
//!    whole anyway (a slot without a ref is collected as any confirmation
//!    whose ref is gone).
//! 2. **Daemon** lists the refs of a live owner ([`list_consented`]),
//!    skips those already confirmed, reads each pack read-only (never
//!    following a symlink, never outside the owner's directory), validates,
//!    uploads and indexes it through its own drain and fence.
//! 3. **Daemon**, once the catalog answered `Ok` to the row, renames the
//!    slot to the confirmation and fsyncs its directory ([`confirm`]).
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
//! | owner | everything (it owns it) | creates slots, reads |
//! | daemon | reads `_refs/` and consented packs | renames slots, creates, removes |
//! | adopter (holds the lock) | everything | removes |

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use spool_lock::Access;

use crate::at::{AtDir, Kind, Name};
use crate::pack::PackId;
use crate::spool::{ordinal_dir_name, parse_ordinal_dir, ReadyPack, Spool, REFS_DIR};
use crate::Error;

/// How long a hand-off owner's release waits for a confirmation before it
/// leaves what is still handed off to adoption (no daemon runs, or it is
/// stuck): [`Spool::wait_confirmed`]'s `stalled`.
pub const STALLED_HAND_OFF: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest a hand-off sink's release waits for confirmations that keep
/// coming (the default `close_flush_timeout` of an engine, which waits the
/// same way within its own).
pub const HAND_OFF_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The one wait of a hand-off owner's release: looks every few
/// milliseconds at how many packs `waiting` says are still handed off and
/// unconfirmed (after whatever it does at each look), until none is,
/// `deadline` passes, or (`stalled`) that long passes without the count
/// falling; returns the last count.
pub(crate) fn wait_while_confirmations_come(
    deadline: std::time::Instant,
    stalled: Option<std::time::Duration>,
    mut waiting: impl FnMut() -> Result<usize, Error>,
) -> Result<usize, Error> {
    let mut last = usize::MAX;
    let mut progress = std::time::Instant::now();
    loop {
        let n = waiting()?;
        if n < last {
            (last, progress) = (n, std::time::Instant::now());
        }
        let now = std::time::Instant::now();
        if n == 0 || now >= deadline || stalled.is_some_and(|s| now.duration_since(progress) >= s) {
            return Ok(n);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The directory beside the rank directories (under the catalog key) that
/// holds the daemon's confirmations, one subdirectory per owner.
pub const SHIPPED_DIR: &str = "_shipped";

/// The file under `<key>/_shipped/` that names the rank directory of the
/// daemon serving the owners under the key (one line: its name), for
/// operators (`spool status`, `spool lock owner`); whoever reads it checks
/// that directory is live, since a killed daemon leaves it behind.
pub const SHIPPER_FILE: &str = ".shipper";

/// The longest shipper record read (its name, node and the listed
/// refusals, each bounded).
const SHIPPER_RECORD_LIMIT: u64 = 64 * 1024;

/// Every directory and file of the hand-off is reached from the spool root
/// down, one component at a time, never through a link (`crate::at`).
/// A key directory is one level below the root.
fn key_dir_at(key_dir: &Path) -> Result<Option<AtDir>, Error> {
    AtDir::open_layout(key_dir, 1)
}

/// A rank directory is two levels below the root.
fn rank_dir_at(rank_dir: &Path) -> Result<Option<AtDir>, Error> {
    AtDir::open_layout(rank_dir, 2)
}

/// `<key>/_shipped`, if it exists.
fn shipped_at(key_dir: &Path) -> Result<Option<AtDir>, Error> {
    match key_dir_at(key_dir)? {
        Some(k) => k.open_dir(SHIPPED_DIR),
        None => Ok(None),
    }
}

/// The rank directory's name (its confirmations directory's name).
fn rank_name(rank_dir: &Path) -> &std::ffi::OsStr {
    rank_dir.file_name().unwrap_or_default()
}

/// `<key>/_shipped/<rank>`, if it exists.
fn confirmations_at(rank_dir: &Path) -> Result<Option<AtDir>, Error> {
    let Some(key) = rank_dir.parent() else {
        return Ok(None);
    };
    match shipped_at(key)? {
        Some(s) => s.open_dir(rank_name(rank_dir)),
        None => Ok(None),
    }
}

/// What the serving daemon records in `<key>/_shipped/.shipper` for
/// operators (`spool status`, `spool lock owner`) and for other daemons
/// (one node name per spool root): who it is, and what it could not do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipperRecord {
    /// The serving daemon's rank directory name.
    pub dir_name: String,
    /// Its node name (`lease.node_name`): the name of the node's lease.
    pub node: String,
    /// Refs it refused, by owner rank directory name: the ref's name and
    /// why (at most [`RECORDED_REFUSALS`] in all).
    pub refused: Vec<(String, String, String)>,
    /// How many more refs it refused than are listed.
    pub refused_more: u64,
    /// Owners whose confirmations it cannot write: the owner's rank
    /// directory name, how many packs are indexed and unconfirmed, and why.
    pub unconfirmed: Vec<(String, u64, String)>,
}

/// The most refusals a shipper record lists (the rest are counted).
pub const RECORDED_REFUSALS: usize = 32;

/// The longest reason a shipper record keeps (characters).
const RECORDED_WHY: usize = 200;

/// One line of a record: tabs and line breaks (and every other control
/// character) become spaces, and it is cut at [`RECORDED_WHY`].
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(RECORDED_WHY) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

impl ShipperRecord {
    /// The record's text: one field per line, tab-separated.
    fn encode(&self) -> String {
        let mut out = format!(
            "{}\nnode\t{}\n",
            one_line(&self.dir_name),
            one_line(&self.node)
        );
        for (owner, r, why) in self.refused.iter().take(RECORDED_REFUSALS) {
            out.push_str(&format!(
                "refused\t{}\t{}\t{}\n",
                one_line(owner),
                one_line(r),
                one_line(why)
            ));
        }
        let more = self.refused_more + self.refused.len().saturating_sub(RECORDED_REFUSALS) as u64;
        if more > 0 {
            out.push_str(&format!("refused_more\t{more}\n"));
        }
        for (owner, n, why) in &self.unconfirmed {
            out.push_str(&format!(
                "unconfirmed\t{}\t{n}\t{}\n",
                one_line(owner),
                one_line(why)
            ));
        }
        out
    }

    /// Parses a record defensively: a line it does not understand is
    /// skipped; `None` when the first line names no plain directory.
    fn decode(text: &str) -> Option<ShipperRecord> {
        let mut lines = text.lines();
        let dir_name = lines.next()?.trim().to_string();
        let plain =
            !dir_name.is_empty() && !dir_name.contains('/') && dir_name != "." && dir_name != "..";
        if !plain {
            return None;
        }
        let mut rec = ShipperRecord {
            dir_name,
            ..Default::default()
        };
        for line in lines {
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["node", n] => rec.node = n.to_string(),
                ["refused", o, r, why] => {
                    rec.refused
                        .push((o.to_string(), r.to_string(), why.to_string()))
                }
                ["refused_more", n] => rec.refused_more = n.parse().unwrap_or(0),
                ["unconfirmed", o, n, why] => {
                    rec.unconfirmed
                        .push((o.to_string(), n.parse().unwrap_or(0), why.to_string()))
                }
                _ => {}
            }
        }
        Some(rec)
    }
}

/// The daemon of `own_dir` records that it serves the owners beside it,
/// and what it could not do (written whole: a temp file renamed over the
/// last, never through a link; `_shipped/` created with `access`).
pub fn record_shipper(
    own_dir: &Path,
    record: &ShipperRecord,
    access: &Access,
) -> Result<(), Error> {
    let Some(key_dir) = own_dir.parent() else {
        return Ok(());
    };
    let Some(key) = key_dir_at(key_dir)? else {
        return Ok(());
    };
    let shipped = key.create_dir(SHIPPED_DIR, access)?;
    shipped.replace_file(SHIPPER_FILE, record.encode().as_bytes(), access)
}

/// The daemon of `own_dir` no longer serves: its record goes (if it is
/// still the one recorded), and `_shipped/` with it once empty.
pub fn forget_shipper(own_dir: &Path) {
    let Some(key_dir) = own_dir.parent() else {
        return;
    };
    if shipper_of(key_dir).ok().flatten().as_deref() == Some(own_dir) {
        clear_shipper(key_dir);
    }
}

/// Removes the record of the owners' shipper under `key_dir`, whoever it
/// names (the lease holder serving no owner clears one a killed daemon
/// left), and `_shipped/` with it once empty. Something other than a
/// regular file at the record's name is left alone.
pub fn clear_shipper(key_dir: &Path) {
    clear_shipper_files(key_dir, true);
}

/// Removes what a daemon killed while it wrote its first shipper record
/// under `key_dir` left: the record's temp files (`.shipper.<8 hex>.tmp`),
/// and `_shipped/` once empty; never a record, nor anything else there.
/// For the lease holder serving no owner where no record exists (a temp
/// of another daemon's first write in flight, should one race it, only
/// costs that daemon a retry of its write).
pub fn clear_shipper_temps(key_dir: &Path) {
    clear_shipper_files(key_dir, false);
}

/// The record (with `record`) and its temp files under `key_dir`'s
/// `_shipped/`, then `_shipped/` once empty.
fn clear_shipper_files(key_dir: &Path, record: bool) {
    let Ok(Some(key)) = key_dir_at(key_dir) else {
        return;
    };
    if let Ok(Some(shipped)) = key.open_dir(SHIPPED_DIR) {
        if record {
            let _ = shipped.remove_file(SHIPPER_FILE);
        }
        let _ = shipped.remove_replace_temps(SHIPPER_FILE);
    }
    let _ = key.remove_dir(SHIPPED_DIR);
}

/// The rank directory the last daemon to serve the owners under `key_dir`
/// recorded, if any (not checked to be live). See [`read_shipper`].
pub fn shipper_of(key_dir: &Path) -> Result<Option<PathBuf>, Error> {
    Ok(read_shipper(key_dir)?.map(|r| key_dir.join(r.dir_name)))
}

/// What the last daemon to serve the owners under `key_dir` recorded, if
/// anything (not checked to be live). Read without following a link or
/// blocking, with a bound: anything but a short regular file there is
/// [`Error::UnexpectedEntry`].
pub fn read_shipper(key_dir: &Path) -> Result<Option<ShipperRecord>, Error> {
    let Some(shipped) = shipped_at(key_dir)? else {
        return Ok(None);
    };
    let Some(bytes) = shipped.read_small(SHIPPER_FILE, SHIPPER_RECORD_LIMIT)? else {
        return Ok(None);
    };
    Ok(ShipperRecord::decode(&String::from_utf8_lossy(&bytes)))
}

/// The name of the ref consenting to pack `id` (under `w<ordinal>/` when
/// set).
pub fn ref_name(ordinal: Option<u32>, id: PackId) -> String {
    match ordinal {
        None => format!("{id}.ref"),
        Some(k) => format!("{}.{id}.ref", ordinal_dir_name(k)),
    }
}

/// The suffix of a confirmation slot the owner made at consent, not yet
/// confirmed: `<ref name>.pending`.
const PENDING: &str = ".pending";

/// The name of the slot the confirmation of ref `name` is renamed from.
pub(crate) fn pending_name(name: &str) -> String {
    format!("{name}{PENDING}")
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
    rank_dir
        .parent()
        .unwrap_or(Path::new("/"))
        .join(SHIPPED_DIR)
        .join(rank_name(rank_dir))
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

/// The names in `dir` (none when it is absent); a name that is not UTF-8
/// is [`Error::UnexpectedEntry`].
fn names_of(dir: Option<&AtDir>) -> Result<Vec<String>, Error> {
    match dir {
        Some(d) => d.utf8_names(),
        None => Ok(Vec::new()),
    }
}

impl Spool {
    /// The owner consents to the node's shipper shipping its staged pack
    /// `id` (step 1 of the protocol in the module doc). `_refs/` and the
    /// ref get the spool's mode and group.
    pub fn consent(&self, ordinal: Option<u32>, id: PackId) -> Result<(), Error> {
        let access = self.access();
        let dir = rank_dir_at(self.dir())?.ok_or_else(|| Error::DirectoryVanished {
            dir: self.dir().to_path_buf(),
        })?;
        let name = ref_name(ordinal, id);
        // the slot its confirmation will be renamed from: made now, while
        // the owner can, so confirming it costs the daemon no inode
        let confirmations = self.confirmations_at_created(&access)?;
        confirmations.create_file(pending_name(&name), &access)?;
        let refs = dir.create_dir(REFS_DIR, &access)?;
        refs.create_file(&name, &access).map(|_| ())
    }

    /// `<key>/_shipped/<rank>/`, created with `access` if missing.
    fn confirmations_at_created(&self, access: &Access) -> Result<AtDir, Error> {
        let key_dir = self.dir().parent().unwrap_or(Path::new("/"));
        let key = key_dir_at(key_dir)?.ok_or_else(|| Error::DirectoryVanished {
            dir: key_dir.to_path_buf(),
        })?;
        key.create_dir(SHIPPED_DIR, access)?
            .create_dir(rank_name(self.dir()), access)
    }

    /// Creates (with the spool's mode and group) and returns the owner's
    /// confirmations directory, `<key>/_shipped/<rank>/`, so the owner can
    /// watch it before the daemon confirms anything.
    pub fn prepare_confirmations(&self) -> Result<PathBuf, Error> {
        let dir = self.confirmations_at_created(&self.access())?;
        Ok(dir.path().to_path_buf())
    }

    /// How many packs the owner consented to and has not removed yet
    /// (confirmed or not): its refs.
    pub fn consented_packs(&self) -> Result<usize, Error> {
        let refs = match rank_dir_at(self.dir())? {
            Some(d) => d.open_dir(REFS_DIR)?,
            None => None,
        };
        let names = names_of(refs.as_ref())?;
        Ok(names.iter().filter(|n| parse_ref_name(n).is_some()).count())
    }

    /// The owner removes every consented pack the daemon confirmed, then
    /// its ref (step 4). Returns how many packs it removed. A confirmation
    /// counts only where the owner's own ref of that name is a regular
    /// file.
    pub fn release_confirmed(&self) -> Result<usize, Error> {
        let confirmed = names_of(confirmations_at(self.dir())?.as_ref())?;
        if confirmed.is_empty() {
            return Ok(0);
        }
        let Some(refs) = rank_dir_at(self.dir())?
            .and_then(|d| d.open_dir(REFS_DIR).transpose())
            .transpose()?
        else {
            return Ok(0);
        };
        let mut packs = Vec::new();
        let mut names = Vec::new();
        for name in confirmed {
            let Some((ordinal, id)) = parse_ref_name(&name) else {
                continue;
            };
            if refs.kind(&name)? != Some(Kind::Regular) {
                continue; // released before
            }
            packs.push(ReadyPack {
                // the removal reads the length it frees itself
                bytes: 0,
                path: pack_path(self.dir(), ordinal, id),
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
            refs.remove_file(name)?;
        }
        Ok(packs.len())
    }

    /// Removes the confirmed packs (as [`Spool::release_confirmed`]) until
    /// none is handed off and unconfirmed, `deadline` passes, or
    /// (`stalled`) that long passes without a confirmation, looking every
    /// few milliseconds; returns how many are still waiting. A hand-off
    /// engine's close waits here (its sinks gone); a sink's release waits
    /// the same way while its own confirmations thread removes them
    /// ([`crate::sink::Sink::release`]): the one release behaviour of a
    /// hand-off owner, what is left going with the directory to the
    /// daemon's adoption. No other thread may remove confirmed packs
    /// meanwhile.
    pub fn wait_confirmed(
        &self,
        deadline: std::time::Instant,
        stalled: Option<std::time::Duration>,
    ) -> Result<usize, Error> {
        wait_while_confirmations_come(deadline, stalled, || {
            self.release_confirmed()?;
            self.consented_packs()
        })
    }

    /// The adopter of a dead owner's directory settles its hand-off before
    /// anything else: packs the daemon confirmed are removed (they are in
    /// the store and the catalog), then the refs, then the confirmations.
    ///
    /// Entries spool did not make (a link, a FIFO, a subdirectory, a name
    /// that is not UTF-8, a file where a directory belongs) are left where
    /// they are, never followed, and reported in [`Settled::left`]: the
    /// adopter ships the rest and then sets the directory aside for them
    /// (it still holds other files). Confirmations it cannot read only
    /// mean their packs are shipped again, which is idempotent.
    pub fn settle_hand_off(&self) -> Result<Settled, Error> {
        let mut out = Settled::default();
        let confirmations = match confirmations_at(self.dir()) {
            Ok(c) => c,
            Err(e) if e.is_unexpected_entry() => {
                out.left.push(e);
                None
            }
            Err(e) => return Err(e),
        };
        let confirmed = match names_of(confirmations.as_ref()) {
            Ok(n) => n,
            Err(e) if e.is_unexpected_entry() => {
                out.left.push(e);
                Vec::new()
            }
            Err(e) => return Err(e),
        };
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
            if !e.is_unexpected_entry() {
                return Err(Error::io("remove confirmed pack", path, io_of(e)));
            }
            out.left.push(e);
        }
        out.removed = packs.len();
        let dir = rank_dir_at(self.dir())?.ok_or_else(|| Error::DirectoryVanished {
            dir: self.dir().to_path_buf(),
        })?;
        match dir.open_dir(REFS_DIR) {
            Ok(Some(refs)) => {
                for name in refs.names()? {
                    match name {
                        Name::Utf8(n) => match refs.remove_file(&n) {
                            Ok(_) => {}
                            Err(e) if e.is_unexpected_entry() => out.left.push(e),
                            Err(e) => return Err(e),
                        },
                        Name::Foreign(n) => out.left.push(refs.unexpected(
                            &n,
                            "a name that is not UTF-8",
                            "only refs the owner made",
                        )),
                    }
                }
                dir.remove_dir(REFS_DIR)?;
            }
            Ok(None) => {}
            Err(e) if e.is_unexpected_entry() => out.left.push(e),
            Err(e) => return Err(e),
        }
        if let Some(c) = &confirmations {
            for name in &confirmed {
                match c.remove_file(name) {
                    Ok(_) => {}
                    Err(e) if e.is_unexpected_entry() => out.left.push(e),
                    Err(e) => return Err(e),
                }
            }
            drop(confirmations);
            if let Some(shipped) = self.dir().parent().map(shipped_at).transpose()?.flatten() {
                shipped.remove_dir(rank_name(self.dir()))?;
                // `<key>/_shipped` itself once no owner has confirmations
                // (it stays, harmlessly, while one has)
                if let Some(key) = self.dir().parent().map(key_dir_at).transpose()?.flatten() {
                    let _ = key.remove_dir(SHIPPED_DIR);
                }
            }
        }
        Ok(out)
    }

    /// The spool's mode and group (`spool.mode`, `spool.group`).
    fn access(&self) -> Access {
        self.config().lock.access
    }
}

/// What settling a dead owner's hand-off did.
#[derive(Debug, Default)]
pub struct Settled {
    /// Confirmed packs removed.
    pub removed: usize,
    /// Entries left where they are because spool did not make them (each
    /// an [`Error::UnexpectedEntry`]): the directory is set aside once the
    /// rest of it is shipped.
    pub left: Vec<Error>,
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
/// (no symlink on the way), those already confirmed left out. Reads only;
/// every directory is opened without following a link.
pub fn list_consented(rank_dir: &Path) -> Result<Consents, Error> {
    let mut out = Consents::default();
    let Some(dir) = rank_dir_at(rank_dir)? else {
        return Ok(out);
    };
    let refs = match dir.open_dir(REFS_DIR) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(out),
        Err(e) if e.is_unexpected_entry() => {
            out.refused.push(RefusedRef {
                path: dir.join(REFS_DIR),
                why: format!("{e}; nothing under it is read"),
            });
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let confirmed: HashSet<String> =
        match confirmations_at(rank_dir).and_then(|c| names_of(c.as_ref())) {
            Ok(n) => n.into_iter().collect(),
            Err(e) if e.is_unexpected_entry() => {
                // what is confirmed cannot be read: nothing is shipped until it
                // can (the owner could never learn of it either)
                out.refused.push(RefusedRef {
                    path: confirmations_dir(rank_dir),
                    why: e.to_string(),
                });
                return Ok(out);
            }
            Err(e) => return Err(e),
        };
    for name in refs.names()? {
        let name = match name {
            Name::Utf8(n) => n,
            Name::Foreign(n) => {
                out.refused.push(RefusedRef {
                    path: refs.join(&n),
                    why: "is not named <id>.ref or w<k>.<id>.ref (not UTF-8)".into(),
                });
                continue;
            }
        };
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
        let holder = match ordinal {
            None => None,
            Some(k) => match dir.open_dir(ordinal_dir_name(k)) {
                Ok(Some(w)) => Some(w),
                Ok(None) => continue, // nothing staged there: nothing to ship
                Err(e) if e.is_unexpected_entry() => {
                    out.refused.push(RefusedRef {
                        path,
                        why: format!("names a pack under {e}"),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let at = holder.as_ref().unwrap_or(&dir);
        let file = format!("{id}.ready");
        let pack = pack_path(rank_dir, ordinal, id);
        match at.stat(&file)? {
            Some((Kind::Regular, bytes)) => out.packs.push(ReadyPack {
                bytes,
                path: pack,
                id,
                ordinal,
            }),
            Some((k, _)) => out.refused.push(RefusedRef {
                path,
                why: format!(
                    "names {}, which is {} (not a regular file)",
                    pack.display(),
                    k.described()
                ),
            }),
            // removed by its owner since (or never staged): nothing to ship
            None => {}
        }
    }
    out.packs.sort_by_key(|p| p.id);
    Ok(out)
}

/// Whether owner `rank_dir` has a `_refs/` directory (a link there is
/// not one).
pub fn has_refs_dir(rank_dir: &Path) -> bool {
    matches!(
        rank_dir_at(rank_dir).map(|d| d.map(|d| d.kind(REFS_DIR))),
        Ok(Some(Ok(Some(Kind::Dir))))
    )
}

/// How long ago the owner of `rank_dir` consented to pack `id` (its ref's
/// age); `None` once the ref is gone or cannot be read.
pub fn consent_age(
    rank_dir: &Path,
    ordinal: Option<u32>,
    id: PackId,
) -> Option<std::time::Duration> {
    let refs = rank_dir_at(rank_dir).ok()??.open_dir(REFS_DIR).ok()??;
    refs.age(ref_name(ordinal, id)).ok()?
}

/// The daemon confirms packs of `rank_dir` whose rows the catalog
/// confirmed (step 3): one confirmation each, then one fsync of their
/// directory. A confirmation is the slot `<ref name>.pending` the owner
/// made beside it at consent, renamed to `<ref name>` (`renameat` within
/// `<key>/_shipped/<rank>/`): it costs no inode (a hard link would, on
/// tmpfs), so on a filesystem out of inodes the owner still learns what it
/// may free. Without a slot the confirmation is an empty file of its own,
/// created with `access`.
pub fn confirm(
    rank_dir: &Path,
    packs: &[(Option<u32>, PackId)],
    access: &Access,
) -> Result<(), Error> {
    if !packs.is_empty() {
        crate::seams::kill_point("before_confirm");
    }
    let key_dir = rank_dir.parent().unwrap_or(Path::new("/"));
    let key = key_dir_at(key_dir)?.ok_or_else(|| Error::DirectoryVanished {
        dir: key_dir.to_path_buf(),
    })?;
    let dir = key
        .create_dir(SHIPPED_DIR, access)?
        .create_dir(rank_name(rank_dir), access)?;
    // a confirmation is the slot the owner made at consent, renamed: no
    // inode, so a filesystem out of inodes still lets the owner learn what
    // it may free
    for (ordinal, id) in packs {
        let name = ref_name(*ordinal, *id);
        if !dir.rename_regular(&pending_name(&name), &name)? {
            // no slot (consented by an older owner): a file of its own
            dir.create_file(&name, access)?;
        }
    }
    dir.sync()?;
    if !packs.is_empty() {
        crate::seams::kill_point("after_confirm");
    }
    Ok(())
}

/// The owner of `rank_dir`, letting go, removes its confirmations
/// directory if it is empty, and `<key>/_shipped` with it once empty.
pub(crate) fn remove_empty_confirmations(rank_dir: &Path) {
    let Some(key_dir) = rank_dir.parent() else {
        return;
    };
    if let Ok(Some(shipped)) = shipped_at(key_dir) {
        if shipped.remove_dir(rank_name(rank_dir)).unwrap_or(false) {
            if let Ok(Some(key)) = key_dir_at(key_dir) {
                let _ = key.remove_dir(SHIPPED_DIR);
            }
        }
    }
}

/// The daemon removes the confirmations of `rank_dir` whose ref is gone
/// (the owner released the pack), and the confirmations directory of an
/// owner directory that is gone (step 5). Returns how many it removed.
pub fn collect_confirmations(rank_dir: &Path) -> Result<usize, Error> {
    let Some(dir) = confirmations_at(rank_dir)? else {
        return Ok(0);
    };
    let owner = rank_dir_at(rank_dir)?;
    let refs = match &owner {
        Some(o) => o.open_dir(REFS_DIR)?,
        None => None,
    };
    let mut removed = 0;
    for name in dir.utf8_names()? {
        // a confirmation, or a pending slot, whose ref is gone
        let of = name.strip_suffix(PENDING).unwrap_or(&name);
        let kept = match &refs {
            Some(r) => r.kind(of)?.is_some(),
            None => false,
        };
        if !kept && dir.remove_file(&name)? {
            removed += 1;
        }
    }
    if owner.is_none() {
        drop(dir);
        if let Some(shipped) = rank_dir.parent().map(shipped_at).transpose()?.flatten() {
            shipped.remove_dir(rank_name(rank_dir))?;
        }
        if let Some(key) = rank_dir.parent().map(key_dir_at).transpose()?.flatten() {
            key.remove_dir(SHIPPED_DIR)?;
        }
    }
    Ok(removed)
}

/// The daemon removes the confirmations of owners under `key_dir` whose
/// directory is gone (an owner that exited with a confirmation left, its
/// directory then drained), and `_shipped` once empty. Returns how many
/// owners' confirmations it removed. Entries it did not make (a link, a
/// file where an owner's directory belongs) are left alone and reported as
/// [`Error::UnexpectedEntry`] after the rest is collected.
pub fn collect_orphaned_confirmations(key_dir: &Path) -> Result<usize, Error> {
    let Some(key) = key_dir_at(key_dir)? else {
        return Ok(0);
    };
    let Some(shipped) = key.open_dir(SHIPPED_DIR)? else {
        return Ok(0);
    };
    let mut removed = 0;
    let mut first_unexpected = None;
    for name in shipped.names()? {
        let name = match name {
            Name::Utf8(n) => n,
            Name::Foreign(n) => {
                first_unexpected.get_or_insert(shipped.unexpected(
                    &n,
                    "a name that is not UTF-8",
                    "an owner's confirmations directory",
                ));
                continue;
            }
        };
        if name.starts_with('.') || key.kind(&name)?.is_some() {
            continue; // the shipper's record (or its temp file), or a live owner's
        }
        let dir = match shipped.open_dir(&name) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) if e.is_unexpected_entry() => {
                first_unexpected.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut clean = true;
        for marker in dir.names()? {
            let r = match &marker {
                Name::Utf8(m) => dir.remove_file(m),
                Name::Foreign(m) => {
                    Err(dir.unexpected(m, "a name that is not UTF-8", "a confirmation"))
                }
            };
            match r {
                Ok(_) => {}
                Err(e) if e.is_unexpected_entry() => {
                    clean = false;
                    first_unexpected.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        drop(dir);
        if clean && shipped.remove_dir(&name)? {
            removed += 1;
        }
    }
    drop(shipped);
    let _ = key.remove_dir(SHIPPED_DIR);
    match first_unexpected {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

#[cfg(test)]
mod tests;
