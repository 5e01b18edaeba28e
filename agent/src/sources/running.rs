//! One interface over every running hotness source, and start-up with fallback.
//!
//! The rest of the agent does not care whether samples come from PEBS, IBS, page faults or
//! DAMON: it asks [`start_first`] for the best source that actually starts, tells it which
//! processes to watch, takes its [`Stream`] and reads costs and drops for the metrics.

use memtide_config::DamonMonitorConfig;
use memtide_host::probe::SourceKind;
use std::collections::BTreeMap;

use aya::maps::{MapData, RingBuf};

use super::{
    PerfSourceOptions,
    damon_source::{DamonSource, DamonSourceError},
    perf_spec_for,
    sampler::{Sampler, SamplerError},
};
use crate::bpf::ProgramStats;
use memtide_host::probe::pmu::PmuScan;
use memtide_host::sysfs::HostRoot;

/// What a source delivers: per-access samples, or DAMON regions.
pub enum Stream {
    /// [`memtide_common::AccessSample`] records; drain with `ingest::run_sample_ring`.
    Samples(RingBuf<MapData>),
    /// [`memtide_common::DamonRegion`] records; drain with `damon_source::run_damon_ring`.
    DamonRegions(RingBuf<MapData>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Samples(_) => "Stream::Samples",
            Self::DamonRegions(_) => "Stream::DamonRegions",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Damon(#[from] DamonSourceError),
    #[error(transparent)]
    Spec(#[from] super::PerfSpecError),
}

/// A running hotness source.
pub trait HotnessSource: Send {
    fn kind(&self) -> SourceKind;
    /// Replaces the set of processes watched.
    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError>;
    /// The record stream; taken once, by the ingest task.
    fn take_stream(&mut self) -> Option<Stream>;
    /// Records dropped before they reached user space, by reason.
    fn drop_counts(&self) -> BTreeMap<&'static str, u64>;
    /// Kernel-measured cost of the source's BPF programs.
    fn program_stats(&self) -> Vec<ProgramStats>;
    /// Whether the source has stopped although it has targets (DAMON: its kdamond turned off
    /// from outside); the daemon then starts it again.
    fn stopped(&self) -> Result<bool, SourceError> {
        Ok(false)
    }
    /// The DAMON source behind this one, for mapping region target indexes to pids.
    fn as_damon(&self) -> Option<&DamonSource> {
        None
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
}

/// A perf-event source (PEBS, IBS, software page faults) and its current allowlist.
#[derive(Debug)]
pub struct PerfSource {
    kind: SourceKind,
    sampler: Sampler,
    targets: Vec<u32>,
}

impl HotnessSource for PerfSource {
    fn kind(&self) -> SourceKind {
        self.kind
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        for &gone in self.targets.iter().filter(|pid| !pids.contains(pid)) {
            self.sampler.remove_target(gone)?;
        }
        for &new in pids.iter().filter(|pid| !self.targets.contains(pid)) {
            self.sampler.add_target(new)?;
        }
        self.targets = pids.to_vec();
        Ok(())
    }

    fn take_stream(&mut self) -> Option<Stream> {
        self.sampler.take_ring().map(Stream::Samples)
    }

    fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        self.sampler.drop_counts().unwrap_or_default()
    }

    fn program_stats(&self) -> Vec<ProgramStats> {
        self.sampler.program_stats()
    }

    fn sampling_streams(&self) -> u32 {
        u32::try_from(self.sampler.sampling_streams()).unwrap_or(u32::MAX)
    }

    fn scale_periods(&mut self, scale: f64) -> Result<Vec<u64>, SourceError> {
        Ok(self.sampler.scale_periods(scale)?)
    }
}

impl HotnessSource for DamonSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Damon
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        Ok(Self::set_targets(self, pids)?)
    }

    fn take_stream(&mut self) -> Option<Stream> {
        self.take_ring().map(Stream::DamonRegions)
    }

    fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }

    fn program_stats(&self) -> Vec<ProgramStats> {
        Self::program_stats(self)
    }

    fn stopped(&self) -> Result<bool, SourceError> {
        Ok(Self::stopped(self)?)
    }

    fn as_damon(&self) -> Option<&DamonSource> {
        Some(self)
    }
}

/// What starting a source needs.
#[derive(Debug)]
pub struct StartContext<'a> {
    pub root: &'a HostRoot,
    pub pmus: &'a PmuScan,
    pub perf: &'a PerfSourceOptions,
    pub damon: &'a DamonMonitorConfig,
    /// Processes to watch from the start (DAMON needs at least one to run).
    pub pids: &'a [u32],
}

/// Starts one source.
pub fn start(
    kind: SourceKind,
    context: &StartContext<'_>,
) -> Result<Box<dyn HotnessSource>, SourceError> {
    if kind == SourceKind::Damon {
        return Ok(Box::new(DamonSource::start(
            context.root,
            context.damon,
            context.pids,
        )?));
    }
    let spec = perf_spec_for(kind, context.pmus, context.root, context.perf)?;
    for note in &spec.notes {
        tracing::info!(source = %kind, "{note}");
    }
    for (event, choice) in &spec.periods {
        tracing::info!(source = %kind, event, period = choice.period, "{}", choice.explanation);
    }
    let sampler = Sampler::start(&spec.spec)?;
    let mut source = PerfSource {
        kind,
        sampler,
        targets: Vec::new(),
    };
    source.set_targets(context.pids)?;
    Ok(Box::new(source))
}

/// One source that could not be started, and why.
#[derive(Debug)]
pub struct FailedStart {
    pub kind: SourceKind,
    pub error: SourceError,
}

/// Tries `candidates` in order and returns the first that starts, with the failures before
/// it (each logged as a warning naming the source and the reason).
pub fn start_first(
    candidates: &[SourceKind],
    context: &StartContext<'_>,
) -> (Option<Box<dyn HotnessSource>>, Vec<FailedStart>) {
    let mut failed = Vec::new();
    for &kind in candidates {
        match start(kind, context) {
            Ok(source) => {
                if let Some(previous) = failed.last() {
                    let FailedStart { kind: tried, .. } = previous;
                    tracing::warn!(source = %kind, "falling back to {kind} after {tried} failed");
                }
                return (Some(source), failed);
            }
            Err(error) => {
                tracing::warn!(source = %kind, %error, "cannot start {kind}");
                failed.push(FailedStart { kind, error });
            }
        }
    }
    (None, failed)
}
