//! Which node each page of a target is on: batched move_pages queries (no `nodes` argument, so
//! nothing moves). This is the placement view the engine, the planner and the hit-ratio metric
//! read, and what the executor re-queries to verify its moves.

use std::collections::{BTreeMap, BTreeSet};

use memtide_core::units::{PAGE_SIZE, SUPERPAGE_SIZE};

use super::{Target, TargetError};
use crate::sys::mempolicy::{self, PageError, PageStatus, Pid};
/// Pages per move_pages query call: large enough that the system call cost is amortised,
/// small enough to keep the kernel's per-call work (and our status vectors) modest.
pub const QUERY_BATCH: usize = 1024;
/// Ranges of at least this many pages are read in pagemap before they are queried: one read
/// answers for all of them, and on a sparse mapping most are holes. Shorter ones (single
/// sampled pages, mostly present) go to move_pages directly rather than cost a read each.
pub const PRESENCE_MIN_PAGES: u64 = 64;

fn as_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Queries the node of each 4 KiB page in `[start, start + len)` of `target`, `batch` pages per
/// call. `start` is rounded down and the end up to whole pages.
pub fn query_range(
    target: &Target,
    start: u64,
    len: u64,
    batch: usize,
) -> Result<Vec<PageStatus>, TargetError> {
    let first = start & !(PAGE_SIZE - 1);
    let end = (start + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let pages: Vec<usize> = (first..end)
        .step_by(PAGE_SIZE as usize)
        .map(|a| usize::try_from(a).unwrap_or(usize::MAX))
        .collect();
    query_pages(target, &pages, batch)
}

/// Queries the node of each page in `pages` (page-aligned addresses), `batch` per call.
pub fn query_pages(
    target: &Target,
    pages: &[usize],
    batch: usize,
) -> Result<Vec<PageStatus>, TargetError> {
    let mut out = Vec::with_capacity(pages.len());
    let mut status = Vec::new();
    for chunk in pages.chunks(batch.max(1)) {
        target.with_pid(|pid| {
            mempolicy::query_pages(Pid::Other(pid), chunk, &mut status)
                .map_err(|e| TargetError::syscall(pid, "move_pages(query)", e))
        })?;
        out.extend_from_slice(&status);
    }
    Ok(out)
}

/// Pages per node (and per error) in a list of statuses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCounts {
    pub per_node: BTreeMap<u32, u64>,
    pub per_error: BTreeMap<PageError, u64>,
}

impl NodeCounts {
    #[must_use]
    pub fn of(statuses: &[PageStatus]) -> Self {
        let mut counts = Self::default();
        // Run-length first: pages of a range mostly share a node, so the maps see one update
        // per run instead of one per page.
        for run in statuses.chunk_by(|a, b| a == b) {
            let n = run.len() as u64;
            match run[0] {
                PageStatus::Node(node) => *counts.per_node.entry(node).or_insert(0) += n,
                PageStatus::Error(e) => *counts.per_error.entry(e).or_insert(0) += n,
            }
        }
        counts
    }

    #[must_use]
    pub fn on(&self, node: u32) -> u64 {
        self.per_node.get(&node).copied().unwrap_or(0)
    }

    #[must_use]
    pub fn resident(&self) -> u64 {
        self.per_node.values().sum()
    }
}

/// A snapshot of where a target's pages are, by tier: the planner's `PlacementView`
/// (implemented in `exec::plan`). Built from move_pages queries of the ranges the caller cares
/// about (mapped, migratable).
#[derive(Clone, Debug, Default)]
pub struct TierPlacement {
    /// Non-overlapping ranges by start: one status per 4 KiB page.
    ranges: BTreeMap<u64, Vec<PageStatus>>,
    fast_nodes: Vec<u32>,
    /// THP maps every anonymous superpage huge on this host (`always`): the planner may
    /// presume a superpage wholly on one tier is a huge page. Otherwise (`madvise`, `never`)
    /// it presumes none is, and charges no split for moving part of one. Only where
    /// `huge_scanned` does not answer.
    presume_huge: bool,
    /// Ranges whose huge pages were read (`PAGEMAP_SCAN`), `start → end`.
    huge_scanned: BTreeMap<u64, u64>,
    /// Superpages (2 MiB-aligned addresses) a huge page maps, within `huge_scanned`.
    huge_superpages: BTreeSet<u64>,
}

