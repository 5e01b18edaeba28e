//! `memtide run`: the agent as a service.
//!
//! Start-up: configuration → topology and tiers → HTTP endpoints → targets → the best hotness
//! source that starts → ingest. Then one loop: follow targets as they come and go, hand DAMON
//! regions to their targets, publish source and tier metrics, pet the systemd watchdog, reload
//! on SIGHUP, and on SIGTERM/SIGINT stop sampling, let in-flight epochs finish, detach BPF and
//! remove the kdamond it started.
//!
//! Each target runs in its own task (`target.rs`): samples → engine → plan → executor.

pub mod http;
pub mod notify;
mod pods;
mod sample_rate;
pub mod status;
pub mod target;

use memtide_core::ingest::{IngestCounters, SampleBatch};
use memtide_host::probe::SourceKind;
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use memtide_common::AccessSample;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
};

use self::{
    notify::Notifier,
    pods::PodWatch,
    status::AgentStatus,
    target::{ObserveSwitch, TargetHandle, TargetSpec},
};
use crate::{
    kube::{KubeError, PodLister},
    metrics::{Metrics, NodeTier, ProgramLabel, SourceLabel, SourceReason},
    sources::{
        PerfSourceOptions,
        budget::{KernelLimits, SamplingBudget},
        damon_source::run_damon_ring,
        ingest::{SampleRoute, SampleRouter, TargetChannel, run_sample_ring},
        rate::RateController,
        running::{HotnessSource, StartContext, Stream, start_first},
    },
};
use memtide_config::{Config, ConfigError};
use memtide_core::engine::DamonObservation;
use memtide_host::{
    exec::{TierNodes, coexist},
    probe::{
        self,
        damon::{DamonStatus, OpsProbe},
        pmu::PmuScan,
    },
    sysfs::{HostRoot, SysfsError},
    targets::select::{Selection, TargetSet},
    topology::tiering::{HotplugWatch, TierOverride, TieredTopology},
};

/// How often targets are re-resolved (cgroup members come and go).
const REFRESH: Duration = Duration::from_secs(1);
/// How often source, BPF and tier metrics are published.
const METRICS_TICK: Duration = Duration::from_secs(1);
/// How long shutdown waits for in-flight epochs.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// What the command line adds to the configuration file.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `--config`; without it `/etc/memtide/memtide.toml` if it exists, else the defaults.
    pub config: Option<PathBuf>,
    pub observe: bool,
    pub pids: Vec<u32>,
    pub cgroups: Vec<PathBuf>,
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("reading the NUMA topology: {0}")]
    Topology(#[from] SysfsError),
    #[error("{0}")]
    Listen(std::io::Error),
    #[error(transparent)]
    Coexist(#[from] coexist::CoexistError),
    #[error("setting up the agent: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Kube(#[from] KubeError),
}

impl DaemonError {
    /// Process exit code: 2 for configuration problems, 3 when the listen address is taken,
    /// 1 otherwise.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Config(_) | Self::Kube(_) => 2,
            Self::Listen(_) => 3,
            _ => 1,
        }
    }
}

/// The configuration `run` uses, and the file it came from.
pub fn load_config(options: &RunOptions) -> Result<(Config, Option<PathBuf>), ConfigError> {
    let path = match &options.config {
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(memtide_config::DEFAULT_PATH)).filter(|p| p.exists()),
    };
    let mut config = match &path {
        Some(path) => {
            memtide_config::check_permissions(path)?;
            Config::load(path)?
        }
        None => Config::default(),
    };
    config.apply_kubernetes_env(|name| std::env::var(name).ok());
    config.agent.observe |= options.observe;
    config.targets.pids.extend(&options.pids);
    config
        .targets
        .cgroups
        .extend(options.cgroups.iter().cloned());
    if let Some(listen) = options.listen {
        config.agent.listen = listen;
    }
    Ok((config, path))
}

