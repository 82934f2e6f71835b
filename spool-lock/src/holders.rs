//! Who holds flocks on an inode, as `/proc/locks` says: what a take asks
//! before it retries, and what a probe reports of a reader that stays.

/// Who holds flocks on an inode, as `/proc/locks` says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holders {
    /// An exclusive flock: a real holder.
    Exclusive,
    /// Only shared flocks: probes, which let go at once (or a reader that
    /// does not: the pids, this process's left out).
    SharedOnly(Vec<u32>),
    /// Nothing listed (the probe went away, /proc/locks unreadable, or an
    /// overlay filesystem listing another device).
    Unknown,
}

/// `/proc/locks`, read first in one `read(2)` of 8 KiB (the kernel lists
/// up to a page per read, consistently: under the lock table's lock).
/// With 64 KiB reserved, std's `read_to_end` makes that first read its
/// default 8 KiB instead of a 32-byte probe, and reads on for a longer
/// listing.
/// `read_to_string` would start with a 32-byte read and list the rest in
/// more reads, between which other processes' locks come and go, so a
/// line shifts across the boundary and is left out or listed twice: a
/// take then misses a holder (seen: a lingering reader read as "nobody",
/// 20 times within a second, while builds took and dropped their locks).
fn read_proc_locks() -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(1 << 16);
    std::fs::File::open("/proc/locks")
        .and_then(|mut f| f.read_to_end(&mut buf))
        .ok()?;
    String::from_utf8(buf).ok()
}

pub(crate) fn flock_holders(st: &libc::stat) -> Holders {
    let Some(text) = read_proc_locks() else {
        return Holders::Unknown;
    };
    let want = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(st.st_dev),
        nix::sys::stat::minor(st.st_dev),
        st.st_ino
    );
    let mut found = false;
    let mut pids = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // `->` marks a blocked waiter, not a holder.
        if words.contains(&"->") || !words.contains(&"FLOCK") || !words.contains(&want.as_str()) {
            continue;
        }
        if words.contains(&"WRITE") {
            return Holders::Exclusive;
        }
        found = true;
        if let Some(pid) = lock_line_pid(&words) {
            if pid != std::process::id() && !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    if found {
        Holders::SharedOnly(pids)
    } else {
        Holders::Unknown
    }
}

/// The pid of a `/proc/locks` line (`1: FLOCK ADVISORY READ 4242 08:01:77 0 EOF`):
/// the word after the access type.
fn lock_line_pid(words: &[&str]) -> Option<u32> {
    let at = words.iter().position(|w| *w == "READ" || *w == "WRITE")?;
    words.get(at + 1)?.parse().ok()
}

/// The pids (other than this process) holding a shared flock on the inode
/// `st` names, as `/proc/locks` says (empty when it cannot tell).
pub(crate) fn shared_holders(st: &libc::stat) -> Vec<u32> {
    match flock_holders(st) {
        Holders::SharedOnly(pids) => pids,
        _ => Vec::new(),
    }
}