impl TierPlacement {
    /// An empty view; nodes in `fast_nodes` count as fast, every other node as slow.
    #[must_use]
    pub fn new(fast_nodes: Vec<u32>) -> Self {
        Self {
            ranges: BTreeMap::new(),
            fast_nodes,
            presume_huge: false,
            huge_scanned: BTreeMap::new(),
            huge_superpages: BTreeSet::new(),
        }
    }

    /// Says whether THP maps every superpage huge on this host (see [`Self::presumes_huge`]).
    #[must_use]
    pub fn with_huge_presumed(mut self, presume: bool) -> Self {
        self.presume_huge = presume;
        self
    }

    /// Whether a superpage wholly on one tier may be presumed a huge page: THP `always`.
    #[must_use]
    pub fn presumes_huge(&self) -> bool {
        self.presume_huge
    }

    /// Records that huge pages map exactly the whole superpages of `huge` within `[start,
    /// end)`, as read from the kernel.
    pub fn insert_huge(&mut self, start: u64, end: u64, huge: &[(u64, u64)]) {
        self.huge_scanned.insert(start, end);
        for &(from, to) in huge {
            let first = from.next_multiple_of(SUPERPAGE_SIZE);
            self.huge_superpages.extend(
                (first..to.saturating_sub(SUPERPAGE_SIZE - 1)).step_by(SUPERPAGE_SIZE as usize),
            );
        }
    }

    /// Whether a huge page maps the superpage at `superpage`, where that was read (`None`:
    /// not read, see [`Self::presumes_huge`]).
    #[must_use]
    pub fn huge_read(&self, superpage: u64) -> Option<bool> {
        let (_, &end) = self.huge_scanned.range(..=superpage).next_back()?;
        (superpage + SUPERPAGE_SIZE <= end).then(|| self.huge_superpages.contains(&superpage))
    }

    /// The nodes that count as fast.
    #[must_use]
    pub fn fast_nodes(&self) -> &[u32] {
        &self.fast_nodes
    }

    /// Adds the statuses of the pages from `start` (page-aligned) on.
    pub fn insert(&mut self, start: u64, statuses: Vec<PageStatus>) {
        self.ranges.insert(start, statuses);
    }

    /// Queries every page of `ranges` (page-aligned `[start, end)`, disjoint) and adds them,
    /// [`QUERY_BATCH`] pages per call whatever the ranges' sizes: ten thousand single sampled
    /// pages cost ten calls, not ten thousand. The pages of ranges of [`PRESENCE_MIN_PAGES`]
    /// or more that pagemap says are not present are not asked about: they read as not
    /// present, as move_pages would have said. For ranges of a superpage or more it also reads
    /// which superpages huge pages map (see [`Self::huge_read`]). Returns the number of pages
    /// asked about.
    pub fn query_all(
        &mut self,
        target: &Target,
        ranges: &[(u64, u64)],
    ) -> Result<u64, TargetError> {
        let long = |&(start, end): &(u64, u64)| (end - start) / PAGE_SIZE >= PRESENCE_MIN_PAGES;
        // Unreadable (an older kernel, a stricter LSM): ask about every page, as before.
        let mut pagemap = ranges
            .iter()
            .any(long)
            .then(|| target.pagemap().ok())
            .flatten();
        let mut pages: Vec<usize> = Vec::new();
        let mut present_of_range = Vec::with_capacity(ranges.len());
        let mut huge = Vec::new();
        for range @ &(start, end) in ranges {
            // Which of its superpages huge pages map: moving part of one splits it.
            if let Some(pagemap) = pagemap.as_ref().filter(|_| end - start >= SUPERPAGE_SIZE) {
                huge.clear();
                if pagemap.huge_ranges(start, end, &mut huge) {
                    self.insert_huge(start, end, &huge);
                }
            }
            let addrs = (start..end).step_by(PAGE_SIZE as usize);
            let present = pagemap
                .as_mut()
                .filter(|_| long(range))
                .and_then(|pagemap| {
                    let mut present = Vec::new();
                    pagemap.present(start, end, &mut present).ok()?;
                    Some(present)
                });
            match &present {
                Some(present) => pages.extend(
                    addrs
                        .zip(present)
                        .filter(|&(_, &present)| present)
                        .map(|(addr, _)| as_usize(addr)),
                ),
                None => pages.extend(addrs.map(as_usize)),
            }
            present_of_range.push(present);
        }
        // A process that exited after pagemap was opened reads as all holes: say it exited
        // rather than return an empty placement (move_pages, when asked, says so itself).
        target.check_alive()?;
        let mut statuses = query_pages(target, &pages, QUERY_BATCH)?.into_iter();
        let not_present = PageStatus::Error(PageError::NotPresent);
        for (&(start, end), present) in ranges.iter().zip(present_of_range) {
            let range = match present {
                Some(present) => present
                    .into_iter()
                    .map(|present| match present {
                        true => statuses.next().unwrap_or(not_present),
                        false => not_present,
                    })
                    .collect(),
                None => statuses
                    .by_ref()
                    .take(as_usize((end - start) / PAGE_SIZE))
                    .collect(),
            };
            self.insert(start, range);
        }
        Ok(pages.len() as u64)
    }

