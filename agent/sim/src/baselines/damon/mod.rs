//! DAMON-like tiering (anchors.md §1.2: `damonitor/damo` `scripts/mem_tier.sh`, kernel
//! `samples/damon/mtier.c`).
//!
//! What it models:
//! - **Region monitoring.** Regions cover the mapped address ranges; every sampling interval
//!   (5 ms) one random page per region has its accessed bit checked and cleared; per
//!   aggregation interval (100 ms) `nr_accesses` is the number of sampling intervals it was seen
//!   accessed. Adjacent regions whose `nr_accesses` differ by at most 10 % of the maximum are
//!   merged (the age survives) unless the merged region would outgrow the monitored span over
//!   `min_nr_regions` (the kernel's `damon_region_sz_limit`); then, while there are fewer than
//!   `max_nr_regions / 2`, every region is split in two at a random page. 10..1000 regions.
//! - **Schemes**, applied every second with 200 MB/s quotas (the mem_tier.sh setup):
//!   `migrate_hot` — slow-tier data of regions with an access rate of at least 5 %, hottest
//!   first, while fast-tier use is under the 99.7 % goal, `young` pages only;
//!   `migrate_cold` — fast-tier data of regions with a 0 % access rate, oldest first, while
//!   fast-tier free memory is under the 0.5 % goal, non-`young` pages only.
//! - Migration is per folio: a THP moves whole, a split superpage per 4 KiB page. A THP whose
//!   2 MiB does not fit in the fast tier is split and its 4 KiB pages move while room lasts, as
//!   the kernel's `migrate_pages` does for DAMOS (it would otherwise never move: a first-touch
//!   fill leaves under 2 MiB free but more than `migrate_cold`'s 0.5 % goal, so no scheme ever
//!   makes room).
//! - **Accessed bits as the kernel keeps them.** A PMD-mapped huge page has one accessed bit:
//!   any access to it sets it, and DAMON's mkold of any of its pages clears it for all 512.
//!   The `young` filter reads a folio's bit and clears it when set, as the kernel's does.
//!
//! DAMON monitors per node in physical space; the suite's baseline monitors the target's
//! virtual space and applies each scheme to the part of a region that sits in the scheme's
//! source tier. `DamonSetup::physical_node_bytes` monitors a node's frames instead, as the VM
//! comparison's DAMON did (`vm`, the calibration against it).

use std::time::Duration;

use crate::{
    model::TierModel,
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::{
    policy::PlacementView as _,
    rng::SplitMix64,
    units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE, Tier, subpage_index},
};

#[derive(Clone, Copy, Debug)]
struct Region {
    /// Page-aligned addresses.
    start: u64,
    end: u64,
    seen: u32,
    nr_accesses: u32,
    age: u32,
    /// Page whose accessed bit was cleared at the last sampling (checked at the next).
    probe: Option<u64>,
}

/// One DAMON setup: monitoring attributes, the schemes, and where the target's memory starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DamonSetup {
    pub sampling: Duration,
    pub aggregation: Duration,
    /// Interval of the schemes' application.
    pub apply: Duration,
    pub min_regions: usize,
    pub max_regions: usize,
    /// `migrate_hot`'s lowest access rate: `nr_accesses` over its maximum (at least one check
    /// found the region accessed).
    pub hot_min_rate: f64,
    /// The `young` filter on `migrate_hot`, and `migrate_cold` (rejecting young pages) with
    /// its free-memory goal.
    pub young_filter_and_cold: bool,
    /// Fast-tier use up to which `migrate_hot` runs (its quota goal), fraction.
    pub hot_use_goal: f64,
    /// Bytes per second each scheme may move; `None`: no quota.
    pub quota_bytes_per_s: Option<f64>,
    /// Every first touch lands in the slow tier, as memory allocated on the slow node.
    pub allocate_slow: bool,
    /// Physical monitoring (`paddr`) of a node of this many bytes, whose first frames hold
    /// the target's superpages in the order it touched them and the rest nothing; `None`
    /// monitors the target's virtual address space (`vaddr`).
    pub physical_node_bytes: Option<u64>,
}

