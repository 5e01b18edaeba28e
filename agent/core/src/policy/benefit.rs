//! Rainbow's utility-based migration (§III-C).
//!
//! Eq. (1), free fast memory:   `B = (t_nr − t_dr)·C_r + (t_nw − t_dw)·C_w − T_mig`
//! Eq. (2), evicting p1 for p2: `ΔB = (t_nr − t_dr)(C_r² − C_r¹) + (t_nw − t_dw)(C_w² − C_w¹) − T_mig − T_wb`
//!
//! `C_r`, `C_w` are the accesses expected over the next epoch (the paper assumes the next interval
//! repeats the last). A page is hot when its benefit exceeds a threshold; the paper raises the
//! threshold while migrations ping-pong but gives no rule, so [`Threshold`] raises it
//! multiplicatively while the last plan's moves did not realise what they cost (the epoch
//! controller's [`Payback`]), or while the ping-pong share of moved bytes is above a bound and
//! no payback shows the moves paid; ping-pong that paid holds it; otherwise it relaxes.
//! Ping-pong that pays is not waste: a sweep through more data than the fast tier holds is
//! promoted and demoted again by design, and a threshold raised against it ratcheted up (to
//! 64-128 µs per page on `stencil.mt`) until the fast tier held none of the sweep.

use serde::{Deserialize, Serialize};

use super::{CapacityView, epoch::Payback};
use crate::units::PAGE_SIZE;
use crate::validate::{ConfigError, check};

/// Cost model and threshold tunables. Latency defaults are a DRAM + 1:3 slow tier (Ryoo's
/// projection ratio); the copy cost is Memos' 3 µs per 4 KiB page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenefitConfig {
    /// Fast-tier read latency, ns, used when the capacity view has none. Default 80.
    pub fast_read_ns: f64,
    /// Fast-tier write latency, ns. Default 80.
    pub fast_write_ns: f64,
    /// Slow-tier read latency, ns. Default 240 (1:3).
    pub slow_read_ns: f64,
    /// Slow-tier write latency, ns. Default 480 (slow writes cost twice slow reads, Memos' ratio).
    pub slow_write_ns: f64,
    /// Copy cost of migrating one 4 KiB page, ns (T_mig per page). Default 2000.
    pub migrate_page_ns: f64,
    /// Fixed cost of one migration operation (one chunk: syscall, TLB shootdown), ns. Larger
    /// granularities amortise it, which is Ryoo's argument. Default 1000 (so 3 µs per lone 4 KiB
    /// page, Memos §7.4).
    pub migrate_op_ns: f64,
    /// Cost of writing one 4 KiB page back to the slow tier on demotion, ns (T_writeback).
    /// Linux migration is exclusive, so clean pages cost the same as dirty ones. Default 2000.
    pub writeback_page_ns: f64,
    /// Extra cost, ns, of each access to a superpage once it is mapped by 4 KiB pages instead
    /// of one 2 MiB huge page: the TLB reach lost (Rainbow; Ingens). Moving part of a huge page
    /// splits it, so the first sub-2 MiB move out of a superpage still mapped huge pays one
    /// more migration operation (the split's TLB shootdown) and this on every later access to
    /// the superpage, in either tier. The daemon presumes huge pages only where THP is
    /// `always` (it does not query which superpages are huge); under `madvise` or `never` no
    /// split is charged. Default 10 (the simulator takes its preset's).
    pub split_access_ns: f64,
    /// Base migration-benefit threshold per 4 KiB page, ns. A range is hot when its benefit
    /// exceeds this times its page count. Default 0 (Eq. (1) as written).
    pub threshold_ns: f64,
    /// Smallest raised threshold per page, ns, so raising from 0 goes somewhere. Default 500.
    pub threshold_step_ns: f64,
    /// Factor applied to the threshold while ping-pong is above the bound or moves do not pay
    /// back. Default 2.
    pub threshold_raise: f64,
    /// Factor pulling the threshold back toward the base while ping-pong is below. Default 0.5.
    pub threshold_relax: f64,
    /// Upper limit of the threshold per page, ns. Default 1e6.
    pub threshold_max_ns: f64,
    /// Share of moved bytes that reversed a recent move above which the threshold rises. Default 0.05.
    pub pingpong_bound: f64,
    /// A move that reverses one made at most this many epochs earlier counts as ping-pong. It
    /// must exceed the hysteresis (which forbids faster reversals). Default 8.
    pub pingpong_window_epochs: u64,
    /// A promotion candidate smaller than a superpage needs counts worth at least this many
    /// samples. With sampling, one sample on a page is as likely a stray access as heat:
    /// ranking by a lone sample swaps cold pages in and out every epoch. A whole superpage
    /// needs one: Eq. (1) weighs the traffic its samples stand for against the 2 MiB copy,
    /// which keeps a stray sample at a dense rate out and lets a PMU's sample (10^4 to 10^6
    /// accesses) in. DAMON's unit is one `nr_accesses` of one page.
    /// The epoch controller asks the same of a payback verdict: moves that cost less than
    /// this many sampled reads get none. Default 3.
    pub min_samples: u32,
}