    /// A copy in which the pages of `ranges` (`[start, end)`) read as not mapped, or `None`
    /// when no queried page lies in them: what a planner that must leave those ranges alone
    /// may see.
    #[must_use]
    pub fn without(&self, ranges: &[(u64, u64)]) -> Option<Self> {
        // The queried pages inside `[lo, hi)`, as (range start, first index, end index).
        let pieces = |lo: u64, hi: u64| {
            let first = self
                .ranges
                .range(..=lo)
                .next_back()
                .map_or(lo, |(&start, _)| start);
            self.ranges
                .range(first..hi)
                .filter_map(move |(&start, statuses)| {
                    let end = start + statuses.len() as u64 * PAGE_SIZE;
                    let (from, to) = (lo.max(start), hi.min(end));
                    let index = |addr: u64| {
                        usize::try_from((addr - start) / PAGE_SIZE).unwrap_or(usize::MAX)
                    };
                    (from < to).then(|| (start, index(from), index(to.next_multiple_of(PAGE_SIZE))))
                })
        };
        let found: Vec<(u64, usize, usize)> =
            ranges.iter().flat_map(|&(lo, hi)| pieces(lo, hi)).collect();
        if found.is_empty() {
            return None;
        }
        let mut masked = self.clone();
        for (start, from, to) in found {
            if let Some(statuses) = masked.ranges.get_mut(&start) {
                let to = to.min(statuses.len());
                for status in &mut statuses[from.min(to)..to] {
                    *status = PageStatus::Error(PageError::Fault);
                }
            }
        }
        Some(masked)
    }

    fn status(&self, page: u64) -> Option<PageStatus> {
        let (&start, statuses) = self.ranges.range(..=page).next_back()?;
        let index = usize::try_from((page - start) / PAGE_SIZE).ok()?;
        statuses.get(index).copied()
    }

    /// Calls `visit(index, status)` for each queried page among the `pages` pages from
    /// `start` (page-aligned), `index` counting from `start`: one map lookup per range rather
    /// than one per page, for the planner's 512-page residency questions.
    pub fn visit_pages(&self, start: u64, pages: usize, visit: &mut dyn FnMut(usize, PageStatus)) {
        let end = start.saturating_add(pages as u64 * PAGE_SIZE);
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map_or(start, |(&range_start, _)| range_start);
        for (&range_start, statuses) in self.ranges.range(first..end) {
            let range_end = range_start + statuses.len() as u64 * PAGE_SIZE;
            let (lo, hi) = (start.max(range_start), end.min(range_end));
            let mut addr = lo;
            while addr < hi {
                let index = usize::try_from((addr - range_start) / PAGE_SIZE).unwrap_or(usize::MAX);
                if let Some(&status) = statuses.get(index) {
                    visit(
                        usize::try_from((addr - start) / PAGE_SIZE).unwrap_or(usize::MAX),
                        status,
                    );
                }
                addr += PAGE_SIZE;
            }
        }
    }

