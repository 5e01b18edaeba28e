//! The machine-description readers against fixture trees of four machine shapes:
//! `intel-spr-pebs` (two-socket Sapphire Rapids, PEBS), `amd-zen4-ibs` (Genoa, IBS),
//! `cxl-two-tier` (DRAM node + CPU-less CXL node in a slower tier) and `vm-single-node` (the
//! development machine: no hardware PMU, one node, DAMON paddr-only and busy).

use std::{
    fs,
    path::{Path, PathBuf},
};

use memtide_config::SourceKind;
use memtide_host::{
    probe::{
        BpfStatus, Probe,
        damon::{DamonStatus, KdamondState, OpsProbe},
        pmu::{ConfigWord, EventSpec, PmuScan},
        sources::{MemSampling, classify},
    },
    sysfs::HostRoot,
    topology::{MemoryTier, MmSettings, Node, ThpMode, Topology},
};

/// A machine of this crate's `tests/fixtures/machines` (what `memtide_host::FIXTURES` names for
/// the crates above; an integration test of this crate builds it without the feature).
fn fixture(name: &str) -> HostRoot {
    HostRoot::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines")
            .join(name),
    )
}

fn bpf_ok() -> BpfStatus {
    BpfStatus {
        available: true,
        detail: "test".to_owned(),
    }
}

const GIB_KB: u64 = 1024;

fn names(pmus: &PmuScan) -> Vec<&str> {
    pmus.pmus.iter().map(|p| p.name.as_str()).collect()
}

#[test]
fn intel_spr_pebs_pmus() {
    let scan = PmuScan::read(&fixture("intel-spr-pebs")).unwrap();
    assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    assert_eq!(
        names(&scan),
        [
            "breakpoint",
            "cpu",
            "kprobe",
            "msr",
            "power",
            "software",
            "tracepoint",
            "uncore_imc_0",
            "uprobe"
        ]
    );
    let cpu = scan.get("cpu").unwrap();
    assert_eq!(cpu.perf_type, 4);
    assert_eq!(cpu.formats["ldlat"].to_string(), "config1:0-15");
    // Side files (.scale, .unit) are not events.
    assert!(cpu.has_event("topdown-retiring"));
    assert!(!cpu.events.keys().any(|k| k.contains('.')));
    assert_eq!(
        classify(&scan.pmus),
        vec![MemSampling::Pebs {
            pmu: "cpu".to_owned(),
            perf_type: 4,
            mem_loads: "event=0xcd,umask=0x1,ldlat=0x3".to_owned(),
            mem_stores: true,
            needs_aux_leader: true,
            ldlat: Some("config1:0-15".to_owned()),
        }]
    );

    // perf_event_attr words for {cpu/mem-loads-aux/, cpu/mem-loads,ldlat=64/}.
    let loads = cpu
        .encode(&cpu.events["mem-loads"], &[("ldlat", 64)])
        .unwrap();
    assert_eq!(loads.get(ConfigWord::Config), 0x01cd);
    assert_eq!(loads.get(ConfigWord::Config1), 64);
    let aux = cpu.encode(&cpu.events["mem-loads-aux"], &[]).unwrap();
    assert_eq!(aux.get(ConfigWord::Config), 0x8203);
    let stores = cpu.encode(&cpu.events["mem-stores"], &[]).unwrap();
    assert_eq!(stores.get(ConfigWord::Config), 0x02cd);
    // ldlat is 16 bits wide; a term the PMU does not know is an error, not a silent drop.
    assert!(
        cpu.encode(&cpu.events["mem-loads"], &[("ldlat", 1 << 16)])
            .is_err()
    );
    assert!(
        cpu.encode(&EventSpec::parse("bogus=1").unwrap(), &[])
            .is_err()
    );
    assert!(
        cpu.encode(&EventSpec::parse("event=0x1,umask=?").unwrap(), &[])
            .is_err()
    );
}

