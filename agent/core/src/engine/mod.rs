//! The hotness engine: samples or DAMON regions and a caller-supplied clock go in, hotness comes
//! out, as a read-only [`HotnessView`] for the planner. No syscalls, no wall clock, no
//! randomness, and nothing of the placement policy: the engine counts, the planner decides.
//!
//! One [`Engine`] per target process. Hotness is Rainbow's two-stage counting:
//! - [`superpage`] (stage 1): a cooled, saturating read and write counter per touched 2 MiB
//!   superpage, closed every counting interval (`close.rs`), with Memos' read/write [`domain`]
//!   history;
//! - [`subpage`] (stage 2): per-4 KiB counters for the top-N superpages of the last interval;
//! - [`hotset`]: the 70 %-coverage hot set and the top-N cut-off;
//! - [`reuse`]: how long superpages go between touches (Doudali's reuse distance).
//!
//! What an epoch accumulates (stage-2 counts, epoch counts, hot-set membership) is reset by
//! [`Engine::end_epoch`], which the caller runs after the planner has read the epoch.

mod close;
pub mod config;
pub mod domain;
pub mod hotset;
pub mod reuse;
pub mod subpage;
pub mod superpage;
mod view;

use std::time::Duration;

/// How long the reuse histogram takes to halve: the one-second epoch it was once halved at.
const REUSE_HALF_LIFE: Duration = Duration::from_secs(1);

pub use memtide_common::AccessKind;
use serde::Serialize;

pub use self::{config::EngineConfig, view::HotnessView};
use self::{
    hotset::Histogram,
    reuse::ReuseHistogram,
    subpage::Stage2,
    superpage::{NO_SLOT, Stage1},
};
use crate::{
    units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SHIFT, subpage_index},
    validate::ConfigError,
};

/// One sampled access of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Virtual address accessed.
    pub addr: u64,
    /// Load, store, or unknown (counted as a read).
    pub kind: AccessKind,
    /// Accesses this sample stands for (the sampling period); 0 counts as 1. The engine counts
    /// samples as evidence and uses the weight only to estimate traffic (see [`Units`]).
    pub weight: u32,
}

impl Sample {
    /// The engine's view of a ring record: a sample stands for its period (the BPF program stamps
    /// the sample period as the record's weight).
    #[must_use]
    pub fn from_record(record: &memtide_common::AccessSample) -> Self {
        Self {
            addr: record.addr,
            kind: AccessKind::from_u8(record.kind),
            weight: u32::try_from(record.weight).unwrap_or(u32::MAX).max(1),
        }
    }
}

/// Accesses one sample stands for, by kind: the mean weight of the last interval's read and
/// write samples (a source may sample loads and stores at different periods: PEBS starts at
/// 64,000 and 1,600,000 and moves the stores' as it measures them). Evidence is counted in samples; these turn counts into traffic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Units {
    /// Accesses per read (or kind-less) sample.
    pub read: f64,
    /// Accesses per write sample.
    pub write: f64,
}

impl Default for Units {
    fn default() -> Self {
        Self {
            read: 1.0,
            write: 1.0,
        }
    }
}

impl Units {
    /// How many read samples one write sample is worth.
    #[must_use]
    pub fn write_factor(&self) -> f64 {
        self.write / self.read
    }
}

impl Sample {
    /// One sampled load of `addr`, standing for one access.
    #[must_use]
    pub const fn load(addr: u64) -> Self {
        Self {
            addr,
            kind: AccessKind::Load,
            weight: 1,
        }
    }

    /// One sampled store to `addr`, standing for one access.
    #[must_use]
    pub const fn store(addr: u64) -> Self {
        Self {
            addr,
            kind: AccessKind::Store,
            weight: 1,
        }
    }
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

/// Per-interval figures for metrics and the simulator's reports.
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
    /// Superpages read-dominant / write-dominant in the last interval (Memos).
    pub read_dominant: u64,
    pub write_dominant: u64,
    /// Estimated accesses per second (sample weights over interval time).
    pub access_rate: f64,
    /// Engine heap bytes.
    pub memory_bytes: u64,
}

/// The 70 % hot set of the stage-2 superpages' 4 KiB pages, from their epoch-to-date counts
/// (Rainbow Table I): worked out when asked, see [`Engine::hot_page_stats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HotPageStats {
    /// 4 KiB pages in the hot set.
    pub hot_subpages: u64,
    /// `hot_subpages` in bytes.
    pub hot_set_bytes: u64,
    /// Hot pages over touched pages of the stage-2 superpages, percent.
    pub hot_page_pct: f64,
    /// Smallest count among the hot pages (Rainbow's "hot page min # access").
    pub hot_page_min_access: u32,
}