fn label_for(root: &HostRoot, pid: u32) -> String {
    let comm = std::fs::read_to_string(root.path(format!("proc/{pid}/comm")))
        .map(|c| c.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("{comm}:{pid}")
}

/// Sources to try, best first: the configured order, else what `memtide probe` ranks usable.
fn candidates(
    config: &Config,
    root: &HostRoot,
    pmus: &PmuScan,
    observe_all: bool,
) -> Vec<SourceKind> {
    let mut order = if config.sources.order.is_empty() {
        let damon = DamonStatus::read(root, OpsProbe::ReadOnly).unwrap_or_else(|error| {
            tracing::warn!(%error, "reading DAMON's status; not using DAMON");
            DamonStatus {
                present: false,
                nr_kdamonds: 0,
                kdamonds: Vec::new(),
                operations: Vec::new(),
                operations_source: error.to_string(),
                tracepoint: false,
                tracepoint_detail: String::new(),
            }
        });
        // Loading BPF is what starting a source does anyway; a failure there is reported
        // with its reason and the next source is tried.
        probe::rank(&probe::SourceInputs {
            bpf_available: true,
            pmus,
            damon: &damon,
        })
        .into_iter()
        .filter(|check| check.usable || check.kind == SourceKind::Damon)
        .map(|check| check.kind)
        .collect()
    } else {
        config.sources.order.clone()
    };
    // DAMON monitors named processes; with no targets there is nothing to give it.
    if observe_all {
        order.retain(|kind| *kind != SourceKind::Damon);
    }
    order
}

struct Agent {
    config: Config,
    config_path: Option<PathBuf>,
    root: HostRoot,
    origin: Instant,
    tiered: TieredTopology,
    /// Notices nodes coming and going (memory hotplug).
    hotplug: HotplugWatch,
    observe_reason: Option<String>,
    /// The same reason, shared with every target task.
    observe_switch: ObserveSwitch,
    /// What `--pid`, `--cgroup` and `--observe` added; kept across reloads.
    command_line: RunOptions,
    metrics: Metrics,
    status: Arc<RwLock<AgentStatus>>,
    selection: Selection,
    /// The opted-in pods of this node (`[targets] pod_selector`), added to `selection`.
    pods: Option<PodWatch>,
    observe_all: bool,
    target_set: TargetSet,
    targets: BTreeMap<u32, TargetHandle>,
    skipped_targets: u64,
    /// Selector failures last logged (logged again only when they change).
    selector_problems: Vec<String>,
    source: Option<Box<dyn HotnessSource>>,
    /// The pids the source was last given.
    source_pids: Vec<u32>,
    routes: Option<mpsc::Sender<SampleRoute>>,
    ingest_counters: Arc<IngestCounters>,
    /// DAMON regions received (the DAMON source's samples).
    damon_regions: u64,
    published: Published,
}

/// How the hotness source learns a changed target list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SourceUpdate {
    Unchanged,
    /// Hand it the new list (perf sources edit their BPF allowlist).
    Set,
    /// Stop it, then start it with the new list. DAMON needs this: a target that an online
    /// commit adds to a running kdamond, or puts in the place of another, is never monitored
    /// (Linux 6.12, checked in the VM: no region of it is ever reported, while off and on
    /// again reports it within an aggregation). Removing every target just stops it.
    Restart,
}

fn source_update(kind: SourceKind, old: &[u32], new: &[u32]) -> SourceUpdate {
    if old == new {
        SourceUpdate::Unchanged
    } else if kind == SourceKind::Damon && !old.is_empty() && !new.is_empty() {
        SourceUpdate::Restart
    } else {
        SourceUpdate::Set
    }
}

/// Last values pushed into counters that mirror cumulative kernel or ingest counts.
#[derive(Default)]
struct Published {
    samples: u64,
    drops: BTreeMap<String, u64>,
    bpf_nanos: BTreeMap<String, u128>,
}

impl Agent {
    fn target_spec(&self, pid: u32) -> TargetSpec {
        let classes = &self.tiered.classes;
        let nodes = classes
            .best_node(&self.tiered.topology, true)
            .zip(classes.best_node(&self.tiered.topology, false))
            .map(|(fast, slow)| TierNodes { fast, slow });
        TargetSpec {
            pid,
            label: label_for(&self.root, pid),
            tiering: self.config.engine.clone(),
            exec: self.config.migration.clone(),
            observe: Arc::clone(&self.observe_switch),
            fast_nodes: classes.fast.clone(),
            slow_nodes: classes.slow.clone(),
            nodes,
            root: self.root.clone(),
        }
    }

