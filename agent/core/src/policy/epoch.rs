//! Doudali's adaptive migration epoch.
//!
//! Two clocks run: the engine's short counting interval, and the migration epoch at whose end the
//! planner runs. Doudali shows the hit ratio dips when the epoch is shorter than the reuse
//! distance of a significant group of pages, that shrinking working sets want short epochs (lud),
//! and that a hot set oscillating around the capacity cut-off wants long ones (pagerank at 30 %).
//! The paper gives a correlation, not an algorithm; the controller below is the digest's
//! heuristic, applied once per epoch with multiplicative steps:
//! 1. oscillation (ping-pong, or a full fast tier with a half-changing hot set) → longer;
//! 2. last plan's moves did not pay back: what its promotions gained, less what the data evicted
//!    for them lost, came to less than their copy cost → longer;
//! 3. the working set shrank, or the hot set shifted → shorter;
//! 4. never shorter than the median sampled reuse time, the side of the dip that works. Only
//!    reuses the fast tier can bridge count: one after longer than the workload takes to touch a
//!    fast tier's worth of other superpages finds its data evicted whatever the epoch. The reuse
//!    histogram halves at each plan rather than restarting, so one epoch's burst of long gaps
//!    does not decide it alone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, check};

/// Epoch tunables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpochConfig {
    /// Adapt the epoch; when false it stays at `initial_ms`. Default true.
    pub adaptive: bool,
    /// First epoch length, ms. Default 1000.
    pub initial_ms: u64,
    /// Shortest epoch, ms. Default 100 (HMA's best; Kleio's 10 ms is overhead-bound in user space).
    pub min_ms: u64,
    /// Longest epoch, ms. Default 20000 (Memos' decision loop).
    pub max_ms: u64,
    /// Factor of one lengthening or shortening step. Default 2.
    pub step: f64,
    /// Hot-set Jaccard overlap of consecutive epochs below which the hot set counts as shifting. Default 0.5.
    pub shift_jaccard: f64,
    /// Above this overlap the hot set counts as stable (no oscillation). Default 0.9.
    pub stable_jaccard: f64,
    /// Drop in touched superpages between epochs that counts as shrinking, fraction. Default 0.1.
    pub shrink_fraction: f64,
    /// Ping-pong share of moved bytes that counts as oscillation. Default 0.05.
    pub oscillation_pingpong: f64,
    /// Net realised value of last plan's moves (promotions less the evictions made for them)
    /// over their cost, below which the epoch grows and the benefit threshold rises. Default 1.0.
    pub min_payback: f64,
}

impl Default for EpochConfig {
    fn default() -> Self {
        Self {
            adaptive: true,
            initial_ms: 1000,
            min_ms: 100,
            max_ms: 20_000,
            step: 2.0,
            shift_jaccard: 0.5,
            stable_jaccard: 0.9,
            shrink_fraction: 0.1,
            oscillation_pingpong: 0.05,
            min_payback: 1.0,
        }
    }
}

impl EpochConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.min_ms > 0 && self.min_ms <= self.max_ms,
            "epoch.min_ms",
            self.min_ms,
            "must be > 0 and <= max_ms",
        )?;
        check(
            (self.min_ms..=self.max_ms).contains(&self.initial_ms),
            "epoch.initial_ms",
            self.initial_ms,
            "must be within [min_ms, max_ms]",
        )?;
        check(self.step > 1.0, "epoch.step", self.step, "must be > 1")?;
        check(
            self.shift_jaccard <= self.stable_jaccard,
            "epoch.shift_jaccard",
            self.shift_jaccard,
            "must be <= stable_jaccard",
        )
    }
}

/// Sampled reuse times, in counting intervals: exact up to 64, power-of-two buckets beyond.
#[derive(Clone, Debug)]
pub struct ReuseHistogram {
    linear: [u64; 65],
    log: [u64; 11],
}

impl Default for ReuseHistogram {
    fn default() -> Self {
        Self {
            linear: [0; 65],
            log: [0; 11],
        }
    }
}

impl ReuseHistogram {
    /// Records one reuse after `gap` intervals (≥ 1).
    pub fn record(&mut self, gap: u32) {
        if gap <= 64 {
            self.linear[gap as usize] += 1;
        } else {
            // gap in [2^k, 2^(k+1)) with k in 6..=16 → bucket k-6.
            let k = (31 - gap.leading_zeros()).min(16) as usize;
            self.log[k - 6] += 1;
        }
    }

    #[must_use]
    pub fn count(&self) -> u64 {
        self.linear.iter().chain(&self.log).sum()
    }

