//! MEMTIS-like (anchors.md §1.5; Lee et al., SOSP'23, `cosmoss-jigu/memtis`).
//!
//! What it models:
//! - PEBS samples counted per 4 KiB page and per huge page (the huge page's count is the sum of
//!   its subpages'). Hotness is MEMTIS's `get_idx` (htmm_core.c): log2 bins, at most 15, of a
//!   huge page's samples and of **512 ×** a base page's (`update_base_page` adds HPAGE_PMD_NR
//!   per sample), i.e. samples per byte, so a split huge page's hot subpages rank with huge
//!   pages. An access-frequency **histogram** weighted by pages gives a **dynamic hot
//!   threshold**: the lowest bin whose pages, together with all hotter ones, fit in the fast
//!   tier (`__adjust_active_threshold`). The warm threshold starts at 1 (`htmm_thres_hot`:
//!   never-sampled pages are demotable) and is one bin below the hot one while the hot pages
//!   fill under 75 % of the tier, the hot one itself otherwise; when demotion cannot make room
//!   for a hot slow page the warm set is given up (`demote_node`, htmm_migrater.c).
//! - **Cooling**: all counts are halved every cooling period.
//! - **Skewness-aware huge-page split**: at each adaptation MEMTIS compares the hit ratio the
//!   fast tier would get with base pages (the hottest 4 KiB pages that fit) against the one with
//!   huge pages (the hottest 2 MiB pages that fit); while base pages win, it splits the most
//!   skewed huge pages — those whose top 512/γ² = 32 subpages (γ = 4, `htmm_gamma`) carry at
//!   least half their samples — up to 16 per adaptation, so only their hot 4 KiB pages are
//!   promoted and their cold ones can be demoted.
//! - `kmigraterd` every 500 ms: promote slow pages at or above the hot threshold (hottest first),
//!   making room by demoting fast pages below the warm threshold (coldest first); a page that
//!   cannot be placed does not stop the others (`promote_page_list` migrates page by page); at
//!   most 100 MB/s. The kernel's 2 %/3 % free-page watermarks (floored at 50/100 MB) are left
//!   out: they cannot be scaled to a fast tier of a few MiB.
//!
//! Its design point: the authors' scripts sample LLC-miss loads every 199 events
//! (`htmm_sample_period`), adapt every 100,000 samples (`htmm_adaptation_period`) and cool
//! every 2,000,000 (`htmm_cooling_period`): every 19.9 M and 398 M accesses. The simulator's
//! samples each carry the accesses they stand for as their weight, and MEMTIS's periods are
//! counted in those accesses, so they fall at the same traffic whatever the sample rate (at the
//! suite's 128 accesses per sample: every 155,000 and 3.1 M samples). The histogram's dynamic
//! threshold is relative, so per-page counts stay counts of samples. Before the first
//! adaptation every sampled page is hot (hot bin 1), as in the kernel before its first
//! histogram.

use std::time::Duration;

use crate::{
    model::{SpMap, TierModel},
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE, Tier, subpage_index};

/// `htmm_sample_period`: the load events one of MEMTIS's samples stands for.
const SAMPLE_PERIOD: u64 = 199;
/// `htmm_adaptation_period` and `htmm_cooling_period` (samples), in accesses.
const ADAPTATION: u64 = 100_000 * SAMPLE_PERIOD;
const COOLING: u64 = 2_000_000 * SAMPLE_PERIOD;
const GAMMA: usize = 4;

pub struct Memtis {
    counts: SpMap<Box<[u32]>>,
    /// Accesses the samples so far stand for (the sum of their weights).
    accesses: u64,
    hot_bin: u32,
    /// Fast pages below this hotness are demotion candidates (`memcg->warm_threshold`).
    warm_bin: u32,
    period: Duration,
    rate_bytes_per_s: f64,
    last: Duration,
    need_adapt: bool,
}

impl Default for Memtis {
    fn default() -> Self {
        Self {
            counts: SpMap::default(),
            accesses: 0,
            hot_bin: 1,
            warm_bin: 1,
            period: Duration::from_millis(500),
            rate_bytes_per_s: 100e6,
            last: Duration::ZERO,
            need_adapt: false,
        }
    }
}

