//! Entries planted in the spool root while a crash run goes on, and the
//! victim they point at: a directory outside the root whose files are
//! named like what the hand-off removes and writes (a ref, its pending
//! slot, a confirmation, the shipper record). Every tick may plant one,
//! under a catalog key:
//!
//! - a link or a regular file where an orphan's confirmations directory
//!   belongs (`<key>/_shipped/r<k>-<hex>`), a link or a FIFO named like a
//!   rank directory (`<key>/r<k>-<hex>`);
//! - in an owner's `_refs/` (live or dead): a ref that is a link to the
//!   victim's file of that name, a FIFO named like a ref, a link whose
//!   name is not UTF-8 (a dead owner holding one is set aside, blocked; a
//!   live one's daemon refuses the entry). The monitor reads regular files
//!   only, so none of them counts as an owner's file;
//! - the shipper record (`<key>/_shipped/.shipper`) replaced by a link to
//!   the victim's `.shipper` or by a FIFO (renamed over it, as a hostile
//!   user would).
//!
//! Each would, followed or opened blocking, make a daemon remove or write
//! the victim's files, or block. The victim is compared byte for byte
//! after every tick; before the drain the plants are removed and every
//! directory a plant made an adopter set aside is unblocked (`spool
//! unblock DIR`, as an operator does once the cause is gone).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::Rng;

/// The plants of one run and their victim.
pub struct Plants {
    victim: PathBuf,
    before: BTreeMap<PathBuf, Vec<u8>>,
    planted: Vec<PathBuf>,
    /// Rank directories a plant went into (to unblock before the drain).
    owners: Vec<PathBuf>,
    /// A changed victim was reported (once).
    reported: bool,
}

impl Plants {
    /// The victim under `dir` (outside the run's spool root).
    pub fn new(dir: &Path) -> Result<Plants> {
        let victim = dir.join("victim");
        std::fs::create_dir_all(&victim).with_context(|| format!("create {}", victim.display()))?;
        let id = "0123456789abcdef0123456789abcdef";
        for name in [
            format!("{id}.ref"),
            format!("{id}.ref.pending"),
            format!("{id}.ready"),
            ".shipper".to_string(),
            "precious".to_string(),
        ] {
            std::fs::write(victim.join(&name), format!("the victim's {name}"))?;
        }
        let before = content(&victim);
        Ok(Plants {
            victim,
            before,
            planted: Vec::new(),
            owners: Vec::new(),
            reported: false,
        })
    }

    /// How many entries were planted.
    pub fn count(&self) -> u64 {
        self.planted.len() as u64
    }

    /// By chance, plants one entry under a catalog key of `root`.
    pub fn tick(&mut self, rng: &mut Rng, root: &Path) {
        if !rng.chance(0.15) {
            return;
        }
        let keys: Vec<PathBuf> = crate::read_dir(root)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.len() == 12 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            })
            .collect();
        if keys.is_empty() {
            return;
        }
        let key = rng.pick(&keys).clone();
        let name = format!("r{}-{:08x}", 90 + rng.below(9), rng.next() as u32);
        let shipped = key.join("_shipped");
        let kind = rng.below(9);
        if kind >= 4 {
            return self.plant_deeper(rng, kind, &key, &shipped);
        }
        let (at, made) = match kind {
            0 => {
                let at = shipped.join(&name);
                (at.clone(), std::os::unix::fs::symlink(&self.victim, &at))
            }
            1 => {
                let at = shipped.join(&name);
                (at.clone(), std::fs::write(&at, b"not a directory"))
            }
            2 => {
                let at = key.join(&name);
                (at.clone(), std::os::unix::fs::symlink(&self.victim, &at))
            }
            _ => {
                let at = key.join(&name);
                let made =
                    nix::unistd::mkfifo(&at, nix::sys::stat::Mode::from_bits_truncate(0o600))
                        .map_err(std::io::Error::from);
                (at, made)
            }
        };
        // (`_shipped` may not exist yet, or be gone: nothing planted then)
        if made.is_ok() {
            self.planted.push(at);
        }
    }

    /// Plants of kinds 4–8: in an owner's `_refs/`, or over the shipper
    /// record.
    fn plant_deeper(&mut self, rng: &mut Rng, kind: u64, key: &Path, shipped: &Path) {
        let id = "0123456789abcdef0123456789abcdef";
        if kind >= 7 {
            // over the shipper record, by a rename (a daemon that reads
            // it must not follow or block; its next write replaces it)
            let temp = shipped.join(format!(".plant-{:08x}", rng.next() as u32));
            let made = if kind == 7 {
                std::os::unix::fs::symlink(self.victim.join(".shipper"), &temp)
            } else {
                nix::unistd::mkfifo(&temp, nix::sys::stat::Mode::from_bits_truncate(0o600))
                    .map_err(std::io::Error::from)
            };
            let record = shipped.join(".shipper");
            if made.is_ok() && std::fs::rename(&temp, &record).is_ok() {
                self.planted.push(record);
            } else {
                let _ = std::fs::remove_file(&temp);
            }
            return;
        }
        let owners: Vec<PathBuf> = crate::read_dir(key)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('r') && n.contains('-'))
                    && std::fs::symlink_metadata(p.join("_refs")).is_ok_and(|m| m.is_dir())
            })
            .collect();
        if owners.is_empty() {
            return;
        }
        let owner = rng.pick(&owners).clone();
        let refs = owner.join("_refs");
        let at = match kind {
            4 => refs.join(format!("{id}.ref")),
            5 => refs.join(format!("{:032x}.ref", rng.next())),
            _ => refs.join(std::ffi::OsStr::from_bytes(b"\xff\xfe.ref")),
        };
        let made = match kind {
            4 => std::os::unix::fs::symlink(self.victim.join(format!("{id}.ref")), &at),
            5 => nix::unistd::mkfifo(&at, nix::sys::stat::Mode::from_bits_truncate(0o600))
                .map_err(std::io::Error::from),
            _ => std::os::unix::fs::symlink(self.victim.join("precious"), &at),
        };
        if made.is_ok() {
            self.planted.push(at);
            self.owners.push(owner);
        }
    }

    /// What is wrong with the victim, once: `None` while it is unchanged.
    pub fn check(&mut self) -> Option<String> {
        if self.reported {
            return None;
        }
        let now = content(&self.victim);
        if now == self.before {
            return None;
        }
        self.reported = true;
        Some(format!(
            "the victim outside the spool root ({}) changed: it held {:?}, it holds {:?} (plants: {:?})",
            self.victim.display(),
            self.before.keys().collect::<Vec<_>>(),
            now.keys().collect::<Vec<_>>(),
            self.planted
        ))
    }

    /// Removes the plants (the torture's own entries) before the drain,
    /// then unblocks each directory a plant went into with `spool` (an
    /// adopter set it aside; one that is not blocked is left as it is).
    pub fn remove(&mut self, spool: &Path) {
        for p in &self.planted {
            let _ = std::fs::remove_file(p);
        }
        self.owners.sort();
        self.owners.dedup();
        for dir in &self.owners {
            if !dir.exists() {
                continue;
            }
            let blocked = std::process::Command::new(spool)
                .args(["lock", "owner", "--json"])
                .arg(dir)
                .stdin(std::process::Stdio::null())
                .output()
                .ok()
                .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
                .is_some_and(|v| v["blocked"].is_string());
            if blocked {
                let _ = std::process::Command::new(spool)
                    .arg("unblock")
                    .arg(dir)
                    .stdin(std::process::Stdio::null())
                    .output();
            }
        }
    }
}

/// Every file under `dir` and its bytes.
fn content(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    crate::read_dir(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}
