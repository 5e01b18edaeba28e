//! Which nodes are fast and which are slow, and why.
//!
//! Inputs beyond [`Topology`]: per node the SLIT distances (`nodeN/distance`) and the ACPI HMAT
//! performance attributes of the best initiator (`nodeN/access0/initiators/{read,write}_
//! {bandwidth,latency}`, MB/s and ns, Linux 5.2+, only with HMAT firmware tables).
//!
//! Classification, first rule that separates the nodes wins:
//! 1. a configured override (`fast_nodes`, `slow_nodes`);
//! 2. kernel memory tiers, when the nodes with memory sit in more than one tier (the fastest
//!    tier is fast, the rest slow);
//! 3. HMAT read latency (or, without latency, bandwidth) when the nodes differ;
//! 4. CPU-less nodes are slow when other nodes have CPUs (CXL expanders, PMEM), with the
//!    distance to the nearest CPU node ordering several of them;
//! 5. otherwise the machine is uniform: every node is fast and there is nothing to tier.
//!
//! When the kernel has memory tiers but puts every node in one tier although rules 3–4 find a
//! slow node, the kernel's own demotion and promotion cannot tell the nodes apart: the
//! classification carries a warning for the operator (the "all nodes in one tier" case, e.g.
//! a VM or BIOS without HMAT).

use std::collections::BTreeSet;

use memtide_config::TierOverride;
use serde::Serialize;

use super::{Topology, node_sets::TierNodeSets};
use crate::sysfs::{self, HostRoot, SysfsError};

const NODE_DIR: &str = "sys/devices/system/node";

/// HMAT performance of a node as seen from its best initiator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Hmat {
    /// MB/s.
    pub read_bandwidth: Option<u64>,
    pub write_bandwidth: Option<u64>,
    /// ns.
    pub read_latency: Option<u64>,
    pub write_latency: Option<u64>,
}

/// Distances and HMAT attributes of one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeAttrs {
    pub id: u32,
    /// SLIT distance to each online node, in `online` order (10 = local).
    pub distances: Vec<u32>,
    pub hmat: Option<Hmat>,
}

/// Reads distances and HMAT of every node of `topology`.
pub fn read_node_attrs(root: &HostRoot, topology: &Topology) -> Result<Vec<NodeAttrs>, SysfsError> {
    let dir = root.path(NODE_DIR);
    topology
        .nodes
        .iter()
        .map(|node| {
            let node_dir = dir.join(format!("node{}", node.id));
            let distances = match sysfs::read_optional(&node_dir.join("distance"))? {
                None => Vec::new(),
                Some(text) => text
                    .split_whitespace()
                    .map(|d| {
                        d.parse().map_err(|_| {
                            SysfsError::parse(&node_dir.join("distance"), &text, "distances")
                        })
                    })
                    .collect::<Result<_, _>>()?,
            };
            let init = node_dir.join("access0/initiators");
            let hmat = Hmat {
                read_bandwidth: sysfs::read_parse_optional(&init.join("read_bandwidth"))?,
                write_bandwidth: sysfs::read_parse_optional(&init.join("write_bandwidth"))?,
                read_latency: sysfs::read_parse_optional(&init.join("read_latency"))?,
                write_latency: sysfs::read_parse_optional(&init.join("write_latency"))?,
            };
            let any = hmat.read_bandwidth.is_some() || hmat.read_latency.is_some();
            Ok(NodeAttrs {
                id: node.id,
                distances,
                hmat: any.then_some(hmat),
            })
        })
        .collect()
}

/// Which rule classified the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    Override,
    KernelTiers,
    Hmat,
    CpuLess,
    /// Nothing distinguishes the nodes (one node, or all alike).
    Uniform,
}

/// Fast and slow nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Classification {
    /// Flattened: `memtide probe` prints `fast` and `slow` beside `basis`, as it always has.
    #[serde(flatten)]
    pub nodes: TierNodeSets,
    pub basis: Basis,
    /// Something the operator should know (printed loudly by the daemon and `probe`).
    pub warning: Option<String>,
}

impl Classification {
    /// Whether there is a slow tier to tier into.
    #[must_use]
    pub fn can_tier(&self) -> bool {
        !self.nodes.fast.is_empty() && !self.nodes.slow.is_empty()
    }

    /// The node of `class` with the most free memory in `topology`, if any (where the executor
    /// sends moves of that tier).
    #[must_use]
    pub fn best_node(&self, topology: &Topology, fast: bool) -> Option<u32> {
        let nodes = if fast {
            &self.nodes.fast
        } else {
            &self.nodes.slow
        };
        nodes
            .iter()
            .filter_map(|id| topology.node(*id))
            .max_by_key(|n| (n.free_bytes, std::cmp::Reverse(n.id)))
            .map(|n| n.id)
    }
}

