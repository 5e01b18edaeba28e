//! Where a target's pages are accessed from (#18 point 3): per 2 MiB superpage, the node of
//! the CPUs whose samples touched it, and from that, on a machine with more than one fast or
//! slow node, the node each move goes to: promotions to the fast node local to the accessors,
//! demotions to the nearest slow node with room.
//!
//! Each superpage keeps one vote (a majority vote in the Boyer-Moore way: the same node adds its
//! weight, another takes it away and, at zero, takes the vote), so memory stays one small entry
//! per recently sampled superpage whatever the number of nodes. Votes halve at every epoch: once
//! a thread has moved to the other socket, the promotions of its pages go there within a few
//! epochs. Pages already in the first socket's DRAM stay there: the planner moves pages
//! between tiers, not between fast nodes.

use std::collections::BTreeMap;

use memtide_core::units::{Direction, SUPERPAGE_SHIFT};
use memtide_host::{
    exec::{MoveRequest, requests_by_node},
    topology::locality::Locality,
};

use memtide_core::policy::Plan;

/// Superpages remembered at most; a new one is not recorded while this many are.
const MAX_HOMES: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vote {
    node: u32,
    weight: u32,
}

/// The accessing node of each recently sampled superpage.
#[derive(Debug, Default)]
pub(super) struct Homes {
    votes: BTreeMap<u64, Vote>,
}

impl Homes {
    /// A sample of `addr` by a CPU of `node`.
    pub(super) fn record(&mut self, addr: u64, node: u32) {
        let superpage = addr >> SUPERPAGE_SHIFT;
        if self.votes.len() >= MAX_HOMES && !self.votes.contains_key(&superpage) {
            return;
        }
        let vote = self
            .votes
            .entry(superpage)
            .or_insert(Vote { node, weight: 0 });
        if vote.node == node {
            vote.weight = vote.weight.saturating_add(1);
        } else if vote.weight <= 1 {
            *vote = Vote { node, weight: 1 };
        } else {
            vote.weight -= 1;
        }
    }

    /// Halves every vote and forgets those at zero.
    pub(super) fn age(&mut self) {
        self.votes.retain(|_, vote| {
            vote.weight /= 2;
            vote.weight > 0
        });
    }

    /// The node whose CPUs access the superpage at `addr`, if samples said.
    pub(super) fn home(&self, addr: u64) -> Option<u32> {
        self.votes
            .get(&(addr >> SUPERPAGE_SHIFT))
            .map(|vote| vote.node)
    }

    /// The plan's moves as requests, each superpage sent where `locality` says: promotions to
    /// the fast node nearest its accessors (`fallback`, the node most of the target's threads
    /// run on, when no sample said), demotions to the nearest slow node with `slow_room` bytes
    /// left (each demotion uses the room up as it is placed; the nearest if none has room).
    pub(super) fn requests(
        &self,
        plan: &Plan,
        locality: &Locality,
        fallback: impl FnOnce() -> Option<u32>,
        mut slow_room: BTreeMap<u32, u64>,
    ) -> Vec<MoveRequest> {
        let mut fallback = Some(fallback);
        let mut fallback_node = None;
        requests_by_node(plan, |superpage, bytes, direction| {
            let accessors = self.home(superpage).or_else(|| {
                if let Some(read) = fallback.take() {
                    fallback_node = read();
                }
                fallback_node
            });
            match direction {
                Direction::Promote => locality.fast_node_for(accessors),
                Direction::Demote => {
                    let nearest = locality.slow_nodes_for(accessors);
                    let room = |node: &u32| slow_room.get(node).copied().unwrap_or(0);
                    // The nearest with room, else the one with the most (the nearest of those):
                    // the executor stops at a node's watermark.
                    let roomy = nearest.iter().copied().find(|node| room(node) >= bytes);
                    let node = roomy.unwrap_or_else(|| {
                        nearest
                            .iter()
                            .copied()
                            .rev()
                            .max_by_key(|node| room(node))
                            .unwrap_or(nearest[0])
                    });
                    if let Some(room) = slow_room.get_mut(&node) {
                        *room = room.saturating_sub(bytes);
                    }
                    node
                }
            }
        })
    }
}

