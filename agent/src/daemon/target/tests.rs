//! The target task's pure parts: tier views, observe mode's assumed moves, capacity, page
//! counts.

use std::collections::BTreeMap;

use memtide_core::{
    engine::{AccessKind, DamonObservation, Sample},
    policy::PlacementView,
    units::{PAGE_SIZE, SUPERPAGE_SIZE, Tier},
};
use memtide_host::{
    exec::{DirectionReport, ExecReport},
    topology::{Topology, node_sets::TierNodeSets},
};

use super::{
    epoch::capacity_from,
    observe::AssumedView,
    report::{count_pages, publish_migration},
    views::{MAX_SAMPLED_PAGES, damon_view, knows_sampled_pages, sample_view, sampled_hot_set},
    *,
};

/// Samples of period 1 at `addrs`.
fn at(addrs: &[u64]) -> Vec<Sample> {
    addrs.iter().map(|&addr| Sample::load(addr)).collect()
}

#[test]
fn hot_set_is_the_smallest_hottest_cover() {
    // Page 0x1000 sampled 6 times, 0x2000 3 times, 0x3000 once: 70 % of 10 is 7 samples,
    // which the two hottest pages cover.
    let mut addrs = vec![0x1000; 6];
    addrs.extend([0x2008; 3]);
    addrs.push(0x3010);
    let sampled = at(&addrs);
    assert_eq!(sampled_hot_set(&sampled, 0.7), [0x1000, 0x2000]);
    assert_eq!(sampled_hot_set(&sampled, 0.5), [0x1000]);
    assert_eq!(sampled_hot_set(&sampled, 1.0).len(), 3);
    assert!(sampled_hot_set(&[], 0.7).is_empty());
}

#[test]
fn the_hit_ratio_covers_the_whole_epoch_not_its_first_samples() {
    // A quarter of the epoch on the fast page, then three quarters on the slow one: more
    // samples than the epoch keeps.
    let placement = placement(&[(0x1000, 1)], &[(0x2000, 1)]);
    let mut input = EpochInput::default();
    let quarter = MAX_SAMPLED_PAGES as u64;
    for i in 0..4 * quarter {
        let addr = if i < quarter { 0x1000 } else { 0x2000 };
        input.keep(Sample::load(addr));
    }
    assert_eq!(input.pages.len(), MAX_SAMPLED_PAGES);
    let view = sample_view(&input.pages, &placement, 0.7);
    #[expect(clippy::cast_precision_loss, reason = "a share of sample counts")]
    let fast_share = view.fast_accesses as f64 / MAX_SAMPLED_PAGES as f64;
    // Kept uniformly: a quarter fast (the first samples alone would say all of it).
    assert!((0.23..0.27).contains(&fast_share), "{fast_share}");
    input.clear();
    assert!(input.pages.is_empty());
    input.keep(Sample::load(0x1000));
    assert_eq!(input.pages.len(), 1, "a new epoch starts filling again");
}

#[test]
fn hit_ratio_and_hot_set_weigh_each_sample_by_its_period() {
    // PEBS: two load samples on the fast page at 64,000 and one store sample on the slow page
    // at 1.6 M. By sample count the fast tier serves 2/3; by the accesses they stand for,
    // 128,000 of 1,728,000.
    let placement = placement(&[(0x1000, 1)], &[(0x2000, 1)]);
    let load = |addr| Sample {
        addr,
        kind: AccessKind::Load,
        weight: 64_000,
    };
    let sampled = [
        load(0x1000),
        load(0x1040),
        Sample {
            addr: 0x2000,
            kind: AccessKind::Store,
            weight: 1_600_000,
        },
    ];
    let view = sample_view(&sampled, &placement, 0.7);
    assert_eq!(
        (view.fast_accesses, view.slow_accesses),
        (128_000, 1_600_000)
    );
    // 70 % of the accesses is the store's page alone.
    assert_eq!((view.hot_fast_bytes, view.hot_slow_bytes), (0, PAGE_SIZE));
    assert_eq!(sampled_hot_set(&sampled, 0.7), [0x2000]);
    // A ring record's weight of 0 counts as one access.
    let record = memtide_common::AccessSample {
        addr: 0x1000,
        weight: 0,
        pid: 1,
        tid: 1,
        cpu: 0,
        kind: 0,
        source: 0,
        _pad: [0; 2],
    };
    assert_eq!(Sample::from_record(&record).weight, 1);
}

