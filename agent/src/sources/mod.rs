//! Hotness sources: what tells memtide which pages a process touches, one folder per kind
//! behind one trait, [`HotnessSource`], found through one table, [`registry`]:
//! - [`pebs`]: Intel PEBS, sampled loads and stores with their data addresses;
//! - [`ibs`]: AMD IBS op sampling;
//! - [`swfault`]: software page faults, everywhere and coarse;
//! - [`damon`]: memtide's own kdamond, its regions forwarded by a BPF tracepoint program.
//!
//! The first three share [`perf`]: one BPF `perf_event` program, a ring of sampled accesses,
//! the sampling budget and the run-time rate control. The arrows point one way: a sampler's
//! folder uses `perf`, never another sampler's, and `perf` names none of them; only the
//! registry names every sampler.
//!
//! What the machine offers, and which source `run` would pick, is read by `memtide-host`'s
//! probe; here is what runs a source: it starts, follows the target list it is given, delivers
//! its records to the targets' channels ([`deliver`]) and reports drops and costs. The daemon
//! gets its sources from a [`SourceFactory`]: [`KernelSources`] on a real machine, a fake in the
//! daemon's tests.

pub mod damon;
mod deliver;
#[cfg(test)]
pub(crate) mod fake;
pub mod ibs;
pub mod pebs;
pub mod perf;
pub mod registry;
pub mod swfault;

use std::{collections::BTreeMap, os::fd::OwnedFd};

use memtide_config::{SourceKind, SourcesConfig};
use memtide_host::{probe::pmu::PmuScan, sysfs::HostRoot};
use tokio::task::JoinHandle;

