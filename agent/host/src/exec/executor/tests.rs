//! The executor against a fake process: batching, buckets, watermarks, verification, retries,
//! huge pages, exits.

use std::{collections::BTreeSet, time::Duration};

use memtide_core::units::{PAGE_SIZE, SUPERPAGE_SIZE};

use super::*;
use crate::sys::mempolicy::{PageError, PageStatus};

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
        for addr in range.step_by(PAGE_SIZE as usize) {
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
        MoveDestination { node, .. }: MoveDestination,
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
            let head = a & !(SUPERPAGE_SIZE - 1);
            let span: Vec<u64> = if self.thp.contains(&head) {
                (head..head + SUPERPAGE_SIZE)
                    .step_by(PAGE_SIZE as usize)
                    .collect()
            } else {
                vec![a]
            };
            for p in span {
                if let Some(n) = self.pages.get_mut(&p)
                    && *n != node
                {
                    let from = std::mem::replace(n, node);
                    self.nodes.get_mut(&node).unwrap().0 -= PAGE_SIZE;
                    if let Some(source) = self.nodes.get_mut(&from) {
                        source.0 += PAGE_SIZE;
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
        for head in (start..end).step_by(SUPERPAGE_SIZE as usize) {
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
    let mut fake = Fake::with_pages(base..base + 3000 * PAGE_SIZE, 1);
    // 100 pages of the requested range were never touched.
    let mut ex = Executor::new(ExecConfig::default());
    let report = ex
        .execute(
            &mut fake,
            &[request(base, 3100 * PAGE_SIZE, 0, PAGE_SIZE)],
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
    let mut fake = Fake::with_pages(base..base + 16 * PAGE_SIZE, 1);
    for page in 0..16 {
        fake.pages
            .insert(base + 32 * PAGE_SIZE + page * PAGE_SIZE, 0);
    }
    fake.busy.insert(base + 3 * PAGE_SIZE, 1);
    let mut ex = Executor::new(ExecConfig::default());
    let promote = request(base, 16 * PAGE_SIZE, 0, 16 * PAGE_SIZE);
    let demote = request(base + 32 * PAGE_SIZE, 8 * PAGE_SIZE, 1, PAGE_SIZE);
    let r = ex
        .execute(&mut fake, &[promote, demote], Instant::now())
        .unwrap();
    assert_eq!(r.promote.pages_moved, 15, "{r:?}");
    assert_eq!(
        r.promote.moved_by_granularity,
        BTreeMap::from([(16 * PAGE_SIZE, 15)])
    );
    assert_eq!(r.promote.failures, BTreeMap::from([("ebusy", 1)]));
    assert_eq!(r.promote.requested_bytes, 16 * PAGE_SIZE);
    assert_eq!(r.demote.pages_moved, 8);
    assert_eq!(
        r.demote.moved_by_granularity,
        BTreeMap::from([(PAGE_SIZE, 8)])
    );
    assert!(r.demote.failures.is_empty());
    assert_eq!(r.total().pages_moved, 23);
}

#[test]
fn transient_failures_retry_then_give_up() {
    let base = 0x1000_0000;
    let mut fake = Fake::with_pages(base..base + 8 * PAGE_SIZE, 1);
    fake.busy.insert(base, 1);
    fake.busy.insert(base + PAGE_SIZE, 10);
    let mut ex = Executor::new(ExecConfig {
        max_attempts: 3,
        ..ExecConfig::default()
    });
    let now = Instant::now();
    let r1 = ex
        .execute(
            &mut fake,
            &[request(base, 8 * PAGE_SIZE, 0, PAGE_SIZE)],
            now,
        )
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
    assert_eq!(fake.pages[&(base + PAGE_SIZE)], 1);
}

#[test]
fn verify_catches_pages_reported_but_not_moved() {
    let base = 0x1000_0000;
    let mut fake = Fake::with_pages(base..base + 4 * PAGE_SIZE, 1);
    fake.lie.insert(base + 2 * PAGE_SIZE);
    let mut ex = Executor::new(ExecConfig::default());
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 4 * PAGE_SIZE, 0, PAGE_SIZE)],
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r.total().pages_moved, 3);
    assert_eq!(r.total().failures["verify_mismatch"], 1);
    assert_eq!(r.total().retry_queued, 1);
    // Verifying only when the kernel reports failures still catches it (it reports them).
    let mut fake = Fake::with_pages(base..base + 4 * PAGE_SIZE, 1);
    fake.lie.insert(base + 2 * PAGE_SIZE);
    let mut ex = Executor::new(ExecConfig {
        verify_only_when_reported: true,
        ..ExecConfig::default()
    });
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 4 * PAGE_SIZE, 0, PAGE_SIZE)],
            Instant::now(),
        )
        .unwrap();
    assert_eq!(
        (r.total().pages_moved, r.total().failures["verify_mismatch"]),
        (3, 1)
    );
    // Without verification the lie would have counted as moved.
    let mut fake = Fake::with_pages(base..base + 4 * PAGE_SIZE, 1);
    fake.lie.insert(base + 2 * PAGE_SIZE);
    let mut ex = Executor::new(ExecConfig {
        verify: false,
        ..ExecConfig::default()
    });
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 4 * PAGE_SIZE, 0, PAGE_SIZE)],
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r.total().pages_moved, 4);
}

