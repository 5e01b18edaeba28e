//! What a target's epoch saw, by tier: the sampled accesses (the fast-tier hit ratio) and the hot
//! set (Rainbow's 70 % cover), from per-access samples or from DAMON's regions.

use std::collections::BTreeMap;

use memtide_core::{
    engine::{DamonObservation, Sample},
    rng::SplitMix64,
    units::PAGE_SIZE,
};
use memtide_host::targets::placement::TierPlacement;

/// Sampled accesses an epoch keeps for the hit ratio and the hot set, at most.
pub(super) const MAX_SAMPLED_PAGES: usize = 1 << 16;

/// What a target saw between two epochs.
#[derive(Debug)]
pub(super) struct EpochInput {
    /// Sampled accesses (per-access sources): a uniform sample of the epoch's, at most
    /// [`MAX_SAMPLED_PAGES`] of them ([`Self::keep`]).
    pub(super) pages: Vec<Sample>,
    /// Samples offered to [`Self::keep`] this epoch.
    offered: u64,
    /// Chooses what the reservoir keeps; seeded, so a replay keeps the same samples.
    rng: SplitMix64,
    /// The latest DAMON report per region start (DAMON).
    pub(super) regions: BTreeMap<u64, DamonObservation>,
}

impl Default for EpochInput {
    fn default() -> Self {
        Self {
            pages: Vec::new(),
            offered: 0,
            rng: SplitMix64::new(0x006d_656d_7469_6465),
            regions: BTreeMap::new(),
        }
    }
}

impl EpochInput {
    /// Offers one sample: every sample of the epoch is kept with the same probability (Vitter's
    /// algorithm R), so at a million samples a second the hit ratio covers the whole epoch, not
    /// its first 65 ms.
    pub(super) fn keep(&mut self, sampled: Sample) {
        self.offered += 1;
        if self.pages.len() < MAX_SAMPLED_PAGES {
            self.pages.push(sampled);
            return;
        }
        let slot = self.rng.below(self.offered);
        if let Some(kept) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.pages.get_mut(i))
        {
            *kept = sampled;
        }
    }

    /// Nothing sampled and no region reported since the last epoch.
    pub(super) fn is_empty(&self) -> bool {
        self.pages.is_empty() && self.regions.is_empty()
    }

    /// Empties the input for the next epoch, keeping its buffers.
    pub(super) fn clear(&mut self) {
        self.pages.clear();
        self.offered = 0;
        self.regions.clear();
    }
}

/// The smallest set of distinct pages, hottest first, covering `coverage` of the accesses the
/// epoch's samples stand for (Rainbow's hot-set definition), as page addresses.
pub(super) fn sampled_hot_set(sampled: &[Sample], coverage: f64) -> Vec<u64> {
    let mut pages: Vec<(u64, u64)> = sampled
        .iter()
        .map(|s| (s.addr & !(PAGE_SIZE - 1), u64::from(s.weight)))
        .collect();
    pages.sort_unstable();
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for (page, weight) in pages {
        match counts.last_mut() {
            Some((last, count)) if *last == page => *count += weight,
            _ => counts.push((page, weight)),
        }
    }
    let total: u64 = counts.iter().map(|(_, count)| count).sum();
    counts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let goal = share_of(total, coverage, f64::ceil);
    let mut covered = 0;
    counts
        .into_iter()
        .take_while(|(_, count)| {
            let take = covered < goal;
            covered += count;
            take
        })
        .map(|(page, _)| page)
        .collect()
}

/// Sampled accesses and the hot set, by the tier their pages are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TierView {
    pub(super) fast_accesses: u64,
    pub(super) slow_accesses: u64,
    pub(super) hot_fast_bytes: u64,
    pub(super) hot_slow_bytes: u64,
}

/// Accesses by tier, each sample weighted by the accesses it stands for (its period).
pub(super) fn sample_view(
    sampled: &[Sample],
    placement: &TierPlacement,
    coverage: f64,
) -> TierView {
    let mut view = TierView::default();
    for s in sampled {
        match placement.is_fast(s.addr & !(PAGE_SIZE - 1)) {
            Some(true) => view.fast_accesses += u64::from(s.weight),
            Some(false) => view.slow_accesses += u64::from(s.weight),
            None => {}
        }
    }
    for page in sampled_hot_set(sampled, coverage) {
        match placement.is_fast(page) {
            Some(false) => view.hot_slow_bytes += PAGE_SIZE,
            // Not resident any more counts where it was sampled: fast is the optimistic guess
            // only when the page is known fast; unknown pages are left out.
            Some(true) => view.hot_fast_bytes += PAGE_SIZE,
            None => {}
        }
    }
    view
}

