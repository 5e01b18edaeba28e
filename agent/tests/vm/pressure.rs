//! Test 2, demotion under pressure: the fast node nearly full of the workload's cold data, and
//! a new hot set on node 1. memtide must demote cold data to make room and promote the hot set,
//! and node 0's free memory must never drop below its high watermark while it does.
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE};

use crate::{
    support::{self, StopOnDrop, Workload},
    vm::tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on, share},
};

const HOT_PAGES: u64 = 128 * MIB_PAGES;
/// Fast memory left usable (above the watermark and the executor's reserve) after the cold
/// data is in: a quarter of the hot set fits, the rest needs demotions.
const ROOM_PAGES: u64 = 32 * MIB_PAGES;
/// The executor's default reserve above the high watermark (`[migration] reserve_bytes`).
const RESERVE: u64 = 64 << 20;
const EPOCH_BOUND: u64 = 60;

#[test]
fn cold_data_is_demoted_to_make_room_for_a_new_hot_set() {
    if support::skip_unless_vm("cold_data_is_demoted_to_make_room_for_a_new_hot_set") {
        return;
    }
    let _timing = Timing::start("pressure");
    let high = tiering::high_watermark(FAST);
    let free = tiering::node_meminfo(FAST, "MemFree");
    // Page tables and the workload's own small allocations come out of node 0 too.
    let slack = 16 << 20;
    let cold_pages = free.saturating_sub(high + RESERVE + ROOM_PAGES * PAGE_SIZE + slack)
        / SUPERPAGE_SIZE
        * SUBPAGES as u64;
    assert!(
        cold_pages >= 256 * MIB_PAGES,
        "node 0 has only {} MiB free (high watermark {} MiB): too little to fill",
        free >> 20,
        high >> 20
    );
    let mut w = Workload::spawn(&[
        "--pages",
        &(cold_pages + HOT_PAGES).to_string(),
        "--place",
        &format!("{FAST}:{cold_pages}"),
        "--place",
        &format!("{SLOW}:{HOT_PAGES}"),
    ]);
    let cold_spec = format!("0 {cold_pages}");
    let hot_spec = format!("{cold_pages} {HOT_PAGES}");
    assert_eq!(
        pages_on(&mut w, &cold_spec).get(&FAST).copied(),
        Some(cold_pages)
    );
    assert_eq!(
        pages_on(&mut w, &hot_spec).get(&SLOW).copied(),
        Some(HOT_PAGES)
    );
    let free_before = tiering::node_meminfo(FAST, "MemFree");
    eprintln!(
        "pressure: node 0 free {} MiB before the workload, {} MiB after ({} MiB cold on it); high watermark {} MiB; hot set {} MiB on node 1",
        free >> 20,
        free_before >> 20,
        cold_pages / MIB_PAGES,
        high >> 20,
        HOT_PAGES / MIB_PAGES
    );
    let reply = w.command(&format!("start rw {hot_spec}"));
    assert!(reply.starts_with("started"), "{reply}");

    // Node 0's free memory, sampled every 50 ms for as long as the agent runs.
    let stop = StopOnDrop::new();
    let lowest = Arc::new(AtomicU64::new(u64::MAX));
    let watcher = {
        let (stop, lowest) = (stop.flag(), Arc::clone(&lowest));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                lowest.fetch_min(tiering::node_meminfo(FAST, "MemFree"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let started = Instant::now();
    let agent = tiering::start_agent("pressure", "", w.pid, &[]);
    let (mut hot_fast, mut cold_demoted, mut epochs) = (0.0, 0, 0);
    let mut reached = None;
    while epochs < EPOCH_BOUND {
        std::thread::sleep(Duration::from_secs(1));
        let hot = pages_on(&mut w, &hot_spec);
        let cold = pages_on(&mut w, &cold_spec);
        hot_fast = share(&hot, FAST, HOT_PAGES);
        cold_demoted = cold.get(&SLOW).copied().unwrap_or(0);
        let row = tiering::target_status(agent.port, w.pid).unwrap_or_default();
        epochs = row.epochs;
        eprintln!(
            "pressure: t={:>5.1}s epoch {epochs:>3}: hot on node 0 {:>5.1} %, cold demoted {:>6.1} MiB, node 0 free {} MiB (lowest {} MiB); promoted {} demoted {}",
            started.elapsed().as_secs_f64(),
            hot_fast * 100.0,
            tiering::mib(cold_demoted),
            tiering::node_meminfo(FAST, "MemFree") >> 20,
            lowest.load(Ordering::Relaxed) >> 20,
            row.promoted_bytes >> 20,
            row.demoted_bytes >> 20,
        );
        if hot_fast >= 0.9 && reached.is_none() {
            reached = Some(epochs);
        }
        if reached.is_some_and(|at| epochs >= at + 3) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(EPOCH_BOUND * 3),
            "too slow: {epochs} epochs in {:?}",
            started.elapsed()
        );
    }
    let (exit, log) = agent.stop();
    drop(stop);
    watcher.join().expect("watcher");
    let lowest = lowest.load(Ordering::Relaxed);
    if reached.is_none() {
        for line in log.lines().filter(|l| l.contains("planned")) {
            eprintln!("pressure: agent: {line}");
        }
    }
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    eprintln!(
        "pressure: hot set {:.1} % on node 0 after {} epochs, {:.1} MiB of cold data demoted ({:.1} MiB of room at the start), node 0 free never below {} MiB (high watermark {} MiB)",
        hot_fast * 100.0,
        reached.unwrap_or(epochs),
        tiering::mib(cold_demoted),
        tiering::mib(free_before.saturating_sub(high + RESERVE) / PAGE_SIZE),
        lowest >> 20,
        high >> 20
    );
    assert!(
        reached.is_some(),
        "the hot set reached only {:.1} % of node 0 within {EPOCH_BOUND} epochs",
        hot_fast * 100.0
    );
    assert!(
        hot_fast >= 0.9,
        "the hot set fell back to {:.1} %",
        hot_fast * 100.0
    );
    // At least what did not fit had to go: the hot set minus the room there was (what was free
    // above the watermark and the executor's reserve once the cold data was in).
    let room = free_before.saturating_sub(high + RESERVE) / PAGE_SIZE;
    assert!(
        (cold_demoted + room) * 10 >= HOT_PAGES * 9,
        "only {:.1} MiB of cold data demoted for a {} MiB hot set with {:.1} MiB of room",
        tiering::mib(cold_demoted),
        HOT_PAGES / MIB_PAGES,
        tiering::mib(room)
    );
    assert!(
        lowest >= high,
        "node 0's free memory dropped to {} KiB, below its high watermark of {} KiB",
        lowest >> 10,
        high >> 10
    );
    let reply = w.command("stop");
    assert!(reply.starts_with("stopped"), "{reply}");
    let reply = w.command("verify");
    assert!(reply.ends_with("mismatches=0"), "{reply}");
}
