//! Step 1 of a plan: what the epoch that just ended teaches the epoch controller (Doudali) and
//! the benefit threshold: how far apart superpages are reused, whether the hot set moved, how
//! much of the last plan reversed earlier moves, and whether its moves paid for themselves.

use std::time::Duration;

use super::Planner;
use crate::{
    engine::{EngineConfig, HotnessView, reuse::ReuseHistogram, superpage::NO_SLOT},
    policy::{
        CapacityView,
        benefit::CostModel,
        epoch::{EpochChange, EpochInputs, Payback},
    },
    units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE},
};

impl Planner {
    /// Feeds the epoch that just ended to the epoch controller and the threshold.
    pub(super) fn learn(
        &mut self,
        hot: &HotnessView<'_>,
        costs: &CostModel,
        cap: &CapacityView,
    ) -> EpochChange {
        let payback = self.payback(hot, costs);
        let (mut inter, mut union, mut touched, mut hot_now, mut hot_before) = (0, 0, 0, 0, 0u64);
        let cutoff = hot.hot_cutoff.max(1);
        let had_prev = self.prev_touched.is_some();
        // How long ago each remembered superpage was last touched, to find the fast tier's reach.
        let mut ages = ReuseHistogram::default();
        for rec in hot.superpages() {
            if rec.seen() {
                ages.record(u32::from(hot.interval_stamp.wrapping_sub(rec.last_touch)));
            }
            let is_hot = hot.accesses(rec) >= cutoff;
            let was_hot = hot.hot_at_last_plan(rec);
            hot_now += u64::from(is_hot);
            hot_before += u64::from(was_hot);
            inter += u64::from(is_hot && was_hot);
            union += u64::from(is_hot || was_hot);
            touched += u64::from(hot.touched_this_epoch(rec));
        }
        let engine = hot.config();
        let interval = engine.interval();
        let reuse = hot.reuse();
        let reuse_median = reuse.median().map(|g| interval * g);
        // The fast tier's reach: the superpages touched within it would fill the fast tier (the
        // target's share of it, when it has one). A
        // reuse after longer than that finds its data evicted whatever the epoch (a cyclic sweep
        // larger than the tier; a window that returns after the others), so it sets no floor.
        let reach = ages.reached_by((cap.fast_reach_bytes() / SUPERPAGE_SIZE).max(1));
        let bridgeable = reach.map_or(reuse_median, |r| {
            reuse.median_within(r).map(|g| interval * g)
        });
        let inputs = EpochInputs {
            reuse_median: bridgeable,
            // When the hot set is most of what was touched, heat is flat across superpages
            // (sparse hotness inside each, or uniform access) and which superpages make the
            // 70 % cut is sampling noise: their overlap says nothing about the workload moving.
            // Nor does it when the cooled heat forgets faster than the data is reused: a sweep
            // longer than that snapshot shows a different hot set every epoch without moving.
            jaccard: (had_prev
                && union > 0
                && hot_now * 2 <= touched
                && snapshot_covers(engine, reuse_median))
            .then(|| inter as f64 / union as f64),
            touched,
            prev_touched: self.prev_touched,
            pingpong_share: if self.last_moved == 0 {
                0.0
            } else {
                self.last_pingpong as f64 / self.last_moved as f64
            },
            payback,
            capacity_bound: self.last_capacity_bound,
        };
        self.prev_touched = Some(touched);
        if had_prev && hot_before > 0 {
            self.retention.note(inter as f64 / hot_before as f64);
        }
        let pc = &self.cfg;
        self.threshold.update(
            &pc.benefit,
            self.last_pingpong,
            self.last_moved,
            Payback::judge(payback, pc.epoch.min_payback),
        );
        self.epoch.update(&pc.epoch, &inputs)
    }

