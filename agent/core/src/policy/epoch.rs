//! Doudali's adaptive migration epoch.
//!
//! Two clocks run: the engine's short counting interval, and the migration epoch at whose end the
//! planner runs. Doudali shows the hit ratio dips when the epoch is shorter than the reuse
//! distance of a significant group of pages, that shrinking working sets want short epochs (lud),
//! and that a hot set oscillating around the capacity cut-off wants long ones (pagerank at 30 %).
//! The paper gives a correlation, not an algorithm; the controller below is the digest's
//! heuristic, applied once per epoch with multiplicative steps:
//! 1. oscillation (ping-pong, or a full fast tier with a half-changing hot set and moves coming
//!    back) whose moves did not pay back → longer;
//! 2. last plan's moves did not pay back: what its promotions gained, less what the data evicted
//!    for them lost, came to less than their copy cost → longer;
//! 3. the working set shrank, or the hot set shifted → shorter, unless the last payback
//!    measured fell short (then hold);
//! 4. otherwise, last plan's moves paid back → shorter: a lengthening lasts only while the moves
//!    keep failing to pay, so the epoch settles at the shortest length at which they pay
//!    instead of keeping the longest any burst of unpaid moves reached (the data a paying move
//!    brought in would have paid from an epoch sooner);
//! 5. with `reuse_floor` (off by default, see there): never shorter than the median sampled
//!    reuse time, the side of the dip Doudali found to work. Only reuses the fast tier can
//!    bridge count: one after longer than the workload takes to touch a fast tier's worth of
//!    other superpages finds its data evicted whatever the epoch. The reuse histogram halves
//!    at each plan rather than restarting, so one epoch's burst of long gaps does not decide
//!    it alone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{ConfigError, check};

/// Epoch tunables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpochConfig {
    /// Adapt the epoch; when false it stays at `initial_ms`. Default true.
    pub adaptive: bool,
    /// First epoch length, ms: start at the shortest and lengthen on evidence (oscillation,
    /// moves that do not pay, and with `reuse_floor` reuse). Default 10.
    pub initial_ms: u64,
    /// Shortest epoch, ms. Default 10 (HeMem's migration interval, Kleio's epoch). The daemon
    /// also keeps planning, all targets together, under 5 % of a core in the long run: a lone
    /// target whose plan takes 5 ms plans at most every 100 ms once a minute's worth of burst
    /// is spent.
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
    /// Keep the epoch at least the median sampled reuse time the fast tier can bridge (Doudali's
    /// floor, rule 5 of the controller). Default false: Doudali's dip comes from ranking pages
    /// by one epoch's accesses, so that data reused less often than once an epoch looks cold.
    /// memtide's engine carries cooled heat across epochs, and the short side of the dip is
    /// the better one for it: on `strided-reuse` a fixed 100 ms epoch reaches a hit ratio of
    /// 0.55, epochs of 1.6 to 3.2 s around its 2.7 s reuse distance 0.23 to 0.26
    /// (docs/evaluation.md, epoch sweep). On the real-program corpus the floor lengthened
    /// epochs for nothing: geometric mean of relative time 1.163 with it, 1.160 without at
    /// fast 10 %, 1.099 and 1.089 at 25 % (the report's seed; three seeds agree).
    pub reuse_floor: bool,
}

