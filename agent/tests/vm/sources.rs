//! Test 7, both hotness sources the VM offers work through the real `memtide run`: the
//! software page-fault source on a workload that keeps faulting, and DAMON on one that keeps a
//! range hot. Each must deliver samples attributed to its target, give it a hot set, plan
//! epochs, and stop cleanly.
use std::time::{Duration, Instant};

use crate::{
    support::{self, Agent, Workload, metric_value},
    vm::tiering::{self, MIB_PAGES, Timing},
};

/// Runs the agent with only `source` on process `pid` until the target has samples and a hot
/// set (or `wait` passes); returns the source's samples, the target's samples, its largest hot
/// set in bytes and the epochs planned.
fn run_with(source: &str, pid: u32, wait: Duration) -> (f64, u64, u64, u64) {
    let config = tiering::write_config(
        &format!("sources-{source}"),
        &format!(
            "[sources]\norder = [\"{source}\"]\n[engine.policy.epoch]\nadaptive = false\ninitial_ms = 1000\n"
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let pid_arg = pid.to_string();
    let agent = Agent::start(
        &["--config", &config, "--pid", &pid_arg],
        Duration::from_secs(90),
    );
    let status = tiering::status(agent.port);
    assert_eq!(
        status.source, source,
        "the agent must run the {source} source"
    );
    let started = Instant::now();
    let (mut samples, mut row) = (0.0, None);
    let mut max_hot = 0;
    while started.elapsed() < wait {
        std::thread::sleep(Duration::from_millis(500));
        let metrics = support::http_get(agent.port, "/metrics")
            .expect("/metrics")
            .1;
        samples = metric_value(&metrics, "memtide_samples_total{", &format!("\"{source}\""))
            .unwrap_or(0.0);
        let current = tiering::target_status(agent.port, pid);
        max_hot = max_hot.max(current.as_ref().map_or(0, |r| r.hot_bytes));
        row = current;
        if samples > 0.0 && max_hot > 0 && row.as_ref().is_some_and(|r| r.epochs >= 3) {
            break;
        }
    }
    let row = row.unwrap_or_default();
    let (exit, log) = agent.stop();
    assert!(
        exit.success(),
        "memtide run ({source}) exited with {exit}:\n{log}"
    );
    support::assert_no_memtide_bpf_programs();
    eprintln!(
        "sources: {source}: {samples} samples in {:.1} s, {} for the target, largest hot set {max_hot} bytes, {} epochs",
        started.elapsed().as_secs_f64(),
        row.samples,
        row.epochs
    );
    (samples, row.samples, max_hot, row.epochs)
}

#[test]
fn swfault_and_damon_sources_work_in_the_daemon() {
    if support::skip_unless_vm("swfault_and_damon_sources_work_in_the_daemon") {
        return;
    }
    let _timing = Timing::start("sources");

    // swfault: a workload that maps and unmaps 16 MiB of 4 KiB pages over and over.
    let mut faulting = Workload::spawn(&["--pages", &(16 * MIB_PAGES).to_string(), "--no-thp"]);
    let faulting_pid = faulting.pid;
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let driver = std::thread::spawn(move || {
        // Until told to stop, or until the test's end drops the sender (a failed test too).
        while stop_rx.try_recv() == Err(std::sync::mpsc::TryRecvError::Empty) {
            let reply = faulting.command("churn 2");
            assert!(reply.starts_with("churned"), "{reply}");
        }
        faulting
    });
    tiering::progress("sources: swfault agent starting");
    let (samples, target_samples, hot, epochs) =
        run_with("swfault", faulting_pid, Duration::from_secs(30));
    tiering::progress("sources: swfault agent stopped");
    stop_tx.send(()).ok();
    drop(driver.join().expect("churn driver"));
    assert!(
        samples > 0.0 && target_samples > 0,
        "swfault delivered no samples"
    );
    assert!(hot > 0, "no hot set from page-fault samples");
    assert!(epochs >= 3, "only {epochs} epochs planned");

    // DAMON: a workload on node 1 with a 16 MiB hot range in 64 MiB.
    let w = tiering::hot_on_slow(64, 16);
    tiering::progress("sources: damon agent starting");
    let (samples, target_samples, hot, epochs) = run_with("damon", w.pid, Duration::from_secs(30));
    tiering::progress("sources: damon agent stopped");
    assert!(
        samples > 0.0 && target_samples > 0,
        "DAMON delivered no regions"
    );
    assert!(hot > 0, "no hot set from DAMON regions");
    assert!(epochs >= 3, "only {epochs} epochs planned");
    let nr_kdamonds = std::fs::read_to_string("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")
        .expect("nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond left behind");
}
