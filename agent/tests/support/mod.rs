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

/// A flag a test's helper thread (a workload driver, a watcher) loops on, set when the test
/// ends, passed or failed: a helper left running after a failed test would keep its workload,
/// and the workload's memory, for the rest of the suite's tests.
pub(crate) struct StopOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StopOnDrop {
    pub(crate) fn new() -> Self {
        Self(std::sync::Arc::default())
    }

    /// The flag for the helper thread: true once the test is done.
    pub(crate) fn flag(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        std::sync::Arc::clone(&self.0)
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
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

/// The root of the cgroup v2 hierarchy here: /sys/fs/cgroup on a unified host,
/// /sys/fs/cgroup/unified on a hybrid one (this test machine's layout), None on a cgroup v1 one.
pub(crate) fn cgroup_v2_root() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("cgroup.controllers").is_file())
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

/// A running `memtide-workload` (see agent/src/bin/workload/), driven line by line.
pub(crate) struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub(crate) pid: u32,
    pub(crate) base: u64,
    pub(crate) size: u64,
    /// Where a copy of the binary lives while it runs (removed with the workload).
    exe_dir: Option<tempfile::TempDir>,
}

impl Workload {
    /// Starts the workload with `args` and waits for its `ready` line.
    pub(crate) fn spawn(args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_memtide-workload"));
        command.args(args);
        Self::spawn_command(command)
    }

    /// Like [`Workload::spawn`], with address-space randomisation off (`setarch -R`), so its
    /// heap starts right after its binary instead of up to 1 GiB later: a test of DAMON's
    /// resolution then sees the same address-space span, and so the same region sizes, every run.
    pub(crate) fn spawn_without_aslr(args: &[&str]) -> Self {
        let mut command = Command::new("setarch");
        command
            .arg("-R")
            .arg(env!("CARGO_BIN_EXE_memtide-workload"))
            .args(args);
        Self::spawn_command(command)
    }

    /// Like [`Workload::spawn`], with every thread pinned to `cpu` (`taskset`, which execs the
    /// workload: the pid is the workload's).
    pub(crate) fn spawn_pinned(cpu: u32, args: &[&str]) -> Self {
        let mut command = Command::new("taskset");
        command
            .args(["-c", &cpu.to_string()])
            .arg(env!("CARGO_BIN_EXE_memtide-workload"))
            .args(args);
        Self::spawn_command(command)
    }

    /// Like [`Workload::spawn`], run as user and group `nobody` (65534): a process of
    /// another user, whose `/proc/PID/{maps,numa_maps}` and pages only a ptrace-capable agent
    /// may read.
    pub(crate) fn spawn_as_nobody(args: &[&str]) -> Self {
        // A copy nobody may run: the build tree can sit under a directory only root enters.
        let dir = tempfile::Builder::new()
            .prefix("memtide-workload-")
            .tempdir()
            .expect("a directory for the workload");
        let exe = dir.path().join("memtide-workload");
        std::fs::copy(env!("CARGO_BIN_EXE_memtide-workload"), &exe).expect("copy the workload");
        for path in [dir.path(), exe.as_path()] {
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("make the workload runnable by nobody");
        }
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(args);
        let mut workload = Self::spawn_command(command);
        workload.exe_dir = Some(dir);
        workload
    }

    fn spawn_command(mut command: Command) -> Self {
        let mut child = command
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
            exe_dir: None,
        }
    }

    /// Sends one command and returns the workload's one-line reply.
    pub(crate) fn command(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").expect("write command");
        self.stdin.flush().expect("flush");
        read_line(&mut self.stdout)
    }
}