    /// Starts managing `pid`; false when the target limit is reached or it cannot be opened.
    fn add_target(&mut self, pid: u32) -> bool {
        if self.targets.contains_key(&pid) {
            return true;
        }
        if self.targets.len() >= self.config.targets.max_targets {
            self.skipped_targets += 1;
            if self.skipped_targets.is_power_of_two() {
                tracing::warn!(
                    pid,
                    max = self.config.targets.max_targets,
                    skipped = self.skipped_targets,
                    "target limit reached ([targets] max_targets); process not managed"
                );
            }
            return false;
        }
        let spec = self.target_spec(pid);
        let label = spec.label.clone();
        match target::spawn(
            spec,
            self.config.sources.queue_batches,
            self.origin,
            self.metrics.clone(),
            Arc::clone(&self.status),
        ) {
            Ok(handle) => {
                if let Some(routes) = &self.routes {
                    let _ = routes.try_send(SampleRoute::Add {
                        pid,
                        sender: TargetChannel(handle.samples.clone()),
                    });
                }
                tracing::info!(pid, target = %label, "managing target");
                self.targets.insert(pid, handle);
                true
            }
            Err(error) => {
                tracing::info!(pid, %error, "cannot manage process");
                false
            }
        }
    }

    fn remove_target(&mut self, pid: u32) {
        if self.targets.remove(&pid).is_some() {
            if let Some(routes) = &self.routes {
                let _ = routes.try_send(SampleRoute::Remove { pid });
            }
            tracing::info!(pid, "target gone");
        }
    }

    /// Memory hotplug: re-reads and re-classifies the nodes when the online or with-memory
    /// node sets change. Targets found from then on use the new classification; running ones
    /// keep theirs (a move to a node that went away fails per page and is counted).
    fn check_hotplug(&mut self) {
        match reread_after_hotplug(&mut self.hotplug, &self.root, &self.config.topology) {
            None => {}
            Some(result) => match result {
                Ok(tiered) => {
                    tracing::warn!(
                        fast = ?tiered.classes.fast,
                        slow = ?tiered.classes.slow,
                        "NUMA nodes changed (memory hotplug); tiers re-read"
                    );
                    if let Ok(mut status) = self.status.write() {
                        status.fast_nodes.clone_from(&tiered.classes.fast);
                        status.slow_nodes.clone_from(&tiered.classes.slow);
                    }
                    self.tiered = tiered;
                    self.update_observe_reason();
                }
                // The tiers read last stay in use; moves to a node that went away fail per
                // page and are counted.
                Err(error) => tracing::warn!(%error, "re-reading the topology after hotplug"),
            },
        }
    }

