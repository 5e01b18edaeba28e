//! The migration executor: turns move requests into batched move_pages calls, safely.
//!
//! One [`Executor::execute`] call, for one target:
//! 1. pages left over from earlier calls (transient failures) go first;
//! 2. each request passes its direction's token bucket (promote and demote are limited
//!    separately; what does not fit is deferred and counted);
//! 3. requests below 2 MiB inside THP-backed mappings split their huge pages first (debugfs
//!    `split_huge_pages`), or count a fallback: the kernel then moves the whole huge page;
//! 4. 2 MiB requests inside THP-backed mappings move by the head page of each chunk (one huge
//!    page per entry), then the chunk is re-queried and anything left behind moves at 4 KiB;
//! 5. 4 KiB pages move `batch_pages` per call, never taking the destination below its high
//!    watermark plus a reserve; the pidfd is checked before every batch and an exit ends the
//!    call cleanly with the rest counted as aborted;
//! 6. pages reported on the destination are re-queried (a partially failed move_pages still
//!    reports the destination node for the failed pages); per-page failures are counted by
//!    reason, transient ones (`EBUSY`, `EAGAIN`, `ENOMEM`, verify mismatches) queued for retry;
//! 7. optionally, 2 MiB chunks fully promoted at 4 KiB are collapsed again (MADV_COLLAPSE);
//! 8. the time per moved page feeds an estimate the planner uses as its migration cost.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use memtide_config::ExecConfig;
use memtide_core::units::{Direction, PAGE_SIZE as PAGE, SUBPAGES};
use serde::Serialize;

use super::{
    ExecError, HugeRange,
    ratelimit::TokenBucket,
    thp::{HUGE_PAGE, SplitOutcome, huge_cover},
};
use crate::{
    sys::mempolicy::{MPOL_MF_MOVE_ALL, PageError, PageStatus},
    targets::TargetError,
};

const PAGES_PER_HUGE: u64 = SUBPAGES as u64;

/// One range to move to one node. `start` and `len` are multiples of `granularity`, which is a
/// multiple of 4 KiB (4 KiB, 64 KiB and 2 MiB in practice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveRequest {
    pub start: u64,
    pub len: u64,
    pub to_node: u32,
    pub granularity: u64,
    pub direction: Direction,
}

/// Everything the executor needs from the kernel for one target; [`super::KernelBackend`] is
/// the real one, tests use fakes.
pub trait Backend {
    fn pid(&self) -> u32;
    /// `Err(Exited)` once the target has exited.
    fn alive(&self) -> Result<(), TargetError>;
    /// Where each page is (move_pages without nodes).
    fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError>;
    /// Moves `pages` to `node`; `out` gets move_pages' status array. Returns the number of
    /// pages the kernel reports as not migrated (their status still says `node`).
    fn move_to(
        &mut self,
        pages: &[usize],
        node: u32,
        flags: u32,
        out: &mut Vec<PageStatus>,
    ) -> Result<usize, ExecError>;
    /// `(free bytes, floor)` of `node`, the floor being its high watermark; `None` when the
    /// node does not exist.
    fn node_room(&mut self, node: u32) -> Result<Option<(u64, u64)>, ExecError>;
    /// The huge pages (THP or hugetlb) in and around `ranges`, each `[start, end)`: the
    /// superpages they map, or whole mappings holding some where the kernel cannot say which.
    fn huge_mappings(&mut self, ranges: &[(u64, u64)]) -> Result<Vec<HugeRange>, ExecError>;
    /// Splits the huge pages in `[start, end)`.
    fn split_huge(&mut self, start: u64, end: u64) -> SplitOutcome;
    /// `MADV_COLLAPSE` on `[start, start + len)`.
    fn collapse(&mut self, start: u64, len: u64) -> Result<(), ExecError>;
}

/// Why an execute call stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    TargetExited,
}

/// What one execute call did, promotions and demotions apart (they pay from different token
/// buckets, and a target's metrics count them apart).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExecReport {
    pub promote: DirectionReport,
    pub demote: DirectionReport,
    pub splits: u64,
    /// Sub-2 MiB moves inside huge pages that could not split first, by reason.
    pub split_fallbacks: BTreeMap<&'static str, u64>,
    pub collapsed: u64,
    pub collapse_failed: u64,
    pub aborted: Option<AbortReason>,
}

/// What one execute call did in one direction. Per-page failures are keyed by reason
/// (`ebusy`, `efault`, `enoent`, `enomem`, `eacces`, ..., and `verify_mismatch`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DirectionReport {
    pub requested_bytes: u64,
    /// Pages handed to move_pages (including huge-page heads and retries).
    pub pages_attempted: u64,
    /// 4 KiB pages on the destination afterwards (verified when `verify` is on).
    pub pages_moved: u64,
    /// Of `pages_moved`, the pages that were on the destination before the call: move_pages
    /// reports where a page is, so one the plan named but something else had already moved
    /// counts as moved. Known only where the caller asked first
    /// ([`super::pages_on_destination`]; the daemon does for a bounded target's demotions),
    /// 0 elsewhere.
    pub pages_already_placed: u64,
    /// `pages_moved` by the granularity (bytes) of the request each page belonged to.
    pub moved_by_granularity: BTreeMap<u64, u64>,
    /// 2 MiB chunks moved whole through their head page.
    pub huge_chunks_moved: u64,
    pub failures: BTreeMap<&'static str, u64>,
    pub retry_queued: u64,
    pub retry_exhausted: u64,
    /// Bytes deferred by the token bucket.
    pub rate_limited_bytes: u64,
    /// Pages not moved because the destination was at its watermark.
    pub watermark_limited_pages: u64,
    /// Pages not attempted because the call was aborted.
    pub aborted_pages: u64,
    /// move_pages calls, and the time spent in them.
    pub syscalls: u64,
    pub move_time: Duration,
}

