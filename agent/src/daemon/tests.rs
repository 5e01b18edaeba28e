//! The daemon's tests that need no privileges.

use std::{
    path::Path,
    process::{Child, Command},
};

use memtide_config::{Config, SourceKind, TierOverride};
use memtide_host::topology::tiering::HotplugWatch;

use super::{
    agent::{SourceUpdate, reread_after_hotplug, source_update},
    config::observe_reason,
    *,
};

pub(super) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The slow node of a DRAM + CXL machine goes offline under the agent: the hotplug check
/// re-reads the tiers, finds nothing left to migrate to and turns migration off; when the
/// node files vanish altogether the error names the file and the last tiers stay.
#[test]
fn a_slow_node_going_offline_turns_migration_off() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(memtide_host::FIXTURES).join("topology/cxl-cpuless"),
        dir.path(),
    );
    let root = HostRoot::new(dir.path());
    let over = TierOverride::default();
    let config = Config {
        targets: memtide_config::TargetsConfig {
            pids: vec![1],
            ..memtide_config::TargetsConfig::default()
        },
        ..Config::default()
    };
    let mut watch = HotplugWatch::new();
    let before = reread_after_hotplug(&mut watch, &root, &over)
        .expect("first check reads")
        .unwrap();
    assert_eq!(before.classes.nodes.slow, vec![2]);
    assert_eq!(observe_reason(&config, &before), None);
    assert!(reread_after_hotplug(&mut watch, &root, &over).is_none());

    let node = dir.path().join("sys/devices/system/node");
    std::fs::write(node.join("online"), "0-1\n").unwrap();
    std::fs::write(node.join("has_memory"), "0-1\n").unwrap();
    std::fs::remove_dir_all(node.join("node2")).unwrap();
    std::fs::write(node.join("node0/distance"), "10 21\n").unwrap();
    std::fs::write(node.join("node1/distance"), "21 10\n").unwrap();
    std::fs::remove_dir_all(
        dir.path()
            .join("sys/devices/virtual/memory_tiering/memory_tier22"),
    )
    .unwrap();
    let after = reread_after_hotplug(&mut watch, &root, &over)
        .expect("the change is seen")
        .unwrap();
    assert!(after.classes.nodes.slow.is_empty(), "{:?}", after.classes);
    assert!(
        observe_reason(&config, &after).is_some_and(|reason| reason.contains("no slow tier")),
        "{:?}",
        observe_reason(&config, &after)
    );

    std::fs::remove_dir_all(node.join("node1")).unwrap();
    std::fs::write(node.join("online"), "0,1\n").unwrap();
    std::fs::write(node.join("has_memory"), "0\n").unwrap();
    let error = reread_after_hotplug(&mut watch, &root, &over)
        .expect("the change is seen")
        .unwrap_err();
    assert!(error.to_string().contains("node1"), "{error}");
}

#[test]
fn damon_restarts_on_a_changed_target_list_other_sources_update_it() {
    let damon = SourceKind::Damon;
    assert_eq!(
        source_update(damon, &[1, 2], &[1, 2]),
        SourceUpdate::Unchanged
    );
    assert_eq!(source_update(damon, &[1], &[1, 2]), SourceUpdate::Restart);
    assert_eq!(
        source_update(damon, &[1, 2], &[1, 3]),
        SourceUpdate::Restart
    );
    assert_eq!(source_update(damon, &[1, 2], &[1]), SourceUpdate::Restart);
    // Nothing running yet, or nothing left to watch: a plain update starts or stops it.
    assert_eq!(source_update(damon, &[], &[4]), SourceUpdate::Set);
    assert_eq!(source_update(damon, &[4], &[]), SourceUpdate::Set);
    let swfault = SourceKind::SwFault;
    assert_eq!(source_update(swfault, &[1], &[1, 2]), SourceUpdate::Set);
    assert_eq!(source_update(swfault, &[1], &[1]), SourceUpdate::Unchanged);
}

/// The daemon against a fake source, as any user can run it: a machine tree with two tiers
/// (DRAM and a CPU-less CXL node) whose `proc` is the real one, so its targets are real child
/// A child process that sleeps until killed (and is reaped when dropped).
pub(super) struct Sleeper(Child);

