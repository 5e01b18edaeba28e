//! Test 5, target churn: the agent follows workloads by name while they come and go, some
//! killed in the middle of their promotion. It logs each exit, counts the pages an exit left
//! unmoved, drops the dead targets from /status, keeps managing the ones that live (a
//! workload started after the churn is still promoted), does not pile up threads, and after
//! SIGTERM leaves no BPF program, no kdamond and no thread or process of its own behind.
use std::time::{Duration, Instant};

use crate::{
    support::{self, Agent, Workload},
    vm::tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on, share},
};

const PAGES: u64 = 64 * MIB_PAGES;
const CHURN: Duration = Duration::from_secs(30);

fn spawn_hot() -> Workload {
    let mut w = Workload::spawn(&[
        "--pages",
        &PAGES.to_string(),
        "--node",
        &SLOW.to_string(),
        "--no-thp",
    ]);
    let reply = w.command("start rw");
    assert!(reply.starts_with("started"), "{reply}");
    w
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count)
}

/// Processes whose comm starts with `prefix`.
fn processes(prefix: &str) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            let comm = comm.trim();
            comm.starts_with(prefix).then(|| (pid, comm.to_owned()))
        })
        .collect()
}

#[test]
fn targets_come_and_go_mid_migration_and_the_agent_carries_on() {
    if support::skip_unless_vm("targets_come_and_go_mid_migration_and_the_agent_carries_on") {
        return;
    }
    let _timing = Timing::start("churn");
    let config = tiering::config("churn", "[targets]\nnames = [\"memtide-workload\"]\n");
    let config = config.to_string_lossy().into_owned();
    let agent = Agent::start_with_env(
        &["--config", &config],
        &[("RUST_LOG", "info,memtide::daemon::target=debug")],
        Duration::from_secs(90),
    );
    let agent_pid = agent.child.id();
    let baseline_threads = threads(agent_pid);
    let mut long_lived = spawn_hot();

    let started = Instant::now();
    let (mut spawned, mut killed_mid, mut killed_other) = (1, 0, 0);
    while started.elapsed() < CHURN {
        let mut w = spawn_hot();
        spawned += 1;
        // Kill it as soon as part, but not all, of it has moved: in the middle of the
        // executor's work. Kill it anyway if that moment is missed.
        let born = Instant::now();
        let deadline = born + Duration::from_secs(12);
        let mut mid = false;
        while Instant::now() < deadline {
            let fast = pages_on(&mut w, "").get(&FAST).copied().unwrap_or(0);
            if fast > 0 && fast < PAGES {
                mid = true;
                break;
            }
            if fast == PAGES {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let fast = pages_on(&mut w, "").get(&FAST).copied().unwrap_or(0);
        w.kill();
        eprintln!(
            "churn: workload {spawned} killed after {:.1} s with {fast} of {PAGES} pages on node 0{}",
            born.elapsed().as_secs_f64(),
            if mid { " (mid-promotion)" } else { "" }
        );
        if mid {
            killed_mid += 1;
        } else {
            killed_other += 1;
        }
    }
    eprintln!(
        "churn: {spawned} workloads started in {:.0} s, {killed_mid} killed mid-promotion, {killed_other} killed otherwise; agent threads {} (at start {baseline_threads})",
        started.elapsed().as_secs_f64(),
        threads(agent_pid),
    );

    // The agent carries on: a workload started now is promoted, and so is the long-lived one.
    let mut fresh = spawn_hot();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut fresh_fast, mut long_fast) = (0.0, 0.0);
    while Instant::now() < deadline {
        fresh_fast = share(&pages_on(&mut fresh, ""), FAST, PAGES);
        long_fast = share(&pages_on(&mut long_lived, ""), FAST, PAGES);
        if fresh_fast >= 0.9 && long_fast >= 0.9 {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let status = tiering::status(agent.port);
    let managed: Vec<u32> = status.targets.iter().map(|t| t.pid).collect();
    let metrics = support::http_get(agent.port, "/metrics")
        .expect("/metrics")
        .1;
    let exited_pages = support::metric_value(
        &metrics,
        "memtide_migration_failures_total{",
        "reason=\"target_exited\"",
    )
    .unwrap_or(0.0);
    let threads_after = threads(agent_pid);
    let (exit, log) = agent.stop();
    let exits_logged = log
        .lines()
        .filter(|l| l.contains("target exited") || l.contains("target gone"))
        .count();
    let mid_logged = log
        .lines()
        .filter(|l| l.contains("target exited during migration"))
        .count();
    eprintln!(
        "churn: fresh workload {:.1} % on node 0, long-lived {:.1} %; managed at the end {managed:?}; {exits_logged} exits logged ({mid_logged} during a migration); {exited_pages} pages counted as target_exited; threads {threads_after} before SIGTERM",
        fresh_fast * 100.0,
        long_fast * 100.0
    );
    let passed = killed_mid >= 1 && fresh_fast >= 0.9 && long_fast >= 0.9;
    if !passed {
        for line in log.lines() {
            eprintln!("churn: agent: {line}");
        }
    }
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    assert!(
        killed_mid >= 1,
        "no workload was caught mid-promotion ({killed_other} killed otherwise)"
    );
    assert!(
        exits_logged >= killed_mid + killed_other,
        "{} workloads were killed but {exits_logged} exits logged:\n{log}",
        killed_mid + killed_other
    );
    assert!(
        fresh_fast >= 0.9 && long_fast >= 0.9,
        "the agent stopped promoting after the churn: fresh {:.1} %, long-lived {:.1} %",
        fresh_fast * 100.0,
        long_fast * 100.0
    );
    let mut expected = vec![long_lived.pid, fresh.pid];
    expected.sort_unstable();
    let mut managed = managed;
    managed.sort_unstable();
    assert_eq!(
        managed, expected,
        "/status must list exactly the live workloads"
    );
    // Per-target work must not leave threads behind (the blocking pool's idle threads are
    // reused and bounded by the number of targets handled at once).
    assert!(
        threads_after <= baseline_threads + 8,
        "the agent grew from {baseline_threads} to {threads_after} threads"
    );

    // Nothing of the agent's is left in the kernel or the process table.
    support::assert_no_memtide_bpf_programs();
    let nr_kdamonds = std::fs::read_to_string("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")
        .expect("nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond left behind");
    assert_eq!(processes("kdamond"), Vec::new(), "kdamond threads left");
    assert_eq!(
        processes("memtide")
            .into_iter()
            .filter(|(_, comm)| !comm.starts_with("memtide-work"))
            .collect::<Vec<_>>(),
        Vec::new(),
        "memtide processes left"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{agent_pid}")).exists(),
        "the agent's process (and its threads) still exist"
    );
    drop(fresh);
    drop(long_lived);
}