/// MEMTIS's hotness index of a unit with `count` samples (`get_idx`, htmm_core.c):
/// floor(log2(v + 1)), at most 15, where v is a huge page's samples and 512 per sample of a
/// base page (`update_base_page`: `total_accesses += HPAGE_PMD_NR`; `update_huge_page`:
/// `meta_page->total_accesses++`).
fn hotness(count: u32, huge: bool) -> u32 {
    let v = u64::from(count) * if huge { 1 } else { SUBPAGES as u64 };
    (63 - (v + 1).leading_zeros()).min(15)
}

/// Samples per byte, in huge-page units: the order among units of one hotness bin.
fn density(count: u32, huge: bool) -> u64 {
    u64::from(count) * if huge { 1 } else { SUBPAGES as u64 }
}

impl Memtis {
    /// Hotness of one mapping unit: a huge page's summed count, or one base page's count.
    fn units<'a>(
        &'a self,
        model: &'a TierModel,
    ) -> impl Iterator<Item = (usize, Option<usize>, u32)> + 'a {
        model
            .superpages()
            .iter()
            .enumerate()
            .flat_map(move |(idx, s)| {
                let c = self.counts.get(&s.sp);
                let v: Vec<(usize, Option<usize>, u32)> = if s.huge {
                    let total = c.map_or(0, |c| c.iter().sum());
                    vec![(idx, None, total)]
                } else {
                    (0..SUBPAGES)
                        .map(|p| (idx, Some(p), c.map_or(0, |c| c[p])))
                        .collect()
                };
                v
            })
    }

    /// Adapts the bins and, when base pages would serve the fast tier better than its huge
    /// pages (the estimated hit ratio 5 % over the real one), splits up to 16 of the most
    /// skewed huge pages.
    fn adapt_and_split(&mut self, model: &mut TierModel) {
        self.adapt(model);
        let cap_pages = (model.fast_capacity_bytes() / PAGE_SIZE) as usize;
        let mut base: Vec<u32> = Vec::new();
        let mut huge: Vec<u32> = Vec::new();
        for s in model.superpages() {
            if let Some(c) = self.counts.get(&s.sp) {
                base.extend(c.iter().copied().filter(|&x| x > 0));
                huge.push(c.iter().sum());
            }
        }
        let total: u64 = base.iter().map(|&x| u64::from(x)).sum();
        let top = |v: &mut Vec<u32>, n: usize| -> u64 {
            v.sort_unstable_by(|a, b| b.cmp(a));
            v.iter().take(n).map(|&x| u64::from(x)).sum()
        };
        let ehr = top(&mut base, cap_pages);
        let rhr = top(&mut huge, cap_pages / SUBPAGES);
        if total > 0 && ehr as f64 > rhr as f64 * 1.05 {
            let mut skewed: Vec<(u64, usize)> = model
                .superpages()
                .iter()
                .enumerate()
                .filter(|(_, s)| s.huge)
                .filter_map(|(i, s)| {
                    let c = self.counts.get(&s.sp)?;
                    let (t, share) = Self::skew(c);
                    (share >= 0.5).then_some((t, i))
                })
                .collect();
            skewed.sort_unstable_by(|a, b| b.cmp(a));
            for (_, i) in skewed.into_iter().take(16) {
                model.split(i);
            }
        }
    }

    fn adapt(&mut self, model: &TierModel) {
        let mut hist = [0u64; 16];
        for (_, page, count) in self.units(model) {
            hist[hotness(count, page.is_none()) as usize] +=
                if page.is_some() { 1 } else { SUBPAGES as u64 };
        }
        let cap = model.fast_capacity_bytes() / PAGE_SIZE;
        // `__adjust_active_threshold`: from bin 15 down while the pages fit; the threshold is
        // the last bin that fit, or 15 when bin 15 alone does not.
        let mut sum = 0;
        let mut thr = 0;
        for idx in (0..16).rev() {
            if sum + hist[idx] > cap {
                thr = if idx == 15 { 15 } else { idx + 1 };
                break;
            }
            sum += hist[idx];
        }
        self.hot_bin = (thr as u32).max(1);
        // need_warm: the hot pages fill under 75 % of the tier.
        self.warm_bin = if sum < cap * 3 / 4 {
            self.hot_bin - 1
        } else {
            self.hot_bin
        };
    }

    /// (samples, share of them on the top 512/γ² subpages).
    fn skew(counts: &[u32]) -> (u64, f64) {
        let total: u32 = counts.iter().sum();
        if total == 0 {
            return (0, 0.0);
        }
        let mut v: Vec<u32> = counts.to_vec();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = v[..SUBPAGES / (GAMMA * GAMMA)].iter().copied().sum();
        (u64::from(total), f64::from(top) / f64::from(total))
    }
}

