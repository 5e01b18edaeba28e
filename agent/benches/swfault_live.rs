//! Live cost of the software page-fault sampling path on this kernel: a workload faults in
//! pages over and over (`memtide-workload churn`), once without memtide and once with the
//! swfault sampler + ingest running, sampling every fault. Reports, in the same run:
//!
//! * BPF program time per sample (kernel BPF run-time statistics),
//! * agent user-space CPU time per million samples (ingest: ring drain, decode, route),
//! * the workload's CPU time with sampling relative to without (its slowdown ratio).
//!
//! Needs root (BPF, perf events). It lives in the agent package, not `benches/`, because it
//! drives the `memtide-workload` binary. Regenerate: `cargo bench -p memtide --bench
//! swfault_live` (docs/benchmarks.md).
use memtide_core::ingest::IngestCounters;
use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use memtide::{
    bpf,
    sources::{
        SampleRoute, SampleRouter, TargetChannel, TargetInput,
        perf::{
            ring::{DRAIN_INTERVAL, run_sample_ring},
            sampler::Sampler,
        },
        swfault,
    },
};
use tokio::sync::mpsc;

const PAGES: usize = 16_384;
const ROUNDS: usize = 40;

struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

impl Workload {
    fn spawn() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtide-workload"))
            .args(["--pages", &PAGES.to_string(), "--no-thp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn memtide-workload");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let pid = child.id();
        let mut workload = Self {
            child,
            stdin,
            stdout,
            pid,
        };
        let ready = workload.read_line();
        assert!(ready.starts_with("ready"), "{ready}");
        workload
    }

    fn read_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read");
        line.trim().to_owned()
    }

    fn command(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("write");
        self.stdin.flush().expect("flush");
        self.read_line()
    }

    /// User + system CPU time of the workload so far.
    fn cpu_time(&self) -> Duration {
        cpu_time_of(&format!("/proc/{}/stat", self.pid))
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// utime + stime from a `/proc/.../stat` file, in clock ticks of 10 ms (USER_HZ = 100).
fn cpu_time_of(stat: &str) -> Duration {
    let text = std::fs::read_to_string(stat).expect("read stat");
    let after_comm = &text[text.rfind(')').expect("comm") + 2..];
    let fields: Vec<u64> = after_comm
        .split_whitespace()
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat, counted from 3 after the comm.
    Duration::from_millis((fields[11] + fields[12]) * 10)
}

fn main() {
    if !std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"))
    {
        eprintln!("swfault_live: skipped: needs root (BPF and system-wide perf events)");
        return;
    }
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let _stats = bpf::enable_run_time_stats().expect("enable BPF run-time statistics");

    let mut workload = Workload::spawn();
    // Warm up: the first round faults in the page tables too.
    workload.command("churn 2");
    let before = workload.cpu_time();
    let started = Instant::now();
    let reply = workload.command(&format!("churn {ROUNDS}"));
    let baseline_cpu = workload.cpu_time() - before;
    let baseline_wall = started.elapsed();
    println!(
        "baseline (no sampling): {reply}, workload CPU {baseline_cpu:?}, wall {baseline_wall:?}"
    );

    // The agent side runs on its own worker thread while this thread drives the workload.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let cpus = aya::util::online_cpus().expect("online CPUs");
    let mut sampler =
        Sampler::start(&swfault::spec(cpus, 1, 1 << 24, true)).expect("start sampler");
    sampler.add_target(workload.pid).expect("target");
    let counters = Arc::new(IngestCounters::default());
    let (control, control_rx) = mpsc::unbounded_channel();
    let (samples_tx, mut samples_rx) = mpsc::channel(1 << 16);
    control
        .send(SampleRoute::Add {
            pid: workload.pid,
            sender: TargetChannel(samples_tx),
        })
        .expect("route");

    let agent_before = cpu_time_of("/proc/self/stat");
    let ingest = runtime.spawn(run_sample_ring(
        sampler.take_ring().expect("ring"),
        SampleRouter::new(512, Arc::clone(&counters)),
        control_rx,
        DRAIN_INTERVAL,
    ));
    let consumer = runtime.spawn(async move {
        let mut samples = 0u64;
        while let Some(input) = samples_rx.recv().await {
            if let TargetInput::Samples(batch) = input {
                samples += batch.len() as u64;
            }
        }
        samples
    });
    let before = workload.cpu_time();
    let started = Instant::now();
    let reply = workload.command(&format!("churn {ROUNDS}"));
    let sampled_cpu = workload.cpu_time() - before;
    let sampled_wall = started.elapsed();
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(control);
        ingest.await.expect("ingest").expect("ingest loop");
        let _ = consumer.await;
    });
    let agent_cpu = cpu_time_of("/proc/self/stat") - agent_before;

    let delivered = counters.delivered.load(Ordering::Relaxed);
    let bpf_time: Duration = sampler.program_stats().iter().map(|s| s.run_time).sum();
    let bpf_runs: u64 = sampler.program_stats().iter().map(|s| s.run_count).sum();
    let drops = sampler.drop_counts().expect("drops");
    println!("sampled: {reply}, workload CPU {sampled_cpu:?}, wall {sampled_wall:?}");
    println!(
        "samples delivered {delivered}; BPF runs {bpf_runs} (all CPUs, all processes); drops {drops:?}"
    );
    let per_million = |d: Duration| d.as_secs_f64() * 1e6 / delivered.max(1) as f64;
    println!(
        "swfault_live: BPF {:.0} ns per program run; agent user space {:.3} s CPU per million samples; \
         BPF {:.3} s per million samples; workload CPU ratio sampled/baseline {:.2}",
        bpf_time.as_nanos() as f64 / bpf_runs.max(1) as f64,
        per_million(agent_cpu),
        per_million(bpf_time),
        sampled_cpu.as_secs_f64() / baseline_cpu.as_secs_f64().max(1e-3),
    );
}