fn split(nodes: &[u32], fast: &BTreeSet<u32>, basis: Basis) -> Classification {
    Classification {
        nodes: TierNodeSets {
            fast: nodes.iter().copied().filter(|n| fast.contains(n)).collect(),
            slow: nodes
                .iter()
                .copied()
                .filter(|n| !fast.contains(n))
                .collect(),
        },
        basis,
        warning: None,
    }
}

/// Classifies the nodes with memory (see the module docs for the rules).
#[must_use]
pub fn classify(topology: &Topology, attrs: &[NodeAttrs], over: &TierOverride) -> Classification {
    let nodes: Vec<u32> = topology.nodes_with_memory().map(|n| n.id).collect();
    if !over.fast_nodes.is_empty() || !over.slow_nodes.is_empty() {
        return by_override(&nodes, over);
    }
    if nodes.len() < 2 {
        return split(&nodes, &nodes.iter().copied().collect(), Basis::Uniform);
    }

    // 2. Kernel tiers.
    let tiers: BTreeSet<u32> = topology
        .nodes_with_memory()
        .filter_map(|n| n.tier)
        .collect();
    if tiers.len() > 1 {
        let top = *tiers.first().unwrap_or(&0);
        let fast = topology
            .nodes_with_memory()
            .filter(|n| n.tier == Some(top))
            .map(|n| n.id)
            .collect();
        return split(&nodes, &fast, Basis::KernelTiers);
    }

    // 3. HMAT, else 4. CPU-less nodes.
    match by_hmat(&nodes, attrs).or_else(|| by_cpuless(topology, &nodes, attrs)) {
        Some(mut c) => {
            if tiers.len() == 1 {
                let tier = tiers.first().copied().unwrap_or(0);
                c.warning = Some(one_kernel_tier_warning(&nodes, tier, &c));
            }
            c
        }
        None => split(&nodes, &nodes.iter().copied().collect(), Basis::Uniform),
    }
}

/// Rule 1, the configured tiers: the fast nodes named, else every node not named slow.
fn by_override(nodes: &[u32], over: &TierOverride) -> Classification {
    let fast: BTreeSet<u32> = if over.fast_nodes.is_empty() {
        nodes
            .iter()
            .copied()
            .filter(|n| !over.slow_nodes.contains(n))
            .collect()
    } else {
        over.fast_nodes.iter().copied().collect()
    };
    let mut c = split(nodes, &fast, Basis::Override);
    let unknown: Vec<u32> = over
        .fast_nodes
        .iter()
        .chain(&over.slow_nodes)
        .copied()
        .filter(|n| !nodes.contains(n))
        .collect();
    if !unknown.is_empty() {
        c.warning = Some(format!(
            "configured tier nodes {unknown:?} are not online nodes with memory ({nodes:?})"
        ));
    }
    c
}

/// Rule 3, HMAT: the nodes of the lowest read latency are fast, else those of the highest
/// read bandwidth; `None` when HMAT does not cover every node or tells none apart.
fn by_hmat(nodes: &[u32], attrs: &[NodeAttrs]) -> Option<Classification> {
    let hmat_of = |id: u32| attrs.iter().find(|a| a.id == id).and_then(|a| a.hmat);
    let by_latency: Option<Vec<(u32, u64)>> = nodes
        .iter()
        .map(|&id| hmat_of(id).and_then(|h| h.read_latency).map(|l| (id, l)))
        .collect();
    let by_bandwidth: Option<Vec<(u32, u64)>> = nodes
        .iter()
        .map(|&id| {
            hmat_of(id)
                .and_then(|h| h.read_bandwidth)
                .map(|b| (id, u64::MAX - b))
        })
        .collect();
    for metric in [by_latency, by_bandwidth].into_iter().flatten() {
        let best = metric.iter().map(|&(_, v)| v).min().unwrap_or(0);
        let fast: BTreeSet<u32> = metric
            .iter()
            .filter(|&&(_, v)| v == best)
            .map(|&(id, _)| id)
            .collect();
        if fast.len() < nodes.len() {
            return Some(split(nodes, &fast, Basis::Hmat));
        }
    }
    None
}