/// DAMON reports regions, not pages: each region's accesses (`nr_accesses` × pages) are split
/// by the share of its resident pages on each tier (checked on up to 256 pages per region),
/// and the hot set is the smallest set of regions, hottest first, covering `coverage` of all
/// accesses.
pub(super) fn damon_view<'a>(
    regions: impl Iterator<Item = &'a DamonObservation>,
    placement: &TierPlacement,
    coverage: f64,
) -> TierView {
    let mut weighted: Vec<(u32, u64, u64, f64)> = Vec::new();
    for region in regions {
        let pages = region.end.saturating_sub(region.start) / PAGE_SIZE;
        if pages == 0 {
            continue;
        }
        let step = (pages / 256).max(1);
        let (mut fast, mut resident) = (0u64, 0u64);
        let mut page = 0;
        while page < pages {
            match placement.is_fast(region.start + page * PAGE_SIZE) {
                Some(true) => {
                    fast += 1;
                    resident += 1;
                }
                Some(false) => resident += 1,
                None => {}
            }
            page += step;
        }
        if resident == 0 {
            continue;
        }
        #[expect(clippy::cast_precision_loss, reason = "a share of page counts")]
        let fast_share = fast as f64 / resident as f64;
        weighted.push((region.nr_accesses, region.start, pages, fast_share));
    }
    let mut view = TierView::default();
    let mut total = 0u64;
    for &(accesses, _, pages, share) in &weighted {
        let weight = u64::from(accesses) * pages;
        total += weight;
        let (fast, slow) = split_by_share(weight, share);
        view.fast_accesses += fast;
        view.slow_accesses += slow;
    }
    weighted.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let goal = share_of(total, coverage, f64::ceil);
    let mut covered = 0u64;
    for (accesses, _, pages, share) in weighted {
        if covered >= goal || accesses == 0 {
            break;
        }
        covered += u64::from(accesses) * pages;
        let (fast, slow) = split_by_share(pages * PAGE_SIZE, share);
        view.hot_fast_bytes += fast;
        view.hot_slow_bytes += slow;
    }
    view
}

/// `share` (in [0, 1]) of `amount` accesses or bytes, made a whole count by `whole`
/// (`f64::ceil` for a hot set's goal, `f64::round` for a split between the tiers).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "a share of a count"
)]
fn share_of(amount: u64, share: f64, whole: fn(f64) -> f64) -> u64 {
    whole(amount as f64 * share) as u64
}

/// `amount` split by a fast share in [0, 1]: (fast part, slow part), rounded to whole units.
fn split_by_share(amount: u64, share: f64) -> (u64, u64) {
    let fast = share_of(amount, share, f64::round);
    (fast, amount - fast.min(amount))
}

/// The epoch's accesses and hot set by tier, from whichever kind of input the source gave.
pub(super) fn tier_view(input: &EpochInput, placement: &TierPlacement, coverage: f64) -> TierView {
    if input.regions.is_empty() {
        sample_view(&input.pages, placement, coverage)
    } else {
        damon_view(input.regions.values(), placement, coverage)
    }
}

/// Whether a cached placement still describes most of the pages sampled this epoch. Pages it
/// does not know were absent at the query (discarded, not yet faulted in, newly mapped): a view
/// that misses them would report no hot bytes until the cache expires.
pub(super) fn knows_sampled_pages(placement: &TierPlacement, input: &EpochInput) -> bool {
    const CHECKED: usize = 256;
    let checked = input.pages.iter().take(CHECKED);
    let (known, total) = checked.fold((0usize, 0usize), |(known, total), sampled| {
        (
            known + usize::from(placement.node_of(sampled.addr & !(PAGE_SIZE - 1)).is_some()),
            total + 1,
        )
    });
    known * 2 >= total
}
