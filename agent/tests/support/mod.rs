//! Shared helpers for integration tests: explicit, printed skips for tests that need root,
//! BPF or the two-node VM, turned into failures where those must be present.
#![allow(
    dead_code,
    reason = "each test crate includes this module and uses a different subset of it"
)]

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::PathBuf,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

/// Set by `make test` / CI on machines where privileged tests must run, and always in the VM:
/// a skip there would hide a broken environment, so it fails instead.
const REQUIRE_PRIVILEGED: &str = "MEMTIDE_REQUIRE_PRIVILEGED";
/// Set by `vm/guest.sh` inside the two-node VM.
const IN_VM: &str = "MEMTIDE_IN_VM";

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|value| value == "1")
}

/// True inside the two-node VM started by `make vm-test`.
pub(crate) fn in_vm() -> bool {
    env_flag(IN_VM)
}

/// Prints why `test` is skipped and returns true, or panics when skipping is not allowed here.
pub(crate) fn skip(test: &str, reason: &str) -> bool {
    assert!(
        !env_flag(REQUIRE_PRIVILEGED),
        "{test}: cannot run ({reason}) but {REQUIRE_PRIVILEGED}=1 says it must"
    );
    eprintln!("skipping {test}: {reason}");
    true
}

/// True (after printing why) when `test` must be skipped because this process is not root.
pub(crate) fn skip_unless_root(test: &str) -> bool {
    // /proc/self/status carries the effective uid; no libc call needed.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse::<u32>().ok());
    if euid == Some(0) {
        false
    } else {
        skip(test, "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_NICE)")
    }
}

/// True (after printing why) when `test` must be skipped because it only runs in the VM.
pub(crate) fn skip_unless_vm(test: &str) -> bool {
    if in_vm() {
        false
    } else {
        eprintln!("skipping {test}: runs only inside the two-node VM (make vm-test)");
        true
    }
}

/// Path of the `memtide` binary built for this test run.
pub(crate) fn memtide_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memtide"))
}

/// A running `memtide-workload` (see agent/src/bin/workload.rs), driven line by line.
pub(crate) struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub(crate) pid: u32,
    pub(crate) base: u64,
    pub(crate) size: u64,
}

impl Workload {
    /// Starts the workload with `args` and waits for its `ready` line.
    pub(crate) fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_memtide-workload"))
            .args(args)
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

    /// Sends one command and returns the workload's one-line reply.
    pub(crate) fn command(&mut self, command: &str) -> String {
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

/// Names of memtide's BPF programs as the kernel keeps them (truncated to 15 bytes).
fn memtide_program_names() -> Vec<String> {
    use memtide_common::names;
    [
        names::PROG_SAMPLE_LOAD,
        names::PROG_SAMPLE_STORE,
        names::PROG_SAMPLE_ANY,
        names::PROG_DAMON_AGGREGATED,
    ]
    .iter()
    .map(|name| name.chars().take(15).collect())
    .collect()
}

/// Fails if any BPF program of memtide's is still loaded in the kernel (asked through the
/// bpf syscall, as bpftool does).
pub(crate) fn assert_no_memtide_bpf_programs() {
    let ours = memtide_program_names();
    let left: Vec<String> = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|info| info.name_as_str().map(str::to_owned))
        .filter(|name| ours.contains(name))
        .collect();
    assert!(
        left.is_empty(),
        "memtide BPF programs still loaded: {left:?}"
    );
}
