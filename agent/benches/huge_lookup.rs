//! What finding the huge pages of a move costs the executor, against the size of the target: the
//! smaps read it used to do on every plan that moved anything (a walk of every page table of
//! the process) against `PAGEMAP_SCAN` over the 64 MiB being moved (`KernelBackend::
//! huge_mappings`), in the same run, on `memtide-workload` targets of 4 KiB pages. Also the
//! maps read the new path adds when it finds huge pages, and the numa_maps read of a target's
//! epochs (another walk of every page table, which sets how often they read it).
//!
//! Needs only access to the workload's /proc files (its own user). Lives in the agent package
//! because it drives `memtide-workload`. Regenerate: `cargo bench -p memtide --bench
//! huge_lookup` (docs/benchmarks.md, "Executor").
use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use memtide_host::{
    exec::{Backend as _, KernelBackend},
    sysfs::HostRoot,
    targets::Target,
};

const REPS: usize = 15;
const MOVE_BYTES: u64 = 64 << 20;

/// A touched workload of `pages` 4 KiB pages; returns it and its buffer's base.
fn workload(pages: usize) -> (Child, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtide-workload"))
        .args(["--pages", &pages.to_string(), "--no-thp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn memtide-workload");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("ready line");
    let base = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("base=0x"))
        .and_then(|b| u64::from_str_radix(b, 16).ok())
        .unwrap_or_else(|| panic!("no base in {line:?}"));
    let stdin = child.stdin.as_mut().expect("stdin");
    writeln!(stdin, "touch").expect("touch");
    line.clear();
    stdout.read_line(&mut line).expect("touched line");
    assert!(line.starts_with("touched"), "{line}");
    child.stdout = Some(stdout.into_inner());
    (child, base)
}

/// Median wall time of `REPS` calls of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..REPS)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[REPS / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (cargo test's listing) runs nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    println!("target (4 KiB pages) | smaps | PAGEMAP_SCAN over 64 MiB | ratio | maps | numa_maps");
    for gib in [1usize, 4] {
        let (mut child, base) = workload(gib << 18);
        let target = Target::open(&HostRoot::default(), child.id()).expect("open target");
        let scannable = target
            .pagemap()
            .is_ok_and(|p| p.huge_ranges(base, base + MOVE_BYTES, &mut Vec::new()));
        if !scannable {
            println!("(no PAGEMAP_SCAN here: the third column measures the smaps fallback)");
        }
        let mut backend = KernelBackend::new(&target, HostRoot::default()).expect("backend");
        let smaps = median(|| {
            let entries = target.smaps().expect("smaps");
            assert!(!entries.is_empty());
        });
        let scan = median(|| {
            let huge = backend
                .huge_mappings(&[(base, base + MOVE_BYTES)])
                .expect("huge_mappings");
            assert!(huge.is_empty(), "--no-thp: {huge:x?}");
        });
        let maps = median(|| {
            target.maps().expect("maps");
        });
        let numa_maps = median(|| {
            target.numa_maps().expect("numa_maps");
        });
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "{gib} GiB | {:.2} ms | {:.3} ms | {:.0}x | {:.3} ms | {:.2} ms",
            smaps.as_secs_f64() * 1e3,
            scan.as_secs_f64() * 1e3,
            smaps.as_secs_f64() / scan.as_secs_f64().max(1e-9),
            maps.as_secs_f64() * 1e3,
            numa_maps.as_secs_f64() * 1e3,
        );
    }
}
