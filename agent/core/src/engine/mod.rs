//! The hotness engine: samples or DAMON regions and a caller-supplied clock go in, hotness and
//! (through [`crate::policy`]) a [`Plan`] come out. No syscalls, no wall clock, no randomness.
//!
//! One [`Engine`] per target process. Hotness is Rainbow's two-stage counting:
//! - [`superpage`] (stage 1): a cooled, saturating read and write counter per touched 2 MiB
//!   superpage, closed every counting interval;
//! - [`subpage`] (stage 2): per-4 KiB counters for the top-N superpages of the last interval;
//! - [`hotset`]: the 70 %-coverage hot set and the top-N cut-off.
//!
//! [`testgen`] holds the deterministic trace generators and tier model that tests and benches use.

pub mod hotset;
pub mod subpage;
pub mod superpage;
pub mod testgen;

use std::time::Duration;

pub use memtide_common::AccessKind;
use serde::{Deserialize, Serialize};

use self::{
    hotset::{Coverage, Histogram},
    subpage::Stage2,
    superpage::{NEEDS_SLOT, NO_SLOT, Stage1},
};
use crate::policy::{
    CapacityView, ConfigError, PlacementView, Plan, PolicyConfig, check,
    epoch::ReuseHistogram,
    plan::{Hotness, Planner},
    rw::Domain,
};
use crate::units::{Granularity, PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE};

const SUPERPAGE_SHIFT: u32 = 21;

/// One sampled access of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Virtual address accessed.
    pub addr: u64,
    /// Load, store, or unknown (counted as a read).
    pub kind: AccessKind,
    /// Accesses this sample stands for (the sampling period); 0 counts as 1.
    pub weight: u32,
}

/// One DAMON region at the end of an aggregation interval. DAMON gives no per-4 KiB detail, so
/// every 4 KiB page of the region is credited `nr_accesses × damon_weight` reads: a superpage's
/// stage-1 count grows with its overlap, and stage-2 density follows region boundaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonObservation {
    pub start: u64,
    pub end: u64,
    /// Sampling intervals (of the aggregation) in which the region was seen accessed.
    pub nr_accesses: u32,
    /// Upper bound of `nr_accesses` (aggregation / sampling interval); larger values are clamped.
    pub max_nr_accesses: u32,
    /// Aggregations the region kept its pattern (not used for hotness).
    pub age: u32,
}

/// Input to [`Engine::observe`].
#[derive(Clone, Copy, Debug)]
pub enum Observations<'a> {
    Samples(&'a [Sample]),
    Damon(&'a [DamonObservation]),
}

/// Engine tunables. Defaults are Rainbow's where it has one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Counting interval, ms (Rainbow: 10^8 cycles ≈ 31 ms). Default 50.
    pub interval_ms: u64,
    /// Weight of a write relative to a read in the stage-1 ranking (Memos' 2). Default 2.
    pub write_weight: u32,
    /// Stage-1 cooling: counters are shifted right by this many bits at each interval close
    /// (1 = halve; 16 or more = reset, Rainbow's per-interval counts). Default 1.
    pub cooling_shift: u32,
    /// Stage-2 cooling, applied after each plan has read the epoch's counts. Default 1.
    pub stage2_cooling_shift: u32,
    /// Superpages given stage-2 counters each interval (Rainbow's N). Default 100.
    pub top_n: usize,
    /// Upper bound when N adapts to the fast tier's free capacity (one superpage per free 2 MiB,
    /// never below `top_n`). Default 1000.
    pub top_n_max: usize,
    /// Adapt N to the free capacity seen at the last plan. Default true.
    pub adapt_top_n: bool,
    /// Share of accesses the hot set covers (Rainbow after CHOP). Default 0.7.
    pub hot_coverage: f64,
    /// A superpage untouched this many intervals, cooled to zero and outside stage 2 is forgotten.
    /// Must exceed the longest epoch in intervals for reuse distances to be seen. Default 512.
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
    /// Placement policy.
    pub policy: PolicyConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            interval_ms: 50,
            write_weight: 2,
            cooling_shift: 1,
            stage2_cooling_shift: 1,
            top_n: 100,
            top_n_max: 1000,
            adapt_top_n: true,
            hot_coverage: 0.7,
            retain_intervals: 512,
            damon_weight: 1,
            rate_smoothing: 0.3,
            max_superpages: 1 << 20,
            policy: PolicyConfig::default(),
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
        )?;
        self.policy.validate()
    }

    pub(crate) fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// Converts a cooled stage-1 count into accesses per interval (steady state of
    /// `x = x >> s + a` is `x = a / (1 − 2^−s)`).
    pub(crate) fn stage1_per_interval(&self) -> f64 {
        1.0 - 0.5f64.powi(self.cooling_shift.min(64) as i32)
    }

    /// Converts a stage-2 count (cooled once per epoch) into accesses per epoch.
    pub(crate) fn stage2_per_epoch(&self) -> f64 {
        1.0 - 0.5f64.powi(self.stage2_cooling_shift.min(64) as i32)
    }
}