#[test]
fn intel_spr_pebs_topology_and_settings() {
    let root = fixture("intel-spr-pebs");
    let topo = Topology::read(&root).unwrap();
    assert_eq!(
        topo.nodes,
        vec![
            Node {
                id: 0,
                cpus: (0..32).chain(64..96).collect(),
                memory_bytes: 263_843_240 * GIB_KB,
                free_bytes: 251_208_176 * GIB_KB,
                tier: Some(4),
            },
            Node {
                id: 1,
                cpus: (32..64).chain(96..128).collect(),
                memory_bytes: 264_226_112 * GIB_KB,
                free_bytes: 259_982_540 * GIB_KB,
                tier: Some(4),
            },
        ]
    );
    assert_eq!(
        topo.tiers,
        vec![MemoryTier {
            id: 4,
            nodes: vec![0, 1]
        }]
    );
    assert_eq!(
        MmSettings::read(&root).unwrap(),
        MmSettings {
            thp: Some(ThpMode::Always),
            numa_balancing: Some(1),
            demotion_enabled: Some(false),
        }
    );
    let damon = DamonStatus::read(&root, OpsProbe::CreateIfNone).unwrap();
    assert!(!damon.present);
    assert!(
        !damon.tracepoint,
        "tracefs is mounted and has no damon events"
    );

    let probe = Probe::collect(&root, bpf_ok());
    assert!(probe.errors.is_empty(), "{:?}", probe.errors);
    assert_eq!(probe.sources, [SourceKind::Pebs, SourceKind::SwFault]);
    assert_eq!(probe.selected_source.name, Some(SourceKind::Pebs));
    assert!(
        probe
            .selected_source
            .reason
            .contains("Intel PEBS on cpu (type 4)")
    );
}

#[test]
fn amd_zen4_ibs() {
    let root = fixture("amd-zen4-ibs");
    let scan = PmuScan::read(&root).unwrap();
    assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    assert_eq!(
        classify(&scan.pmus),
        vec![MemSampling::Ibs {
            perf_type: 11,
            l3missonly: true,
            formats: vec![
                "cnt_ctl=config:19".to_owned(),
                "l3missonly=config:16".to_owned()
            ],
        }]
    );
    let ibs = scan.get("ibs_op").unwrap();
    let config = ibs
        .encode(&EventSpec::parse("cnt_ctl=1,l3missonly=1").unwrap(), &[])
        .unwrap();
    assert_eq!(config.get(ConfigWord::Config), (1 << 19) | (1 << 16));
    // AMD's split event field: event bits 8-11 go to config bits 32-35.
    let cpu = scan.get("cpu").unwrap();
    let config = cpu
        .encode(&EventSpec::parse("event=0x1c2").unwrap(), &[])
        .unwrap();
    assert_eq!(config.get(ConfigWord::Config), 0x1_0000_00c2);

    let topo = Topology::read(&root).unwrap();
    assert_eq!(
        topo.nodes,
        vec![Node {
            id: 0,
            cpus: (0..192).collect(),
            memory_bytes: 395_946_128 * GIB_KB,
            free_bytes: 380_100_220 * GIB_KB,
            tier: Some(4),
        }]
    );
    assert!(!topo.can_migrate());

    // An idle kdamond someone else configured: not busy, but not memtide's to take either.
    let damon = DamonStatus::read(&root, OpsProbe::CreateIfNone).unwrap();
    assert!(damon.present);
    assert_eq!(damon.nr_kdamonds, 1);
    assert_eq!(damon.kdamonds[0].state, KdamondState::Off);
    assert_eq!(damon.kdamonds[0].pid, None);
    assert_eq!(damon.kdamonds[0].operations.as_deref(), Some("vaddr"));
    assert_eq!(damon.operations, ["vaddr", "fvaddr", "paddr"]);
    assert!(!damon.busy());
    assert!(!damon.free_for_memtide());
    assert!(damon.tracepoint);

    let probe = Probe::collect(&root, bpf_ok());
    assert!(probe.errors.is_empty(), "{:?}", probe.errors);
    assert_eq!(probe.sources, [SourceKind::Ibs, SourceKind::SwFault]);
    assert_eq!(probe.selected_source.name, Some(SourceKind::Ibs));
    let damon_check = &probe.source_checks[3];
    assert_eq!(damon_check.kind, SourceKind::Damon);
    assert!(
        damon_check.reason.contains("idle kdamond"),
        "{}",
        damon_check.reason
    );
}

