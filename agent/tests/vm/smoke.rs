//! The VM is the machine the suite needs: two nodes in two memory tiers and a free DAMON
//! with virtual-address operations. If this fails, every other VM result is meaningless.
use std::process::Command;

use crate::support;

#[test]
fn vm_has_two_nodes_in_two_tiers_and_free_damon_vaddr() {
    if support::skip_unless_vm("vm_has_two_nodes_in_two_tiers_and_free_damon_vaddr") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("smoke");
    let output = Command::new(support::memtide_bin())
        .args(["probe", "--json"])
        .output()
        .expect("run memtide probe --json");
    assert!(
        output.status.success(),
        "memtide probe failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let probe: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("probe --json prints one JSON object");
    eprintln!(
        "{}",
        serde_json::to_string_pretty(&probe).unwrap_or_default()
    );

    let nodes = probe["numa_nodes"].as_array().expect("numa_nodes array");
    assert_eq!(nodes.len(), 2, "two NUMA nodes expected: {nodes:?}");
    let cpus_of = |id: u64| {
        nodes
            .iter()
            .find(|node| node["id"] == id)
            .and_then(|node| node["cpus"].as_array())
            .map_or(0, Vec::len)
    };
    assert!(cpus_of(0) > 0, "node 0 carries the CPUs");
    assert_eq!(cpus_of(1), 0, "node 1 is CPU-less");
    let tier_of = |id: u64| {
        nodes
            .iter()
            .find(|node| node["id"] == id)
            .and_then(|node| node["tier"].as_u64())
    };
    let (fast, slow) = (tier_of(0), tier_of(1));
    assert!(
        fast.is_some() && slow.is_some() && fast < slow,
        "node 1 must sit in a lower memory tier than node 0 (HMAT): tiers {fast:?} / {slow:?}"
    );

    let damon = &probe["damon"];
    assert_eq!(damon["present"], true, "DAMON sysfs present");
    let operations: Vec<&str> = damon["operations"]
        .as_array()
        .expect("damon.operations array")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    assert!(
        operations.contains(&"vaddr") && operations.contains(&"paddr"),
        "DAMON must offer vaddr and paddr: {operations:?}"
    );
    assert_eq!(damon["busy"], false, "no kdamond runs in the fresh guest");
    assert_eq!(probe["bpf"], true, "BPF loads in the guest");
}
