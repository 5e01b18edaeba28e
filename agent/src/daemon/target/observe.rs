//! Observe mode: what the agent would have moved, had it migrated. Each plan sees the real
//! placement with the moves of the plans before it laid over, so a range counts as "would move"
//! once, as a migrating agent moves it once, instead of at every epoch for as long as it stays
//! hot.

use std::collections::BTreeMap;

use memtide_core::{
    policy::PlacementView,
    units::{PAGE_SIZE, Residency, SUBPAGES, Tier},
};
use memtide_host::targets::placement::TierPlacement;

/// What observe mode assumes moved: the ranges its plans would have migrated, by the tier
/// they would now be on, non-overlapping and merged. Each plan sees the placement with these
/// applied, so a range is counted as "would move" once, as a migrating agent moves it once,
/// instead of at every epoch for as long as it stays hot.
#[derive(Debug, Default)]
pub(super) struct Assumed {
    /// start → (end, on the fast tier).
    pub(super) ranges: BTreeMap<u64, (u64, bool)>,
    /// Bytes the assumed moves took to the fast tier, less those they took from it.
    pub(super) net_promoted_bytes: i64,
}

impl Assumed {
    /// Records `[start, end)` as moved to the fast (or slow) tier, replacing what was assumed
    /// there before.
    pub(super) fn record(&mut self, start: u64, end: u64, fast: bool) {
        if start >= end {
            return;
        }
        // Cut what overlaps, keeping the parts outside [start, end).
        let overlapping: Vec<(u64, (u64, bool))> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(s, v)| (*s, *v))
            .collect();
        for (s, (e, f)) in overlapping {
            self.ranges.remove(&s);
            if s < start {
                self.ranges.insert(s, (start, f));
            }
            if e > end {
                self.ranges.insert(end, (e, f));
            }
        }
        let (mut start, mut end) = (start, end);
        // Merge with touching neighbours on the same tier.
        if let Some((&s, &(e, f))) = self.ranges.range(..start).next_back()
            && e == start
            && f == fast
        {
            self.ranges.remove(&s);
            start = s;
        }
        if let Some(&(e, f)) = self.ranges.get(&end)
            && f == fast
        {
            self.ranges.remove(&end);
            end = e;
        }
        self.ranges.insert(start, (end, fast));
    }

    /// The assumed ranges overlapping `[start, end)`, clipped to it: (start, end, fast).
    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u64, bool)> + '_ {
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map_or(start, |(&s, _)| s);
        self.ranges
            .range(first..end)
            .filter(move |(_, (e, _))| *e > start)
            .map(move |(&s, &(e, fast))| (s.max(start), e.min(end), fast))
    }
}

/// The placement observe mode plans against: the real one (the query, untouched, so the
/// gauges and the cached query stay true), with the moves earlier plans would have made laid
/// over its resident pages.
pub(super) struct AssumedView<'a> {
    pub(super) real: &'a TierPlacement,
    pub(super) assumed: &'a Assumed,
}

impl PlacementView for AssumedView<'_> {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        let real = self.real.tier_of(page)?;
        Some(
            match self.assumed.overlapping(page, page + PAGE_SIZE).next() {
                Some((_, _, true)) => Tier::Fast,
                Some((_, _, false)) => Tier::Slow,
                None => real,
            },
        )
    }

    fn residency(&self, superpage: u64) -> Residency {
        let mut residency = self.real.residency(superpage);
        let end = superpage + SUBPAGES as u64 * PAGE_SIZE;
        for (start, stop, fast) in self.assumed.overlapping(superpage, end) {
            let tier = if fast { Tier::Fast } else { Tier::Slow };
            let first = usize::try_from((start - superpage) / PAGE_SIZE).unwrap_or(SUBPAGES);
            let last = usize::try_from((stop - superpage).div_ceil(PAGE_SIZE)).unwrap_or(SUBPAGES);
            for page in first..last.min(SUBPAGES) {
                if residency.tier(page).is_some() {
                    residency.set(page, Some(tier));
                }
            }
        }
        residency
    }

    fn huge_mapped(&self, superpage: u64) -> Option<bool> {
        self.real.huge_mapped(superpage)
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        // Really fast runs without what is assumed demoted, plus the resident pages of what
        // is assumed promoted, merged in address order.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        self.real.for_each_fast_run(&mut |start, len| {
            let mut from = start;
            for (s, e, fast) in self.assumed.overlapping(start, start + len) {
                if !fast {
                    if s > from {
                        pieces.push((from, s));
                    }
                    from = e;
                }
            }
            if from < start + len {
                pieces.push((from, start + len));
            }
        });
        for (&start, &(end, fast)) in &self.assumed.ranges {
            if !fast {
                continue;
            }
            let pages = usize::try_from((end - start).div_ceil(PAGE_SIZE)).unwrap_or(usize::MAX);
            self.real.visit_pages(start, pages, &mut |index, status| {
                let page = start + index as u64 * PAGE_SIZE;
                if status.node().is_some() && self.real.is_fast(page) == Some(false) {
                    pieces.push((page, page + PAGE_SIZE));
                }
            });
        }
        pieces.sort_unstable();
        let mut current: Option<(u64, u64)> = None;
        for (start, end) in pieces {
            match current {
                Some((s, e)) if start <= e => current = Some((s, e.max(end))),
                Some((s, e)) => {
                    visit(s, e - s);
                    current = Some((start, end));
                }
                None => current = Some((start, end)),
            }
        }
        if let Some((s, e)) = current {
            visit(s, e - s);
        }
    }
}
