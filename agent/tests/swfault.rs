//! Privileged, real kernel and real BPF: the software page-fault source end to end.
//!
//! A child touches 4096 pages at known addresses; the perf_event → BPF → ring → ingest path
//! must deliver at least 99 % of those pages with the child's pid, and the faults of a second
//! child that is not a target must be filtered out inside BPF. Runs on the host and in the VM.
mod support;

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Write as _},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use memtide::sources::{
    ingest::{IngestCounters, RouteCommand, Router, run_sample_ring},
    sampler::Sampler,
    swfault,
};
use tokio::sync::mpsc;

const PAGES: usize = 4096;

struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    base: u64,
    size: u64,
}

impl Workload {
    fn spawn(pages: usize) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtide-workload"))
            .args(["--pages", &pages.to_string(), "--no-thp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn memtide-workload");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let ready = read_line(&mut stdout);
        let field = |name: &str| {
            ready
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name}= in {ready:?}"))
                .to_owned()
        };
        let pid = field("pid").parse().expect("pid");
        let base = u64::from_str_radix(field("base").trim_start_matches("0x"), 16).expect("base");
        let size = field("size").parse().expect("size");
        Self {
            child,
            stdin,
            stdout,
            pid,
            base,
            size,
        }
    }

    fn command(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("write command");
        self.stdin.flush().expect("flush");
        read_line(&mut self.stdout)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

fn read_line(stdout: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read from workload");
    line.trim().to_owned()
}

#[test]
fn page_faults_of_a_target_arrive_with_pid_and_address_and_others_are_filtered() {
    if support::skip_unless_root("swfault end to end") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mut target = Workload::spawn(PAGES);
        let mut bystander = Workload::spawn(PAGES);

        let cpus = aya::util::online_cpus().expect("online CPUs");
        let mut sampler =
            Sampler::start(&swfault::spec(cpus, 1, 1 << 22, true)).expect("start swfault sampler");
        sampler.add_target(target.pid).expect("add target");
        let ring = sampler.take_ring().expect("ring");

        let counters = Arc::new(IngestCounters::default());
        let (control, control_rx) = mpsc::channel(8);
        let (samples_tx, mut samples_rx) = mpsc::channel(4096);
        control
            .send(RouteCommand::Add {
                pid: target.pid,
                sender: samples_tx,
            })
            .await
            .expect("route");
        let ingest = tokio::spawn(run_sample_ring(
            ring,
            Router::new(256, Arc::clone(&counters)),
            control_rx,
        ));

        assert_eq!(target.command("touch"), format!("touched {PAGES}"));
        assert_eq!(bystander.command("touch"), format!("touched {PAGES}"));

        let in_target = |addr: u64| addr >= target.base && addr < target.base + target.size;
        let mut pages = BTreeSet::new();
        let mut wrong_pid = 0usize;
        let deadline = Instant::now() + Duration::from_secs(20);
        while pages.len() < PAGES && Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_millis(200), samples_rx.recv()).await {
                Ok(Some(batch)) => {
                    for sample in batch {
                        if sample.pid != target.pid {
                            wrong_pid += 1;
                        }
                        if in_target(sample.addr) {
                            pages.insert(sample.addr / 4096);
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
        drop(control);
        ingest.await.expect("ingest task").expect("ingest loop");

        let drops = sampler.drop_counts().expect("drop counters");
        eprintln!(
            "swfault: {} of {PAGES} target pages sampled; drops {drops:?}; decoded {}",
            pages.len(),
            counters.decoded.load(std::sync::atomic::Ordering::Relaxed)
        );
        assert!(
            pages.len() * 100 >= PAGES * 99,
            "at least 99 % of the touched pages must arrive: got {}",
            pages.len()
        );
        assert_eq!(
            wrong_pid, 0,
            "only the target's samples may reach its route"
        );
        assert!(
            drops["not_target"] >= PAGES as u64 * 99 / 100,
            "the bystander's faults must be dropped in BPF as not_target: {drops:?}"
        );
        assert_eq!(
            counters.unrouted.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "nothing of the bystander may leave BPF"
        );
        drop(bystander);
    });
}
