//! `memtide run --observe --pid CHILD` in the VM, where the DAMON source is free: within 30 s
//! /metrics shows DAMON samples, hot bytes for the child (not the whole of it) and a hit
//! ratio; promtool accepts the exposition; `memtide status` prints the child's row; SIGTERM
//! exits 0 and leaves no BPF program and no kdamond behind.
use std::{
    io::Write as _,
    process::{Command, Stdio},
    sync::{atomic::Ordering, mpsc as std_mpsc},
    time::{Duration, Instant},
};

use memtide_core::units::PAGE_SIZE;

use crate::support::{self, Agent, StopOnDrop, Workload, http_get, metric_sum, metric_value};

const MIB_PAGES: usize = (1 << 20) / PAGE_SIZE as usize;
const HOT_PAGES: usize = 64 * MIB_PAGES;
const COLD_PAGES: usize = 512 * MIB_PAGES;

#[test]
fn observe_mode_with_damon_reports_the_hot_region_and_cleans_up() {
    if support::skip_unless_vm("observe_mode_with_damon_reports_the_hot_region_and_cleans_up") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("daemon");
    let mut workload = Workload::spawn(&["--pages", &(HOT_PAGES + COLD_PAGES).to_string()]);
    assert!(workload.command("touch").starts_with("touched"));
    let pid = workload.pid;
    let total_bytes = workload.size;
    // Keep the hot region busy in short rounds until the test is done with the agent, however
    // long the agent takes to start under emulation.
    let stop = StopOnDrop::new();
    let (done_tx, done_rx) = std_mpsc::channel();
    let driver = {
        let stop = stop.flag();
        std::thread::spawn(move || {
            let mut reply = String::new();
            while !stop.load(Ordering::Relaxed) {
                reply = workload.command(&format!("hot 0 {HOT_PAGES} 2 r"));
            }
            done_tx.send(reply).ok();
            workload
        })
    };

    let agent = Agent::start_with_env(
        &["--observe", "--pid", &pid.to_string()],
        &[("RUST_LOG", "info,memtide::daemon::target=debug")],
        Duration::from_secs(90),
    );
    let label = format!(":{pid}\"");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut metrics = String::new();
    let (mut samples, mut hot, mut ratio) = (None, None, None);
    while Instant::now() < deadline {
        metrics = http_get(agent.port, "/metrics").expect("/metrics").1;
        samples = metric_value(&metrics, "memtide_samples_total{", "damon");
        hot = metric_sum(&metrics, "memtide_hot_bytes{", &label);
        ratio = metric_value(&metrics, "memtide_fast_tier_hit_ratio{", &label);
        if samples.is_some_and(|n| n > 0.0) && hot.is_some_and(|n| n > 0.0) && ratio.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("vm daemon: samples {samples:?}, hot bytes {hot:?}, hit ratio {ratio:?}");
    assert!(
        samples.is_some_and(|n| n > 0.0),
        "no DAMON samples:\n{metrics}"
    );
    #[expect(clippy::cast_precision_loss, reason = "byte counts for a comparison")]
    let whole = total_bytes as f64;
    assert!(
        hot.is_some_and(|n| n > 0.0 && n < whole),
        "hot bytes must be some but not all of the child's memory:\n{metrics}\nagent log:\n{}",
        agent.log()
    );
    assert!(ratio.is_some(), "no hit ratio:\n{metrics}");

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/bootstrap.sh vm installs it)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(metrics.as_bytes())
        .expect("feed promtool");
    let checked = promtool.wait_with_output().expect("promtool");
    assert!(
        checked.status.success(),
        "promtool check metrics rejected the exposition: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let table = support::run_memtide_status(agent.port);
    assert!(
        table.lines().any(|line| line.contains(&format!(":{pid} "))),
        "status has no row for the child:\n{table}"
    );
    assert!(table.contains("source: damon"), "{table}");
    // The VM declares HMAT (vm/run.sh: node 1 at 300 ns and 5 GiB/s from node 0's CPUs): the
    // running agent reads it, exports it and says where it came from.
    assert!(
        table.contains("node 1: read 300 ns") && table.contains("(hmat)"),
        "status does not show node 1's HMAT costs:\n{table}"
    );
    let latency = metrics.lines().find_map(|line| {
        let rest = line.strip_prefix("memtide_tier_latency_seconds{")?;
        (rest.contains("node=\"1\"") && rest.contains("kind=\"read\""))
            .then(|| rest.rsplit(' ').next()?.parse::<f64>().ok())?
    });
    assert_eq!(
        latency,
        Some(300e-9),
        "node 1's read latency:\n{metrics}\nagent log:\n{}",
        agent.log()
    );
    assert!(
        metrics.contains("memtide_tier_bandwidth_bytes_per_second{"),
        "no HMAT bandwidth in /metrics:\n{metrics}"
    );

    drop(stop);
    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    let nr_kdamonds = std::fs::read_to_string("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")
        .expect("nr_kdamonds");
    assert_eq!(nr_kdamonds.trim(), "0", "memtide's kdamond left behind");
    support::assert_no_memtide_bpf_programs();
    let reply = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("workload finished");
    assert!(reply.starts_with("hot passes="), "{reply}");
    drop(driver.join().expect("driver"));
}