impl Workload {
    /// Kills the workload (SIGKILL) and reaps it, so its pid is free for reuse.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `where FIRST COUNT` and returns the page count per node (`N0=...`) and the
    /// number of absent pages.
    pub(crate) fn where_pages(
        &mut self,
        first: u64,
        count: u64,
    ) -> (std::collections::BTreeMap<u32, u64>, u64) {
        let reply = self.command(&format!("where {first} {count}"));
        let mut nodes = std::collections::BTreeMap::new();
        let mut absent = None;
        for word in reply.split_whitespace().skip(1) {
            let (key, value) = word.split_once('=').unwrap_or_else(|| panic!("{reply:?}"));
            let value: u64 = value.parse().unwrap_or_else(|_| panic!("{reply:?}"));
            if key == "absent" {
                absent = Some(value);
            } else {
                let node = key.strip_prefix('N').and_then(|n| n.parse().ok());
                nodes.insert(node.unwrap_or_else(|| panic!("{reply:?}")), value);
            }
        }
        assert!(reply.starts_with("where "), "unexpected reply {reply:?}");
        (
            nodes,
            absent.unwrap_or_else(|| panic!("no absent= in {reply:?}")),
        )
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

/// A free loopback port (bound and released; fine for tests on one machine).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// The pids of the agent's targets in its /status, ascending.
pub(crate) fn status_pids(port: u16) -> Vec<u64> {
    let (_, body) = http_get(port, "/status").expect("/status");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    let mut pids: Vec<u64> = status["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t["pid"].as_u64())
        .collect();
    pids.sort_unstable();
    pids
}

/// Polls `check` every 200 ms until it holds or `wait` passes; its last answer.
pub(crate) fn wait_for(wait: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    check()
}

/// `GET path` from 127.0.0.1:`port`: (status code, body), or None when nothing answers.
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Read as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// A running `memtide run`, stopped with SIGTERM on drop if still running. Its stderr is
/// drained by a thread as it comes (a chatty agent must never block on a full pipe).
pub(crate) struct Agent {
    pub(crate) child: Child,
    pub(crate) port: u16,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Agent {
    /// Starts `memtide run --listen 127.0.0.1:PORT ARGS...` and waits until /readyz answers
    /// 200 (or panics after `wait`).
    pub(crate) fn start(args: &[&str], wait: std::time::Duration) -> Self {
        Self::start_with_env(args, &[], wait)
    }

    /// As [`Agent::start`], with extra environment variables (`RUST_LOG`, ...).
    pub(crate) fn start_with_env(
        args: &[&str],
        env: &[(&str, &str)],
        wait: std::time::Duration,
    ) -> Self {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut child = Command::new(memtide_bin())
            .args(["run", "--listen", &listen])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn memtide run");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = {
            let log = std::sync::Arc::clone(&log);
            let stderr = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut log = log
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    log.push_str(&line);
                    log.push('\n');
                }
            })
        };
        let mut agent = Self {
            child,
            port,
            log,
            reader: Some(reader),
        };
        let deadline = std::time::Instant::now() + wait;
        loop {
            if let Some((200, _)) = http_get(port, "/readyz") {
                return agent;
            }
            if let Ok(Some(status)) = agent.child.try_wait() {
                if let Some(reader) = agent.reader.take() {
                    let _ = reader.join();
                }
                panic!("memtide run exited early with {status}:\n{}", agent.log());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "memtide run not ready within {wait:?}:\n{}",
                agent.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Everything the agent logged so far.
    pub(crate) fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sends SIGTERM and returns the exit status and everything it logged.
    pub(crate) fn stop(self) -> (std::process::ExitStatus, String) {
        self.stop_with("TERM")
    }

    /// Stops the agent with `signal` (kill's spelling: `TERM`, `INT`).
    pub(crate) fn stop_with(mut self, signal: &str) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("wait for memtide run");
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.log())
    }
}

impl Drop for Agent {
    /// A test that fails midway still stops the agent the proper way, so the kdamond and BPF
    /// programs it created are released for the next test; SIGKILL only if it hangs.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What `memtide status` prints for the agent listening on `port`.
pub(crate) fn run_memtide_status(port: u16) -> String {
    let output = Command::new(memtide_bin())
        .args(["status", "--address", &format!("127.0.0.1:{port}")])
        .output()
        .expect("memtide status");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value of the first sample of `metric` whose labels contain `label` in OpenMetrics
/// text, if any.
pub(crate) fn metric_value(text: &str, metric: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(metric) && line.contains(label))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

/// The sum of every sample of `metric` whose labels contain `label` (all tiers of a target,
/// say), or `None` when there is none. Series order in an exposition is not fixed, so a check
/// on "the first" of several series would be flaky.
pub(crate) fn metric_sum(text: &str, metric: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(metric) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}