    /// Realised value of last epoch's promotions, less what the data evicted for them cost
    /// from the slow tier, over the migrations' cost. A swap of equally warm data (a sweep
    /// larger than the fast tier, sampling noise taken for heat) realises nothing net, although
    /// the promoted pages are used just as predicted. Each range is valued with its
    /// superpage's uncooled epoch counts, shared out by what stage 2 counted after the plan.
    ///
    /// No verdict when the stake is below the evidence a sampled verdict can rest on: moves
    /// costing less than `benefit.min_samples` sampled reads would pay back on fewer samples
    /// than that, so drawing none says as little as a lone sample does about heat. A plan that
    /// promoted one 4 KiB page would otherwise double the epoch and the threshold whenever its
    /// page missed the sampler until the next plan.
    fn payback(&self, hot: &HotnessView<'_>, costs: &CostModel) -> Option<f64> {
        if !self.last_judged.iter().any(|m| !m.evicted) {
            return None;
        }
        let cost: f64 = self.last_judged.iter().map(|m| m.cost).sum();
        if cost <= 0.0 {
            return None;
        }
        let mut realised = 0.0;
        for m in &self.last_judged {
            let Some(rec) = hot.superpage(m.sp) else {
                continue;
            };
            let mut share = (m.len / PAGE_SIZE) as f64 / SUBPAGES as f64;
            if rec.slot != NO_SLOT {
                let (range, all) = hot.stage2_sums(rec.slot, m.start, m.len);
                let (range, all) =
                    if rec.slot == m.slot && range >= m.base_range && all >= m.base_all {
                        (range - m.base_range, all - m.base_all)
                    } else {
                        (range, all)
                    };
                if all > 0 {
                    share = f64::from(range) / f64::from(all);
                }
            }
            let (epoch_r, epoch_w) = hot.epoch_counts(rec);
            let value = costs.access_value(
                f64::from(epoch_r) * share * hot.units.read,
                f64::from(epoch_w) * share * hot.units.write,
            );
            realised += if m.evicted { -value } else { value };
        }
        let evidence =
            f64::from(self.cfg.benefit.min_samples) * costs.access_value(hot.units.read, 0.0);
        (cost.max(realised.abs()) >= evidence).then_some(realised / cost)
    }
}

/// How much of the hot set stays hot from one epoch to the next, smoothed over epochs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Retention(Option<f64>);

impl Retention {
    fn note(&mut self, share: f64) {
        let share = share.clamp(0.0, 1.0);
        self.0 = Some(self.0.map_or(share, |r| (r + share) / 2.0));
    }

    /// Epochs a superpage hot now is expected to stay hot, the next one included: with a share
    /// `r` of the hot set kept each epoch, a hot superpage's heat lasts `1 / (1 − r)` epochs
    /// on average (geometric). At most `cap`; one before any epoch was measured.
    pub(super) fn residence_epochs(&self, cap: f64) -> f64 {
        self.0
            .map_or(1.0, |r| if r >= 1.0 { cap } else { 1.0 / (1.0 - r) })
            .clamp(1.0, cap.max(1.0))
    }
}

/// Whether the cooled heat still holds data reused `reuse` apart: it halves (for a cooling
/// shift of 1) every cooling period, so after three periods a superpage keeps an eighth of its
/// heat and drops out of the 70 % hot set.
pub(super) fn snapshot_covers(cfg: &EngineConfig, reuse: Option<Duration>) -> bool {
    let span = cfg.cooling_period() * 3u32.div_ceil(cfg.cooling_shift.max(1));
    reuse.is_none_or(|r| r <= span)
}

#[cfg(test)]
mod tests {
    use super::Retention;

    #[test]
    fn residence_follows_how_much_of_the_hot_set_stays_hot() {
        let mut r = Retention::default();
        // Nothing measured: one epoch, the old Eq. (1).
        assert_eq!(r.residence_epochs(100.0), 1.0);
        // Half the hot set kept each epoch: a hot superpage stays hot two epochs on average.
        r.note(0.5);
        assert_eq!(r.residence_epochs(100.0), 2.0);
        // Smoothed: one epoch that kept 90 % lifts 0.5 to 0.7, not to 0.9.
        r.note(0.9);
        assert!((r.residence_epochs(100.0) - 1.0 / 0.3).abs() < 1e-9);
        // A hot set that never changes is held to the cap (the longest epoch's worth).
        let mut stable = Retention::default();
        stable.note(1.0);
        assert_eq!(stable.residence_epochs(40.0), 40.0);
        // A hot set replaced every epoch: no sharing out.
        let mut churn = Retention::default();
        churn.note(0.0);
        assert_eq!(churn.residence_epochs(40.0), 1.0);
    }
}
