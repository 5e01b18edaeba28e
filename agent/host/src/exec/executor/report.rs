//! What an execute call did, by direction: pages moved and by what granularity, failures by
//! reason, what the buckets, the watermarks and an exit held back, and the time in move_pages.

use std::{collections::BTreeMap, time::Duration};

use memtide_core::units::Direction;
use serde::Serialize;

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
    /// ([`crate::exec::pages_on_destination`]; the daemon does for a bounded target's demotions),
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
    pub(super) fn fail(&mut self, reason: &'static str, pages: u64) {
        *self.failures.entry(reason).or_insert(0) += pages;
    }

    pub(super) fn moved(&mut self, pages: u64, granularity: u64) {
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

    pub(super) fn direction_mut(&mut self, direction: Direction) -> &mut DirectionReport {
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
