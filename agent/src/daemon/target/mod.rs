//! One task per managed process: inputs from the source in, the target's engine and planner,
//! and at every epoch a plan that is executed (or, in observe mode, only assumed); what the
//! epoch did is then published to metrics and status.
//!
//! - `epoch`: one epoch (placement, tier views, plan, execution) → an outcome;
//! - `execute`: the plan's moves as requests for nodes, and a bounded target's swaps;
//! - `report`: the outcome → metrics and the target's `/status` row;
//! - `views`: the epoch's accesses and hot set by tier; `observe`: observe mode's assumed moves;
//! - `density`: the samples per second (and per GiB) the target is getting.
//!
//! The epoch step does system calls (move_pages queries and moves) and can take milliseconds,
//! so it runs on the blocking pool with the task's state moved in and back out: the async
//! side never blocks, and the ingest path keeps draining while a target migrates.

mod density;
mod epoch;
mod execute;
mod homes;
mod machine;
mod observe;
mod plan_budget;
mod query;
mod report;
mod resident;
mod shares;
#[cfg(test)]
mod tests;
mod views;

use std::{
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use memtide_config::ExecConfig;
use memtide_core::tiering::{Tiering, TieringConfig};
use memtide_host::{
    exec::{Executor, TierNodes},
    sysfs::HostRoot,
    targets::{Target, placement::TierPlacement},
    topology::node_sets::TierNodeSets,
};
use tokio::sync::mpsc;

use self::{
    epoch::EpochOutcome,
    observe::Assumed,
    views::{EpochInput, MAX_SAMPLED_PAGES},
};
pub use self::{machine::SharedMachine, shares::FastShares};
use super::status::{AgentStatus, TargetStatus};
use crate::{
    cpu_time::CpuAccount,
    metrics::{Metrics, charge_thread_cpu},
    sources::TargetInput,
};

/// Why the agent only observes (`Some`), read by every target at each epoch.
pub type ObserveSwitch = Arc<RwLock<Option<String>>>;

/// A target's limit, shared by its task and the agent, which sets it again at each reload.
pub type LimitSwitch = Arc<RwLock<Option<AppliedLimit>>>;

/// Everything a target task needs to start.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    pub pid: u32,
    /// The metrics label.
    pub label: String,
    pub tiering: TieringConfig,
    pub exec: ExecConfig,
    /// `Some(reason)`: plan but do not move. Shared by every target and the agent, so a
    /// reload or a hotplug that turns observe mode on or off reaches running targets too.
    pub observe: ObserveSwitch,
    /// The classifier's fast and slow nodes when the target was found (a hotplug re-reads
    /// them for targets found later).
    pub tiers: TierNodeSets,
    /// Where promotions and demotions go.
    pub nodes: Option<TierNodes>,
    /// On a machine with more than one fast or slow node: which of them each move goes to.
    pub locality: Option<Arc<memtide_host::topology::locality::Locality>>,
    /// What the fast and the slow node of `nodes` cost to access (Eq. 1, BW-AWARE).
    pub costs: [memtide_core::policy::TierCost; 2],
    /// The nodes' sizes, free memory and watermarks, read once for all targets.
    pub machine: Arc<SharedMachine>,
    /// The `[[targets.limits]]` table that matched the target, if one did; a reload changes
    /// it under the running task.
    pub limit: LimitSwitch,
    /// The fast tier's division between all targets.
    pub shares: Arc<FastShares>,
    pub root: HostRoot,
    /// Where taking samples into the engine charges its CPU time (the sampling path's).
    pub sampling_cpu: CpuAccount,
    /// Observing every process: the target's exit is logged at DEBUG, not INFO (a busy
    /// machine starts and ends processes all the time, and none of them was asked for).
    pub quiet: bool,
}

/// A `[[targets.limits]]` table as it applies to one target.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedLimit {
    /// What the table matches (`cgroup tenants/a`), for logs and status.
    pub matched: String,
    pub amount: memtide_config::LimitAmount,
}

impl std::fmt::Display for AppliedLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.matched, self.amount)
    }
}

/// The state moved between the async loop and the blocking epoch step: the target and its
/// engine, what planning remembers from epoch to epoch, and what reporting has published.
struct State {
    spec: TargetSpec,
    target: Target,
    tiering: Tiering,
    executor: Executor,
    status: TargetStatus,
    planning: Planning,
    reported: Reported,
}

