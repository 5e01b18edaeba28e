//! Which of a target's pages an epoch asks the kernel about (`move_pages(2)` with no nodes:
//! where each page is).
//!
//! Asking about every page is a page-table lookup per 4 KiB of the target's mappings: seconds
//! at hundreds of GiB, and on a sparse 1 TiB mapping mostly lookups of holes. So the cost of an
//! epoch's query follows what the planner and the hit ratio can use, not the target's size,
//! in this order, within [`QUERY_BUDGET_PAGES`]:
//! 1. the stage-2 superpages, whole: the planner promotes only from them, and needs where each
//!    of their pages is (at most `top_n_max` superpages);
//! 2. the epoch's sampled pages, one page each: the hit ratio. A superpage sampled once is
//!    not asked about whole, or a million samples spread over a TiB would walk 16 GiB;
//! 3. the next [`SWEEP_PAGES`] of a sweep over the migratable mappings: data that is in the
//!    fast tier but was never sampled is the coldest of all, and only a walk finds it. The
//!    sweep goes round the whole target over successive epochs, however large it is;
//! 4. up to [`SWEEP_PAGES`] of the other superpages the engine tracks (sampled victims),
//!    whole, going on each epoch from where the last stopped so that they are all covered.
//!
//! Each superpage is clipped to the migratable mappings it overlaps; what is asked about is
//! returned as sorted, disjoint ranges.

use std::collections::BTreeSet;

use memtide_core::units::{PAGE_SIZE, SUPERPAGE_SHIFT, SUPERPAGE_SIZE};

/// Pages asked about per epoch at most (16 GiB): a bound on one epoch's page-table walk
/// whatever the engine's configuration (the parts above stay well under it with the defaults:
/// 1,000 stage-2 superpages, 65,536 sampled pages and two 1 GiB stretches are 4.3 GiB). It
/// limits how much is looked at per epoch, not which part of the target can be.
pub(super) const QUERY_BUDGET_PAGES: u64 = 4 << 20;
/// Pages the sweep covers per epoch (1 GiB): a 1 TiB target is swept in about a thousand
/// epochs, a 16 GiB one in sixteen.
pub(super) const SWEEP_PAGES: u64 = 256 << 10;

/// Where the sweep over a target's mappings, and the round of its tracked superpages, go on
/// from at the next epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sweep {
    /// Superpage number to start from.
    next: u64,
    /// Tracked superpage number to start from.
    tracked_next: u64,
}

/// The migratable mappings of a target as sorted, disjoint `[start, end)` ranges.
#[derive(Clone, Debug, Default)]
pub(super) struct Mappings(Vec<(u64, u64)>);

impl Mappings {
    pub(super) fn new(mut ranges: Vec<(u64, u64)>) -> Self {
        ranges.retain(|(start, end)| start < end);
        ranges.sort_unstable();
        Self(ranges)
    }

    /// Whether `addr` lies inside a mapping.
    fn contains(&self, addr: u64) -> bool {
        let i = self.0.partition_point(|&(_, end)| end <= addr);
        self.0.get(i).is_some_and(|&(start, _)| start <= addr)
    }

    /// The parts of superpage `sp` inside a mapping.
    fn clip(&self, sp: u64, visit: &mut impl FnMut(u64, u64)) {
        let (lo, hi) = (sp << SUPERPAGE_SHIFT, (sp + 1) << SUPERPAGE_SHIFT);
        let first = self.0.partition_point(|&(_, end)| end <= lo);
        for &(start, end) in self.0[first..].iter().take_while(|(start, _)| *start < hi) {
            visit(start.max(lo), end.min(hi));
        }
    }

    /// Superpage numbers that overlap a mapping, from `from` on, then wrapping round to the
    /// first mapping (the part of the mapping holding `from` below it is left to the next
    /// round). Lazy: a sweep stretch costs what it covers, not the target's size.
    fn superpages_from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        let first = self
            .0
            .partition_point(|&(_, end)| (end - 1) >> SUPERPAGE_SHIFT < from);
        let (before, after) = self.0.split_at(first);
        let after = after.iter().map(move |&(start, end)| {
            (
                (start >> SUPERPAGE_SHIFT).max(from),
                (end - 1) >> SUPERPAGE_SHIFT,
            )
        });
        let before = before
            .iter()
            .map(|&(start, end)| (start >> SUPERPAGE_SHIFT, (end - 1) >> SUPERPAGE_SHIFT));
        // Adjacent mappings can share a superpage: keep the first time only.
        let mut last = None;
        after
            .chain(before)
            .flat_map(|(lo, hi)| lo..=hi)
            .filter(move |&sp| last.replace(sp) != Some(sp))
    }
}

