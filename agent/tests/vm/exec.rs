//! Real migrations on the two-node VM through memtide's executor: the workload's pages moved
//! node 1 → node 0 and back at 4 KiB, huge pages moved whole, a 64 KiB move inside a huge page
//! after a debugfs split, and the executor's throughput against numactl's `migratepages`.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    process::Command,
    time::{Duration, Instant},
};

use memtide_config::ExecConfig;
use memtide_core::units::{Direction, PAGE_SIZE, SUPERPAGE_SIZE};
use memtide_host::{
    exec::{ExecReport, Executor, KernelBackend, MoveRequest},
    sysfs::HostRoot,
    targets::{Target, placement},
};

use crate::support::{self, Workload};

/// `migratepages PID FROM TO`, timed.
fn migratepages(pid: u32, from: u32, to: u32) -> Duration {
    let started = Instant::now();
    let status = Command::new("migratepages")
        .args([pid.to_string(), from.to_string(), to.to_string()])
        .status()
        .expect("run migratepages (numactl)");
    let elapsed = started.elapsed();
    assert!(status.success(), "migratepages {pid} {from} {to}: {status}");
    elapsed
}

/// Requests moving `[base, base + size)` to `node`: 2 MiB-aligned middle at `granularity`,
/// edges at 4 KiB.
fn requests(base: u64, size: u64, node: u32, granularity: u64) -> Vec<MoveRequest> {
    let direction = if node == 0 {
        Direction::Promote
    } else {
        Direction::Demote
    };
    let req = |start: u64, end: u64, granularity| MoveRequest {
        start,
        len: end - start,
        to_node: node,
        granularity,
        direction,
    };
    let end = base + size;
    if granularity < SUPERPAGE_SIZE {
        return vec![req(base, end, granularity)];
    }
    let (mid_start, mid_end) = (
        base.div_ceil(SUPERPAGE_SIZE) * SUPERPAGE_SIZE,
        end / SUPERPAGE_SIZE * SUPERPAGE_SIZE,
    );
    let mut out = Vec::new();
    if base < mid_start {
        out.push(req(base, mid_start, PAGE_SIZE));
    }
    if mid_start < mid_end {
        out.push(req(mid_start, mid_end, SUPERPAGE_SIZE));
    }
    if mid_end < end {
        out.push(req(mid_end, end, PAGE_SIZE));
    }
    out
}

fn execute(target: &Target, requests: &[MoveRequest], cfg: ExecConfig) -> (ExecReport, Duration) {
    let mut backend = KernelBackend::new(target, HostRoot::default()).expect("backend");
    let mut executor = Executor::new(cfg);
    let started = Instant::now();
    let report = executor
        .execute(&mut backend, requests, Instant::now())
        .expect("execute");
    (report, started.elapsed())
}

fn assert_all_on(w: &mut Workload, pages: u64, node: u32) {
    let (nodes, absent) = w.where_pages(0, pages);
    assert_eq!(absent, 0);
    assert_eq!(
        nodes,
        BTreeMap::from([(node, pages)]),
        "all pages on node {node}"
    );
}

