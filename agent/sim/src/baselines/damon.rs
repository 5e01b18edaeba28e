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
//! - Migration is per folio: a THP moves whole, a split superpage per 4 KiB page.
//! - **Accessed bits as the kernel keeps them.** A PMD-mapped huge page has one accessed bit:
//!   any access to it sets it, and DAMON's mkold of any of its pages clears it for all 512.
//!   The `young` filter reads a folio's bit and clears it when set, as the kernel's does.
//!
//! DAMON monitors per node in physical space; we monitor the target's virtual space and apply
//! each scheme to the part of a region that sits in the scheme's source tier.

use std::time::Duration;

use serde::Serialize;

use crate::{
    model::TierModel,
    policy::{Clock, SimPolicy},
    run::{FastSize, SimConfig, run_keeping_model},
    trace::{TraceError, TraceRecord},
    workload::{BASE, GenSpec, Workload},
};
use memtide_common::AccessSample;
use memtide_core::{
    policy::PlacementView as _,
    testgen::SplitMix64,
    units::{PAGE_SIZE, SUPERPAGE_SIZE, Tier},
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
    };

    /// The scheme of the VM comparison (agent/tests/vm/compare.rs): DAMON's default
    /// attributes, `migrate_hot` alone for any region seen accessed once per aggregation,
    /// applied every aggregation (`apply_interval_us` 0), no filter, quota or goal, on memory
    /// the workload allocated on the slow node.
    pub const VM_COMPARISON: Self = Self {
        apply: Duration::from_millis(100),
        hot_min_rate: 0.0,
        young_filter_and_cold: false,
        hot_use_goal: 1.0,
        quota_bytes_per_s: None,
        allocate_slow: true,
        ..Self::MTIER
    };
}

