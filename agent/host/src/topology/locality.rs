//! Where a page goes on a machine with more than one fast or slow node (#18 point 3): the fast
//! node local to the CPUs that access it, and the slow node nearest to it with room. Two
//! sockets with a CXL expander behind each have two fast and two slow nodes; promoting a
//! thread's data to the other socket's DRAM costs it a remote access on every use.
//!
//! Nearness is the firmware's SLIT distance (`nodeN/distance`), the only full node-to-node
//! matrix Linux exposes; ties go to the lower node id.

use std::collections::BTreeMap;

use super::tiering::TieredTopology;
use crate::exec::TierNodes;

/// The nodes of each tier, ordered by nearness from each node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locality {
    /// The node of each CPU.
    cpu_node: BTreeMap<u32, u32>,
    /// From each node, the fast nodes, nearest first.
    fast_from: BTreeMap<u32, Vec<u32>>,
    /// From each node, the slow nodes, nearest first.
    slow_from: BTreeMap<u32, Vec<u32>>,
    /// Where moves go when nothing says where the accesses come from.
    default: TierNodes,
}

impl Locality {
    /// The locality of `tiered`, falling back to `default`. `None` when each tier has one node
    /// at most: then every promotion and demotion has one place to go.
    #[must_use]
    pub fn new(tiered: &TieredTopology, default: TierNodes) -> Option<Self> {
        let classes = &tiered.classes;
        if classes.nodes.fast.len() < 2 && classes.nodes.slow.len() < 2 {
            return None;
        }
        let nodes = &tiered.topology.nodes;
        let distance = |from: u32, to: u32| -> u32 {
            let position = nodes.iter().position(|n| n.id == to);
            tiered
                .attrs
                .iter()
                .find(|a| a.id == from)
                .and_then(|a| a.distances.get(position?).copied())
                .unwrap_or(if from == to { 10 } else { u32::MAX })
        };
        let nearest_first = |from: u32, candidates: &[u32]| {
            let mut sorted = candidates.to_vec();
            sorted.sort_by_key(|&to| (distance(from, to), to));
            sorted
        };
        let cpu_node = nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |&cpu| (cpu, n.id)))
            .collect();
        let fast_from = nodes
            .iter()
            .map(|n| (n.id, nearest_first(n.id, &classes.nodes.fast)))
            .collect();
        let slow_from = nodes
            .iter()
            .map(|n| (n.id, nearest_first(n.id, &classes.nodes.slow)))
            .collect();
        Some(Self {
            cpu_node,
            fast_from,
            slow_from,
            default,
        })
    }

    /// The node of `cpu`.
    #[must_use]
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpu_node.get(&cpu).copied()
    }

    /// The fast node nearest to `initiator` (the node of the CPUs that access the page).
    #[must_use]
    pub fn fast_node_for(&self, initiator: Option<u32>) -> u32 {
        initiator
            .and_then(|node| self.fast_from.get(&node)?.first().copied())
            .unwrap_or(self.default.fast)
    }

    /// The slow nodes nearest to `from` first (the node the page is on, or its accessors').
    #[must_use]
    pub fn slow_nodes_for(&self, from: Option<u32>) -> Vec<u32> {
        from.and_then(|node| self.slow_from.get(&node).cloned())
            .filter(|nodes| !nodes.is_empty())
            .unwrap_or_else(|| vec![self.default.slow])
    }

    /// Where moves go when nothing says where the accesses come from.
    #[must_use]
    pub fn default_nodes(&self) -> TierNodes {
        self.default
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{
        Node, Topology,
        node_sets::TierNodeSets,
        tiering::{Basis, Classification, NodeAttrs},
    };

    /// Two sockets (nodes 0 and 1, CPUs 0-1 and 2-3), a CPU-less slow node behind each
    /// (2 behind 0, 3 behind 1).
    fn two_sockets() -> TieredTopology {
        let node = |id: u32, cpus: Vec<u32>| Node {
            id,
            cpus,
            memory_bytes: 1 << 30,
            free_bytes: 1 << 29,
            tier: None,
        };
        let attrs = |id: u32, distances: Vec<u32>| NodeAttrs {
            id,
            distances,
            hmat: None,
        };
        TieredTopology {
            topology: Topology {
                nodes: vec![
                    node(0, vec![0, 1]),
                    node(1, vec![2, 3]),
                    node(2, vec![]),
                    node(3, vec![]),
                ],
                tiers: Vec::new(),
                numa_sysfs: true,
            },
            attrs: vec![
                attrs(0, vec![10, 21, 14, 24]),
                attrs(1, vec![21, 10, 24, 14]),
                attrs(2, vec![14, 24, 10, 26]),
                attrs(3, vec![24, 14, 26, 10]),
            ],
            classes: Classification {
                nodes: TierNodeSets {
                    fast: vec![0, 1],
                    slow: vec![2, 3],
                },
                basis: Basis::CpuLess,
                warning: None,
            },
        }
    }

    #[test]
    fn promotions_go_to_the_accessors_socket_and_demotions_behind_it() {
        let default = TierNodes { fast: 0, slow: 2 };
        let locality = Locality::new(&two_sockets(), default).expect("two nodes per tier");
        assert_eq!(locality.node_of_cpu(3), Some(1));
        assert_eq!(locality.node_of_cpu(9), None);
        assert_eq!(locality.fast_node_for(Some(1)), 1);
        assert_eq!(locality.fast_node_for(Some(0)), 0);
        // From the slow node behind socket 1, its own socket's DRAM.
        assert_eq!(locality.fast_node_for(Some(3)), 1);
        assert_eq!(locality.fast_node_for(None), 0);
        assert_eq!(locality.slow_nodes_for(Some(1)), [3, 2]);
        assert_eq!(locality.slow_nodes_for(Some(0)), [2, 3]);
        assert_eq!(locality.slow_nodes_for(None), [2]);
    }

    #[test]
    fn one_node_per_tier_needs_no_locality() {
        let mut tiered = two_sockets();
        tiered.classes.nodes.fast = vec![0];
        tiered.classes.nodes.slow = vec![2];
        assert_eq!(Locality::new(&tiered, TierNodes { fast: 0, slow: 2 }), None);
    }
}