fn anon_huge_kb(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    smaps
        .lines()
        .filter_map(|l| l.strip_prefix("AnonHugePages:"))
        .filter_map(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .sum()
}

#[test]
fn executor_moves_workload_pages_between_nodes() {
    if support::skip_unless_vm("executor_moves_workload_pages_between_nodes") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("exec-moves");
    let pages = 8192; // 32 MiB
    let mut w = Workload::spawn(&["--pages", &pages.to_string(), "--no-thp"]);
    w.command("touch");
    migratepages(w.pid, 0, 1);
    assert_all_on(&mut w, pages, 1);
    let target = Target::open(&HostRoot::default(), w.pid).expect("open");

    let (report, _) = execute(
        &target,
        &requests(w.base, w.size, 0, PAGE_SIZE),
        ExecConfig::default(),
    );
    eprintln!("promote 1 -> 0: {report:?}");
    assert_eq!(report.total().pages_moved, pages, "{report:?}");
    assert_eq!(report.total().failed_pages(), 0, "{report:?}");
    assert!(report.total().syscalls >= pages / 1024);
    assert_all_on(&mut w, pages, 0);
    // Query view and numa_maps agree.
    let statuses = placement::query_range(&target, w.base, w.size, 1024).expect("query");
    assert!(statuses.iter().all(|s| s.node() == Some(0)));
    let numa_maps = target.numa_maps().expect("numa_maps");
    let buffer = numa_maps
        .iter()
        .filter(|m| m.start <= w.base)
        .max_by_key(|m| m.start)
        .expect("buffer line");
    assert!(
        buffer.nodes.get(&0).copied().unwrap_or(0) >= pages,
        "{buffer:?}"
    );
    // The mapping may hold a few pages besides the buffer (allocator bookkeeping, alignment
    // slack) that migratepages moved and the executor was not asked to: only those stay.
    let elsewhere = buffer.anon.saturating_sub(pages);
    assert!(
        buffer.nodes.get(&1).copied().unwrap_or(0) <= elsewhere,
        "{buffer:?}"
    );

    // Demote the second half at 64 KiB.
    let half = w.size / 2;
    let (report, _) = execute(
        &target,
        &requests(w.base + half, half, 1, 64 << 10),
        ExecConfig::default(),
    );
    assert_eq!(report.total().pages_moved, pages / 2, "{report:?}");
    let (nodes, _) = w.where_pages(0, pages);
    assert_eq!(nodes, BTreeMap::from([(0, pages / 2), (1, pages / 2)]));
    let (first, _) = w.where_pages(0, pages / 2);
    assert_eq!(
        first,
        BTreeMap::from([(0, pages / 2)]),
        "the first half stayed"
    );
}

#[test]
fn executor_moves_huge_pages_whole_and_splits_for_small_moves() {
    if support::skip_unless_vm("executor_moves_huge_pages_whole_and_splits_for_small_moves") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("exec-huge");
    let pages = 8192; // 32 MiB: at least 15 whole huge pages
    let mut w = Workload::spawn(&["--pages", &pages.to_string()]);
    w.command("touch");
    assert!(
        anon_huge_kb(w.pid) >= 8 * 2048,
        "THP backs the buffer (THP=always in the VM)"
    );
    migratepages(w.pid, 0, 1);
    assert_all_on(&mut w, pages, 1);
    let target = Target::open(&HostRoot::default(), w.pid).expect("open");
    let (report, _) = execute(
        &target,
        &requests(w.base, w.size, 0, SUPERPAGE_SIZE),
        ExecConfig::default(),
    );
    eprintln!("huge promote: {report:?}");
    assert!(report.total().huge_chunks_moved >= 8, "{report:?}");
    assert_all_on(&mut w, pages, 0);
    assert!(anon_huge_kb(w.pid) >= 8 * 2048, "still huge after the move");

    // A 64 KiB demotion inside one huge page: split first (debugfs in the VM), then exactly
    // those 16 pages move.
    let chunk = w.base.div_ceil(SUPERPAGE_SIZE) * SUPERPAGE_SIZE;
    let offset_pages = (chunk - w.base) / PAGE_SIZE;
    let (report, _) = execute(
        &target,
        &[MoveRequest {
            start: chunk + (64 << 10),
            len: 64 << 10,
            to_node: 1,
            granularity: 64 << 10,
            direction: Direction::Demote,
        }],
        ExecConfig::default(),
    );
    eprintln!("64 KiB demote in a huge page: {report:?}");
    assert_eq!(report.splits, 1, "{report:?}");
    assert_eq!(report.total().pages_moved, 16, "{report:?}");
    let (nodes, _) = w.where_pages(offset_pages, 512);
    assert_eq!(nodes, BTreeMap::from([(0, 496), (1, 16)]));

    // And collapse it back after promoting the 16 pages again.
    let (report, _) = execute(
        &target,
        &[MoveRequest {
            start: chunk,
            len: SUPERPAGE_SIZE,
            to_node: 0,
            granularity: PAGE_SIZE,
            direction: Direction::Promote,
        }],
        ExecConfig {
            collapse_promoted: true,
            ..ExecConfig::default()
        },
    );
    eprintln!("promote + collapse: {report:?}");
    let (nodes, _) = w.where_pages(offset_pages, 512);
    assert_eq!(nodes, BTreeMap::from([(0, 512)]));
    assert_eq!(report.collapsed + report.collapse_failed, 1, "{report:?}");
}

/// Executor vs `migratepages` moving the same memory in the same run, both directions, 4 KiB
/// pages and huge pages. Prints the figures (docs/benchmarks.md, "Executor") and writes them to
/// target/vm/exec-bench.txt.
#[test]
fn executor_throughput_vs_migratepages() {
    if support::skip_unless_vm("executor_throughput_vs_migratepages") {
        return;
    }
    let _timing = crate::vm::tiering::Timing::start("exec-bench");
    let mib: u64 = std::env::var("MEMTIDE_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    // One round in the suite (each tool moves the buffer there and back); more with
    // MEMTIDE_BENCH_REPS for steadier figures.
    let reps: u32 = std::env::var("MEMTIDE_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // The suite measures the default configuration; MEMTIDE_BENCH_ALL=1 adds the
    // verify-only-when-reported variants.
    let all = std::env::var_os("MEMTIDE_BENCH_ALL").is_some_and(|v| v == "1");
    let pages = mib * 256;
    let mut out = String::new();
    let when_reported = ExecConfig {
        verify_only_when_reported: true,
        ..ExecConfig::default()
    };
    for (label, thp, granularity, cfg) in [
        (
            "4 KiB pages, default config (verify every batch)",
            false,
            PAGE_SIZE,
            ExecConfig::default(),
        ),
        (
            "4 KiB pages, verify only batches with reported failures",
            false,
            PAGE_SIZE,
            when_reported.clone(),
        ),
        (
            "2 MiB huge pages, default config",
            true,
            SUPERPAGE_SIZE,
            ExecConfig::default(),
        ),
        (
            "2 MiB huge pages, verify only batches with reported failures",
            true,
            SUPERPAGE_SIZE,
            when_reported,
        ),
    ] {
        if !all && cfg.verify_only_when_reported {
            continue;
        }
        let mut args = vec!["--pages".to_owned(), pages.to_string()];
        if !thp {
            args.push("--no-thp".to_owned());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut w = Workload::spawn(&args);
        w.command("touch");
        assert_all_on(&mut w, pages, 0);
        let target = Target::open(&HostRoot::default(), w.pid).expect("open");
        let (mut t_mp, mut t_ex) = (Duration::ZERO, Duration::ZERO);
        let mut syscalls = 0;
        let ex_move = |to: u32, t_ex: &mut Duration, syscalls: &mut u64| {
            let (r, t) = execute(
                &target,
                &requests(w.base, w.size, to, granularity),
                cfg.clone(),
            );
            assert_eq!(r.total().pages_moved, pages, "{r:?}");
            *t_ex += t;
            *syscalls += r.total().syscalls;
        };
        // Each tool moves the same memory both ways once per round.
        for _ in 0..reps {
            t_mp += migratepages(w.pid, 0, 1);
            ex_move(0, &mut t_ex, &mut syscalls);
            ex_move(1, &mut t_ex, &mut syscalls);
            t_mp += migratepages(w.pid, 1, 0);
        }
        assert_all_on(&mut w, pages, 0);
        let moved = f64::from(2 * reps) * mib as f64;
        let mp = moved / t_mp.as_secs_f64();
        let ex = moved / t_ex.as_secs_f64();
        let _ = writeln!(
            out,
            "{label}: {mib} MiB x {} moves each; migratepages {:.1} MiB/s ({:.0} pages/s), memtide executor {:.1} MiB/s ({:.0} pages/s, {} move_pages calls); ratio {:.2}",
            2 * reps,
            mp,
            mp * 256.0,
            ex,
            ex * 256.0,
            syscalls,
            ex / mp
        );
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    // vm/run.sh's MEMTIDE_VM_TCG reaches the guest through vm/test.sh's guest-env.
    let tcg = std::env::var("MEMTIDE_VM_TCG").unwrap_or_else(|_| "single".to_owned());
    let out = format!("build profile: {profile}; TCG vCPU threads: {tcg}\n{out}");
    eprint!("{out}");
    std::fs::write("target/vm/exec-bench.txt", &out).expect("write target/vm/exec-bench.txt");
}
