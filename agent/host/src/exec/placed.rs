//! What of a batch of moves is already done: the pages of requests already on their
//! destination node. move_pages reports where each page is after the call, so the executor
//! counts a page that was there before as moved; a caller that must know what a batch of
//! demotions really freed (a target held to a share of the fast tier) asks first.

use memtide_core::units::PAGE_SIZE;

use super::{Backend, MoveRequest};
use crate::{sys::mempolicy::PageStatus, targets::TargetError};

/// Pages asked about per query (move_pages without nodes).
const QUERY_PAGES: u64 = 1024;

/// The 4 KiB pages of `requests` that are on their request's destination node now.
pub fn pages_on_destination(
    backend: &mut dyn Backend,
    requests: &[MoveRequest],
) -> Result<u64, TargetError> {
    let mut pages = Vec::new();
    let mut status = Vec::new();
    let mut there = 0;
    for request in requests {
        let total = request.len.div_ceil(PAGE_SIZE);
        let mut first = 0;
        while first < total {
            let end = (first + QUERY_PAGES).min(total);
            pages.clear();
            pages.extend((first..end).map(|i| (request.start + i * PAGE_SIZE) as usize));
            backend.query(&pages, &mut status)?;
            there += status
                .iter()
                .filter(|s| matches!(s, PageStatus::Node(n) if *n == request.to_node))
                .count() as u64;
            first = end;
        }
    }
    Ok(there)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use memtide_core::units::{Direction, PAGE_SIZE};

    use super::pages_on_destination;
    use crate::{
        exec::{Backend, ExecError, HugeRange, MoveDestination, MoveRequest, thp::SplitOutcome},
        sys::mempolicy::{PageError, PageStatus},
        targets::TargetError,
    };

    /// Pages by address and the node each is on; only queries are expected.
    struct Placed {
        nodes: BTreeMap<u64, u32>,
        queries: Vec<usize>,
    }

    impl Backend for Placed {
        fn pid(&self) -> u32 {
            7
        }
        fn alive(&self) -> Result<(), TargetError> {
            Ok(())
        }
        fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError> {
            self.queries.push(pages.len());
            out.clear();
            out.extend(pages.iter().map(|&a| match self.nodes.get(&(a as u64)) {
                Some(&n) => PageStatus::Node(n),
                None => PageStatus::Error(PageError::NotPresent),
            }));
            Ok(())
        }
        fn move_to(
            &mut self,
            _: &[usize],
            _: MoveDestination,
            _: &mut Vec<PageStatus>,
        ) -> Result<usize, ExecError> {
            unreachable!("only queries")
        }
        fn node_room(&mut self, _: u32) -> Result<Option<(u64, u64)>, ExecError> {
            unreachable!("only queries")
        }
        fn huge_mappings(&mut self, _: &[(u64, u64)]) -> Result<Vec<HugeRange>, ExecError> {
            unreachable!("only queries")
        }
        fn split_huge(&mut self, _: u64, _: u64) -> SplitOutcome {
            unreachable!("only queries")
        }
        fn collapse(&mut self, _: u64, _: u64) -> Result<(), ExecError> {
            unreachable!("only queries")
        }
    }

    fn demote(start: u64, pages: u64) -> MoveRequest {
        MoveRequest {
            start,
            len: pages * PAGE_SIZE,
            to_node: 1,
            granularity: PAGE_SIZE,
            direction: Direction::Demote,
        }
    }

    #[test]
    fn only_pages_already_on_the_destination_count() {
        let base = 0x7f00_0000_0000u64;
        // 3000 pages: the first 1000 on node 1 already, the next 1500 on node 0, the rest
        // not present.
        let nodes = (0..2500)
            .map(|i| (base + i * PAGE_SIZE, if i < 1000 { 1 } else { 0 }))
            .collect();
        let mut backend = Placed {
            nodes,
            queries: Vec::new(),
        };
        let requests = [demote(base, 3000), demote(base + 500 * PAGE_SIZE, 100)];
        let there = pages_on_destination(&mut backend, &requests).expect("queries succeed");
        assert_eq!(there, 1000 + 100);
        // In calls of at most 1024 pages.
        assert_eq!(backend.queries, [1024, 1024, 952, 100]);
        assert_eq!(
            pages_on_destination(&mut backend, &[]).expect("no query"),
            0
        );
    }
}
