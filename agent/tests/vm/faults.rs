//! Faults from outside the agent, on the real two-node machine:
//! - memtide's own kdamond turned off by an operator while its target still lives. The agent
//!   must notice, start it again, count it
//!   (`memtide_source_restarts_total{reason="stopped_externally"}`), keep sampling, and still
//!   leave no kdamond behind when it stops;
//! - the agent killed with SIGKILL, which leaves its kdamond running: the next agent must find
//!   it through the ownership record, remove it, and monitor with its own.
use std::time::{Duration, Instant};

use crate::{
    support::{self, metric_value, wait_for},
    vm::tiering::{self, Timing},
};

const KDAMONDS: &str = "/sys/kernel/mm/damon/admin/kdamonds";

fn kdamond_state() -> Option<String> {
    std::fs::read_to_string(format!("{KDAMONDS}/0/state"))
        .ok()
        .map(|s| s.trim().to_owned())
}

fn damon_samples(port: u16) -> f64 {
    let metrics = support::http_get(port, "/metrics").expect("/metrics").1;
    metric_value(&metrics, "memtide_samples_total{", "\"damon\"").unwrap_or(0.0)
}

fn restarts(port: u16) -> f64 {
    let metrics = support::http_get(port, "/metrics").expect("/metrics").1;
    metric_value(
        &metrics,
        "memtide_source_restarts_total{",
        "stopped_externally",
    )
    .unwrap_or(0.0)
}

#[test]
fn a_kdamond_turned_off_from_outside_is_started_again() {
    if support::skip_unless_vm("a_kdamond_turned_off_from_outside_is_started_again") {
        return;
    }
    let _timing = Timing::start("faults");
    let w = tiering::hot_on_slow(64, 16);
    let agent = tiering::start_agent("faults-kdamond", "", w.pid, &[]);
    assert!(
        wait_for(Duration::from_secs(30), || damon_samples(agent.port) > 0.0),
        "DAMON delivered no regions before the fault:\n{}",
        agent.log()
    );
    assert_eq!(kdamond_state().as_deref(), Some("on"));

    std::fs::write(format!("{KDAMONDS}/0/state"), "off").expect("turn the kdamond off");
    let turned_off = Instant::now();
    assert!(
        wait_for(Duration::from_secs(15), || restarts(agent.port) >= 1.0
            && kdamond_state().as_deref() == Some("on")),
        "the agent did not start its kdamond again (state {:?}, restarts {}):\n{}",
        kdamond_state(),
        restarts(agent.port),
        agent.log()
    );
    let restarted_after = turned_off.elapsed();
    let before = damon_samples(agent.port);
    assert!(
        wait_for(Duration::from_secs(20), || damon_samples(agent.port)
            > before),
        "no DAMON regions after the restart:\n{}",
        agent.log()
    );
    assert!(
        agent.log().contains("stopped from outside"),
        "the restart was not logged:\n{}",
        agent.log()
    );

    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    let nr_kdamonds =
        std::fs::read_to_string(format!("{KDAMONDS}/nr_kdamonds")).expect("nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond left behind");
    support::assert_no_memtide_bpf_programs();
    eprintln!(
        "faults: kdamond turned off from outside was running again after {:.1} s",
        restarted_after.as_secs_f64()
    );
}

const OWNER_FILE: &str = "/run/memtide/kdamond";

/// Removes whatever kdamond a failed test left, so later tests find DAMON free.
struct KdamondCleanup;

impl Drop for KdamondCleanup {
    fn drop(&mut self) {
        if kdamond_state().as_deref() == Some("on") {
            let _ = std::fs::write(format!("{KDAMONDS}/0/state"), "off");
        }
        let _ = std::fs::write(format!("{KDAMONDS}/nr_kdamonds"), "0");
        let _ = std::fs::remove_file(OWNER_FILE);
    }
}

#[test]
fn a_killed_agents_kdamond_is_removed_by_the_next_agent() {
    if support::skip_unless_vm("a_killed_agents_kdamond_is_removed_by_the_next_agent") {
        return;
    }
    let _timing = Timing::start("faults-sigkill");
    let _cleanup = KdamondCleanup;
    let w = tiering::hot_on_slow(64, 16);
    let killed = tiering::start_agent("faults-sigkill", "", w.pid, &[]);
    assert!(
        wait_for(Duration::from_secs(30), || damon_samples(killed.port) > 0.0),
        "DAMON delivered no regions:\n{}",
        killed.log()
    );
    let killed_pid = killed.child.id();
    let record = std::fs::read_to_string(OWNER_FILE).expect("the agent records its kdamond");
    assert!(
        record.contains(&format!("agent_pid={killed_pid}\n"))
            && record.contains(&format!("targets={}\n", w.pid)),
        "{OWNER_FILE}:\n{record}"
    );
    let (exit, _) = killed.stop_with("KILL");
    assert!(!exit.success(), "SIGKILL: {exit}");
    assert_eq!(
        kdamond_state().as_deref(),
        Some("on"),
        "a SIGKILLed agent cannot stop its kdamond"
    );

    let next = tiering::start_agent("faults-sigkill", "", w.pid, &[]);
    assert!(
        wait_for(Duration::from_secs(30), || damon_samples(next.port) > 0.0),
        "the next agent got no DAMON regions:\n{}",
        next.log()
    );
    let log = next.log();
    assert!(
        log.contains("removed the kdamond") && log.contains(&format!("agent_pid={killed_pid}")),
        "the take-over was not logged:\n{log}"
    );
    let record = std::fs::read_to_string(OWNER_FILE).expect("the next agent's record");
    assert!(
        record.contains(&format!("agent_pid={}\n", next.child.id())),
        "{OWNER_FILE}:\n{record}"
    );
    let (exit, log) = next.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    let nr_kdamonds =
        std::fs::read_to_string(format!("{KDAMONDS}/nr_kdamonds")).expect("nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond left behind");
    assert!(
        !std::path::Path::new(OWNER_FILE).exists(),
        "a clean stop removes {OWNER_FILE}"
    );
    support::assert_no_memtide_bpf_programs();
    eprintln!("faults: the kdamond of SIGKILLed agent {killed_pid} was removed by the next agent");
}
