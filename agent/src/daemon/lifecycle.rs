//! The agent's life: [`start`] (configuration → tiers → HTTP endpoints → targets → the best
//! hotness source that starts → delivery), [`event_loop`] (follow targets, publish metrics, keep
//! the sample period in budget, pet the watchdog, reload, stop) and [`shutdown`] (stop taking
//! samples, let in-flight epochs finish, release the kernel's resources).
//!
//! Work that reads /proc or /sys, or writes sysfs, runs on the blocking pool with the agent's
//! state moved in and back out, so the runtime's workers only ever wait.

use std::{
    collections::BTreeMap,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    sync::{Arc, RwLock, atomic::Ordering},
    time::{Duration, Instant},
};

use memtide_common::AccessSample;
use memtide_config::Config;
use memtide_core::ingest::IngestCounters;
use memtide_host::{
    exec::coexist,
    sysfs::HostRoot,
    targets::select::TargetSet,
    topology::{
        costs::NodeCost,
        tiering::{HotplugWatch, TieredTopology},
    },
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use super::{
    Control, DaemonError, Environment, RunOptions,
    agent::{self, Agent, MachineView, Publishing, Targets},
    config::{check_command_line_targets, load_config, observe_reason, selection},
    http,
    notify::Notifier,
    pods::PodWatch,
    publish::{self, Published},
    sample_rate::SampleRate,
    status::AgentStatus,
};
use crate::{
    cpu_time::CpuAccount,
    kube::PodWatcher,
    metrics::Metrics,
    sources::{Delivery, SampleRoute, SourceRequest, TargetChannel, TargetInput},
};

/// How often targets are re-resolved (cgroup members come and go).
const REFRESH: Duration = Duration::from_secs(1);
/// How often source, BPF and tier metrics are published.
const METRICS_TICK: Duration = Duration::from_secs(1);
/// How long shutdown waits for in-flight epochs.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// A started agent, between [`start`] and [`shutdown`].
pub(super) struct Running {
    pub(super) agent: Agent,
    pub(super) address: std::net::SocketAddr,
    control: mpsc::UnboundedReceiver<Control>,
    http: http::HttpServer,
    http_stop: watch::Sender<bool>,
    ready: Arc<http::Readiness>,
    /// The source's delivery task.
    delivery: Option<JoinHandle<()>>,
    /// Observe-all mode: samples of processes that have no target yet.
    unclaimed: mpsc::Receiver<TargetInput>,
    sample_rate: Option<SampleRate>,
    notifier: Notifier,
    /// Keeps the kernel's BPF run-time accounting on while the agent runs.
    _cost_accounting: Option<OwnedFd>,
}

/// Runs `work` on the blocking pool with the agent moved in, and hands the agent back.
async fn on_blocking_pool(
    mut agent: Agent,
    work: impl FnOnce(&mut Agent) + Send + 'static,
) -> Agent {
    match tokio::task::spawn_blocking(move || {
        work(&mut agent);
        agent
    })
    .await
    {
        Ok(agent) => agent,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// Start-up, up to the first sample: everything [`event_loop`] needs.
pub(super) async fn start(
    options: RunOptions,
    env: Environment,
    control: mpsc::UnboundedReceiver<Control>,
) -> Result<Running, DaemonError> {
    let origin = Instant::now();
    let (agent, http, http_stop, ready) = prepare(options, &env, origin).await?;
    let mut agent = on_blocking_pool(agent, Agent::refresh_targets).await;
    agent.publishing.published.watch_http(http.cpu_meter());
    let cost_accounting = env.sources.cost_accounting();
    let (unclaimed_tx, unclaimed) = mpsc::channel(agent.config.sources.queue_batches.max(1));
    let delivery = start_source(&mut agent, &env, unclaimed_tx).await;
    // The start-up period came from an expected event rate; this keeps the measured cost of
    // sampling inside the budget from here on.
    let sample_rate = agent.source.as_deref().and_then(|source| {
        SampleRate::new(
            source,
            agent.sampling_cpu.clone(),
            agent.ingest_counters.decoded.load(Ordering::Relaxed),
        )
    });
    let source_name = agent
        .source
        .as_ref()
        .map_or("none", |s| s.kind().as_str())
        .to_owned();
    if let Ok(mut status) = agent.publishing.status.write() {
        status.source.clone_from(&source_name);
    }
    tracing::info!(source = %source_name, targets = agent.targets.handles.len(), observe_all = agent.observe_all, "memtide running");
    let notifier = Notifier::from_env();
    let not_ready = agent.not_ready();
    // systemd hears that the process is up either way (a unit that never became ready would
    // be restarted in a loop); what it does is in its status line and in /readyz.
    let doing = match &not_ready {
        Some(reason) => format!("not ready: {reason}"),
        None => agent
            .observe_reason
            .clone()
            .unwrap_or_else(|| "migrating between tiers".to_owned()),
    };
    set_ready(&ready, &agent, not_ready);
    notifier.ready(&format!("source {source_name}; {doing}"));
    Ok(Running {
        address: agent.config.agent.listen,
        agent,
        control,
        http,
        http_stop,
        ready,
        delivery,
        unclaimed,
        sample_rate,
        notifier,
        _cost_accounting: cost_accounting,
    })
}

/// Configuration, tiers, conflicts, the pod watch and the HTTP endpoints: the agent before it
/// has targets or a source.
async fn prepare(
    options: RunOptions,
    env: &Environment,
    origin: Instant,
) -> Result<
    (
        Agent,
        http::HttpServer,
        watch::Sender<bool>,
        Arc<http::Readiness>,
    ),
    DaemonError,
> {
    let root = env.root.clone();
    let Configured {
        mut config,
        config_path,
        tiered,
        pods,
        observe_reason,
    } = configure(&options, &root)?;
    let (metrics, registry) = Metrics::new();
    metrics
        .sampling_cpu_budget_ratio
        .set(config.sources.cpu_budget_percent / 100.0);
    // Before anything is served: a scrape never sees a machine without its tier costs.
    let costs = agent::node_costs(&config, &tiered);
    publish::publish_node_costs(&metrics, &costs);
    let status = Arc::new(RwLock::new(starting_status(
        &tiered,
        costs,
        observe_reason.clone(),
    )));
    let ready = Arc::new(http::Readiness::starting());
    let shared = http::Shared::new(Arc::new(registry), Arc::clone(&status), Arc::clone(&ready));
    let (http, http_stop) = serve_http(&mut config, shared).await?;
    let pods = pods.map(|watcher| PodWatch::spawn(watcher, metrics.clone()));
    let selection = selection(&config.targets);
    let observe_all = selection.include.is_empty() && pods.is_none();
    let mut hotplug = HotplugWatch::new();
    // The first call records the current node sets.
    let _ = hotplug.changed(&root);
    let agent = Agent {
        config,
        config_path,
        root,
        origin,
        machine: MachineView {
            tiered,
            hotplug,
            shared: Arc::default(),
            shares: Arc::default(),
        },
        observe_switch: Arc::new(RwLock::new(observe_reason.clone())),
        observe_reason,
        command_line: options,
        publishing: Publishing {
            metrics,
            status,
            published: Published::default(),
        },
        targets: Targets {
            selection,
            pods,
            set: TargetSet::new(),
            handles: BTreeMap::new(),
            skipped: 0,
            selector_problems: Vec::new(),
        },
        observe_all,
        source_pids: Vec::new(),
        source: None,
        source_failure: None,
        routes: None,
        ingest_counters: Arc::new(IngestCounters::default()),
        sampling_cpu: CpuAccount::default(),
    };
    Ok((agent, http, http_stop, ready))
}

/// What `/status` says before the first target or source.
fn starting_status(
    tiered: &TieredTopology,
    costs: BTreeMap<u32, NodeCost>,
    observe_reason: Option<String>,
) -> AgentStatus {
    AgentStatus {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        source: "none".to_owned(),
        observe_reason,
        not_ready: Some("starting".to_owned()),
        fast_nodes: tiered.classes.nodes.fast.clone(),
        slow_nodes: tiered.classes.nodes.slow.clone(),
        node_costs: costs.into_values().collect(),
        targets: Vec::new(),
    }
}

/// The configuration checked against this machine, and what follows from it before anything
/// is served.
struct Configured {
    config: Config,
    config_path: Option<PathBuf>,
    tiered: TieredTopology,
    pods: Option<PodWatcher>,
    observe_reason: Option<String>,
}

/// Loads and validates the configuration, classifies the tiers, checks for other page movers
/// and sets up the pod watch, logging what the operator should know.
fn configure(options: &RunOptions, root: &HostRoot) -> Result<Configured, DaemonError> {
    let (config, config_path) = load_config(options)?;
    check_command_line_targets(root, options)?;
    match &config_path {
        Some(path) => tracing::info!(path = %path.display(), "configuration loaded"),
        None => tracing::info!(
            "no configuration file at {}; using the defaults",
            memtide_config::DEFAULT_PATH
        ),
    }
    let tiered = TieredTopology::read(root, &config.topology)?;
    let shown = config_path
        .as_deref()
        .unwrap_or_else(|| Path::new("(defaults)"));
    config.validate(shown, Some(&tiered.topology.node_ids()))?;
    if let Some(warning) = &tiered.classes.warning {
        tracing::warn!("{warning}");
    }
    // Warns about (or, with on_conflict = "refuse", refuses) other page movers.
    coexist::check(root, config.agent.on_conflict)?;
    let pods = pod_watcher(&config)?;
    if pods.is_none()
        && let Some(limit) = config.targets.limits.iter().find(|l| l.pod_label.is_some())
    {
        tracing::warn!(
            limit = %limit.describe(),
            "a [[targets.limits]] table names a pod label, but no pods are listed: it matches nothing until [targets] pod_selector (or MEMTIDE_POD_SELECTOR) is set"
        );
    }
    let observe_reason = observe_reason(&config, &tiered);
    if let Some(reason) = &observe_reason {
        // The machine's shape or the operator's choice, nothing to fix: status says it too.
        tracing::info!("not migrating: {reason}");
    }
    Ok(Configured {
        config,
        config_path,
        tiered,
        pods,
        observe_reason,
    })
}

/// Binds `[agent] listen` (port 0: the kernel's choice, written back into `config`) and starts
/// the HTTP server thread; the sender stops it.
async fn serve_http(
    config: &mut Config,
    shared: http::Shared,
) -> Result<(http::HttpServer, watch::Sender<bool>), DaemonError> {
    let listener = http::bind(config.agent.listen)
        .await
        .map_err(DaemonError::Listen)?;
    // Port 0 asks the kernel for one: status and logs show the one it gave.
    config.agent.listen = listener.local_addr().map_err(DaemonError::Listen)?;
    tracing::info!(address = %config.agent.listen, "serving /metrics /healthz /readyz /status");
    let (http_stop, mut http_stop_rx) = watch::channel(false);
    let http = http::HttpServer::start(listener, shared, async move {
        let _ = http_stop_rx.changed().await;
    })
    .map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("starting the HTTP server thread: {error}"),
        )
    })?;
    Ok((http, http_stop))
}

