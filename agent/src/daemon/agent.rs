//! The agent's state between events: its configuration and tiers, the targets it manages, the
//! running source, and the routes that tell the source where each target's records go.
//!
//! Every method here may read /proc or /sys (target selection, hotplug, labels) or write sysfs
//! (a DAMON source's target list): the event loop runs them on the blocking pool.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, RwLock},
    time::Instant,
};

use memtide_config::{Config, SourceKind, TierOverride};
use memtide_core::{ingest::IngestCounters, policy::TierCost};
use memtide_host::{
    exec::TierNodes,
    sysfs::{HostRoot, SysfsError},
    targets::select::{Selection, TargetSet},
    topology::{
        costs::{self, LocalLatency, NodeCost},
        locality::Locality,
        tiering::{HotplugWatch, TieredTopology},
    },
};
use tokio::sync::mpsc;

use super::{
    RunOptions, config,
    limits::limit_for,
    pods::PodWatch,
    publish::{self, Published, Readings},
    status::AgentStatus,
    target::{self, FastShares, ObserveSwitch, SharedMachine, TargetHandle, TargetSpec},
};
use crate::{
    cpu_time::CpuAccount,
    metrics::{Metrics, SourceReason},
    sources::{HotnessSource, SampleRoute, TargetChannel},
};

/// The agent's state between events, in the parts its methods work on: the machine it
/// tiers, the targets it follows, the source that samples them, and what it publishes.
pub(super) struct Agent {
    pub(super) config: Config,
    pub(super) config_path: Option<PathBuf>,
    pub(super) root: HostRoot,
    pub(super) origin: Instant,
    pub(super) machine: MachineView,
    pub(super) observe_reason: Option<String>,
    /// The same reason, shared with every target task.
    pub(super) observe_switch: ObserveSwitch,
    /// What `--pid`, `--cgroup` and `--observe` added; kept across reloads.
    pub(super) command_line: RunOptions,
    pub(super) publishing: Publishing,
    pub(super) targets: Targets,
    pub(super) observe_all: bool,
    pub(super) source: Option<Box<dyn HotnessSource>>,
    /// Why no source runs, when none could start.
    pub(super) source_failure: Option<String>,
    /// The pids the source was last given.
    pub(super) source_pids: Vec<u32>,
    /// Route changes for the source's delivery task; `None` before it starts and after it ends.
    pub(super) routes: Option<mpsc::UnboundedSender<SampleRoute>>,
    pub(super) ingest_counters: Arc<IngestCounters>,
    /// The sampling path's CPU time: the delivery task's and the targets' taking of samples.
    pub(super) sampling_cpu: CpuAccount,
}

/// The machine as the agent tiers it.
pub(super) struct MachineView {
    pub(super) tiered: TieredTopology,
    /// Notices nodes coming and going (memory hotplug).
    pub(super) hotplug: HotplugWatch,
    /// The nodes and watermarks every target plans against, read once for all of them.
    pub(super) shared: Arc<SharedMachine>,
    /// The fast tier's division between the targets.
    pub(super) shares: Arc<FastShares>,
}

/// The targets the agent follows: what selects them, and their running tasks.
pub(super) struct Targets {
    pub(super) selection: Selection,
    /// The opted-in pods of this node (`[targets] pod_selector`), added to `selection`.
    pub(super) pods: Option<PodWatch>,
    pub(super) set: TargetSet,
    pub(super) handles: BTreeMap<u32, TargetHandle>,
    pub(super) skipped: u64,
    /// Selector failures last logged (logged again only when they change).
    pub(super) selector_problems: Vec<String>,
}

/// Where the agent publishes: its metrics, its `/status`, and what the metrics already have.
pub(super) struct Publishing {
    pub(super) metrics: Metrics,
    pub(super) status: Arc<RwLock<AgentStatus>>,
    pub(super) published: Published,
}

/// How the hotness source learns a changed target list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SourceUpdate {
    Unchanged,
    /// Hand it the new list (perf sources edit their BPF allowlist).
    Set,
    /// Stop it, then start it with the new list. DAMON needs this: a target that an online
    /// commit adds to a running kdamond, or puts in the place of another, is never monitored
    /// (Linux 6.12, checked in the VM: no region of it is ever reported, while off and on
    /// again reports it within an aggregation). Removing every target just stops it.
    Restart,
}

pub(super) fn source_update(kind: SourceKind, old: &[u32], new: &[u32]) -> SourceUpdate {
    if old == new {
        SourceUpdate::Unchanged
    } else if kind == SourceKind::Damon && !old.is_empty() && !new.is_empty() {
        SourceUpdate::Restart
    } else {
        SourceUpdate::Set
    }
}