    /// Re-resolves the selection; starts and stops target tasks; tells the source.
    fn refresh_targets(&mut self) {
        self.check_hotplug();
        let finished: Vec<u32> = self
            .targets
            .iter()
            .filter(|(_, handle)| handle.task.is_finished())
            .map(|(pid, _)| *pid)
            .collect();
        for pid in finished {
            self.remove_target(pid);
        }
        if self.observe_all {
            return;
        }
        let with_pods;
        let selection = match self.pods.as_mut() {
            Some(pods) => {
                pods.update(&self.metrics);
                with_pods = pods.selection(&self.selection);
                &with_pods
            }
            None => &self.selection,
        };
        match self.target_set.refresh(selection) {
            Ok(changes) => {
                if changes.problems != self.selector_problems {
                    for problem in &changes.problems {
                        tracing::warn!(%problem, "a target selector cannot be resolved; skipping it (the others are still followed)");
                    }
                    self.selector_problems = changes.problems;
                }
                for pid in changes.removed {
                    self.remove_target(pid);
                }
                for pid in changes.added {
                    self.add_target(pid);
                }
                // Members refused earlier (the target limit, a failed start) get a slot once
                // one is free.
                let waiting: Vec<u32> = self
                    .target_set
                    .iter()
                    .map(memtide_host::targets::Target::pid)
                    .filter(|pid| !self.targets.contains_key(pid))
                    .collect();
                for pid in waiting {
                    if self.targets.len() >= self.config.targets.max_targets {
                        break;
                    }
                    self.add_target(pid);
                }
            }
            Err(error) => tracing::warn!(%error, "resolving targets"),
        }
        let pids: Vec<u32> = self.targets.keys().copied().collect();
        let Some(source) = self.source.as_mut() else {
            return;
        };
        let mut update = source_update(source.kind(), &self.source_pids, &pids);
        // DAMON stops a kdamond by itself only once every target has exited; off while one
        // still lives means someone turned memtide's kdamond off. Start it again.
        let alive = pids.iter().any(|&pid| {
            self.target_set
                .get(pid)
                .is_some_and(|target| target.exited().is_ok_and(|exited| !exited))
        });
        match source.stopped() {
            Ok(true) if alive => {
                tracing::warn!(
                    source = %source.kind(),
                    "the source was stopped from outside (for DAMON: memtide's kdamond was turned off) while its targets live; starting it again"
                );
                self.metrics
                    .source_restarts
                    .get_or_create(&SourceReason {
                        source: source.kind().as_str().to_owned(),
                        reason: "stopped_externally".to_owned(),
                    })
                    .inc();
                update = SourceUpdate::Restart;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "checking that the source still runs"),
        }
        let result = match update {
            SourceUpdate::Unchanged => return,
            SourceUpdate::Set => source.set_targets(&pids),
            SourceUpdate::Restart => source
                .set_targets(&[])
                .and_then(|()| source.set_targets(&pids)),
        };
        match result {
            Ok(()) => self.source_pids = pids,
            // Tried again at the next refresh.
            Err(error) => tracing::warn!(%error, "updating the source's targets"),
        }
    }

    fn publish_metrics(&mut self) {
        let kind = self
            .source
            .as_ref()
            .map_or("none", |source| source.kind().as_str());
        let decoded = self.ingest_counters.delivered.load(Ordering::Relaxed)
            + self
                .ingest_counters
                .dropped_channel_full
                .load(Ordering::Relaxed)
            + self.ingest_counters.unrouted.load(Ordering::Relaxed)
            + self.damon_regions;
        let delta = decoded.saturating_sub(self.published.samples);
        self.published.samples = decoded;
        self.metrics
            .samples
            .get_or_create(&SourceLabel {
                source: kind.to_owned(),
            })
            .inc_by(delta);
        let mut drops: BTreeMap<String, u64> = self
            .source
            .as_ref()
            .map(|source| {
                source
                    .drop_counts()
                    .into_iter()
                    .map(|(reason, count)| (reason.to_owned(), count))
                    .collect()
            })
            .unwrap_or_default();
        drops.insert(
            "channel_full".to_owned(),
            self.ingest_counters
                .dropped_channel_full
                .load(Ordering::Relaxed),
        );
        drops.insert(
            "malformed".to_owned(),
            self.ingest_counters.malformed.load(Ordering::Relaxed),
        );
        if !self.observe_all {
            drops.insert(
                "unrouted".to_owned(),
                self.ingest_counters.unrouted.load(Ordering::Relaxed),
            );
        }
        for (reason, count) in drops {
            // With observe-all the BPF filter is off: not_target stays 0 by construction.
            let last = self.published.drops.entry(reason.clone()).or_insert(0);
            let delta = count.saturating_sub(*last);
            *last = count;
            self.metrics
                .samples_dropped
                .get_or_create(&SourceReason {
                    source: kind.to_owned(),
                    reason,
                })
                .inc_by(delta);
        }
        if let Some(source) = &self.source {
            for program in source.program_stats() {
                let nanos = program.run_time.as_nanos();
                let last = self
                    .published
                    .bpf_nanos
                    .entry(program.name.clone())
                    .or_insert(0);
                let delta = nanos.saturating_sub(*last);
                *last = nanos;
                #[expect(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
                self.metrics
                    .bpf_run_seconds
                    .get_or_create(&ProgramLabel {
                        program: program.name,
                    })
                    .inc_by(delta as f64 / 1e9);
            }
        }
        if let Ok(topology) = memtide_host::topology::Topology::read(&self.root) {
            for node in &topology.nodes {
                let tier = if self.tiered.classes.slow.contains(&node.id) {
                    "slow"
                } else {
                    "fast"
                };
                let labels = NodeTier {
                    node: node.id.to_string(),
                    tier: tier.to_owned(),
                };
                self.metrics
                    .tier_capacity_bytes
                    .get_or_create(&labels)
                    .set(i64::try_from(node.memory_bytes).unwrap_or(i64::MAX));
                self.metrics
                    .tier_free_bytes
                    .get_or_create(&labels)
                    .set(i64::try_from(node.free_bytes).unwrap_or(i64::MAX));
            }
        }
        let engine_memory: u64 = read_status(&self.status)
            .targets
            .iter()
            .map(|t| t.engine_memory_bytes)
            .sum();
        self.metrics
            .engine_memory_bytes
            .set(i64::try_from(engine_memory).unwrap_or(i64::MAX));
    }