/// The pod watch of `[targets] pod_selector`, when one is set (started once metrics exist).
fn pod_watcher(config: &Config) -> Result<Option<PodWatcher>, DaemonError> {
    if config.targets.pod_selector.is_empty() {
        return Ok(None);
    }
    let watcher = PodWatcher::new(
        &config.kubernetes,
        &config.kubernetes.node_name,
        &config.targets.pod_selector,
        |name| std::env::var(name).ok(),
    )?;
    tracing::info!(
        server = watcher.server(),
        node = %config.kubernetes.node_name,
        selector = %config.targets.pod_selector,
        "managing the pods of this node that match [targets] pod_selector (list, then watch)"
    );
    Ok(Some(watcher))
}

/// Starts the best source for the current targets and its delivery, with a route for every
/// target (and, observing every process, one for everyone else to `unclaimed`).
async fn start_source(
    agent: &mut Agent,
    env: &Environment,
    unclaimed: mpsc::Sender<TargetInput>,
) -> Option<JoinHandle<()>> {
    let pids: Vec<u32> = agent.targets.handles.keys().copied().collect();
    let sources = Arc::clone(&env.sources);
    let (root, config, observe_all) = (
        agent.root.clone(),
        agent.config.sources.clone(),
        agent.observe_all,
    );
    let started_for = pids.clone();
    let source = tokio::task::spawn_blocking(move || {
        sources.start(&SourceRequest {
            root: &root,
            config: &config,
            pids: &started_for,
            observe_all,
        })
    })
    .await
    .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()));
    agent.source_pids = pids;
    let Some(mut source) = source else {
        agent.source_failure = Some(no_source_reason(&agent.config.sources.order));
        return None;
    };
    let (routes, routes_rx) = mpsc::unbounded_channel();
    let delivery = source.deliver(Delivery {
        routes: routes_rx,
        counters: Arc::clone(&agent.ingest_counters),
        batch: agent.config.sources.batch,
        drain_every: agent.config.engine.engine.interval(),
        cpu: agent.sampling_cpu.clone(),
    });
    agent.source = Some(source);
    let task = match delivery {
        Ok(task) => task,
        Err(error) => {
            tracing::error!(%error, "the source started but cannot deliver its records");
            return None;
        }
    };
    agent.routes = Some(routes);
    let existing: Vec<(u32, TargetChannel)> = agent
        .targets
        .handles
        .iter()
        .map(|(pid, handle)| (*pid, TargetChannel(handle.input.clone())))
        .collect();
    for (pid, sender) in existing {
        agent.route(SampleRoute::Add { pid, sender });
    }
    if agent.observe_all {
        agent.route(SampleRoute::SetDefault {
            sender: Some(TargetChannel(unclaimed)),
        });
    }
    Some(task)
}

