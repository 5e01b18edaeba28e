//! Moving pages: one direction's huge pages by their heads, then its 4 KiB pages in batches per
//! destination, each batch cut at the destination's watermark, checked for the target's exit
//! first, and verified after; transient failures go to the retry queue.

use std::time::Instant;

use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE};

use super::{Backend, DirectionReport, Executor, MoveDestination, PageWork, Stop};
use crate::{
    exec::{ExecError, watermark},
    sys::mempolicy::{PageError, PageStatus},
};

/// Buffers reused across the batches of one call.
#[derive(Default)]
struct Scratch {
    addrs: Vec<usize>,
    status: Vec<PageStatus>,
    verified: Vec<PageStatus>,
}

/// One move_pages call's pages, all to one node.
struct Batch<'a> {
    pages: &'a [PageWork],
    node: u32,
    /// Bytes each page stands for: 4 KiB, or 2 MiB for huge pages moved by their heads.
    unit: u64,
    verify: bool,
    /// Pages after this batch, counted as not attempted if the target exits.
    behind: u64,
}

impl Executor {
    /// One direction's moves: huge pages by their heads, the pages of their chunks that stayed
    /// behind added to `pages`, then `pages` at 4 KiB; verified 4 KiB moves go to `moved`, and
    /// every moved page is counted in `report`.
    pub(super) fn move_phase(
        &mut self,
        backend: &mut dyn Backend,
        heads: &mut Vec<PageWork>,
        pages: &mut Vec<PageWork>,
        report: &mut DirectionReport,
        moved: &mut Vec<u64>,
    ) -> Result<(), Stop> {
        if !heads.is_empty() {
            let mut moved_heads = Vec::new();
            self.move_batches(
                backend,
                heads,
                report,
                &mut moved_heads,
                false,
                SUPERPAGE_SIZE,
            )?;
            let mut chunk_pages = Vec::new();
            for head in heads.iter() {
                chunk_pages
                    .extend((0..SUBPAGES as u64).map(|i| (head.addr + i * PAGE_SIZE) as usize));
            }
            let mut status = Vec::new();
            for (chunk, head) in chunk_pages.chunks(SUBPAGES).zip(heads.iter()) {
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
        self.move_batches(backend, pages, report, moved, self.cfg.verify, PAGE_SIZE)
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
        let batch = self.cfg.batch_pages.max(1);
        let mut scratch = Scratch::default();
        scratch.addrs.reserve(batch);
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
            let room = watermark::room(
                free,
                floor.saturating_add(self.cfg.reserve_bytes),
                want as u64 * unit,
            );
            let take = want.min(usize::try_from(room / unit).unwrap_or(usize::MAX));
            let cut = take < want;
            if cut {
                // Up to the watermark, then nothing more for this node in this call.
                report.watermark_limited_pages += (same_node - take) as u64 * (unit / PAGE_SIZE);
            }
            if take > 0 {
                let this = Batch {
                    pages: &pages[i..i + take],
                    node,
                    unit,
                    verify,
                    behind: (pages.len() - i - take) as u64,
                };
                self.move_batch(backend, &this, &mut scratch, report, moved)?;
            }
            i += if cut { same_node } else { take };
        }
        Ok(())
    }

    /// One move_pages call: each page's outcome counted, the pages on the destination
    /// verified when asked, and the moved ones pushed to `moved`.
    fn move_batch(
        &mut self,
        backend: &mut dyn Backend,
        batch: &Batch<'_>,
        scratch: &mut Scratch,
        report: &mut DirectionReport,
        moved: &mut Vec<u64>,
    ) -> Result<(), Stop> {
        let pid = backend.pid();
        let node = batch.node;
        let to = MoveDestination {
            node,
            move_shared: self.cfg.move_shared,
        };
        scratch.addrs.clear();
        scratch
            .addrs
            .extend(batch.pages.iter().map(|p| p.addr as usize));
        report.pages_attempted += batch.pages.len() as u64;
        report.syscalls += 1;
        let started = Instant::now();
        let result = backend.move_to(&scratch.addrs, to, &mut scratch.status);
        report.move_time += started.elapsed();
        let not_migrated = match result {
            Ok(n) => n,
            Err(e) => {
                let stop = Stop::from(e);
                if matches!(stop, Stop::Exited) {
                    report.aborted_pages += batch.pages.len() as u64 + batch.behind;
                }
                return Err(stop);
            }
        };
        let verify = batch.verify && (not_migrated > 0 || !self.cfg.verify_only_when_reported);
        let mut landed = Vec::new();
        for (work, st) in batch.pages.iter().zip(&scratch.status) {
            match *st {
                PageStatus::Node(n) if n == node => landed.push(*work),
                PageStatus::Node(_) => self.failed(pid, *work, "not_moved", true, report),
                PageStatus::Error(e) => {
                    self.failed(pid, *work, e.label(), e.is_transient(), report);
                }
            }
        }
        let confirmed = if verify && !landed.is_empty() {
            self.verify(backend, batch, &landed, scratch, report)?
        } else {
            landed
        };
        for work in &confirmed {
            // Heads were counted chunk by chunk by the caller.
            if batch.unit == PAGE_SIZE {
                report.moved(1, work.granularity);
            }
            moved.push(work.addr);
        }
        Ok(())
    }

    /// Of `landed`, the pages move_pages reported on the batch's node, those a second query
    /// still finds there: a partially failed move_pages reports the destination for pages it
    /// did not move.
    fn verify(
        &mut self,
        backend: &mut dyn Backend,
        batch: &Batch<'_>,
        landed: &[PageWork],
        scratch: &mut Scratch,
        report: &mut DirectionReport,
    ) -> Result<Vec<PageWork>, Stop> {
        let pid = backend.pid();
        scratch.addrs.clear();
        scratch.addrs.extend(landed.iter().map(|p| p.addr as usize));
        if let Err(e) = backend.query(&scratch.addrs, &mut scratch.verified) {
            let stop = Stop::from(e);
            if matches!(stop, Stop::Exited) {
                report.aborted_pages += batch.behind;
            }
            return Err(stop);
        }
        let mut confirmed = Vec::with_capacity(landed.len());
        for (work, st) in landed.iter().zip(&scratch.verified) {
            match *st {
                PageStatus::Node(n) if n == batch.node => confirmed.push(*work),
                PageStatus::Error(PageError::NotPresent) => {
                    // Unmapped or freed since: nothing to move any more.
                    report.fail("enoent", 1);
                }
                _ => self.failed(pid, *work, "verify_mismatch", true, report),
            }
        }
        Ok(confirmed)
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
}