impl DirectionReport {
    fn fail(&mut self, reason: &'static str, pages: u64) {
        *self.failures.entry(reason).or_insert(0) += pages;
    }

    fn moved(&mut self, pages: u64, granularity: u64) {
        self.pages_moved += pages;
        *self.moved_by_granularity.entry(granularity).or_insert(0) += pages;
    }

    /// Pages that changed tier: `pages_moved` less those that were there already.
    #[must_use]
    pub fn pages_relocated(&self) -> u64 {
        self.pages_moved.saturating_sub(self.pages_already_placed)
    }

    /// Total of per-page failures.
    #[must_use]
    pub fn failed_pages(&self) -> u64 {
        self.failures.values().sum()
    }

    fn add(&mut self, other: &Self) {
        self.requested_bytes += other.requested_bytes;
        self.pages_attempted += other.pages_attempted;
        self.pages_moved += other.pages_moved;
        self.pages_already_placed += other.pages_already_placed;
        for (granularity, pages) in &other.moved_by_granularity {
            *self.moved_by_granularity.entry(*granularity).or_insert(0) += pages;
        }
        self.huge_chunks_moved += other.huge_chunks_moved;
        for (reason, pages) in &other.failures {
            *self.failures.entry(reason).or_insert(0) += pages;
        }
        self.retry_queued += other.retry_queued;
        self.retry_exhausted += other.retry_exhausted;
        self.rate_limited_bytes += other.rate_limited_bytes;
        self.watermark_limited_pages += other.watermark_limited_pages;
        self.aborted_pages += other.aborted_pages;
        self.syscalls += other.syscalls;
        self.move_time += other.move_time;
    }
}

impl ExecReport {
    /// The report of one direction.
    #[must_use]
    pub fn direction(&self, direction: Direction) -> &DirectionReport {
        match direction {
            Direction::Promote => &self.promote,
            Direction::Demote => &self.demote,
        }
    }

    fn direction_mut(&mut self, direction: Direction) -> &mut DirectionReport {
        match direction {
            Direction::Promote => &mut self.promote,
            Direction::Demote => &mut self.demote,
        }
    }

    /// Both directions summed.
    #[must_use]
    pub fn total(&self) -> DirectionReport {
        let mut total = self.promote.clone();
        total.add(&self.demote);
        total
    }

    /// Adds `other`, a later execution's report, to this one.
    pub fn add(&mut self, other: &Self) {
        self.promote.add(&other.promote);
        self.demote.add(&other.demote);
        self.aborted = self.aborted.or(other.aborted);
        self.splits += other.splits;
        for (reason, count) in &other.split_fallbacks {
            *self.split_fallbacks.entry(reason).or_insert(0) += count;
        }
        self.collapsed += other.collapsed;
        self.collapse_failed += other.collapse_failed;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PageWork {
    addr: u64,
    node: u32,
    attempts: u8,
    direction: Direction,
    /// Of the request it belongs to, bytes.
    granularity: u64,
}

/// The migration executor; one per agent, any number of targets.
#[derive(Debug)]
pub struct Executor {
    cfg: ExecConfig,
    promote: TokenBucket,
    demote: TokenBucket,
    retry: BTreeMap<u32, Vec<PageWork>>,
    /// Exponentially weighted time per moved page, ns.
    ns_per_page: Option<f64>,
    totals: ExecReport,
}

/// Control flow inside one call: a target exit unwinds to `execute`.
enum Stop {
    Exited,
    Error(ExecError),
}

impl From<ExecError> for Stop {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Target(TargetError::Exited { .. }) => Self::Exited,
            other => Self::Error(other),
        }
    }
}

impl From<TargetError> for Stop {
    fn from(e: TargetError) -> Self {
        Self::from(ExecError::Target(e))
    }
}

impl Executor {
    #[must_use]
    pub fn new(cfg: ExecConfig) -> Self {
        Self {
            promote: TokenBucket::new(cfg.promote_rate, cfg.promote_burst.max(cfg.promote_rate)),
            demote: TokenBucket::new(cfg.demote_rate, cfg.demote_burst.max(cfg.demote_rate)),
            cfg,
            retry: BTreeMap::new(),
            ns_per_page: None,
            totals: ExecReport::default(),
        }
    }

    #[must_use]
    pub const fn config(&self) -> &ExecConfig {
        &self.cfg
    }

    /// Measured time per moved 4 KiB page, ns (EWMA over calls); `None` before any move. The
    /// planner's migration-cost estimate (`BenefitConfig::migrate_page_ns`) takes this.
    #[must_use]
    pub const fn ns_per_page(&self) -> Option<f64> {
        self.ns_per_page
    }

    /// Sums over every call so far.
    #[must_use]
    pub const fn totals(&self) -> &ExecReport {
        &self.totals
    }

    /// Pages of `pid` waiting for a retry.
    #[must_use]
    pub fn pending_retries(&self, pid: u32) -> usize {
        self.retry.get(&pid).map_or(0, Vec::len)
    }

    /// Forgets a target (it exited or is no longer selected).
    pub fn forget(&mut self, pid: u32) {
        self.retry.remove(&pid);
    }

