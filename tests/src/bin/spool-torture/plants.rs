//! Entries planted in the spool root while a crash run goes on, and the
//! victim they point at: a directory outside the root whose files are
//! named like what the hand-off removes and writes (a ref, its pending
//! slot, a confirmation, the shipper record). Every tick may plant one,
//! under a catalog key: a link or a regular file where an orphan's
//! confirmations directory belongs (`<key>/_shipped/r<k>-<hex>`), a link
//! or a FIFO named like a rank directory (`<key>/r<k>-<hex>`). None of
//! them is in an owner's directory, so none sets a producer aside; each
//! would, followed, make a daemon remove or write the victim's files, or
//! block. The victim is compared byte for byte after every tick; the
//! plants are removed before the drain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::Rng;

/// The plants of one run and their victim.
pub struct Plants {
    victim: PathBuf,
    before: BTreeMap<PathBuf, Vec<u8>>,
    planted: Vec<PathBuf>,
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
        let (at, made) = match rng.below(4) {
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

    /// Removes the plants (the torture's own entries) before the drain.
    pub fn remove(&mut self) {
        for p in &self.planted {
            let _ = std::fs::remove_file(p);
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
