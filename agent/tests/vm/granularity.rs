//! Test 3, granularity, in two phases (one agent each, so each gets DAMON's regions to itself):
//! - dense: a 2 MiB-aligned 32 MiB region on transparent huge pages, every page hot, must move
//!   as huge pages: node 0's AnonHugePages grows by at least 90 % of the region;
//! - sparse: a 32 MiB region of 4 KiB pages with a few hot pages per 2 MiB must move only its
//!   hot subpages: at most 25 % of the region migrates, and the hot pages do.
//!
//! DAMON's regions never grow past the monitored span divided by `min_regions`, and the span
//! includes the gap between a process's binary and its heap, which address-space randomisation
//! draws anywhere up to 1 GiB: with it, the largest mixed hot/cold region varied from tens of
//! KiB to about 500 KiB from run to run, and the cold pages credited with its accesses from 9 %
//! to 26 % of the region. The sparse workload runs without that randomisation, so the test
//! checks memtide's choice of granularity at one DAMON resolution (regions of at most about
//! 20 KiB) instead of the layout a run happened to draw.
//!
//! The sparse region is not THP-backed: under a THP the hardware keeps one accessed bit for
//! all 512 subpages, so no source the VM has (DAMON reads page-table accessed bits; there is
//! no PEBS or IBS under emulation) can tell its hot subpages from its cold ones.
use std::time::{Duration, Instant};

use memtide_core::units::PAGE_SIZE;

use crate::{
    support::{self, Workload},
    vm::tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on, share},
};

const DENSE_PAGES: u64 = 64 * MIB_PAGES;
const DENSE_HOT_PAGES: u64 = 32 * MIB_PAGES;
const SPARSE_PAGES: u64 = 32 * MIB_PAGES;
/// Sparse hot set: the first `SPARSE_HOT` pages of every 2 MiB.
const STRIDE: u64 = 512;
const SPARSE_HOT: u64 = 8;
const EPOCH_BOUND: u64 = 40;
/// DAMON's minimum number of regions for the sparse phase (its default is 10).
const SPARSE_MIN_REGIONS: u64 = 2000;

fn anon_huge_bytes(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).expect("smaps_rollup");
    smaps
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("AnonHugePages")
        * 1024
}

/// Runs an agent with `extra` configuration on `w` until `done(w, epochs)` holds for three
/// epochs in a row or `EPOCH_BOUND` epochs pass; returns the epochs it took (None: never), the
/// agent's /metrics at the end and its plans (the log's "planned" lines).
fn drive(
    name: &str,
    extra: &str,
    w: &mut Workload,
    mut done: impl FnMut(&mut Workload, u64) -> bool,
) -> (Option<u64>, String, Vec<String>) {
    let started = Instant::now();
    let agent = tiering::start_agent(name, extra, w.pid, &[]);
    let mut reached = None;
    let mut epochs = 0;
    while epochs < EPOCH_BOUND {
        std::thread::sleep(Duration::from_secs(1));
        epochs = tiering::target_status(agent.port, w.pid).map_or(0, |row| row.epochs);
        if done(w, epochs) {
            reached.get_or_insert(epochs);
        } else {
            reached = None;
        }
        if reached.is_some_and(|at| epochs >= at + 3) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(EPOCH_BOUND * 3),
            "{name}: too slow: {epochs} epochs in {:?}",
            started.elapsed()
        );
    }
    let metrics = support::http_get(agent.port, "/metrics")
        .expect("/metrics")
        .1;
    let (exit, log) = agent.stop();
    let plans: Vec<String> = log
        .lines()
        .filter(|l| l.contains("planned"))
        .map(|l| format!("{name}: agent: {l}"))
        .collect();
    if reached.is_none() {
        plans.iter().for_each(|line| eprintln!("{line}"));
    }
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    (reached, metrics, plans)
}

