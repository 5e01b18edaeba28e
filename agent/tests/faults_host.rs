//! Faults the agent must survive on this machine, each checked for its log line, its exit code
//! or metric, and for leaving nothing attached: the metrics port taken, BPF refused for want of
//! a capability, the exact documented capability set, a removed cgroup target, a pid reused by
//! another process after the target exited.
//! (VM-level faults live in tests/vm/; executor faults in the executor's unit tests.)
mod support;

use std::{
    io::Read as _,
    net::TcpListener,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use support::{Workload, http_get, metric_value};

/// The capabilities the systemd unit grants (deploy/systemd/memtide.service,
/// `CapabilityBoundingSet=`; the DaemonSet adds the same, checked by deploy/tests), in
/// setpriv's spelling: `CAP_SYS_NICE` is `sys_nice`.
fn documented_caps() -> Vec<String> {
    let unit =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd/memtide.service");
    let text = std::fs::read_to_string(&unit).expect("the systemd unit");
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_else(|| panic!("{}: no CapabilityBoundingSet=", unit.display()));
    line.split_whitespace()
        .map(|cap| cap.trim_start_matches("CAP_").to_lowercase())
        .collect()
}

#[test]
fn every_capability_granted_is_justified_in_the_operations_guide() {
    // docs/operations.md's privileges table: one row per capability, `| `CAP_X` | why | ...`.
    let guide = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let text = std::fs::read_to_string(&guide).expect("docs/operations.md");
    let section = text
        .split("### Privileges: what each capability is for")
        .nth(1)
        .expect("a privileges section in docs/operations.md");
    let mut justified: Vec<String> = section
        .lines()
        .take_while(|line| !line.starts_with("### "))
        .filter_map(|line| line.strip_prefix("| `CAP_"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_lowercase)
        .collect();
    let mut granted = documented_caps();
    justified.sort();
    granted.sort();
    assert_eq!(
        justified, granted,
        "the unit grants what the guide's table justifies"
    );
}

fn setpriv_available() -> bool {
    Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `memtide run ARGS` under `setpriv --bounding-set -all,+CAPS` (as root, the bounding set is
/// what the agent's permitted and effective sets become), with stderr captured.
fn run_with_caps(caps: &[&str], port: u16, args: &[&str]) -> std::process::Child {
    let bounding: String = std::iter::once("-all".to_owned())
        .chain(caps.iter().map(|cap| format!("+{cap}")))
        .collect::<Vec<_>>()
        .join(",");
    Command::new("setpriv")
        .args(["--bounding-set", &bounding, "--inh-caps", "-all", "--"])
        .arg(support::memtide_bin())
        .args(["run", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn setpriv memtide run")
}

fn wait_ready(child: &mut std::process::Child, port: u16) {
    wait_for(child, port, "/readyz");
}

/// Waits until `path` answers 200.
fn wait_for(child: &mut std::process::Child, port: u16, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some((200, _)) = http_get(port, path) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
            panic!("memtide run exited early with {status}:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("memtide run: {path} not 200 within 30 s");
}

fn stop(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (child.wait().expect("wait"), stderr)
}

#[test]
fn metrics_port_in_use_is_a_clear_error_and_exit_code_3() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = Command::new(support::memtide_bin())
        .args(["run", "--observe", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .expect("run memtide");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "exit code; stderr:\n{stderr}"
    );
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(
        stderr.contains("another process listens there"),
        "names the cause and the fix: {stderr}"
    );
    // It failed before starting any source.
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn exactly_the_documented_capabilities_are_enough_to_sample() {
    if support::skip_unless_root("exactly_the_documented_capabilities_are_enough_to_sample") {
        return;
    }
    if !setpriv_available()
        && support::skip(
            "exactly_the_documented_capabilities_are_enough_to_sample",
            "no setpriv (util-linux)",
        )
    {
        return;
    }
    // A target of another user: reading its maps and numa_maps and querying its pages pass
    // the kernel's ptrace check only through CAP_SYS_PTRACE.
    let mut workload = Workload::spawn_as_nobody(&["--pages", "2048", "--no-thp"]);
    let pid = workload.pid.to_string();
    let port = support::free_port();
    let caps = documented_caps();
    let caps: Vec<&str> = caps.iter().map(String::as_str).collect();
    let mut agent = run_with_caps(&caps, port, &["--pid", &pid, "--observe"]);
    wait_ready(&mut agent, port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut samples, mut managed) = (None, None);
    while Instant::now() < deadline {
        workload.command("churn 2");
        let metrics = http_get(port, "/metrics").expect("/metrics").1;
        samples = metric_value(&metrics, "memtide_samples_total{", "swfault");
        managed = support::metric_sum(&metrics, "memtide_managed_bytes{", "tier=");
        if samples.is_some_and(|n| n > 0.0) && managed.is_some_and(|n| n > 0.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its pages were queried too: no move_pages refusal in its status.
    let (_, targets) = http_get(port, "/status").expect("/status");
    let targets: serde_json::Value = serde_json::from_str(&targets).expect("status JSON");
    let errors = targets["targets"][0]["last_errors"].clone();
    let (status, log) = stop(agent);
    assert_eq!(errors, serde_json::json!([]), "{log}");
    assert!(
        samples.is_some_and(|n| n > 0.0),
        "no samples with the documented capabilities:\n{log}"
    );
    assert!(
        managed.is_some_and(|n| n > 0.0),
        "another user's target not read with the documented capabilities ({managed:?}):\n{log}"
    );
    assert!(status.success(), "exit {status}:\n{log}");
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn without_cap_sys_ptrace_another_users_target_is_reported_and_the_agent_stays() {
    let name = "without_cap_sys_ptrace_another_users_target_is_reported_and_the_agent_stays";
    if support::skip_unless_root(name) {
        return;
    }
    if !setpriv_available() && support::skip(name, "no setpriv (util-linux)") {
        return;
    }
    let caps = documented_caps();
    let caps: Vec<&str> = caps
        .iter()
        .map(String::as_str)
        .filter(|cap| *cap != "sys_ptrace")
        .collect();
    let mut workload = Workload::spawn_as_nobody(&["--pages", "256", "--no-thp"]);
    let port = support::free_port();
    let pid = workload.pid.to_string();
    let mut agent = run_with_caps(&caps, port, &["--pid", &pid, "--observe"]);
    wait_ready(&mut agent, port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut errors = String::new();
    while Instant::now() < deadline && errors.is_empty() {
        workload.command("churn 1");
        let (_, status) = http_get(port, "/status").expect("/status");
        let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
        errors = status["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|target| {
                target["last_errors"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|error| error.as_str().map(str::to_owned))
            .collect::<Vec<_>>()
            .join("\n");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Still serving: the agent reports the target it cannot read instead of stopping.
    let (code, _) = http_get(port, "/healthz").expect("/healthz");
    let (exit, log) = stop(agent);
    assert_eq!(code, 200, "{log}");
    assert!(exit.success(), "exit {exit}:\n{log}");
    assert!(
        ["ermission denied", "not permitted"]
            .iter()
            .any(|refusal| errors.contains(refusal)),
        "the target's status names the refusal: {errors:?}\n{log}"
    );
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn without_cap_bpf_the_agent_degrades_and_names_the_capability() {
    if support::skip_unless_root("without_cap_bpf_the_agent_degrades_and_names_the_capability") {
        return;
    }
    if !setpriv_available()
        && support::skip(
            "without_cap_bpf_the_agent_degrades_and_names_the_capability",
            "no setpriv (util-linux)",
        )
    {
        return;
    }
    let caps = documented_caps();
    let caps: Vec<&str> = caps
        .iter()
        .map(String::as_str)
        .filter(|cap| !matches!(*cap, "bpf" | "sys_admin"))
        .collect();
    let workload = Workload::spawn(&["--pages", "64", "--no-thp"]);
    let port = support::free_port();
    let mut agent = run_with_caps(&caps, port, &["--pid", &workload.pid.to_string()]);
    // Still serves metrics and health: an operator can see what is wrong. But it samples
    // nothing, and is not ready.
    wait_for(&mut agent, port, "/healthz");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut readyz = http_get(port, "/readyz");
    while readyz
        .as_ref()
        .is_some_and(|(_, body)| body.contains("starting"))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
        readyz = http_get(port, "/readyz");
    }
    let readyz = readyz.expect("/readyz");
    assert_eq!(readyz.0, 503, "{readyz:?}");
    assert!(readyz.1.contains("no hotness source runs"), "{readyz:?}");
    let (code, status) = http_get(port, "/status").expect("/status");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert_eq!(status["source"], "none", "no source can start without BPF");
    let (exit, log) = stop(agent);
    assert!(exit.success(), "exit {exit}:\n{log}");
    assert!(
        log.contains("CAP_BPF"),
        "the log names the missing capability:\n{log}"
    );
    assert!(log.contains("no hotness source could start"), "{log}");
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn a_removed_cgroup_target_is_reported_and_the_other_targets_stay() {
    if support::skip_unless_root("a_removed_cgroup_target_is_reported_and_the_other_targets_stay") {
        return;
    }
    let Some(cgroot) = support::cgroup_v2_root() else {
        support::skip(
            "a_removed_cgroup_target_is_reported_and_the_other_targets_stay",
            "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified",
        );
        return;
    };
    let cgroup = cgroot.join(format!("memtide-test-{}.scope", std::process::id()));
    if std::fs::create_dir(&cgroup).is_err()
        && support::skip(
            "a_removed_cgroup_target_is_reported_and_the_other_targets_stay",
            &format!("cannot create a cgroup under {}", cgroot.display()),
        )
    {
        return;
    }
    let mut kept = Workload::spawn(&["--pages", "64", "--no-thp"]);
    let port = support::free_port();
    let mut agent = Command::new(support::memtide_bin())
        .args(["run", "--observe", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--pid", &kept.pid.to_string()])
        .arg("--cgroup")
        .arg(&cgroup)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn memtide run");
    wait_ready(&mut agent, port);
    std::fs::remove_dir(&cgroup).expect("remove the empty cgroup");
    // Several refreshes (1 s each) with the cgroup gone.
    std::thread::sleep(Duration::from_secs(3));
    kept.command("touch");
    let (_, status) = http_get(port, "/status").expect("/status");
    let (exit, log) = stop(agent);
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let pids: Vec<u64> = status["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t["pid"].as_u64())
        .collect();
    assert!(
        pids.contains(&u64::from(kept.pid)),
        "the pid target is still managed after its sibling cgroup vanished:\n{status}\n{log}"
    );
    let warnings = log
        .lines()
        .filter(|line| line.contains("cannot be resolved") && line.contains("memtide-test-"))
        .count();
    assert_eq!(
        warnings, 1,
        "the removed cgroup is reported once, by name, not every second:\n{log}"
    );
    assert!(exit.success(), "{log}");
}

/// Kills and reaps `child`, then spawns `sleep` processes until one gets the same pid (the
/// kernel is asked for it through `ns_last_pid`; another process may take it first, so this
/// tries a few times). Returns the impostor, or None when the pid could not be had.
fn respawn_with_pid(mut child: std::process::Child) -> Option<std::process::Child> {
    let pid = child.id();
    child.kill().expect("kill the first process");
    child.wait().expect("reap the first process");
    for _ in 0..50 {
        if std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).is_err() {
            return None;
        }
        let mut impostor = Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        if impostor.id() == pid {
            return Some(impostor);
        }
        let _ = impostor.kill();
        let _ = impostor.wait();
    }
    None
}

/// The pidfd guard: a target whose pid now names another process is exited for memtide,
/// reads and page moves through it are refused, and the impostor is never touched.
#[test]
fn a_reused_pid_is_never_mistaken_for_the_target() {
    use memtide_host::{
        exec::{Backend as _, ExecError, KernelBackend, MoveDestination},
        sysfs::HostRoot,
        targets::{Target, TargetError},
    };
    if support::skip_unless_root("a_reused_pid_is_never_mistaken_for_the_target") {
        return;
    }
    let first = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    let pid = first.id();
    let target = Target::open(&HostRoot::default(), pid).expect("open the target");
    assert!(target.maps().is_ok());
    let Some(mut impostor) = respawn_with_pid(first) else {
        support::skip(
            "a_reused_pid_is_never_mistaken_for_the_target",
            "could not get the same pid again (ns_last_pid not writable or always taken)",
        );
        return;
    };
    assert!(
        std::fs::metadata(format!("/proc/{pid}/maps")).is_ok(),
        "the impostor holds pid {pid}"
    );
    assert!(target.exited().expect("poll the pidfd"));
    assert!(
        matches!(target.maps(), Err(TargetError::Exited { .. })),
        "maps of the impostor were read through the old target: {:?}",
        target.maps().map(|maps| maps.len())
    );
    let mut backend = KernelBackend::new(&target, HostRoot::new("/")).expect("backend");
    let pages = [0x7f00_0000_0000_usize];
    let mut out = Vec::new();
    assert!(matches!(
        backend.query(&pages, &mut out),
        Err(TargetError::Exited { .. })
    ));
    assert!(matches!(
        backend.move_to(
            &pages,
            MoveDestination {
                node: 0,
                move_shared: false
            },
            &mut out
        ),
        Err(ExecError::Target(TargetError::Exited { .. }))
    ));
    assert!(out.is_empty(), "no page status came back from the impostor");
    assert!(
        impostor.try_wait().expect("impostor status").is_none(),
        "the impostor still runs"
    );
    let _ = impostor.kill();
    let _ = impostor.wait();
}
