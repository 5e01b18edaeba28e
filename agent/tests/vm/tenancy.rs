//! Tenancy (#18 point 4): two tenants, each in a cgroup of its own and each with a 96 MiB hot
//! set on the slow node. `[[targets.limits]]` caps tenant A at 32 MiB of the fast tier; B has
//! no limit. Under the real `memtide run`, A's bytes on the fast node (numa_maps: the whole
//! process, its code and libraries too) never exceed 32 MiB while A fills most of that share,
//! and B gets the rest it wants: its whole hot set.
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use memtide_core::units::PAGE_SIZE;

use crate::{
    support::{self, Workload, metric_value},
    vm::{
        promotion::EPOCH_BOUND,
        tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on, share},
    },
};

const PAGES: u64 = 128 * MIB_PAGES;
const HOT: u64 = 96 * MIB_PAGES;
const LIMIT: u64 = 32 << 20;
const GROUP: &str = "memtide-vm-tenancy";
/// Epochs the test watches A after both tenants are placed.
const EPOCHS_PLACED: u64 = 5;

/// A cgroup v2 directory created for the test, removed (with its children) when dropped,
/// after the workloads in it are gone.
struct Cgroup(PathBuf);

impl Cgroup {
    fn create(root: &std::path::Path, relative: &str) -> Self {
        let dir = root.join(relative);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self(dir)
    }

