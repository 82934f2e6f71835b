//! Where a drain's time goes: for each stage of the pipeline, the wall time
//! during which at least one of its operations was in flight, and the time
//! nothing was (the pipeline waiting on a linger or a wake-up), plus the
//! time spent listing the own directory's ready packs. The stages overlap
//! (that is the pipeline's point), so the busy times add up to more than
//! the drain's wall time; `idle` is the time nothing at all moved.
//!
//! The pipeline's select loop samples what is in flight each time it is
//! about to wait ([`StageClock::tick`]): the time since the previous sample
//! is charged to every stage that was busy then, or to `idle`.

use std::time::{Duration, Instant};

/// Time per stage, summed over every drain of the service (own packs,
/// adopted siblings, hand-offs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Listing the own directory's ready packs (each cycle's scan).
    pub list: Duration,
    /// At least one validation (ahead of its upload) in flight.
    pub validate: Duration,
    /// At least one upload in flight.
    pub upload: Duration,
    /// An index call in flight.
    pub index: Duration,
    /// At least one removal of indexed packs in flight.
    pub remove: Duration,
    /// Inside a drain with nothing in flight.
    pub idle: Duration,
}

/// What was in flight at a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Busy {
    pub(crate) validate: bool,
    pub(crate) upload: bool,
    pub(crate) index: bool,
    pub(crate) remove: bool,
}

/// One drain's sampling clock.
#[derive(Debug)]
pub(crate) struct StageClock {
    at: Instant,
    busy: Busy,
}

impl StageClock {
    /// A clock whose first interval starts now, with nothing in flight.
    pub(crate) fn start() -> StageClock {
        StageClock {
            at: Instant::now(),
            busy: Busy::default(),
        }
    }

    /// Charges the time since the last sample to what was in flight then,
    /// and remembers `busy` for the next interval.
    pub(crate) fn tick(&mut self, busy: Busy, into: &mut StageTimes) {
        let now = Instant::now();
        let dt = now.saturating_duration_since(self.at);
        let b = self.busy;
        for (on, total) in [
            (b.validate, &mut into.validate),
            (b.upload, &mut into.upload),
            (b.index, &mut into.index),
            (b.remove, &mut into.remove),
        ] {
            if on {
                *total += dt;
            }
        }
        if b == Busy::default() {
            into.idle += dt;
        }
        self.at = now;
        self.busy = busy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_goes_to_every_stage_busy_in_it_or_to_idle() {
        let mut t = StageTimes::default();
        let mut c = StageClock::start();
        std::thread::sleep(Duration::from_millis(20));
        let both = Busy {
            upload: true,
            validate: true,
            ..Busy::default()
        };
        c.tick(both, &mut t); // 20 ms of nothing: idle
        std::thread::sleep(Duration::from_millis(30));
        c.tick(Busy::default(), &mut t); // 30 ms of upload and validation
        assert!(t.idle >= Duration::from_millis(20), "{t:?}");
        assert!(t.upload >= Duration::from_millis(30), "{t:?}");
        assert_eq!(t.upload, t.validate);
        assert!(t.idle < t.upload, "{t:?}");
        assert_eq!(
            (t.index, t.remove, t.list),
            (Duration::ZERO, Duration::ZERO, Duration::ZERO)
        );
    }
}