impl DamonSetup {
    /// The design point: damo's `scripts/mem_tier.sh` and the kernel's `samples/damon/mtier.c`.
    pub const MTIER: Self = Self {
        sampling: Duration::from_millis(5),
        aggregation: Duration::from_millis(100),
        apply: Duration::from_secs(1),
        min_regions: 10,
        max_regions: 1000,
        hot_min_rate: 0.05,
        young_filter_and_cold: true,
        hot_use_goal: 0.997,
        quota_bytes_per_s: Some(200e6),
        allocate_slow: false,
        physical_node_bytes: None,
    };

    /// The scheme of the VM comparison (agent/tests/vm/compare.rs): DAMON's default
    /// attributes over the slow node's 1 GiB of physical memory (`paddr`), `migrate_hot` alone
    /// for any region seen accessed once per aggregation, applied every aggregation
    /// (`apply_interval_us` 0), no filter, quota or goal, on memory the workload allocated on
    /// the slow node.
    pub const VM_COMPARISON: Self = Self {
        apply: Duration::from_millis(100),
        hot_min_rate: 0.0,
        young_filter_and_cold: false,
        hot_use_goal: 1.0,
        quota_bytes_per_s: None,
        allocate_slow: true,
        physical_node_bytes: Some(1 << 30),
        ..Self::MTIER
    };
}

pub struct Damon {
    setup: DamonSetup,
    regions: Vec<Region>,
    /// Physical monitoring: the superpage in each 2 MiB frame of the node, in frame order.
    frames: Vec<u64>,
    rng: SplitMix64,
    next_sample: Duration,
    next_aggr: Duration,
    next_apply: Duration,
    mapped: u64,
}

impl Default for Damon {
    fn default() -> Self {
        Self::new(DamonSetup::MTIER)
    }
}

impl Damon {
    /// A DAMON switched on with the replay.
    #[must_use]
    pub fn new(setup: DamonSetup) -> Self {
        Self::starting_at(setup, Duration::ZERO, 0xda30)
    }

    /// A DAMON switched on at `start` of the replay's clock (after the workload's set-up),
    /// its random region splits drawn from `seed`.
    #[must_use]
    pub fn starting_at(setup: DamonSetup, start: Duration, seed: u64) -> Self {
        Self {
            setup,
            regions: Vec::new(),
            frames: Vec::new(),
            rng: SplitMix64::new(seed),
            next_sample: start,
            next_aggr: start + setup.aggregation,
            next_apply: start + setup.apply,
            mapped: 0,
        }
    }

    fn max_nr(&self) -> u32 {
        (self.setup.aggregation.as_nanos() / self.setup.sampling.as_nanos()) as u32
    }

