//! The planner's window on one target's hotness: read-only, as of the last closed interval.

use super::{
    EngineConfig, Units,
    hotset::Histogram,
    reuse::ReuseHistogram,
    subpage::{self, Stage2},
    superpage::{HOT_PREV, Stage1, SuperpageRecord, TOUCHED_EPOCH},
};
use crate::units::{PAGE_SHIFT, PAGE_SIZE, PageMask, SUBPAGES, SUPERPAGE_SHIFT};

/// What the planner may read of one target's hotness. The engine alone changes its counters,
/// and resets what an epoch accumulates in [`super::Engine::end_epoch`].
#[derive(Clone, Copy)]
pub struct HotnessView<'a> {
    pub(super) cfg: &'a EngineConfig,
    pub(super) stage1: &'a Stage1,
    pub(super) stage2: &'a Stage2,
    pub(super) reuse: &'a ReuseHistogram,
    /// Stage-1 accesses of every warm superpage (what `hot_cutoff` was cut from).
    pub(super) cover: &'a Histogram,
    /// Smallest cooled stage-1 count in the 70 % hot set of superpages.
    pub hot_cutoff: u32,
    /// Smoothed accesses per second (sample weights over interval time).
    pub access_rate: f64,
    /// Accesses a read and a write sample stand for: what turns counts into traffic.
    pub units: Units,
    /// Read and write counts of the interval still open, over every record.
    pub(super) open_counts: (u64, u64),
    /// Stamp of the last closed interval (what records' `last_touch` is compared with).
    pub interval_stamp: u16,
    /// Counting intervals closed since the engine started: a planner that saw the same number
    /// at its last plan reads the same stage-1 counts again.
    pub intervals_closed: u64,
    /// See `Engine::epoch_end`: resets not yet applied to the records, with this cut-off.
    pub(super) epoch_end: Option<(u32, f64)>,
}