/// Hotness and placement state of one target.
#[derive(Clone, Debug)]
pub struct Engine {
    cfg: EngineConfig,
    stage1: Stage1,
    stage2: Stage2,
    /// Stage-1 weighted heats (the top-N cut-off).
    hist: Histogram,
    /// Stage-1 accesses (the superpage hot set), filled in the same pass over the records as
    /// `hist`'s heats: one walk of 20 MiB fewer per interval at 1 TiB. Its largest count, read
    /// before the next close clears it, gates cooling.
    cover_hist: Histogram,
    /// Records the last close left warm or holding a stage-2 slot, and those of them selected
    /// for stage 2 that wait for a slot (scratch of `select_stage2`).
    warm: Vec<u32>,
    needs_slot: Vec<u32>,
    reuse: ReuseHistogram,
    /// Interval count at the reuse histogram's last halving.
    reuse_halved_at: u64,
    /// The cooling period (`Engine::cooling_period_index`) of stage 2's last cooling.
    stage2_cooled_through: Option<u64>,
    /// Memos' RD/WD cut-off (`[engine.policy.rw] read_write_ratio`).
    read_write_ratio: u32,
    /// The hot cut-off of the epoch that ended at the last plan, while its per-record resets
    /// wait for the next pass over the records (the next interval close): ending an epoch then
    /// costs no pass of its own. Views read the records as if the resets were done.
    epoch_end: Option<(u32, f64)>,
    intervals: u64,
    next_close: Option<Duration>,
    top_n: usize,
    /// Weights of the open interval (accesses, for the access rate), and of its read and write
    /// samples with their counts (for the units).
    interval_weight: u64,
    interval_reads: (u64, u64),
    interval_writes: (u64, u64),
    /// Read and write counts the open interval has added to the records' `ivl_r` and `ivl_w`
    /// so far (DAMON credits included), over every record: the open share's numerator, kept as
    /// counts arrive so a plan does not sum the records for it.
    open_counts: (u64, u64),
    units: Units,
    access_rate: f64,
    hot_cutoff: u32,
    stats: EngineStats,
    /// Last superpage looked up on the ingest path, because samples cluster.
    last: Option<(u64, usize)>,
}