pub use self::deliver::{Delivery, SampleRoute, SampleRouter, TargetChannel, TargetInput};
use self::{
    damon::DamonSourceError,
    ibs::IbsError,
    pebs::PebsError,
    perf::{
        PerfSourceOptions,
        budget::{BudgetError, KernelLimits, SamplingBudget},
        sampler::SamplerError,
    },
    registry::{StartContext, candidates, start_first},
};
use crate::bpf::ProgramStats;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Damon(#[from] DamonSourceError),
    #[error(transparent)]
    Spec(#[from] PerfSpecError),
    #[error("starting the source's delivery: {0}")]
    Io(#[from] std::io::Error),
    #[error("the source's records are already being delivered")]
    Delivering,
}

/// Why no perf-event spec could be built.
#[derive(Debug, thiserror::Error)]
pub enum PerfSpecError {
    #[error("{0} is not a perf-event source")]
    NotPerf(SourceKind),
    #[error("no CPUs to sample on")]
    NoCpus,
    #[error(transparent)]
    Pebs(#[from] PebsError),
    #[error(transparent)]
    Ibs(#[from] IbsError),
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// The CPU budget a source's sample period is held to at run time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateBudget {
    /// Share of one core the whole sampling path may use.
    pub cpu_fraction: f64,
    /// The kernel's ceiling on samples per second per sampling stream.
    pub max_rate_per_stream: f64,
    /// Kernel time per sample that the BPF programs' run time leaves out (a PMU's interrupt;
    /// 0 for software events, whose BPF program runs inline in the event), charged at this
    /// assumed figure.
    pub interrupt_cost_ns: f64,
}

/// A running hotness source.
pub trait HotnessSource: Send {
    fn kind(&self) -> SourceKind;
    /// Replaces the set of processes watched.
    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError>;
    /// Starts the task that reads the source's records and hands them to the targets'
    /// channels, as `delivery`'s route changes say; it ends when they stop coming. Once.
    fn deliver(&mut self, delivery: Delivery) -> Result<JoinHandle<()>, SourceError>;
    /// Records dropped before they reached user space, by reason.
    fn drop_counts(&self) -> BTreeMap<&'static str, u64>;
    /// Kernel-measured cost of the source's BPF programs.
    fn program_stats(&self) -> Vec<ProgramStats>;
    /// Whether the source has stopped although it has targets (DAMON: its kdamond turned off
    /// from outside); the daemon then starts it again.
    fn stopped(&self) -> Result<bool, SourceError> {
        Ok(false)
    }
    /// Sampling streams (events x CPUs) whose period [`Self::scale_periods`] can change; 0
    /// for sources without a sample period (DAMON).
    fn sampling_streams(&self) -> u32 {
        0
    }
    /// Sets every sampling event's period to its starting period times `scale`; returns the
    /// periods now in force.
    fn scale_periods(&mut self, scale: f64) -> Result<Vec<u64>, SourceError> {
        let _ = scale;
        Ok(Vec::new())
    }
    /// Re-splits the sample budget between the source's events by what the interval since the
    /// last call showed (PEBS: the store:load period ratio, [`pebs::memory_share`]). Returns the
    /// store:load period ratio when it changed.
    fn rebalance(&mut self) -> Result<Option<f64>, SourceError> {
        Ok(None)
    }
    /// The store:load period ratio in force, for sources that split loads from stores and
    /// measure it.
    fn store_period_ratio(&self) -> Option<f64> {
        None
    }
    /// The budget the sample period is held to at run time; `None`: it never changes.
    fn rate_budget(&self) -> Option<RateBudget> {
        None
    }
}

/// What a source is started for.
#[derive(Debug)]
pub struct SourceRequest<'a> {
    pub root: &'a HostRoot,
    pub config: &'a SourcesConfig,
    /// Processes to watch from the start (DAMON needs at least one to run).
    pub pids: &'a [u32],
    /// No targets configured: every process is observed (the BPF filter is off, and DAMON,
    /// which monitors named processes, is not tried).
    pub observe_all: bool,
}

/// Where the daemon's hotness source comes from.
pub trait SourceFactory: Send + Sync {
    /// The best source that starts for `request`, or `None` (each failure logged).
    fn start(&self, request: &SourceRequest<'_>) -> Option<Box<dyn HotnessSource>>;

    /// Turns on the kernel's accounting of BPF programs' run time for as long as the returned
    /// descriptor is held (`memtide_bpf_run_seconds_total`); `None` when it cannot.
    fn cost_accounting(&self) -> Option<OwnedFd> {
        None
    }
}

/// The sources of the machine the agent runs on: the configured order, else what `memtide
/// probe` ranks usable, tried in turn.
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelSources;

impl SourceFactory for KernelSources {
    fn start(&self, request: &SourceRequest<'_>) -> Option<Box<dyn HotnessSource>> {
        let pmus = PmuScan::read(request.root).unwrap_or_default();
        let order = candidates(request, &pmus);
        let cpus = match aya::util::online_cpus() {
            Ok(cpus) => cpus,
            Err((path, error)) => {
                tracing::error!(%error, path, "reading the online CPUs; no source can sample");
                return None;
            }
        };
        let limits = match KernelLimits::read(request.root) {
            Ok(limits) => limits,
            Err(error) => {
                tracing::error!(%error, "reading the kernel's perf limits; no source can sample");
                return None;
            }
        };
        let mut perf = PerfSourceOptions::new(cpus, limits);
        perf.ring_bytes = request.config.ring_bytes;
        perf.filter_by_target = !request.observe_all;
        perf.budget = SamplingBudget {
            cpu_fraction: request.config.cpu_budget_percent / 100.0,
            ..SamplingBudget::default()
        };
        let context = StartContext {
            root: request.root,
            pmus: &pmus,
            perf: &perf,
            damon: &request.config.damon,
            pids: request.pids,
        };
        let (source, _failed) = start_first(&order, &context);
        if source.is_none() {
            tracing::error!(
                tried = ?order,
                "no hotness source could start; serving metrics only, not ready (/readyz answers 503; see `memtide probe`)"
            );
        }
        source
    }

    fn cost_accounting(&self) -> Option<OwnedFd> {
        // BPF_ENABLE_STATS needs CAP_SYS_ADMIN; without it the metric stays 0.
        crate::bpf::enable_run_time_stats()
            .map_err(|error| {
                tracing::warn!(%error, "BPF run-time statistics unavailable; memtide_bpf_run_seconds_total stays 0");
            })
            .ok()
    }
}
