//! `memtide run` on this machine (one node, swfault): samples and hot bytes appear for a
//! child that keeps mapping, touching and unmapping memory; `memtide status` shows its row;
//! SIGTERM and SIGINT exit 0 and leave no BPF program behind. Bad configurations fail by key.
mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use support::{Agent, Workload, http_get, metric_sum, metric_value, status_pids};

#[test]
fn run_samples_a_churning_child_reports_it_and_exits_cleanly() {
    if support::skip_unless_root("run_samples_a_churning_child_reports_it_and_exits_cleanly") {
        return;
    }
    let mut workload = Workload::spawn(&["--pages", "4096", "--no-thp"]);
    let pid = workload.pid.to_string();
    let agent = Agent::start(&["--pid", &pid], Duration::from_secs(20));
    let label = format!(":{pid}\"");

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut metrics = String::new();
    while Instant::now() < deadline {
        // Each round faults every page in again: the swfault source's food. `churn` ends with
        // the buffer discarded, and an epoch whose sampled pages are all absent has no tier
        // to report (no hot bytes, no hit ratio): `touch` makes them resident again.
        assert!(workload.command("churn 4").starts_with("churned"));
        assert!(workload.command("touch").starts_with("touched"));
        metrics = http_get(agent.port, "/metrics")
            .expect("/metrics answers")
            .1;
        let samples = metric_value(&metrics, "memtide_samples_total{", "swfault");
        let hot = metric_sum(&metrics, "memtide_hot_bytes{", &label);
        let ratio = metric_value(&metrics, "memtide_fast_tier_hit_ratio{", &label);
        if samples.is_some_and(|n| n > 0.0) && hot.is_some_and(|n| n > 0.0) && ratio.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        metric_value(&metrics, "memtide_samples_total{", "swfault").is_some_and(|n| n > 0.0),
        "no swfault samples:\n{metrics}"
    );
    assert!(
        metric_sum(&metrics, "memtide_hot_bytes{", &label).is_some_and(|n| n > 0.0),
        "no hot bytes for the child:\n{metrics}"
    );
    assert!(
        metric_value(&metrics, "memtide_fast_tier_hit_ratio{", &label).is_some(),
        "no hit ratio for the child:\n{metrics}"
    );

    let status = Command::new(support::memtide_bin())
        .args(["status", "--address", &format!("127.0.0.1:{}", agent.port)])
        .output()
        .expect("memtide status");
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "memtide status failed: {table}");
    assert!(
        table.lines().any(|line| line.contains(&format!(":{pid} "))),
        "status has no row for the child:\n{table}"
    );
    assert!(table.contains("nothing to migrate to"), "{table}");

    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    assert!(log.contains("memtide stopped"), "{log}");
    support::assert_no_memtide_bpf_programs();
}

/// SIGINT (Ctrl-C in a terminal) is a clean stop like SIGTERM, not the default kill: exit 0,
/// the shutdown logged, the BPF programs detached.
#[test]
fn sigint_stops_cleanly_like_sigterm() {
    if support::skip_unless_root("sigint_stops_cleanly_like_sigterm") {
        return;
    }
    let mut workload = Workload::spawn(&["--pages", "1024", "--no-thp"]);
    let pid = workload.pid.to_string();
    let agent = Agent::start(&["--pid", &pid], Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut samples = 0.0;
    while Instant::now() < deadline && samples == 0.0 {
        assert!(workload.command("churn 2").starts_with("churned"));
        let metrics = http_get(agent.port, "/metrics").expect("/metrics").1;
        samples = metric_value(&metrics, "memtide_samples_total{", "swfault").unwrap_or(0.0);
    }
    assert!(samples > 0.0, "the source never sampled:\n{}", agent.log());
    let (exit, log) = agent.stop_with("INT");
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    assert!(log.contains("SIGINT: stopping"), "{log}");
    assert!(log.contains("memtide stopped"), "{log}");
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn bad_configurations_fail_check_config_and_run_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "unknown.toml",
            "[agent]\nlisten_address = \"127.0.0.1:1\"\n",
            "listen_address",
        ),
        (
            "type.toml",
            "[sources]\nring_bytes = \"four megs\"\n",
            "ring_bytes",
        ),
        (
            "node.toml",
            "[topology]\nfast_nodes = [63]\n",
            "topology.fast_nodes",
        ),
        (
            "range.toml",
            "[sources]\ncpu_budget_percent = 0.0\n",
            "sources.cpu_budget_percent",
        ),
    ];
    for (name, text, key) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        let check = Command::new(support::memtide_bin())
            .arg("check-config")
            .arg(&path)
            .output()
            .expect("memtide check-config");
        let stderr = String::from_utf8_lossy(&check.stderr);
        assert!(!check.status.success(), "{name} passed check-config");
        assert!(
            stderr.contains(key),
            "check-config on {name} does not name {key}: {stderr}"
        );
        let run = Command::new(support::memtide_bin())
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&path)
            .output()
            .expect("memtide run");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "run with {name}: {stderr}");
        assert!(
            stderr.contains(key),
            "run with {name} does not name {key}: {stderr}"
        );
    }
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[agent]\nobserve = true\n").expect("write");
    let check = Command::new(support::memtide_bin())
        .arg("check-config")
        .arg(&good)
        .output()
        .expect("check-config");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A pid or cgroup named on the command line that is not there is a typo, not a target to
