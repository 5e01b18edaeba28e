//! How often a target may plan: deciding an epoch (the placement query and the plan) is paid
//! for out of a share of a core, whatever the epoch asks for.
//!
//! The budget is a cell-rate rule (GCRA): each plan puts the budget's clock
//! [`PLAN_CPU_SHARE`] times the CPU time it took ahead (times the targets planning; its wall
//! time on a busy machine also holds waits for a core), and a plan may start while that clock
//! is less than [`PLAN_BURST`] ahead of now. Over any stretch of time T, a target's planning
//! stays under `PLAN_BURST / PLAN_CPU_SHARE + T / PLAN_CPU_SHARE` (its share of it): 5 % of a
//! core in the long run, and one slow plan (the first query of a large target, a loaded or
//! emulated machine) does not hold the next one back by twenty times what it took.

use std::time::Duration;

/// Planning, all targets together, may take at most 1/`PLAN_CPU_SHARE` of a core (5 %) in the
/// long run: a lone target whose plan takes 5 ms (about 100 GiB tracked, docs/benchmarks.md)
/// plans at most every 100 ms however short its epoch, and a thousand targets whose plans take
/// 0.1 ms each plan at most every 2 s.
const PLAN_CPU_SHARE: u32 = 20;

/// How far planning may run ahead of its share: a minute's worth of it (3 s of planning, in
/// all targets together). It covers what a target's first plans cost (a placement query over
/// all of its memory before anything is cached) and the short epochs while a hot set settles.
const PLAN_BURST: Duration = Duration::from_secs(60);

/// The planning budget of one target (agent clock).
#[derive(Debug, Default)]
pub(super) struct PlanBudget {
    /// Where the plans made so far have put the budget's clock; `None` before the first.
    paid_until: Option<Duration>,
}

impl PlanBudget {
    /// Charges a plan made at `now` that took `took` of CPU time, with `targets` planning in all.
    pub(super) fn charge(&mut self, now: Duration, took: Duration, targets: usize) {
        let from = self.paid_until.map_or(now, |paid| paid.max(now));
        self.paid_until = Some(from.saturating_add(share_of(took, targets)));
    }

    /// When the next plan is due: at the epoch's due time, but not before the budget allows.
    pub(super) fn plan_due(&self, epoch_due: Duration) -> Duration {
        let allowed = self
            .paid_until
            .map_or(Duration::ZERO, |paid| paid.saturating_sub(PLAN_BURST));
        epoch_due.max(allowed)
    }
}

/// The wall time a plan that took `took` is paid with: [`PLAN_CPU_SHARE`] times it, times the
/// `targets` sharing the budget.
fn share_of(took: Duration, targets: usize) -> Duration {
    let targets = u32::try_from(targets.max(1)).unwrap_or(u32::MAX);
    took.saturating_mul(PLAN_CPU_SHARE).saturating_mul(targets)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{PLAN_BURST, PLAN_CPU_SHARE, PlanBudget};

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// How many plans, each taking `took`, come in `span` as often as `epoch` and the budget
    /// allow.
    fn plans_in(span: Duration, epoch: Duration, took: Duration, targets: usize) -> u32 {
        let mut budget = PlanBudget::default();
        let (mut plans, mut now) = (0, epoch);
        loop {
            now = budget.plan_due(now);
            if now > span {
                return plans;
            }
            budget.charge(now, took, targets);
            plans += 1;
            now += epoch;
        }
    }

    #[test]
    fn quick_plans_come_at_every_epoch() {
        let budget = PlanBudget::default();
        assert_eq!(budget.plan_due(ms(10)), ms(10));
        // 0.1 ms plans at 10 ms epochs use 1 % of a core: the epoch decides, for an hour.
        let plans = plans_in(ms(3_600_000), ms(10), Duration::from_micros(100), 1);
        assert_eq!(plans, 360_000);
    }

    #[test]
    fn one_slow_first_plan_does_not_hold_the_next_back() {
        // The first query of a large target on an emulated machine: 1.5 s, twenty times that
        // is 30 s, but the burst pays for it and the next plan comes at its epoch.
        let mut budget = PlanBudget::default();
        budget.charge(ms(10), ms(1500), 1);
        assert_eq!(budget.plan_due(ms(1010)), ms(1010));
    }

    #[test]
    fn slow_plans_are_spaced_out_to_the_share_in_the_long_run() {
        let hour = ms(3_600_000);
        let burst_plans = |took: Duration, targets: u32| {
            let share = took * PLAN_CPU_SHARE * targets;
            u32::try_from(PLAN_BURST.as_nanos() / share.as_nanos()).unwrap() + 1
        };
        // 5 ms plans (a large target) at 10 ms epochs: one per 100 ms once the burst is spent.
        let plans = plans_in(hour, ms(10), ms(5), 1);
        let steady = 36_000;
        assert!(
            plans >= steady && plans <= steady + burst_plans(ms(5), 1),
            "{plans}"
        );
        // A thousand targets share the 5 %: 0.1 ms plans come at most every 2 s each.
        let plans = plans_in(hour, ms(10), Duration::from_micros(100), 1000);
        let steady = 1800;
        let most = steady + burst_plans(Duration::from_micros(100), 1000);
        assert!(plans >= steady && plans <= most, "{plans}");
    }

    #[test]
    fn planning_stays_within_the_burst_and_the_share_over_any_stretch() {
        // Plans of 40 ms at 10 ms epochs: 400 % of what the share allows, if left alone.
        let took = ms(40);
        let mut budget = PlanBudget::default();
        let mut made: Vec<Duration> = Vec::new();
        let mut now = ms(10);
        while now < ms(600_000) {
            now = budget.plan_due(now);
            budget.charge(now, took, 1);
            made.push(now);
            now += ms(10);
        }
        let limit = |stretch: Duration| (PLAN_BURST + stretch) / PLAN_CPU_SHARE + took;
        for (first, &from) in made.iter().enumerate().step_by(97) {
            for stretch in [ms(1000), ms(60_000), ms(300_000)] {
                let plans = made[first..]
                    .iter()
                    .take_while(|&&at| at < from + stretch)
                    .count();
                let spent = took * u32::try_from(plans).unwrap();
                assert!(
                    spent <= limit(stretch),
                    "{spent:?} in {stretch:?} from {from:?}"
                );
            }
        }
    }
}