fn placement(fast: &[(u64, u64)], slow: &[(u64, u64)]) -> TierPlacement {
    use memtide_host::sys::mempolicy::PageStatus;
    let mut placement = TierPlacement::new(vec![0]);
    for (ranges, node) in [(fast, 0), (slow, 1)] {
        for &(start, pages) in ranges {
            placement.insert(
                start,
                vec![PageStatus::Node(node); usize::try_from(pages).unwrap()],
            );
        }
    }
    placement
}

#[test]
fn a_cached_placement_that_misses_the_sampled_pages_is_queried_again() {
    let placement = placement(&[(0x10_0000, 16)], &[]);
    let input = |pages: &[u64]| {
        let mut input = EpochInput::default();
        input.pages = at(pages);
        input
    };
    assert!(knows_sampled_pages(
        &placement,
        &input(&[0x10_0010, 0x10_1000, 0x90_0000])
    ));
    assert!(
        !knows_sampled_pages(&placement, &input(&[0x10_0010, 0x90_0000, 0x90_1000])),
        "most samples fall on pages the view has never seen"
    );
    assert!(
        knows_sampled_pages(&placement, &input(&[])),
        "no samples: keep it"
    );
}

#[test]
fn damon_regions_split_accesses_and_hot_bytes_by_tier() {
    // A hot 64-page region on the fast node, a cold 512-page region on the slow node.
    let placement = placement(&[(0x10_0000, 64)], &[(0x20_0000, 512)]);
    let regions = [
        DamonObservation {
            start: 0x10_0000,
            end: 0x10_0000 + 64 * PAGE_SIZE,
            nr_accesses: 10,
            max_nr_accesses: 20,
            age: 1,
        },
        DamonObservation {
            start: 0x20_0000,
            end: 0x20_0000 + 512 * PAGE_SIZE,
            nr_accesses: 0,
            max_nr_accesses: 20,
            age: 9,
        },
    ];
    let view = damon_view(regions.iter(), &placement, 0.7);
    assert_eq!(view.fast_accesses, 640);
    assert_eq!(view.slow_accesses, 0);
    assert_eq!(
        view.hot_fast_bytes,
        64 * PAGE_SIZE,
        "only the accessed region is hot"
    );
    assert_eq!(view.hot_slow_bytes, 0);
}

#[test]
fn sampled_pages_count_by_tier() {
    let placement = placement(&[(0x1000, 1)], &[(0x2000, 1)]);
    let view = sample_view(&at(&[0x1000, 0x1008, 0x2000, 0x9000]), &placement, 1.0);
    assert_eq!((view.fast_accesses, view.slow_accesses), (2, 1));
    assert_eq!(
        (view.hot_fast_bytes, view.hot_slow_bytes),
        (PAGE_SIZE, PAGE_SIZE)
    );
}

#[test]
fn assumed_moves_replace_overlaps_and_merge_neighbours() {
    let mut assumed = Assumed::default();
    assumed.record(0x1000, 0x5000, true);
    assumed.record(0x5000, 0x6000, true);
    assert_eq!(assumed.ranges, BTreeMap::from([(0x1000, (0x6000, true))]));
    // A demotion in the middle cuts the promoted range in three.
    assumed.record(0x2000, 0x3000, false);
    assert_eq!(
        assumed.ranges,
        BTreeMap::from([
            (0x1000, (0x2000, true)),
            (0x2000, (0x3000, false)),
            (0x3000, (0x6000, true)),
        ])
    );
    // Promoting it again (and beyond) merges everything back into one range.
    assumed.record(0x2000, 0x7000, true);
    assert_eq!(assumed.ranges, BTreeMap::from([(0x1000, (0x7000, true))]));
    assumed.record(0x0, 0x8000, false);
    assert_eq!(assumed.ranges, BTreeMap::from([(0x0, (0x8000, false))]));
    assumed.record(0x9000, 0x9000, true);
    assert_eq!(assumed.ranges.len(), 1, "empty ranges are ignored");
}

