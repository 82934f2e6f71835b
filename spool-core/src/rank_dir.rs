//! A rank directory's name ([`RankDirName`]): what the layout claims and
//! the sibling walk parses (a leaf, so neither imports the other for it).

use std::fmt;

/// A rank directory's name: `r<rank>-<incarnation>`, rank decimal (no
/// leading zeros), incarnation 8 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RankDirName {
    /// The rank.
    pub rank: u64,
    /// The incarnation (0 = [`RankDirName::manual`], reserved).
    pub incarnation: u32,
}

impl RankDirName {
    /// `r<rank>-00000000`: reserved for packs moved in by hand (never
    /// claimed by a process).
    pub fn manual(rank: u64) -> RankDirName {
        RankDirName {
            rank,
            incarnation: 0,
        }
    }

    /// Parses a canonical rank directory name; anything else is `None`.
    pub fn parse(name: &str) -> Option<RankDirName> {
        let rest = name.strip_prefix('r')?;
        let (rank, inc) = rest.split_once('-')?;
        if rank.is_empty()
            || rank.len() > 20
            || !rank.bytes().all(|c| c.is_ascii_digit())
            || (rank.len() > 1 && rank.starts_with('0'))
        {
            return None;
        }
        if inc.len() != 8 || !inc.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        Some(RankDirName {
            rank: rank.parse().ok()?,
            incarnation: u32::from_str_radix(inc, 16).ok()?,
        })
    }

    /// Whether this is the reserved `r<rank>-00000000`.
    pub fn is_manual(&self) -> bool {
        self.incarnation == 0
    }
}

impl fmt::Display for RankDirName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}-{:08x}", self.rank, self.incarnation)
    }
}
