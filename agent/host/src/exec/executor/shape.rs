//! A call's requests shaped into page work: each request pays its direction's token bucket,
//! then becomes huge pages moved whole by their heads (hugetlb, or 2 MiB requests on THP) or
//! 4 KiB pages, splitting the THPs a smaller request falls in first where it may.

use std::{collections::BTreeSet, time::Instant};

use memtide_core::units::{Direction, PAGE_SIZE, SUPERPAGE_SIZE};

use super::{Backend, ExecReport, Executor, MoveRequest, PageWork, Stop};
use crate::exec::thp::{SplitOutcome, huge_cover};

/// A call's requests as page work.
#[derive(Default)]
pub(super) struct Shaped {
    /// Huge pages to move whole, by their head page.
    pub(super) heads: Vec<PageWork>,
    /// Pages to move at 4 KiB.
    pub(super) pages: Vec<PageWork>,
    /// 2 MiB chunks promoted at 4 KiB, which may collapse into huge pages again afterwards.
    pub(super) collapse_candidates: Vec<u64>,
}

impl Executor {
    /// Shapes `requests` into page work: the huge pages to move by their heads, and the 4 KiB
    /// pages.
    pub(super) fn shape(
        &mut self,
        backend: &mut dyn Backend,
        requests: &[MoveRequest],
        now: Instant,
        report: &mut ExecReport,
    ) -> Result<Shaped, Stop> {
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

        let mut shaped = Shaped::default();
        let mut splits_done: BTreeSet<u64> = BTreeSet::new();
        for request in requests {
            let gran = request.granularity.max(PAGE_SIZE);
            let granted = self.grant(request, gran, now, report);
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
                    shaped
                        .heads
                        .extend((s..e).step_by(SUPERPAGE_SIZE as usize).map(page));
                }
                Some(false) if gran >= SUPERPAGE_SIZE && start.is_multiple_of(SUPERPAGE_SIZE) => {
                    shaped
                        .heads
                        .extend((start..end).step_by(SUPERPAGE_SIZE as usize).map(page));
                }
                Some(false) => {
                    let (s, e) = huge_cover(start, end);
                    self.split_first(backend, (s, e), &mut splits_done, report);
                    shaped
                        .pages
                        .extend((start..end).step_by(PAGE_SIZE as usize).map(page));
                    if request.direction == Direction::Promote {
                        shaped
                            .collapse_candidates
                            .extend((s..e).step_by(SUPERPAGE_SIZE as usize));
                    }
                }
                None => {
                    shaped
                        .pages
                        .extend((start..end).step_by(PAGE_SIZE as usize).map(page));
                    if request.direction == Direction::Promote && gran < SUPERPAGE_SIZE {
                        let (s, e) = huge_cover(start, end);
                        shaped
                            .collapse_candidates
                            .extend((s..e).step_by(SUPERPAGE_SIZE as usize));
                    }
                }
            }
        }
        Ok(shaped)
    }

    /// What of `request` its direction's token bucket lets through now (bytes, in whole
    /// units of `gran`); the rest is counted as rate limited.
    fn grant(
        &mut self,
        request: &MoveRequest,
        gran: u64,
        now: Instant,
        report: &mut ExecReport,
    ) -> u64 {
        let side = report.direction_mut(request.direction);
        side.requested_bytes += request.len;
        let bucket = match request.direction {
            Direction::Promote => &mut self.promote,
            Direction::Demote => &mut self.demote,
        };
        let granted = bucket.take_up_to(request.len, gran, now);
        side.rate_limited_bytes += request.len - granted;
        granted
    }

    /// Splits the THPs of the chunks `[s, e)` (once per call) so that a smaller move takes only its own
    /// pages, or counts why it could not: the kernel then moves the whole huge page.
    fn split_first(
        &self,
        backend: &mut dyn Backend,
        (s, e): (u64, u64),
        splits_done: &mut BTreeSet<u64>,
        report: &mut ExecReport,
    ) {
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
            splits_done.extend((s..e).step_by(SUPERPAGE_SIZE as usize));
        } else if !self.cfg.split_huge {
            *report.split_fallbacks.entry("split_disabled").or_insert(0) += 1;
        }
    }
}