/// Rule 4: the nodes with CPUs are fast, the CPU-less ones slow, nearest to a CPU first;
/// `None` unless there are both.
fn by_cpuless(topology: &Topology, nodes: &[u32], attrs: &[NodeAttrs]) -> Option<Classification> {
    let fast: BTreeSet<u32> = topology
        .nodes_with_memory()
        .filter(|n| !n.is_cpuless())
        .map(|n| n.id)
        .collect();
    if fast.is_empty() || fast.len() >= nodes.len() {
        return None;
    }
    let mut c = split(nodes, &fast, Basis::CpuLess);
    // Nearest CPU-less node first.
    let distance_to_cpu = |id: u32| {
        attrs.iter().find(|a| a.id == id).map_or(u32::MAX, |a| {
            topology
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| fast.contains(&n.id))
                .filter_map(|(i, _)| a.distances.get(i).copied())
                .min()
                .unwrap_or(u32::MAX)
        })
    };
    c.nodes.slow.sort_by_key(|&id| (distance_to_cpu(id), id));
    Some(c)
}

/// What to tell the operator when the kernel put every node in one memory tier, `tier`,
/// although `c` tells some apart.
fn one_kernel_tier_warning(nodes: &[u32], tier: u32, c: &Classification) -> String {
    format!(
        "all NUMA nodes {nodes:?} are in one kernel memory tier (memory_tier{tier}), \
         although {:?} look slower ({}): the kernel's demotion and tiering-mode \
         NUMA balancing cannot tell the tiers apart. memtide classifies them itself; \
         provide ACPI HMAT (or set the tier in the config) to fix the kernel's view",
        c.nodes.slow,
        match c.basis {
            Basis::Hmat => "HMAT",
            _ => "no CPUs",
        }
    )
}

/// Notices memory hotplug: a change of `node/online` or `node/has_memory` means the topology
/// must be read again.
#[derive(Clone, Debug, Default)]
pub struct HotplugWatch {
    last: Option<(Vec<u32>, Vec<u32>)>,
}

impl HotplugWatch {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// True on the first call and whenever the online or with-memory node sets changed since
    /// the previous call.
    pub fn changed(&mut self, root: &HostRoot) -> Result<bool, SysfsError> {
        let dir = root.path(NODE_DIR);
        let now = (
            sysfs::read_list_optional(&dir.join("online"))?.unwrap_or_default(),
            sysfs::read_list_optional(&dir.join("has_memory"))?.unwrap_or_default(),
        );
        let changed = self.last.as_ref() != Some(&now);
        self.last = Some(now);
        Ok(changed)
    }
}

/// Topology, attributes and classification together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TieredTopology {
    pub topology: Topology,
    pub attrs: Vec<NodeAttrs>,
    pub classes: Classification,
}

impl TieredTopology {
    /// Reads everything under `root` and classifies with `over`.
    pub fn read(root: &HostRoot, over: &TierOverride) -> Result<Self, SysfsError> {
        let topology = Topology::read(root)?;
        let attrs = read_node_attrs(root, &topology)?;
        let classes = classify(&topology, &attrs, over);
        Ok(Self {
            topology,
            attrs,
            classes,
        })
    }