    /// SIGHUP: re-read the file; a broken file keeps the running configuration.
    /// Recomputes why the agent only observes and tells every target.
    fn update_observe_reason(&mut self) {
        let reason = observe_reason(&self.config, &self.tiered);
        if reason != self.observe_reason {
            match &reason {
                Some(reason) => tracing::warn!("not migrating from now on: {reason}"),
                None => tracing::info!("migrating between tiers from now on"),
            }
        }
        self.observe_reason.clone_from(&reason);
        if let Ok(mut status) = self.status.write() {
            status.observe_reason.clone_from(&reason);
        }
        match self.observe_switch.write() {
            Ok(mut switch) => *switch = reason,
            Err(poisoned) => *poisoned.into_inner() = reason,
        }
    }

    fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            tracing::info!("SIGHUP: no configuration file in use; nothing to reload");
            return;
        };
        let loaded = memtide_config::check_permissions(&path)
            .and_then(|()| Config::load(&path))
            .and_then(|config| {
                config.validate(&path, Some(&self.tiered.topology))?;
                Ok(config)
            });
        match loaded {
            Ok(mut config) => {
                // Command-line additions stay in force; what the old file said does not.
                config.apply_kubernetes_env(|name| std::env::var(name).ok());
                if config.targets.pod_selector != self.config.targets.pod_selector
                    || config.kubernetes != self.config.kubernetes
                {
                    tracing::warn!(
                        "SIGHUP: [targets] pod_selector and [kubernetes] take effect at the next start; the pod list keeps its current settings"
                    );
                }
                config.agent.observe |= self.command_line.observe;
                for &pid in &self.command_line.pids {
                    if !config.targets.pids.contains(&pid) {
                        config.targets.pids.push(pid);
                    }
                }
                for cgroup in &self.command_line.cgroups {
                    if !config.targets.cgroups.contains(cgroup) {
                        config.targets.cgroups.push(cgroup.clone());
                    }
                }
                self.selection = config.targets.selection();
                self.config = config;
                self.update_observe_reason();
                tracing::info!(path = %path.display(), "configuration reloaded (observe mode and targets apply now; engine settings to targets found from now on)");
            }
            Err(error) => {
                tracing::error!(%error, "SIGHUP: the new configuration is invalid; keeping the running one");
            }
        }
    }
}