impl Default for BenefitConfig {
    fn default() -> Self {
        Self {
            fast_read_ns: 80.0,
            fast_write_ns: 80.0,
            slow_read_ns: 240.0,
            slow_write_ns: 480.0,
            migrate_page_ns: 2000.0,
            migrate_op_ns: 1000.0,
            writeback_page_ns: 2000.0,
            split_access_ns: 10.0,
            threshold_ns: 0.0,
            threshold_step_ns: 500.0,
            threshold_raise: 2.0,
            threshold_relax: 0.5,
            threshold_max_ns: 1e6,
            pingpong_bound: 0.05,
            pingpong_window_epochs: 8,
            min_samples: 3,
        }
    }
}

impl BenefitConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let lat = [
            self.fast_read_ns,
            self.fast_write_ns,
            self.slow_read_ns,
            self.slow_write_ns,
        ];
        check(
            lat.iter().all(|v| v.is_finite() && *v >= 0.0),
            "benefit.*_ns",
            format!("{lat:?}"),
            "latencies must be finite and >= 0",
        )?;
        check(
            self.migrate_page_ns >= 0.0
                && self.migrate_op_ns >= 0.0
                && self.writeback_page_ns >= 0.0
                && self.split_access_ns >= 0.0,
            "benefit.migrate_*",
            self.migrate_page_ns,
            "costs must be >= 0",
        )?;
        check(
            self.threshold_ns >= 0.0 && self.threshold_ns <= self.threshold_max_ns,
            "benefit.threshold_ns",
            self.threshold_ns,
            "must be within [0, threshold_max_ns]",
        )?;
        check(
            self.threshold_raise >= 1.0,
            "benefit.threshold_raise",
            self.threshold_raise,
            "must be >= 1",
        )?;
        check(
            (0.0..=1.0).contains(&self.threshold_relax),
            "benefit.threshold_relax",
            self.threshold_relax,
            "must be within [0, 1]",
        )?;
        check(
            (0.0..=1.0).contains(&self.pingpong_bound),
            "benefit.pingpong_bound",
            self.pingpong_bound,
            "must be within [0, 1]",
        )
    }
}

/// One tier's access latencies in effect for a plan, ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub read_ns: f64,
    pub write_ns: f64,
}

/// Latencies and migration costs in effect for one plan (capacity view overrides config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    pub fast: Latency,
    pub slow: Latency,
    pub migrate_page_ns: f64,
    pub migrate_op_ns: f64,
    pub writeback_page_ns: f64,
    pub split_access_ns: f64,
    /// Epochs a moved range is expected to keep the heat that moved it (≥ 1): its one-off
    /// migration and write-back costs are shared out over them, so each cost below is per
    /// epoch of that residence, as the accesses it is weighed against are.
    pub residence_epochs: f64,
}

impl CostModel {
    #[must_use]
    pub fn new(cfg: &BenefitConfig, cap: &CapacityView) -> Self {
        Self {
            fast: Latency {
                read_ns: cap.fast.read_ns.unwrap_or(cfg.fast_read_ns),
                write_ns: cap.fast.write_ns.unwrap_or(cfg.fast_write_ns),
            },
            slow: Latency {
                read_ns: cap.slow.read_ns.unwrap_or(cfg.slow_read_ns),
                write_ns: cap.slow.write_ns.unwrap_or(cfg.slow_write_ns),
            },
            migrate_page_ns: cfg.migrate_page_ns,
            migrate_op_ns: cfg.migrate_op_ns,
            writeback_page_ns: cfg.writeback_page_ns,
            split_access_ns: cfg.split_access_ns,
            residence_epochs: 1.0,
        }
    }

    /// The same costs shared out over `epochs` of expected residence (at least one).
    #[must_use]
    pub fn over_residence(self, epochs: f64) -> Self {
        Self {
            residence_epochs: epochs.max(1.0),
            ..self
        }
    }