    /// Rebuilds the regions when the mapped set changed: contiguous runs of mapped superpages,
    /// split evenly up to `min_regions`. Existing regions keep their counts where they overlap.
    fn sync(&mut self, model: &mut TierModel) {
        let n = model.mapped_superpages();
        if n == self.mapped {
            return;
        }
        self.mapped = n;
        let sorted = model.sorted().to_vec();
        if let Some(node) = self.setup.physical_node_bytes {
            // The node's frames hold the superpages in the order they were first touched,
            // which for the VM's workload (written front to back) is address order.
            self.frames = sorted;
            if self.regions.is_empty() {
                self.regions.push(Region {
                    start: 0,
                    end: node.max(SUPERPAGE_SIZE),
                    seen: 0,
                    nr_accesses: 0,
                    age: 0,
                    probe: None,
                });
                self.split_to_minimum();
            }
            return;
        }
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for sp in sorted {
            let (s, e) = (sp * SUPERPAGE_SIZE, (sp + 1) * SUPERPAGE_SIZE);
            match ranges.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => ranges.push((s, e)),
            }
        }
        let old = std::mem::take(&mut self.regions);
        for (s, e) in ranges {
            // Keep old regions inside this range; cover the gaps with new ones.
            let mut at = s;
            for r in old.iter().filter(|r| r.start >= s && r.end <= e) {
                if r.start > at {
                    self.regions.push(Region {
                        start: at,
                        end: r.start,
                        seen: 0,
                        nr_accesses: 0,
                        age: 0,
                        probe: None,
                    });
                }
                self.regions.push(*r);
                at = r.end;
            }
            if at < e {
                self.regions.push(Region {
                    start: at,
                    end: e,
                    seen: 0,
                    nr_accesses: 0,
                    age: 0,
                    probe: None,
                });
            }
        }
        self.split_to_minimum();
    }

    fn split_to_minimum(&mut self) {
        while self.regions.len() < self.setup.min_regions {
            let before = self.regions.len();
            self.split_all();
            if self.regions.len() == before {
                break;
            }
        }
    }

    /// The virtual address a monitored address stands for: itself under `vaddr`, the page in
    /// that frame under `paddr` (none for a free frame).
    fn to_virtual(&self, addr: u64) -> Option<u64> {
        if self.setup.physical_node_bytes.is_none() {
            return Some(addr);
        }
        let frame = usize::try_from(addr / SUPERPAGE_SIZE).ok()?;
        Some(self.frames.get(frame)? * SUPERPAGE_SIZE + addr % SUPERPAGE_SIZE)
    }

    /// Whether the probe at `addr` finds its page accessed. Under `paddr` a page that moved to
    /// the fast tier left a free frame behind on the monitored node: nothing accesses it.
    fn probe_young(&self, model: &TierModel, addr: u64) -> bool {
        self.to_virtual(addr).is_some_and(|page| {
            is_young(model, page)
                && (self.setup.physical_node_bytes.is_none()
                    || model.tier_of(page) == Some(Tier::Slow))
        })
    }

    fn split_all(&mut self) {
        let mut out = Vec::with_capacity(self.regions.len() * 2);
        for r in std::mem::take(&mut self.regions) {
            let pages = (r.end - r.start) / PAGE_SIZE;
            if pages < 2 {
                out.push(r);
                continue;
            }
            let cut = r.start + (1 + self.rng.below(pages - 1)) * PAGE_SIZE;
            out.push(Region {
                end: cut,
                probe: None,
                ..r
            });
            out.push(Region {
                start: cut,
                probe: None,
                ..r
            });
        }
        self.regions = out;
    }

    /// One sampling interval: check the accessed bit of each region's probe page (cleared at
    /// the previous interval), then pick a new random probe page and clear its bit (mkold).
    fn sample(&mut self, model: &mut TierModel) {
        for i in 0..self.regions.len() {
            let r = self.regions[i];
            if r.probe.is_some_and(|p| self.probe_young(model, p)) {
                self.regions[i].seen += 1;
            }
            let pages = (r.end - r.start) / PAGE_SIZE;
            let page = r.start + self.rng.below(pages.max(1)) * PAGE_SIZE;
            if let Some(v) = self.to_virtual(page) {
                make_old(model, v);
            }
            self.regions[i].probe = Some(page);
        }
    }

    fn aggregate(&mut self) {
        let thr = self.max_nr() / 10;
        // DAMON never merges past the monitored span over `min_nr_regions`
        // (`damon_region_sz_limit`), so its regions never fall below the minimum.
        let span: u64 = self.regions.iter().map(|r| r.end - r.start).sum();
        let size_limit = (span / self.setup.min_regions.max(1) as u64).max(PAGE_SIZE);
        let mut merged: Vec<Region> = Vec::with_capacity(self.regions.len());
        for mut r in std::mem::take(&mut self.regions) {
            r.age = if r.seen.abs_diff(r.nr_accesses) <= thr {
                r.age + 1
            } else {
                0
            };
            r.nr_accesses = r.seen;
            r.seen = 0;
            match merged.last_mut() {
                Some(l)
                    if l.end == r.start
                        && l.nr_accesses.abs_diff(r.nr_accesses) <= thr
                        && r.end - l.start <= size_limit =>
                {
                    let (lw, rw) = ((l.end - l.start) as f64, (r.end - r.start) as f64);
                    l.nr_accesses = ((f64::from(l.nr_accesses) * lw
                        + f64::from(r.nr_accesses) * rw)
                        / (lw + rw)) as u32;
                    l.age = ((f64::from(l.age) * lw + f64::from(r.age) * rw) / (lw + rw)) as u32;
                    l.end = r.end;
                    l.probe = None;
                }
                _ => merged.push(r),
            }
        }
        self.regions = merged;
        if self.regions.len() < self.setup.max_regions / 2 {
            self.split_all();
        }
    }

    /// Applies one scheme to a region's pages in `from`; returns bytes moved.
    fn apply_region(
        &self,
        model: &mut TierModel,
        r: &Region,
        to: Tier,
        young: Option<bool>,
        budget: f64,
        now_ms: u32,
    ) -> f64 {
        let mut moved = 0.0;
        let mut at = r.start / SUPERPAGE_SIZE;
        while at * SUPERPAGE_SIZE < r.end && moved < budget {
            // The region's part of this superpage (of this frame, under `paddr`).
            let (first, last) = (
                r.start.max(at * SUPERPAGE_SIZE),
                r.end.min((at + 1) * SUPERPAGE_SIZE),
            );
            let sp = self
                .to_virtual(at * SUPERPAGE_SIZE)
                .map(|v| v / SUPERPAGE_SIZE);
            if let Some(idx) = sp.and_then(|sp| model.find(sp)) {
                let s = model.superpage(idx);
                let base = s.sp * SUPERPAGE_SIZE;
                if s.huge {
                    let in_from = (s.fast_pages() == SUBPAGES as u32) != (to == Tier::Fast);
                    // The young filter reads the folio's bit and clears it (mkold), as
                    // DAMOS filters do: one bit for the whole PMD-mapped huge page.
                    if in_from && young.is_none_or(|y| young_filter(model, base) == y) {
                        let whole = to == Tier::Slow || model.fast_free_bytes() >= SUPERPAGE_SIZE;
                        let bytes = if whole {
                            model.migrate(base, SUPERPAGE_SIZE, to, SUPERPAGE_SIZE, now_ms)
                        } else {
                            // No 2 MiB target on the fast node: migrate_pages() splits the THP
                            // (-ENOMEM on a large folio, reason MR_DAMON, not MR_NUMA_MISPLACED:
                            // mm/migrate.c migrate_pages_batch) and moves its base pages while
                            // the node has room.
                            model.split(idx);
                            let room = model.fast_free_bytes().min(SUPERPAGE_SIZE);
                            model.migrate(base, room, to, PAGE_SIZE, now_ms)
                        };
                        moved += bytes as f64;
                    }
                } else {
                    let mut a = base + first % SUPERPAGE_SIZE;
                    let end = base + (last - 1) % SUPERPAGE_SIZE + 1;
                    while a < end && moved < budget {
                        let p = subpage_index(a);
                        let in_from = model.superpage(idx).is_fast(p) != (to == Tier::Fast);
                        if in_from && young.is_none_or(|y| young_filter(model, a) == y) {
                            moved += model.migrate(a, PAGE_SIZE, to, PAGE_SIZE, now_ms) as f64;
                        }
                        a += PAGE_SIZE;
                    }
                }
            }
            at += 1;
        }
        moved
    }

    fn schemes(&mut self, model: &mut TierModel, now_ms: u32) {
        let setup = self.setup;
        let max = f64::from(self.max_nr());
        let quota = setup
            .quota_bytes_per_s
            .map_or(f64::INFINITY, |q| q * setup.apply.as_secs_f64());
        let cap = model.fast_capacity_bytes() as f64;
        if setup.young_filter_and_cold {
            // migrate_cold: 0 % access rate, oldest first, while free < 0.5 %, old pages only.
            let mut cold: Vec<Region> = self
                .regions
                .iter()
                .filter(|r| r.nr_accesses == 0)
                .copied()
                .collect();
            cold.sort_by(|a, b| b.age.cmp(&a.age).then(a.start.cmp(&b.start)));
            let mut left = quota;
            for r in &cold {
                if left <= 0.0 || model.fast_free_bytes() as f64 >= cap * 0.005 {
                    break;
                }
                left -= self.apply_region(model, r, Tier::Slow, Some(false), left, now_ms);
            }
        }
        // migrate_hot: at least the scheme's access rate (and one access), hottest first, while
        // fast-tier use is under its goal.
        let young = setup.young_filter_and_cold.then_some(true);
        let mut hot: Vec<Region> = self
            .regions
            .iter()
            .filter(|r| r.nr_accesses >= 1 && f64::from(r.nr_accesses) >= setup.hot_min_rate * max)
            .copied()
            .collect();
        hot.sort_by(|a, b| {
            b.nr_accesses
                .cmp(&a.nr_accesses)
                .then(a.start.cmp(&b.start))
        });
        let mut left = quota;
        for r in &hot {
            if left <= 0.0 || model.fast_used_bytes() as f64 >= cap * setup.hot_use_goal {
                break;
            }
            left -= self.apply_region(model, r, Tier::Fast, young, left, now_ms);
        }
    }
}

