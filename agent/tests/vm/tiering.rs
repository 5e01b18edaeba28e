//! Shared pieces of the two-tier suite (promotion, pressure, granularity, integrity, churn,
//! observe, sources, comparison): test configurations, placement as seen from outside the agent
//! (the workload's move_pages queries, /proc/PID/numa_maps, per-node meminfo, /proc/vmstat),
//! the agent's /status, and timing lines.
use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use memtide::{
    daemon::status::{AgentStatus, TargetStatus},
    sources::damon::resolution,
};
use memtide_core::units::PAGE_SIZE;
use memtide_host::sysfs::HostRoot;

use crate::support::{Agent, Workload, http_get};

pub(crate) const MIB_PAGES: u64 = (1 << 20) / PAGE_SIZE;
pub(crate) const FAST: u32 = 0;
pub(crate) const SLOW: u32 = 1;

/// The agent settings the suite runs with, on top of the defaults: the DAMON source (the one
/// `memtide probe` picks in the VM), a fixed one-second epoch so "within N epochs" means N
/// plans, and `extra` (more TOML) appended.
pub(crate) fn config(name: &str, extra: &str) -> PathBuf {
    let text = format!(
        "# written by the VM suite ({name})\n\
         [sources]\n\
         order = [\"damon\"]\n\
         {extra}\n\
         [engine.policy.epoch]\n\
         adaptive = false\n\
         initial_ms = 1000\n"
    );
    write_config(name, &text)
}

/// `memtide run` with [`config`]`(name, extra)` on process `pid` (plus `args`), with the
/// target tasks' debug lines (each plan) in its log.
pub(crate) fn start_agent(name: &str, extra: &str, pid: u32, args: &[&str]) -> Agent {
    let config = config(name, extra).to_string_lossy().into_owned();
    let pid = pid.to_string();
    let mut all = vec!["--config", config.as_str(), "--pid", pid.as_str()];
    all.extend_from_slice(args);
    Agent::start_with_env(
        &all,
        &[("RUST_LOG", "info,memtide::daemon::target=debug")],
        std::time::Duration::from_secs(90),
    )
}

/// A workload of `total_mib` on the slow node whose first `hot_mib` a background thread keeps
/// reading and writing.
pub(crate) fn hot_on_slow(total_mib: u64, hot_mib: u64) -> Workload {
    let mut w = Workload::spawn(&[
        "--pages",
        &(total_mib * MIB_PAGES).to_string(),
        "--node",
        &SLOW.to_string(),
    ]);
    let reply = w.command(&format!("start rw 0 {}", hot_mib * MIB_PAGES));
    assert!(reply.starts_with("started"), "{reply}");
    w
}

/// Writes `text` as target/vm/NAME.toml (the guest's writable directory) and returns its path.
pub(crate) fn write_config(name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = PathBuf::from(format!("target/vm/{name}.toml"));
    std::fs::write(&path, text).expect("write the test configuration");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::canonicalize(&path).expect("absolute config path")
}

/// `/status` of the agent on `port`.
pub(crate) fn status(port: u16) -> AgentStatus {
    let (code, body) = http_get(port, "/status").expect("/status answers");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status: {e}: {body}"))
}

/// The status row of `pid`, if the agent manages it.
pub(crate) fn target_status(port: u16, pid: u32) -> Option<TargetStatus> {
    status(port).targets.into_iter().find(|t| t.pid == pid)
}

/// Pages of `[first, first + count)` (with `STRIDE K`: K of every STRIDE) on each node, as the
/// workload's own move_pages query sees them.
pub(crate) fn pages_on(w: &mut Workload, spec: &str) -> BTreeMap<u32, u64> {
    let reply = w.command(&format!("where {spec}"));
    assert!(reply.starts_with("where "), "{reply}");
    reply
        .split_whitespace()
        .skip(1)
        .filter_map(|word| {
            let (key, value) = word.split_once('=')?;
            Some((key.strip_prefix('N')?.parse().ok()?, value.parse().ok()?))
        })
        .collect()
}

/// Share of `pages` (a page count) found on `node` in `counts`.
pub(crate) fn share(counts: &BTreeMap<u32, u64>, node: u32, pages: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "page counts")]
    let ratio = counts.get(&node).copied().unwrap_or(0) as f64 / pages.max(1) as f64;
    ratio
}

