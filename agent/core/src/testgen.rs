//! Deterministic trace generators and a two-tier placement model for the core's own tests and
//! benches: any initial tier, pages outside the footprint unmapped, no costs. The simulator
//! (`memtide-sim`) has the full workload generator (`memtide_sim::workload`) and a THP-aware
//! tier model with costs (`memtide_sim::model`). Randomness comes only from [`SplitMix64`] with
//! an explicit seed.
//!
//! Behind the `testgen` feature: only the core's own tests, the benches and the crates' tests
//! that need it enable it, so no production build carries it.

use std::collections::BTreeMap;

use crate::{
    engine::{AccessKind, Sample},
    policy::{CapacityView, PlacementView, Plan},
    rng::SplitMix64,
    units::{Direction, PAGE_SIZE, Residency, SUBPAGES, SUPERPAGE_SIZE, Tier},
};

/// Access pattern of a [`TraceGen`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Rainbow's GUPS row: `hot_superpages` superpages, each with 1..=`max_hot` hot 4 KiB pages.
    SparseHot { hot_superpages: u64, max_hot: u64 },
    /// `hot_pages` hot pages scattered uniformly over the footprint (gups / xsbench).
    UniformHot { hot_pages: u64 },
    /// `blocks` hot 64 KiB blocks, each with `pages` of its 16 pages hot (graph500).
    Clustered64K { blocks: u64, pages: u64 },
    /// A sequential sweep touching every page in turn (stream / lulesh).
    Streaming,
}

/// Generates intervals of samples over a footprint starting at `base`.
#[derive(Clone, Debug)]
pub struct TraceGen {
    rng: SplitMix64,
    pattern: Pattern,
    base: u64,
    footprint_pages: u64,
    hot: Vec<u64>,
    cursor: u64,
    /// Share of samples that go to the hot pages (the rest are uniform background).
    pub hot_share: f64,
    /// Share of samples that are stores.
    pub write_share: f64,
    /// Weight of every sample.
    pub weight: u32,
}

impl TraceGen {
    #[must_use]
    pub fn new(seed: u64, pattern: Pattern, base: u64, footprint: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let footprint_pages = footprint / PAGE_SIZE;
        let sps = footprint / SUPERPAGE_SIZE;
        let mut hot = Vec::new();
        match pattern {
            Pattern::SparseHot {
                hot_superpages,
                max_hot,
            } => {
                for sp in distinct(&mut rng, hot_superpages, sps) {
                    let n = 1 + rng.below(max_hot);
                    for p in distinct(&mut rng, n, SUBPAGES as u64) {
                        hot.push(base + sp * SUPERPAGE_SIZE + p * PAGE_SIZE);
                    }
                }
            }
            Pattern::UniformHot { hot_pages } => {
                hot = distinct(&mut rng, hot_pages, footprint_pages)
                    .into_iter()
                    .map(|p| base + p * PAGE_SIZE)
                    .collect();
            }
            Pattern::Clustered64K { blocks, pages } => {
                for b in distinct(&mut rng, blocks, footprint / (64 << 10)) {
                    for p in distinct(&mut rng, pages, 16) {
                        hot.push(base + b * (64 << 10) + p * PAGE_SIZE);
                    }
                }
            }
            Pattern::Streaming => {}
        }
        hot.sort_unstable();
        Self {
            rng,
            pattern,
            base,
            footprint_pages,
            hot,
            cursor: 0,
            hot_share: 0.7,
            write_share: 0.0,
            weight: 1,
        }
    }

    /// The hot pages (empty for streaming), ascending.
    #[must_use]
    pub fn hot_pages(&self) -> &[u64] {
        &self.hot
    }

    /// `n` samples of one interval.
    pub fn interval(&mut self, n: usize) -> Vec<Sample> {
        (0..n).map(|_| self.sample()).collect()
    }

