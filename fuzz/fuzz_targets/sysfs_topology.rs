//! The sysfs/procfs readers behind `memtide probe` and the daemon's tier view:
//! `Topology::read`, `read_node_attrs`, `classify`, `node_costs`, `MmSettings::read`, `HotplugWatch`
//! (`agent/host/src/topology/`), the list and number helpers of `agent/host/src/sysfs.rs`, and
//! `Probe::collect` (`agent/host/src/probe/`, which adds the PMU and DAMON readers).
//!
//! The input is split at NUL bytes into the files of a small machine tree (node list, two
//! nodes' cpulist/meminfo/distance/HMAT attributes, two memory tiers, THP/NUMA-balancing/
//! demotion settings, a PMU, a kdamond; see `memtide_fuzz::SYSFS_FILES`); a part that is the
//! single byte 0xff leaves its file out. A final part `FAST|SLOW` (two node lists) is the tier
//! override handed to `classify`; those two lists also go through `parse_nodelist` →
//! `format_list` → `parse_nodelist`, which must give them back unchanged.
//!
//! Properties: every error names a file inside the tree; nodes are sorted by id without
//! duplicates and each carries the tier whose list holds it; the classification partitions the
//! nodes with memory into disjoint fast and slow sets; the hot-plug watch reports a change on
//! its first call and none on a second over the same files; `Probe::collect` never fails and
//! reports the same nodes `Topology::read` found; its table and JSON render.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use memtide_config::TierOverride;
use memtide_fuzz::SysfsTree;
use memtide_host::{
    probe::{BpfStatus, Probe},
    sysfs::{self, HostRoot, SysfsError},
    topology::{
        MmSettings, Topology, costs,
        tiering::{self, HotplugWatch},
    },
};

fn check_error(root: &HostRoot, error: &SysfsError) {
    assert!(
        error.path().starts_with(root.root()),
        "error outside the tree: {error}"
    );
}

/// A node list, checking on the way that the kernel's compact form of it reads back the same.
fn node_list(text: &str) -> Vec<u32> {
    let Ok(list) = sysfs::parse_nodelist(text) else {
        return Vec::new();
    };
    assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?} unsorted");
    let compact = sysfs::format_list(&list);
    assert_eq!(
        sysfs::parse_nodelist(&compact).as_ref(),
        Ok(&list),
        "{compact:?}"
    );
    list
}

fn override_from(text: &[u8]) -> TierOverride {
    let text = String::from_utf8_lossy(text);
    let (fast, slow) = text.split_once('|').unwrap_or((&text, ""));
    TierOverride {
        fast_nodes: node_list(fast),
        slow_nodes: node_list(slow),
        costs: Vec::new(),
    }
}

fn check_topology(topology: &Topology, over: &TierOverride, root: &HostRoot) {
    assert!(!topology.nodes.is_empty(), "a topology always has a node");
    assert!(
        topology.nodes.windows(2).all(|w| w[0].id < w[1].id),
        "nodes unsorted"
    );
    for node in &topology.nodes {
        let holding = topology.tiers.iter().find(|t| t.nodes.contains(&node.id));
        assert_eq!(node.tier, holding.map(|t| t.id));
    }
    let attrs = match tiering::read_node_attrs(root, topology) {
        Ok(attrs) => attrs,
        Err(e) => return check_error(root, &e),
    };
    for over in [&TierOverride::default(), over] {
        let classes = tiering::classify(topology, &attrs, over);
        let fast: BTreeSet<u32> = classes.nodes.fast.iter().copied().collect();
        let slow: BTreeSet<u32> = classes.nodes.slow.iter().copied().collect();
        assert!(fast.is_disjoint(&slow), "{classes:?}");
        let with_memory: BTreeSet<u32> = topology.nodes_with_memory().map(|n| n.id).collect();
        let all: BTreeSet<u32> = fast.union(&slow).copied().collect();
        assert_eq!(all, with_memory, "{classes:?}");
        for is_fast in [true, false] {
            if let Some(best) = classes.best_node(topology, is_fast) {
                assert!(if is_fast { &fast } else { &slow }.contains(&best));
            }
        }
        // Whatever HMAT and SLIT say, every node gets costs, and no cost is negative or NaN.
        let tiered = tiering::TieredTopology {
            topology: topology.clone(),
            attrs: attrs.clone(),
            classes,
        };
        let local = costs::LocalLatency {
            read_ns: 80.0,
            write_ns: 80.0,
        };
        let node_costs = costs::node_costs(&tiered, &over.costs, local);
        assert_eq!(node_costs.len(), topology.nodes.len(), "{node_costs:?}");
        for cost in node_costs.values() {
            let figures = [
                cost.read_latency_ns,
                cost.write_latency_ns,
                cost.read_bandwidth_bytes_per_s,
                cost.write_bandwidth_bytes_per_s,
            ];
            assert!(figures.iter().flatten().all(|v| *v >= 0.0), "{cost:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (tree, rest) = SysfsTree::write(data).expect("writing the fixture tree");
    let root = HostRoot::new(tree.root());
    let over = override_from(&rest);

    let topology = match Topology::read(&root) {
        Ok(topology) => {
            check_topology(&topology, &over, &root);
            Some(topology)
        }
        Err(e) => {
            check_error(&root, &e);
            None
        }
    };
    if let Err(e) = MmSettings::read(&root) {
        check_error(&root, &e);
    }
    let mut watch = HotplugWatch::new();
    match watch.changed(&root) {
        Ok(first) => {
            assert!(first, "the first look is a change");
            assert!(
                !watch.changed(&root).expect("read a moment ago"),
                "no change happened"
            );
        }
        Err(e) => check_error(&root, &e),
    }

    let probe = Probe::collect(
        &root,
        BpfStatus {
            available: false,
            detail: "fuzzing".to_owned(),
        },
    );
    if let Some(topology) = &topology {
        assert_eq!(&probe.numa_nodes, &topology.nodes);
        assert_eq!(&probe.memory_tiers, &topology.tiers);
    }
    let _ = probe.to_table();
    let _ = probe.has_hardware_sampling();
});
