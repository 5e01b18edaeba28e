//! How densely a target is sampled: samples per second, and per second per GiB of its
//! resident memory. The planner's evidence is only as good as this density (docs/evaluation.md,
//! "Sample density"), so `memtide status` and `/metrics` show it for each target.
//!
//! The rate is taken over windows of at least [`DENSITY_WINDOW`] of the agent clock, not per
//! epoch: at a PMU's density a target gets a few samples a second, so one epoch's count is 0
//! or 1 and its rate would swing between nothing and hundreds.

use std::time::Duration;

/// The shortest stretch a rate is taken over.
pub(super) const DENSITY_WINDOW: Duration = Duration::from_secs(10);

const GIB: f64 = (1u64 << 30) as f64;

/// Samples counted against the agent clock.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SampleDensity {
    /// Where the current window began: its time and the target's sample count then.
    window_start: Option<(Duration, u64)>,
    /// Samples per second over the last complete window.
    last_window: Option<f64>,
}

impl SampleDensity {
    /// Counting from `now`, when the target was found (none of its samples seen yet).
    pub(super) const fn starting_at(now: Duration) -> Self {
        Self {
            window_start: Some((now, 0)),
            last_window: None,
        }
    }

    /// Takes the target's cumulative sample count `samples` at `now`, and returns its samples
    /// per second: over the last complete window, or since counting began while none has
    /// completed (`None` until the clock has moved).
    pub(super) fn update(&mut self, now: Duration, samples: u64) -> Option<f64> {
        let Some((since, counted)) = self.window_start else {
            self.window_start = Some((now, samples));
            return None;
        };
        let elapsed = now.saturating_sub(since);
        let rate = rate(samples.saturating_sub(counted), elapsed);
        if elapsed >= DENSITY_WINDOW {
            self.last_window = rate;
            self.window_start = Some((now, samples));
        }
        self.last_window.or(rate)
    }
}

fn rate(samples: u64, over: Duration) -> Option<f64> {
    let seconds = over.as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a sample count as a rate")]
    (seconds > 0.0).then(|| samples as f64 / seconds)
}

/// `per_second` samples over `resident_bytes` of memory, per GiB (`None` while nothing is
/// resident: a density over no memory means nothing).
pub(super) fn per_gib(per_second: f64, resident_bytes: u64) -> Option<f64> {
    #[expect(clippy::cast_precision_loss, reason = "bytes as GiB")]
    let gib = resident_bytes as f64 / GIB;
    (resident_bytes > 0).then(|| per_second / gib)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DENSITY_WINDOW, SampleDensity, per_gib};

    const fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn before_a_window_completes_the_rate_runs_from_when_counting_began() {
        let mut density = SampleDensity::starting_at(secs(5));
        assert_eq!(density.update(secs(5), 0), None, "no time has passed");
        assert_eq!(density.update(secs(7), 10), Some(5.0));
        assert_eq!(density.update(secs(9), 12), Some(3.0));
    }

    #[test]
    fn a_complete_window_stands_until_the_next_one_completes() {
        let mut density = SampleDensity::starting_at(Duration::ZERO);
        // 100 samples in the first 10 s, then a burst of 1000 in the next 2 s: the
        // published rate stays the first window's until the second one is complete.
        assert_eq!(density.update(DENSITY_WINDOW, 100), Some(10.0));
        assert_eq!(density.update(secs(12), 1100), Some(10.0));
        assert_eq!(density.update(secs(20), 1100), Some(100.0));
        // A target that goes quiet reads 0 once a window has seen nothing.
        assert_eq!(density.update(secs(31), 1100), Some(0.0));
    }

    #[test]
    fn density_per_gib_is_over_the_resident_memory() {
        assert_eq!(per_gib(8.0, 4 << 30), Some(2.0));
        assert_eq!(per_gib(8.0, 512 << 20), Some(16.0));
        assert_eq!(per_gib(8.0, 0), None);
    }
}