impl Default for EpochConfig {
    fn default() -> Self {
        Self {
            adaptive: true,
            initial_ms: 10,
            min_ms: 10,
            max_ms: 20_000,
            step: 2.0,
            shift_jaccard: 0.5,
            stable_jaccard: 0.9,
            shrink_fraction: 0.1,
            oscillation_pingpong: 0.05,
            min_payback: 1.0,
            reuse_floor: false,
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

/// What the last plan's moves realised against what they cost (the epoch controller's payback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payback {
    /// The last plan promoted nothing, or too little to judge from samples: no verdict.
    Unmeasured,
    /// The moves realised at least what they cost.
    Paid,
    /// The moves realised less than they cost.
    Unpaid,
}

impl Payback {
    /// The verdict on a measured payback ratio (realised over cost) against `min_payback`.
    #[must_use]
    pub fn judge(ratio: Option<f64>, min_payback: f64) -> Self {
        match ratio {
            None => Self::Unmeasured,
            Some(r) if r >= min_payback => Self::Paid,
            Some(_) => Self::Unpaid,
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
    /// Net realised value of last plan's moves over their cost; `None` if it promoted nothing
    /// or staked too little for a sampled verdict (`benefit.min_samples` sampled reads).
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
    /// Would have shortened, but the last moves measured did not pay back.
    HoldUnpaid,
    LongerOscillation,
    LongerPayback,
    LongerReuse,
    ShorterShrinking,
    ShorterShifting,
    /// The last plan's moves paid back and nothing else spoke: a step back towards the shortest.
    ShorterPaid,
}

#[derive(Clone, Debug)]
pub struct EpochController {
    current_ms: u64,
    /// The last payback measured (plans that promote nothing measure none).
    last_payback: Option<f64>,
}

impl EpochController {
    #[must_use]
    pub fn new(cfg: &EpochConfig) -> Self {
        Self {
            current_ms: cfg.initial_ms,
            last_payback: None,
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
        // Moves that reverse earlier ones are waste only when they do not pay for themselves: a
        // sweep through more data than the fast tier holds is promoted and demoted again by
        // design, and pays while the sweep is on it.
        if i.payback.is_some() {
            self.last_payback = i.payback;
        }
        // A plan that promoted nothing measures no payback; until one does, the last one
        // stands, or a stream the moves could not keep up with would shorten the epoch again
        // as soon as the threshold stopped the moves.
        let verdict = |payback| Payback::judge(payback, cfg.min_payback);
        let last_unpaid = verdict(self.last_payback) == Payback::Unpaid;
        let paid = verdict(i.payback) == Payback::Paid;
        // Ping-pong is oscillation when the moves measured did not pay: moves too small for a
        // verdict (`Payback::Unmeasured`) say no more by reversing each other than by paying,
        // and a fast tier of a few superpages reverses some of them every epoch. A full fast
        // tier under a half-changing hot set (Doudali's pagerank at 30 %: the hot set swaps
        // around the capacity cut-off) is oscillation unless the moves paid, but only where
        // some moves did reverse earlier ones: a hot set that half changes without any move
        // coming back is moving on (python's next phase, ibs at 1 in 4: epochs of 160 ms lost
        // it a third of its hit ratio), which a longer epoch follows later.
        let pingpong =
            i.pingpong_share > cfg.oscillation_pingpong && verdict(i.payback) == Payback::Unpaid;
        let swapping = i.capacity_bound && half_shifted && i.pingpong_share > 0.0;
        let oscillating = (pingpong || swapping) && !paid;
        let (mut next, mut change) = if oscillating {
            (cur * cfg.step, EpochChange::LongerOscillation)
        } else if verdict(i.payback) == Payback::Unpaid {
            (cur * cfg.step, EpochChange::LongerPayback)
        } else if last_unpaid {
            (cur, EpochChange::HoldUnpaid)
        } else if shrinking {
            (cur / cfg.step, EpochChange::ShorterShrinking)
        } else if i.jaccard.is_some_and(|j| j < cfg.shift_jaccard) {
            (cur / cfg.step, EpochChange::ShorterShifting)
        } else if paid {
            (cur / cfg.step, EpochChange::ShorterPaid)
        } else {
            (cur, EpochChange::Hold)
        };
        if let Some(reuse) = i.reuse_median.filter(|_| cfg.reuse_floor) {
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
        EpochController {
            current_ms: ms,
            last_payback: None,
        }
    }

    #[test]
    fn oscillation_and_bad_payback_lengthen() {
        let cfg = EpochConfig::default();
        let mut c = ctl(1000);
        // Ping-pong of moves too small for a payback verdict is no evidence either way.
        let small = EpochInputs {
            pingpong_share: 0.5,
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &small), EpochChange::Hold);
        assert_eq!(c.current(), Duration::from_secs(1));
        let osc = EpochInputs {
            pingpong_share: 0.06,
            payback: Some(0.5),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &osc), EpochChange::LongerOscillation);
        assert_eq!(c.current(), Duration::from_secs(2));
        let cutoff = EpochInputs {
            capacity_bound: true,
            jaccard: Some(0.7),
            pingpong_share: 0.01,
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &cutoff), EpochChange::LongerOscillation);
        // A full fast tier whose hot set half changes with no move coming back is moving on
        // (a phase change): no longer, and the unpaid verdict before holds it.
        let phase = EpochInputs {
            pingpong_share: 0.0,
            ..cutoff
        };
        assert_eq!(c.update(&cfg, &phase), EpochChange::HoldUnpaid);
        assert_eq!(c.current(), Duration::from_secs(4));
        let pay = EpochInputs {
            payback: Some(0.5),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &pay), EpochChange::LongerPayback);
        assert_eq!(c.current(), Duration::from_secs(8));
        // At exactly the bound, no oscillation, and moves that paid exactly: a step back.
        let edge = EpochInputs {
            pingpong_share: 0.05,
            payback: Some(1.0),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &edge), EpochChange::ShorterPaid);
        assert_eq!(c.current(), Duration::from_secs(4));
    }

    #[test]
    fn paying_moves_step_the_epoch_back_to_the_shortest_above_the_reuse_floor() {
        let cfg = EpochConfig {
            reuse_floor: true,
            ..EpochConfig::default()
        };
        let mut c = ctl(20);
        let unpaid = EpochInputs {
            payback: Some(0.5),
            ..EpochInputs::default()
        };
        let paid = EpochInputs {
            payback: Some(4.0),
            ..EpochInputs::default()
        };
        // A burst of moves that did not pay lengthens; the lengthening lasts only as long as
        // they keep failing.
        for _ in 0..3 {
            assert_eq!(c.update(&cfg, &unpaid), EpochChange::LongerPayback);
        }
        assert_eq!(c.current(), Duration::from_millis(160));
        for ms in [80, 40, 20, 10] {
            assert_eq!(c.update(&cfg, &paid), EpochChange::ShorterPaid);
            assert_eq!(c.current(), Duration::from_millis(ms));
        }
        assert_eq!(c.update(&cfg, &paid), EpochChange::ShorterPaid);
        assert_eq!(c.current(), Duration::from_millis(cfg.min_ms));
        // Nothing promoted (no payback): the epoch holds where it is.
        let mut c = ctl(80);
        assert_eq!(c.update(&cfg, &EpochInputs::default()), EpochChange::Hold);
        assert_eq!(c.current(), Duration::from_millis(80));
        // Paying moves do not take the epoch under the reuse the fast tier bridges.
        let paid_with_reuse = EpochInputs {
            reuse_median: Some(Duration::from_millis(60)),
            ..paid
        };
        assert_eq!(c.update(&cfg, &paid_with_reuse), EpochChange::ShorterPaid);
        assert_eq!(c.current(), Duration::from_millis(60));
    }

    #[test]
    fn shrinking_and_shifting_shorten_down_to_min() {
        let cfg = EpochConfig {
            min_ms: 100,
            ..EpochConfig::default()
        };
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
    fn paid_oscillation_shortens_and_unpaid_moves_hold_against_shortening() {
        let cfg = EpochConfig::default();
        let mut c = ctl(400);
        // Ping-pong that paid for itself (a sweep promoted and demoted by design) is no
        // oscillation to wait out: the moves paid, so a step back.
        let paid_pingpong = EpochInputs {
            pingpong_share: 0.5,
            payback: Some(3.0),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &paid_pingpong), EpochChange::ShorterPaid);
        assert_eq!(c.current(), Duration::from_millis(200));
        // Moves that did not pay: longer, and a shrinking working set seen while no later plan
        // promoted anything (no payback measured) does not shorten it again.
        let unpaid = EpochInputs {
            payback: Some(0.2),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &unpaid), EpochChange::LongerPayback);
        let shrinking = EpochInputs {
            touched: 50,
            prev_touched: Some(100),
            ..EpochInputs::default()
        };
        assert_eq!(c.update(&cfg, &shrinking), EpochChange::HoldUnpaid);
        assert_eq!(c.current(), Duration::from_millis(400));
        // Once a plan's moves pay again, shrinking shortens.
        let paid_shrinking = EpochInputs {
            payback: Some(2.0),
            ..shrinking
        };
        assert_eq!(
            c.update(&cfg, &paid_shrinking),
            EpochChange::ShorterShrinking
        );
        assert_eq!(c.current(), Duration::from_millis(200));
    }

    #[test]
    fn payback_verdicts() {
        assert_eq!(Payback::judge(None, 1.0), Payback::Unmeasured);
        assert_eq!(Payback::judge(Some(1.0), 1.0), Payback::Paid);
        assert_eq!(Payback::judge(Some(0.99), 1.0), Payback::Unpaid);
    }

    #[test]
    fn with_the_reuse_floor_never_shorter_than_reuse() {
        let cfg = EpochConfig {
            reuse_floor: true,
            ..EpochConfig::default()
        };
        let mut c = ctl(1000);
        let i = EpochInputs {
            jaccard: Some(0.1),
            reuse_median: Some(Duration::from_millis(1500)),
            ..EpochInputs::default()
        };
        // By default the reuse sets no floor: a shifting hot set halves the epoch.
        assert_eq!(
            ctl(1000).update(&EpochConfig::default(), &i),
            EpochChange::ShorterShifting
        );
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
        assert_eq!(c.current(), Duration::from_millis(10));
    }
}
