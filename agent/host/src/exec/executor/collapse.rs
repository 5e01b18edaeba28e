//! After the moves: 2 MiB chunks that a promotion filled at 4 KiB become huge pages again
//! (MADV_COLLAPSE), when `collapse_promoted` asks for it.

use std::collections::BTreeSet;

use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE};

use super::{Backend, ExecReport, Executor, Stop};
use crate::{exec::ExecError, targets::TargetError};

impl Executor {
    /// Collapses each candidate chunk this call moved pages into once all its resident pages
    /// sit on one node.
    pub(super) fn collapse(
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
            if moved.range(chunk..chunk + SUPERPAGE_SIZE).next().is_none() {
                continue;
            }
            let pages: Vec<usize> = (0..SUBPAGES as u64)
                .map(|i| (chunk + i * PAGE_SIZE) as usize)
                .collect();
            backend.query(&pages, &mut status)?;
            let nodes: BTreeSet<u32> = status.iter().filter_map(|s| s.node()).collect();
            let resident = status.iter().filter(|s| s.node().is_some()).count();
            if nodes.len() != 1 || resident < SUBPAGES {
                continue;
            }
            match backend.collapse(chunk, SUPERPAGE_SIZE) {
                Ok(()) => report.collapsed += 1,
                Err(ExecError::Target(TargetError::Exited { .. })) => return Err(Stop::Exited),
                Err(_) => report.collapse_failed += 1,
            }
        }
        Ok(())
    }
}