/// Collects clipped superpages and pages in priority order until the budget is spent.
struct Collector<'a> {
    mappings: &'a Mappings,
    taken: BTreeSet<u64>,
    ranges: Vec<(u64, u64)>,
    pages: u64,
    budget: u64,
}

impl Collector<'_> {
    /// Adds superpage `sp` whole; false once the budget is spent.
    fn take(&mut self, sp: u64) -> bool {
        if self.pages >= self.budget {
            return false;
        }
        if self.taken.insert(sp) {
            let (ranges, pages) = (&mut self.ranges, &mut self.pages);
            self.mappings.clip(sp, &mut |start, end| {
                let (start, end) = (start & !(PAGE_SIZE - 1), end.next_multiple_of(PAGE_SIZE));
                *pages += (end - start) / PAGE_SIZE;
                ranges.push((start, end));
            });
        }
        true
    }

    /// Adds whole superpages from `superpages` until [`SWEEP_PAGES`] more pages (or the budget)
    /// are taken; returns the superpage to go on from next time, `None` when they ran out.
    fn take_stretch(&mut self, superpages: impl IntoIterator<Item = u64>) -> Option<u64> {
        let goal = self.pages.saturating_add(SWEEP_PAGES).min(self.budget);
        for sp in superpages {
            if self.pages >= goal {
                return Some(sp);
            }
            self.take(sp);
        }
        None
    }

    /// Adds the page at `addr` alone, unless its superpage is taken whole; false once the
    /// budget is spent.
    fn take_page(&mut self, addr: u64) -> bool {
        if self.pages >= self.budget {
            return false;
        }
        let page = addr & !(PAGE_SIZE - 1);
        if !self.taken.contains(&(page >> SUPERPAGE_SHIFT)) && self.mappings.contains(page) {
            self.ranges.push((page, page + PAGE_SIZE));
            self.pages += 1;
        }
        true
    }
}

/// The ranges to ask about this epoch, sorted, disjoint and page-aligned `[start, end)`:
/// `candidates` (stage-2 superpage starts) whole, `sampled` (addresses of the epoch's samples)
/// one page each, the sweep's next stretch, then a stretch of `tracked` (superpage starts the
/// engine holds) whole; advances `sweep`.
pub(super) fn query_ranges(
    mappings: &Mappings,
    candidates: impl IntoIterator<Item = u64>,
    sampled: impl IntoIterator<Item = u64>,
    tracked: impl IntoIterator<Item = u64>,
    sweep: &mut Sweep,
    budget_pages: u64,
) -> Vec<(u64, u64)> {
    let mut collect = Collector {
        mappings,
        taken: BTreeSet::new(),
        ranges: Vec::new(),
        pages: 0,
        budget: budget_pages,
    };
    for start in candidates {
        if !collect.take(start >> SUPERPAGE_SHIFT) {
            break;
        }
    }
    let mut sampled: Vec<u64> = sampled
        .into_iter()
        .map(|addr| addr & !(PAGE_SIZE - 1))
        .collect();
    sampled.sort_unstable();
    sampled.dedup();
    for page in sampled {
        if !collect.take_page(page) {
            break;
        }
    }
    // Swept to the end of the last mapping: start again from the first.
    sweep.next = collect
        .take_stretch(mappings.superpages_from(sweep.next))
        .unwrap_or(0);
    let mut tracked: Vec<u64> = tracked.into_iter().map(|a| a >> SUPERPAGE_SHIFT).collect();
    tracked.sort_unstable();
    let from = tracked.partition_point(|&sp| sp < sweep.tracked_next);
    let round = tracked[from..].iter().chain(&tracked[..from]).copied();
    sweep.tracked_next = collect.take_stretch(round).unwrap_or(0);
    merge(collect.ranges)
}

/// Sorts and joins touching ranges.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some((_, last_end)) if *last_end >= start => *last_end = (*last_end).max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

