//! What a spool directory or a whole spool root holds and who is on it,
//! read without taking a lock and changing nothing (`spool status`, `spool
//! lock owner`).
//!
//! [`status`] reads a path two ways:
//!
//! - **A spool directory** (it has a lock file, a rank directory's name, or
//!   pack files): its owner ([`OwnerView`], from spool-core's sibling
//!   probe) and the count and bytes of its ready, open, quarantined and
//!   rejected packs.
//! - **A spool root or a catalog key directory**: one [`RankDirRow`] per
//!   rank directory, under each catalog key (hidden entries, the embedded
//!   `.store` and `.catalog.db`, are never keys). A directory this user
//!   cannot read is a row in state `unreadable`, never the end of the
//!   listing.
//!
//! A live owner that handed packs off (spool-core's `handoff`) is served
//! by the node's shipper, the daemon the key directory's shipper record
//! names ([`ShipperView`], read once per key directory). The row's
//! `reason` says why packs are still there: blocked (the adopter's
//! reason), held shared by a reader, or the hand-off's state. What the
//! shipper recorded it refused, or shipped and cannot confirm, is not
//! "being shipped": it is counted apart, as what it is.
//!
//! Every type serializes to the JSON `spool status --json` and `spool lock
//! owner --json` print; the text forms are the CLI's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use spool_core::layout::RankDirName;
use spool_core::siblings::{self, Owner};
use spool_core::spool::{inspect, DirCounts};

use crate::Error;

/// What [`status`] found at a path.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Status {
    /// A spool directory.
    Spool {
        /// The directory.
        path: PathBuf,
        /// Who holds it.
        owner: OwnerView,
        /// Its pack files.
        packs: PackCounts,
    },
    /// A spool root or a catalog key directory.
    Root {
        /// The root.
        path: PathBuf,
        /// Its rank directories, key by key.
        rank_dirs: Vec<RankDirRow>,
    },
}

/// How a directory's owner reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnerState {
    /// A live process holds its lock.
    Live,
    /// Nobody holds it and an adopter set it aside, saying why.
    Blocked,
    /// Nobody holds it: an adopter will ship its packs.
    Dead,
    /// This user cannot read it (another user's directory).
    Unreadable,
}

impl OwnerState {
    /// Its name, as JSON says it.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerState::Live => "live",
            OwnerState::Blocked => "blocked",
            OwnerState::Dead => "dead",
            OwnerState::Unreadable => "unreadable",
        }
    }
}

/// A directory's owner, from its lock and owner record.
#[derive(Debug, Clone, Serialize)]
pub struct OwnerView {
    /// Whether its lock is held (`None` when unreadable).
    pub held: Option<bool>,
    /// How it reads.
    pub state: OwnerState,
    /// The host its owner record names.
    pub host: Option<String>,
    /// The pid its owner record names.
    pub pid: Option<u32>,
    /// The record's purpose (`claim`, `adopting`, `blocked: WHY`).
    pub purpose: Option<String>,
    /// Whether the lock file exists (`None` when unreadable).
    pub lock_file_present: Option<bool>,
    /// The lock file was removed or replaced under its holder.
    pub lock_file_replaced: bool,
    /// Readers holding it shared (group mode), by pid.
    pub held_shared_by: Vec<u32>,
}

/// Count and bytes of one kind of pack file.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CountBytes {
    /// How many.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A directory's pack files by kind (spool-core's `inspect`).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PackCounts {
    /// Sealed packs.
    pub ready: CountBytes,
    /// Temp files: stages in flight, or torn by a crash.
    pub open: CountBytes,
    /// Corrupt packs set aside.
    pub quarantined: CountBytes,
    /// Packs refused for good, kept until a person requeues them.
    pub rejected: CountBytes,
}

/// A ref and what is wrong with it.
#[derive(Debug, Clone, Serialize)]
pub struct RefWhy {
    /// The ref.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Why.
    pub why: String,
}

/// What a live owner consented to hand off.
#[derive(Debug, Clone, Serialize)]
pub struct HandOffView {
    /// Handed-off packs waiting to be shipped (less those the shipper
    /// refused or cannot confirm, when one serves).
    pub waiting: u64,
    /// Packs confirmed, for their owner to remove.
    pub confirmed: u64,
    /// Refs the owner's own read refused.
    pub refused: Vec<RefWhy>,
    /// What the serving shipper says of this owner (only when one serves).
    #[serde(flatten)]
    pub shipper_says: Option<ShipperSays>,
}