#[test]
fn cxl_two_tier() {
    let root = fixture("cxl-two-tier");
    let topo = Topology::read(&root).unwrap();
    assert_eq!(
        topo.nodes,
        vec![
            Node {
                id: 0,
                cpus: (0..56).chain(112..168).collect(),
                memory_bytes: 527_869_440 * GIB_KB,
                free_bytes: 500_123_456 * GIB_KB,
                tier: Some(4),
            },
            Node {
                id: 1,
                cpus: vec![],
                memory_bytes: 128 << 30,
                free_bytes: 134_000_000 * GIB_KB,
                tier: Some(22),
            },
        ]
    );
    assert_eq!(
        topo.tiers,
        vec![
            MemoryTier {
                id: 4,
                nodes: vec![0]
            },
            MemoryTier {
                id: 22,
                nodes: vec![1]
            }
        ]
    );
    assert!(topo.can_migrate());
    assert!(topo.node(1).unwrap().is_cpuless());
    assert_eq!(
        MmSettings::read(&root).unwrap(),
        MmSettings {
            thp: Some(ThpMode::Madvise),
            numa_balancing: Some(2),
            demotion_enabled: Some(true),
        }
    );

    // No kdamond: a read-only probe takes the operations from the kernel config.
    let damon = DamonStatus::read(&root, OpsProbe::ReadOnly).unwrap();
    assert!(damon.free_for_memtide());
    assert_eq!(damon.operations, ["vaddr", "fvaddr", "paddr"]);
    assert!(
        damon
            .operations_source
            .starts_with("kernel config /boot/config-6.12.100+deb12-amd64"),
        "{}",
        damon.operations_source
    );
    assert_eq!(
        damon.tracepoint_detail,
        "tracefs: /sys/kernel/debug/tracing/events/damon/damon_aggregated"
    );

    let probe = Probe::collect(&root, bpf_ok());
    assert!(probe.errors.is_empty(), "{:?}", probe.errors);
    assert_eq!(
        probe.sources,
        [SourceKind::Pebs, SourceKind::Damon, SourceKind::SwFault]
    );
    assert_eq!(probe.numa_nodes.len(), 2);
    let table = probe.to_table();
    assert!(table.contains("2 nodes in 2 memory tiers"), "{table}");
    assert!(table.contains("none (memory only)"), "{table}");
}