/// What the epochs' plans remember from one to the next.
#[derive(Default)]
struct Planning {
    /// The last placement query and when it ran.
    placement: Option<(Instant, TierPlacement)>,
    /// Where the placement queries' sweep over the target goes on from.
    sweep: query::Sweep,
    /// numa_maps' last reading: bytes by tier, mappings to leave alone.
    resident: Option<resident::Resident>,
    /// The ranges of the mappings left alone, as of the last placement query.
    left_alone: Vec<(u64, u64)>,
    /// When the last plan was made (agent clock), and whether it moved anything.
    last_plan_at: Option<Duration>,
    last_plan_moved: bool,
    /// Plans in a row that saw no samples and moved nothing.
    quiet_plans: u32,
    /// What deciding the epochs cost, against the share of a core planning may take.
    plan_budget: plan_budget::PlanBudget,
    /// What the last plan would have promoted with room for all of it: with what the target
    /// holds, its want of the fast tier.
    last_would_promote: u64,
    /// The share of the fast tier the last plan was made with.
    share: shares::Share,
    /// Where each recently sampled superpage is accessed from (with a `locality`).
    homes: homes::Homes,
    /// Observe mode: where the plans so far would have put memory.
    assumed: Assumed,
}

/// What the reports have already counted into the target's metrics, and the density they
/// derive from the samples.
#[derive(Default)]
struct Reported {
    /// `untracked_samples` already counted in the metric.
    untracked_published: u64,
    /// The target's samples per second, for its status and metrics.
    density: density::SampleDensity,
    /// `status.samples` already counted in `memtide_target_samples_total`.
    samples_published: u64,
}

impl State {
    fn observing(&self) -> bool {
        match self.spec.observe.read() {
            Ok(reason) => reason.is_some(),
            // A writer panicked mid-update: err on the side of moving nothing.
            Err(_) => true,
        }
    }