fn read_status(status: &RwLock<AgentStatus>) -> AgentStatus {
    match status.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// The topology read again when the online or with-memory node sets changed since the last
/// call; `None` when they did not (or could not be read: tried again at the next refresh).
fn reread_after_hotplug(
    watch: &mut HotplugWatch,
    root: &HostRoot,
    over: &TierOverride,
) -> Option<Result<TieredTopology, SysfsError>> {
    match watch.changed(root) {
        Ok(true) => Some(TieredTopology::read(root, over)),
        Ok(false) => None,
        Err(error) => {
            tracing::debug!(%error, "checking for memory hotplug");
            None
        }
    }
}

fn observe_reason(config: &Config, tiered: &TieredTopology) -> Option<String> {
    if config.agent.observe {
        return Some("observe mode (--observe or [agent] observe = true)".to_owned());
    }
    if !tiered.classes.can_tier() {
        let nodes = tiered.topology.nodes.len();
        return Some(format!(
            "{nodes} NUMA node(s), no slow tier: there is nothing to migrate to; observing only"
        ));
    }
    if config.targets.is_empty() {
        return Some(
            "no targets configured: observing every process, migrating nothing (set [targets] \
             or --pid/--cgroup)"
                .to_owned(),
        );
    }
    None
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(options: RunOptions) -> Result<(), DaemonError> {
    let origin = Instant::now();
    let root = HostRoot::default();
    let (config, config_path) = load_config(&options)?;
    match &config_path {
        Some(path) => tracing::info!(path = %path.display(), "configuration loaded"),
        None => tracing::info!(
            "no configuration file at {}; using the defaults",
            memtide_config::DEFAULT_PATH
        ),
    }
    let tiered = TieredTopology::read(&root, &config.topology)?;
    config.validate(
        config_path
            .as_deref()
            .unwrap_or_else(|| Path::new("(defaults)")),
        Some(&tiered.topology),
    )?;
    if let Some(warning) = &tiered.classes.warning {
        tracing::warn!("{warning}");
    }
    // Warns about (or, with on_conflict = "refuse", refuses) other page movers.
    coexist::check(&root, config.agent.on_conflict)?;
    let pod_lister = if config.targets.pod_selector.is_empty() {
        None
    } else {
        let lister = PodLister::new(
            &config.kubernetes,
            &config.kubernetes.node_name,
            &config.targets.pod_selector,
            |name| std::env::var(name).ok(),
        )?;
        tracing::info!(
            url = lister.url(),
            "managing the pods of this node that match [targets] pod_selector"
        );
        Some(lister)
    };
    let observe_reason = observe_reason(&config, &tiered);
    if let Some(reason) = &observe_reason {
        tracing::warn!("not migrating: {reason}");
    }

    // Kernel BPF run-time accounting for memtide_bpf_run_seconds_total, for as long as the
    // agent runs (BPF_ENABLE_STATS needs CAP_SYS_ADMIN; without it the metric stays 0).
    let _bpf_stats = crate::bpf::enable_run_time_stats()
        .map_err(|error| {
            tracing::warn!(%error, "BPF run-time statistics unavailable; memtide_bpf_run_seconds_total stays 0");
        })
        .ok();
    let (metrics, registry) = Metrics::new();
    let status = Arc::new(RwLock::new(AgentStatus {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        source: "none".to_owned(),
        observe_reason: observe_reason.clone(),
        fast_nodes: tiered.classes.fast.clone(),
        slow_nodes: tiered.classes.slow.clone(),
        targets: Vec::new(),
    }));
    let ready = Arc::new(AtomicBool::new(false));
    let listener = http::bind(config.agent.listen)
        .await
        .map_err(DaemonError::Listen)?;
    tracing::info!(address = %config.agent.listen, "serving /metrics /healthz /readyz /status");
    let (http_stop, mut http_stop_rx) = watch::channel(false);
    let http = http::HttpServer::start(
        listener,
        http::Shared::new(Arc::new(registry), Arc::clone(&status), Arc::clone(&ready)),
        async move {
            let _ = http_stop_rx.changed().await;
        },
    )
    .map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("starting the HTTP server thread: {error}"),
        )
    })?;

    let selection = config.targets.selection();
    let observe_all = selection.include.is_empty() && pod_lister.is_none();
    let pods = pod_lister
        .map(|lister| PodWatch::spawn(lister, Duration::from_secs(config.kubernetes.poll_seconds)));
    let mut hotplug = HotplugWatch::new();
    // The first call records the current node sets.
    let _ = hotplug.changed(&root);
    let mut agent = Agent {
        config,
        config_path,
        root,
        origin,
        tiered,
        hotplug,
        observe_switch: Arc::new(RwLock::new(observe_reason.clone())),
        observe_reason,
        command_line: options.clone(),
        metrics,
        status,
        selection,
        pods,
        observe_all,
        target_set: TargetSet::new(),
        targets: BTreeMap::new(),
        skipped_targets: 0,
        selector_problems: Vec::new(),
        source_pids: Vec::new(),
        source: None,
        routes: None,
        ingest_counters: Arc::new(IngestCounters::default()),
        damon_regions: 0,
        published: Published::default(),
    };
    agent.refresh_targets();

    // The hotness source.
    let pmus = PmuScan::read(&agent.root).unwrap_or_default();
    let order = candidates(&agent.config, &agent.root, &pmus, observe_all);
    let cpus = aya::util::online_cpus().map_err(|(_, error)| DaemonError::Io(error))?;
    let limits = KernelLimits::read(&agent.root)?;
    let mut perf = PerfSourceOptions::new(cpus, limits);
    perf.ring_bytes = agent.config.sources.ring_bytes;
    perf.filter_by_target = !observe_all;
    perf.budget = SamplingBudget {
        cpu_fraction: agent.config.sources.cpu_budget_percent / 100.0,
        ..SamplingBudget::default()
    };
    let pids: Vec<u32> = agent.targets.keys().copied().collect();
    let (source, failed) = start_first(
        &order,
        &StartContext {
            root: &agent.root,
            pmus: &pmus,
            perf: &perf,
            damon: &agent.config.sources.damon,
            pids: &pids,
        },
    );
    // start_first has logged each failure with its reason.
    drop(failed);
    agent.source_pids.clone_from(&pids);
    let mut source = source;
    let (routes, routes_rx) = mpsc::channel(1024);
    let (default_tx, mut default_rx) =
        mpsc::channel::<SampleBatch>(agent.config.sources.queue_batches);
    let (damon_tx, mut damon_rx) = mpsc::channel(64);
    let (damon_stop, damon_stop_rx) = watch::channel(false);
    let mut ingest = None;
    let mut damon_drain = None;
    let source_name = source
        .as_ref()
        .map_or("none", |s| s.kind().as_str())
        .to_owned();
    match source.as_mut().and_then(|s| s.take_stream()) {
        Some(Stream::Samples(ring)) => {
            let mut router = SampleRouter::new(
                agent.config.sources.batch,
                Arc::clone(&agent.ingest_counters),
            );
            for (pid, handle) in &agent.targets {
                router.add_route(*pid, TargetChannel(handle.samples.clone()));
            }
            if observe_all {
                router.apply(SampleRoute::SetDefault {
                    sender: Some(TargetChannel(default_tx.clone())),
                });
            }
            ingest = Some(tokio::spawn(run_sample_ring(ring, router, routes_rx)));
        }
        Some(Stream::DamonRegions(ring)) => {
            damon_drain = Some(tokio::spawn(run_damon_ring(ring, damon_tx, damon_stop_rx)));
        }
        None => tracing::error!(
            tried = ?order,
            "no hotness source could start; serving metrics only (see `memtide probe`)"
        ),
    }
    agent.routes = Some(routes);
    // The start-up period came from an expected event rate; this keeps the measured cost of
    // sampling inside the budget from here on.
    let mut sample_rate = source.as_deref().and_then(|source| {
        sample_rate::SampleRate::new(
            source,
            http.cpu_meter(),
            perf.budget.cpu_fraction,
            perf.limits
                .effective_max_rate(perf.budget.kernel_sample_cost_ns),
            agent.ingest_counters.decoded.load(Ordering::Relaxed),
        )
    });
    let mut rate_check = tokio::time::interval(RateController::INTERVAL);
    rate_check.reset();
    agent.source = source;
    if let Ok(mut status) = agent.status.write() {
        status.source.clone_from(&source_name);
    }
    tracing::info!(source = %source_name, targets = agent.targets.len(), observe_all, "memtide running");
    let notifier = Notifier::from_env();
    ready.store(true, Ordering::Relaxed);
    notifier.ready(&format!(
        "source {source_name}; {}",
        agent
            .observe_reason
            .as_deref()
            .unwrap_or("migrating between tiers")
    ));

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut refresh = tokio::time::interval(REFRESH);
    let mut metrics_tick = tokio::time::interval(METRICS_TICK);
    let mut watchdog =
        tokio::time::interval(Notifier::watchdog_interval().unwrap_or(Duration::from_secs(3600)));
    let max_nr_accesses = agent.config.sources.damon.max_nr_accesses();
    loop {
        tokio::select! {
            _ = terminate.recv() => { tracing::info!("SIGTERM: stopping"); break; }
            _ = interrupt.recv() => { tracing::info!("SIGINT: stopping"); break; }
            _ = hangup.recv() => agent.reload(),
            _ = refresh.tick() => agent.refresh_targets(),
            _ = metrics_tick.tick() => agent.publish_metrics(),
            _ = rate_check.tick(), if sample_rate.is_some() => {
                if let (Some(rate), Some(source)) = (sample_rate.as_mut(), agent.source.as_deref_mut()) {
                    let samples = agent.ingest_counters.decoded.load(Ordering::Relaxed);
                    rate.tick(source, samples, &agent.metrics);
                }
            }
            _ = watchdog.tick() => notifier.watchdog(),
            Some(batch) = default_rx.recv() => dispatch_observed(&mut agent, batch),
            Some(regions) = damon_rx.recv() => {
                agent.damon_regions += regions.len() as u64;
                dispatch_damon(&agent, &regions, max_nr_accesses);
            }
        }
    }

    // Shutdown: stop taking samples, let epochs finish, then release kernel resources.
    notifier.stopping();
    ready.store(false, Ordering::Relaxed);
    agent.routes = None;
    let _ = damon_stop.send(true);
    if let Some(ingest) = ingest {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, ingest).await;
    }
    if let Some(drain) = damon_drain {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, drain).await;
    }
    let tasks: Vec<_> = std::mem::take(&mut agent.targets)
        .into_values()
        .map(|handle| handle.task)
        .collect();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    for task in tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!("a target's epoch did not finish in time; abandoning it");
        }
    }
    // Detaches the BPF programs and removes memtide's kdamond, if any.
    drop(agent.source.take());
    let _ = http_stop.send(true);
    http.finish(Duration::from_secs(1)).await;
    tracing::info!("memtide stopped");
    Ok(())
}