#[test]
fn observe_mode_plans_against_the_moves_it_assumed() {
    // Two superpages: the first on the slow node (1) with page 3 not resident, the second
    // on the fast node (0). Assumed: pages 1..4 of the first promoted, the first half of
    // the second demoted.
    let sp = 0x20_0000;
    let real = placement(
        &[(sp + 0x20_0000, 512)],
        &[(sp, 3), (sp + 4 * PAGE_SIZE, 508)],
    );
    let mut assumed = Assumed::default();
    assumed.record(sp + PAGE_SIZE, sp + 4 * PAGE_SIZE, true);
    assumed.record(sp + 0x20_0000, sp + 0x30_0000, false);
    let view = AssumedView {
        real: &real,
        assumed: &assumed,
    };
    assert_eq!(view.tier_of(sp), Some(Tier::Slow));
    assert_eq!(view.tier_of(sp + PAGE_SIZE), Some(Tier::Fast));
    assert_eq!(view.tier_of(sp + 2 * PAGE_SIZE), Some(Tier::Fast));
    assert_eq!(view.tier_of(sp + 4 * PAGE_SIZE), Some(Tier::Slow));
    let first = view.residency(sp);
    assert_eq!((first.fast_pages(), first.slow_pages()), (2, 509));
    let second = view.residency(sp + 0x20_0000);
    assert_eq!((second.fast_pages(), second.slow_pages()), (256, 256));
    // The real placement is untouched.
    assert_eq!(real.is_fast(sp + PAGE_SIZE), Some(false));
    let mut fast = Vec::new();
    view.for_each_fast_range(&mut |start, len| fast.push((start, len)));
    assert_eq!(
        fast,
        vec![(sp + PAGE_SIZE, 2 * PAGE_SIZE), (sp + 0x30_0000, 0x10_0000)],
        "assumed-promoted resident pages plus the fast half not assumed demoted"
    );
}

#[test]
fn a_full_fast_tier_demotes_around_what_the_application_placed_itself() {
    use memtide_core::{policy::CapacityView, tiering::Tiering};
    // Two never-sampled superpages on the fast node, the first bound by the application; the
    // fast tier is full, so the planner demotes never-sampled data to make room.
    let (bound, free) = (0x4000_0000, 0x4020_0000);
    let real = placement(&[(bound, 512), (free, 512)], &[]);
    let capacity = CapacityView {
        fast_total_bytes: 1 << 30,
        fast_free_bytes: 0,
        slow_total_bytes: 4 << 30,
        slow_free_bytes: 4 << 30,
        ..CapacityView::default()
    };
    let demoted = |view: &TierPlacement| {
        // A one-second first epoch: its demotion budget covers both superpages.
        let mut config = TieringConfig::default();
        config.policy.epoch.initial_ms = 1000;
        let mut tiering = Tiering::new(config).unwrap();
        let plan = tiering.plan(Duration::from_secs(1), view, &capacity);
        let moved = |start: u64| {
            plan.moves
                .iter()
                .any(|m| m.start < start + 0x20_0000 && start < m.start + m.len)
        };
        (moved(bound), moved(free))
    };
    // Without the mask the bound superpage is a victim like any other; with it, only the
    // other one is.
    assert_eq!(demoted(&real), (true, true));
    let masked = real.without(&[(bound, bound + 0x20_0000)]).unwrap();
    assert_eq!(demoted(&masked), (false, true));
}