    /// Drops `pid`'s pages waiting for a retry in `direction`; returns how many there were. A
    /// target bounded by a share of the fast tier drops its queued promotions: the next plan
    /// asks for them again if they are still worth it, within the room the share leaves.
    pub fn drop_retries(&mut self, pid: u32, direction: Direction) -> usize {
        let Some(work) = self.retry.get_mut(&pid) else {
            return 0;
        };
        let before = work.len();
        work.retain(|page| page.direction != direction);
        before - work.len()
    }

    /// Executes `requests` against one target. A target exit is not an error: the report says
    /// `aborted`. Errors are for the call as a whole (no such node, no permission).
    pub fn execute(
        &mut self,
        backend: &mut dyn Backend,
        requests: &[MoveRequest],
        now: Instant,
    ) -> Result<ExecReport, ExecError> {
        let pid = backend.pid();
        let mut report = ExecReport::default();
        let mut work = self.retry.remove(&pid).unwrap_or_default();
        let result = self.run(backend, requests, now, &mut work, &mut report);
        match result {
            Ok(()) => {}
            Err(Stop::Exited) => {
                report.aborted = Some(AbortReason::TargetExited);
                self.retry.remove(&pid);
            }
            Err(Stop::Error(e)) => return Err(e),
        }
        let total = report.total();
        if total.pages_moved > 0 && !total.move_time.is_zero() {
            let sample = total.move_time.as_nanos() as f64 / total.pages_moved as f64;
            self.ns_per_page = Some(match self.ns_per_page {
                None => sample,
                Some(old) => 0.8 * old + 0.2 * sample,
            });
        }
        self.accumulate(&report);
        Ok(report)
    }

    fn accumulate(&mut self, r: &ExecReport) {
        self.totals.add(r);
    }

    fn run(
        &mut self,
        backend: &mut dyn Backend,
        requests: &[MoveRequest],
        now: Instant,
        work: &mut Vec<PageWork>,
        report: &mut ExecReport,
    ) -> Result<(), Stop> {
        backend.alive()?;
        // Every destination must exist: a clear error before anything moves.
        let nodes: BTreeSet<u32> = requests.iter().map(|r| r.to_node).collect();
        for &node in &nodes {
            if backend.node_room(node)?.is_none() {
                return Err(Stop::Error(ExecError::NoSuchNode {
                    pid: backend.pid(),
                    node,
                }));
            }
        }
        let to_move: Vec<(u64, u64)> = requests
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| (r.start, r.start + r.len))
            .collect();
        let huge = backend.huge_mappings(&to_move)?;
        let in_huge = |start: u64, end: u64| {
            huge.iter()
                .find(|&&(s, e, _)| s < end && start < e)
                .map(|&(_, _, hugetlb)| hugetlb)
        };

        let mut heads: Vec<PageWork> = Vec::new();
        let mut collapse_candidates: Vec<u64> = Vec::new();
        let mut splits_done: BTreeSet<u64> = BTreeSet::new();
        for request in requests {
            let gran = request.granularity.max(PAGE);
            let side = report.direction_mut(request.direction);
            side.requested_bytes += request.len;
            let bucket = match request.direction {
                Direction::Promote => &mut self.promote,
                Direction::Demote => &mut self.demote,
            };
            let granted = bucket.take_up_to(request.len, gran, now);
            side.rate_limited_bytes += request.len - granted;
            if granted == 0 {
                continue;
            }
            let (start, end) = (request.start, request.start + granted);
            let page = |addr: u64| PageWork {
                addr,
                node: request.to_node,
                attempts: 0,
                direction: request.direction,
                granularity: gran,
            };
            match in_huge(start, end) {
                // hugetlb pages cannot split: whole huge pages by their heads, any granularity.
                Some(true) => {
                    let (s, e) = huge_cover(start, end);
                    heads.extend((s..e).step_by(HUGE_PAGE as usize).map(page));
                }
                Some(false) if gran >= HUGE_PAGE && start.is_multiple_of(HUGE_PAGE) => {
                    heads.extend((start..end).step_by(HUGE_PAGE as usize).map(page));
                }
                Some(false) => {
                    let (s, e) = huge_cover(start, end);
                    if self.cfg.split_huge && !splits_done.contains(&s) {
                        match backend.split_huge(s, e) {
                            SplitOutcome::Split => report.splits += 1,
                            SplitOutcome::Unavailable(_) => {
                                *report
                                    .split_fallbacks
                                    .entry("split_unavailable")
                                    .or_insert(0) += 1;
                            }
                            SplitOutcome::Failed(_) => {
                                *report.split_fallbacks.entry("split_failed").or_insert(0) += 1;
                            }
                        }
                        splits_done.extend((s..e).step_by(HUGE_PAGE as usize));
                    } else if !self.cfg.split_huge {
                        *report.split_fallbacks.entry("split_disabled").or_insert(0) += 1;
                    }
                    work.extend((start..end).step_by(PAGE as usize).map(page));
                    if request.direction == Direction::Promote {
                        collapse_candidates.extend((s..e).step_by(HUGE_PAGE as usize));
                    }
                }
                None => {
                    work.extend((start..end).step_by(PAGE as usize).map(page));
                    if request.direction == Direction::Promote && gran < HUGE_PAGE {
                        let (s, e) = huge_cover(start, end);
                        collapse_candidates.extend((s..e).step_by(HUGE_PAGE as usize));
                    }
                }
            }
        }