    fn sample(&mut self) -> Sample {
        let page = if self.pattern == Pattern::Streaming {
            let p = self.base + self.cursor * PAGE_SIZE;
            self.cursor = (self.cursor + 1) % self.footprint_pages;
            p
        } else if !self.hot.is_empty() && self.rng.unit() < self.hot_share {
            self.hot[self.rng.below(self.hot.len() as u64) as usize]
        } else {
            self.base + self.rng.below(self.footprint_pages) * PAGE_SIZE
        };
        let kind = if self.rng.unit() < self.write_share {
            AccessKind::Store
        } else {
            AccessKind::Load
        };
        Sample {
            addr: page + (self.rng.below(PAGE_SIZE / 8) * 8),
            kind,
            weight: self.weight,
        }
    }
}

/// `k` distinct values in `0..n`, ascending.
fn distinct(rng: &mut SplitMix64, k: u64, n: u64) -> Vec<u64> {
    let mut set = std::collections::BTreeSet::new();
    while (set.len() as u64) < k.min(n) {
        set.insert(rng.below(n));
    }
    set.into_iter().collect()
}

/// A two-tier placement model: every page of `[base, base + footprint)` is mapped, initially in
/// `initial`; plans are applied page by page. It maps 4 KiB pages only, unless built
/// [`TierModel::with_thp`].
#[derive(Clone, Debug)]
pub struct TierModel {
    base: u64,
    end: u64,
    initial: Tier,
    sps: BTreeMap<u64, Residency>,
    fast_total: u64,
    fast_used: u64,
    thp_always: bool,
}

impl TierModel {
    #[must_use]
    pub fn new(base: u64, footprint: u64, initial: Tier, fast_total: u64) -> Self {
        let fast_used = if initial == Tier::Fast { footprint } else { 0 };
        Self {
            base,
            end: base + footprint,
            initial,
            sps: BTreeMap::new(),
            fast_total,
            fast_used,
            thp_always: false,
        }
    }

    /// The same model under THP `always`: every superpage starts as a huge page, and the
    /// planner, told nothing about which ones a move has split, presumes.
    #[must_use]
    pub fn with_thp(mut self) -> Self {
        self.thp_always = true;
        self
    }

    fn mapped(&self, page: u64) -> bool {
        (self.base..self.end).contains(&page)
    }

    /// Capacity as the planner should see it.
    #[must_use]
    pub fn capacity(&self) -> CapacityView {
        CapacityView {
            fast_total_bytes: self.fast_total,
            fast_free_bytes: self.fast_total.saturating_sub(self.fast_used),
            slow_total_bytes: u64::MAX / 2,
            slow_free_bytes: u64::MAX / 2,
            ..CapacityView::default()
        }
    }

    #[must_use]
    pub fn fast_used(&self) -> u64 {
        self.fast_used
    }

    /// Applies a plan; returns the bytes that changed tier (promoted, demoted).
    pub fn apply(&mut self, plan: &Plan) -> (u64, u64) {
        let (mut up, mut down) = (0, 0);
        for m in &plan.moves {
            let to = if m.direction == Direction::Promote {
                Tier::Fast
            } else {
                Tier::Slow
            };
            let mut page = m.start;
            while page < m.start + m.len {
                if self.mapped(page) && self.tier_of(page) != Some(to) {
                    let sp = page / SUPERPAGE_SIZE;
                    let initial = self.initial;
                    let r = self
                        .sps
                        .entry(sp)
                        .or_insert_with(|| Residency::all(initial));
                    r.set(((page % SUPERPAGE_SIZE) / PAGE_SIZE) as usize, Some(to));
                    if to == Tier::Fast {
                        up += PAGE_SIZE;
                        self.fast_used += PAGE_SIZE;
                    } else {
                        down += PAGE_SIZE;
                        self.fast_used -= PAGE_SIZE;
                    }
                }
                page += PAGE_SIZE;
            }
        }
        (up, down)
    }
}