const _: () = assert!(SUPERPAGE_SIZE == 1 << SUPERPAGE_SHIFT);

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn pages(ranges: &[(u64, u64)]) -> u64 {
        ranges.iter().map(|(s, e)| (e - s) / PAGE_SIZE).sum()
    }

    fn covers(ranges: &[(u64, u64)], addr: u64) -> bool {
        ranges.iter().any(|&(s, e)| (s..e).contains(&addr))
    }

    #[test]
    fn samples_far_into_a_huge_mapping_are_asked_about_without_walking_it() {
        // 64 GiB of sparse memory, sampled only above 16 GiB: the query follows the samples.
        let base = 0x7f00_0000_0000;
        let mappings = Mappings::new(vec![(base, base + 64 * GIB)]);
        let sampled: Vec<u64> = (0..100)
            .map(|i| base + 20 * GIB + i * 4 * MIB + 4096)
            .collect();
        let mut sweep = Sweep::default();
        let q = query_ranges(
            &mappings,
            [],
            sampled.clone(),
            [],
            &mut sweep,
            QUERY_BUDGET_PAGES,
        );
        for &addr in &sampled {
            assert!(covers(&q, addr));
        }
        // 100 sampled pages and one sweep stretch, not 64 GiB, nor 100 whole superpages.
        assert_eq!(pages(&q), 100 + SWEEP_PAGES);
    }

    #[test]
    fn stage2_superpages_are_asked_about_whole_and_tracked_ones_a_stretch_at_a_time() {
        let base = 0x7f00_0000_0000;
        let mappings = Mappings::new(vec![(base, base + 64 * GIB)]);
        let candidate = base + 30 * GIB;
        // The sweep starts at the mapping's first superpage; put the tracked ones far from it.
        let tracked: Vec<u64> = (0..2048)
            .map(|i| base + 40 * GIB + i * SUPERPAGE_SIZE)
            .collect();
        let mut sweep = Sweep::default();
        let q = query_ranges(
            &mappings,
            [candidate],
            [candidate + 8192, base + 50 * GIB],
            tracked.clone(),
            &mut sweep,
            QUERY_BUDGET_PAGES,
        );
        assert!(covers(&q, candidate) && covers(&q, candidate + SUPERPAGE_SIZE - 1));
        assert!(covers(&q, base + 50 * GIB));
        // One stretch of the tracked superpages (1 GiB, 512 of them), then the rest later.
        let tracked_covered =
            |q: &[(u64, u64)]| tracked.iter().filter(|&&sp| covers(q, sp)).count();
        assert_eq!(tracked_covered(&q), 512);
        assert_eq!(pages(&q), 512 + 1 + SWEEP_PAGES + 512 * 512);
        let mut seen = tracked_covered(&q);
        for _ in 0..3 {
            let q = query_ranges(
                &mappings,
                [],
                [],
                tracked.clone(),
                &mut sweep,
                QUERY_BUDGET_PAGES,
            );
            seen += tracked_covered(&q);
        }
        assert!(seen >= tracked.len(), "{seen}");
    }

    #[test]
    fn the_sweep_goes_round_the_whole_target_over_epochs() {
        let a = 0x1000_0000;
        let b = 0x7f00_0000_0000;
        // Two mappings, 3 GiB in all, the first not superpage-aligned.
        let mappings = Mappings::new(vec![(b, b + 2 * GIB), (a + 4096, a + GIB + 4096)]);
        let mut sweep = Sweep::default();
        let mut seen: Vec<(u64, u64)> = Vec::new();
        // 1 GiB an epoch: a round in three.
        for _ in 0..3 {
            let q = query_ranges(&mappings, [], [], [], &mut sweep, QUERY_BUDGET_PAGES);
            assert!(pages(&q) <= SWEEP_PAGES + 512, "{}", pages(&q));
            seen.extend(q);
        }
        let seen = merge(seen);
        assert_eq!(seen, [(a + 4096, a + GIB + 4096), (b, b + 2 * GIB)]);
        // The next round starts from the first mapping again.
        let q = query_ranges(&mappings, [], [], [], &mut sweep, QUERY_BUDGET_PAGES);
        assert_eq!(q[0].0, a + 4096);
    }

    #[test]
    fn ranges_stay_inside_the_mappings_and_the_budget() {
        let base = 0x7f00_0000_0000;
        // A gap of 1 MiB inside one superpage between two mappings.
        let mappings = Mappings::new(vec![
            (base, base + MIB / 2),
            (base + 3 * MIB / 2, base + 4 * MIB),
        ]);
        let mut sweep = Sweep::default();
        let q = query_ranges(&mappings, [base], [], [], &mut sweep, QUERY_BUDGET_PAGES);
        assert_eq!(
            q,
            [(base, base + MIB / 2), (base + 3 * MIB / 2, base + 4 * MIB)]
        );
        // A sampled page in the gap is not asked about.
        let q = query_ranges(&mappings, [], [base + MIB], [], &mut sweep, 1);
        assert!(!covers(&q, base + MIB));
        // Candidates first; the budget stops the rest.
        let big = Mappings::new(vec![(base, base + 64 * GIB)]);
        let tracked: Vec<u64> = (0..10_000).map(|i| base + i * SUPERPAGE_SIZE).collect();
        let q = query_ranges(&big, [base + 40 * GIB], [], tracked, &mut sweep, 4096);
        assert!(covers(&q, base + 40 * GIB));
        assert!(pages(&q) <= 4096 + 512, "{}", pages(&q));
    }
}