pub struct Damon {
    setup: DamonSetup,
    regions: Vec<Region>,
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
    #[must_use]
    pub fn new(setup: DamonSetup) -> Self {
        Self {
            setup,
            regions: Vec::new(),
            rng: SplitMix64::new(0xda30),
            next_sample: Duration::ZERO,
            next_aggr: setup.aggregation,
            next_apply: setup.apply,
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
        while self.regions.len() < self.setup.min_regions {
            let before = self.regions.len();
            self.split_all();
            if self.regions.len() == before {
                break;
            }
        }
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
            if let Some(page) = r.probe
                && is_young(model, page)
            {
                self.regions[i].seen += 1;
            }
            let pages = (r.end - r.start) / PAGE_SIZE;
            let page = r.start + self.rng.below(pages.max(1)) * PAGE_SIZE;
            make_old(model, page);
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
        model: &mut TierModel,
        r: &Region,
        to: Tier,
        young: Option<bool>,
        budget: f64,
        now_ms: u32,
    ) -> f64 {
        let mut moved = 0.0;
        let mut sp = r.start / SUPERPAGE_SIZE;
        while sp * SUPERPAGE_SIZE < r.end && moved < budget {
            if let Some(idx) = model.find(sp) {
                let s = model.superpage(idx);
                let base = sp * SUPERPAGE_SIZE;
                if s.huge {
                    let in_from = (s.fast_pages() == 512) != (to == Tier::Fast);
                    // The young filter reads the folio's bit and clears it (mkold), as
                    // DAMOS filters do: one bit for the whole PMD-mapped huge page.
                    if in_from && young.is_none_or(|y| young_filter(model, base) == y) {
                        moved +=
                            model.migrate(base, SUPERPAGE_SIZE, to, SUPERPAGE_SIZE, now_ms) as f64;
                    }
                } else {
                    let first = r.start.max(base);
                    let last = r.end.min(base + SUPERPAGE_SIZE);
                    let mut a = first;
                    while a < last && moved < budget {
                        let p = ((a / PAGE_SIZE) % 512) as usize;
                        let in_from = model.superpage(idx).is_fast(p) != (to == Tier::Fast);
                        if in_from && young.is_none_or(|y| young_filter(model, a) == y) {
                            moved += model.migrate(a, PAGE_SIZE, to, PAGE_SIZE, now_ms) as f64;
                        }
                        a += PAGE_SIZE;
                    }
                }
            }
            sp += 1;
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
                left -= Self::apply_region(model, r, Tier::Slow, Some(false), left, now_ms);
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
            left -= Self::apply_region(model, r, Tier::Fast, young, left, now_ms);
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
    let p = ((addr / PAGE_SIZE) % 512) as usize;
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
        let p = ((addr / PAGE_SIZE) % 512) as usize;
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

/// The VM comparison's workload and machine, as `memtide gen` and the tier model have them:
/// 256 MiB, a 32 MiB hot subset (agent/tests/vm/promotion.rs), 30 s, a fast tier with room
/// for all of it (node 0 of the VM has about 1 GiB free).
pub const VM_FOOTPRINT: u64 = 256 << 20;
pub const VM_SECONDS: f64 = 30.0;
pub const VM_FAST_BYTES: u64 = 1 << 30;

/// What the model of one DAMON setup moved on the VM comparison's workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VmCalibration {
    /// Bytes the model migrated (promoted and demoted) in [`VM_SECONDS`].
    pub moved_bytes: u64,
    /// Share of the hot subset, and of the cold rest, in the fast tier at the end.
    pub hot_fast: f64,
    pub cold_fast: f64,
}

/// Replays the VM comparison's workload through the DAMON model at `setup` under `cfg`'s
/// preset and clock.
pub fn vm_calibration(setup: DamonSetup, cfg: &SimConfig) -> Result<VmCalibration, TraceError> {
    let records_per_s = 1e9 / (cfg.access_ns * f64::from(Workload::HotSubset.record_weight()));
    let spec = GenSpec {
        workload: Workload::HotSubset,
        footprint: VM_FOOTPRINT,
        records: (VM_SECONDS * records_per_s) as u64,
        seed: cfg.seed,
    };
    let cfg = SimConfig {
        fast: FastSize::Bytes(VM_FAST_BYTES),
        footprint: None,
        ..cfg.clone()
    };
    let mut damon = Damon::new(setup);
    let (result, model) = run_keeping_model(&spec, &mut damon, &cfg)?;
    let pages = VM_FOOTPRINT / PAGE_SIZE;
    let (hot_first, hot_pages) = (pages * 7 / 16, pages / 8);
    let (mut hot, mut cold) = (0u64, 0u64);
    for page in 0..pages {
        let fast = model.tier_of(BASE + page * PAGE_SIZE) == Some(Tier::Fast);
        if (hot_first..hot_first + hot_pages).contains(&page) {
            hot += u64::from(fast);
        } else {
            cold += u64::from(fast);
        }
    }
    Ok(VmCalibration {
        moved_bytes: result.promoted_bytes + result.demoted_bytes,
        hot_fast: hot as f64 / hot_pages as f64,
        cold_fast: cold as f64 / (pages - hot_pages) as f64,
    })
}

/// The cell of `column` in the row of the first system whose name starts with `system`, in the
/// VM comparison's table (docs/evaluation/vm-comparison.md).
#[must_use]
pub fn vm_comparison_cell(table: &str, system: &str, column: &str) -> Option<String> {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let mut rows = table.lines().filter(|l| l.starts_with('|'));
    let index = cells(rows.next()?).iter().position(|c| c == column)?;
    rows.map(cells)
        .find(|r| r[0].starts_with(system))?
        .get(index)
        .cloned()
}

/// Bytes migrated by `system` in the VM comparison's table (its "bytes migrated", in MiB).
#[must_use]
pub fn vm_comparison_moved_bytes(table: &str, system: &str) -> Option<u64> {
    let cell = vm_comparison_cell(table, system, "bytes migrated")?;
    let mib: f64 = cell.strip_suffix(" MiB")?.parse().ok()?;
    Some((mib * f64::from(1 << 20)) as u64)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{DamonSetup, vm_calibration, vm_comparison_moved_bytes};
    use crate::{
        PolicyName,
        model::PresetName,
        model::TierModel,
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
    /// every huge page holds hot pages and DAMON, faithfully, has nothing to demote.)
    /// On the VM comparison's workload, set up as the VM set up the real DAMON (no filter, no
    /// quota), the model promotes the whole hot subset within the run; how its bytes compare
    /// with the real DAMON's is the report's calibration section.
    #[test]
    fn the_vm_comparisons_scheme_promotes_the_hot_subset() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let model = vm_calibration(DamonSetup::VM_COMPARISON, &cfg).unwrap();
        assert!(model.hot_fast >= 0.99, "{model:?}");
        assert!(model.moved_bytes >= super::VM_FOOTPRINT / 8, "{model:?}");
        assert!(model.cold_fast < 1.0, "{model:?}");
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

    #[test]
    fn the_vm_comparison_table_is_read_by_column() {
        let table = "| system | time to 90 % | bytes migrated |\n|---|---|---|\n\
                     | memtide | 6 s | 41.3 MiB |\n| DAMON migrate_hot (paddr) | 4 s | 94.0 MiB |\n";
        assert_eq!(vm_comparison_moved_bytes(table, "DAMON"), Some(94 << 20));
        assert_eq!(vm_comparison_moved_bytes(table, "kernel"), None);
    }

    #[test]
    fn cold_huge_pages_are_demoted_and_the_hot_set_promoted() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
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
}
