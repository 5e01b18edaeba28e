//! The engine's tunables: the `[engine]` table of the configuration file, less the tables nested
//! under it (`[engine.policy.*]`), which are not the engine's: the layer above pairs them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::superpage::RESET_SHIFT;
use crate::validate::{ConfigError, check};

/// Engine tunables. Defaults are Rainbow's where it has one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Counting interval, ms (Rainbow: 10^8 cycles ≈ 31 ms). Default 20. The planner sees what
    /// the intervals closed before it, and reuse gaps count whole intervals, so no epoch acts
    /// on fresher data, or follows shorter reuse, than one interval.
    pub interval_ms: u64,
    /// How often the counts cool, ms: stage 1 at the interval close that ends each period
    /// (rounded to whole intervals, at least one), stage 2 after the first plan that follows
    /// it. The engine's memory, apart from how fresh a plan's data is (`interval_ms`): a
    /// shorter interval with the same `cooling_ms` gives plans fresher data without forgetting
    /// faster. Default 20 (at every close of the default interval).
    pub cooling_ms: u64,
    /// Weight of a write relative to a read in the stage-1 ranking (Memos' 2). Default 2.
    pub write_weight: u32,
    /// Stage-1 cooling: counters are shifted right by this many bits once per `cooling_ms`
    /// (1 = halve; 16 or more = reset, Rainbow's per-interval counts). Default 1.
    pub cooling_shift: u32,
    /// Stage-2 cooling, applied after a plan has read the epoch's counts, at most once per
    /// `cooling_ms` (plans closer together than that share one). Default 1.
    pub stage2_cooling_shift: u32,
    /// Cooling leaves the hottest superpage (stage 1) or page (stage 2) at least this many
    /// samples, the evidence a promotion needs (`[engine.policy.benefit] min_samples`): it
    /// waits until the hottest holds this many times 2^shift (6 for a halving). At a PMU's
    /// sparse sampling, cooling on time alone forgets every sample before the next one lands
    /// and nothing ever looks hot; cooling as soon as the hottest reached the floor took it
    /// back below and halved every other count with it, so data sampled at half the hottest's
    /// rate never reached the floor (HeMem cools at 10 samples for a hot threshold of 4).
    /// 0 cools on time alone. Default 3.
    pub cool_after_samples: u32,
    /// Superpages given stage-2 counters each interval (Rainbow's N): the N hottest at each
    /// close, and while fewer hold them, any superpage at its first sample. Default 100.
    pub top_n: usize,
    /// Upper bound when N adapts to the fast tier's free capacity (one superpage per free 2 MiB,
    /// never below `top_n`). Default 1000.
    pub top_n_max: usize,
    /// Adapt N to the free capacity seen at the last plan. Default true.
    pub adapt_top_n: bool,
    /// Share of accesses the hot set covers (Rainbow after CHOP). Default 0.7.
    pub hot_coverage: f64,
    /// A superpage untouched this many intervals, cooled to zero and outside stage 2 is forgotten.
    /// Must exceed the longest epoch in intervals for reuse distances to be seen. Default 1280
    /// (25.6 s of 20 ms intervals).
    pub retain_intervals: u32,
    /// Reads credited per 4 KiB page per DAMON `nr_accesses`. Default 1.
    pub damon_weight: u32,
    /// Smoothing of the access-rate estimate (weight of the newest interval). Default 0.3.
    pub rate_smoothing: f64,
    /// Hard cap on superpages tracked in stage 1 (about 40 bytes each): a sample storm over a
    /// sparse address space cannot grow the engine past it. Samples of superpages beyond the
    /// cap are counted (`untracked_samples`) and left out until cold records are forgotten.
    /// Default 1048576 (2 TiB of touched address space, about 40 MiB).
    pub max_superpages: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            interval_ms: 20,
            cooling_ms: 20,
            write_weight: 2,
            cooling_shift: 1,
            stage2_cooling_shift: 1,
            cool_after_samples: 3,
            top_n: 100,
            top_n_max: 1000,
            adapt_top_n: true,
            hot_coverage: 0.7,
            retain_intervals: 1280,
            damon_weight: 1,
            rate_smoothing: 0.3,
            max_superpages: 1 << 20,
        }
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.interval_ms > 0,
            "interval_ms",
            self.interval_ms,
            "must be > 0",
        )?;
        check(
            self.cooling_ms > 0,
            "cooling_ms",
            self.cooling_ms,
            "must be > 0",
        )?;
        check(
            self.top_n > 0 && self.top_n <= self.top_n_max,
            "top_n",
            self.top_n,
            "must be > 0 and <= top_n_max",
        )?;
        check(
            self.top_n_max < u32::MAX as usize,
            "top_n_max",
            self.top_n_max,
            "must fit in u32",
        )?;
        check(
            self.max_superpages >= self.top_n_max && self.max_superpages < u32::MAX as usize,
            "max_superpages",
            self.max_superpages,
            "must be at least top_n_max (stage 2 picks from stage 1) and fit in u32",
        )?;
        check(
            self.hot_coverage > 0.0 && self.hot_coverage <= 1.0,
            "hot_coverage",
            self.hot_coverage,
            "must be within (0, 1]",
        )?;
        check(
            self.retain_intervals < 1 << 15,
            "retain_intervals",
            self.retain_intervals,
            "must be below 32768 (16-bit interval stamps)",
        )?;
        check(
            self.rate_smoothing > 0.0 && self.rate_smoothing <= 1.0,
            "rate_smoothing",
            self.rate_smoothing,
            "must be within (0, 1]",
        )
    }

    /// The count the hottest must hold before cooling by `shift` bits: enough that cooling
    /// leaves it `cool_after_samples`. A reset (16 bits or more) keeps nothing whatever the
    /// count, so it waits for `cool_after_samples` alone.
    #[must_use]
    pub fn cooling_gate(&self, shift: u32) -> u32 {
        if shift >= RESET_SHIFT {
            self.cool_after_samples
        } else {
            self.cool_after_samples.saturating_mul(1 << shift)
        }
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// Counting intervals per cooling: `cooling_ms` in whole intervals, at least one.
    #[must_use]
    pub fn intervals_per_cooling(&self) -> u64 {
        let interval = self.interval_ms.max(1);
        ((self.cooling_ms + interval / 2) / interval).max(1)
    }

    /// The time between two coolings: [`Self::intervals_per_cooling`] intervals.
    #[must_use]
    pub fn cooling_period(&self) -> Duration {
        self.interval() * u32::try_from(self.intervals_per_cooling()).unwrap_or(u32::MAX)
    }

    /// Converts a cooled stage-1 count into accesses per interval, from the count's steady
    /// state at a cooling close: with `a` accesses per interval and `k` intervals per cooling,
    /// `x = (x + (k − 1) a) 2^−s + a`, so `x = a (1 + (k − 1) 2^−s) / (1 − 2^−s)` (for `k = 1`,
    /// `a / (1 − 2^−s)`).
    pub fn stage1_per_interval(&self) -> f64 {
        let kept = if self.cooling_shift >= RESET_SHIFT {
            0.0
        } else {
            0.5f64.powi(self.cooling_shift as i32)
        };
        let k = self.intervals_per_cooling() as f64;
        (1.0 - kept) / (1.0 + (k - 1.0) * kept)
    }

    /// Converts a stage-2 count (cooled once per epoch) into accesses per epoch.
    pub fn stage2_per_epoch(&self) -> f64 {
        1.0 - 0.5f64.powi(self.stage2_cooling_shift.min(64) as i32)
    }
}