#[test]
fn free_memory_counts_above_the_executors_floor_only() {
    use memtide_host::{exec::watermark::NodeWatermarks, topology::Node};
    let node = |id, free_mib: u64| Node {
        id,
        cpus: Vec::new(),
        memory_bytes: 1 << 30,
        free_bytes: free_mib << 20,
        tier: None,
    };
    let topology = Topology {
        nodes: vec![node(0, 100), node(1, 900)],
        tiers: Vec::new(),
        numa_sysfs: true,
    };
    let marks = |high_mib: u64| NodeWatermarks {
        min: 0,
        low: 0,
        high: high_mib << 20,
    };
    let watermarks = BTreeMap::from([(0, marks(10)), (1, marks(10))]);
    let view = capacity_from(Some(&topology), &watermarks, &[0], &[1], 64 << 20);
    assert_eq!(view.fast_total_bytes, 1 << 30);
    // 100 MiB free, 10 MiB high watermark, 64 MiB reserve: 26 MiB usable.
    assert_eq!(view.fast_free_bytes, 26 << 20);
    assert_eq!(view.slow_free_bytes, 826 << 20);
    // Below the floor there is no room at all (not a wrapped-around huge number).
    let tight = capacity_from(Some(&topology), &watermarks, &[0], &[1], 128 << 20);
    assert_eq!(tight.fast_free_bytes, 0);
    assert_eq!(
        capacity_from(None, &watermarks, &[0], &[1], 0).fast_total_bytes,
        0
    );
}

/// Prometheus text of `metrics`, and the value of the first line containing every needle.
fn scrape(registry: &prometheus_client::registry::Registry) -> impl Fn(&[&str]) -> Option<String> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    move |needles: &[&str]| {
        text.lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
            .and_then(|line| line.rsplit(' ').next())
            .map(str::to_owned)
    }
}

#[test]
fn pages_left_by_an_exit_are_counted_as_target_exited() {
    let (metrics, registry) = Metrics::new();
    let side = DirectionReport {
        pages_moved: 7,
        failures: BTreeMap::from([("ebusy", 2)]),
        aborted_pages: 5,
        ..DirectionReport::default()
    };
    count_pages(&metrics, "w:1", "promote", &side, true);
    let value = scrape(&registry);
    assert_eq!(
        value(&["memtide_migration_failures_total{reason=\"target_exited\"}"]).as_deref(),
        Some("5")
    );
    assert_eq!(value(&["result=\"target_exited\""]).as_deref(), Some("5"));
    assert_eq!(value(&["result=\"moved\""]).as_deref(), Some("7"));
    assert_eq!(value(&["reason=\"ebusy\""]).as_deref(), Some("2"));
}

/// A swap: two 64 KiB chunks promoted (one of them only half), a whole superpage and a 4 KiB
/// run demoted. Bytes are counted where they moved, by the granularity they were asked at; no
/// share of one direction leaks into the other.
#[test]
fn migrated_bytes_and_pages_are_counted_per_direction() {
    let (metrics, registry) = Metrics::new();
    let report = ExecReport {
        promote: DirectionReport {
            pages_moved: 24,
            moved_by_granularity: BTreeMap::from([(64 << 10, 24)]),
            failures: BTreeMap::from([("ebusy", 8)]),
            ..DirectionReport::default()
        },
        demote: DirectionReport {
            pages_moved: 512 + 3,
            moved_by_granularity: BTreeMap::from([(SUPERPAGE_SIZE, 512), (PAGE_SIZE, 3)]),
            ..DirectionReport::default()
        },
        ..ExecReport::default()
    };
    let [promoted, demoted] = publish_migration(&metrics, "w:1", &report);
    assert_eq!((promoted, demoted), (24 * PAGE_SIZE, 515 * PAGE_SIZE));
    let value = scrape(&registry);
    let bytes = |direction: &str, granularity: &str| {
        value(&[
            "memtide_migrated_bytes_total{",
            &format!("direction=\"{direction}\""),
            &format!("granularity=\"{granularity}\""),
        ])
    };
    assert_eq!(bytes("promote", "64k").as_deref(), Some("98304"));
    assert_eq!(bytes("demote", "2m").as_deref(), Some("2097152"));
    assert_eq!(bytes("demote", "4k").as_deref(), Some("12288"));
    assert_eq!(bytes("promote", "2m"), None);
    let pages = |direction: &str, result: &str| {
        value(&[
            "memtide_migration_pages_total{",
            &format!("direction=\"{direction}\""),
            &format!("result=\"{result}\""),
        ])
    };
    assert_eq!(pages("promote", "moved").as_deref(), Some("24"));
    assert_eq!(pages("promote", "ebusy").as_deref(), Some("8"));
    assert_eq!(pages("demote", "moved").as_deref(), Some("515"));
    assert_eq!(pages("demote", "ebusy"), None);
}