impl PlacementView for TierModel {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        if !self.mapped(page) {
            return None;
        }
        match self.sps.get(&(page / SUPERPAGE_SIZE)) {
            Some(r) => r.tier(((page % SUPERPAGE_SIZE) / PAGE_SIZE) as usize),
            None => Some(self.initial),
        }
    }

    fn residency(&self, superpage: u64) -> Residency {
        match self.sps.get(&(superpage / SUPERPAGE_SIZE)) {
            Some(r) => *r,
            None if self.mapped(superpage) && self.mapped(superpage + SUPERPAGE_SIZE - 1) => {
                Residency::all(self.initial)
            }
            None => {
                let mut r = Residency::default();
                for p in 0..SUBPAGES {
                    r.set(p, self.tier_of(superpage + p as u64 * PAGE_SIZE));
                }
                r
            }
        }
    }

    /// 4 KiB pages only; under THP `always` it cannot tell, as the daemon cannot where the
    /// kernel has no `PAGEMAP_SCAN` (before 6.7).
    fn huge_mapped(&self, _superpage: u64) -> Option<bool> {
        (!self.thp_always).then_some(false)
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        if self.initial == Tier::Fast {
            let mut sp = self.base / SUPERPAGE_SIZE;
            while sp * SUPERPAGE_SIZE < self.end {
                self.visit_fast(sp, visit);
                sp += 1;
            }
        } else {
            for &sp in self.sps.keys() {
                self.visit_fast(sp, visit);
            }
        }
    }
}

impl TierModel {
    fn visit_fast(&self, sp: u64, visit: &mut dyn FnMut(u64, u64)) {
        let base = sp * SUPERPAGE_SIZE;
        let r = self.residency(base);
        let mut p = 0;
        while p < SUBPAGES {
            if r.tier(p) == Some(Tier::Fast) {
                let s = p;
                while p < SUBPAGES && r.tier(p) == Some(Tier::Fast) {
                    p += 1;
                }
                visit(base + s as u64 * PAGE_SIZE, (p - s) as u64 * PAGE_SIZE);
            } else {
                p += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::superpage_of;

    #[test]
    fn generators_match_their_shape() {
        let g = TraceGen::new(
            1,
            Pattern::SparseHot {
                hot_superpages: 50,
                max_hot: 32,
            },
            1 << 30,
            1 << 30,
        );
        let per_sp: BTreeMap<u64, usize> =
            g.hot_pages().iter().fold(BTreeMap::new(), |mut m, p| {
                *m.entry(superpage_of(*p)).or_default() += 1;
                m
            });
        assert_eq!(per_sp.len(), 50);
        assert!(per_sp.values().all(|n| (1..=32).contains(n)));
        let c = TraceGen::new(
            1,
            Pattern::Clustered64K {
                blocks: 10,
                pages: 12,
            },
            0,
            1 << 30,
        );
        assert_eq!(c.hot_pages().len(), 120);
        let mut s = TraceGen::new(1, Pattern::Streaming, 0, 8 * PAGE_SIZE);
        let pages: Vec<u64> = s.interval(10).iter().map(|x| x.addr / PAGE_SIZE).collect();
        assert_eq!(pages, vec![0, 1, 2, 3, 4, 5, 6, 7, 0, 1]);
    }

    #[test]
    fn tier_model_applies_plans() {
        let mut m = TierModel::new(0, 4 * SUPERPAGE_SIZE, Tier::Slow, 1 << 30);
        assert_eq!(m.tier_of(0), Some(Tier::Slow));
        assert_eq!(m.tier_of(4 * SUPERPAGE_SIZE), None);
        let plan = Plan {
            moves: vec![crate::policy::PlannedMove {
                start: SUPERPAGE_SIZE,
                len: 2 * PAGE_SIZE,
                direction: Direction::Promote,
                granularity: crate::units::Granularity::KIB_4,
                reason: crate::policy::MoveReason::Hot,
                expected_benefit: 0.0,
            }],
            ..Plan::default()
        };
        assert_eq!(m.apply(&plan), (2 * PAGE_SIZE, 0));
        assert_eq!(m.apply(&plan), (0, 0));
        assert_eq!(m.residency(SUPERPAGE_SIZE).fast_pages(), 2);
        let mut ranges = Vec::new();
        m.for_each_fast_range(&mut |s, l| ranges.push((s, l)));
        assert_eq!(ranges, vec![(SUPERPAGE_SIZE, 2 * PAGE_SIZE)]);
        assert_eq!(m.capacity().fast_free_bytes, (1 << 30) - 2 * PAGE_SIZE);
    }
}