#[test]
fn dense_regions_move_as_huge_pages_and_sparse_ones_page_by_page() {
    if support::skip_unless_vm("dense_regions_move_as_huge_pages_and_sparse_ones_page_by_page") {
        return;
    }
    let _timing = Timing::start("granularity");

    // Dense, on huge pages.
    let mut dense = Workload::spawn(&[
        "--pages",
        &DENSE_PAGES.to_string(),
        "--node",
        &SLOW.to_string(),
    ]);
    let dense_huge = anon_huge_bytes(dense.pid);
    assert!(
        dense_huge >= DENSE_PAGES * PAGE_SIZE * 9 / 10,
        "THP must back the dense workload (THP=always in the VM): {} MiB",
        dense_huge >> 20
    );
    let node0_huge_before = tiering::node_meminfo(FAST, "AnonHugePages");
    let dense_spec = format!("0 {DENSE_HOT_PAGES}");
    assert!(
        dense
            .command(&format!("start rw {dense_spec}"))
            .starts_with("started")
    );
    let started = Instant::now();
    let mut dense_fast = 0.0;
    let (dense_epochs, metrics, dense_plans) =
        drive("granularity-dense", "", &mut dense, |w, epochs| {
            dense_fast = share(&pages_on(w, &dense_spec), FAST, DENSE_HOT_PAGES);
            eprintln!(
                "granularity: dense t={:>5.1}s epoch {epochs:>3}: hot region {:>5.1} % on node 0",
                started.elapsed().as_secs_f64(),
                dense_fast * 100.0
            );
            dense_fast >= 0.9
        });
    let node0_huge_gain =
        tiering::node_meminfo(FAST, "AnonHugePages").saturating_sub(node0_huge_before);
    let dense_huge_after = anon_huge_bytes(dense.pid);
    let moved_at = |class: &str| {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("memtide_migrated_bytes_total{")
                    && l.contains(&format!(":{}\"", dense.pid))
                    && l.contains("direction=\"promote\"")
                    && l.contains(&format!("granularity=\"{class}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            / f64::from(1 << 20)
    };
    eprintln!(
        "granularity: dense: {:.1} % of the hot region on node 0 after {dense_epochs:?} epochs; node 0 AnonHugePages +{} MiB for a {} MiB region ({} MiB of THP in the process before, {} MiB after); memtide promoted {:.1} MiB at 2 MiB granularity, {:.2} MiB at 64 KiB, {:.2} MiB at 4 KiB",
        dense_fast * 100.0,
        node0_huge_gain >> 20,
        DENSE_HOT_PAGES / MIB_PAGES,
        dense_huge >> 20,
        dense_huge_after >> 20,
        moved_at("2m"),
        moved_at("64k"),
        moved_at("4k"),
    );
    // The plans, when the region did not move as huge pages (each plan's moves and sizes).
    let dense_moved_huge = node0_huge_gain * 10 >= DENSE_HOT_PAGES * PAGE_SIZE * 9;
    if !dense_moved_huge {
        dense_plans.iter().for_each(|line| eprintln!("{line}"));
    }
    drop(dense);

    // Sparse, on 4 KiB pages: DAMON at a finer resolution than its default (at least 2000
    // regions, so regions can be a few pages wide), and a DAMON weight of 4: a page DAMON sees
    // accessed in a 5 ms sampling interval counts as 4 reads (the default 1 is a floor; the
    // sparse hot pages are read every millisecond or so).
    let mut sparse = Workload::spawn_without_aslr(&[
        "--pages",
        &SPARSE_PAGES.to_string(),
        "--node",
        &SLOW.to_string(),
        "--no-thp",
    ]);
    assert_eq!(
        anon_huge_bytes(sparse.pid),
        0,
        "the sparse workload has no THP"
    );
    let span = tiering::damon_span(sparse.pid);
    eprintln!(
        "granularity: sparse: DAMON monitors {} MiB of the workload's address space: regions of at most {} KiB",
        span >> 20,
        (span / SPARSE_MIN_REGIONS) >> 10
    );
    let sparse_hot_spec = format!("0 {SPARSE_PAGES} {STRIDE} {SPARSE_HOT}");
    let sparse_hot_pages = SPARSE_PAGES / STRIDE * SPARSE_HOT;
    assert!(
        sparse
            .command(&format!("start rw {sparse_hot_spec}"))
            .starts_with("started")
    );
    let started = Instant::now();
    let (mut sparse_hot_fast, mut sparse_moved) = (0.0, 0);
    let (sparse_epochs, _, _) = drive(
        "granularity-sparse",
        &format!(
            "[sources.damon]\nmin_regions = {SPARSE_MIN_REGIONS}\nmax_regions = {}\n[engine]\ndamon_weight = 4\n",
            2 * SPARSE_MIN_REGIONS
        ),
        &mut sparse,
        |w, epochs| {
            sparse_hot_fast = share(&pages_on(w, &sparse_hot_spec), FAST, sparse_hot_pages);
            sparse_moved = pages_on(w, "").get(&FAST).copied().unwrap_or(0);
            eprintln!(
                "granularity: sparse t={:>5.1}s epoch {epochs:>3}: hot pages {:>5.1} % on node 0, {:.2} MiB of the region moved",
                started.elapsed().as_secs_f64(),
                sparse_hot_fast * 100.0,
                tiering::mib(sparse_moved),
            );
            sparse_hot_fast >= 0.9
        },
    );
    #[expect(clippy::cast_precision_loss, reason = "page counts")]
    let sparse_share = sparse_moved as f64 / SPARSE_PAGES as f64;
    eprintln!(
        "granularity: sparse: {:.1} % of the {sparse_hot_pages} hot pages on node 0 after {sparse_epochs:?} epochs; {:.2} MiB of the {} MiB region moved ({:.1} %)",
        sparse_hot_fast * 100.0,
        tiering::mib(sparse_moved),
        SPARSE_PAGES / MIB_PAGES,
        sparse_share * 100.0
    );

    assert!(
        dense_fast >= 0.9,
        "the dense hot region is {:.1} % on node 0",
        dense_fast * 100.0
    );
    assert!(
        dense_moved_huge,
        "the dense region did not move as huge pages: node 0 AnonHugePages grew by {} MiB only",
        node0_huge_gain >> 20
    );
    assert!(
        sparse_hot_fast >= 0.9,
        "only {:.1} % of the sparse hot pages reached node 0",
        sparse_hot_fast * 100.0
    );
    assert!(
        sparse_share <= 0.25,
        "{:.1} % of the sparse region migrated (at most 25 % allowed)",
        sparse_share * 100.0
    );
}
