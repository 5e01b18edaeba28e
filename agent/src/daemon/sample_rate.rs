//! Measures what sampling costs while the agent runs and lets [`RateController`] adjust the
//! sample period of the running source (see `sources::perf::rate` for the control law).
//!
//! What counts is what the samples cost, nothing else: the CPU time of the agent's sampling
//! path (the delivery task draining, decoding and routing, the targets' tasks taking samples
//! into their engines), handed over by the threads that measured it as a [`CpuAccount`], not
//! read back from `memtide_sampling_cpu_seconds_total`, which mirrors it; the BPF programs' run
//! time, and a PMU's interrupts at their assumed cost. The rest
//! of the agent's CPU does not follow the sample period, so slowing sampling down could not
//! pay for it: the HTTP thread, the runtime's timers and wake-ups, and the targets' epoch
//! steps (placement queries, plans, migrations), which have budgets of their own (the
//! planning budget, `target::plan_budget`, and the migration budget's bytes). Charged to
//! sampling, a run of 10 ms epochs cost 1 % of a core and held the sample period at 100 to
//! 7,000 times its start (docs/benchmarks.md).

use std::time::{Duration, Instant};

use crate::{
    cpu_time::CpuAccount,
    metrics::{Metrics, SourceLabel},
    sources::{
        HotnessSource,
        perf::rate::{Interval, RateController},
    },
};

/// One reading of the counters the controller compares across an interval.
#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    agent_cpu: Duration,
    bpf_run: Duration,
    samples: u64,
}

impl Reading {
    /// The sampling path's CPU time so far (`sampling`), the BPF programs' run time and the
    /// sample count, now.
    fn take(source: &dyn HotnessSource, samples: u64, sampling: &CpuAccount) -> Self {
        let agent_cpu = sampling.total();
        let bpf_run = source
            .program_stats()
            .iter()
            .map(|program| program.run_time)
            .sum();
        Self {
            at: Instant::now(),
            agent_cpu,
            bpf_run,
            samples,
        }
    }
}

/// The controller of one running perf-event source.
#[derive(Debug)]
pub(super) struct SampleRate {
    controller: RateController,
    last: Reading,
    /// The sampling path's CPU time, as the threads that spent it measured it.
    sampling: CpuAccount,
    /// What the kernel spends per sample outside the BPF programs, assumed (ns).
    interrupt_cost_ns: f64,
}

/// Kernel time of `samples` interrupts at `cost_ns` each.
fn interrupt_time(samples: u64, cost_ns: f64) -> Duration {
    #[expect(clippy::cast_precision_loss, reason = "a sample count times a cost")]
    let seconds = samples as f64 * cost_ns.max(0.0) / 1e9;
    Duration::try_from_secs_f64(seconds).unwrap_or_default()
}