/// wait for: `memtide run` stops at once with exit code 2 and names it, and opens no port.
#[test]
fn targets_named_on_the_command_line_must_exist_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("memtide.toml");
    std::fs::write(&config, "[agent]\nobserve = true\n").expect("write config");
    let cases: [(&[&str], &str); 2] = [
        (&["--pid", "999999999"], "--pid 999999999"),
        (
            &["--cgroup", "memtide-test.slice/no-such.service"],
            "no such cgroup",
        ),
    ];
    for (args, named) in cases {
        let run = Command::new(support::memtide_bin())
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(args)
            .output()
            .expect("memtide run");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "run {args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "run {args:?} does not say {named:?}: {stderr}"
        );
        assert!(
            !stderr.contains("serving /metrics"),
            "run {args:?} started serving before refusing: {stderr}"
        );
    }
}

#[test]
fn sighup_reloads_and_a_broken_file_keeps_the_running_configuration() {
    if support::skip_unless_root("sighup_reloads_and_a_broken_file_keeps_the_running_configuration")
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("memtide.toml");
    std::fs::write(&path, "[agent]\nobserve = true\n").expect("write config");
    let config = path.display().to_string();
    let agent = Agent::start(&["--config", &config], Duration::from_secs(20));
    let hup = |agent: &Agent| {
        let status = Command::new("kill")
            .args(["-HUP", &agent.child.id().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(status.success());
        std::thread::sleep(Duration::from_millis(700));
    };
    std::fs::write(&path, "[agent]\nobserve = maybe\n").expect("break config");
    hup(&agent);
    assert_eq!(
        http_get(agent.port, "/healthz").map(|(code, _)| code),
        Some(200),
        "the agent must survive a broken reload"
    );
    std::fs::write(
        &path,
        "[agent]\nobserve = true\n[engine]\ninterval_ms = 40\n",
    )
    .expect("fix");
    hup(&agent);
    let (exit, log) = agent.stop();
    assert!(exit.success(), "{log}");
    assert!(
        log.contains("keeping the running one") && log.contains("observe"),
        "a broken reload must say why and keep the old configuration:\n{log}"
    );
    assert!(log.contains("configuration reloaded"), "{log}");
}

#[test]
fn sighup_follows_the_new_file_and_keeps_command_line_targets() {
    if support::skip_unless_root("sighup_follows_the_new_file_and_keeps_command_line_targets") {
        return;
    }
    let (a, b, c) = (
        Workload::spawn(&["--pages", "16"]),
        Workload::spawn(&["--pages", "16"]),
        Workload::spawn(&["--pages", "16"]),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("memtide.toml");
    let file = |pids: &[u32]| {
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        std::fs::write(
            &path,
            format!(
                "[agent]\nobserve = true\n[targets]\npids = [{}]\n",
                list.join(", ")
            ),
        )
        .expect("write config");
    };
    file(&[a.pid, b.pid]);
    let config = path.display().to_string();
    let agent = Agent::start(
        &["--config", &config, "--pid", &c.pid.to_string()],
        Duration::from_secs(20),
    );
    let mut all = vec![u64::from(a.pid), u64::from(b.pid), u64::from(c.pid)];
    all.sort_unstable();
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_pids(agent.port) != all && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(status_pids(agent.port), all, "before the reload");

    file(&[a.pid]);
    let status = Command::new("kill")
        .args(["-HUP", &agent.child.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    let mut expected = vec![u64::from(a.pid), u64::from(c.pid)];
    expected.sort_unstable();
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_pids(agent.port) != expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = status_pids(agent.port);
    let (exit, log) = agent.stop();
    assert_eq!(
        after, expected,
        "the pid removed from the file is dropped, the --pid one stays:\n{log}"
    );
    assert!(exit.success(), "{log}");
}