/// Per-interval and per-plan figures for metrics and the simulator's reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EngineStats {
    /// Counting intervals closed so far.
    pub intervals: u64,
    /// Samples (or DAMON region pieces) left out because stage 1 was at `max_superpages`.
    pub untracked_samples: u64,
    /// Superpages with a stage-1 record.
    pub touched_superpages: u64,
    /// Superpages with stage-2 counters, and the current N.
    pub stage2_superpages: u64,
    pub top_n: u64,
    /// Superpages in the 70 % hot set (stage 1, cooled counts) and their bytes.
    pub hot_superpages: u64,
    pub hot_superpage_bytes: u64,
    /// 4 KiB pages in the 70 % hot set of the stage-2 superpages (epoch-to-date counts).
    pub hot_subpages: u64,
    /// `hot_subpages` in bytes.
    pub hot_set_bytes: u64,
    /// Hot pages over touched pages of the stage-2 superpages, percent (Rainbow Table I).
    pub hot_page_pct: f64,
    /// Smallest count among the hot pages (Rainbow's "hot page min # access").
    pub hot_page_min_access: u32,
    /// Superpages read-dominant / write-dominant in the last interval (Memos).
    pub read_dominant: u64,
    pub write_dominant: u64,
    /// Estimated accesses per second (sample weights over interval time).
    pub access_rate: f64,
    /// Current target granularity and epoch.
    pub granularity_bytes: u64,
    pub epoch_ms: u64,
    /// Benefit threshold per 4 KiB page, ns.
    pub benefit_threshold_ns: f64,
    /// At the last plan: bytes that passed the benefit rule (before capacity and budget), bytes
    /// the watermarks asked to demote, and bytes actually planned.
    pub would_promote_bytes: u64,
    pub would_demote_bytes: u64,
    pub planned_promote_bytes: u64,
    pub planned_demote_bytes: u64,
    /// Bytes of the last plan that reversed a recent move.
    pub pingpong_bytes: u64,
    pub bandwidth_bound: bool,
    /// Engine heap bytes.
    pub memory_bytes: u64,
}