    /// The target's limit as it stands now.
    fn limit(&self) -> Option<AppliedLimit> {
        match self.spec.limit.read() {
            Ok(limit) => limit.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn remember_error(&mut self, error: String) {
        self.status.last_errors.push(error);
        let excess = self.status.last_errors.len().saturating_sub(3);
        self.status.last_errors.drain(..excess);
    }

    /// Takes one delivery from the source into the engine and the epoch's input.
    fn take(&mut self, input: TargetInput, epoch: &mut EpochInput, now: Duration) {
        match input {
            TargetInput::Samples(batch) => {
                self.status.samples += batch.len() as u64;
                if let Some(locality) = &self.spec.locality {
                    for record in batch.iter() {
                        if let Some(node) = locality.node_of_cpu(record.cpu) {
                            self.planning.homes.record(record.addr, node);
                        }
                    }
                }
                for &sample in self.tiering.observe_records(&batch, now) {
                    epoch.keep(sample);
                }
            }
            TargetInput::Regions(regions) => {
                // The latest report of each region stands for the epoch.
                for region in &regions {
                    if epoch.regions.len() < MAX_SAMPLED_PAGES
                        || epoch.regions.contains_key(&region.start)
                    {
                        epoch.regions.insert(region.start, *region);
                    }
                }
                self.status.samples += regions.len() as u64;
                self.tiering.observe_damon(&regions, now);
            }
        }
    }
}

/// Handle the main loop keeps for a running target task. The task ends once every sender of
/// its input channel is gone (this one and the source's routes).
#[derive(Debug)]
pub struct TargetHandle {
    /// Where the source delivers the target's samples or regions.
    pub input: mpsc::Sender<TargetInput>,
    pub task: tokio::task::JoinHandle<()>,
    /// The target's `[[targets.limits]]` table.
    pub limit: LimitSwitch,
}

/// Opens the target and starts its task. `origin` is the agent's clock origin.
pub fn spawn(
    spec: TargetSpec,
    queue: usize,
    origin: Instant,
    metrics: Metrics,
    status: Arc<RwLock<AgentStatus>>,
) -> Result<TargetHandle, String> {
    let target = Target::open(&spec.root, spec.pid).map_err(|e| e.to_string())?;
    let tiering = Tiering::new(spec.tiering.clone()).map_err(|e| e.to_string())?;
    let executor = Executor::new(spec.exec.clone());
    metrics.register_target(&spec.label);
    let (input, input_rx) = mpsc::channel(queue.max(1));
    let limit = Arc::clone(&spec.limit);
    let state = State {
        status: TargetStatus {
            target: spec.label.clone(),
            pid: spec.pid,
            ..TargetStatus::default()
        },
        spec,
        target,
        tiering,
        executor,
        planning: Planning::default(),
        reported: Reported::default(),
    };
    let task = tokio::spawn(run(state, input_rx, origin, metrics, status));
    Ok(TargetHandle { input, task, limit })
}

fn publish(status: &RwLock<AgentStatus>, target: &TargetStatus) {
    let mut agent = match status.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    match agent.targets.iter_mut().find(|t| t.pid == target.pid) {
        Some(row) => *row = target.clone(),
        None => {
            agent.targets.push(target.clone());
            agent.targets.sort_by(|a, b| a.target.cmp(&b.target));
        }
    }
}

fn unpublish(status: &RwLock<AgentStatus>, pid: u32) {
    let mut agent = match status.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    agent.targets.retain(|t| t.pid != pid);
}

/// The epoch ending at `now`, on what the target saw (`seen`), and its report, on the blocking
/// pool with the state moved in; the state, the outcome and `seen` (its buffer is reused)
/// come back, or `None` if the step panicked.
async fn step_on_blocking_pool(
    mut state: State,
    now: Duration,
    seen: EpochInput,
    metrics: &Metrics,
) -> Option<(State, EpochOutcome, EpochInput)> {
    let metrics = metrics.clone();
    tokio::task::spawn_blocking(move || {
        // Its own counter: the sampling budget charges only what samples cost.
        charge_thread_cpu(&metrics.epoch_cpu_seconds.clone(), || {
            let epoch = state.epoch(now, &seen);
            state.report(now, &epoch, &metrics);
            (state, epoch.outcome, seen)
        })
    })
    .await
    .ok()
}

/// The target's task: inputs until each epoch is due, then the epoch on the blocking pool.
async fn run(
    mut state: State,
    mut inputs: mpsc::Receiver<TargetInput>,
    origin: Instant,
    metrics: Metrics,
    status: Arc<RwLock<AgentStatus>>,
) {
    let pid = state.spec.pid;
    // The state is lost if an epoch step panics; the target must still leave the shares.
    let shares = Arc::clone(&state.spec.shares);
    let sampling_cpu = state.spec.sampling_cpu.clone();
    let mut epoch_input = EpochInput::default();
    publish(&status, &state.status);
    // The first plan comes one epoch after the target was found, not after agent start.
    let found = origin.elapsed();
    state.reported.density = density::SampleDensity::starting_at(found);
    // An epoch step that fails before planning must still wait an epoch before the next try.
    let mut last_step: Option<Duration> = None;
    loop {
        let due = state
            .planning
            .plan_budget
            .plan_due(state.tiering.next_plan_due(found));
        let due = last_step.map_or(due, |last| due.max(last + state.tiering.epoch()));
        // A quiet target sleeps until its plan needs renewing or something is sampled: a
        // thousand idle targets must not each wake every epoch.
        let quiet_until = state.idle_until().filter(|_| epoch_input.is_empty());
        let next_plan = origin + quiet_until.map_or(due, |until| due.max(until));
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else {
                    tracing::debug!(pid, "input channel closed");
                    break;
                };
                let now = origin.elapsed();
                sampling_cpu.charge(|| {
                    state.take(input, &mut epoch_input, now);
                });
                // The first samples after a quiet spell longer than an epoch open an epoch:
                // it is planned an epoch later, on what that epoch saw, not at once on them
                // alone.
                if quiet_until.is_some() && now >= due && !epoch_input.is_empty() {
                    last_step = Some(now);
                }
            }
            () = tokio::time::sleep_until(next_plan.into()) => {
                let now = origin.elapsed();
                last_step = Some(now);
                state.tiering.tick(now);
                let seen = std::mem::take(&mut epoch_input);
                let Some((returned, outcome, mut reused)) =
                    step_on_blocking_pool(state, now, seen, &metrics).await
                else {
                    tracing::error!(pid, "epoch step panicked; dropping the target");
                    unpublish(&status, pid);
                    shares.leave(pid);
                    return;
                };
                state = returned;
                reused.clear();
                epoch_input = reused;
                publish(&status, &state.status);
                if matches!(outcome, EpochOutcome::Exited { .. }) {
                    if state.spec.quiet {
                        tracing::debug!(pid, target = %state.spec.label, "target exited");
                    } else {
                        tracing::info!(pid, target = %state.spec.label, "target exited");
                    }
                    break;
                }
            }
        }
    }
    unpublish(&status, pid);
    shares.leave(pid);
    // Gauges of a gone process would otherwise report its last values forever; counters stay
    // (their totals remain true).
    metrics.forget_target(&state.spec.label);
}