impl Engine {
    /// An engine for one target. `read_write_ratio` is Memos' RD/WD cut-off
    /// ([`domain::MEMOS_READ_WRITE_RATIO`] by default), which the write predictor shares.
    pub fn new(config: EngineConfig, read_write_ratio: u32) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            stage1: Stage1::default(),
            stage2: Stage2::default(),
            hist: Histogram::default(),
            cover_hist: Histogram::default(),
            warm: Vec::new(),
            needs_slot: Vec::new(),
            reuse: ReuseHistogram::default(),
            reuse_halved_at: 0,
            stage2_cooled_through: None,
            read_write_ratio,
            epoch_end: None,
            intervals: 0,
            next_close: None,
            top_n: config.top_n,
            interval_weight: 0,
            interval_reads: (0, 0),
            interval_writes: (0, 0),
            open_counts: (0, 0),
            units: Units::default(),
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
                let w = u64::from(s.weight.max(1));
                let write = s.kind == AccessKind::Store;
                self.count(s.addr, *f, write);
                self.interval_weight += w;
                let kind = if write {
                    &mut self.interval_writes
                } else {
                    &mut self.interval_reads
                };
                kind.0 += w;
                kind.1 += 1;
            }
        }
    }

    /// One sample: one more count, whatever its weight.
    fn count(&mut self, addr: u64, found: Option<usize>, write: bool) {
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
        let rec = self.stage1.get_mut(idx);
        if write {
            rec.ivl_w = rec.ivl_w.saturating_add(1);
            self.open_counts.1 += 1;
        } else {
            rec.ivl_r = rec.ivl_r.saturating_add(1);
            self.open_counts.0 += 1;
        }
        // While stage 2 has a free slot, a superpage sampled without one takes it at once: the
        // close would give it one anyway (fewer than N are warm), and waiting for the close
        // loses the interval's samples of its pages. A sweep's superpage, or one that cooled to
        // zero and lost its slot, is otherwise counted page by page only from the next close on,
        // up to an interval after its heat came back.
        if rec.slot == NO_SLOT && self.stage2.live() < self.top_n {
            rec.slot = self.stage2.allocate(sp);
        }
        let slot = rec.slot;
        if slot != NO_SLOT {
            let page = subpage_index(addr);
            self.stage2.add(slot, page, write, 1);
            self.stage2.note_sample(slot, page, write);
        }
    }

    /// Credits DAMON regions to the interval that contains `now`.
    pub fn observe_damon(&mut self, regions: &[DamonObservation], now: Duration) {
        self.tick(now);
        // DAMON's evidence is its checks that found a page accessed; each stands for
        // `damon_weight` reads.
        let weight = f64::from(self.cfg.damon_weight.max(1));
        self.units = Units {
            read: weight,
            write: weight,
        };
        for r in regions {
            let nr = r.nr_accesses.min(r.max_nr_accesses.max(1));
            let per_page = nr.saturating_mul(self.cfg.damon_weight);
            if nr == 0 || per_page == 0 || r.end <= r.start {
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
                let add = u32::try_from(u64::from(nr) * pages).unwrap_or(u32::MAX);
                rec.ivl_r = rec.ivl_r.saturating_add(add);
                self.open_counts.0 += u64::from(add);
                let slot = rec.slot;
                if slot != NO_SLOT {
                    let first = subpage_index(addr);
                    for page in first..first + pages as usize {
                        self.stage2.add(slot, page, false, nr);
                    }
                }
                self.interval_weight += u64::from(per_page) * pages;
                addr = sp_end;
            }
        }
        self.last = None;
    }

    /// What the planner reads: the hotness as of the last closed interval. Call [`Self::tick`]
    /// with the plan's time first, so the intervals that ended before it are closed.
    #[must_use]
    pub fn view(&self) -> HotnessView<'_> {
        HotnessView {
            cfg: &self.cfg,
            stage1: &self.stage1,
            stage2: &self.stage2,
            reuse: &self.reuse,
            cover: &self.cover_hist,
            hot_cutoff: self.hot_cutoff,
            access_rate: self.access_rate,
            units: self.units,
            open_counts: self.open_counts,
            interval_stamp: self.last_closed_stamp(),
            intervals_closed: self.intervals,
            epoch_end: self.epoch_end,
        }
    }

    /// Ends a migration epoch once the planner has read it: superpages in the hot set are
    /// remembered as last epoch's hot set, the epoch's uncooled counts restart, the reuse
    /// histogram halves (older epochs weigh less without being forgotten), stage 2 cools (at
    /// most once per cooling period), and N (stage-2 superpages) follows `free_superpages`,
    /// the fast tier's room in superpages, when `adapt_top_n` is on.
    pub fn end_epoch(&mut self, free_superpages: u64) {
        // Records keep their heat until the next close: the resets are exact done then.
        self.epoch_end = Some((self.hot_cutoff.max(1), self.units.write_factor()));
        // By time, not by plan: at 10 ms epochs a per-plan halving would forget the reuses of
        // the last second within a few intervals, and one epoch's burst of long gaps would
        // set the floor alone again.
        let half_life = (REUSE_HALF_LIFE.as_millis() as u64 / self.cfg.interval_ms).max(1);
        if self.intervals >= self.reuse_halved_at + half_life {
            self.reuse.halve();
            self.reuse_halved_at = self.intervals;
        }
        // Like stage 1's, stage 2's cooling waits for evidence (see `close_intervals`), and at
        // most once per cooling period: an epoch shorter than the period cooled the page
        // counts twice for each halving of stage 1's heat, so a promotion candidate (valued by
        // its pages) read half as hot as the victims it would displace (valued by their
        // superpage) and a 2 MiB swap never passed Eq. (2).
        let period = self.cooling_period_index();
        if self.stage2_cooled_through != Some(period)
            && self
                .stage2
                .any_count_reaches(self.cfg.cooling_gate(self.cfg.stage2_cooling_shift))
        {
            self.stage2
                .cool_all(self.cfg.stage2_cooling_shift, self.units.write_factor());
            self.stage2_cooled_through = Some(period);
        }
        if self.cfg.adapt_top_n {
            let free = usize::try_from(free_superpages).unwrap_or(usize::MAX);
            self.top_n = free.clamp(self.cfg.top_n, self.cfg.top_n_max);
        }
    }

    /// Statistics of the last closed interval.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            memory_bytes: self.memory_bytes() as u64,
            ..self.stats.clone()
        }
    }

    /// The hot set of the stage-2 superpages' pages as of now. It walks every page of stage 2
    /// (half a million at N = 1000), so it is worked out when asked rather than at every
    /// interval close, where it was four fifths of a close's cost at 16 k superpages.
    #[must_use]
    pub fn hot_page_stats(&self) -> HotPageStats {
        let factor = self.units.write_factor();
        let mut hist = Histogram::default();
        for (slot, _) in self.stage2.live_sorted() {
            let (r, w) = self.stage2.counters(slot);
            for i in 0..SUBPAGES {
                hist.add(subpage::in_read_samples(r[i], w[i], factor));
            }
        }
        let pages = hist.cover(self.cfg.hot_coverage);
        HotPageStats {
            hot_subpages: pages.units,
            hot_set_bytes: pages.units * PAGE_SIZE,
            hot_page_pct: if pages.touched == 0 {
                0.0
            } else {
                100.0 * pages.units as f64 / pages.touched as f64
            },
            hot_page_min_access: pages.min_count,
        }
    }

    /// Heap bytes held between calls: capacities of every map and vector, not their lengths.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.stage1.memory_bytes()
            + self.stage2.memory_bytes()
            + self.hist.memory_bytes()
            + self.cover_hist.memory_bytes()
            + (self.warm.capacity() + self.needs_slot.capacity()) * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests;
