//! What it costs to access each node's memory, for the planner (Rainbow's Eq. 1 needs read and
//! write latencies, BW-AWARE the bandwidths) and for the operator (`memtide status`, metrics).
//!
//! Each field of each node comes from the first source that has it:
//! 1. `[[topology.costs]]` in the configuration (firmware that lies, or none at all);
//! 2. HMAT: `nodeN/access0/initiators/{read,write}_{latency,bandwidth}` (ns and MB/s, Linux 5.2+,
//!    from the firmware's HMAT table), the node as seen from its best initiator;
//! 3. SLIT: ACPI defines a distance as a latency relative to a node's own (10), so a node at
//!    distance `d` from the nearest node with CPUs costs `d / 10` times a local access. The
//!    local read and write latencies are the planner's defaults for the fast tier
//!    (`[engine.policy.benefit] fast_read_ns`, `fast_write_ns`). SLIT says nothing of
//!    bandwidth.
//!
//! A field no source has stays unknown, and the planner uses its configured default for it.

use std::collections::BTreeMap;

use memtide_config::NodeCostOverride;
use serde::{Deserialize, Serialize};

use super::tiering::{Hmat, TieredTopology};

/// Where a node's costs came from (the most trusted source that gave any field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    Config,
    Hmat,
    Slit,
    /// Nothing known: the planner's defaults apply.
    Default,
}

impl CostSource {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Hmat => "hmat",
            Self::Slit => "slit",
            Self::Default => "default",
        }
    }
}

/// What accessing one node's memory costs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeCost {
    pub node: u32,
    pub read_latency_ns: Option<f64>,
    pub write_latency_ns: Option<f64>,
    pub read_bandwidth_bytes_per_s: Option<f64>,
    pub write_bandwidth_bytes_per_s: Option<f64>,
    pub source: CostSource,
}

/// The latencies a local access costs, for the SLIT model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalLatency {
    pub read_ns: f64,
    pub write_ns: f64,
}

/// Every node's costs, by node id.
#[must_use]
pub fn node_costs(
    tiered: &TieredTopology,
    overrides: &[NodeCostOverride],
    local: LocalLatency,
) -> BTreeMap<u32, NodeCost> {
    let cpu_positions: Vec<usize> = tiered
        .topology
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| !node.cpus.is_empty())
        .map(|(position, _)| position)
        .collect();
    tiered
        .topology
        .nodes
        .iter()
        .enumerate()
        .map(|(position, node)| {
            // Distance from the nearest node with CPUs: node `c`'s row, column `position`.
            let slit = cpu_positions
                .iter()
                .filter_map(|&c| {
                    let row = &tiered.attrs.get(c)?.distances;
                    row.get(position).copied()
                })
                .min()
                .filter(|&d| d >= 10)
                .map(|d| f64::from(d) / 10.0);
            let cost = NodeCost::chosen(
                node.id,
                overrides.iter().find(|o| o.node == node.id),
                tiered
                    .attrs
                    .iter()
                    .find(|a| a.id == node.id)
                    .and_then(|a| a.hmat),
                slit.map(|ratio| (ratio * local.read_ns, ratio * local.write_ns)),
            );
            (node.id, cost)
        })
        .collect()
}

impl NodeCost {
    /// Node `node`'s costs, each from the first that knows it: the configuration (`over`), the
    /// firmware (`hmat`), the SLIT model's read and write latencies (`slit`). `source` names
    /// the least trusted of those used.
    fn chosen(
        node: u32,
        over: Option<&NodeCostOverride>,
        hmat: Option<Hmat>,
        slit: Option<(f64, f64)>,
    ) -> Self {
        let mut source = CostSource::Default;
        let mut pick = |config: Option<u64>, firmware: Option<u64>, model: Option<f64>| {
            let (value, from) = if let Some(v) = config {
                (Some(v as f64), CostSource::Config)
            } else if let Some(v) = firmware {
                (Some(v as f64), CostSource::Hmat)
            } else if let Some(v) = model {
                (Some(v), CostSource::Slit)
            } else {
                (None, CostSource::Default)
            };
            source = source.min(from);
            value
        };
        let read_latency_ns = pick(
            over.and_then(|o| o.read_latency_ns),
            hmat.and_then(|h| h.read_latency),
            slit.map(|(read, _)| read),
        );
        let write_latency_ns = pick(
            over.and_then(|o| o.write_latency_ns),
            hmat.and_then(|h| h.write_latency),
            slit.map(|(_, write)| write),
        );
        let read_bandwidth_bytes_per_s = pick(
            over.and_then(|o| o.read_bandwidth_mbps),
            hmat.and_then(|h| h.read_bandwidth),
            None,
        )
        .map(|mbps| mbps * 1e6);
        let write_bandwidth_bytes_per_s = pick(
            over.and_then(|o| o.write_bandwidth_mbps),
            hmat.and_then(|h| h.write_bandwidth),
            None,
        )
        .map(|mbps| mbps * 1e6);
        Self {
            node,
            read_latency_ns,
            write_latency_ns,
            read_bandwidth_bytes_per_s,
            write_bandwidth_bytes_per_s,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tiering::tests::read;

    const LOCAL: LocalLatency = LocalLatency {
        read_ns: 80.0,
        write_ns: 80.0,
    };

    #[test]
    fn hmat_gives_latencies_and_bandwidths() {
        let costs = node_costs(&read("vm-hmat"), &[], LOCAL);
        let slow = costs.values().find(|c| c.node != 0).unwrap();
        assert_eq!(slow.source, CostSource::Hmat, "{costs:?}");
        let fast = &costs[&0];
        assert!(fast.read_latency_ns < slow.read_latency_ns, "{costs:?}");
        assert!(slow.read_bandwidth_bytes_per_s.is_some(), "{costs:?}");
    }

    #[test]
    fn slit_scales_the_local_latency_and_knows_no_bandwidth() {
        let costs = node_costs(&read("two-socket"), &[], LOCAL);
        assert_eq!(costs[&0].source, CostSource::Slit);
        assert_eq!(costs[&0].read_latency_ns, Some(80.0));
        // Both nodes have CPUs: each is local to its own.
        assert_eq!(costs[&1].read_latency_ns, Some(80.0));
        assert_eq!(costs[&1].read_bandwidth_bytes_per_s, None);
        // A CPU-less node at distance 20 from the one with CPUs: twice a local access.
        let cpuless = node_costs(&read("one-tier"), &[], LOCAL);
        assert_eq!(cpuless[&1].source, CostSource::Slit, "{cpuless:?}");
        assert_eq!(cpuless[&1].read_latency_ns, Some(160.0));
    }

    #[test]
    fn the_configuration_wins_field_by_field() {
        let over = [NodeCostOverride {
            node: 2,
            read_latency_ns: Some(400),
            write_bandwidth_mbps: Some(1000),
            ..NodeCostOverride::default()
        }];
        let costs = node_costs(&read("cxl-cpuless"), &over, LOCAL);
        let far = &costs[&2];
        assert_eq!(far.source, CostSource::Config);
        assert_eq!(far.read_latency_ns, Some(400.0));
        assert_eq!(far.write_bandwidth_bytes_per_s, Some(1e9));
        // What the configuration leaves out still comes from the machine (HMAT here).
        assert_eq!(far.write_latency_ns, Some(270.0));
    }
}
