//! Glue between the planner (`policy`) and the executor: a `Plan`'s moves become
//! [`MoveRequest`]s for concrete nodes, and a queried [`TierPlacement`] is the planner's
//! `PlacementView`. The only file of `exec`/`targets` that depends on `policy`.

use memtide_core::{
    policy::{PlacementView, Plan, PlannedMove},
    units::{Direction, Residency, SUBPAGES, SUPERPAGE_SIZE, Tier},
};

use super::executor::MoveRequest;
use crate::targets::placement::TierPlacement;

/// The node each tier's moves go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierNodes {
    pub fast: u32,
    pub slow: u32,
}

impl MoveRequest {
    /// The request for one planned move: promotions go to `nodes.fast`, demotions to
    /// `nodes.slow`.
    #[must_use]
    pub fn from_planned(planned: &PlannedMove, nodes: TierNodes) -> Self {
        let direction = planned.direction;
        Self {
            start: planned.start,
            len: planned.len,
            to_node: match direction {
                Direction::Promote => nodes.fast,
                Direction::Demote => nodes.slow,
            },
            granularity: planned.granularity.bytes(),
            direction,
        }
    }
}

/// Every move of `plan` as a request.
#[must_use]
pub fn requests_from_plan(plan: &Plan, nodes: TierNodes) -> Vec<MoveRequest> {
    plan.moves
        .iter()
        .map(|m| MoveRequest::from_planned(m, nodes))
        .collect()
}

/// Every move of `plan` as requests, each 2 MiB superpage of a move sent to the node
/// `choose(superpage start, bytes of the move in it, direction)` names; neighbouring pieces
/// bound for the same node stay one request.
#[must_use]
pub fn requests_by_node(
    plan: &Plan,
    mut choose: impl FnMut(u64, u64, Direction) -> u32,
) -> Vec<MoveRequest> {
    let mut requests: Vec<MoveRequest> = Vec::with_capacity(plan.moves.len());
    for planned in &plan.moves {
        let end = planned.start + planned.len;
        let mut at = planned.start;
        while at < end {
            let superpage = at & !(SUPERPAGE_SIZE - 1);
            let piece_end = (superpage + SUPERPAGE_SIZE).min(end);
            let to_node = choose(superpage, piece_end - at, planned.direction);
            match requests.last_mut() {
                Some(last)
                    if last.start + last.len == at
                        && last.to_node == to_node
                        && last.direction == planned.direction
                        && last.granularity == planned.granularity.bytes() =>
                {
                    last.len += piece_end - at;
                }
                _ => requests.push(MoveRequest {
                    start: at,
                    len: piece_end - at,
                    to_node,
                    granularity: planned.granularity.bytes(),
                    direction: planned.direction,
                }),
            }
            at = piece_end;
        }
    }
    requests
}

