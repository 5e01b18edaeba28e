//! Privileged, real kernel and real BPF: the software page-fault source end to end.
//!
//! A child touches 4096 pages at known addresses; the perf_event → BPF → ring → ingest path
//! must deliver at least 99 % of those pages with the child's pid, and the faults of a second
//! child that is not a target must be filtered out inside BPF. Runs on the host and in the VM.
mod support;

use memtide_core::{ingest::IngestCounters, units::PAGE_SIZE};
use std::{
    collections::BTreeSet,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use memtide::sources::{
    SampleRoute, SampleRouter, TargetChannel, TargetInput,
    perf::{
        ring::{DRAIN_INTERVAL, run_sample_ring},
        sampler::Sampler,
    },
    swfault,
};
use support::Workload;
use tokio::sync::mpsc;

const PAGES: usize = 4096;

#[test]
fn page_faults_of_a_target_arrive_with_pid_and_address_and_others_are_filtered() {
    if support::skip_unless_root("swfault end to end") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let workload_args = ["--pages", &PAGES.to_string(), "--no-thp"].map(str::to_owned);
        let args: Vec<&str> = workload_args.iter().map(String::as_str).collect();
        let mut target = Workload::spawn(&args);
        let mut bystander = Workload::spawn(&args);

        let cpus = aya::util::online_cpus().expect("online CPUs");
        let mut sampler =
            Sampler::start(&swfault::spec(cpus, 1, 1 << 22, true)).expect("start swfault sampler");
        sampler.add_target(target.pid).expect("add target");
        let ring = sampler.take_ring().expect("ring");

        let counters = Arc::new(IngestCounters::default());
        let (control, control_rx) = mpsc::unbounded_channel();
        let (samples_tx, mut samples_rx) = mpsc::channel(4096);
        control
            .send(SampleRoute::Add {
                pid: target.pid,
                sender: TargetChannel(samples_tx),
            })
            .expect("route");
        let ingest = tokio::spawn(run_sample_ring(
            ring,
            SampleRouter::new(256, Arc::clone(&counters)),
            control_rx,
            DRAIN_INTERVAL,
        ));

        assert_eq!(target.command("touch"), format!("touched {PAGES}"));
        assert_eq!(bystander.command("touch"), format!("touched {PAGES}"));

        let in_target = |addr: u64| addr >= target.base && addr < target.base + target.size;
        let mut pages = BTreeSet::new();
        let mut wrong_pid = 0usize;
        let deadline = Instant::now() + Duration::from_secs(20);
        while pages.len() < PAGES && Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(200), samples_rx.recv()).await {
                Ok(Some(TargetInput::Samples(batch))) => {
                    for sample in batch {
                        if sample.pid != target.pid {
                            wrong_pid += 1;
                        }
                        if in_target(sample.addr) {
                            pages.insert(sample.addr / PAGE_SIZE);
                        }
                    }
                }
                Ok(None) => break,
                Ok(Some(TargetInput::Regions(_))) | Err(_) => {}
            }
        }
        drop(control);
        ingest.await.expect("ingest task").expect("ingest loop");

        let drops = sampler.drop_counts().expect("drop counters");
        eprintln!(
            "swfault: {} of {PAGES} target pages sampled; drops {drops:?}; decoded {}",
            pages.len(),
            counters.decoded.load(Ordering::Relaxed)
        );
        assert!(
            pages.len() * 100 >= PAGES * 99,
            "at least 99 % of the touched pages must arrive: got {}",
            pages.len()
        );
        assert_eq!(
            wrong_pid, 0,
            "only the target's samples may reach its route"
        );
        assert!(
            drops["not_target"] >= PAGES as u64 * 99 / 100,
            "the bystander's faults must be dropped in BPF as not_target: {drops:?}"
        );
        assert_eq!(
            counters.unrouted.load(Ordering::Relaxed),
            0,
            "nothing of the bystander may leave BPF"
        );
        drop(bystander);
        drop(sampler);
        support::assert_no_memtide_bpf_programs();
    });
}

/// A sample storm into a ring nobody drains: the BPF side drops and counts (`ring_full`)
/// instead of blocking the faulting process, and the workload finishes its work.
#[test]
fn a_sample_storm_into_a_full_ring_is_dropped_and_counted() {
    if support::skip_unless_root("a_sample_storm_into_a_full_ring_is_dropped_and_counted") {
        return;
    }
    let mut target = Workload::spawn(&["--pages", "4096", "--no-thp"]);
    let cpus = aya::util::online_cpus().expect("online CPUs");
    // One page of ring: room for 128 samples.
    let mut sampler =
        Sampler::start(&swfault::spec(cpus, 1, 4096, true)).expect("start swfault sampler");
    sampler.add_target(target.pid).expect("add target");
    let _undrained = sampler.take_ring().expect("ring");
    let reply = target.command("churn 4");
    assert!(
        reply.starts_with("churned"),
        "the workload was not held up: {reply}"
    );
    let drops = sampler.drop_counts().expect("drop counts");
    assert!(
        drops["ring_full"] > 10_000,
        "4 rounds of 4096 faults into a 128-sample ring must overflow: {drops:?}"
    );
    drop(sampler);
    support::assert_no_memtide_bpf_programs();
}