    /// Latency saved by serving `reads` and `writes` from the fast tier: the first two terms of Eq. (1).
    #[must_use]
    pub fn access_value(&self, reads: f64, writes: f64) -> f64 {
        (self.slow.read_ns - self.fast.read_ns) * reads
            + (self.slow.write_ns - self.fast.write_ns) * writes
    }

    /// T_mig for one chunk of `bytes`, per epoch of residence.
    #[must_use]
    pub fn migrate_cost(&self, bytes: u64) -> f64 {
        (self.migrate_op_ns + self.migrate_page_ns * (bytes / PAGE_SIZE) as f64)
            / self.residence_epochs
    }

    /// What splitting a huge page costs per epoch of residence: its TLB shootdown once, and
    /// the TLB reach lost on each of the superpage's `accesses` per epoch from then on.
    #[must_use]
    pub fn split_cost(&self, accesses: f64) -> f64 {
        self.migrate_op_ns / self.residence_epochs + self.split_access_ns * accesses
    }

    /// T_writeback for demoting `bytes`, per epoch of residence.
    #[must_use]
    pub fn writeback_cost(&self, bytes: u64) -> f64 {
        self.writeback_page_ns * (bytes / PAGE_SIZE) as f64 / self.residence_epochs
    }

    /// Eq. (1): benefit of promoting a chunk of `bytes` seeing `reads`/`writes` into free fast memory.
    #[must_use]
    pub fn eq1(&self, reads: f64, writes: f64, bytes: u64) -> f64 {
        self.access_value(reads, writes) - self.migrate_cost(bytes)
    }

    /// Eq. (2): benefit of promoting `incoming` (reads, writes, bytes) by evicting `outgoing`.
    #[must_use]
    pub fn eq2(&self, incoming: (f64, f64, u64), outgoing: (f64, f64, u64)) -> f64 {
        self.access_value(incoming.0 - outgoing.0, incoming.1 - outgoing.1)
            - self.migrate_cost(incoming.2)
            - self.writeback_cost(outgoing.2)
    }

    /// Whether slow-tier writes are penalised more than slow-tier reads (Memos' premise).
    #[must_use]
    pub fn writes_cost_more(&self) -> bool {
        self.slow.write_ns - self.fast.write_ns > self.slow.read_ns - self.fast.read_ns
    }
}

/// The migration-benefit threshold per 4 KiB page, raised under ping-pong.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    per_page_ns: f64,
}

impl Threshold {
    #[must_use]
    pub fn new(cfg: &BenefitConfig) -> Self {
        Self {
            per_page_ns: cfg.threshold_ns,
        }
    }

    #[must_use]
    pub fn per_page_ns(&self) -> f64 {
        self.per_page_ns
    }

    /// Threshold for a chunk of `bytes`.
    #[must_use]
    pub fn for_bytes(&self, bytes: u64) -> f64 {
        self.per_page_ns * (bytes / PAGE_SIZE) as f64
    }