#[test]
fn promote_and_demote_have_separate_buckets() {
    let base = 0x1000_0000;
    let mut fake = Fake::with_pages(base..base + 64 * PAGE_SIZE, 1);
    for a in (base + 32 * PAGE_SIZE..base + 64 * PAGE_SIZE).step_by(PAGE_SIZE as usize) {
        fake.pages.insert(a, 0);
    }
    let mut ex = Executor::new(ExecConfig {
        promote_rate: 16 * PAGE_SIZE,
        promote_burst: 16 * PAGE_SIZE,
        demote_rate: 8 * PAGE_SIZE,
        demote_burst: 8 * PAGE_SIZE,
        ..ExecConfig::default()
    });
    let now = Instant::now();
    let requests = [
        request(base, 32 * PAGE_SIZE, 0, PAGE_SIZE),
        request(base + 32 * PAGE_SIZE, 32 * PAGE_SIZE, 1, PAGE_SIZE),
    ];
    let r = ex.execute(&mut fake, &requests, now).unwrap();
    assert_eq!(r.total().pages_moved, 16 + 8);
    assert_eq!(r.total().rate_limited_bytes, (16 + 24) * PAGE_SIZE);
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
    let mut fake = Fake::with_pages(base..base + 64 * PAGE_SIZE, 1);
    for a in (base + 32 * PAGE_SIZE..base + 64 * PAGE_SIZE).step_by(PAGE_SIZE as usize) {
        fake.pages.insert(a, 0);
    }
    fake.nodes.insert(0, (30 * PAGE_SIZE, 10 * PAGE_SIZE));
    let mut ex = Executor::new(ExecConfig {
        reserve_bytes: 20 * PAGE_SIZE,
        batch_pages: 16,
        ..ExecConfig::default()
    });
    // The promotion is listed first, as a plan sorted by address would have it.
    let r = ex
        .execute(
            &mut fake,
            &[
                request(base, 32 * PAGE_SIZE, 0, PAGE_SIZE),
                request(base + 32 * PAGE_SIZE, 32 * PAGE_SIZE, 1, PAGE_SIZE),
            ],
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r.total().watermark_limited_pages, 0, "{r:?}");
    assert_eq!(r.total().pages_moved, 64);
    assert_eq!(fake.count_on(0), 32);
    assert!(
        (base..base + 32 * PAGE_SIZE)
            .step_by(PAGE_SIZE as usize)
            .all(|a| fake.pages[&a] == 0),
        "the promoted pages are on node 0"
    );
    assert_eq!(
        fake.nodes[&0].0,
        30 * PAGE_SIZE,
        "free memory back where it was"
    );
}

#[test]
fn never_below_the_watermark() {
    let base = 0x1000_0000;
    let mut fake = Fake::with_pages(base..base + 100 * PAGE_SIZE, 1);
    // Node 0: 60 pages free, floor 10 pages, reserve 20 pages: room for 30.
    fake.nodes.insert(0, (60 * PAGE_SIZE, 10 * PAGE_SIZE));
    let mut ex = Executor::new(ExecConfig {
        reserve_bytes: 20 * PAGE_SIZE,
        batch_pages: 16,
        ..ExecConfig::default()
    });
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 100 * PAGE_SIZE, 0, PAGE_SIZE)],
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r.total().pages_moved, 30);
    assert_eq!(r.total().watermark_limited_pages, 70);
    assert_eq!(fake.nodes[&0].0, 30 * PAGE_SIZE);
    assert_eq!(fake.move_calls, vec![16, 14]);
}

#[test]
fn a_full_fast_tier_answers_enomem_which_is_counted_and_retried() {
    let base = 0x1000_0000;
    let mut fake = Fake::with_pages(base..base + 4 * PAGE_SIZE, 1);
    fake.full.insert(0);
    let mut ex = Executor::new(ExecConfig {
        max_attempts: 2,
        ..ExecConfig::default()
    });
    let now = Instant::now();
    let r1 = ex
        .execute(
            &mut fake,
            &[request(base, 4 * PAGE_SIZE, 0, PAGE_SIZE)],
            now,
        )
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
    let mut fake = Fake::with_pages(base..base + 8 * PAGE_SIZE, 1);
    fake.exited = true;
    fake.moves_after_exit = true;
    let mut ex = Executor::new(ExecConfig::default());
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 8 * PAGE_SIZE, 0, PAGE_SIZE)],
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
    let mut fake = Fake::with_pages(base..base + 5000 * PAGE_SIZE, 1);
    fake.busy.insert(base, 1);
    fake.exit_after = Some(2);
    let mut ex = Executor::new(ExecConfig::default());
    let r = ex
        .execute(
            &mut fake,
            &[request(base, 5000 * PAGE_SIZE, 0, PAGE_SIZE)],
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
    let mut fake = Fake::with_pages(base..base + 4 * PAGE_SIZE, 1);
    let mut ex = Executor::new(ExecConfig::default());
    let err = ex
        .execute(
            &mut fake,
            &[request(base, 4 * PAGE_SIZE, 7, PAGE_SIZE)],
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
            &[request(base, 4 * MIB, 0, SUPERPAGE_SIZE)],
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
        request(base, 2 * MIB, 0, PAGE_SIZE),
        request(base + 2 * MIB, MIB, 0, PAGE_SIZE),
    ];
    let r = ex.execute(&mut fake, &requests, Instant::now()).unwrap();
    assert_eq!(fake.collapses, vec![base]);
    assert_eq!(r.collapsed, 1);
}