/// The node most of `cpus` belong to (ties: the lower node id).
pub(super) fn busiest_node(cpus: &[u32], locality: &Locality) -> Option<u32> {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for node in cpus.iter().filter_map(|&cpu| locality.node_of_cpu(cpu)) {
        *counts.entry(node).or_insert(0) += 1;
    }
    counts
        .into_iter()
        .max_by_key(|&(node, count)| (count, std::cmp::Reverse(node)))
        .map(|(node, _)| node)
}

#[cfg(test)]
mod tests {
    use memtide_config::TierOverride;
    use memtide_core::{
        policy::{MoveReason, PlannedMove},
        units::{Granularity, SUPERPAGE_SIZE},
    };
    use memtide_host::{exec::TierNodes, sysfs::HostRoot, topology::tiering::TieredTopology};

    use super::*;

    /// The fixture's machine: two sockets (nodes 0 and 1) and a CXL node (2) behind socket 0.
    fn locality() -> Locality {
        let root = HostRoot::new(
            std::path::Path::new(memtide_host::FIXTURES).join("topology/cxl-cpuless"),
        );
        let tiered = TieredTopology::read(&root, &TierOverride::default()).unwrap();
        assert_eq!(
            (
                tiered.classes.nodes.fast.clone(),
                tiered.classes.nodes.slow.clone()
            ),
            (vec![0, 1], vec![2])
        );
        Locality::new(&tiered, TierNodes { fast: 0, slow: 2 }).expect("two fast nodes")
    }

    fn promote(superpages: std::ops::Range<u64>) -> PlannedMove {
        PlannedMove {
            start: superpages.start * SUPERPAGE_SIZE,
            len: (superpages.end - superpages.start) * SUPERPAGE_SIZE,
            direction: Direction::Promote,
            granularity: Granularity::MIB_2,
            reason: MoveReason::Hot,
            expected_benefit: 1.0,
        }
    }

    #[test]
    fn pages_go_to_the_dram_of_the_socket_whose_cpus_access_them() {
        let locality = locality();
        let cpu_of = |node: u32| {
            (0..256)
                .find(|&cpu| locality.node_of_cpu(cpu) == Some(node))
                .expect("a CPU on the node")
        };
        let mut homes = Homes::default();
        // Superpage 0: socket 0's CPUs; 1: mostly socket 1's; 2: nobody sampled it.
        homes.record(0x10, locality.node_of_cpu(cpu_of(0)).unwrap());
        for _ in 0..3 {
            homes.record(SUPERPAGE_SIZE + 0x40, 1);
        }
        homes.record(SUPERPAGE_SIZE + 0x80, 0);
        assert_eq!(
            (
                homes.home(0),
                homes.home(SUPERPAGE_SIZE),
                homes.home(2 * SUPERPAGE_SIZE)
            ),
            (Some(0), Some(1), None)
        );
        let plan = Plan {
            moves: vec![promote(0..3)],
            ..Plan::default()
        };
        let nodes = |fallback| -> Vec<(u64, u32)> {
            homes
                .requests(&plan, &locality, || fallback, BTreeMap::new())
                .iter()
                .map(|r| (r.len / SUPERPAGE_SIZE, r.to_node))
                .collect()
        };
        // The unsampled superpage follows the target's threads, else the default node.
        assert_eq!(nodes(Some(1)), [(1, 0), (2, 1)]);
        assert_eq!(nodes(None), [(1, 0), (1, 1), (1, 0)]);
        // Threads are read only when a superpage has no vote.
        let voted = Plan {
            moves: vec![promote(0..2)],
            ..Plan::default()
        };
        let requests = homes.requests(&voted, &locality, || unreachable!(), BTreeMap::new());
        assert_eq!(requests.len(), 2);
        // Ageing forgets a vote in a few epochs.
        homes.age();
        homes.age();
        assert_eq!(homes.home(0), None);
        assert_eq!(
            homes.home(SUPERPAGE_SIZE),
            None,
            "2 votes net, halved twice"
        );
    }

    #[test]
    fn the_node_most_threads_run_on_is_the_fallback() {
        let locality = locality();
        let known = &locality;
        let on = |node: u32| (0..256).filter(move |&cpu| known.node_of_cpu(cpu) == Some(node));
        let cpus: Vec<u32> = on(1).take(2).chain(on(0).take(1)).collect();
        assert_eq!(busiest_node(&cpus, &locality), Some(1));
        assert_eq!(busiest_node(&[], &locality), None);
    }
}