    /// The fast and the slow nodes to place memory on. With no fast node (no node with memory,
    /// or an override that names none of them) every node with memory is fast and none slow,
    /// so that a placement still has nodes to go to.
    #[must_use]
    pub fn placement_tiers(&self) -> TierNodeSets {
        if self.classes.nodes.fast.is_empty() {
            TierNodeSets {
                fast: self.topology.nodes_with_memory().map(|n| n.id).collect(),
                slow: Vec::new(),
            }
        } else {
            self.classes.nodes.clone()
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;

    fn fixture(name: &str) -> HostRoot {
        HostRoot::new(Path::new(crate::FIXTURES).join("topology").join(name))
    }

    /// A fixture machine of `tests/fixtures/topology`, read and classified with no override.
    pub(crate) fn read(name: &str) -> TieredTopology {
        TieredTopology::read(&fixture(name), &TierOverride::default()).unwrap()
    }

    #[test]
    fn two_socket_is_uniform() {
        let t = read("two-socket");
        assert_eq!(t.attrs[0].distances, vec![10, 21]);
        assert_eq!(t.attrs[1].hmat, None);
        assert_eq!(t.classes.basis, Basis::Uniform);
        assert_eq!(
            (t.classes.nodes.fast.clone(), t.classes.nodes.slow.clone()),
            (vec![0, 1], vec![])
        );
        assert!(!t.classes.can_tier());
        assert_eq!(t.classes.warning, None);
    }

    #[test]
    fn cxl_box_uses_kernel_tiers() {
        let t = read("cxl-cpuless");
        assert_eq!(t.classes.basis, Basis::KernelTiers);
        assert_eq!(
            (t.classes.nodes.fast.clone(), t.classes.nodes.slow.clone()),
            (vec![0, 1], vec![2])
        );
        let hmat = t.attrs[2].hmat.unwrap();
        assert_eq!(
            (hmat.read_latency, hmat.read_bandwidth),
            (Some(260), Some(50_000))
        );
        assert_eq!(t.attrs[2].distances, vec![14, 24, 10]);
        assert!(t.classes.can_tier() && t.classes.warning.is_none());
        assert_eq!(
            t.classes.best_node(&t.topology, true),
            Some(1),
            "most free memory"
        );
        assert_eq!(t.classes.best_node(&t.topology, false), Some(2));
    }

    #[test]
    fn probe_json_keeps_fast_and_slow_beside_basis() {
        let t = read("cxl-cpuless");
        assert_eq!(
            serde_json::to_string(&t.classes).unwrap(),
            r#"{"fast":[0,1],"slow":[2],"basis":"kernel_tiers","warning":null}"#
        );
    }

    #[test]
    fn all_nodes_in_one_tier_warns_loudly() {
        let t = read("one-tier");
        assert_eq!(t.classes.basis, Basis::CpuLess);
        assert_eq!(
            (t.classes.nodes.fast.clone(), t.classes.nodes.slow.clone()),
            (vec![0], vec![1])
        );
        let warning = t.classes.warning.expect("warning");
        assert!(
            warning.contains("one kernel memory tier") && warning.contains("memory_tier4"),
            "{warning}"
        );
    }

    #[test]
    fn the_vm() {
        let t = read("vm-hmat");
        assert_eq!(t.classes.basis, Basis::KernelTiers);
        assert_eq!(
            (t.classes.nodes.fast.clone(), t.classes.nodes.slow.clone()),
            (vec![0], vec![1])
        );
        assert_eq!(t.topology.node(1).unwrap().tier, Some(54));
        assert!(t.topology.node(1).unwrap().is_cpuless());
    }

    #[test]
    fn hmat_decides_when_tiers_do_not() {
        let root = fixture("cxl-cpuless");
        let mut topology = Topology::read(&root).unwrap();
        for node in &mut topology.nodes {
            node.tier = Some(4);
        }
        let attrs = read_node_attrs(&root, &topology).unwrap();
        let c = classify(&topology, &attrs, &TierOverride::default());
        assert_eq!(
            (c.basis, c.nodes.fast.clone(), c.nodes.slow.clone()),
            (Basis::Hmat, vec![0, 1], vec![2])
        );
        assert!(c.warning.is_some());
        // Without tiers at all (pre-6.1 kernel): HMAT still decides, without a warning.
        for node in &mut topology.nodes {
            node.tier = None;
        }
        let c = classify(&topology, &attrs, &TierOverride::default());
        assert_eq!(c.basis, Basis::Hmat);
        assert!(c.warning.is_none());
    }

    #[test]
    fn override_wins() {
        let root = fixture("two-socket");
        let over = TierOverride {
            slow_nodes: vec![1],
            ..TierOverride::default()
        };
        let t = TieredTopology::read(&root, &over).unwrap();
        assert_eq!(
            (t.classes.basis, t.classes.nodes.fast, t.classes.nodes.slow),
            (Basis::Override, vec![0], vec![1])
        );
        let over = TierOverride {
            fast_nodes: vec![0, 7],
            ..TierOverride::default()
        };
        let t = TieredTopology::read(&root, &over).unwrap();
        assert!(t.classes.warning.unwrap().contains("[7]"));
    }

    #[test]
    fn with_no_fast_node_every_node_is_fast_for_placement() {
        let t = read("cxl-cpuless");
        assert_eq!(
            t.placement_tiers(),
            TierNodeSets {
                fast: vec![0, 1],
                slow: vec![2]
            }
        );
        // Every node named slow: nothing is left fast, so nothing is slow to a placement.
        let over = TierOverride {
            slow_nodes: vec![0, 1, 2],
            ..TierOverride::default()
        };
        let t = TieredTopology::read(&fixture("cxl-cpuless"), &over).unwrap();
        assert!(t.classes.nodes.fast.is_empty());
        assert_eq!(
            t.placement_tiers(),
            TierNodeSets {
                fast: vec![0, 1, 2],
                slow: vec![]
            }
        );
    }

    #[test]
    fn hotplug_watch_sees_online_changes() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("sys/devices/system/node");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(node.join("online"), "0\n").unwrap();
        std::fs::write(node.join("has_memory"), "0\n").unwrap();
        let root = HostRoot::new(dir.path());
        let mut watch = HotplugWatch::new();
        assert!(watch.changed(&root).unwrap());
        assert!(!watch.changed(&root).unwrap());
        std::fs::write(node.join("online"), "0-1\n").unwrap();
        std::fs::write(node.join("has_memory"), "0-1\n").unwrap();
        assert!(watch.changed(&root).unwrap());
        assert!(!watch.changed(&root).unwrap());
        std::fs::write(node.join("has_memory"), "0\n").unwrap();
        assert!(watch.changed(&root).unwrap(), "memory offlined");
    }
}