/// Pages per node of the mapping holding `addr` in /proc/PID/numa_maps.
pub(crate) fn numa_maps_nodes(pid: u32, addr: u64) -> BTreeMap<u32, u64> {
    let target =
        memtide_host::targets::Target::open(&HostRoot::default(), pid).expect("open the workload");
    let maps = target.numa_maps().expect("numa_maps");
    maps.into_iter()
        .filter(|m| m.start <= addr)
        .max_by_key(|m| m.start)
        .map(|m| m.nodes)
        .unwrap_or_default()
}

/// A field of /sys/devices/system/node/nodeN/meminfo, in bytes (`Node N Field: V kB`).
pub(crate) fn node_meminfo(node: u32, field: &str) -> u64 {
    let path = format!("/sys/devices/system/node/node{node}/meminfo");
    let text = std::fs::read_to_string(&path).expect("node meminfo");
    text.lines()
        .find_map(|line| {
            let rest = line.split_once(&format!("{field}:"))?.1;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .unwrap_or_else(|| panic!("no {field} in {path}"))
        * 1024
}

/// The sum of a node's zones' high watermarks, bytes (/proc/zoneinfo).
pub(crate) fn high_watermark(node: u32) -> u64 {
    memtide_host::exec::watermark::read_watermarks(&HostRoot::default())
        .expect("zoneinfo")
        .get(&node)
        .map_or(0, |w| w.high)
}

/// Counters of /proc/vmstat.
pub(crate) fn vmstat() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/vmstat")
        .expect("vmstat")
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Writes a sysctl-like file and restores its old value on drop.
pub(crate) struct Knob {
    path: &'static str,
    old: String,
}

impl Knob {
    pub(crate) fn set(path: &'static str, value: &str) -> Self {
        let old = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .trim()
            .to_owned();
        std::fs::write(path, value).unwrap_or_else(|e| panic!("{path} = {value}: {e}"));
        Self { path, old }
    }
}

impl Drop for Knob {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, &self.old);
    }
}

/// Prints how long a test took (`vm timing: NAME S s`) when dropped.
pub(crate) struct Timing {
    name: &'static str,
    started: Instant,
}

impl Timing {
    pub(crate) fn start(name: &'static str) -> Self {
        progress(&format!("{name} started"));
        Self {
            name,
            started: Instant::now(),
        }
    }
}

impl Drop for Timing {
    fn drop(&mut self) {
        progress(&format!(
            "{} {} after {:.1} s",
            self.name,
            if std::thread::panicking() {
                "failed"
            } else {
                "done"
            },
            self.started.elapsed().as_secs_f64()
        ));
    }
}

/// Prints `line` and appends it, with the guest's uptime, to target/vm/progress.log on the
/// host: when the guest dies mid-test, the test's captured output dies with it, and this file
/// says which test and which phase it was in (vm/test.sh prints its end).
pub(crate) fn progress(line: &str) {
    use std::io::Write as _;
    eprintln!("vm timing: {line}");
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let uptime = uptime.split_whitespace().next().unwrap_or("?");
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("target/vm/progress.log")
    {
        // Best effort: a diagnostic must not fail the test it describes.
        let _ = writeln!(log, "{uptime} {line}");
    }
}

/// MiB, for messages.
pub(crate) fn mib(pages: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "display only")]
    let mib = (pages * PAGE_SIZE) as f64 / f64::from(1 << 20);
    mib
}

/// The bytes DAMON's vaddr monitoring spans for `pid`, as the agent works it out
/// (`resolution::monitored_span`: its first mapping to its last, less the two widest gaps).
/// DAMON's regions never grow past this span divided by `min_regions`, so the span sets how
/// finely DAMON can resolve hot pages.
pub(crate) fn damon_span(pid: u32) -> u64 {
    let span = resolution::targets_span(&HostRoot::default(), &[pid]);
    assert!(span > 0, "/proc/{pid}/maps could not be read");
    span
}

/// DAMON settings (`[sources.damon]` TOML) under which no region of `pid`'s monitored span
/// grows past `region_bytes`: DAMON caps a region at the span divided by `min_regions`, and
/// splits its regions at random points, so the cap is how far a region can reach from hot
/// pages into cold ones. `max_regions` is twice the minimum, room for DAMON to split.
pub(crate) fn damon_resolution(pid: u32, region_bytes: u64) -> String {
    let min_regions = damon_span(pid).div_ceil(region_bytes).max(10);
    format!(
        "[sources.damon]\nmin_regions = {min_regions}\nmax_regions = {}\n",
        2 * min_regions
    )
}
