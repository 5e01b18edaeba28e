//! The exact `perf_event_attr` fields memtide opens for PEBS and IBS, built from the fixture PMU
//! trees in `tests/fixtures/pmus` (see its README for where every encoding comes from), and the
//! sample periods [`perf_spec_for`] derives from the CPU budget.
//!
//! `sample_type` 0xc00a is `PERF_SAMPLE_TID (1<<1) | ADDR (1<<3) | WEIGHT (1<<14) |
//! DATA_SRC (1<<15)`; it is written out so a changed constant fails here.

use std::path::Path;

use memtide::sources::{
    PerfSpecError,
    ibs::{self, IbsOptions},
    pebs::{self, PebsError, PebsOptions},
    perf::{
        DEFAULT_LDLAT, PerfSourceOptions,
        budget::{Binding, KernelLimits, PeriodRule},
        sampler::{EventSpec, PlannedOpen},
    },
    registry::perf_spec_for,
};
use memtide_common::{AccessKind, SampleSource};
use memtide_config::SourceKind;
use memtide_host::{probe::pmu::PmuScan, sys::perf::PerfAttr, sysfs::HostRoot};

const SAMPLE_TYPE: u64 = 0xc00a;

fn fixture(name: &str) -> HostRoot {
    HostRoot::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pmus")
            .join(name),
    )
}

fn scan(root: &HostRoot) -> PmuScan {
    let scan = PmuScan::read(root).unwrap();
    assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    scan
}

const OPTIONS: PebsOptions = PebsOptions {
    ldlat: DEFAULT_LDLAT,
    load_period: 1000,
    store_period: Some(5000),
};

/// A PEBS sampling event on PMU `type_`.
fn pebs_attr(type_: u32, config: u64, config1: u64, period: u64) -> PerfAttr {
    PerfAttr {
        type_,
        config,
        config1,
        config2: 0,
        sample_period: period,
        sample_type: SAMPLE_TYPE,
        precise_ip: 2,
        exclude_kernel: true,
        exclude_hv: true,
        exclude_guest: false,
        bp_type: 0,
    }
}

/// The counting `mem-loads-aux` leader (event=0x03,umask=0x82).
fn aux_leader(type_: u32, cpus: Option<Vec<u32>>) -> EventSpec {
    EventSpec {
        attr: PerfAttr {
            type_,
            config: 0x8203,
            config1: 0,
            config2: 0,
            sample_period: 0,
            sample_type: 0,
            precise_ip: 0,
            exclude_kernel: true,
            exclude_hv: true,
            exclude_guest: false,
            bp_type: 0,
        },
        kind: AccessKind::Load,
        group_leader: true,
        cpus,
        period_rule: PeriodRule::ANY,
    }
}

fn sampling(attr: PerfAttr, kind: AccessKind, cpus: Option<Vec<u32>>) -> EventSpec {
    EventSpec {
        attr,
        kind,
        group_leader: false,
        cpus,
        period_rule: PeriodRule::ANY,
    }
}

#[test]
fn skylake_server_pebs() {
    let root = fixture("skylake-server");
    let sets = pebs::plan(&root, &scan(&root), &OPTIONS).unwrap();
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert_eq!(set.pmu, "cpu");
    assert_eq!(set.cpus, None);
    assert!(!set.aux_leader, "Skylake has no mem-loads-aux");
    assert!(set.stores);
    assert_eq!(
        set.events,
        vec![
            // mem-loads: event=0xcd,umask=0x1 with ldlat=30 in config1:0-15.
            sampling(pebs_attr(4, 0x1cd, 30, 1000), AccessKind::Load, None),
            // mem-stores (mem_st_hsw): event=0xd0,umask=0x82 (MEM_INST_RETIRED.ALL_STORES).
            sampling(pebs_attr(4, 0x82d0, 0, 5000), AccessKind::Store, None),
        ]
    );
}

#[test]
fn sapphire_rapids_pebs_has_aux_leader() {
    let root = fixture("sapphire-rapids");
    let sets = pebs::plan(&root, &scan(&root), &OPTIONS).unwrap();
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert!(set.aux_leader);
    assert_eq!(
        set.events,
        vec![
            aux_leader(4, None),
            sampling(pebs_attr(4, 0x1cd, 30, 1000), AccessKind::Load, None),
            // mem_st_spr: event=0xcd,umask=0x2 (store latency).
            sampling(pebs_attr(4, 0x2cd, 0, 5000), AccessKind::Store, None),
        ]
    );
    assert_eq!(set.sampling_events().count(), 2);

    // Group structure on every CPU: {mem-loads-aux, mem-loads}, then mem-stores on its own.
    let spec = pebs::spec(sets, &options(&root, 0..2));
    assert_eq!(spec.source, SampleSource::Pebs);
    let open = |cpu, event, leader| PlannedOpen { cpu, event, leader };
    assert_eq!(
        spec.open_plan(),
        vec![
            open(0, 0, None),
            open(0, 1, Some(0)),
            open(0, 2, None),
            open(1, 0, None),
            open(1, 1, Some(0)),
            open(1, 2, None),
        ]
    );
}

