//! `[topology]`: which NUMA nodes are fast and which slow, and what their accesses cost, where
//! the operator knows better than the machine's firmware. The host's classifier
//! (`memtide_host::topology::tiering`) and cost reader apply them.

use serde::{Deserialize, Serialize};

use crate::Problem;

/// A configured classification; empty lists mean "decide from the machine".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TierOverride {
    pub fast_nodes: Vec<u32>,
    pub slow_nodes: Vec<u32>,
    /// Access costs of nodes, overriding HMAT and SLIT field by field, one table per node:
    /// `[[topology.costs]]` with `node`, `read_latency_ns`, `write_latency_ns`,
    /// `read_bandwidth_mbps`, `write_bandwidth_mbps` (each optional but `node`).
    pub costs: Vec<NodeCostOverride>,
}

/// A node's costs as configured (`[[topology.costs]]`); every field optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeCostOverride {
    pub node: u32,
    pub read_latency_ns: Option<u64>,
    pub write_latency_ns: Option<u64>,
    /// MB/s (10^6 bytes), as HMAT reports it.
    pub read_bandwidth_mbps: Option<u64>,
    pub write_bandwidth_mbps: Option<u64>,
}

impl TierOverride {
    /// What cannot work: a node both fast and slow, a cost of 0 or given twice, and, when the
    /// machine's NUMA node ids are known, a node it does not have.
    pub(crate) fn problems(&self, machine_nodes: Option<&[u32]>) -> Vec<Problem> {
        let mut problems = Vec::new();
        let both: Vec<u32> = self
            .fast_nodes
            .iter()
            .filter(|node| self.slow_nodes.contains(node))
            .copied()
            .collect();
        if !both.is_empty() {
            problems.push(Problem::new(
                "topology.fast_nodes",
                format!("nodes {both:?} are listed as both fast and slow"),
            ));
        }
        let cost_nodes: Vec<u32> = self.costs.iter().map(|c| c.node).collect();
        for cost in &self.costs {
            problems.extend(cost.problems(&cost_nodes));
        }
        if let Some(known) = machine_nodes {
            for (key, nodes) in [
                ("topology.fast_nodes", &self.fast_nodes),
                ("topology.slow_nodes", &self.slow_nodes),
                ("topology.costs", &cost_nodes),
            ] {
                problems.extend(
                    nodes
                        .iter()
                        .filter(|node| !known.contains(node))
                        .map(|node| {
                            Problem::new(
                                key,
                                format!(
                                    "node {node} does not exist on this machine (nodes: {known:?})"
                                ),
                            )
                        }),
                );
            }
        }
        problems
    }
}

impl NodeCostOverride {
    /// A latency or bandwidth of 0, and a node that `cost_nodes` (every entry's) has twice.
    fn problems(&self, cost_nodes: &[u32]) -> Vec<Problem> {
        let mut problems = Vec::new();
        let values = [
            self.read_latency_ns,
            self.write_latency_ns,
            self.read_bandwidth_mbps,
            self.write_bandwidth_mbps,
        ];
        if values.contains(&Some(0)) {
            problems.push(Problem::new(
                "topology.costs",
                format!(
                    "node {}: a latency or bandwidth of 0 means nothing; leave the field out to use HMAT or SLIT",
                    self.node
                ),
            ));
        }
        if cost_nodes.iter().filter(|&&n| n == self.node).count() > 1 {
            problems.push(Problem::new(
                "topology.costs",
                format!(
                    "node {} has more than one [[topology.costs]] entry",
                    self.node
                ),
            ));
        }
        problems
    }
}