/// `/readyz`, and `/status` with it.
fn set_ready(ready: &http::Readiness, agent: &Agent, not_ready: Option<String>) {
    if ready.set(not_ready.clone())
        && let Ok(mut status) = agent.publishing.status.write()
    {
        status.not_ready = not_ready;
    }
}

/// What `/readyz` says when no source could start.
fn no_source_reason(order: &[memtide_config::SourceKind]) -> String {
    let tried = if order.is_empty() {
        "of those `memtide probe` ranks usable".to_owned()
    } else {
        let names: Vec<&str> = order.iter().map(|kind| kind.as_str()).collect();
        format!("in [sources] order ({})", names.join(", "))
    };
    format!(
        "no hotness source runs: none {tried} could start on this machine (the log says why \
         each failed; `memtide probe` lists what this machine offers)"
    )
}

/// Until a stop: targets, metrics, the sample period, the watchdog, reloads.
pub(super) async fn event_loop(mut running: Running) -> Running {
    let mut refresh = tokio::time::interval(REFRESH);
    let mut metrics_tick = tokio::time::interval(METRICS_TICK);
    let mut rate_check =
        tokio::time::interval(crate::sources::perf::rate::RateController::INTERVAL);
    rate_check.reset();
    let mut watchdog =
        tokio::time::interval(Notifier::watchdog_interval().unwrap_or(Duration::from_secs(3600)));
    loop {
        let agent = running.agent;
        running.agent = tokio::select! {
            command = running.control.recv() => match command {
                Some(Control::Reload) => on_blocking_pool(agent, Agent::reload).await,
                Some(Control::Stop { cause }) => {
                    tracing::info!("{cause}: stopping");
                    running.agent = agent;
                    break;
                }
                // Every handle is gone: nobody can ask for anything any more.
                None => {
                    running.agent = agent;
                    break;
                }
            },
            _ = refresh.tick() => on_blocking_pool(agent, Agent::refresh_targets).await,
            _ = metrics_tick.tick() => on_blocking_pool(agent, Agent::publish_metrics).await,
            _ = rate_check.tick(), if running.sample_rate.is_some() => {
                let mut agent = agent;
                if let (Some(rate), Some(source)) = (running.sample_rate.as_mut(), agent.source.as_deref_mut()) {
                    let samples = agent.ingest_counters.decoded.load(Ordering::Relaxed);
                    rate.tick(source, samples, &agent.publishing.metrics);
                }
                agent
            }
            _ = watchdog.tick() => {
                running.notifier.watchdog();
                agent
            }
            Some(input) = running.unclaimed.recv() => match input {
                TargetInput::Samples(batch) => {
                    on_blocking_pool(agent, move |agent| claim(agent, batch)).await
                }
                TargetInput::Regions(_) => agent,
            },
        };
        set_ready(&running.ready, &running.agent, running.agent.not_ready());
    }
    running
}

