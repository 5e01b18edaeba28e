//! The DAMON source on a kernel with a free DAMON and vaddr operations (the VM): a hot
//! region read continuously must show a strictly higher access frequency than a cold region
//! touched once, and after stop no kdamond and no BPF program of memtide's remains.
use std::{
    sync::mpsc as std_mpsc,
    time::{Duration, Instant},
};

use std::sync::{Arc, atomic::Ordering};

use memtide::sources::{
    Delivery, HotnessSource as _, SampleRoute, TargetChannel, TargetInput, damon::DamonSource,
    perf::ring::DRAIN_INTERVAL,
};
use memtide_config::DamonMonitorConfig;
use memtide_core::{engine::DamonObservation, ingest::IngestCounters, units::PAGE_SIZE};
use memtide_host::sysfs::HostRoot;
use tokio::sync::mpsc;

use crate::support::{self, Workload};

const MIB_PAGES: usize = (1 << 20) / PAGE_SIZE as usize;
const HOT_PAGES: usize = 64 * MIB_PAGES;
const COLD_PAGES: usize = 512 * MIB_PAGES;

/// Access frequency of `[start, end)`: the byte-weighted mean of `nr_accesses` of the
/// regions overlapping it, over all aggregation intervals seen.
fn frequency(regions: &[DamonObservation], start: u64, end: u64) -> f64 {
    let mut weighted = 0.0;
    let mut bytes = 0.0;
    for region in regions {
        let overlap = region.end.min(end).saturating_sub(region.start.max(start));
        if overlap > 0 {
            weighted += f64::from(region.nr_accesses) * overlap as f64;
            bytes += overlap as f64;
        }
    }
    if bytes > 0.0 { weighted / bytes } else { 0.0 }
}

#[test]
fn damon_reports_the_hot_region_hotter_than_the_cold_one_and_cleans_up() {
    if support::skip_unless_vm("damon_reports_the_hot_region_hotter_than_the_cold_one") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("damon");
    let mut workload = Workload::spawn(&["--pages", &(HOT_PAGES + COLD_PAGES).to_string()]);
    assert_eq!(
        workload.command("touch"),
        format!("touched {}", HOT_PAGES + COLD_PAGES)
    );
    let hot = (workload.base, workload.base + HOT_PAGES as u64 * PAGE_SIZE);
    let cold = (hot.1, workload.base + workload.size);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let regions = runtime.block_on(async {
        let config = DamonMonitorConfig::default();
        let mut source = DamonSource::start(&HostRoot::default(), &config, &[workload.pid])
            .expect("start the DAMON source");
        let kdamond = source.kdamond_pid().expect("kdamond running");
        eprintln!(
            "damon: kdamond pid {kdamond}, max nr_accesses {}",
            source.max_nr_accesses()
        );
        // The daemon's path: the source's delivery task routes the workload's regions to its
        // target channel.
        let (sender, mut receiver) = mpsc::channel(1024);
        let (routes, routes_rx) = mpsc::unbounded_channel();
        routes
            .send(SampleRoute::Add {
                pid: workload.pid,
                sender: TargetChannel(sender),
            })
            .expect("route");
        let counters = Arc::new(IngestCounters::default());
        let drain = source
            .deliver(Delivery {
                routes: routes_rx,
                counters: Arc::clone(&counters),
                batch: 512,
                drain_every: DRAIN_INTERVAL,
                cpu: memtide::cpu_time::CpuAccount::default(),
            })
            .expect("start delivery");

        // The workload's `hot` blocks, so drive it from a thread while we collect.
        let (done_tx, done_rx) = std_mpsc::channel();
        let hot_pages = HOT_PAGES;
        let driver = std::thread::spawn(move || {
            let reply = workload.command(&format!("hot 0 {hot_pages} 12 r"));
            done_tx.send(reply).ok();
            workload
        });

        let mut regions = Vec::new();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(TargetInput::Regions(batch))) =
                tokio::time::timeout(Duration::from_millis(500), receiver.recv()).await
            {
                // Let DAMON settle its regions for two seconds before counting.
                if started.elapsed() > Duration::from_secs(2) {
                    regions.extend(batch);
                }
            }
        }
        drop(routes);
        drain.await.expect("delivery task");
        assert_eq!(
            counters.dropped_channel_full.load(Ordering::Relaxed),
            0,
            "region batches dropped"
        );
        source.stop().expect("stop the DAMON source");
        let reply = done_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("hot finished");
        assert!(reply.starts_with("hot passes="), "{reply}");
        drop(driver.join().expect("driver thread"));
        regions
    });

    let hot_frequency = frequency(&regions, hot.0, hot.1);
    let cold_frequency = frequency(&regions, cold.0, cold.1);
    eprintln!(
        "damon: {} region reports; hot {hot_frequency:.2}, cold {cold_frequency:.2} mean nr_accesses",
        regions.len()
    );
    assert!(
        !regions.is_empty(),
        "no DAMON region reached the ring within 10 s"
    );
    assert!(
        hot_frequency > cold_frequency,
        "hot region must be strictly hotter: hot {hot_frequency} vs cold {cold_frequency}"
    );

    let nr_kdamonds = std::fs::read_to_string("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")
        .expect("read nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond must be gone");
    support::assert_no_memtide_bpf_programs();
}
