//! A perf-event sampler running as a [`HotnessSource`]: its events opened, its target
//! allowlist kept, its ring handed to delivery. A sampler that re-splits its budget while it
//! runs (PEBS) wraps one of these.

use std::collections::BTreeMap;

use memtide_config::SourceKind;

use super::{PerfSourceOptions, PerfSourceSpec, ring, sampler::Sampler};
use crate::{
    bpf::ProgramStats,
    sources::{Delivery, HotnessSource, RateBudget, SourceError},
};

/// A running perf-event source (PEBS, IBS, software page faults) and its current allowlist.
#[derive(Debug)]
pub struct PerfSource {
    kind: SourceKind,
    sampler: Sampler,
    targets: Vec<u32>,
    rate: RateBudget,
}

impl PerfSource {
    /// Opens the events of `spec` (built for `kind` from `options`) and watches `pids`.
    pub fn start(
        kind: SourceKind,
        spec: &PerfSourceSpec,
        options: &PerfSourceOptions,
        pids: &[u32],
    ) -> Result<Self, SourceError> {
        for note in &spec.notes {
            tracing::info!(source = %kind, "{note}");
        }
        for (event, choice) in &spec.periods {
            tracing::info!(source = %kind, event, period = choice.period, "{}", choice.explanation);
        }
        let mut source = Self {
            kind,
            sampler: Sampler::start(&spec.spec)?,
            targets: Vec::new(),
            rate: RateBudget {
                cpu_fraction: options.budget.cpu_fraction,
                max_rate_per_stream: options
                    .limits
                    .effective_max_rate(options.budget.kernel_sample_cost_ns),
                interrupt_cost_ns: if spec.interrupts {
                    options.budget.interrupt_cost_ns
                } else {
                    0.0
                },
            },
        };
        source.set_targets(pids)?;
        Ok(source)
    }

    /// The sampler, for what a particular source reads or sets beyond the trait.
    pub fn sampler_mut(&mut self) -> &mut Sampler {
        &mut self.sampler
    }
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

    fn deliver(&mut self, delivery: Delivery) -> Result<tokio::task::JoinHandle<()>, SourceError> {
        let ring = self.sampler.take_ring().ok_or(SourceError::Delivering)?;
        Ok(ring::spawn(ring, delivery)?)
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

    fn rate_budget(&self) -> Option<RateBudget> {
        Some(self.rate)
    }
}