/// What the serving shipper recorded against one owner.
#[derive(Debug, Clone, Serialize)]
pub struct ShipperSays {
    /// Refs it refused, with why.
    pub refused_by_shipper: Vec<RefWhy>,
    /// Packs it shipped and indexed but cannot confirm.
    pub unconfirmed: u64,
    /// Why it cannot confirm them.
    pub unconfirmed_why: Option<String>,
}

/// Who holds one spool directory's owner lock (`spool lock owner`): the
/// lock probe (never blocking, never taking it), the owner record, and for
/// a live owner that handed packs off, the node's shipper serving it.
#[derive(Debug, Clone, Serialize)]
pub struct LockOwner {
    /// The directory, as given.
    pub dir: PathBuf,
    /// Whether someone holds it now.
    pub held: bool,
    /// The owner record's pid.
    pub pid: Option<u32>,
    /// The owner record's host.
    pub host: Option<String>,
    /// Why it is held: `claim`, `adopting`, `blocked`, `unknown: …`.
    pub purpose: Option<String>,
    /// A blocked mark's reason.
    pub blocked: Option<String>,
    /// Held through a lock file removed or replaced since (the record
    /// cannot name the holder).
    pub lock_file_replaced: bool,
    /// Whether a lock file is there.
    pub lock_file_present: bool,
    /// The shipper of a live owner that handed packs off.
    pub served_by: Option<ShipperView>,
}

/// Reads who holds `dir`'s owner lock ([`LockOwner`]), changing nothing.
pub fn lock_owner(dir: &Path) -> Result<LockOwner, Error> {
    use spool_lock::Purpose;
    let status = spool_lock::read_owner(dir)?;
    let record = status.record.as_ref();
    let (purpose, blocked) = match record.map(|r| &r.purpose) {
        None => (None, None),
        Some(Purpose::Claim) => (Some("claim".to_owned()), None),
        Some(Purpose::Adopting) => (Some("adopting".to_owned()), None),
        Some(Purpose::Blocked(why)) => (Some("blocked".to_owned()), Some(why.clone())),
        Some(Purpose::Unknown(s)) => (Some(format!("unknown: {s}")), None),
    };
    let handed_off =
        std::fs::symlink_metadata(dir.join(spool_core::spool::REFS_DIR)).is_ok_and(|m| m.is_dir());
    Ok(LockOwner {
        dir: dir.to_path_buf(),
        held: status.held,
        pid: record.and_then(|r| r.pid),
        host: record.map(|r| r.host.clone()),
        purpose,
        blocked,
        lock_file_replaced: status.lock_file_replaced,
        lock_file_present: status.lock_file_present,
        served_by: (status.held && handed_off)
            .then(|| dir.parent().and_then(shipper_of))
            .flatten(),
    })
}

/// The node's shipper under one catalog key.
#[derive(Debug, Clone, Serialize)]
pub struct ShipperView {
    /// Its rank directory (`None` when its record cannot be read).
    pub dir: Option<PathBuf>,
    /// Whether it holds its directory now.
    pub live: bool,
    /// Its owner record's host.
    pub host: Option<String>,
    /// Its owner record's pid.
    pub pid: Option<u32>,
    /// Why its record cannot be read (a planted entry where it belongs:
    /// said, never followed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its record says.
    #[serde(flatten)]
    pub record: Option<ShipperSaid>,
}

/// The contents of a shipper record that reads.
#[derive(Debug, Clone, Serialize)]
pub struct ShipperSaid {
    /// The node name it serves.
    pub node: String,
    /// Refs it refused: owner directory, ref, why.
    pub refused: Vec<OwnerRefWhy>,
    /// Refusals beyond those listed.
    pub refused_more: u64,
    /// Packs it cannot confirm, by owner.
    pub unconfirmed: Vec<OwnerUnconfirmed>,
}

/// A ref a shipper refused.
#[derive(Debug, Clone, Serialize)]
pub struct OwnerRefWhy {
    /// The owner's directory name.
    pub owner: String,
    /// The ref.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Why.
    pub why: String,
}