#[test]
fn precise_ip_is_never_3_for_load_latency() {
    for name in ["skylake-server", "sapphire-rapids", "alder-lake-hybrid"] {
        let root = fixture(name);
        for set in pebs::plan(&root, &scan(&root), &OPTIONS).unwrap() {
            for event in set.sampling_events() {
                assert_eq!(event.attr.precise_ip, 2, "{name} {}", set.pmu);
            }
        }
    }
}

#[test]
fn alder_lake_hybrid_one_set_per_core_type() {
    let root = fixture("alder-lake-hybrid");
    let sets = pebs::plan(&root, &scan(&root), &OPTIONS).unwrap();
    assert_eq!(sets.len(), 2);
    let core_cpus: Vec<u32> = (0..16).collect();
    let atom_cpus: Vec<u32> = (16..24).collect();

    let core = &sets[0];
    assert_eq!(
        (core.pmu.as_str(), core.perf_type),
        ("cpu_core", 4),
        "cpu_core keeps PERF_TYPE_RAW"
    );
    assert_eq!(core.cpus.as_deref(), Some(core_cpus.as_slice()));
    assert!(core.aux_leader);
    let c = Some(core_cpus);
    assert_eq!(
        core.events,
        vec![
            aux_leader(4, c.clone()),
            sampling(pebs_attr(4, 0x1cd, 30, 1000), AccessKind::Load, c.clone()),
            sampling(pebs_attr(4, 0x2cd, 0, 5000), AccessKind::Store, c),
        ]
    );

    let atom = &sets[1];
    assert_eq!(
        (atom.pmu.as_str(), atom.perf_type),
        ("cpu_atom", 10),
        "cpu_atom has its own dynamic type"
    );
    assert_eq!(atom.cpus.as_deref(), Some(atom_cpus.as_slice()));
    assert!(!atom.aux_leader, "mem-loads-aux is cpu_core only");
    let a = Some(atom_cpus);
    assert_eq!(
        atom.events,
        vec![
            // Gracemont: MEM_UOPS_RETIRED.LOAD_LATENCY event=0xd0,umask=0x5.
            sampling(pebs_attr(10, 0x5d0, 30, 1000), AccessKind::Load, a.clone()),
            // MEM_UOPS_RETIRED.STORE_LATENCY event=0xd0,umask=0x6.
            sampling(pebs_attr(10, 0x6d0, 0, 5000), AccessKind::Store, a),
        ]
    );

    // Each PMU's events open only on its own CPUs; the aux group exists only on P-cores.
    let spec = pebs::spec(sets, &options(&root, 0..24));
    let plan = spec.open_plan();
    assert_eq!(plan.len(), 16 * 3 + 8 * 2);
    for step in &plan {
        let event = &spec.events[step.event];
        if step.cpu < 16 {
            assert_eq!(event.attr.type_, 4, "{step:?}");
        } else {
            assert_eq!(event.attr.type_, 10, "{step:?}");
            assert_eq!(step.leader, None, "{step:?}");
        }
    }
    let on_cpu = |cpu| -> Vec<(usize, Option<usize>)> {
        plan.iter()
            .filter(|s| s.cpu == cpu)
            .map(|s| (s.event, s.leader))
            .collect()
    };
    assert_eq!(on_cpu(0), vec![(0, None), (1, Some(0)), (2, None)]);
    assert_eq!(on_cpu(23), vec![(3, None), (4, None)]);
}

#[test]
fn missing_mem_loads_names_pmu_and_file() {
    let root = fixture("no-mem-loads");
    let err = pebs::plan(&root, &scan(&root), &OPTIONS).unwrap_err();
    let PebsError::MissingMemLoads { pmu, path } = &err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(pmu, "cpu");
    assert_eq!(
        path,
        &root.path("sys/bus/event_source/devices/cpu/events/mem-loads")
    );
    let text = err.to_string();
    assert!(text.contains("PMU cpu has no mem-loads"), "{text}");
    assert!(text.contains("devices/cpu/events/mem-loads"), "{text}");
}