/// Whether the page at `addr` was accessed since its bit was last cleared. A huge page has one
/// accessed bit, its PMD's: any access to any of its 512 pages sets it.
fn is_young(model: &TierModel, addr: u64) -> bool {
    let Some(idx) = model.find(addr / SUPERPAGE_SIZE) else {
        return false;
    };
    let s = model.superpage(idx);
    if s.huge {
        return s.accessed != [0; 8];
    }
    let p = subpage_index(addr);
    s.accessed[p / 64] & (1 << (p % 64)) != 0
}

/// Clears the accessed bit of the page at `addr` (DAMON's mkold): for a huge page, its PMD's
/// one bit, so every one of its pages reads as old until the next access.
fn make_old(model: &mut TierModel, addr: u64) {
    let Some(idx) = model.find(addr / SUPERPAGE_SIZE) else {
        return;
    };
    let s = model.superpage_mut(idx);
    if s.huge {
        s.accessed = [0; 8];
    } else {
        let p = subpage_index(addr);
        s.accessed[p / 64] &= !(1u64 << (p % 64));
    }
}

/// The `young` DAMOS filter on the page at `addr`: whether it was accessed, clearing the bit
/// when it was (`damos_pa_filter_match` mkolds a young folio).
fn young_filter(model: &mut TierModel, addr: u64) -> bool {
    let young = is_young(model, addr);
    if young {
        make_old(model, addr);
    }
    young
}

