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
    time::Instant,
};

use memtide_config::ExecConfig;
use memtide_core::units::{Direction, SUBPAGES};

pub use self::report::{AbortReason, DirectionReport, ExecReport};
use self::shape::Shaped;
use super::{ExecError, HugeRange, ratelimit::TokenBucket, thp::SplitOutcome};
use crate::{
    sys::mempolicy::{MPOL_MF_MOVE_ALL, PageStatus},
    targets::TargetError,
};

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

/// Where one move_pages call sends its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveDestination {
    pub node: u32,
    /// Also move pages other processes map (`MPOL_MF_MOVE_ALL`, CAP_SYS_NICE); without it the
    /// kernel leaves them where they are.
    pub move_shared: bool,
}

impl MoveDestination {
    /// move_pages' flags for it.
    #[must_use]
    pub fn flags(self) -> u32 {
        if self.move_shared {
            MPOL_MF_MOVE_ALL
        } else {
            0
        }
    }
}

/// Everything the executor needs from the kernel for one target; [`super::KernelBackend`] is
/// the real one, tests use fakes.
pub trait Backend {
    fn pid(&self) -> u32;
    /// `Err(Exited)` once the target has exited.
    fn alive(&self) -> Result<(), TargetError>;
    /// Where each page is (move_pages without nodes).
    fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError>;
    /// Moves `pages` to `to.node`; `out` gets move_pages' status array. Returns the number of
    /// pages the kernel reports as not migrated (their status still says `to.node`).
    fn move_to(
        &mut self,
        pages: &[usize],
        to: MoveDestination,
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
        check_destinations(backend, requests)?;
        let Shaped {
            heads,
            pages,
            collapse_candidates,
        } = self.shape(backend, requests, now, report)?;
        // Pages left over from earlier calls go first.
        work.extend(pages);

        // Demotions first, so that a swap's promotions find the room its demotions freed
        // (the watermark guard would otherwise stop them at the fast node's floor). Within a
        // direction: huge pages by head, then whatever of their chunks stayed behind at 4 KiB.
        let (demote_heads, promote_heads): (Vec<_>, Vec<_>) = heads
            .into_iter()
            .partition(|p| p.direction == Direction::Demote);
        let (demote_pages, promote_pages): (Vec<_>, Vec<_>) = std::mem::take(work)
            .into_iter()
            .partition(|p| p.direction == Direction::Demote);
        let promote_total = (promote_heads.len() * SUBPAGES + promote_pages.len()) as u64;
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
}

/// Every destination must exist: a clear error before anything moves.
fn check_destinations(backend: &mut dyn Backend, requests: &[MoveRequest]) -> Result<(), Stop> {
    let nodes: BTreeSet<u32> = requests.iter().map(|r| r.to_node).collect();
    for &node in &nodes {
        if backend.node_room(node)?.is_none() {
            return Err(Stop::Error(ExecError::NoSuchNode {
                pid: backend.pid(),
                node,
            }));
        }
    }
    Ok(())
}

mod batches;
mod collapse;
mod report;
mod shape;
#[cfg(test)]
mod tests;