/// Hotness and placement state of one target.
#[derive(Clone, Debug)]
pub struct Engine {
    cfg: EngineConfig,
    stage1: Stage1,
    stage2: Stage2,
    hist: Histogram,
    reuse: ReuseHistogram,
    planner: Planner,
    intervals: u64,
    next_close: Option<Duration>,
    top_n: usize,
    interval_weight: u64,
    interval_samples: u64,
    /// Counter units one observation adds to a page: the mean sample weight of the last
    /// interval with samples, or DAMON's per-`nr_accesses` credit.
    evidence_unit: f64,
    access_rate: f64,
    hot_cutoff: u32,
    stats: EngineStats,
    /// Last superpage looked up on the ingest path, because samples cluster.
    last: Option<(u64, usize)>,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            stage1: Stage1::default(),
            stage2: Stage2::default(),
            hist: Histogram::default(),
            reuse: ReuseHistogram::default(),
            planner: Planner::new(&config.policy),
            intervals: 0,
            next_close: None,
            top_n: config.top_n,
            interval_weight: 0,
            interval_samples: 0,
            evidence_unit: 1.0,
            access_rate: 0.0,
            hot_cutoff: 0,
            stats: EngineStats::default(),
            last: None,
            cfg: config,
        })
    }

    #[must_use]
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Feeds observations made up to `now`.
    pub fn observe(&mut self, obs: Observations<'_>, now: Duration) {
        match obs {
            Observations::Samples(s) => self.observe_samples(s, now),
            Observations::Damon(d) => self.observe_damon(d, now),
        }
    }

    /// Counts sampled accesses into the interval that contains `now`.
    pub fn observe_samples(&mut self, samples: &[Sample], now: Duration) {
        self.tick(now);
        // Lookups for a group of samples run first, with no stores in between, so that the CPU
        // overlaps their cache misses; record indices stay valid while records are only pushed.
        const GROUP: usize = 16;
        for group in samples.chunks(GROUP) {
            let mut found = [None; GROUP];
            for (f, s) in found.iter_mut().zip(group) {
                *f = self.stage1.find(s.addr >> SUPERPAGE_SHIFT);
            }
            for (f, s) in found.iter().zip(group) {
                let w = s.weight.max(1);
                self.count(s.addr, *f, s.kind == AccessKind::Store, w);
                self.interval_weight += u64::from(w);
            }
        }
        self.interval_samples += samples.len() as u64;
    }

    fn count(&mut self, addr: u64, found: Option<usize>, write: bool, w: u32) {
        let sp = addr >> SUPERPAGE_SHIFT;
        let idx = match (found, self.last) {
            (Some(idx), _) => idx,
            (None, Some((last_sp, idx))) if last_sp == sp => idx,
            (None, _) => {
                if self.stage1.len() >= self.cfg.max_superpages && self.stage1.find(sp).is_none() {
                    self.stats.untracked_samples += 1;
                    return;
                }
                let idx = self.stage1.find_or_insert(sp);
                self.last = Some((sp, idx));
                idx
            }
        };
        let w16 = w.min(u32::from(u16::MAX)) as u16;
        let rec = self.stage1.get_mut(idx);
        if write {
            rec.ivl_w = rec.ivl_w.saturating_add(w16);
        } else {
            rec.ivl_r = rec.ivl_r.saturating_add(w16);
        }
        let slot = rec.slot;
        if slot != NO_SLOT {
            let page = ((addr >> 12) as usize) & (SUBPAGES - 1);
            self.stage2.add(slot, page, write, w);
            self.stage2.note_sample(slot, page);
        }
    }

    /// Credits DAMON regions to the interval that contains `now`.
    pub fn observe_damon(&mut self, regions: &[DamonObservation], now: Duration) {
        self.tick(now);
        self.evidence_unit = f64::from(self.cfg.damon_weight.max(1));
        for r in regions {
            let nr = r.nr_accesses.min(r.max_nr_accesses.max(1));
            let per_page = nr.saturating_mul(self.cfg.damon_weight);
            if per_page == 0 || r.end <= r.start {
                continue;
            }
            let mut addr = r.start & !(PAGE_SIZE - 1);
            while addr < r.end {
                let sp_end = ((addr >> SUPERPAGE_SHIFT) + 1) << SUPERPAGE_SHIFT;
                let end = sp_end.min(r.end);
                let pages = (end - addr).div_ceil(PAGE_SIZE);
                if self.stage1.len() >= self.cfg.max_superpages
                    && self.stage1.find(addr >> SUPERPAGE_SHIFT).is_none()
                {
                    self.stats.untracked_samples += 1;
                    addr = end;
                    continue;
                }
                let idx = self.stage1.find_or_insert(addr >> SUPERPAGE_SHIFT);
                let rec = self.stage1.get_mut(idx);
                let add = u16::try_from(u64::from(per_page) * pages).unwrap_or(u16::MAX);
                rec.ivl_r = rec.ivl_r.saturating_add(add);
                let slot = rec.slot;
                if slot != NO_SLOT {
                    let first = ((addr >> 12) as usize) & (SUBPAGES - 1);
                    for page in first..first + pages as usize {
                        self.stage2.add(slot, page, false, per_page);
                    }
                }
                self.interval_weight += u64::from(per_page) * pages;
                addr = sp_end;
            }
        }
        self.last = None;
    }

    /// Closes every counting interval that ended at or before `now`.
    pub fn tick(&mut self, now: Duration) {
        let interval = self.cfg.interval();
        // Intervals are aligned to multiples of the interval length, so two engines fed the same
        // observations close the same intervals whatever time their first sample came at.
        let Some(next) = self.next_close else {
            let k = u32::try_from(now.as_nanos() / interval.as_nanos()).unwrap_or(u32::MAX);
            self.next_close = Some(interval * (k + 1));
            return;
        };
        if now < next {
            return;
        }
        let behind = (now - next).as_nanos() / interval.as_nanos();
        let steps = u32::try_from(behind + 1).unwrap_or(u32::MAX);
        self.close_intervals(steps);
        self.next_close = Some(next + interval * steps);
    }

    /// The 16-bit stamp of the last closed interval, as records keep it in `last_touch`.
    fn last_closed_stamp(&self) -> u16 {
        (self.intervals.wrapping_sub(1) & 0xFFFF) as u16
    }

    fn close_intervals(&mut self, steps: u32) {
        let stamp = (self.intervals & 0xFFFF) as u16;
        self.intervals += u64::from(steps);
        let (shift, ratio, ww) = (
            self.cfg.cooling_shift,
            self.cfg.policy.rw.read_write_ratio,
            self.cfg.write_weight,
        );
        let (mut rd, mut wd) = (0, 0);
        self.hist.clear();
        for rec in self.stage1.records_mut() {
            let (domain, gap) = rec.close(shift, steps, stamp, ratio);
            match domain {
                Domain::ReadDominant => rd += 1,
                Domain::WriteDominant => wd += 1,
                Domain::Cold => {}
            }
            if let Some(g) = gap {
                self.reuse.record(g);
            }
            self.hist.add(rec.weighted(ww));
        }
        self.select_stage2();
        self.forget_cold(self.last_closed_stamp());

        let secs = self.cfg.interval().as_secs_f64() * f64::from(steps);
        let rate = self.interval_weight as f64 / secs;
        let a = self.cfg.rate_smoothing;
        self.access_rate = if self.intervals == u64::from(steps) {
            rate
        } else {
            a * rate + (1.0 - a) * self.access_rate
        };
        if self.interval_samples > 0 {
            self.evidence_unit = self.interval_weight as f64 / self.interval_samples as f64;
        }
        self.interval_weight = 0;
        self.interval_samples = 0;
        self.update_hot_stats(rd, wd);
    }

    /// Gives the top-N superpages stage-2 counters (the histogram holds weighted heats).
    fn select_stage2(&mut self) {
        let (cutoff, mut ties) = self.hist.top(self.top_n);
        let ww = self.cfg.write_weight;
        for rec in self.stage1.records_mut() {
            let h = rec.weighted(ww).min(u32::from(u16::MAX));
            let selected = h > cutoff || (h == cutoff && h > 0 && ties > 0);
            if h == cutoff && selected {
                ties -= 1;
            }
            if selected && rec.slot == NO_SLOT {
                rec.flags |= NEEDS_SLOT;
            } else if !selected && rec.slot != NO_SLOT {
                self.stage2.release(rec.slot);
                rec.slot = NO_SLOT;
            }
        }
        for rec in self.stage1.records_mut() {
            if rec.flags & NEEDS_SLOT != 0 {
                rec.flags &= !NEEDS_SLOT;
                rec.slot = self.stage2.allocate(rec.sp);
            }
        }
    }

    fn forget_cold(&mut self, stamp: u16) {
        let retain = self.cfg.retain_intervals;
        let dead = |r: &superpage::SuperpageRecord| {
            r.heat_r == 0
                && r.heat_w == 0
                && r.slot == NO_SLOT
                && u32::from(stamp.wrapping_sub(r.last_touch)) > retain
        };
        let n_dead = self.stage1.records().iter().filter(|r| dead(r)).count();
        // Compacting re-indexes everything, so wait until it frees a quarter of the records.
        if n_dead > 0 && n_dead * 4 >= self.stage1.len() {
            self.stage1.retain(|r| !dead(r));
            self.last = None;
        }
    }

    fn update_hot_stats(&mut self, rd: u64, wd: u64) {
        let share = self.cfg.hot_coverage;
        self.hist.clear();
        for rec in self.stage1.records() {
            self.hist.add(rec.accesses());
        }
        let sp: Coverage = self.hist.cover(share);
        self.hot_cutoff = sp.min_count;
        self.hist.clear();
        for (slot, _) in self.stage2.live_sorted() {
            let (r, w) = self.stage2.counters(slot);
            for i in 0..SUBPAGES {
                self.hist.add(subpage::value(r[i]) + subpage::value(w[i]));
            }
        }
        let pages = self.hist.cover(share);
        let s = &mut self.stats;
        s.intervals = self.intervals;
        s.touched_superpages = self.stage1.len() as u64;
        s.stage2_superpages = self.stage2.live() as u64;
        s.top_n = self.top_n as u64;
        s.hot_superpages = sp.units;
        s.hot_superpage_bytes = sp.units * SUPERPAGE_SIZE;
        s.hot_subpages = pages.units;
        s.hot_set_bytes = pages.units * PAGE_SIZE;
        s.hot_page_pct = if pages.touched == 0 {
            0.0
        } else {
            100.0 * pages.units as f64 / pages.touched as f64
        };
        s.hot_page_min_access = pages.min_count;
        s.read_dominant = rd;
        s.write_dominant = wd;
        s.access_rate = self.access_rate;
    }

    /// Plans the moves of the epoch ending at `now`. Closes due intervals first.
    pub fn plan(
        &mut self,
        now: Duration,
        view: &dyn PlacementView,
        capacity: &CapacityView,
    ) -> Plan {
        self.tick(now);
        let interval_stamp = self.last_closed_stamp();
        let plan = self.planner.plan(
            Hotness {
                cfg: &self.cfg,
                stage1: &mut self.stage1,
                stage2: &mut self.stage2,
                reuse: &mut self.reuse,
                hot_cutoff: self.hot_cutoff,
                access_rate: self.access_rate,
                evidence_unit: self.evidence_unit,
                interval_stamp,
            },
            now,
            view,
            capacity,
        );
        if self.cfg.adapt_top_n {
            let free_sp =
                usize::try_from(self.cfg.policy.capacity.promote_room(capacity) / SUPERPAGE_SIZE)
                    .unwrap_or(usize::MAX);
            self.top_n = free_sp.clamp(self.cfg.top_n, self.cfg.top_n_max);
        }
        let s = &mut self.stats;
        s.granularity_bytes = plan.granularity.bytes();
        s.epoch_ms = u64::try_from(plan.epoch.as_millis()).unwrap_or(u64::MAX);
        s.benefit_threshold_ns = plan.benefit_threshold_ns;
        s.would_promote_bytes = plan.would_promote_bytes;
        s.would_demote_bytes = plan.would_demote_bytes;
        s.planned_promote_bytes = plan.promote_bytes;
        s.planned_demote_bytes = plan.demote_bytes;
        s.pingpong_bytes = plan.pingpong_bytes;
        s.bandwidth_bound = plan.bandwidth_bound;
        plan
    }

    /// Statistics of the last interval and the last plan.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            memory_bytes: self.memory_bytes() as u64,
            ..self.stats.clone()
        }
    }

    /// Current target granularity.
    #[must_use]
    pub fn granularity(&self) -> Granularity {
        self.planner.granularity()
    }

    /// Current migration epoch: plan again this long after the last plan.
    #[must_use]
    pub fn epoch(&self) -> Duration {
        self.planner.epoch()
    }

    /// When the next plan is due, or `None` before the first plan.
    #[must_use]
    pub fn next_plan_at(&self) -> Option<Duration> {
        self.planner.last_plan_at().map(|t| t + self.epoch())
    }

    /// Addresses of the 4 KiB pages of stage-2 superpages that Eq. (1) classifies hot under the
    /// current threshold and `capacity`'s (or the configured) latencies, ascending.
    #[must_use]
    pub fn hot_subpages(&self, capacity: &CapacityView) -> Vec<u64> {
        self.planner.hot_subpages(&self.cfg, &self.stage2, capacity)
    }

    /// Heap bytes held between calls: capacities of every map and vector, not their lengths.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.stage1.memory_bytes()
            + self.stage2.memory_bytes()
            + self.hist.memory_bytes()
            + self.planner.memory_bytes()
    }
}

#[cfg(test)]
mod tests;