impl SampleRate {
    /// A controller for `source` whose sampling path charges its CPU time to `sampling`, or
    /// `None` when its period cannot change (DAMON) or its budget is 0 (meaning: keep the
    /// start-up period).
    pub(super) fn new(
        source: &dyn HotnessSource,
        sampling: CpuAccount,
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
            interrupt_cost_ns: budget.interrupt_cost_ns,
            last: Reading::take(source, samples, &sampling),
            sampling,
        })
    }

    /// Measures the interval since the last call and applies the controller's decision.
    pub(super) fn tick(&mut self, source: &mut dyn HotnessSource, samples: u64, metrics: &Metrics) {
        let now = Reading::take(source, samples, &self.sampling);
        let samples_in = now.samples.saturating_sub(self.last.samples);
        let interval = Interval {
            wall: now.at.saturating_duration_since(self.last.at),
            agent_cpu: now.agent_cpu.saturating_sub(self.last.agent_cpu),
            bpf_run: now.bpf_run.saturating_sub(self.last.bpf_run),
            interrupts: interrupt_time(samples_in, self.interrupt_cost_ns),
            samples: samples_in,
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
        match source.rebalance() {
            Ok(Some(ratio)) => tracing::info!(
                source = %source.kind(),
                ratio = format_args!("{ratio:.2}"),
                "the share of stores reaching memory moved; store sample period now this many \
                 load periods"
            ),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "re-splitting loads and stores; keeping the split");
            }
        }
        if let Some(ratio) = source.store_period_ratio() {
            metrics.store_period_ratio.get_or_create(&label).set(ratio);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use memtide_config::SourceKind;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::{
        bpf::ProgramStats,
        sources::{Delivery, RateBudget, SourceError},
    };

    /// A perf-like source with one sampling stream; remembers every period change.
    #[derive(Debug, Default)]
    struct Periodic {
        scales: Vec<f64>,
        /// Store:load period ratios the next `rebalance` calls measure, in order.
        measured_ratios: Vec<f64>,
        ratio: Option<f64>,
        /// What its budget charges per sample for the interrupt (ns).
        interrupt_cost_ns: f64,
    }

    impl HotnessSource for Periodic {
        fn kind(&self) -> SourceKind {
            SourceKind::Pebs
        }
        fn set_targets(&mut self, _: &[u32]) -> Result<(), SourceError> {
            Ok(())
        }
        fn deliver(&mut self, _: Delivery) -> Result<JoinHandle<()>, SourceError> {
            Err(SourceError::Delivering)
        }
        fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
            BTreeMap::new()
        }
        fn program_stats(&self) -> Vec<ProgramStats> {
            Vec::new()
        }
        fn sampling_streams(&self) -> u32 {
            1
        }
        fn scale_periods(&mut self, scale: f64) -> Result<Vec<u64>, SourceError> {
            self.scales.push(scale);
            Ok(Vec::new())
        }
        fn rate_budget(&self) -> Option<RateBudget> {
            Some(RateBudget {
                cpu_fraction: 0.05,
                // No kernel throttle: the tests' sample counts come in tens of milliseconds.
                max_rate_per_stream: f64::INFINITY,
                interrupt_cost_ns: self.interrupt_cost_ns,
            })
        }
        fn rebalance(&mut self) -> Result<Option<f64>, SourceError> {
            if self.measured_ratios.is_empty() {
                return Ok(None);
            }
            let ratio = self.measured_ratios.remove(0);
            self.ratio = Some(ratio);
            Ok(Some(ratio))
        }
        fn store_period_ratio(&self) -> Option<f64> {
            self.ratio
        }
    }

    #[test]
    fn every_interval_rebalances_loads_against_stores_and_exports_the_ratio() {
        let metrics = Metrics::default();
        let mut source = Periodic {
            measured_ratios: vec![1.0, 7.5],
            ..Periodic::default()
        };
        let mut rate = SampleRate::new(&source, CpuAccount::default(), 0).expect("a budget");
        let exported = |metrics: &Metrics| {
            metrics
                .store_period_ratio
                .get_or_create(&SourceLabel {
                    source: "pebs".into(),
                })
                .get()
        };
        rate.tick(&mut source, 0, &metrics);
        assert_eq!(exported(&metrics), 1.0);
        rate.tick(&mut source, 0, &metrics);
        assert_eq!(exported(&metrics), 7.5);
        rate.tick(&mut source, 0, &metrics);
        assert_eq!(
            exported(&metrics),
            7.5,
            "no change: the ratio in force stays"
        );
        assert!(source.measured_ratios.is_empty());
    }

    /// The period changes after an interval in which `samples` samples came, the sampling
    /// path spent `sampled` and the rest of the agent `elsewhere` (an epoch step's migration,
    /// which its own metric counts), with interrupts costing `interrupt_cost_ns` each.
    fn changes_after(
        samples: u64,
        sampled: Duration,
        elsewhere: Duration,
        interrupt_cost_ns: f64,
    ) -> Vec<f64> {
        let metrics = Metrics::default();
        let sampling = CpuAccount::default();
        let mut source = Periodic {
            interrupt_cost_ns,
            ..Periodic::default()
        };
        let mut rate = SampleRate::new(&source, sampling.clone(), 0).expect("a budget");
        sampling.add(sampled);
        metrics.epoch_cpu_seconds.inc_by(elsewhere.as_secs_f64());
        // Some wall time for the interval to have a length.
        std::thread::sleep(Duration::from_millis(20));
        rate.tick(&mut source, samples, &metrics);
        source.scales
    }

    #[test]
    fn what_the_sampling_path_spends_counts_and_nothing_else_does() {
        // Two seconds within one interval: 100 cores' worth over 20 ms of wall time (over a
        // 5 % budget unless the interval lasted 40 s).
        let spent = Duration::from_secs(2);
        let charged = changes_after(0, spent, Duration::ZERO, 0.0);
        assert!(
            charged.first().is_some_and(|&scale| scale > 1.0),
            "{charged:?}"
        );
        // Spent in an epoch step (a long migration), the same time leaves sampling alone.
        assert_eq!(
            changes_after(0, Duration::ZERO, spent, 0.0),
            Vec::<f64>::new()
        );
    }

    #[test]
    fn a_pmus_interrupts_count_against_the_budget() {
        // 0.85 s of interrupts: over a 5 % budget unless the interval lasted 15 s or more.
        let charged = changes_after(1_000_000, Duration::ZERO, Duration::ZERO, 850.0);
        assert!(
            charged.first().is_some_and(|&scale| scale > 1.0),
            "{charged:?}"
        );
        // Uncharged (a software event), the same samples cost nothing and sampling speeds up.
        let free = changes_after(1_000_000, Duration::ZERO, Duration::ZERO, 0.0);
        assert!(free.first().is_some_and(|&scale| scale < 1.0), "{free:?}");
    }
}