    fn adopt(&self, pid: u32) {
        let procs = self.0.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", procs.display()));
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Bytes of process `pid` on `node`, over all its mappings (numa_maps), and where they lie:
/// one line per mapping that has any (its start, policy, file or kind, and bytes).
fn bytes_on(pid: u32, node: u32) -> (u64, String) {
    let target =
        memtide_host::targets::Target::open(&memtide_host::sysfs::HostRoot::default(), pid)
            .expect("open the workload");
    let maps = target.numa_maps().expect("numa_maps");
    let mut lines = String::new();
    let mut total = 0;
    for m in &maps {
        let bytes = m.nodes.get(&node).copied().unwrap_or(0) * PAGE_SIZE;
        if bytes > 0 {
            let what = m.file.clone().unwrap_or_else(|| {
                (if m.heap {
                    "heap"
                } else if m.stack {
                    "stack"
                } else {
                    "anon"
                })
                .to_owned()
            });
            lines += &format!("  {:#x} {} {what}: {bytes} bytes\n", m.start, m.policy);
        }
        total += bytes;
    }
    (total, lines)
}

#[test]
fn a_limited_tenant_stays_within_its_share_and_the_other_gets_the_rest() {
    let name = "a_limited_tenant_stays_within_its_share_and_the_other_gets_the_rest";
    if support::skip_unless_vm(name) {
        return;
    }
    let _timing = Timing::start("tenancy");
    let cgroot = support::cgroup_v2_root().expect("the VM has a cgroup v2 hierarchy");
    // Declared before the workloads: dropped after them, once the cgroups are empty.
    let _group = Cgroup::create(&cgroot, GROUP);
    let (group_a, group_b) = (format!("{GROUP}/a"), format!("{GROUP}/b"));
    let cgroup_a = Cgroup::create(&cgroot, &group_a);
    let cgroup_b = Cgroup::create(&cgroot, &group_b);
    let spawn = |cgroup: &Cgroup| {
        let mut w = Workload::spawn(&["--pages", &PAGES.to_string(), "--node", &SLOW.to_string()]);
        cgroup.adopt(w.pid);
        let reply = w.command(&format!("start rw 0 {HOT}"));
        assert_eq!(reply, format!("started pages={HOT}"));
        w
    };
    let mut a = spawn(&cgroup_a);
    let mut b = spawn(&cgroup_b);
    let extra = format!("[[targets.limits]]\ncgroup = \"{group_a}\"\nfast_bytes = {LIMIT}\n");
    let b_pid = b.pid.to_string();
    let agent = tiering::start_agent("tenancy", &extra, a.pid, &["--pid", &b_pid]);
    let started = Instant::now();
    let hot = format!("0 {HOT}");
    let (mut a_peak, mut a_fast, mut b_hot_fast, mut epochs) = (0, 0, 0.0, 0);
    // Where A's fast bytes lay when they peaked: a failure names the mappings.
    let mut a_peak_maps = String::new();
    let mut placed_at = None;
    while epochs < EPOCH_BOUND {
        std::thread::sleep(Duration::from_secs(1));
        let maps;
        (a_fast, maps) = bytes_on(a.pid, FAST);
        if a_fast > a_peak {
            (a_peak, a_peak_maps) = (a_fast, maps);
        }
        b_hot_fast = share(&pages_on(&mut b, &hot), FAST, HOT);
        epochs = [a.pid, b.pid]
            .into_iter()
            .map(|pid| tiering::target_status(agent.port, pid).map_or(0, |row| row.epochs))
            .min()
            .unwrap_or(0);
        eprintln!(
            "tenancy: t={:>5.1}s epoch {epochs:>3}: A on node 0 {:>5.1} MiB (peak {:>5.1}), B's hot set on node 0 {:>5.1} %",
            started.elapsed().as_secs_f64(),
            a_fast as f64 / f64::from(1 << 20),
            a_peak as f64 / f64::from(1 << 20),
            b_hot_fast * 100.0,
        );
        // A few epochs past B's promotion, to see A stay within its share. Counted from the
        // epoch that first found both placed, not from the start: how often the agent plans
        // depends on what its plans cost (a share of a core), which an emulated guest and a
        // loaded host stretch (CI once saw 36 s between epochs).
        if b_hot_fast >= 0.9 && a_fast >= LIMIT / 2 {
            let since = *placed_at.get_or_insert(epochs);
            if epochs >= since + EPOCHS_PLACED {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(EPOCH_BOUND * 3),
            "the agent planned only {epochs} epochs in {:?}",
            started.elapsed()
        );
    }
    eprintln!("tenancy: A's peak on node 0, {a_peak} bytes, in:\n{a_peak_maps}");
    let row = tiering::target_status(agent.port, a.pid).expect("A's status row");
    let metrics = support::http_get(agent.port, "/metrics")
        .expect("/metrics")
        .1;
    let a_share = metric_value(
        &metrics,
        "memtide_fast_share_bytes{",
        &format!(":{}\"", a.pid),
    );
    let table = support::run_memtide_status(agent.port);
    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    for w in [&mut a, &mut b] {
        let reply = w.command("stop");
        assert!(reply.starts_with("stopped passes="), "{reply}");
    }
    let a_plans: String = log
        .lines()
        .filter(|line| line.contains(&format!("pid={}", a.pid)))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(
        a_peak <= LIMIT,
        "tenant A held {a_peak} bytes of the fast tier, above its 32 MiB limit, in:\n{a_peak_maps}its plans:\n{a_plans}"
    );
    assert!(
        a_fast >= LIMIT / 2,
        "tenant A holds only {a_fast} bytes of the fast tier: it did not use its share"
    );
    assert!(
        b_hot_fast >= 0.9,
        "tenant B's hot set is {:.1} % on node 0 after {epochs} epochs: it did not get the rest",
        b_hot_fast * 100.0
    );
    assert_eq!(row.fast_share_bytes, Some(LIMIT), "{row:?}");
    assert_eq!(
        row.fast_share_reason.as_deref(),
        Some(format!("limit (cgroup {group_a})").as_str()),
        "{row:?}"
    );
    #[expect(clippy::cast_precision_loss, reason = "32 MiB")]
    let limit = LIMIT as f64;
    assert_eq!(
        a_share,
        Some(limit),
        "memtide_fast_share_bytes of A:\n{metrics}"
    );
    assert!(
        table.contains("fast-tier share: 32 MiB (limit (cgroup memtide-vm-tenancy/a))"),
        "{table}"
    );
    for w in [&mut a, &mut b] {
        let reply = w.command("verify");
        assert_eq!(reply, format!("verified pages={PAGES} mismatches=0"));
    }
}