#[test]
fn vm_single_node_matches_the_development_machine() {
    let root = fixture("vm-single-node");
    let probe = Probe::collect(&root, bpf_ok());
    assert!(probe.errors.is_empty(), "{:?}", probe.errors);
    assert_eq!(probe.kernel, "6.18.44-fc-v595");
    assert_eq!(
        probe.pmus,
        ["breakpoint", "msr", "software", "tracepoint", "uprobe"]
    );
    assert!(!probe.has_hardware_sampling());
    assert!(probe.damon.present);
    assert_eq!(probe.damon.operations, ["paddr"]);
    assert!(probe.damon.busy);
    assert_eq!(probe.damon.busy_kdamonds, [77]);
    assert!(probe.damon.tracepoint, "{}", probe.damon.tracepoint_detail);
    assert_eq!(
        probe.damon.tracepoint_detail,
        "kernel symbols (tracefs not mounted)"
    );
    assert_eq!(
        probe.numa_nodes,
        vec![Node {
            id: 0,
            cpus: vec![0, 1],
            memory_bytes: 6_777_048 * GIB_KB,
            free_bytes: 4_213_660 * GIB_KB,
            tier: Some(4),
        }]
    );
    assert_eq!(
        probe.memory_tiers,
        vec![MemoryTier {
            id: 4,
            nodes: vec![0]
        }]
    );
    assert_eq!(probe.thp, Some(ThpMode::Madvise));
    assert_eq!(probe.numa_balancing, Some(0));
    assert_eq!(probe.demotion_enabled, Some(false));
    assert_eq!(probe.sources, [SourceKind::SwFault]);
    assert_eq!(probe.selected_source.name, Some(SourceKind::SwFault));
    assert_eq!(
        probe.selected_source.reason,
        "no hardware PMU; DAMON busy (kdamond pid 77 started by someone else), has no vaddr \
         (only paddr); using software page faults"
    );
    let table = probe.to_table();
    for needle in [
        "none (no hardware PMU with PEBS, IBS or SPE)",
        "one NUMA node: nothing to migrate to",
        "BUSY: kdamond pid 77",
        "memory_tier4: nodes 0",
    ] {
        assert!(table.contains(needle), "{needle:?} missing from\n{table}");
    }
}

#[test]
fn probe_never_writes_to_fixtures() {
    for name in ["vm-single-node", "cxl-two-tier"] {
        let root = fixture(name);
        let nr = root.path("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds");
        let before = fs::read(&nr).unwrap();
        let _ = Probe::collect(&root, bpf_ok());
        assert_eq!(fs::read(&nr).unwrap(), before, "{name}");
    }
}

#[test]
fn without_bpf_nothing_is_usable() {
    let probe = Probe::collect(
        &fixture("intel-spr-pebs"),
        BpfStatus {
            available: false,
            detail: "EPERM".to_owned(),
        },
    );
    assert!(probe.sources.is_empty());
    assert_eq!(probe.selected_source.name, None);
    assert!(
        probe
            .selected_source
            .reason
            .contains("but BPF is not available")
    );
    assert!(probe.to_table().contains("NOT available"));
}

#[test]
fn json_has_the_documented_fields() {
    let probe = Probe::collect(&fixture("cxl-two-tier"), bpf_ok());
    let json = serde_json::to_value(&probe).unwrap();
    assert_eq!(json["kernel"], "6.12.100+deb12-amd64");
    assert_eq!(json["bpf"], true);
    assert_eq!(
        json["sources"],
        serde_json::json!(["pebs", "damon", "swfault"])
    );
    assert_eq!(json["selected_source"]["name"], "pebs");
    assert_eq!(json["damon"]["present"], true);
    assert_eq!(json["damon"]["busy"], false);
    assert_eq!(json["damon"]["busy_kdamonds"], serde_json::json!([]));
    assert_eq!(
        json["damon"]["operations"],
        serde_json::json!(["vaddr", "fvaddr", "paddr"])
    );
    assert_eq!(json["damon"]["tracepoint"], true);
    assert_eq!(json["numa_nodes"][1]["id"], 1);
    assert_eq!(json["numa_nodes"][1]["cpus"], serde_json::json!([]));
    assert_eq!(json["numa_nodes"][1]["memory_bytes"], 128_u64 << 30);
    assert_eq!(json["numa_nodes"][1]["tier"], 22);
    assert_eq!(
        json["memory_tiers"][1],
        serde_json::json!({"id": 22, "nodes": [1]})
    );
    assert_eq!(json["thp"], "madvise");
    assert_eq!(json["numa_balancing"], 2);
    assert_eq!(json["demotion_enabled"], true);
}