/// What accessing each node of `tiered` costs under `config`; SLIT distances scale the planner's
/// default fast-tier latencies.
pub(super) fn node_costs(config: &Config, tiered: &TieredTopology) -> BTreeMap<u32, NodeCost> {
    let benefit = &config.engine.policy.benefit;
    costs::node_costs(
        tiered,
        &config.topology.costs,
        LocalLatency {
            read_ns: benefit.fast_read_ns,
            write_ns: benefit.fast_write_ns,
        },
    )
}

/// The planner's view of a node's costs (Eq. 1 latencies, BW-AWARE's read bandwidth).
fn tier_cost(cost: &NodeCost) -> TierCost {
    TierCost {
        read_ns: cost.read_latency_ns,
        write_ns: cost.write_latency_ns,
        bandwidth_bytes_per_s: cost.read_bandwidth_bytes_per_s,
    }
}

fn label_for(root: &HostRoot, pid: u32) -> String {
    let comm = std::fs::read_to_string(root.path(format!("proc/{pid}/comm")))
        .map(|c| c.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("{comm}:{pid}")
}

impl Agent {
    /// What accessing each node costs: `[[topology.costs]]`, else HMAT, else SLIT (the model in
    /// `memtide_host::topology::costs`).
    pub(super) fn node_costs(&self) -> BTreeMap<u32, NodeCost> {
        node_costs(&self.config, &self.machine.tiered)
    }

    /// Puts the nodes' costs in `/status` and `/metrics`: at start, and again when the tiers
    /// (memory hotplug) or the configuration (`[[topology.costs]]`, on SIGHUP) change them.
    pub(super) fn publish_node_costs(&self) {
        let costs = self.node_costs();
        publish::publish_node_costs(&self.publishing.metrics, &costs);
        if let Ok(mut status) = self.publishing.status.write() {
            status.node_costs = costs.into_values().collect();
        }
    }

    /// Publishes the agent-wide metrics (`publish`), once a second.
    pub(super) fn publish_metrics(&mut self) {
        let readings = Readings {
            source_running: self.not_ready().is_none(),
            metrics: &self.publishing.metrics,
            source: self.source.as_deref(),
            ingest: &self.ingest_counters,
            sampling_cpu: &self.sampling_cpu,
            observe_all: self.observe_all,
            tiers: &self.machine.tiered.classes.nodes,
            root: &self.root,
            status: &self.publishing.status,
        };
        self.publishing.published.publish(&readings);
    }

    fn target_spec(&self, pid: u32) -> TargetSpec {
        let classes = &self.machine.tiered.classes;
        let nodes = classes
            .best_node(&self.machine.tiered.topology, true)
            .zip(classes.best_node(&self.machine.tiered.topology, false))
            .map(|(fast, slow)| TierNodes { fast, slow });
        let costs = self.node_costs();
        let tier_cost = |node: Option<u32>| {
            node.and_then(|node| costs.get(&node))
                .map_or_else(TierCost::default, tier_cost)
        };
        TargetSpec {
            pid,
            label: label_for(&self.root, pid),
            tiering: self.config.engine.clone(),
            exec: self.config.migration.clone(),
            observe: Arc::clone(&self.observe_switch),
            tiers: classes.nodes.clone(),
            costs: [
                tier_cost(nodes.map(|n| n.fast)),
                tier_cost(nodes.map(|n| n.slow)),
            ],
            locality: nodes
                .and_then(|nodes| Locality::new(&self.machine.tiered, nodes))
                .map(Arc::new),
            nodes,
            root: self.root.clone(),
            machine: Arc::clone(&self.machine.shared),
            limit: Arc::new(RwLock::new(self.limit_for(pid))),
            shares: Arc::clone(&self.machine.shares),
            sampling_cpu: self.sampling_cpu.clone(),
            quiet: self.observe_all,
        }
    }

    /// The `[[targets.limits]]` table that applies to `pid` now.
    fn limit_for(&self, pid: u32) -> Option<target::AppliedLimit> {
        let pods = self.targets.pods.as_ref().map_or(&[][..], PodWatch::pods);
        limit_for(&self.root, pid, &self.config.targets.limits, pods)
    }

    /// Matches every running target against the limits again (after a reload).
    fn update_limits(&self) {
        for (&pid, handle) in &self.targets.handles {
            let limit = self.limit_for(pid);
            let mut current = match handle.limit.write() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            if *current != limit {
                tracing::info!(
                    pid,
                    limit = %limit.as_ref().map_or_else(|| "none".to_owned(), ToString::to_string),
                    "fast-tier limit changed"
                );
                *current = limit;
            }
        }
    }

    /// Sends a route change to the source's delivery task. Never dropped: the channel is
    /// unbounded (route changes are as many as target changes); it only fails once delivery
    /// has ended, and then there are no records left to route.
    pub(super) fn route(&mut self, command: SampleRoute) {
        if let Some(routes) = &self.routes
            && routes.send(command).is_err()
        {
            tracing::warn!("the source's delivery has ended; no more samples reach the targets");
            self.routes = None;
        }
    }

    /// Why the agent is not ready: no source samples, or its records no longer reach the
    /// targets. `None` while one does.
    pub(super) fn not_ready(&self) -> Option<String> {
        match (&self.source, &self.routes) {
            (Some(_), Some(_)) => None,
            (Some(source), None) => Some(format!(
                "the {} source's delivery has ended: no samples reach the targets",
                source.kind()
            )),
            (None, _) => Some(self.source_failure.clone().unwrap_or_else(|| {
                "no hotness source runs (see the log and `memtide probe`)".to_owned()
            })),
        }
    }

    /// `memtide_targets_refused_total{reason}`, one more.
    fn count_refusal(&self, reason: &str) {
        self.publishing
            .metrics
            .targets_refused
            .get_or_create(&crate::metrics::Reason {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// A process that could not be taken on: counted by reason, and logged at DEBUG when it
    /// has simply exited in between (churn, not a problem) or was never asked for by name
    /// (observing every process).
    fn refused(&mut self, pid: u32, error: &str) {
        let exited = !self.root.path(format!("proc/{pid}")).exists();
        self.count_refusal(if exited { "exited" } else { "cannot_open" });
        if exited || self.observe_all {
            tracing::debug!(pid, %error, "cannot manage process");
        } else {
            tracing::info!(pid, %error, "cannot manage process");
        }
    }

    /// Starts managing `pid`; false when the target limit is reached or it cannot be opened.
    pub(super) fn add_target(&mut self, pid: u32) -> bool {
        if self.targets.handles.contains_key(&pid) {
            return true;
        }
        if self.targets.handles.len() >= self.config.targets.max_targets {
            self.targets.skipped += 1;
            // Observing every process, a busy machine always has more than the limit: not the
            // refusal of a target someone chose.
            self.count_refusal(if self.observe_all {
                "max_targets_observing_all"
            } else {
                "max_targets"
            });
            if self.targets.skipped.is_power_of_two() {
                tracing::warn!(
                    pid,
                    max = self.config.targets.max_targets,
                    skipped = self.targets.skipped,
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
            self.publishing.metrics.clone(),
            Arc::clone(&self.publishing.status),
        ) {
            Ok(handle) => {
                self.route(SampleRoute::Add {
                    pid,
                    sender: TargetChannel(handle.input.clone()),
                });
                let limit = match handle.limit.read() {
                    Ok(limit) => limit.as_ref().map(ToString::to_string),
                    Err(_) => None,
                };
                let limit = limit.as_deref().unwrap_or("none");
                if self.observe_all {
                    tracing::debug!(pid, target = %label, limit, "managing target");
                } else {
                    tracing::info!(pid, target = %label, limit, "managing target");
                }
                self.targets.handles.insert(pid, handle);
                true
            }
            Err(error) => {
                self.refused(pid, &error);
                false
            }
        }
    }

    pub(super) fn remove_target(&mut self, pid: u32) {
        if self.targets.handles.remove(&pid).is_some() {
            self.route(SampleRoute::Remove { pid });
            if self.observe_all {
                tracing::debug!(pid, "target gone");
            } else {
                tracing::info!(pid, "target gone");
            }
        }
    }

    /// Memory hotplug: re-reads and re-classifies the nodes when the online or with-memory
    /// node sets change. Targets found from then on use the new classification; running ones
    /// keep theirs (a move to a node that went away fails per page and is counted).
    fn check_hotplug(&mut self) {
        match reread_after_hotplug(&mut self.machine.hotplug, &self.root, &self.config.topology) {
            None => {}
            Some(Ok(tiered)) => {
                tracing::warn!(
                    fast = ?tiered.classes.nodes.fast,
                    slow = ?tiered.classes.nodes.slow,
                    "NUMA nodes changed (memory hotplug); tiers re-read"
                );
                self.machine.tiered = tiered;
                if let Ok(mut status) = self.publishing.status.write() {
                    status
                        .fast_nodes
                        .clone_from(&self.machine.tiered.classes.nodes.fast);
                    status
                        .slow_nodes
                        .clone_from(&self.machine.tiered.classes.nodes.slow);
                }
                self.publish_node_costs();
                self.update_observe_reason();
            }
            // The tiers read last stay in use; moves to a node that went away fail per page
            // and are counted.
            Some(Err(error)) => tracing::warn!(%error, "re-reading the topology after hotplug"),
        }
    }

    /// Re-resolves the selection; starts and stops target tasks; tells the source.
    pub(super) fn refresh_targets(&mut self) {
        self.check_hotplug();
        let finished: Vec<u32> = self
            .targets
            .handles
            .iter()
            .filter(|(_, handle)| handle.task.is_finished())
            .map(|(pid, _)| *pid)
            .collect();
        for pid in finished {
            self.remove_target(pid);
        }
        if !self.observe_all {
            self.resolve_selection();
        }
        self.update_source();
    }

    /// Follows the selection (and the pods it opted in): new members become targets, gone
    /// ones stop being.
    fn resolve_selection(&mut self) {
        let with_pods;
        let mut pods_changed = false;
        let selection = match self.targets.pods.as_mut() {
            Some(pods) => {
                pods_changed = pods.update(&self.publishing.metrics);
                with_pods = pods.selection(&self.targets.selection);
                &with_pods
            }
            None => &self.targets.selection,
        };
        let changes = match self.targets.set.refresh(&self.root, selection) {
            Ok(changes) => changes,
            Err(error) => {
                tracing::warn!(%error, "resolving targets");
                return;
            }
        };
        if changes.problems != self.targets.selector_problems {
            for problem in &changes.problems {
                tracing::warn!(%problem, "a target selector cannot be resolved; skipping it (the others are still followed)");
            }
            self.targets.selector_problems = changes.problems;
        }
        for pid in changes.removed {
            self.remove_target(pid);
        }
        // A pod's labels may have changed: its `pod_label` limits with them.
        if pods_changed && !self.config.targets.limits.is_empty() {
            self.update_limits();
        }
        for pid in changes.added {
            self.add_target(pid);
        }
        // Members refused earlier (the target limit, a failed start) get a slot once one is
        // free.
        let waiting: Vec<u32> = self
            .targets
            .set
            .iter()
            .map(memtide_host::targets::Target::pid)
            .filter(|pid| !self.targets.handles.contains_key(pid))
            .collect();
        for pid in waiting {
            if self.targets.handles.len() >= self.config.targets.max_targets {
                break;
            }
            self.add_target(pid);
        }
    }

    /// Hands the source the current target list, and starts it again if it was stopped from
    /// outside while its targets live.
    fn update_source(&mut self) {
        let pids: Vec<u32> = self.targets.handles.keys().copied().collect();
        let Some(source) = self.source.as_mut() else {
            return;
        };
        let mut update = source_update(source.kind(), &self.source_pids, &pids);
        // DAMON stops a kdamond by itself only once every target has exited; off while one
        // still lives means someone turned memtide's kdamond off. Start it again.
        let alive = pids.iter().any(|&pid| {
            self.targets
                .set
                .get(pid)
                .is_some_and(|target| target.exited().is_ok_and(|exited| !exited))
        });
        match source.stopped() {
            Ok(true) if alive => {
                tracing::warn!(
                    source = %source.kind(),
                    "the source was stopped from outside (for DAMON: memtide's kdamond was turned off) while its targets live; starting it again"
                );
                self.publishing
                    .metrics
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

    /// Recomputes why the agent only observes and tells every target.
    pub(super) fn update_observe_reason(&mut self) {
        let reason = config::observe_reason(&self.config, &self.machine.tiered);
        if reason != self.observe_reason {
            match &reason {
                Some(reason) => tracing::warn!("not migrating from now on: {reason}"),
                None => tracing::info!("migrating between tiers from now on"),
            }
        }
        self.observe_reason.clone_from(&reason);
        if let Ok(mut status) = self.publishing.status.write() {
            status.observe_reason.clone_from(&reason);
        }
        match self.observe_switch.write() {
            Ok(mut switch) => *switch = reason,
            Err(poisoned) => *poisoned.into_inner() = reason,
        }
    }

    /// SIGHUP: re-read the file; a broken file keeps the running configuration.
    pub(super) fn reload(&mut self) {
        let Some(path) = self.config_path.clone() else {
            tracing::info!("SIGHUP: no configuration file in use; nothing to reload");
            return;
        };
        match config::reload(
            &path,
            &self.config,
            &self.command_line,
            &self.machine.tiered,
        ) {
            Ok(config) => {
                self.targets.selection = config::selection(&config.targets);
                self.config = config;
                self.publish_node_costs();
                self.update_observe_reason();
                self.update_limits();
                tracing::info!(path = %path.display(), "configuration reloaded (observe mode, targets and limits apply now; engine settings to targets found from now on)");
            }
            Err(error) => {
                tracing::error!(%error, "SIGHUP: the new configuration is invalid; keeping the running one");
            }
        }
    }
}

/// The topology read again when the online or with-memory node sets changed since the last
/// call; `None` when they did not (or could not be read: tried again at the next refresh).
pub(super) fn reread_after_hotplug(
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