    /// (lowest gap, highest gap, count) of every bucket, shortest gaps first.
    fn buckets(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        let linear = (0u32..).zip(&self.linear).map(|(gap, &c)| (gap, gap, c));
        let log = (6u32..).zip(&self.log).map(|(k, &c)| {
            let high = if k == 16 { u32::MAX } else { (2 << k) - 1 };
            (1 << k, high, c)
        });
        linear.chain(log)
    }

    /// Median reuse gap in intervals (a lower bound of its bucket beyond 64).
    #[must_use]
    pub fn median(&self) -> Option<u32> {
        self.median_within(u32::MAX)
    }

    /// Median of the gaps up to `limit` intervals (buckets starting beyond it are left out).
    #[must_use]
    pub fn median_within(&self, limit: u32) -> Option<u32> {
        let kept = || self.buckets().take_while(|&(low, _, _)| low <= limit);
        let n: u64 = kept().map(|(_, _, c)| c).sum();
        let half = n.div_ceil(2);
        let mut seen = 0;
        kept().find_map(|(low, _, c)| {
            seen += c;
            (n > 0 && seen >= half).then_some(low)
        })
    }

    /// The shortest gap (an upper bound of its bucket beyond 64) that at least `k` of the recorded
    /// values do not exceed; `None` if fewer than `k` were recorded.
    #[must_use]
    pub fn reached_by(&self, k: u64) -> Option<u32> {
        let mut seen = 0;
        self.buckets().find_map(|(_, high, c)| {
            seen += c;
            (seen >= k).then_some(high)
        })
    }

    /// Halves every count; the planner calls it once per epoch instead of clearing, so the
    /// median weighs older epochs less without forgetting them. Cleared each epoch, the median
    /// of a short epoch is a handful of reuses: on stream, the one epoch in which a window swept
    /// seconds earlier returned lifted the floor from 100 ms to 6.4 s, and no plan ran again.
    pub fn halve(&mut self) {
        for c in self.linear.iter_mut().chain(&mut self.log) {
            *c /= 2;
        }
    }
}

/// What the controller looks at, measured over the epoch that just ended.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EpochInputs {
    /// Median sampled reuse time of superpages, over the reuses the fast tier can bridge (those
    /// shorter than it takes the workload to touch as much other data as the tier holds).
    pub reuse_median: Option<Duration>,
    /// Jaccard overlap of this epoch's hot superpage set with the previous epoch's.
    pub jaccard: Option<f64>,
    /// Superpages touched during this epoch and the previous one.
    pub touched: u64,
    pub prev_touched: Option<u64>,
    /// Share of last plan's moved bytes that reversed a recent move.
    pub pingpong_share: f64,
    /// Net realised value of last plan's moves over their cost; `None` if it promoted nothing.
    pub payback: Option<f64>,
    /// The fast tier was full (promotions needed evictions, or free capacity hit the reserve).
    pub capacity_bound: bool,
}

/// Why the epoch changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EpochChange {
    #[default]
    Hold,
    LongerOscillation,
    LongerPayback,
    LongerReuse,
    ShorterShrinking,
    ShorterShifting,
}

#[derive(Clone, Debug)]
pub struct EpochController {
    current_ms: u64,
}

impl EpochController {
    #[must_use]
    pub fn new(cfg: &EpochConfig) -> Self {
        Self {
            current_ms: cfg.initial_ms,
        }
    }

    #[must_use]
    pub fn current(&self) -> Duration {
        Duration::from_millis(self.current_ms)
    }