/// Observe-all mode: samples of processes without a task start one (up to the limit) and go to
/// it; what cannot be handed on is counted as dropped.
fn claim(agent: &mut Agent, batch: Vec<AccessSample>) {
    let mut by_pid: BTreeMap<u32, Vec<AccessSample>> = BTreeMap::new();
    for sample in batch {
        by_pid.entry(sample.pid).or_default().push(sample);
    }
    let mut dropped = 0;
    for (pid, samples) in by_pid {
        let n = samples.len() as u64;
        if pid == std::process::id() || !agent.add_target(pid) {
            dropped += n;
            continue;
        }
        let delivered = agent.targets.handles.get(&pid).is_some_and(|handle| {
            TargetChannel(handle.input.clone())
                .try_send(TargetInput::Samples(samples))
                .is_ok()
        });
        if !delivered {
            dropped += n;
        }
    }
    agent
        .ingest_counters
        .dropped_channel_full
        .fetch_add(dropped, Ordering::Relaxed);
}

/// Stops taking samples, lets epochs finish, then releases the kernel's resources.
pub(super) async fn shutdown(mut running: Running) {
    running.notifier.stopping();
    running.ready.set(Some("stopping".to_owned()));
    let agent = &mut running.agent;
    // No more route changes: delivery ends and the targets' channels close behind it.
    agent.routes = None;
    if let Some(delivery) = running.delivery.take() {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, delivery).await;
    }
    let tasks: Vec<_> = std::mem::take(&mut agent.targets.handles)
        .into_values()
        .map(|handle| handle.task)
        .collect();
    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
    for task in tasks {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!("a target's epoch did not finish in time; abandoning it");
        }
    }
    // Detaches the BPF programs and removes memtide's kdamond, if any (blocking sysfs writes).
    if let Some(source) = agent.source.take() {
        let _ = tokio::task::spawn_blocking(move || drop(source)).await;
    }
    let _ = running.http_stop.send(true);
    if !running.http.finish(Duration::from_secs(1)).await {
        tracing::warn!("the HTTP server thread had not ended at exit");
    }
    tracing::info!("memtide stopped");
}
