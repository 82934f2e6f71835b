//! Capped exponential backoff with jitter, and sleeps a cancel cuts.

use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

/// The wait before attempt `attempt + 1` after `attempt` failed
/// (`attempt` ≥ 1): `initial · 2^(attempt−1)`, capped at `max`, then
/// jittered down to a uniform point in its upper half, so many uploaders
/// failing together do not come back together.
pub fn delay(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(30);
    let full = initial.saturating_mul(1u32 << exp).min(max);
    let half = full / 2;
    let jitter = rand::rng().random_range(0.0..=1.0);
    half + half.mul_f64(jitter)
}

/// Sleeps `d`, or less if `cancel` fires first. Returns `false` if cut.
pub async fn sleep(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps_with_jitter_in_upper_half() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(1);
        for _ in 0..200 {
            let d1 = delay(i, m, 1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= i, "{d1:?}");
            let d3 = delay(i, m, 3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d20 = delay(i, m, 20);
            assert!(d20 >= m / 2 && d20 <= m, "{d20:?}");
        }
        assert!(delay(i, m, u32::MAX) <= m);
    }

    // real time, not tokio's paused clock: the `test-util` feature would
    // give the workspace's tests a tokio other than the `spool` binary's,
    // and the binary the tests run is built apart (TESTING.md)
    #[tokio::test]
    async fn sleep_is_cut_by_cancel() {
        let c = CancellationToken::new();
        let c2 = c.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c2.cancel();
        });
        let start = tokio::time::Instant::now();
        assert!(!sleep(Duration::from_secs(3600), &c).await);
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(sleep(Duration::from_millis(1), &CancellationToken::new()).await);
    }
}