impl PlacementView for TierPlacement {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        self.is_fast(page)
            .map(|fast| if fast { Tier::Fast } else { Tier::Slow })
    }

    fn residency(&self, superpage: u64) -> Residency {
        let mut r = Residency::default();
        self.visit_pages(superpage, SUBPAGES, &mut |page, status| {
            if let Some(node) = status.node() {
                let fast = self.fast_nodes().contains(&node);
                r.set(page, Some(if fast { Tier::Fast } else { Tier::Slow }));
            }
        });
        r
    }

    /// As read with the placement (`PAGEMAP_SCAN`, Linux 6.7); where it was not, the planner
    /// presumes under THP `always` and takes nothing for huge otherwise.
    fn huge_mapped(&self, superpage: u64) -> Option<bool> {
        self.huge_read(superpage)
            .or((!self.presumes_huge()).then_some(false))
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        self.for_each_fast_run(visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mempolicy::PageStatus;
    use memtide_core::policy::MoveReason;
    use memtide_core::units::{Granularity, PAGE_SIZE};

    #[test]
    fn each_superpage_of_a_move_goes_to_the_node_chosen_for_it() {
        let plan = Plan {
            moves: vec![PlannedMove {
                // Half a superpage, then three whole ones.
                start: SUPERPAGE_SIZE / 2,
                len: 3 * SUPERPAGE_SIZE + SUPERPAGE_SIZE / 2,
                direction: Direction::Promote,
                granularity: Granularity::KIB_4,
                reason: MoveReason::Hot,
                expected_benefit: 1.0,
            }],
            ..Plan::default()
        };
        let mut asked = Vec::new();
        // Superpages 0 and 1 are accessed from socket 0, 2 and 3 from socket 1.
        let requests = requests_by_node(&plan, |superpage, bytes, direction| {
            asked.push((superpage / SUPERPAGE_SIZE, bytes, direction));
            u32::from(superpage >= 2 * SUPERPAGE_SIZE)
        });
        assert_eq!(
            asked,
            [
                (0, SUPERPAGE_SIZE / 2, Direction::Promote),
                (1, SUPERPAGE_SIZE, Direction::Promote),
                (2, SUPERPAGE_SIZE, Direction::Promote),
                (3, SUPERPAGE_SIZE, Direction::Promote),
            ]
        );
        let spans: Vec<(u64, u64, u32)> = requests
            .iter()
            .map(|r| (r.start, r.len, r.to_node))
            .collect();
        assert_eq!(
            spans,
            [
                (SUPERPAGE_SIZE / 2, SUPERPAGE_SIZE + SUPERPAGE_SIZE / 2, 0),
                (2 * SUPERPAGE_SIZE, 2 * SUPERPAGE_SIZE, 1)
            ]
        );
        assert!(requests.iter().all(|r| r.granularity == PAGE_SIZE));
    }

    #[test]
    fn planned_moves_become_requests() {
        let plan = Plan {
            moves: vec![
                PlannedMove {
                    start: 0x20_0000,
                    len: 0x20_0000,
                    direction: Direction::Promote,
                    granularity: Granularity::MIB_2,
                    reason: MoveReason::Hot,
                    expected_benefit: 1.0,
                },
                PlannedMove {
                    start: 0x50_0000,
                    len: 0x1_0000,
                    direction: Direction::Demote,
                    granularity: Granularity::KIB_64,
                    reason: MoveReason::Watermark,
                    expected_benefit: -1.0,
                },
            ],
            ..Plan::default()
        };
        let requests = requests_from_plan(&plan, TierNodes { fast: 0, slow: 2 });
        assert_eq!(
            requests,
            vec![
                MoveRequest {
                    start: 0x20_0000,
                    len: 0x20_0000,
                    to_node: 0,
                    granularity: SUPERPAGE_SIZE,
                    direction: Direction::Promote
                },
                MoveRequest {
                    start: 0x50_0000,
                    len: 0x1_0000,
                    to_node: 2,
                    granularity: 64 << 10,
                    direction: Direction::Demote
                },
            ]
        );
    }

    #[test]
    fn placement_view_by_tier() {
        let mut view = TierPlacement::new(vec![0]);
        let mut statuses = vec![PageStatus::Node(1); SUBPAGES];
        statuses[3] = PageStatus::Node(0);
        view.insert(0x20_0000, statuses);
        assert_eq!(view.tier_of(0x20_3000), Some(Tier::Fast));
        assert_eq!(view.tier_of(0x20_4000), Some(Tier::Slow));
        assert_eq!(view.tier_of(0x40_0000), None);
        let r = view.residency(0x20_0000);
        assert_eq!((r.fast_pages(), r.slow_pages()), (1, 511));
        let mut fast = Vec::new();
        view.for_each_fast_range(&mut |s, l| fast.push((s, l)));
        assert_eq!(fast, vec![(0x20_3000, 0x1000)]);
    }

    #[test]
    fn huge_pages_are_presumed_only_under_thp_always() {
        // `madvise` and `never`: a superpage is huge only if it asked; presume none is.
        let view = TierPlacement::new(vec![0]);
        assert_eq!(view.huge_mapped(0x20_0000), Some(false));
        // `always`: the planner presumes from where the superpage's pages are.
        let view = TierPlacement::new(vec![0]).with_huge_presumed(true);
        assert_eq!(view.huge_mapped(0x20_0000), None);
        let mut whole = Residency::default();
        for page in 0..SUBPAGES {
            whole.set(page, Some(Tier::Slow));
        }
        assert!(memtide_core::policy::splits_huge(&view, 0x20_0000, &whole));
        whole.set(0, Some(Tier::Fast));
        assert!(!memtide_core::policy::splits_huge(&view, 0x20_0000, &whole));
    }

    #[test]
    fn huge_pages_read_from_the_kernel_override_the_presumption() {
        for presume in [false, true] {
            let mut view = TierPlacement::new(vec![0]).with_huge_presumed(presume);
            // Read: [2, 6) MiB, where the huge range from 3 MiB covers the superpage at 4 MiB
            // whole and the one at 2 MiB only in part (so not as one huge page).
            view.insert_huge(
                SUPERPAGE_SIZE,
                3 * SUPERPAGE_SIZE,
                &[(SUPERPAGE_SIZE + SUPERPAGE_SIZE / 2, 3 * SUPERPAGE_SIZE)],
            );
            assert_eq!(
                view.huge_mapped(SUPERPAGE_SIZE),
                Some(false),
                "presume {presume}"
            );
            assert_eq!(
                view.huge_mapped(2 * SUPERPAGE_SIZE),
                Some(true),
                "presume {presume}"
            );
            // Not read: as before.
            let unread = if presume { None } else { Some(false) };
            assert_eq!(
                view.huge_mapped(3 * SUPERPAGE_SIZE),
                unread,
                "presume {presume}"
            );
            assert_eq!(view.huge_mapped(0), unread, "presume {presume}");
        }
    }
}
