//! Measures what sampling costs while the agent runs and lets [`RateController`] adjust the
//! sample period of the running source (see `sources::perf::rate` for the control law).

use std::time::{Duration, Instant};

use super::http::CpuMeter;
use crate::{
    metrics::{Metrics, SourceLabel},
    sources::{
        HotnessSource,
        perf::rate::{Interval, RateController},
    },
};
use memtide_host::sys::process;

/// One reading of the counters the controller compares across an interval.
#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    agent_cpu: Duration,
    bpf_run: Duration,
    samples: u64,
}

impl Reading {
    /// The agent's CPU time less `excluded`'s (the HTTP server's: serving scrapes is not
    /// sampling), the BPF programs' run time and the sample count, now.
    fn take(source: &dyn HotnessSource, samples: u64, excluded: &CpuMeter) -> Option<Self> {
        let agent_cpu = match process::cpu_time() {
            Ok(cpu) => cpu.saturating_sub(excluded.get()),
            Err(error) => {
                tracing::warn!(%error, "reading the agent's CPU time; the sample period stays fixed");
                return None;
            }
        };
        let bpf_run = source
            .program_stats()
            .iter()
            .map(|program| program.run_time)
            .sum();
        Some(Self {
            at: Instant::now(),
            agent_cpu,
            bpf_run,
            samples,
        })
    }
}

/// The controller of one running perf-event source.
#[derive(Debug)]
pub(super) struct SampleRate {
    controller: RateController,
    last: Reading,
    excluded: CpuMeter,
}

impl SampleRate {
    /// A controller for `source`, or `None` when its period cannot change (DAMON) or its
    /// budget is 0 (meaning: keep the start-up period).
    pub(super) fn new(
        source: &dyn HotnessSource,
        excluded: CpuMeter,
        samples: u64,
    ) -> Option<Self> {
        let streams = source.sampling_streams();
        let budget = source.rate_budget()?;
        if streams == 0 || budget.cpu_fraction <= 0.0 {
            return None;
        }
        Some(Self {
            controller: RateController::new(
                budget.cpu_fraction,
                streams,
                budget.max_rate_per_stream,
            ),
            last: Reading::take(source, samples, &excluded)?,
            excluded,
        })
    }

    /// Measures the interval since the last call and applies the controller's decision.
    pub(super) fn tick(&mut self, source: &mut dyn HotnessSource, samples: u64, metrics: &Metrics) {
        let Some(now) = Reading::take(source, samples, &self.excluded) else {
            return;
        };
        let interval = Interval {
            wall: now.at.saturating_duration_since(self.last.at),
            agent_cpu: now.agent_cpu.saturating_sub(self.last.agent_cpu),
            bpf_run: now.bpf_run.saturating_sub(self.last.bpf_run),
            samples: now.samples.saturating_sub(self.last.samples),
        };
        self.last = now;
        metrics.sampling_cpu_ratio.set(interval.cpu_fraction());
        let label = SourceLabel {
            source: source.kind().as_str().to_owned(),
        };
        if let Some(change) = self.controller.observe(&interval) {
            match source.scale_periods(change.to_scale) {
                Ok(periods) => tracing::info!(
                    source = %source.kind(),
                    cpu_percent = format_args!("{:.2}", 100.0 * change.cpu_fraction),
                    samples = interval.samples,
                    scale = format_args!("{:.3}", change.to_scale),
                    ?periods,
                    "sampling cost outside the budget; sample period changed"
                ),
                Err(error) => {
                    tracing::warn!(%error, "changing the sample period; keeping the old one");
                    // The controller must not believe in a period the kernel refused.
                    self.controller.set_scale(change.from_scale);
                }
            }
        }
        metrics
            .sample_period_scale
            .get_or_create(&label)
            .set(self.controller.scale());
    }
}