#[test]
fn zen3_ibs_has_no_l3missonly() {
    let root = fixture("zen3");
    let scan = scan(&root);
    let pmu = ibs::find(&root, &scan).unwrap();
    let event = ibs::op_event(pmu, &IbsOptions::default()).unwrap();
    assert!(event.count_ops);
    assert!(
        !event.l3_miss_only,
        "Zen 3 has no l3missonly even when asked"
    );
    assert_eq!(event.requested_period, None);
    assert_eq!(
        event.event,
        EventSpec {
            attr: PerfAttr {
                type_: 9,
                // cnt_ctl = config:19.
                config: 0x8_0000,
                config1: 0,
                config2: 0,
                sample_period: 0x10000,
                sample_type: SAMPLE_TYPE,
                precise_ip: 0,
                exclude_kernel: false,
                exclude_hv: false,
                exclude_guest: false,
                bp_type: 0,
            },
            kind: AccessKind::Unknown,
            group_leader: false,
            cpus: None,
            period_rule: ibs::PERIOD_RULE,
        }
    );
}

#[test]
fn zen4_ibs_sets_l3missonly() {
    let root = fixture("zen4");
    let scan = scan(&root);
    let pmu = ibs::find(&root, &scan).unwrap();
    let event = ibs::op_event(
        pmu,
        &IbsOptions {
            period: 100_001,
            ..IbsOptions::default()
        },
    )
    .unwrap();
    assert!(event.count_ops && event.l3_miss_only);
    assert_eq!(event.requested_period, Some(100_001));
    assert_eq!(
        event.event.attr,
        PerfAttr {
            type_: 9,
            // cnt_ctl (config:19) | l3missonly (config:16).
            config: 0x9_0000,
            config1: 0,
            config2: 0,
            // Rounded up to the op counter's 16-op granularity.
            sample_period: 100_016,
            sample_type: SAMPLE_TYPE,
            precise_ip: 0,
            exclude_kernel: false,
            exclude_hv: false,
            exclude_guest: false,
            bp_type: 0,
        }
    );
    assert_eq!(event.event.kind, AccessKind::Unknown);

    let all_ops = ibs::op_event(
        pmu,
        &IbsOptions {
            l3_miss_only: false,
            period: 0x20,
            ..IbsOptions::default()
        },
    )
    .unwrap();
    assert_eq!(all_ops.event.attr.config, 0x8_0000);
    assert_eq!(
        all_ops.event.attr.sample_period, 0x90,
        "raised to the kernel's minimum op period"
    );
}

#[test]
fn ibs_period_rounding() {
    assert_eq!(ibs::round_period(0), 0x90);
    assert_eq!(ibs::round_period(0x91), 0xa0);
    assert_eq!(ibs::round_period(0x1_0000), 0x1_0000);
    assert_eq!(ibs::round_period(0x1_0001), 0x1_0010);
}

#[test]
fn no_ibs_on_intel() {
    let root = fixture("sapphire-rapids");
    let err = ibs::find(&root, &scan(&root)).unwrap_err();
    assert!(err.to_string().contains("devices/ibs_op"), "{err}");
}

fn options(root: &HostRoot, cpus: std::ops::Range<u32>) -> PerfSourceOptions {
    PerfSourceOptions::new(cpus.collect(), KernelLimits::read(root).unwrap())
}

#[test]
fn perf_spec_for_pebs_sizes_periods_from_the_budget() {
    let root = fixture("sapphire-rapids");
    let opts = options(&root, 0..8);
    let out = perf_spec_for(SourceKind::Pebs, &scan(&root), &root, &opts).unwrap();
    // 8 CPUs x (loads + stores) = 16 streams; 1 % of a core at 2 µs = 5000 samples/s, 312.5
    // per stream on an equal split. Half the ldlat loads and 2 % of the stores reach memory,
    // so the store period is 0.5 / 0.02 = 25 load periods: per CPU the loads take
    // 2e7 / (2e7 + 5e8 / 25) = 1/2 of the samples (an equal split's half), the stores the
    // other half: loads 2e7 / 312.5 = 64000, stores 5e8 / 312.5 = 1600000.
    let periods: Vec<(&str, u64, Binding)> = out
        .periods
        .iter()
        .map(|(name, choice)| (*name, choice.period, choice.binding))
        .collect();
    assert_eq!(
        periods,
        vec![
            ("mem-loads", 64_000, Binding::CpuBudget),
            ("mem-stores", 1_600_000, Binding::CpuBudget),
        ]
    );
    let spec = &out.spec;
    assert_eq!(spec.source, SampleSource::Pebs);
    assert_eq!(spec.cpus, (0..8).collect::<Vec<_>>());
    assert_eq!(spec.events.len(), 3);
    assert_eq!(spec.events[1].attr.sample_period, 64_000);
    assert_eq!(spec.events[2].attr.sample_period, 1_600_000);
    assert!(out.notes.is_empty(), "{:?}", out.notes);
}