        // Demotions first, so that a swap's promotions find the room its demotions freed
        // (the watermark guard would otherwise stop them at the fast node's floor). Within a
        // direction: huge pages by head, then whatever of their chunks stayed behind at 4 KiB.
        let (demote_heads, promote_heads): (Vec<_>, Vec<_>) = heads
            .into_iter()
            .partition(|p| p.direction == Direction::Demote);
        let (demote_pages, promote_pages): (Vec<_>, Vec<_>) = std::mem::take(work)
            .into_iter()
            .partition(|p| p.direction == Direction::Demote);
        let promote_total =
            (promote_heads.len() as u64) * PAGES_PER_HUGE + promote_pages.len() as u64;
        let mut moved = Vec::new();
        let phases = [
            (Direction::Demote, demote_heads, demote_pages),
            (Direction::Promote, promote_heads, promote_pages),
        ];
        for (direction, mut heads, mut pages) in phases {
            let side = report.direction_mut(direction);
            let result = self.move_phase(backend, &mut heads, &mut pages, side, &mut moved);
            if let Err(stop) = result {
                if direction == Direction::Demote && matches!(stop, Stop::Exited) {
                    report.promote.aborted_pages += promote_total;
                }
                return Err(stop);
            }
        }

        if self.cfg.collapse_promoted && !collapse_candidates.is_empty() {
            self.collapse(backend, &moved, &collapse_candidates, report)?;
        }
        Ok(())
    }

    /// One direction's moves: huge pages by their heads, the pages of their chunks that stayed
    /// behind added to `pages`, then `pages` at 4 KiB; verified 4 KiB moves go to `moved`, and
    /// every moved page is counted in `report`.
    fn move_phase(
        &mut self,
        backend: &mut dyn Backend,
        heads: &mut Vec<PageWork>,
        pages: &mut Vec<PageWork>,
        report: &mut DirectionReport,
        moved: &mut Vec<u64>,
    ) -> Result<(), Stop> {
        if !heads.is_empty() {
            let mut moved_heads = Vec::new();
            self.move_batches(backend, heads, report, &mut moved_heads, false, HUGE_PAGE)?;
            let mut chunk_pages = Vec::new();
            for head in heads.iter() {
                chunk_pages.extend((0..PAGES_PER_HUGE).map(|i| (head.addr + i * PAGE) as usize));
            }
            let mut status = Vec::new();
            for (chunk, head) in chunk_pages
                .chunks(PAGES_PER_HUGE as usize)
                .zip(heads.iter())
            {
                backend.alive()?;
                backend.query(chunk, &mut status)?;
                let mut all_there = true;
                for (&addr, st) in chunk.iter().zip(&status) {
                    match *st {
                        PageStatus::Node(n) if n == head.node => report.moved(1, head.granularity),
                        PageStatus::Node(_) => {
                            all_there = false;
                            pages.push(PageWork {
                                addr: addr as u64,
                                ..*head
                            });
                        }
                        PageStatus::Error(_) => {}
                    }
                }
                if all_there && status.iter().any(|s| s.node().is_some()) {
                    report.huge_chunks_moved += 1;
                }
            }
        }
        self.move_batches(backend, pages, report, moved, self.cfg.verify, PAGE)
    }

    /// Moves `pages` in batches by destination; pages left on the destination are pushed to
    /// `moved` (after verification when `verify`). Transient failures go to the retry queue.
    fn move_batches(
        &mut self,
        backend: &mut dyn Backend,
        pages: &mut Vec<PageWork>,
        report: &mut DirectionReport,
        moved: &mut Vec<u64>,
        verify: bool,
        unit: u64,
    ) -> Result<(), Stop> {
        pages.sort_by_key(|p| (p.node, p.addr));
        pages.dedup_by_key(|p| (p.node, p.addr));
        let pid = backend.pid();
        let flags = if self.cfg.move_shared {
            MPOL_MF_MOVE_ALL
        } else {
            0
        };
        let batch = self.cfg.batch_pages.max(1);
        let mut status = Vec::new();
        let mut addrs: Vec<usize> = Vec::with_capacity(batch);
        let mut verified = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            let node = pages[i].node;
            let same_node = pages[i..].iter().take_while(|p| p.node == node).count();
            let want = same_node.min(batch);
            if let Err(e) = backend.alive() {
                report.aborted_pages += (pages.len() - i) as u64;
                return Err(e.into());
            }
            let (free, floor) = backend
                .node_room(node)?
                .ok_or(ExecError::NoSuchNode { pid, node })?;
            let room = super::watermark::room(
                free,
                floor.saturating_add(self.cfg.reserve_bytes),
                want as u64 * unit,
            );
            let take = want.min(usize::try_from(room / unit).unwrap_or(usize::MAX));
            let cut = take < want;
            if cut {
                // Up to the watermark, then nothing more for this node in this call.
                report.watermark_limited_pages += (same_node - take) as u64 * (unit / PAGE);
            }
            let this = &pages[i..i + take];
            if !this.is_empty() {
                addrs.clear();
                addrs.extend(this.iter().map(|p| p.addr as usize));
                report.pages_attempted += this.len() as u64;
                report.syscalls += 1;
                let started = Instant::now();
                let result = backend.move_to(&addrs, node, flags, &mut status);
                report.move_time += started.elapsed();
                let not_migrated = match result {
                    Ok(n) => n,
                    Err(e) => {
                        let stop = Stop::from(e);
                        if matches!(stop, Stop::Exited) {
                            report.aborted_pages += (pages.len() - i) as u64;
                        }
                        return Err(stop);
                    }
                };
                let verify = verify && (not_migrated > 0 || !self.cfg.verify_only_when_reported);
                let mut landed = Vec::new();
                for (work, st) in this.iter().zip(&status) {
                    match *st {
                        PageStatus::Node(n) if n == node => landed.push(*work),
                        PageStatus::Node(_) => self.failed(pid, *work, "not_moved", true, report),
                        PageStatus::Error(e) => {
                            self.failed(pid, *work, e.label(), e.is_transient(), report);
                        }
                    }
                }
                if verify && !landed.is_empty() {
                    addrs.clear();
                    addrs.extend(landed.iter().map(|p| p.addr as usize));
                    if let Err(e) = backend.query(&addrs, &mut verified) {
                        let stop = Stop::from(e);
                        if matches!(stop, Stop::Exited) {
                            report.aborted_pages += (pages.len() - i - take) as u64;
                        }
                        return Err(stop);
                    }
                    for (work, st) in landed.iter().zip(&verified) {
                        match *st {
                            PageStatus::Node(n) if n == node => {
                                // Heads were counted chunk by chunk by the caller.
                                if unit == PAGE {
                                    report.moved(1, work.granularity);
                                }
                                moved.push(work.addr);
                            }
                            PageStatus::Error(PageError::NotPresent) => {
                                // Unmapped or freed since: nothing to move any more.
                                report.fail("enoent", 1);
                            }
                            _ => self.failed(pid, *work, "verify_mismatch", true, report),
                        }
                    }
                } else {
                    for work in &landed {
                        if unit == PAGE {
                            report.moved(1, work.granularity);
                        }
                        moved.push(work.addr);
                    }
                }
            }
            i += if cut { same_node } else { take };
        }
        Ok(())
    }

    fn failed(
        &mut self,
        pid: u32,
        mut work: PageWork,
        reason: &'static str,
        transient: bool,
        report: &mut DirectionReport,
    ) {
        report.fail(reason, 1);
        if !transient {
            return;
        }
        work.attempts += 1;
        if work.attempts < self.cfg.max_attempts {
            report.retry_queued += 1;
            self.retry.entry(pid).or_default().push(work);
        } else {
            report.retry_exhausted += 1;
        }
    }

    fn collapse(
        &mut self,
        backend: &mut dyn Backend,
        moved: &[u64],
        candidates: &[u64],
        report: &mut ExecReport,
    ) -> Result<(), Stop> {
        let moved: BTreeSet<u64> = moved.iter().copied().collect();
        let mut candidates = candidates.to_vec();
        candidates.sort_unstable();
        candidates.dedup();
        let mut status = Vec::new();
        for chunk in candidates {
            // Dense: every resident page of the chunk was moved by this call or already sat
            // on the destination, and the chunk was part of this call's promotions.
            if moved.range(chunk..chunk + HUGE_PAGE).next().is_none() {
                continue;
            }
            let pages: Vec<usize> = (0..PAGES_PER_HUGE)
                .map(|i| (chunk + i * PAGE) as usize)
                .collect();
            backend.query(&pages, &mut status)?;
            let nodes: BTreeSet<u32> = status.iter().filter_map(|s| s.node()).collect();
            let resident = status.iter().filter(|s| s.node().is_some()).count() as u64;
            if nodes.len() != 1 || resident < PAGES_PER_HUGE {
                continue;
            }
            match backend.collapse(chunk, HUGE_PAGE) {
                Ok(()) => report.collapsed += 1,
                Err(ExecError::Target(TargetError::Exited { .. })) => return Err(Stop::Exited),
                Err(_) => report.collapse_failed += 1,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::sys::mempolicy::PageStatus;

    const MIB: u64 = 1 << 20;

    /// A process in memory: page → node, THP chunks that move as one, nodes with free memory.
    #[derive(Default)]
    struct Fake {
        pages: BTreeMap<u64, u32>,
        /// Heads of chunks backed by an unsplit THP.
        thp: BTreeSet<u64>,
        huge_mappings: Vec<HugeRange>,
        /// The ranges each call asked about huge pages in.
        asked_huge: Vec<Vec<(u64, u64)>>,
        /// node → (free, floor)
        nodes: BTreeMap<u32, (u64, u64)>,
        /// Pages that answer EBUSY this many more times.
        busy: BTreeMap<u64, u32>,
        /// Pages whose move reports success but does nothing (a partially failed call).
        lie: BTreeSet<u64>,
        /// Exit after this many move calls.
        exit_after: Option<usize>,
        split_available: bool,
        splits: Vec<(u64, u64)>,
        collapses: Vec<u64>,
        move_calls: Vec<usize>,
        exited: bool,
        /// Moves to these nodes fail per page with ENOMEM (a full tier whose free-memory
        /// figure still looked fine: another process raced us to it).
        full: BTreeSet<u32>,
        /// `move_to` does not check liveness itself, so only the executor's own check can
        /// stop a move into a dead (or pid-reused) process.
        moves_after_exit: bool,
    }

    impl Fake {
        fn with_pages(range: std::ops::Range<u64>, node: u32) -> Self {
            let mut f = Self::default();
            f.nodes.insert(0, (1 << 40, 0));
            f.nodes.insert(1, (1 << 40, 0));
            for addr in range.step_by(PAGE as usize) {
                f.pages.insert(addr, node);
            }
            f
        }

        fn count_on(&self, node: u32) -> usize {
            self.pages.values().filter(|&&n| n == node).count()
        }
    }

    impl Backend for Fake {
        fn pid(&self) -> u32 {
            4242
        }

        fn alive(&self) -> Result<(), TargetError> {
            if self.exited {
                Err(TargetError::Exited { pid: 4242 })
            } else {
                Ok(())
            }
        }

        fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError> {
            self.alive()?;
            out.clear();
            out.extend(pages.iter().map(|&a| match self.pages.get(&(a as u64)) {
                Some(&n) => PageStatus::Node(n),
                None => PageStatus::Error(PageError::NotPresent),
            }));
            Ok(())
        }

        fn move_to(
            &mut self,
            pages: &[usize],
            node: u32,
            _flags: u32,
            out: &mut Vec<PageStatus>,
        ) -> Result<usize, ExecError> {
            if !self.moves_after_exit {
                self.alive()?;
            }
            if !self.nodes.contains_key(&node) {
                return Err(ExecError::NoSuchNode { pid: 4242, node });
            }
            self.move_calls.push(pages.len());
            out.clear();
            let mut lies = 0;
            for &a in pages {
                let a = a as u64;
                if self.full.contains(&node) {
                    out.push(PageStatus::Error(PageError::NoMemory));
                    continue;
                }
                if let Some(left) = self.busy.get_mut(&a).filter(|l| **l > 0) {
                    *left -= 1;
                    out.push(PageStatus::Error(PageError::Busy));
                    continue;
                }
                if !self.pages.contains_key(&a) {
                    out.push(PageStatus::Error(PageError::NotPresent));
                    continue;
                }
                out.push(PageStatus::Node(node));
                if self.lie.contains(&a) {
                    lies += 1;
                    continue;
                }
                let head = a & !(HUGE_PAGE - 1);
                let span: Vec<u64> = if self.thp.contains(&head) {
                    (head..head + HUGE_PAGE).step_by(PAGE as usize).collect()
                } else {
                    vec![a]
                };
                for p in span {
                    if let Some(n) = self.pages.get_mut(&p)
                        && *n != node
                    {
                        let from = std::mem::replace(n, node);
                        self.nodes.get_mut(&node).unwrap().0 -= PAGE;
                        if let Some(source) = self.nodes.get_mut(&from) {
                            source.0 += PAGE;
                        }
                    }
                }
            }
            if self.exit_after.is_some_and(|n| self.move_calls.len() >= n) {
                self.exited = true;
            }
            Ok(lies)
        }

        fn node_room(&mut self, node: u32) -> Result<Option<(u64, u64)>, ExecError> {
            Ok(self.nodes.get(&node).copied())
        }

        fn huge_mappings(&mut self, ranges: &[(u64, u64)]) -> Result<Vec<HugeRange>, ExecError> {
            self.asked_huge.push(ranges.to_vec());
            Ok(self.huge_mappings.clone())
        }

        fn split_huge(&mut self, start: u64, end: u64) -> SplitOutcome {
            if !self.split_available {
                return SplitOutcome::Unavailable("no debugfs");
            }
            self.splits.push((start, end));
            for head in (start..end).step_by(HUGE_PAGE as usize) {
                self.thp.remove(&head);
            }
            SplitOutcome::Split
        }

        fn collapse(&mut self, start: u64, _len: u64) -> Result<(), ExecError> {
            self.collapses.push(start);
            Ok(())
        }
    }

    fn request(start: u64, len: u64, to_node: u32, granularity: u64) -> MoveRequest {
        MoveRequest {
            start,
            len,
            to_node,
            granularity,
            direction: if to_node == 0 {
                Direction::Promote
            } else {
                Direction::Demote
            },
        }
    }

    #[test]
    fn batches_pages_and_counts_not_present() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 3000 * PAGE, 1);
        // 100 pages of the requested range were never touched.
        let mut ex = Executor::new(ExecConfig::default());
        let report = ex
            .execute(
                &mut fake,
                &[request(base, 3100 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(fake.move_calls, vec![1024, 1024, 1024, 28]);
        assert_eq!(report.total().pages_moved, 3000);
        assert_eq!(report.total().failures, BTreeMap::from([("enoent", 100)]));
        assert_eq!(report.total().retry_queued, 0);
        assert_eq!(fake.count_on(0), 3000);
        assert_eq!(report.aborted, None);
        assert!(ex.ns_per_page().is_some());
        assert_eq!(ex.totals().total().pages_moved, 3000);
    }

    /// A swap in one call: its promotions and its demotions are counted apart, each page by
    /// the granularity its request asked for; a page that fails counts in its own direction.
    #[test]
    fn promotions_and_demotions_are_reported_apart() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 16 * PAGE, 1);
        for page in 0..16 {
            fake.pages.insert(base + 32 * PAGE + page * PAGE, 0);
        }
        fake.busy.insert(base + 3 * PAGE, 1);
        let mut ex = Executor::new(ExecConfig::default());
        let promote = request(base, 16 * PAGE, 0, 16 * PAGE);
        let demote = request(base + 32 * PAGE, 8 * PAGE, 1, PAGE);
        let r = ex
            .execute(&mut fake, &[promote, demote], Instant::now())
            .unwrap();
        assert_eq!(r.promote.pages_moved, 15, "{r:?}");
        assert_eq!(
            r.promote.moved_by_granularity,
            BTreeMap::from([(16 * PAGE, 15)])
        );
        assert_eq!(r.promote.failures, BTreeMap::from([("ebusy", 1)]));
        assert_eq!(r.promote.requested_bytes, 16 * PAGE);
        assert_eq!(r.demote.pages_moved, 8);
        assert_eq!(r.demote.moved_by_granularity, BTreeMap::from([(PAGE, 8)]));
        assert!(r.demote.failures.is_empty());
        assert_eq!(r.total().pages_moved, 23);
    }

    #[test]
    fn transient_failures_retry_then_give_up() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 8 * PAGE, 1);
        fake.busy.insert(base, 1);
        fake.busy.insert(base + PAGE, 10);
        let mut ex = Executor::new(ExecConfig {
            max_attempts: 3,
            ..ExecConfig::default()
        });
        let now = Instant::now();
        let r1 = ex
            .execute(&mut fake, &[request(base, 8 * PAGE, 0, PAGE)], now)
            .unwrap();
        assert_eq!((r1.total().pages_moved, r1.total().retry_queued), (6, 2));
        assert_eq!(r1.total().failures["ebusy"], 2);
        assert_eq!(ex.pending_retries(4242), 2);
        // The next call (no new requests) retries them first.
        let r2 = ex.execute(&mut fake, &[], now).unwrap();
        assert_eq!((r2.total().pages_moved, r2.total().retry_queued), (1, 1));
        let r3 = ex.execute(&mut fake, &[], now).unwrap();
        assert_eq!((r3.total().pages_moved, r3.total().retry_exhausted), (0, 1));
        assert_eq!(ex.pending_retries(4242), 0);
        assert_eq!(fake.pages[&(base + PAGE)], 1);
    }

    #[test]
    fn verify_catches_pages_reported_but_not_moved() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 4 * PAGE, 1);
        fake.lie.insert(base + 2 * PAGE);
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 4 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.total().pages_moved, 3);
        assert_eq!(r.total().failures["verify_mismatch"], 1);
        assert_eq!(r.total().retry_queued, 1);
        // Verifying only when the kernel reports failures still catches it (it reports them).
        let mut fake = Fake::with_pages(base..base + 4 * PAGE, 1);
        fake.lie.insert(base + 2 * PAGE);
        let mut ex = Executor::new(ExecConfig {
            verify_only_when_reported: true,
            ..ExecConfig::default()
        });
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 4 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(
            (r.total().pages_moved, r.total().failures["verify_mismatch"]),
            (3, 1)
        );
        // Without verification the lie would have counted as moved.
        let mut fake = Fake::with_pages(base..base + 4 * PAGE, 1);
        fake.lie.insert(base + 2 * PAGE);
        let mut ex = Executor::new(ExecConfig {
            verify: false,
            ..ExecConfig::default()
        });
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 4 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.total().pages_moved, 4);
    }

    #[test]
    fn promote_and_demote_have_separate_buckets() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 64 * PAGE, 1);
        for a in (base + 32 * PAGE..base + 64 * PAGE).step_by(PAGE as usize) {
            fake.pages.insert(a, 0);
        }
        let mut ex = Executor::new(ExecConfig {
            promote_rate: 16 * PAGE,
            promote_burst: 16 * PAGE,
            demote_rate: 8 * PAGE,
            demote_burst: 8 * PAGE,
            ..ExecConfig::default()
        });
        let now = Instant::now();
        let requests = [
            request(base, 32 * PAGE, 0, PAGE),
            request(base + 32 * PAGE, 32 * PAGE, 1, PAGE),
        ];
        let r = ex.execute(&mut fake, &requests, now).unwrap();
        assert_eq!(r.total().pages_moved, 16 + 8);
        assert_eq!(r.total().rate_limited_bytes, (16 + 24) * PAGE);
        // One second later the promote bucket has refilled by its rate.
        let r = ex
            .execute(&mut fake, &requests[..1], now + Duration::from_secs(1))
            .unwrap();
        assert_eq!(r.total().pages_moved, 16);
        assert_eq!(fake.count_on(0), 32 - 8 + 16);
    }

    #[test]
    fn a_swap_demotes_first_so_its_promotions_fit() {
        let base = 0x1000_0000;
        // 32 slow pages to promote, 32 fast pages to demote; node 0 sits exactly at its floor
        // plus reserve, so only the room the demotions free lets the promotions in.
        let mut fake = Fake::with_pages(base..base + 64 * PAGE, 1);
        for a in (base + 32 * PAGE..base + 64 * PAGE).step_by(PAGE as usize) {
            fake.pages.insert(a, 0);
        }
        fake.nodes.insert(0, (30 * PAGE, 10 * PAGE));
        let mut ex = Executor::new(ExecConfig {
            reserve_bytes: 20 * PAGE,
            batch_pages: 16,
            ..ExecConfig::default()
        });
        // The promotion is listed first, as a plan sorted by address would have it.
        let r = ex
            .execute(
                &mut fake,
                &[
                    request(base, 32 * PAGE, 0, PAGE),
                    request(base + 32 * PAGE, 32 * PAGE, 1, PAGE),
                ],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.total().watermark_limited_pages, 0, "{r:?}");
        assert_eq!(r.total().pages_moved, 64);
        assert_eq!(fake.count_on(0), 32);
        assert!(
            (base..base + 32 * PAGE)
                .step_by(PAGE as usize)
                .all(|a| fake.pages[&a] == 0),
            "the promoted pages are on node 0"
        );
        assert_eq!(fake.nodes[&0].0, 30 * PAGE, "free memory back where it was");
    }

    #[test]
    fn never_below_the_watermark() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 100 * PAGE, 1);
        // Node 0: 60 pages free, floor 10 pages, reserve 20 pages: room for 30.
        fake.nodes.insert(0, (60 * PAGE, 10 * PAGE));
        let mut ex = Executor::new(ExecConfig {
            reserve_bytes: 20 * PAGE,
            batch_pages: 16,
            ..ExecConfig::default()
        });
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 100 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.total().pages_moved, 30);
        assert_eq!(r.total().watermark_limited_pages, 70);
        assert_eq!(fake.nodes[&0].0, 30 * PAGE);
        assert_eq!(fake.move_calls, vec![16, 14]);
    }

    #[test]
    fn a_full_fast_tier_answers_enomem_which_is_counted_and_retried() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 4 * PAGE, 1);
        fake.full.insert(0);
        let mut ex = Executor::new(ExecConfig {
            max_attempts: 2,
            ..ExecConfig::default()
        });
        let now = Instant::now();
        let r1 = ex
            .execute(&mut fake, &[request(base, 4 * PAGE, 0, PAGE)], now)
            .unwrap();
        assert_eq!(r1.total().pages_moved, 0);
        assert_eq!(
            r1.total().failures.get("enomem"),
            Some(&4),
            "{:?}",
            r1.total().failures
        );
        assert_eq!(
            r1.total().retry_queued,
            4,
            "ENOMEM is transient: memory may free up"
        );
        // Room appears: the retries go through.
        fake.full.clear();
        let r2 = ex.execute(&mut fake, &[], now).unwrap();
        assert_eq!(r2.total().pages_moved, 4);
        assert_eq!(fake.count_on(0), 4);
    }

    #[test]
    fn a_target_dead_before_the_move_is_never_touched() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 8 * PAGE, 1);
        fake.exited = true;
        fake.moves_after_exit = true;
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 8 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.aborted, Some(AbortReason::TargetExited));
        assert!(fake.move_calls.is_empty(), "no move_pages into a dead pid");
        assert_eq!(fake.count_on(0), 0);
    }

    #[test]
    fn target_exit_mid_batch_ends_cleanly() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 5000 * PAGE, 1);
        fake.busy.insert(base, 1);
        fake.exit_after = Some(2);
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 5000 * PAGE, 0, PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.aborted, Some(AbortReason::TargetExited));
        assert_eq!(fake.move_calls.len(), 2, "no call after the exit");
        assert_eq!(r.total().pages_attempted, 2048);
        // The exit shows when the second batch is verified: everything after it is aborted.
        assert_eq!(r.total().aborted_pages, 5000 - 2048);
        assert_eq!(
            ex.pending_retries(4242),
            0,
            "retries of a dead target dropped"
        );
    }

    #[test]
    fn unknown_node_is_a_typed_error_and_moves_nothing() {
        let base = 0x1000_0000;
        let mut fake = Fake::with_pages(base..base + 4 * PAGE, 1);
        let mut ex = Executor::new(ExecConfig::default());
        let err = ex
            .execute(
                &mut fake,
                &[request(base, 4 * PAGE, 7, PAGE)],
                Instant::now(),
            )
            .unwrap_err();
        assert!(
            matches!(err, ExecError::NoSuchNode { pid: 4242, node: 7 }),
            "{err}"
        );
        assert!(fake.move_calls.is_empty());
        assert!(err.to_string().contains("node 7"));
    }

    #[test]
    fn huge_pages_move_whole_by_head() {
        let base = 0x4000_0000;
        let mut fake = Fake::with_pages(base..base + 4 * MIB, 1);
        fake.thp.insert(base);
        // The second chunk is in the THP mapping but only partly backed by small pages.
        fake.huge_mappings.push((base, base + 4 * MIB, false));
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex
            .execute(
                &mut fake,
                &[request(base, 4 * MIB, 0, HUGE_PAGE)],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(r.total().huge_chunks_moved, 1);
        assert_eq!(r.total().pages_moved, 1024);
        // Two heads in one call, then the 511 stragglers of the small-page chunk.
        assert_eq!(fake.move_calls, vec![2, 511]);
        assert_eq!(fake.count_on(0), 1024);
    }

    #[test]
    fn small_moves_in_huge_pages_split_first_or_count_the_fallback() {
        let base = 0x4000_0000;
        let setup = |split_available| {
            let mut fake = Fake::with_pages(base..base + 2 * MIB, 1);
            fake.thp.insert(base);
            fake.huge_mappings.push((base, base + 2 * MIB, false));
            fake.split_available = split_available;
            fake
        };
        let req = [request(base + 64 * 1024, 64 * 1024, 0, 64 * 1024)];
        let mut fake = setup(true);
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex.execute(&mut fake, &req, Instant::now()).unwrap();
        // It asks about the range it moves, not the whole process.
        assert_eq!(
            fake.asked_huge,
            vec![vec![(base + 64 * 1024, base + 128 * 1024)]]
        );
        assert_eq!(fake.splits, vec![(base, base + 2 * MIB)]);
        assert_eq!((r.splits, r.total().pages_moved), (1, 16));
        assert_eq!(fake.count_on(0), 16, "only the 64 KiB moved");

        let mut fake = setup(false);
        let mut ex = Executor::new(ExecConfig::default());
        let r = ex.execute(&mut fake, &req, Instant::now()).unwrap();
        assert_eq!(
            r.split_fallbacks,
            BTreeMap::from([("split_unavailable", 1)])
        );
        assert_eq!(
            fake.count_on(0),
            512,
            "the kernel moved the whole huge page"
        );
        assert_eq!(ex.totals().split_fallbacks["split_unavailable"], 1);
    }

    #[test]
    fn dense_promotions_collapse_when_asked() {
        let base = 0x4000_0000;
        let mut fake = Fake::with_pages(base..base + 4 * MIB, 1);
        let mut ex = Executor::new(ExecConfig {
            collapse_promoted: true,
            ..ExecConfig::default()
        });
        // The first chunk fully at 4 KiB, the second only half.
        let requests = [
            request(base, 2 * MIB, 0, PAGE),
            request(base + 2 * MIB, MIB, 0, PAGE),
        ];
        let r = ex.execute(&mut fake, &requests, Instant::now()).unwrap();
        assert_eq!(fake.collapses, vec![base]);
        assert_eq!(r.collapsed, 1);
    }
}
