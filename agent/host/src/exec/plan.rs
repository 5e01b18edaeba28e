//! Glue between the planner (`policy`) and the executor: a `Plan`'s moves become
//! [`MoveRequest`]s for concrete nodes, and a queried [`TierPlacement`] is the planner's
//! `PlacementView`. The only file of `exec`/`targets` that depends on `policy`.

use memtide_core::{
    policy::{PlacementView, Plan, PlannedMove},
    units::{Direction, Residency, SUBPAGES, Tier},
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

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        self.for_each_fast_run(visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mempolicy::PageStatus;
    use memtide_core::policy::MoveReason;
    use memtide_core::units::Granularity;

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
                    granularity: 2 << 20,
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
}