    /// Adjusts after an epoch in which `pingpong_bytes` of `moved_bytes` reversed recent moves,
    /// and whose moves realised what `payback` says.
    pub fn update(
        &mut self,
        cfg: &BenefitConfig,
        pingpong_bytes: u64,
        moved_bytes: u64,
        payback: Payback,
    ) {
        let share = if moved_bytes == 0 {
            0.0
        } else {
            pingpong_bytes as f64 / moved_bytes as f64
        };
        let pingpong = share > cfg.pingpong_bound;
        if pingpong && payback == Payback::Paid {
            // Reversals that paid for themselves: no reason to be pickier, nor less picky.
            return;
        }
        self.per_page_ns = if pingpong || payback == Payback::Unpaid {
            (self.per_page_ns * cfg.threshold_raise)
                .max(cfg.threshold_ns + cfg.threshold_step_ns)
                .min(cfg.threshold_max_ns)
        } else {
            let relaxed =
                cfg.threshold_ns + (self.per_page_ns - cfg.threshold_ns) * cfg.threshold_relax;
            // Snap back once within a step's tenth, so the threshold does return to its base.
            if relaxed - cfg.threshold_ns < cfg.threshold_step_ns / 10.0 {
                cfg.threshold_ns
            } else {
                relaxed
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CostModel {
        CostModel::new(&BenefitConfig::default(), &CapacityView::default())
    }

    #[test]
    fn costs_are_shared_out_over_the_expected_residence() {
        let m = model();
        let shared = m.over_residence(4.0);
        assert_eq!(
            shared.migrate_cost(PAGE_SIZE),
            m.migrate_cost(PAGE_SIZE) / 4.0
        );
        assert_eq!(
            shared.writeback_cost(PAGE_SIZE),
            m.writeback_cost(PAGE_SIZE) / 4.0
        );
        // The accesses it is weighed against are per epoch already: unchanged.
        assert_eq!(shared.access_value(10.0, 1.0), m.access_value(10.0, 1.0));
        // Never more than the whole cost in one epoch.
        assert_eq!(
            m.over_residence(0.2).migrate_cost(PAGE_SIZE),
            m.migrate_cost(PAGE_SIZE)
        );
    }

    #[test]
    fn eq1_matches_the_paper_terms() {
        let m = model();
        // (240-80)*10 + (480-80)*5 - (1000 + 2000) = 1600 + 2000 - 3000
        assert!((m.eq1(10.0, 5.0, PAGE_SIZE) - 600.0).abs() < 1e-9);
        // Break-even: 3000 ns of copy needs 18.75 reads.
        assert!(m.eq1(18.0, 0.0, PAGE_SIZE) < 0.0);
        assert!(m.eq1(19.0, 0.0, PAGE_SIZE) > 0.0);
        // A 2 MiB chunk pays one op cost, not 512.
        assert!((m.migrate_cost(2 << 20) - (1000.0 + 512.0 * 2000.0)).abs() < 1e-9);
    }

    #[test]
    fn eq2_subtracts_victim_and_writeback() {
        let m = model();
        let d = m.eq2((30.0, 0.0, PAGE_SIZE), (10.0, 0.0, PAGE_SIZE));
        // 160*(30-10) - 3000 - 2000
        assert!((d - (3200.0 - 5000.0)).abs() < 1e-9);
        assert!(m.eq2((50.0, 0.0, PAGE_SIZE), (10.0, 0.0, PAGE_SIZE)) > 0.0);
    }

    #[test]
    fn capacity_view_latencies_override_config() {
        let mut cap = CapacityView::default();
        cap.slow.read_ns = Some(100.0);
        let m = CostModel::new(&BenefitConfig::default(), &cap);
        assert!((m.access_value(1.0, 0.0) - 20.0).abs() < 1e-9);
        assert!(m.writes_cost_more());
    }

    #[test]
    fn threshold_rises_under_pingpong_and_relaxes_back() {
        let cfg = BenefitConfig::default();
        let mut t = Threshold::new(&cfg);
        assert_eq!(t.per_page_ns(), 0.0);
        // 5 % exactly is not above the bound.
        t.update(&cfg, 5, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 0.0);
        t.update(&cfg, 6, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 500.0);
        t.update(&cfg, 50, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 1000.0);
        assert_eq!(t.for_bytes(16 * PAGE_SIZE), 16_000.0);
        t.update(&cfg, 0, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 500.0);
        for _ in 0..4 {
            t.update(&cfg, 0, 0, Payback::Unmeasured);
        }
        assert_eq!(t.per_page_ns(), 0.0);
        for _ in 0..40 {
            t.update(&cfg, 1, 1, Payback::Unmeasured);
        }
        assert_eq!(t.per_page_ns(), cfg.threshold_max_ns);
    }

    #[test]
    fn threshold_rises_while_moves_do_not_pay_back() {
        let cfg = BenefitConfig::default();
        let mut t = Threshold::new(&cfg);
        // No ping-pong at all, but the last plan's moves realised less than they cost.
        t.update(&cfg, 0, 100, Payback::Unpaid);
        assert_eq!(t.per_page_ns(), 500.0);
        t.update(&cfg, 0, 100, Payback::Unpaid);
        assert_eq!(t.per_page_ns(), 1000.0);
        t.update(&cfg, 0, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 500.0);
    }

    #[test]
    fn pingpong_that_pays_does_not_ratchet_the_threshold() {
        let cfg = BenefitConfig::default();
        let mut t = Threshold::new(&cfg);
        // A sweep larger than the fast tier: every move reverses an earlier one.
        t.update(&cfg, 100, 100, Payback::Unpaid);
        t.update(&cfg, 100, 100, Payback::Unmeasured);
        assert_eq!(t.per_page_ns(), 1000.0);
        // While the reversals pay, the threshold holds where it is.
        for _ in 0..8 {
            t.update(&cfg, 100, 100, Payback::Paid);
        }
        assert_eq!(t.per_page_ns(), 1000.0);
        // Paid moves without ping-pong relax it as before.
        t.update(&cfg, 0, 100, Payback::Paid);
        assert_eq!(t.per_page_ns(), 500.0);
    }
}