/// Observe-all mode: samples of processes without a task start one (up to the limit).
fn dispatch_observed(agent: &mut Agent, batch: Vec<AccessSample>) {
    let mut by_pid: BTreeMap<u32, Vec<AccessSample>> = BTreeMap::new();
    for sample in batch {
        by_pid.entry(sample.pid).or_default().push(sample);
    }
    for (pid, samples) in by_pid {
        if pid == std::process::id() || !agent.add_target(pid) {
            continue;
        }
        if let Some(handle) = agent.targets.get(&pid) {
            let _ = handle.samples.try_send(samples);
        }
    }
}

/// DAMON regions arrive by target index; each goes to its process's task.
fn dispatch_damon(agent: &Agent, regions: &[memtide_common::DamonRegion], max_nr_accesses: u32) {
    let Some(source) = agent.source.as_deref() else {
        return;
    };
    let Some(damon) = source.as_damon() else {
        return;
    };
    let mut by_pid: BTreeMap<u32, Vec<DamonObservation>> = BTreeMap::new();
    for region in regions {
        if let Some(pid) = damon.target_pid(region.target) {
            by_pid.entry(pid).or_default().push(DamonObservation {
                start: region.start,
                end: region.end,
                nr_accesses: region.nr_accesses,
                max_nr_accesses,
                age: region.age,
            });
        }
    }
    for (pid, observations) in by_pid {
        if let Some(handle) = agent.targets.get(&pid) {
            let _ = handle.damon.try_send(observations);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn copy_tree(from: &Path, to: &Path) {
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
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/topology/cxl-cpuless"),
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
        assert_eq!(before.classes.slow, vec![2]);
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
        assert!(after.classes.slow.is_empty(), "{:?}", after.classes);
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
}