    /// Applies one epoch's observations.
    pub fn update(&mut self, cfg: &EpochConfig, i: &EpochInputs) -> EpochChange {
        if !cfg.adaptive {
            return EpochChange::Hold;
        }
        let cur = self.current_ms as f64;
        let half_shifted = i
            .jaccard
            .is_some_and(|j| j >= cfg.shift_jaccard && j < cfg.stable_jaccard);
        let shrinking = i
            .prev_touched
            .is_some_and(|p| (i.touched as f64) < p as f64 * (1.0 - cfg.shrink_fraction));
        let (mut next, mut change) =
            if i.pingpong_share > cfg.oscillation_pingpong || (i.capacity_bound && half_shifted) {
                (cur * cfg.step, EpochChange::LongerOscillation)
            } else if i.payback.is_some_and(|p| p < cfg.min_payback) {
                (cur * cfg.step, EpochChange::LongerPayback)
            } else if shrinking {
                (cur / cfg.step, EpochChange::ShorterShrinking)
            } else if i.jaccard.is_some_and(|j| j < cfg.shift_jaccard) {
                (cur / cfg.step, EpochChange::ShorterShifting)
            } else {
                (cur, EpochChange::Hold)
            };
        if let Some(reuse) = i.reuse_median {
            let floor = reuse.as_secs_f64() * 1000.0;
            if next < floor {
                next = floor;
                change = if floor > cur {
                    EpochChange::LongerReuse
                } else {
                    change
                };
            }
        }
        self.current_ms = (next.round() as u64).clamp(cfg.min_ms, cfg.max_ms);
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(ms: u64) -> EpochController {
        EpochController { current_ms: ms }
    }

    #[test]
    fn reuse_histogram_median() {
        let mut h = ReuseHistogram::default();
        assert_eq!(h.median(), None);
        for g in [2, 3, 3, 10, 64] {
            h.record(g);
        }
        assert_eq!(h.median(), Some(3));
        for _ in 0..6 {
            h.record(1000);
        }
        assert_eq!(h.median(), Some(512));
        h.record(u32::MAX);
        assert_eq!(h.count(), 12);
        // Halving keeps the shape (odd counts round down) and empties an all-ones histogram.
        h.halve();
        assert_eq!((h.count(), h.median()), (4, Some(512)));
        h.halve();
        assert_eq!((h.count(), h.median()), (1, Some(512)));
        h.halve();
        assert_eq!((h.count(), h.median()), (0, None));
    }

    #[test]
    fn reuse_histogram_median_within_a_limit_and_the_reach_of_a_count() {
        let mut h = ReuseHistogram::default();
        for g in [1, 1, 2, 40, 40, 40, 200, 200, 200] {
            h.record(g);
        }
        assert_eq!(h.median(), Some(40));
        // Up to 39 intervals only 1, 1, 2 count; up to 64, the 40s as well.
        assert_eq!(h.median_within(39), Some(1));
        assert_eq!(h.median_within(64), Some(2));
        assert_eq!(h.median_within(0), None);
        // 200 is in the bucket [128, 255]: counted from its lower bound.
        assert_eq!(h.median_within(128), Some(40));
        // The 3rd shortest is 2; the 6th 40; the 7th lies in [128, 255], reported as 255.
        assert_eq!(h.reached_by(3), Some(2));
        assert_eq!(h.reached_by(6), Some(40));
        assert_eq!(h.reached_by(7), Some(255));
        assert_eq!(h.reached_by(10), None);
        h.record(u32::MAX);
        assert_eq!(h.reached_by(10), Some(u32::MAX));
    }

    #[test]
    fn oscillation_and_bad_payback_lengthen() {
        let cfg = EpochConfig::default();
        let mut c = ctl(1000);
        let osc = EpochInputs {
            pingpong_share: 0.06,
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &osc), EpochChange::LongerOscillation);
        assert_eq!(c.current(), Duration::from_secs(2));
        let cutoff = EpochInputs {
            capacity_bound: true,
            jaccard: Some(0.7),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &cutoff), EpochChange::LongerOscillation);
        let pay = EpochInputs {
            payback: Some(0.5),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &pay), EpochChange::LongerPayback);
        assert_eq!(c.current(), Duration::from_secs(8));
        // At exactly the bound, no oscillation.
        let edge = EpochInputs {
            pingpong_share: 0.05,
            payback: Some(1.0),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &edge), EpochChange::Hold);
    }

    #[test]
    fn shrinking_and_shifting_shorten_down_to_min() {
        let cfg = EpochConfig::default();
        let mut c = ctl(400);
        let shrink = EpochInputs {
            touched: 89,
            prev_touched: Some(100),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &shrink), EpochChange::ShorterShrinking);
        assert_eq!(c.current(), Duration::from_millis(200));
        let steady = EpochInputs {
            touched: 90,
            prev_touched: Some(100),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &steady), EpochChange::Hold);
        let shift = EpochInputs {
            jaccard: Some(0.49),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &shift), EpochChange::ShorterShifting);
        assert_eq!(c.update(&cfg, &shift), EpochChange::ShorterShifting);
        assert_eq!(c.current(), Duration::from_millis(100));
    }

    #[test]
    fn never_shorter_than_reuse() {
        let cfg = EpochConfig::default();
        let mut c = ctl(1000);
        let i = EpochInputs {
            jaccard: Some(0.1),
            reuse_median: Some(Duration::from_millis(1500)),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &i), EpochChange::LongerReuse);
        assert_eq!(c.current(), Duration::from_millis(1500));
        let far = EpochInputs {
            reuse_median: Some(Duration::from_secs(60)),
            ..EpochInputs::default()
        };
        c.update(&cfg, &far);
        assert_eq!(c.current(), Duration::from_secs(20));
    }

    #[test]
    fn fixed_epoch_when_not_adaptive() {
        let cfg = EpochConfig {
            adaptive: false,
            ..EpochConfig::default()
        };
        let mut c = EpochController::new(&cfg);
        let i = EpochInputs {
            pingpong_share: 1.0,
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &i), EpochChange::Hold);
        assert_eq!(c.current(), Duration::from_secs(1));
    }
}