impl<'a> HotnessView<'a> {
    #[must_use]
    pub fn config(&self) -> &'a EngineConfig {
        self.cfg
    }

    /// Every stage-1 record: one per touched superpage.
    pub(crate) fn superpages(&self) -> &'a [SuperpageRecord] {
        self.stage1.records()
    }

    /// Start addresses of every superpage stage 1 tracks, in no particular order: where the
    /// planner looks for candidates and sampled victims, so what a caller's placement view
    /// should cover.
    pub fn tracked_superpages(&self) -> impl Iterator<Item = u64> + 'a {
        self.stage1
            .records()
            .iter()
            .map(|rec| rec.sp << SUPERPAGE_SHIFT)
    }

    /// Start addresses of the superpages stage 2 counts per 4 KiB page, ascending: the only
    /// ones the planner promotes from, so the ones whose every page's
    /// placement it needs.
    pub fn stage2_superpage_starts(&self) -> impl Iterator<Item = u64> + 'a {
        self.stage2
            .live_sorted()
            .into_iter()
            .map(|(_, sp)| sp << SUPERPAGE_SHIFT)
    }

    /// The stage-1 record of superpage `sp`, if it was touched.
    pub(crate) fn superpage(&self, sp: u64) -> Option<&'a SuperpageRecord> {
        self.stage1.find(sp).map(|idx| &self.stage1.records()[idx])
    }

    /// Stage-2 (slot, superpage number) pairs in ascending superpage order.
    pub(crate) fn stage2_superpages(&self) -> Vec<(u32, u64)> {
        self.stage2.live_sorted()
    }

    /// Raw (reads, writes) stage-2 counters of a slot, 512 each; decode with
    /// [`subpage::value`].
    pub(crate) fn counters(&self, slot: u32) -> (&'a [u32], &'a [u32]) {
        self.stage2.counters(slot)
    }

    /// The pages of a slot with a read or a write count: the planner's per-page sums visit
    /// only these.
    pub(crate) fn counted_pages(&self, slot: u32) -> PageMask {
        self.stage2.counted_pages(slot)
    }

    /// How many pages a slot's accessed pages stand for (Good–Turing coverage of its samples).
    pub(crate) fn density_scale(&self, slot: u32) -> f64 {
        self.stage2.density_scale(slot, self.write_factor())
    }

    /// Good–Turing coverage of a slot's last full window of samples (`None` before one
    /// filled).
    pub(crate) fn sample_coverage(&self, slot: u32) -> Option<f64> {
        self.stage2.coverage(slot, self.write_factor())
    }

    /// Whether samples (not DAMON credits) reached the slot.
    pub(crate) fn sampled(&self, slot: u32) -> bool {
        self.stage2.sampled(slot)
    }

    /// How many read samples a write sample is worth.
    #[must_use]
    pub fn write_factor(&self) -> f64 {
        self.units.write_factor()
    }

    /// A record's cooled accesses, in read samples.
    pub(crate) fn accesses(&self, rec: &SuperpageRecord) -> u32 {
        rec.accesses(self.write_factor())
    }

    /// A record's accesses sampled in the interval still open, in read samples.
    pub(crate) fn open_accesses(&self, rec: &SuperpageRecord) -> u32 {
        rec.open_accesses(self.write_factor())
    }

    /// The samples of the interval still open over the cooled counts of the intervals closed
    /// (both in read samples, over every record), at most 1 (1 before any interval closed): a
    /// superpage as hot as a cooled count of `c` has drawn about `c` times this in the open
    /// interval so far, whatever the density and however long the counts remember.
    #[must_use]
    pub fn open_share(&self) -> f64 {
        let cooled = self.cover.cover(1.0).total;
        if cooled == 0 {
            return 1.0;
        }
        let (reads, writes) = self.open_counts;
        let open = reads as f64 + self.write_factor() * writes as f64;
        (open / cooled as f64).min(1.0)
    }

    /// Cooled accesses (as [`Self::accesses`]) that rank a superpage among the `n` hottest
    /// (ties at the cut-off included): 1 when fewer than `n` are warm, `u32::MAX` when `n` is 0.
    pub(crate) fn accesses_to_rank(&self, n: usize) -> u32 {
        if n == 0 {
            u32::MAX
        } else {
            self.cover.top(n).0.max(1)
        }
    }

    /// Consecutive counting intervals, ending with the last closed one, in which `rec` was
    /// sampled.
    pub(crate) fn touched_run(&self, rec: &SuperpageRecord) -> u8 {
        rec.touched_run(self.interval_stamp)
    }

    /// Stage-2 counts (reads and writes) of `len` bytes at `start` within a slot, and of the
    /// whole superpage.
    pub(crate) fn stage2_sums(&self, slot: u32, start: u64, len: u64) -> (u32, u32) {
        let (r, w) = self.stage2.counters(slot);
        let first = ((start >> PAGE_SHIFT) as usize) & (SUBPAGES - 1);
        let pages = ((len / PAGE_SIZE) as usize).min(SUBPAGES - first);
        let sum = |range: std::ops::Range<usize>| -> u32 {
            range
                .map(|p| subpage::value(r[p]).saturating_add(subpage::value(w[p])))
                .sum()
        };
        (sum(first..first + pages), sum(0..SUBPAGES))
    }

    /// Whether `rec` was in the hot set when the last epoch ended.
    pub(crate) fn hot_at_last_plan(&self, rec: &SuperpageRecord) -> bool {
        match self.epoch_end {
            Some((cutoff, write_factor)) => rec.accesses(write_factor) >= cutoff,
            None => rec.flags & HOT_PREV != 0,
        }
    }

    /// Whether `rec` was touched in an interval closed since the last plan.
    pub(crate) fn touched_this_epoch(&self, rec: &SuperpageRecord) -> bool {
        self.epoch_end.is_none() && rec.flags & TOUCHED_EPOCH != 0
    }

    /// `rec`'s uncooled reads and writes since the last plan.
    pub(crate) fn epoch_counts(&self, rec: &SuperpageRecord) -> (u32, u32) {
        if self.epoch_end.is_some() {
            (0, 0)
        } else {
            (rec.epoch_r, rec.epoch_w)
        }
    }

    /// Sampled reuse gaps of superpages, in counting intervals.
    pub(crate) fn reuse(&self) -> &'a ReuseHistogram {
        self.reuse
    }
}