/// Packs a shipper cannot confirm to one owner.
#[derive(Debug, Clone, Serialize)]
pub struct OwnerUnconfirmed {
    /// The owner's directory name.
    pub owner: String,
    /// How many.
    pub packs: u64,
    /// Why.
    pub why: String,
}

/// One rank directory of a root.
#[derive(Debug, Clone, Serialize)]
pub struct RankDirRow {
    /// Its catalog key, when its parent is one.
    pub key: Option<String>,
    /// Its name.
    pub dir: Option<String>,
    /// Its path.
    pub path: PathBuf,
    /// Its owner.
    pub owner: OwnerView,
    /// The owner's state, again, for filters.
    pub state: OwnerState,
    /// Why packs are still there, when something says.
    pub reason: Option<String>,
    /// The owner's host.
    pub host: Option<String>,
    /// The owner's pid.
    pub pid: Option<u32>,
    /// Ready packs.
    pub packs: u64,
    /// Bytes of every pack file.
    pub bytes: u64,
    /// Its pack files by kind.
    pub detail: PackCounts,
    /// What its live owner handed off (`None`: nothing).
    pub hand_off: Option<HandOffView>,
    /// The shipper serving it (only a live owner that handed off).
    pub served_by: Option<ShipperView>,
}

/// Reads `path`: a spool directory, or a root or catalog key directory.
pub fn status(path: &Path) -> Result<Status, Error> {
    if !path.is_dir() {
        return Err(Error::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    let counts = |dir: &Path| inspect(dir).map(PackCounts::of);
    if is_spool_dir(path) {
        return Ok(Status::Spool {
            path: path.to_path_buf(),
            owner: OwnerView::of(path)?,
            packs: counts(path)?,
        });
    }
    let key_of_root = key_of(path);
    let mut dirs: Vec<(Option<String>, PathBuf)> = rank_dirs(path)
        .into_iter()
        .map(|d| (key_of_root.clone(), d))
        .collect();
    let keys = spool_core::layout::catalog_key_dirs(path)?;
    for (key, key_dir) in keys {
        dirs.extend(
            rank_dirs(&key_dir)
                .into_iter()
                .map(|d| (Some(key.clone()), d)),
        );
    }
    let mut shippers = HashMap::new();
    let rank_dirs = dirs
        .into_iter()
        .map(|(key, d)| RankDirRow::read(key, d, &mut shippers))
        .collect();
    Ok(Status::Root {
        path: path.to_path_buf(),
        rank_dirs,
    })
}

/// The node's shipper under `key_dir`, when a daemon ever served there.
pub fn shipper_of(key_dir: &Path) -> Option<ShipperView> {
    let record = match spool_core::handoff::read_shipper(key_dir) {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(e) => {
            return Some(ShipperView {
                dir: None,
                live: false,
                host: None,
                pid: None,
                error: Some(e.to_string()),
                record: None,
            })
        }
    };
    let dir = key_dir.join(&record.dir_name);
    let owner = OwnerView::of(&dir).ok();
    Some(ShipperView {
        live: owner.as_ref().is_some_and(|o| o.state == OwnerState::Live),
        host: owner.as_ref().and_then(|o| o.host.clone()),
        pid: owner.as_ref().and_then(|o| o.pid),
        dir: Some(dir),
        error: None,
        record: Some(ShipperSaid {
            node: record.node,
            refused: record
                .refused
                .into_iter()
                .map(|(owner, reference, why)| OwnerRefWhy {
                    owner,
                    reference,
                    why,
                })
                .collect(),
            refused_more: record.refused_more,
            unconfirmed: record
                .unconfirmed
                .into_iter()
                .map(|(owner, packs, why)| OwnerUnconfirmed { owner, packs, why })
                .collect(),
        }),
    })
}

impl ShipperView {
    /// `spool run pid P on host H (DIR)`.
    pub fn describe(&self) -> String {
        let pid = self
            .pid
            .map_or_else(|| "null".to_owned(), |p| p.to_string());
        let dir = self
            .dir
            .as_ref()
            .map_or_else(|| "?".to_owned(), |d| d.display().to_string());
        format!(
            "spool run pid {pid} on host {} ({dir})",
            self.host.as_deref().unwrap_or("?")
        )
    }

    /// What this shipper recorded against the owner named `name`.
    fn says_of(&self, name: Option<&str>) -> ShipperSays {
        let Some(record) = &self.record else {
            return ShipperSays {
                refused_by_shipper: Vec::new(),
                unconfirmed: 0,
                unconfirmed_why: None,
            };
        };
        let mine = |owner: &str| Some(owner) == name;
        let unconfirmed = record.unconfirmed.iter().find(|u| mine(&u.owner));
        ShipperSays {
            refused_by_shipper: record
                .refused
                .iter()
                .filter(|r| mine(&r.owner))
                .map(|r| RefWhy {
                    reference: r.reference.clone(),
                    why: r.why.clone(),
                })
                .collect(),
            unconfirmed: unconfirmed.map_or(0, |u| u.packs),
            unconfirmed_why: unconfirmed.map(|u| u.why.clone()),
        }
    }
}

impl OwnerView {
    /// The owner of `dir`, as the sibling probe reads it.
    pub fn of(dir: &Path) -> Result<OwnerView, Error> {
        let probe = siblings::probe(dir)?;
        let state = match probe.owner() {
            Owner::Live | Owner::HeldHere { .. } => OwnerState::Live,
            Owner::Blocked(_) => OwnerState::Blocked,
            Owner::Dead | Owner::NotOurs(_) => OwnerState::Dead,
        };
        let st = probe.status;
        let record = st.record.as_ref();
        Ok(OwnerView {
            held: Some(st.held),
            state,
            host: record.map(|r| r.host.clone()),
            pid: record.and_then(|r| r.pid),
            purpose: record.map(|r| r.purpose.to_string()),
            lock_file_present: Some(st.lock_file_present),
            lock_file_replaced: st.lock_file_replaced,
            held_shared_by: st.shared_by,
        })
    }

    fn unreadable() -> OwnerView {
        OwnerView {
            held: None,
            state: OwnerState::Unreadable,
            host: None,
            pid: None,
            purpose: None,
            lock_file_present: None,
            lock_file_replaced: false,
            held_shared_by: Vec::new(),
        }
    }

    /// `held shared by pid N` when readers' shared flocks (group mode)
    /// hold an unowned directory: adopters cannot take it until they let
    /// go, and retry.
    pub fn held_shared_text(&self) -> Option<String> {
        let pids: Vec<String> = self
            .held_shared_by
            .iter()
            .map(|p| format!("pid {p}"))
            .collect();
        (!pids.is_empty()).then(|| format!("held shared by {}", pids.join(" and ")))
    }
}

impl PackCounts {
    fn of(c: DirCounts) -> PackCounts {
        let kind = |(count, bytes): (u64, u64)| CountBytes { count, bytes };
        PackCounts {
            ready: kind(c.ready),
            open: kind(c.open),
            quarantined: kind(c.quarantined),
            rejected: kind(c.rejected),
        }
    }

    /// Bytes of every kind.
    pub fn bytes(&self) -> u64 {
        self.ready.bytes + self.open.bytes + self.quarantined.bytes + self.rejected.bytes
    }
}

impl RankDirRow {
    fn read(
        key: Option<String>,
        d: PathBuf,
        shippers: &mut HashMap<PathBuf, Option<ShipperView>>,
    ) -> RankDirRow {
        let (owner, unreadable) = match OwnerView::of(&d) {
            Ok(o) => (o, None),
            Err(e) => (OwnerView::unreadable(), Some(e.to_string())),
        };
        let detail = inspect(&d).map(PackCounts::of).unwrap_or_default();
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
        let mut hand_off = hand_off_of(&d);
        let served_by = match (&hand_off, d.parent()) {
            (Some(_), Some(key_dir)) if owner.state == OwnerState::Live => shippers
                .entry(key_dir.to_path_buf())
                .or_insert_with(|| shipper_of(key_dir))
                .clone(),
            _ => None,
        };
        if let (Some(h), Some(s)) = (&mut hand_off, served_by.as_ref().filter(|s| s.live)) {
            let says = s.says_of(name.as_deref());
            let not_shipping = says.refused_by_shipper.len() as u64 + says.unconfirmed;
            h.waiting = h.waiting.saturating_sub(not_shipping);
            h.shipper_says = Some(says);
        }
        let reason = unreadable.or_else(|| {
            owner
                .purpose
                .as_deref()
                .and_then(|p| p.strip_prefix("blocked:"))
                .filter(|_| owner.state == OwnerState::Blocked)
                .map(|r| r.trim().to_owned())
                .or_else(|| owner.held_shared_text())
                .or_else(|| hand_off_text(&owner, hand_off.as_ref(), served_by.as_ref()))
        });
        RankDirRow {
            key,
            dir: name,
            path: d,
            state: owner.state,
            host: owner.host.clone(),
            pid: owner.pid,
            owner,
            reason,
            packs: detail.ready.count,
            bytes: detail.bytes(),
            detail,
            hand_off,
            served_by,
        }
    }
}

/// What a live owner consented to hand off; `None` when nothing.
fn hand_off_of(dir: &Path) -> Option<HandOffView> {
    let c = spool_core::handoff::list_consented(dir).ok()?;
    if c.packs.is_empty() && c.confirmed == 0 && c.refused.is_empty() {
        return None;
    }
    Some(HandOffView {
        waiting: c.packs.len() as u64,
        confirmed: c.confirmed as u64,
        refused: c
            .refused
            .iter()
            .map(|r| RefWhy {
                reference: r.path.to_string_lossy().into_owned(),
                why: r.why.clone(),
            })
            .collect(),
        shipper_says: None,
    })
}

/// Why a live owner's handed-off packs are still there.
fn hand_off_text(
    owner: &OwnerView,
    hand_off: Option<&HandOffView>,
    served_by: Option<&ShipperView>,
) -> Option<String> {
    let h = hand_off.filter(|_| owner.state == OwnerState::Live)?;
    let shipper = served_by.filter(|s| s.live);
    let mut parts = Vec::new();
    match shipper {
        Some(s) if h.waiting > 0 => parts.push(format!(
            "{} handed-off pack(s) being shipped by the node's shipper, {}",
            h.waiting,
            s.describe()
        )),
        None if h.waiting > 0 => parts.push(format!(
            "{} handed-off pack(s) waiting for the node's shipper (a `spool run` holding \
             the node lease; none serves now: they ship when one starts, or when the \
             producer exits)",
            h.waiting
        )),
        _ => {}
    }
    if h.confirmed > 0 {
        parts.push(format!(
            "{} confirmed, to be removed by their owner",
            h.confirmed
        ));
    }
    if !h.refused.is_empty() {
        parts.push(format!(
            "{} ref(s) refused: see `spool status --json`",
            h.refused.len()
        ));
    }
    if let Some(says) = &h.shipper_says {
        if let Some(first) = says.refused_by_shipper.first() {
            parts.push(format!(
                "{} pack(s) refused by the node's shipper, kept by their owner (shipped when it \
                 exits, or set aside if still bad), first: {} ({})",
                says.refused_by_shipper.len(),
                first.reference,
                first.why
            ));
        }
        if let (Some(s), true) = (shipper, says.unconfirmed > 0) {
            parts.push(format!(
                "{} pack(s) shipped and indexed by the node's shipper, {}, but not \
                 confirmed to their owner (it keeps them until it can be): {}",
                says.unconfirmed,
                s.describe(),
                says.unconfirmed_why
                    .as_deref()
                    .unwrap_or("the shipper cannot write the confirmation")
            ));
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Rank directories directly under `dir`.
fn rank_dirs(dir: &Path) -> Vec<PathBuf> {
    siblings::rank_dirs(dir).unwrap_or_default()
}

/// Whether `path` is a spool directory (rather than a root or key dir).
fn is_spool_dir(path: &Path) -> bool {
    if path.join(spool_lock::LOCK_FILE_NAME).exists() {
        return true;
    }
    if path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(RankDirName::parse)
        .is_some()
    {
        return true;
    }
    inspect(path)
        .map(|c| c.ready.0 + c.open.0 + c.quarantined.0 + c.rejected.0 > 0)
        .unwrap_or(false)
}

/// The catalog key a directory's name is, if it is one.
fn key_of(dir: &Path) -> Option<String> {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| spool_core::layout::is_catalog_key(n))
        .map(str::to_owned)
}
