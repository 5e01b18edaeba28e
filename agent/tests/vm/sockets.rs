//! Two sockets (#18 point 3), in the VM's two-socket layout (`vm/run.sh --layout two-socket`,
//! which vm/test.sh boots after the two-node suite): DRAM nodes 0 and 1 with CPU 0 and CPU 1,
//! a CPU-less expander behind each (node 2 behind socket 0, node 3 behind socket 1), SLIT and
//! HMAT saying so. Two workloads, each pinned to one socket's CPU with its hot set on the
//! *other* socket's expander: the real `memtide run` promotes each hot set into the DRAM of the
//! socket its threads run on, not into the other socket's, though both are fast.
use std::time::{Duration, Instant};

use crate::{
    support::{self, Workload},
    vm::{
        promotion::EPOCH_BOUND,
        tiering::{self, MIB_PAGES, Timing, pages_on, share},
    },
};

const PAGES: u64 = 96 * MIB_PAGES;
const HOT: u64 = 64 * MIB_PAGES;

/// True (after printing why) unless this is the two-socket VM.
fn skip_unless_two_sockets(test: &str) -> bool {
    if support::skip_unless_vm(test) {
        return true;
    }
    if std::env::var("MEMTIDE_VM_LAYOUT").as_deref() == Ok("two-socket") {
        return false;
    }
    eprintln!(
        "skipping {test}: runs only in the two-socket VM, which vm/test.sh boots after the \
         two-node suite"
    );
    true
}

#[test]
fn each_sockets_hot_set_lands_in_its_own_dram() {
    let name = "each_sockets_hot_set_lands_in_its_own_dram";
    if skip_unless_two_sockets(name) {
        return;
    }
    let _timing = Timing::start("sockets");
    // (CPU, its DRAM node, the other socket's expander where the pages start).
    let sockets = [(0_u32, 0_u32, 3_u32), (1, 1, 2)];
    let mut workloads: Vec<Workload> = sockets
        .iter()
        .map(|&(cpu, _, far)| {
            let mut w = Workload::spawn_pinned(
                cpu,
                &["--pages", &PAGES.to_string(), "--node", &far.to_string()],
            );
            let reply = w.command(&format!("start rw 0 {HOT}"));
            assert_eq!(reply, format!("started pages={HOT}"));
            w
        })
        .collect();
    let second = workloads[1].pid.to_string();
    let agent = tiering::start_agent("sockets", "", workloads[0].pid, &["--pid", &second]);
    let status = tiering::status(agent.port);
    assert_eq!(
        (status.fast_nodes, status.slow_nodes),
        (vec![0, 1], vec![2, 3]),
        "the agent's tiers on the two-socket machine"
    );
    let started = Instant::now();
    let hot = format!("0 {HOT}");
    let mut placed = [(0.0, 0.0); 2];
    let mut epochs = 0;
    while epochs < EPOCH_BOUND {
        std::thread::sleep(Duration::from_secs(1));
        for (i, w) in workloads.iter_mut().enumerate() {
            let (_, own, _) = sockets[i];
            let counts = pages_on(w, &hot);
            placed[i] = (share(&counts, own, HOT), share(&counts, 1 - own, HOT));
        }
        epochs = workloads
            .iter()
            .map(|w| tiering::target_status(agent.port, w.pid).map_or(0, |row| row.epochs))
            .min()
            .unwrap_or(0);
        eprintln!(
            "sockets: t={:>5.1}s epoch {epochs:>3}: CPU 0's hot set {:>5.1} % on node 0, {:>5.1} % on node 1; CPU 1's {:>5.1} % on node 1, {:>5.1} % on node 0",
            started.elapsed().as_secs_f64(),
            placed[0].0 * 100.0,
            placed[0].1 * 100.0,
            placed[1].0 * 100.0,
            placed[1].1 * 100.0,
        );
        if placed.iter().all(|&(own, _)| own >= 0.9) && epochs >= 5 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(EPOCH_BOUND * 3),
            "the agent planned only {epochs} epochs in {:?}",
            started.elapsed()
        );
    }
    let table = support::run_memtide_status(agent.port);
    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    for (i, &(cpu, own, _)) in sockets.iter().enumerate() {
        let (on_own, on_other) = placed[i];
        assert!(
            on_own >= 0.9 && on_other < 0.01,
            "the hot set of the workload on CPU {cpu}: {:.1} % on its socket's DRAM (node {own}), {:.1} % on the other socket's",
            on_own * 100.0,
            on_other * 100.0
        );
    }
    // The firmware's costs from both sockets' point of view reach the agent.
    assert!(
        table.contains("node 3: read 300 ns") || table.contains("node 3: read 400 ns"),
        "status does not show node 3's HMAT costs:\n{table}"
    );
    for w in &mut workloads {
        let reply = w.command("stop");
        assert!(reply.starts_with("stopped passes="), "{reply}");
        let reply = w.command("verify");
        assert_eq!(reply, format!("verified pages={PAGES} mismatches=0"));
    }
}
