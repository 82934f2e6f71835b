//! The `.open` rule of the torture's oracle, checked while a run goes on
//! ("no `.open` outlived its owner past one adoption";
//! RELIABILITY.md "Crash torture").
//!
//! A `.open` file is a stage in flight. Its owner's death leaves it behind,
//! and the next adopter's recovery sweeps it before that adopter lists the
//! directory's ready packs (spool-core's `begin_recovery`). So once an
//! adopter has *removed* a ready pack of a dead owner's directory (uploaded
//! and indexed it, or quarantined it), its sweep is behind it, and no
//! `.open` may be left there; nor once an adopter has marked it blocked
//! with no ready pack left (it gave up after its recovery: a recovery that
//! fails is retried, never blocked). An adopter killed or stopped between
//! its take and its sweep proves nothing; the next one must sweep.
//!
//! A thread of the run looks at every dead owner's directory every 5 ms
//! ([`look`]: the owner record's `pid:` and the ready and `.open` files,
//! names only) and [`Watch::see`] compares each look with the last one
//! whose record named an adopter: a ready pack gone between two such
//! looks was removed by an adopter (the owner lost its lock before).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One look at a dead owner's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    /// The pid the owner record names (`None`: unreadable, mid-rewrite).
    pub record_pid: Option<u32>,
    /// The record says `purpose: blocked: <why>`: its writer gave up on the
    /// directory.
    pub blocked: bool,
    /// Ready packs (`*.ready`), relative to the directory.
    pub ready: BTreeSet<PathBuf>,
    /// Stages in flight (`*.open`), relative to the directory.
    pub open: Vec<PathBuf>,
}

/// What a look showed, against the looks before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing new.
    Nothing,
    /// An adopter removed a ready pack (`pid`: the one the record names
    /// now): its sweep is behind it, and no `.open` is left (counted once
    /// per directory).
    Swept {
        /// The adopter's pid (from the owner record).
        pid: u32,
    },
    /// `.open` files left after an adopter removed a ready pack (`pid`:
    /// the one the record names now): the rule broken (reported once per
    /// directory).
    Outlived {
        /// The adopter's pid.
        pid: u32,
        /// The `.open` files still there.
        open: Vec<PathBuf>,
    },
    /// The directory is gone: nothing more to look at.
    Gone,
}

/// The state the monitor keeps for one dead owner's directory.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    /// The ready packs of the last look whose owner record named an
    /// adopter (a pid other than the owner's). Between two such looks the
    /// owner has lost its lock, so only adopters removed what vanished.
    adopted_ready: Option<BTreeSet<PathBuf>>,
    /// An adopter removed a ready pack: every sweep due is behind us.
    past_sweep: bool,
    /// Counted ([`Seen::Swept`]) or reported ([`Seen::Outlived`]) already.
    told: bool,
}

impl Watch {
    /// Takes one look (`None`: the directory is gone) at the directory of
    /// the dead owner `owner_pid`.
    pub fn see(&mut self, owner_pid: u32, look: Option<Look>) -> Seen {
        let Some(look) = look else {
            return Seen::Gone;
        };
        let Some(pid) = look.record_pid.filter(|p| *p != owner_pid) else {
            // the owner's own record (not taken yet), or mid-rewrite
            return Seen::Nothing;
        };
        if let Some(before) = &self.adopted_ready {
            self.past_sweep |= before.iter().any(|r| !look.ready.contains(r));
        }
        // an adopter that blocks a directory with no ready pack left went
        // through its recovery (a failed one is retried, never blocked)
        self.past_sweep |= look.blocked && look.ready.is_empty();
        self.adopted_ready = Some(look.ready);
        if !self.past_sweep || self.told {
            return Seen::Nothing;
        }
        self.told = true;
        if look.open.is_empty() {
            Seen::Swept { pid }
        } else {
            Seen::Outlived {
                pid,
                open: look.open,
            }
        }
    }
}

/// Looks at `dir`: its owner record's pid and its ready and `.open` files
/// (recursively: ordinal subdirectories); `None` when it is gone.
pub fn look(dir: &Path) -> Option<Look> {
    if !dir.is_dir() {
        return None;
    }
    let record = std::fs::read_to_string(dir.join(".owner.lock")).unwrap_or_default();
    let record_pid = record
        .lines()
        .find_map(|l| l.strip_prefix("pid:"))
        .and_then(|p| p.trim().parse().ok());
    let blocked = record.lines().any(|l| {
        l.strip_prefix("purpose:")
            .is_some_and(|p| p.trim_start().starts_with("blocked"))
    });
    let mut files = Vec::new();
    crate::walk_files(dir, &mut files);
    let mut out = Look {
        record_pid,
        blocked,
        ..Look::default()
    };
    for f in files {
        let rel = f.strip_prefix(dir).unwrap_or(&f).to_path_buf();
        let name = rel.to_string_lossy();
        if name.ends_with(".ready") {
            out.ready.insert(rel);
        } else if name.ends_with(".open") {
            out.open.push(rel);
        }
    }
    Some(out)
}