impl Sleeper {
    pub(super) fn spawn() -> Self {
        Self(
            Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        // A child started in a process group of its own (a shell running `sleep`) takes
        // its children with it; killing only the shell would leave them behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The daemon against a fake source, as any user can run it: a machine tree with two tiers
/// (DRAM and a CPU-less CXL node) whose `proc` is the real one, so its targets are real child
/// processes, and an agent listening on a free loopback port.
mod with_a_fake_source {
    use std::{
        io::{Read as _, Write as _},
        net::TcpStream,
        os::unix::{fs::symlink, process::CommandExt as _},
        process::Command,
        sync::atomic::Ordering,
        time::{Duration, Instant},
    };

    use memtide_common::{AccessKind, AccessSample, SampleSource};

    use super::{super::*, Path, Sleeper, copy_tree};
    use crate::sources::fake::{FakeControl, FakeSources};

    mod readiness;

    struct Machine {
        dir: tempfile::TempDir,
        config: PathBuf,
    }

    impl Machine {
        fn new(config: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            copy_tree(
                &Path::new(memtide_host::FIXTURES).join("topology/cxl-cpuless/sys"),
                &dir.path().join("sys"),
            );
            symlink("/proc", dir.path().join("proc")).unwrap();
            let machine = Self {
                config: dir.path().join("memtide.toml"),
                dir,
            };
            machine.configure(config);
            machine
        }

        /// Rewrites the configuration file (the agent reads it at start and on reload).
        fn configure(&self, config: &str) {
            let text = format!("[agent]\nlisten = \"127.0.0.1:0\"\n{config}");
            std::fs::write(&self.config, text).unwrap();
        }

        async fn start(&self) -> (Daemon, FakeControl) {
            let (sources, control) = FakeSources::new();
            (self.start_with(sources).await, control)
        }

        async fn start_with(&self, sources: FakeSources) -> Daemon {
            let env = Environment {
                root: HostRoot::new(self.dir.path()),
                sources: Arc::new(sources),
            };
            let options = RunOptions {
                config: Some(self.config.clone()),
                ..RunOptions::default()
            };
            Daemon::start(options, env).await.expect("the agent starts")
        }
    }

    /// Polls `condition` for up to 20 s (the agent re-resolves targets every second).
    async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn target_pids(daemon: &Daemon) -> Vec<u32> {
        let mut pids: Vec<u32> = daemon.status().targets.iter().map(|t| t.pid).collect();
        pids.sort_unstable();
        pids
    }

    /// The status row of `pid` (empty until the target has one).
    fn target_status(daemon: &Daemon, pid: u32) -> status::TargetStatus {
        daemon
            .status()
            .targets
            .into_iter()
            .find(|t| t.pid == pid)
            .unwrap_or_default()
    }

    fn sorted(mut pids: Vec<u32>) -> Vec<u32> {
        pids.sort_unstable();
        pids
    }

    /// `/metrics` of the agent, over plain HTTP/1.0.
    fn metrics(daemon: &Daemon) -> String {
        get(daemon, "/metrics")
    }

    /// The whole response (status line, headers, body) to `GET path`, over plain HTTP/1.0.
    fn get(daemon: &Daemon, path: &str) -> String {
        let mut stream = TcpStream::connect(daemon.address()).expect("connect");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        body
    }

    fn metric(text: &str, needles: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
            .and_then(|line| line.rsplit(' ').next()?.parse().ok())
    }

    /// A python3 child running `script`, once it printed its first line (returned).
    fn python(script: &str) -> (Sleeper, String) {
        let mut child = Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn python3");
        let stdout = child.stdout.take().unwrap();
        let child = Sleeper(child);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        (child, line)
    }

    fn sample(pid: u32, addr: u64) -> AccessSample {
        AccessSample {
            addr,
            weight: 1,
            pid,
            tid: pid,
            cpu: 0,
            kind: AccessKind::Load as u8,
            source: SampleSource::SwFault as u8,
            _pad: [0; 2],
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_changes_targets_and_observe_mode_and_a_broken_file_changes_nothing() {
        let (a, b) = (Sleeper::spawn(), Sleeper::spawn());
        let machine = Machine::new(&format!("[targets]\npids = [{}]\n", a.pid()));
        let (daemon, source) = machine.start().await;
        eventually("the first target", || target_pids(&daemon) == [a.pid()]).await;
        assert_eq!(source.last_targets(), Some(vec![a.pid()]));
        assert_eq!(daemon.status().observe_reason, None, "two tiers: migrating");

        machine.configure(&format!(
            "[agent]\nobserve = true\n[targets]\npids = [{}, {}]\n",
            a.pid(),
            b.pid()
        ));
        // The [agent] table twice is a TOML error: this file is broken.
        daemon.send(Control::Reload);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            target_pids(&daemon),
            [a.pid()],
            "a broken file changes nothing"
        );
        assert_eq!(daemon.status().observe_reason, None);

        std::fs::write(
            &machine.config,
            format!(
                "[agent]\nlisten = \"127.0.0.1:0\"\nobserve = true\n[targets]\npids = [{}, {}]\n",
                a.pid(),
                b.pid()
            ),
        )
        .unwrap();
        daemon.send(Control::Reload);
        let both = sorted(vec![a.pid(), b.pid()]);
        eventually("both targets", || target_pids(&daemon) == both).await;
        eventually("the source told", || {
            source.last_targets().map(sorted) == Some(both.clone())
        })
        .await;
        let reason = daemon.status().observe_reason.unwrap_or_default();
        assert!(reason.contains("observe mode"), "{reason:?}");
        daemon.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_source_drains_at_the_configured_counting_interval() {
        // A source whose kernel side batches wake-ups drains on a timer; samples count in the
        // interval they are drained in, so the timer is the engine's interval, not a default.
        let a = Sleeper::spawn();
        let machine = Machine::new(&format!(
            "[targets]\npids = [{}]\n[engine]\ninterval_ms = 35\n",
            a.pid()
        ));
        let (daemon, source) = machine.start().await;
        eventually("the delivery", || {
            source.drain_every.lock().is_ok_and(|d| d.is_some())
        })
        .await;
        assert_eq!(
            *source.drain_every.lock().unwrap(),
            Some(Duration::from_millis(35))
        );
        daemon.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_stopped_from_outside_is_started_again_and_counted() {
        let a = Sleeper::spawn();
        let machine = Machine::new(&format!("[targets]\npids = [{}]\n", a.pid()));
        let (daemon, source) = machine.start().await;
        eventually("the target", || target_pids(&daemon) == [a.pid()]).await;
        let lists_before = source.target_lists.lock().unwrap().len();
        source.stopped.store(true, Ordering::Relaxed);
        eventually("the restart", || !source.stopped.load(Ordering::Relaxed)).await;
        let lists = source.target_lists.lock().unwrap().clone();
        assert_eq!(
            &lists[lists_before..],
            [vec![], vec![a.pid()]],
            "stopped, then started with the same targets"
        );
        let text = metrics(&daemon);
        assert_eq!(
            metric(
                &text,
                &["memtide_source_restarts_total{", "stopped_externally"]
            ),
            Some(1.0),
            "{text}"
        );
        daemon.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn targets_come_and_go_and_their_samples_follow_them() {
        let (a, b) = (Sleeper::spawn(), Sleeper::spawn());
        let machine = Machine::new(&format!("[targets]\npids = [{}, {}]\n", a.pid(), b.pid()));
        let (daemon, source) = machine.start().await;
        let both = sorted(vec![a.pid(), b.pid()]);
        eventually("both targets", || target_pids(&daemon) == both).await;

        // Samples reach their own target through the route the agent gave the source.
        for i in 0..100 {
            source
                .ring
                .send(sample(a.pid(), 0x7f00_0000_0000 + i * 4096))
                .unwrap();
        }
        let samples_of = |pid: u32| {
            daemon
                .status()
                .targets
                .iter()
                .find(|t| t.pid == pid)
                .map_or(0, |t| t.samples)
        };
        eventually("a's samples", || samples_of(a.pid()) == 100).await;
        assert_eq!(samples_of(b.pid()), 0);
        // The density each target is getting, in its status row and its metrics.
        let rate_of = |pid: u32| {
            let status = daemon.status();
            let row = status.targets.iter().find(|t| t.pid == pid)?;
            Some((row.samples_per_second?, row.samples_per_second_per_gib))
        };
        eventually("both targets' sample rates", || {
            rate_of(a.pid()).is_some_and(|(rate, _)| rate > 0.0) && rate_of(b.pid()).is_some()
        })
        .await;
        assert_eq!(rate_of(b.pid()).map(|(rate, _)| rate), Some(0.0));
        let a_label = format!(":{}\"", a.pid());
        eventually("a's samples in its metrics", || {
            let text = metrics(&daemon);
            metric(&text, &["memtide_target_samples_total{", &a_label]) == Some(100.0)
                && metric(&text, &["memtide_target_samples_per_second{", &a_label])
                    .is_some_and(|rate| rate > 0.0)
        })
        .await;

        // b exits: its task ends, its route goes, the source stops watching it; a sample that
        // still comes for it has no target and is counted as such.
        let gone = b.pid();
        drop(b);
        eventually("b gone", || target_pids(&daemon) == [a.pid()]).await;
        eventually("the source told", || {
            source.last_targets() == Some(vec![a.pid()])
        })
        .await;
        source.ring.send(sample(gone, 0x7f00_0000_0000)).unwrap();
        eventually("the sample counted as unrouted", || {
            metric(
                &metrics(&daemon),
                &["memtide_samples_dropped_total{", "unrouted"],
            ) == Some(1.0)
        })
        .await;
        daemon.stop().await;
    }

    /// PEBS-shaped records (loads at a period of 64,000, stores at 1,600,000) of a target's
    /// resident heap, through the fake source's router into the target: its plan must want the
    /// sampled pages in the fast tier. The machine says node 0, where the memory is, is the slow
    /// tier; observe mode keeps anything from moving. (The discriminating tests of the
    /// period's magnitude are memtide-core's `tests/sample_periods.rs`; this one proves the
    /// daemon's path, ring record to plan, carries PEBS-shaped records.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pebs_periods_through_the_router_make_the_target_plan_promotions() {
        const HOT_PAGES: u64 = 64;
        // A shell holding 1 MB in a variable: its heap is resident (glibc's malloc would put
        // a block this large in a mapping of its own without the threshold).
        let child = Sleeper(
            Command::new("sh")
                .process_group(0)
                .env("MALLOC_MMAP_THRESHOLD_", "16777216")
                .args([
                    "-c",
                    "x=$(head -c 1000000 /dev/zero | tr '\\000' a); sleep 600; echo ${#x}",
                ])
                .spawn()
                .expect("spawn sh"),
        );
        let pid = child.pid();
        let heap = || {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
            let line = maps.lines().find(|l| l.ends_with("[heap]"))?;
            let (start, end) = line.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            ))
        };
        eventually("the child's heap to hold the variable", || {
            heap().is_some_and(|(start, end)| end - start >= (HOT_PAGES + 8) * 4096)
        })
        .await;
        let (heap_start, _) = heap().expect("heap");
        let base = heap_start + 4 * 4096;
        // The real pages are on node 0, here the slow tier; the fixture's HMAT gives nodes 0
        // and 1 the same latency, so node 0 is declared slower (nothing gains from a move
        // between equals).
        let machine = Machine::new(&format!(
            "observe = true\n[targets]\npids = [{pid}]\n[topology]\nfast_nodes = [1]\nslow_nodes = [0]\n\
             [[topology.costs]]\nnode = 0\nread_latency_ns = 300\nwrite_latency_ns = 600\n"
        ));
        let (daemon, source) = machine.start().await;
        eventually("the target", || target_pids(&daemon) == [pid]).await;

        let pebs = |addr: u64, kind: AccessKind, weight: u64| AccessSample {
            weight,
            kind: kind as u8,
            source: SampleSource::Pebs as u8,
            ..sample(pid, addr)
        };
        let status = || target_status(&daemon, pid);
        let deadline = Instant::now() + Duration::from_secs(30);
        while status().would_promote_bytes == 0 {
            assert!(
                Instant::now() < deadline,
                "no promotion planned from PEBS-period samples: {:?}",
                status()
            );
            for round in 0..4u64 {
                for page in 0..HOT_PAGES - 1 {
                    let addr = base + page * 4096 + round * 64;
                    source
                        .ring
                        .send(pebs(addr, AccessKind::Load, 64_000))
                        .unwrap();
                    if page % 8 == 0 {
                        source
                            .ring
                            .send(pebs(addr, AccessKind::Store, 1_600_000))
                            .unwrap();
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let planned = status();
        assert!(
            planned.would_promote_bytes >= 8 * 4096,
            "the sampled pages are planned fast: {planned:?}"
        );
        assert_eq!(planned.promoted_bytes, 0, "observe mode moves nothing");
        daemon.stop().await;
    }

    /// A target far larger than any one query: 64 GiB of sparse anonymous memory whose only
    /// touched (and sampled) pages lie 20 GiB in. The placement queries follow the samples, so
    /// the epoch plans with those pages and the hit ratio counts them (on this one-node machine
    /// every resident page is on the fast node 0).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_64_gib_target_sampled_above_16_gib_is_planned_and_its_hit_ratio_counts_them() {
        const GIB: u64 = 1 << 30;
        const TOUCHED: u64 = 256;
        let script = format!(
            "import mmap, sys, time\n\
             # MAP_NORESERVE is 0x4000 on x86-64 and arm64; Python names it from 3.13 on.\n\
             m = mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, 'MAP_NORESERVE', 0x4000))\n\
             for i in range({TOUCHED}):\n    m[(20 << 30) + i * 4096] = 1\n\
             print('touched', flush=True)\n\
             time.sleep(600)\n"
        );
        let (child, line) = python(&script);
        assert_eq!(line.trim(), "touched");
        let pid = child.pid();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let base = maps
            .lines()
            .filter_map(|l| {
                let (start, end) = l.split_whitespace().next()?.split_once('-')?;
                let (start, end) = (
                    u64::from_str_radix(start, 16).ok()?,
                    u64::from_str_radix(end, 16).ok()?,
                );
                (end - start == 64 * GIB).then_some(start)
            })
            .next()
            .expect("the 64 GiB mapping");
        let machine = Machine::new(&format!(
            "observe = true\n[targets]\npids = [{pid}]\n[topology]\nfast_nodes = [0]\nslow_nodes = [2]\n"
        ));
        let (daemon, source) = machine.start().await;
        eventually("the target", || target_pids(&daemon) == [pid]).await;
        let status = || target_status(&daemon, pid);
        let deadline = Instant::now() + Duration::from_secs(30);
        while status().fast_hit_ratio.is_none() || status().epochs < 2 {
            assert!(
                Instant::now() < deadline,
                "no hit ratio for the samples above 16 GiB: {:?}",
                status()
            );
            for i in 0..TOUCHED {
                let addr = base + 20 * GIB + i * 4096 + 64;
                source.ring.send(sample(pid, addr)).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let seen = status();
        assert_eq!(seen.fast_hit_ratio, Some(1.0), "{seen:?}");
        assert!(seen.last_errors.is_empty(), "{seen:?}");
        assert!(
            seen.managed_bytes.get("fast").copied().unwrap_or(0) >= TOUCHED * 4096,
            "the touched pages count as managed: {seen:?}"
        );
        daemon.stop().await;
    }

    /// A `[[targets.limits]]` table bounds the target it matches (its status row shows the
    /// share and why, `memtide_fast_share_bytes` exports it), not another one, and a reload
    /// that changes the table reaches the running target.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_limit_bounds_the_target_it_matches_and_a_reload_changes_it() {
        let limited = Sleeper::spawn();
        let (free, _) = python("import time; print('ready', flush=True); time.sleep(600)");
        let config = |limit: u64| {
            format!(
                "[targets]\npids = [{}, {}]\n\
                 [[targets.limits]]\ncgroup = \"no/such/group\"\nfast_bytes = 1\n\
                 [[targets.limits]]\nname = \"sle?p\"\nfast_bytes = {limit}\n",
                limited.pid(),
                free.pid(),
            )
        };
        let machine = Machine::new(&config(64 << 20));
        let (daemon, _source) = machine.start().await;
        let share = |pid| {
            let row = target_status(&daemon, pid);
            (row.epochs > 0, row.fast_share_bytes, row.fast_share_reason)
        };
        let limit = |bytes: u64| (true, Some(bytes), Some("limit (name sle?p)".to_owned()));
        eventually("the limit in the status rows", || {
            share(limited.pid()) == limit(64 << 20) && share(free.pid()) == (true, None, None)
        })
        .await;
        let label = target_status(&daemon, limited.pid()).target;
        let exported = || {
            metric(
                &metrics(&daemon),
                &["memtide_fast_share_bytes{", &format!("\"{label}\"")],
            )
        };
        assert_eq!(exported(), Some(f64::from(64 << 20)));
        let free_label = target_status(&daemon, free.pid()).target;
        let free_series = metric(
            &metrics(&daemon),
            &["memtide_fast_share_bytes{", &format!("\"{free_label}\"")],
        );
        assert_eq!(free_series, None, "an unbounded target has no share series");

        // A quiet target plans again within 10 s of its first plan (IDLE_REPLAN).
        machine.configure(&config(1 << 20));
        daemon.send(Control::Reload);
        eventually("the new limit after the reload", || {
            share(limited.pid()) == limit(1 << 20)
        })
        .await;
        assert_eq!(exported(), Some(f64::from(1 << 20)));
        daemon.stop().await;
    }

    /// A mapping the application bound with `mbind(2)` (as memtide's hint library does), and
    /// one it locked with `mlock(2)`, are left alone: their pages are counted in
    /// `memtide_pages_skipped_total{reason}` once, and the target is still planned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mappings_bound_or_locked_by_the_application_are_left_alone_and_counted() {
        const PAGES: u64 = 512;
        if std::env::consts::ARCH != "x86_64" {
            eprintln!(
                "SKIP mappings_bound_or_locked_by_the_application_are_left_alone_and_counted: the script calls mbind by its x86-64 number"
            );
            return;
        }
        let script = format!(
            "import ctypes, sys, time\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             libc.mmap.restype = ctypes.c_void_p\n\
             libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]\n\
             n = {PAGES} * 4096\n\
             bound, free, locked = (libc.mmap(None, n, 3, 0x22, -1, 0) for _ in range(3))\n\
             mask = ctypes.c_ulong(1)\n\
             # mbind(addr, len, MPOL_BIND, &{{node 0}}, maxnode, 0): syscall 237 on x86-64.\n\
             if libc.syscall(237, ctypes.c_void_p(bound), ctypes.c_size_t(n), 2, ctypes.byref(mask), 64, 0) != 0:\n\
             \x20   print('mbind failed', ctypes.get_errno(), flush=True); sys.exit(1)\n\
             ctypes.memset(bound, 1, n); ctypes.memset(free, 1, n)\n\
             if libc.mlock(ctypes.c_void_p(locked), ctypes.c_size_t(n)) != 0:\n\
             \x20   print('mlock failed', ctypes.get_errno(), flush=True); sys.exit(1)\n\
             print('ready', hex(bound), hex(free), flush=True)\n\
             time.sleep(600)\n"
        );
        let (child, line) = python(&script);
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"ready"), "{line}");
        let pid = child.pid();
        let numa_maps = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).unwrap();
        let bound_line = format!("{} bind:0", words[1].trim_start_matches("0x"));
        assert!(numa_maps.contains(&bound_line), "{numa_maps}");
        let machine = Machine::new(&format!(
            "observe = true\n[targets]\npids = [{pid}]\n[topology]\nfast_nodes = [0]\nslow_nodes = [2]\n"
        ));
        let (daemon, source) = machine.start().await;
        eventually("the target", || target_pids(&daemon) == [pid]).await;
        let free = u64::from_str_radix(words[2].trim_start_matches("0x"), 16).unwrap();
        let skipped = || {
            metric(
                &metrics(&daemon),
                &["memtide_pages_skipped_total", "reason=\"mempolicy\""],
            )
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while target_status(&daemon, pid).epochs < 2 {
            assert!(
                Instant::now() < deadline,
                "{:?}",
                target_status(&daemon, pid)
            );
            source.ring.send(sample(pid, free + 64)).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let counted = skipped().unwrap_or(0.0);
        // The bound mapping's pages, and python's own bound mappings if it has any: once each.
        assert!(counted >= PAGES as f64, "{counted}");
        let locked = metric(
            &metrics(&daemon),
            &["memtide_pages_skipped_total", "reason=\"mlocked\""],
        );
        assert!(
            locked.is_some_and(|pages| pages >= PAGES as f64),
            "{locked:?}"
        );
        let seen = target_status(&daemon, pid);
        assert!(seen.last_errors.is_empty(), "{seen:?}");
        // numa_maps is read again after 10 s while samples come: the same mapping is not
        // counted again.
        let later = Instant::now() + Duration::from_secs(11);
        while Instant::now() < later {
            source.ring.send(sample(pid, free + 64)).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            skipped(),
            Some(counted),
            "counted when first found, not every epoch"
        );
        daemon.stop().await;
    }

    /// The machine's HMAT (the CXL fixture: node 2 at 260/270 ns, 50/40 GB/s) reaches the
    /// running agent: `/status` and `/metrics` carry each node's costs and their source, a
    /// `[[topology.costs]]` entry overrides the firmware field by field, and a reload that
    /// changes the entry changes both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tier_costs_come_from_hmat_and_the_configuration_and_are_exported() {
        let machine = Machine::new("[[topology.costs]]\nnode = 1\nread_latency_ns = 150\n");
        let (daemon, _source) = machine.start().await;
        let costs = daemon.status().node_costs;
        let cxl = costs.iter().find(|c| c.node == 2).expect("node 2");
        assert_eq!(cxl.source.as_str(), "hmat", "{costs:?}");
        assert_eq!(
            (cxl.read_latency_ns, cxl.write_latency_ns),
            (Some(260.0), Some(270.0))
        );
        assert_eq!(cxl.read_bandwidth_bytes_per_s, Some(50e9));
        let configured = costs.iter().find(|c| c.node == 1).expect("node 1");
        assert_eq!(configured.source.as_str(), "config", "{costs:?}");
        assert_eq!(configured.read_latency_ns, Some(150.0));
        assert_eq!(
            configured.write_latency_ns,
            Some(110.0),
            "HMAT for the rest"
        );
        // Set before the endpoints serve anything: the first scrape already has them.
        let text = metrics(&daemon);
        assert_eq!(
            metric(
                &text,
                &[
                    "memtide_tier_latency_seconds{",
                    "node=\"2\"",
                    "kind=\"write\""
                ]
            ),
            Some(270e-9),
            "{text}"
        );
        assert_eq!(
            metric(
                &text,
                &[
                    "memtide_tier_bandwidth_bytes_per_second{",
                    "node=\"2\"",
                    "kind=\"read\""
                ]
            ),
            Some(50e9),
            "{text}"
        );
        let table = daemon.status().to_table();
        assert!(table.contains("node 2: read 260 ns"), "{table}");
        // A reload that changes the entry reaches both endpoints (`/metrics` within its
        // response cache's second).
        machine.configure("[[topology.costs]]\nnode = 1\nread_latency_ns = 175\n");
        daemon.send(Control::Reload);
        let node_1_read = |d: &Daemon| {
            d.status()
                .node_costs
                .iter()
                .find(|c| c.node == 1)
                .and_then(|c| c.read_latency_ns)
        };
        eventually("node 1's reloaded read latency in /status", || {
            node_1_read(&daemon) == Some(175.0)
        })
        .await;
        let node_1_read_gauge = [
            "memtide_tier_latency_seconds{",
            "node=\"1\"",
            "kind=\"read\"",
        ];
        eventually("node 1's reloaded read latency in /metrics", || {
            metric(&metrics(&daemon), &node_1_read_gauge) == Some(175e-9)
        })
        .await;
        daemon.stop().await;
    }
}