impl SimPolicy for Memtis {
    fn name(&self) -> String {
        "memtis".into()
    }

    fn observe(&mut self, _: &[TraceRecord], samples: &[AccessSample], _: &TierModel, _: Clock) {
        for s in samples {
            let c = self
                .counts
                .entry(s.addr / SUPERPAGE_SIZE)
                .or_insert_with(|| vec![0u32; SUBPAGES].into_boxed_slice());
            let p = subpage_index(s.addr);
            c[p] = c[p].saturating_add(1);
            let before = self.accesses;
            self.accesses = self.accesses.saturating_add(s.weight.max(1));
            let crossed = |period: u64| before / period != self.accesses / period;
            if crossed(ADAPTATION) {
                self.need_adapt = true;
            }
            if crossed(COOLING) {
                for c in self.counts.values_mut() {
                    for x in c.iter_mut() {
                        *x >>= 1;
                    }
                }
            }
        }
    }

    fn learns_from_samples_only(&self) -> bool {
        true
    }

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        if self.need_adapt {
            self.need_adapt = false;
            self.adapt_and_split(model);
        }
        if clock.now < self.last + self.period {
            return;
        }
        let mut budget = (clock.now - self.last).as_secs_f64() * self.rate_bytes_per_s;
        self.last = clock.now;
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        let (hot_bin, warm_bin) = (self.hot_bin, self.warm_bin);
        let mut promote = Vec::new();
        let mut demote = Vec::new();
        for (idx, page, count) in self.units(model) {
            let s = model.superpage(idx);
            let fast = match page {
                None => s.fast_pages() == SUBPAGES as u32,
                Some(p) => s.is_fast(p),
            };
            let b = hotness(count, page.is_none());
            let key = (b, density(count, page.is_none()));
            let (start, len) = match page {
                None => (s.sp * SUPERPAGE_SIZE, SUPERPAGE_SIZE),
                Some(p) => (s.sp * SUPERPAGE_SIZE + p as u64 * PAGE_SIZE, PAGE_SIZE),
            };
            if !fast && b >= hot_bin && count > 0 {
                promote.push((key, start, len));
            } else if fast && b < warm_bin {
                demote.push((key, start, len));
            }
        }
        promote.sort_unstable_by(|a, b| b.cmp(a));
        demote.sort_unstable();
        let mut demote = demote.into_iter();
        for (_, start, len) in promote {
            if budget < len as f64 {
                break;
            }
            while model.fast_free_bytes() < len {
                let Some((_, ds, dl)) = demote.next() else {
                    break;
                };
                budget -= model.migrate(ds, dl, Tier::Slow, dl, now_ms) as f64;
            }
            if model.fast_free_bytes() < len {
                // `demote_node`: demotion could not make room for the slow tier's hot pages, so
                // the warm pages become candidates from the next period on; the other hot pages
                // are still tried (`promote_page_list` migrates them one by one).
                self.warm_bin = hot_bin;
                continue;
            }
            budget -= model.migrate(start, len, Tier::Fast, len, now_ms) as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        PolicyName,
        model::PresetName,
        run::{FastSize, SimConfig},
        simulate,
        workload::{GenSpec, Workload},
    };

    /// First touch fills the fast tier with huge pages the hot set does not use. MEMTIS's warm
    /// threshold starts at 1, so never-sampled fast pages are demotable from the first
    /// adaptation, and the hot base pages of the huge pages it splits rank by samples per byte
    /// with the huge pages (512 per sample, `update_base_page`). With the warm threshold one
    /// bin under the hot one and base pages ranked by raw counts, the model moved nothing here
    /// (hit ratio 0.090, no migration's).
    #[test]
    fn never_sampled_first_touch_pages_give_way_to_the_hot_set() {
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = FastSize::Ratio(0.1);
        let spec = GenSpec {
            workload: Workload::GupsHotset,
            footprint: 64 << 20,
            records: 1_000_000,
            seed: 42,
        };
        let none = simulate(&spec, PolicyName::NoMigration, &cfg).unwrap();
        let memtis = simulate(&spec, PolicyName::Memtis, &cfg).unwrap();
        assert!(memtis.promoted_bytes > 0, "{memtis:?}");
        assert!(
            memtis.fast_hit_ratio > 1.5 * none.fast_hit_ratio,
            "memtis {} vs no migration {}",
            memtis.fast_hit_ratio,
            none.fast_hit_ratio
        );
    }
}
