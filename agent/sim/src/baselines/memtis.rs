//! MEMTIS-like (anchors.md §1.5; Lee et al., SOSP'23, `cosmoss-jigu/memtis`).
//!
//! What it models:
//! - PEBS samples counted per 4 KiB page and per huge page (the huge page's count is the sum of
//!   its subpages'). An access-frequency **histogram** (log2 bins) weighted by pages gives a
//!   **dynamic hot threshold**: the lowest bin whose pages, together with all hotter ones, fit
//!   in the fast tier; the warm threshold is one bin below. Recomputed every adaptation period.
//! - **Cooling**: all counts are halved every cooling period.
//! - **Skewness-aware huge-page split**: at each adaptation MEMTIS compares the hit ratio the
//!   fast tier would get with base pages (the hottest 4 KiB pages that fit) against the one with
//!   huge pages (the hottest 2 MiB pages that fit); while base pages win, it splits the most
//!   skewed huge pages — those whose top 512/γ² = 32 subpages (γ = 4, `htmm_gamma`) carry at
//!   least half their samples — up to 16 per adaptation, so only their hot 4 KiB pages are
//!   promoted and their cold ones can be demoted.
//! - `kmigraterd` every 500 ms: promote slow pages at or above the hot threshold (hottest first),
//!   making room by demoting fast pages below the warm threshold (coldest first); at most
//!   100 MB/s (`MAX_MIGRATION_RATE_IN_MBPS`).
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
use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE, Tier};

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
            period: Duration::from_millis(500),
            rate_bytes_per_s: 100e6,
            last: Duration::ZERO,
            need_adapt: false,
        }
    }
}

fn bin(count: u32) -> u32 {
    if count == 0 {
        0
    } else {
        32 - count.leading_zeros()
    }
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

    fn adapt(&mut self, model: &TierModel) {
        let mut hist = [0u64; 34];
        for (_, page, count) in self.units(model) {
            hist[bin(count) as usize] += if page.is_some() { 1 } else { SUBPAGES as u64 };
        }
        let cap = model.fast_capacity_bytes() / PAGE_SIZE;
        let mut sum = 0;
        let mut thr = 33;
        for b in (1..34).rev() {
            if sum + hist[b] > cap {
                break;
            }
            sum += hist[b];
            thr = b as u32;
        }
        self.hot_bin = thr.max(1);
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
            let p = ((s.addr / PAGE_SIZE) % 512) as usize;
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

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        if self.need_adapt {
            self.need_adapt = false;
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
        if clock.now < self.last + self.period {
            return;
        }
        let mut budget = (clock.now - self.last).as_secs_f64() * self.rate_bytes_per_s;
        self.last = clock.now;
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        let hot_bin = self.hot_bin;
        let mut promote = Vec::new();
        let mut demote = Vec::new();
        for (idx, page, count) in self.units(model) {
            let s = model.superpage(idx);
            let fast = match page {
                None => s.fast_pages() == 512,
                Some(p) => s.is_fast(p),
            };
            let b = bin(count);
            let (start, len) = match page {
                None => (s.sp * SUPERPAGE_SIZE, SUPERPAGE_SIZE),
                Some(p) => (s.sp * SUPERPAGE_SIZE + p as u64 * PAGE_SIZE, PAGE_SIZE),
            };
            if !fast && b >= hot_bin && count > 0 {
                promote.push((count, start, len));
            } else if fast && b + 1 < hot_bin {
                demote.push((count, start, len));
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
                break;
            }
            budget -= model.migrate(start, len, Tier::Fast, len, now_ms) as f64;
        }
    }
}