    /// The node of the page at `page`, if known and resident.
    #[must_use]
    pub fn node_of(&self, page: u64) -> Option<u32> {
        self.status(page).and_then(PageStatus::node)
    }

    /// Whether the page at `page` is in the fast tier; `None` when not resident or not queried.
    #[must_use]
    pub fn is_fast(&self, page: u64) -> Option<bool> {
        self.node_of(page)
            .map(|node| self.fast_nodes.contains(&node))
    }

    /// Calls `visit(start, len)` for each run of fast-resident pages, in address order.
    pub fn for_each_fast_run(&self, visit: &mut dyn FnMut(u64, u64)) {
        for (&start, statuses) in &self.ranges {
            let mut run: Option<u64> = None;
            for (i, status) in statuses.iter().enumerate() {
                let addr = start + i as u64 * PAGE_SIZE;
                let fast = status.node().is_some_and(|n| self.fast_nodes.contains(&n));
                match (fast, run) {
                    (true, None) => run = Some(addr),
                    (false, Some(s)) => {
                        visit(s, addr - s);
                        run = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = run {
                visit(s, start + statuses.len() as u64 * PAGE_SIZE - s);
            }
        }
    }

    /// The ranges queried, `[start, end)` in address order.
    pub fn queried(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .iter()
            .map(|(&start, statuses)| (start, start + statuses.len() as u64 * PAGE_SIZE))
    }

    /// Pages per node over everything queried.
    #[must_use]
    pub fn counts(&self) -> NodeCounts {
        let mut counts = NodeCounts::default();
        for statuses in self.ranges.values() {
            let c = NodeCounts::of(statuses);
            for (n, v) in c.per_node {
                *counts.per_node.entry(n).or_insert(0) += v;
            }
            for (e, v) in c.per_error {
                *counts.per_error.entry(e).or_insert(0) += v;
            }
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        sysfs::HostRoot,
        test_child::{huge_child, python_child},
    };

    /// A python child with 64 MiB of anonymous memory, one page touched in each MiB; returns
    /// the child and the mapping's start.
    fn sparse_child() -> Option<(std::process::Child, u64)> {
        python_child(
            "MADV_NOHUGEPAGE",
            "for i in range(64):\n    m[i << 20] = 1\n",
        )
    }

    #[test]
    fn a_sparse_range_asks_move_pages_about_its_present_pages_only() {
        let Some((mut child, start)) = sparse_child() else {
            return;
        };
        let target = Target::open(&HostRoot::default(), child.id()).unwrap();
        let (end, single) = (start + (64 << 20), start + (3 << 20));
        let mut view = TierPlacement::new(vec![0]);
        // The whole mapping, and one touched page on its own (too short to read pagemap for).
        let asked = view
            .query_all(
                &target,
                &[
                    (start, start + SUPERPAGE_SIZE),
                    (single, single + PAGE_SIZE),
                ],
            )
            .unwrap();
        let mut whole = TierPlacement::new(vec![0]);
        let asked_whole = whole.query_all(&target, &[(start, end)]);
        let _ = child.kill();
        let _ = child.wait();
        // Two touched pages of the first 512 (no huge pages: the child said so), and the one.
        assert_eq!(asked, 3);
        assert_eq!(asked_whole.unwrap(), 64);
        assert!(view.node_of(start).is_some() && view.node_of(start + (1 << 20)).is_some());
        assert!(view.node_of(single).is_some());
        assert!(whole.node_of(start + (63 << 20)).is_some());
        for untouched in [start + PAGE_SIZE, end - PAGE_SIZE] {
            assert_eq!(
                whole.status(untouched),
                Some(PageStatus::Error(PageError::NotPresent))
            );
        }
    }

    #[test]
    fn a_query_reads_which_superpages_huge_pages_map() {
        let Some((mut child, start, anon_huge)) = huge_child() else {
            return;
        };
        let target = Target::open(&HostRoot::default(), child.id()).unwrap();
        let end = start + (64 << 20);
        let mut view = TierPlacement::new(vec![0]);
        let queried = view.query_all(&target, &[(start, end)]);
        let _ = child.kill();
        let _ = child.wait();
        queried.unwrap();
        let superpages: Vec<u64> = (start.next_multiple_of(SUPERPAGE_SIZE)..end)
            .step_by(SUPERPAGE_SIZE as usize)
            .filter(|sp| sp + SUPERPAGE_SIZE <= end)
            .collect();
        let answers: Vec<Option<bool>> = superpages.iter().map(|&sp| view.huge_read(sp)).collect();
        if answers.iter().all(Option::is_none) {
            println!("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7+)");
            return;
        }
        assert!(answers.iter().all(Option::is_some), "{answers:?}");
        let huge = answers.iter().filter(|&&a| a == Some(true)).count() as u64;
        assert_eq!(huge * SUPERPAGE_SIZE, anon_huge, "{answers:?}");
        // Untouched superpages are no huge pages.
        let untouched = superpages
            .iter()
            .position(|&sp| sp >= start + (8 << 20))
            .unwrap();
        assert!(
            answers[untouched..].iter().all(|&a| a == Some(false)),
            "{answers:?}"
        );
        if anon_huge == 0 {
            println!(
                "no THP was allocated for the child: only the agreement with smaps was checked"
            );
        }
    }

    #[test]
    fn ranges_left_alone_read_as_not_mapped_in_the_copy_only() {
        let mut view = TierPlacement::new(vec![0]);
        let n = PageStatus::Node;
        view.insert(0x10000, vec![n(0), n(1), n(1), n(0)]);
        assert!(
            view.without(&[(0x20000, 0x30000)]).is_none(),
            "no overlap, no copy"
        );
        let masked = view.without(&[(0x11000, 0x13000)]).expect("overlaps");
        assert_eq!(masked.is_fast(0x10000), Some(true));
        assert_eq!(
            (masked.is_fast(0x11000), masked.is_fast(0x12000)),
            (None, None)
        );
        assert_eq!(masked.is_fast(0x13000), Some(true));
        // The original still answers for the hit ratio.
        assert_eq!(view.is_fast(0x11000), Some(false));
    }

    #[test]
    fn tier_view_and_fast_ranges() {
        let mut view = TierPlacement::new(vec![0]);
        let n = PageStatus::Node;
        let missing = PageStatus::Error(PageError::NotPresent);
        view.insert(0x10000, vec![n(0), n(0), n(1), missing, n(0)]);
        view.insert(0x40000, vec![n(1), n(0)]);
        assert_eq!(view.is_fast(0x10000), Some(true));
        assert_eq!(view.is_fast(0x12000), Some(false));
        assert_eq!(view.is_fast(0x13000), None);
        assert_eq!(view.is_fast(0x15000), None, "past the range");
        assert_eq!(view.is_fast(0x0), None, "before any range");
        assert_eq!(view.node_of(0x12000), Some(1));
        let mut fast = Vec::new();
        view.for_each_fast_run(&mut |s, l| fast.push((s, l)));
        assert_eq!(
            fast,
            vec![(0x10000, 0x2000), (0x14000, 0x1000), (0x41000, 0x1000)]
        );
        let counts = view.counts();
        assert_eq!((counts.on(0), counts.on(1), counts.resident()), (4, 2, 6));
        // A window across both ranges and the gap between them, page by page.
        let mut seen = Vec::new();
        view.visit_pages(0x13000, 0x2f, &mut |i, status| seen.push((i, status)));
        assert_eq!(
            seen,
            vec![(0, missing), (1, n(0)), (0x2d, n(1)), (0x2e, n(0))]
        );
        for page in (0x0..0x50000).step_by(0x1000) {
            let mut one = None;
            view.visit_pages(page, 1, &mut |_, status| one = Some(status));
            assert_eq!(
                one.and_then(PageStatus::node),
                view.node_of(page),
                "{page:#x}"
            );
        }
        assert_eq!(counts.per_error[&PageError::NotPresent], 1);
    }
}
