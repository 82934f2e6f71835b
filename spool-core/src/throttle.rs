//! Warnings that can repeat on every step, shown once per cause per
//! [`WARN_EVERY`].
//!
//! A planted entry a scan skips, a stage that fails on a full filesystem
//! and is retried, a hand-off directory that cannot be read, a replica
//! that does not answer: each of these happens again on the next step, and
//! a warning per step would bury the rest of the log (and fill the disk the
//! spool is already short of). [`warn_throttled!`](crate::warn_throttled)
//! logs the first occurrence of a cause at `warn`, every later one within
//! [`WARN_EVERY`] at `debug` (so a debug log still has each), and the next
//! `warn` line after the window carries `unshown`: how many occurrences of
//! that cause were not shown at `warn` since the last line.
//!
//! A cause is a string the call site builds from what identifies the
//! repeat: the site and the directory, entry or server it is about (never
//! a temp file's name or an error text that changes with each attempt).
//! The process keeps at most [`MAX_CAUSES`] causes; past that it forgets
//! the ones last shown longest ago, so a flood of distinct causes costs
//! bounded memory and at worst shows a forgotten cause again early.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a cause stays quiet at `warn` after it was shown.
pub const WARN_EVERY: Duration = Duration::from_secs(60);

/// The most causes one process remembers.
pub const MAX_CAUSES: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Seen {
    shown_at: Instant,
    unshown: u64,
}

/// The causes seen and when each was last shown.
#[derive(Debug, Default)]
struct Causes {
    seen: HashMap<String, Seen>,
}

impl Causes {
    /// `Some(unshown)` when `cause` is to be shown at `now`, `None` while
    /// it was shown less than `every` ago.
    fn admit(&mut self, cause: &str, now: Instant, every: Duration) -> Option<u64> {
        if let Some(s) = self.seen.get_mut(cause) {
            if now.saturating_duration_since(s.shown_at) < every {
                s.unshown += 1;
                return None;
            }
            let unshown = s.unshown;
            *s = Seen {
                shown_at: now,
                unshown: 0,
            };
            return Some(unshown);
        }
        if self.seen.len() >= MAX_CAUSES {
            self.forget_oldest();
        }
        self.seen.insert(
            cause.to_owned(),
            Seen {
                shown_at: now,
                unshown: 0,
            },
        );
        Some(0)
    }

    /// Forgets the half of the causes shown longest ago.
    fn forget_oldest(&mut self) {
        let mut at: Vec<Instant> = self.seen.values().map(|s| s.shown_at).collect();
        at.sort_unstable();
        let cut = at[at.len() / 2];
        self.seen.retain(|_, s| s.shown_at > cut);
    }
}

fn causes() -> &'static Mutex<Causes> {
    static CAUSES: OnceLock<Mutex<Causes>> = OnceLock::new();
    CAUSES.get_or_init(Mutex::default)
}

/// Whether a warning for `cause` is shown now: `Some(unshown)`, the number
/// of its occurrences not shown since it was last shown, or `None` while
/// that was less than [`WARN_EVERY`] ago. Use it through
/// [`warn_throttled!`](crate::warn_throttled).
pub fn admit(cause: &str) -> Option<u64> {
    causes()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .admit(cause, Instant::now(), WARN_EVERY)
}

/// `tracing::warn!` at most once per cause per
/// [`WARN_EVERY`](crate::throttle::WARN_EVERY), `tracing::debug!` for the
/// occurrences in between (see [`throttle`](crate::throttle)):
///
/// ```
/// # let dir = std::path::Path::new("/spool/x");
/// spool_core::warn_throttled!(
///     format!("stage {}", dir.display()),
///     dir = %dir.display(),
///     "staging into {} failed (will retry)", dir.display()
/// );
/// ```
///
/// The first argument is the cause; the rest is what `tracing::warn!`
/// takes. The `warn` line carries the field `unshown`. The caller needs
/// `tracing` as a dependency.
#[macro_export]
macro_rules! warn_throttled {
    ($cause:expr, $($arg:tt)+) => {
        match $crate::throttle::admit(&$cause) {
            ::core::option::Option::Some(unshown) => ::tracing::warn!(unshown, $($arg)+),
            ::core::option::Option::None => ::tracing::debug!($($arg)+),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_shown_once_per_window_and_the_next_line_counts_the_rest() {
        let mut c = Causes::default();
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        assert_eq!(c.admit("a", t0, every), Some(0));
        for s in 1..60 {
            assert_eq!(c.admit("a", t0 + Duration::from_secs(s), every), None);
        }
        // another cause is its own
        assert_eq!(c.admit("b", t0 + Duration::from_secs(1), every), Some(0));
        assert_eq!(c.admit("a", t0 + Duration::from_secs(60), every), Some(59));
        assert_eq!(c.admit("a", t0 + Duration::from_secs(61), every), None);
        assert_eq!(c.admit("a", t0 + Duration::from_secs(121), every), Some(1));
    }

    #[test]
    fn memory_is_bounded_and_the_longest_quiet_causes_are_forgotten() {
        let mut c = Causes::default();
        let t0 = Instant::now();
        let every = Duration::from_secs(60);
        for i in 0..MAX_CAUSES * 3 {
            let at = t0 + Duration::from_millis(i as u64);
            assert_eq!(c.admit(&format!("cause {i}"), at, every), Some(0));
            assert!(c.seen.len() <= MAX_CAUSES);
        }
        // the newest is remembered (quiet), the oldest forgotten (shown again)
        let later = t0 + Duration::from_millis(MAX_CAUSES as u64 * 3);
        assert_eq!(
            c.admit(&format!("cause {}", MAX_CAUSES * 3 - 1), later, every),
            None
        );
        assert_eq!(c.admit("cause 0", later, every), Some(0));
    }
}