#[test]
fn perf_spec_for_reports_a_binding_kernel_throttle() {
    // The fixture's perf_event_max_sample_rate was lowered to 12000: with a whole core of
    // budget on one CPU, loads could be sampled every 80 events (an equal split's: loads and
    // stores each take half at the assumed shares), the kernel allows one in 1667.
    let root = fixture("sapphire-rapids");
    let mut opts = options(&root, 0..1);
    opts.budget.cpu_fraction = 1.0;
    let out = perf_spec_for(SourceKind::Pebs, &scan(&root), &root, &opts).unwrap();
    let (name, loads) = &out.periods[0];
    assert_eq!(*name, "mem-loads");
    assert_eq!(loads.budget_period, 80);
    assert_eq!(loads.kernel_period, 1667);
    assert_eq!(loads.period, 1667);
    assert!(loads.kernel_throttle_binds);
    assert_eq!(loads.binding, Binding::KernelThrottle);
    assert!(
        loads
            .explanation
            .contains("perf_event_max_sample_rate=12000"),
        "{}",
        loads.explanation
    );
}

#[test]
fn perf_spec_for_hybrid_counts_streams_per_pmu() {
    let root = fixture("alder-lake-hybrid");
    let opts = options(&root, 0..24);
    let out = perf_spec_for(SourceKind::Pebs, &scan(&root), &root, &opts).unwrap();
    // (16 P-core CPUs + 8 E-core CPUs) x 2 events = 48 streams, an equal split for loads:
    // 2e7 / (1e7 / 96000) = 192000.
    assert_eq!(out.periods[0].1.period, 192_000);
    assert_eq!(out.spec.events.len(), 5);
    assert_eq!(out.spec.open_plan().len(), 64);
}

#[test]
fn perf_spec_for_ibs_accounts_for_l3missonly() {
    // Zen 4: only L3-missing ops (2 % of 4e9/s) interrupt: 8e7 / 625 = 128000.
    let root = fixture("zen4");
    let out = perf_spec_for(SourceKind::Ibs, &scan(&root), &root, &options(&root, 0..8)).unwrap();
    assert_eq!(out.spec.source, SampleSource::Ibs);
    assert_eq!(out.spec.events.len(), 1);
    assert_eq!(out.spec.events[0].attr.config, 0x9_0000);
    assert_eq!(out.spec.events[0].attr.sample_period, 128_000);
    assert!(out.notes.is_empty(), "{:?}", out.notes);

    // Zen 3: every op can interrupt: 4e9 / 625 = 6.4e6, and a note says why.
    let root = fixture("zen3");
    let out = perf_spec_for(SourceKind::Ibs, &scan(&root), &root, &options(&root, 0..8)).unwrap();
    assert_eq!(out.spec.events[0].attr.config, 0x8_0000);
    assert_eq!(out.spec.events[0].attr.sample_period, 6_400_000);
    assert_eq!(out.spec.events[0].attr.sample_period % 16, 0);
    assert!(out.notes[0].contains("no l3missonly"), "{:?}", out.notes);
}

#[test]
fn perf_spec_for_swfault_and_non_perf_kinds() {
    let root = fixture("zen3");
    let scan = scan(&root);
    let out = perf_spec_for(SourceKind::SwFault, &scan, &root, &options(&root, 0..8)).unwrap();
    assert_eq!(out.spec.source, SampleSource::SwFault);
    // 1e4 faults/s per CPU; 8 streams may take 625 samples/s each: period 1e4 / 625 = 16.
    assert_eq!(out.spec.events[0].attr.sample_period, 16);
    assert_eq!(out.spec.events[0].cpus, None);
    for kind in [SourceKind::Damon, SourceKind::Spe] {
        assert!(matches!(
            perf_spec_for(kind, &scan, &root, &options(&root, 0..8)),
            Err(PerfSpecError::NotPerf(k)) if k == kind
        ));
    }
    assert!(matches!(
        perf_spec_for(SourceKind::SwFault, &scan, &root, &options(&root, 0..0)),
        Err(PerfSpecError::NoCpus)
    ));
    // PEBS on an AMD machine: the cpu PMU has no mem-loads.
    assert!(matches!(
        perf_spec_for(SourceKind::Pebs, &scan, &root, &options(&root, 0..8)),
        Err(PerfSpecError::Pebs(PebsError::MissingMemLoads { .. }))
    ));
}