impl SimPolicy for Damon {
    fn name(&self) -> String {
        "damon".into()
    }

    fn place(&mut self, _: u64, model: &TierModel) -> Tier {
        if self.setup.allocate_slow {
            Tier::Slow
        } else {
            model.first_touch()
        }
    }

    fn observe(&mut self, _: &[TraceRecord], _: &[AccessSample], _: &TierModel, _: Clock) {}

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        self.sync(model);
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        while self.next_sample <= clock.now {
            self.sample(model);
            self.next_sample += self.setup.sampling;
            if self.next_sample > self.next_aggr {
                self.aggregate();
                self.next_aggr += self.setup.aggregation;
            }
        }
        if clock.now >= self.next_apply {
            self.schemes(model, now_ms);
            self.next_apply = clock.now + self.setup.apply;
        }
    }
}

mod vm;

pub use vm::{
    VM_SECONDS, VM_SEEDS, VmCalibration, VmCalibrations, vm_calibration, vm_calibrations,
    vm_comparison_cell, vm_comparison_moved_bytes,
};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::DamonSetup;
    use crate::{
        PolicyName,
        model::{PresetName, TierModel},
        policy::{Clock, SimPolicy as _},
        run::SimConfig,
        simulate,
        workload::{GenSpec, Workload},
    };
    use memtide_core::units::Tier;

    /// Under THP (first touch maps whole 2 MiB pages), a huge page's one accessed bit is
    /// cleared by DAMON's checks: cold huge pages read as old and are demoted, which makes the
    /// room `migrate_hot` needs. With 512 bits of which DAMON cleared one per check, nothing
    /// was ever old and DAMON moved nothing on any trace. (Stream sweeps a window of an eighth
    /// of its footprint at a time: the huge pages behind the window go cold. On gups-hotset
    /// every huge page holds hot pages and DAMON, faithfully, has nothing to demote.) The
    /// window moves at one stream's pace: at stream's eight (`Workload::mlp`) it passes a
    /// huge page faster than DAMON's aggregation interval can see it.
    #[test]
    fn cold_huge_pages_are_demoted_and_the_hot_set_promoted() {
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.access_ns *= f64::from(Workload::Stream.mlp());
        let spec = GenSpec {
            workload: Workload::Stream,
            footprint: 64 << 20,
            records: 2_000_000,
            seed: 9,
        };
        let none = simulate(&spec, PolicyName::NoMigration, &cfg).unwrap();
        let damon = simulate(&spec, PolicyName::Damon, &cfg).unwrap();
        assert!(damon.demoted_bytes > 0, "{damon:?}");
        assert!(damon.promoted_bytes > 0, "{damon:?}");
        assert!(
            damon.fast_hit_ratio > none.fast_hit_ratio,
            "damon {} vs no migration {}",
            damon.fast_hit_ratio,
            none.fast_hit_ratio
        );
    }

    /// First touch fills the fast tier with whole huge pages and leaves under 2 MiB free, but
    /// more than `migrate_cold`'s 0.5 % goal, so no scheme makes room. The kernel's
    /// `migrate_pages` splits a THP it cannot place whole (-ENOMEM, MR_DAMON) and moves its
    /// base pages while the node has room; refusing the whole THP instead, the model moved
    /// nothing (0 bytes, 4 refused promotions on this trace).
    #[test]
    fn a_huge_page_that_cannot_move_whole_is_split_and_moves_what_fits() {
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = crate::run::FastSize::Bytes(9 << 19);
        let spec = GenSpec {
            workload: Workload::ZipfKv,
            footprint: 64 << 20,
            records: 2_000_000,
            seed: 9,
        };
        let damon = simulate(&spec, PolicyName::Damon, &cfg).unwrap();
        assert!(damon.promoted_bytes > 0, "{damon:?}");
        assert!(damon.huge_page_splits > 0, "{damon:?}");
    }

    /// Idle memory reads as one pattern everywhere, yet DAMON keeps at least `min_nr_regions`:
    /// merging stops at the span over the minimum. Without that limit the model's regions
    /// collapsed to two and a hot subset an eighth of the span was seen in a check or two of
    /// twenty.
    #[test]
    fn merging_never_leaves_fewer_regions_than_the_minimum() {
        let mut model = TierModel::new(PresetName::Pmem.preset(), 1 << 30);
        for sp in 0..64 {
            model.map(sp, Tier::Slow);
        }
        let mut damon = super::Damon::new(DamonSetup::MTIER);
        for ms in (0..3_000).step_by(5) {
            let clock = Clock {
                now: Duration::from_millis(ms),
                records: ms,
            };
            damon.step(clock, &mut model);
            assert!(
                damon.regions.len() >= 10,
                "{} regions at {ms} ms",
                damon.regions.len()
            );
        }
    }
}