#[test]
fn ibs_is_refused_on_a_kernel_whose_op_samples_carry_no_address() {
    // The same Genoa machine on a kernel before 6.1 (no PERF_SAMPLE_ADDR for ibs_op).
    let dir = scratch_copy("amd-zen4-ibs");
    damage(
        dir.path(),
        "proc/sys/kernel/osrelease",
        "5.15.0-91-generic\n",
    );
    let probe = Probe::collect(&HostRoot::new(dir.path()), bpf_ok());
    assert_eq!(probe.sources, [SourceKind::SwFault]);
    let ibs = &probe.source_checks[1];
    assert_eq!(ibs.kind, SourceKind::Ibs);
    assert!(!ibs.usable);
    for words in ["ibs_op", "5.15.0-91-generic", "no data address", "6.1"] {
        assert!(ibs.reason.contains(words), "{words}: {}", ibs.reason);
    }
    assert!(
        probe.selected_source.reason.contains("no data address"),
        "{}",
        probe.selected_source.reason
    );
}

/// Copies a fixture into a temporary directory so a test can damage it.
fn scratch_copy(name: &str) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(fixture(name).root(), dir.path());
    dir
}

fn damage(root: &Path, rel: &str, content: &str) -> PathBuf {
    let path = root.join(rel);
    fs::write(&path, content).unwrap();
    path
}

#[test]
fn malformed_files_become_path_carrying_errors() {
    let dir = scratch_copy("intel-spr-pebs");
    let r = dir.path();
    let bad_type = damage(r, "sys/bus/event_source/devices/cpu/type", "four\n");
    let bad_event = damage(
        r,
        "sys/bus/event_source/devices/power/events/energy-pkg",
        "event=zz\n",
    );
    let bad_format = damage(
        r,
        "sys/bus/event_source/devices/msr/format/event",
        "config9:0-63\n",
    );
    let bad_meminfo = damage(
        r,
        "sys/devices/system/node/node1/meminfo",
        "Node 1 MemTotal: ? kB\n",
    );
    let bad_thp = damage(
        r,
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always madvise never\n",
    );

    let scan = PmuScan::read(&HostRoot::new(r)).unwrap();
    let mut failed: Vec<_> = scan.errors.iter().map(|e| e.path().to_path_buf()).collect();
    failed.sort();
    let mut expected = vec![bad_type.clone(), bad_event.clone(), bad_format.clone()];
    expected.sort();
    assert_eq!(failed, expected);
    // The readable PMUs are still there.
    assert!(scan.get("software").is_some());

    let probe = Probe::collect(&HostRoot::new(r), bpf_ok());
    for path in [&bad_type, &bad_event, &bad_format, &bad_meminfo, &bad_thp] {
        let shown = path.display().to_string();
        assert!(
            probe.errors.iter().any(|e| e.starts_with(&shown)),
            "no error naming {shown}: {:?}",
            probe.errors
        );
    }
    assert!(probe.numa_nodes.is_empty());
    assert_eq!(probe.thp, None);
    assert_eq!(
        probe.numa_balancing,
        Some(1),
        "other settings are still read"
    );
    assert_eq!(probe.sources, [SourceKind::SwFault]);
    assert!(probe.to_table().contains("errors (the fields above"));
}

#[test]
fn malformed_damon_and_tiers_become_path_carrying_errors() {
    let dir = scratch_copy("vm-single-node");
    let r = dir.path();
    let bad_state = damage(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "2\n");
    let bad_tier = damage(
        r,
        "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
        "0-\n",
    );
    let probe = Probe::collect(&HostRoot::new(r), bpf_ok());
    let missing_kdamond = bad_state.parent().unwrap().join("1/state");
    for path in [&missing_kdamond, &bad_tier] {
        let shown = path.display().to_string();
        assert!(
            probe.errors.iter().any(|e| e.starts_with(&shown)),
            "no error naming {shown}: {:?}",
            probe.errors
        );
    }
    assert!(!probe.damon.present);
    assert_eq!(probe.sources, [SourceKind::SwFault]);
    assert!(!probe.kernel.is_empty());
}