#[test]
fn a_quiet_target_waits_longer_the_longer_it_stays_quiet() {
    use super::epoch::{IDLE_REPLAN, IDLE_REPLAN_MAX, quiet_wait};
    let waits: Vec<u64> = (0..8).map(|n| quiet_wait(n).as_secs()).collect();
    assert_eq!(waits, [10, 10, 20, 40, 80, 160, 160, 160]);
    assert_eq!(quiet_wait(u32::MAX), IDLE_REPLAN_MAX);
    assert_eq!(quiet_wait(1), IDLE_REPLAN);
}

/// The epochs a running target task has planned, from the status it publishes.
fn epochs_of(status: &RwLock<AgentStatus>, pid: u32) -> u64 {
    let status = status.read().unwrap();
    status
        .targets
        .iter()
        .find(|t| t.pid == pid)
        .map_or(0, |t| t.epochs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_samples_sleeps_until_its_plan_needs_renewing() {
    // Counts, not timings: a slow machine plans fewer epochs, never more. With 1 s epochs a
    // target that woke every epoch would plan about 11 times in 12 s; an idle one plans at
    // 1 s and then every IDLE_REPLAN (10 s).
    let child = crate::daemon::tests::Sleeper::spawn();
    let pid = child.pid();
    let mut tiering = TieringConfig::default();
    tiering.policy.epoch.adaptive = false;
    let spec = TargetSpec {
        pid,
        label: "idle".into(),
        tiering,
        exec: ExecConfig::default(),
        observe: Arc::new(RwLock::new(Some("test".into()))),
        tiers: TierNodeSets {
            fast: vec![0],
            slow: Vec::new(),
        },
        nodes: None,
        locality: None,
        costs: Default::default(),
        machine: Arc::new(SharedMachine::default()),
        limit: Arc::default(),
        shares: Arc::default(),
        root: HostRoot::default(),
        sampling_cpu: CpuAccount::default(),
        quiet: false,
    };
    let status = Arc::new(RwLock::new(AgentStatus::default()));
    let (metrics, _registry) = Metrics::new();
    let handle = spawn(spec, 16, Instant::now(), metrics, Arc::clone(&status)).unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let quiet = epochs_of(&status, pid);
    assert!(
        (1..=2).contains(&quiet),
        "an idle target planned {quiet} times in 12 s of 1 s epochs"
    );
    // Something sampled wakes it: planned within an epoch or two, not at the next renewal.
    let region = DamonObservation {
        start: 0x7f00_0000_0000,
        end: 0x7f00_0020_0000,
        nr_accesses: 5,
        max_nr_accesses: 20,
        age: 0,
    };
    handle
        .input
        .send(TargetInput::Regions(vec![region]))
        .await
        .unwrap();
    let woke = Instant::now();
    while epochs_of(&status, pid) == quiet && woke.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        epochs_of(&status, pid) > quiet,
        "a sampled target did not plan"
    );
    drop((handle, child));
}
