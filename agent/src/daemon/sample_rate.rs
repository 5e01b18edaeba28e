//! Measures what sampling costs while the agent runs and lets [`RateController`] adjust the
//! sample period of the running source (see `sources::perf::rate` for the control law).
//!
//! The agent's CPU time counts against the budget less what it spends on work that is not
//! sampling ([`NotSampling`]): its HTTP server thread, and migration and placement queries
//! (move_pages copies pages and walks page tables: a long migration would otherwise slow
//! sampling down exactly while the agent acts on it).

use std::time::{Duration, Instant};

use super::http::CpuMeter;
use crate::{
    metrics::{CounterF64, Metrics, SourceLabel},
    sources::{
        HotnessSource,
        perf::rate::{Interval, RateController},
    },
};
use memtide_host::sys::process;

/// CPU time the agent spends on work that is not sampling.
#[derive(Clone, Debug, Default)]
pub(super) struct NotSampling {
    /// The HTTP server thread's.
    pub(super) http: CpuMeter,
    /// Migration and placement queries', seconds (`memtide_migration_cpu_seconds_total`).
    pub(super) migration: CounterF64,
}

impl NotSampling {
    fn get(&self) -> Duration {
        self.http.get() + Duration::try_from_secs_f64(self.migration.get()).unwrap_or_default()
    }
}

/// Runs `work` and adds the CPU time the calling thread spent in it to `migration` (seconds):
/// the epoch step wraps its placement queries and migrations in it.
pub(super) fn charge_migration<T>(migration: &CounterF64, work: impl FnOnce() -> T) -> T {
    let start = process::thread_cpu_time().ok();
    let result = work();
    if let (Some(start), Ok(end)) = (start, process::thread_cpu_time()) {
        migration.inc_by(end.saturating_sub(start).as_secs_f64());
    }
    result
}

/// The agent's CPU time so far (a parameter so tests can drive it).
type CpuClock = fn() -> std::io::Result<Duration>;

/// One reading of the counters the controller compares across an interval.
#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    agent_cpu: Duration,
    bpf_run: Duration,
    samples: u64,
}

impl Reading {
    /// The agent's CPU time less `excluded`'s (serving scrapes and migrating are not
    /// sampling), the BPF programs' run time and the sample count, now.
    fn take(
        source: &dyn HotnessSource,
        samples: u64,
        excluded: &NotSampling,
        clock: CpuClock,
    ) -> Option<Self> {
        let agent_cpu = match clock() {
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
    excluded: NotSampling,
    clock: CpuClock,
}

impl SampleRate {
    /// A controller for `source`, or `None` when its period cannot change (DAMON) or its
    /// budget is 0 (meaning: keep the start-up period).
    pub(super) fn new(
        source: &dyn HotnessSource,
        excluded: NotSampling,
        samples: u64,
    ) -> Option<Self> {
        Self::with_clock(source, excluded, samples, process::cpu_time)
    }

    fn with_clock(
        source: &dyn HotnessSource,
        excluded: NotSampling,
        samples: u64,
        clock: CpuClock,
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
            last: Reading::take(source, samples, &excluded, clock)?,
            excluded,
            clock,
        })
    }

    /// Measures the interval since the last call and applies the controller's decision.
    pub(super) fn tick(&mut self, source: &mut dyn HotnessSource, samples: u64, metrics: &Metrics) {
        let Some(now) = Reading::take(source, samples, &self.excluded, self.clock) else {
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
    use std::{cell::Cell, collections::BTreeMap};

    use memtide_host::probe::SourceKind;
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
                max_rate_per_stream: 100_000.0,
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
        let excluded = NotSampling {
            http: CpuMeter::default(),
            migration: metrics.migration_cpu_seconds.clone(),
        };
        let mut source = Periodic {
            measured_ratios: vec![1.0, 7.5],
            ..Periodic::default()
        };
        let mut rate = SampleRate::with_clock(&source, excluded, 0, agent_cpu).expect("a budget");
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

    thread_local! {
        /// The agent's CPU time as the test's clock reports it.
        static AGENT_CPU: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    #[expect(clippy::unnecessary_wraps, reason = "a CpuClock")]
    fn agent_cpu() -> std::io::Result<Duration> {
        Ok(AGENT_CPU.with(Cell::get))
    }

    /// The period changes the controller makes after an interval in which the agent spent
    /// `migration` of CPU migrating, charged to migration or not.
    fn changes_after_a_migration(migration: Duration, charged: bool) -> Vec<f64> {
        AGENT_CPU.with(|cpu| cpu.set(Duration::ZERO));
        let metrics = Metrics::default();
        let excluded = NotSampling {
            http: CpuMeter::default(),
            migration: metrics.migration_cpu_seconds.clone(),
        };
        let mut source = Periodic::default();
        let mut rate = SampleRate::with_clock(&source, excluded, 0, agent_cpu).expect("a budget");
        AGENT_CPU.with(|cpu| cpu.set(migration));
        if charged {
            metrics
                .migration_cpu_seconds
                .inc_by(migration.as_secs_f64());
        }
        // Some wall time for the interval to have a length.
        std::thread::sleep(Duration::from_millis(20));
        rate.tick(&mut source, 0, &metrics);
        source.scales
    }

    #[test]
    fn a_long_migration_leaves_the_sample_period_unchanged() {
        // Two seconds of move_pages within one interval: 100 cores' worth over 20 ms of wall
        // time, and none of it sampling.
        let migration = Duration::from_secs(2);
        assert_eq!(
            changes_after_a_migration(migration, true),
            Vec::<f64>::new()
        );
        // Charged to sampling, the same interval would have slowed sampling down.
        let uncharged = changes_after_a_migration(migration, false);
        assert!(
            uncharged.first().is_some_and(|&scale| scale > 1.0),
            "{uncharged:?}"
        );
    }

    #[test]
    fn migration_work_is_charged_with_the_threads_own_cpu_time() {
        let migration = CounterF64::default();
        let charged = migration.clone();
        let spent = std::thread::spawn(move || {
            charge_migration(&charged, || {
                // Work until this thread has used 20 ms of CPU, by its own clock.
                let start = process::thread_cpu_time().expect("thread CPU clock");
                let mut spins = 0u64;
                while process::thread_cpu_time().expect("thread CPU clock") - start
                    < Duration::from_millis(20)
                {
                    spins = std::hint::black_box(spins + 1);
                }
                spins
            })
        })
        .join()
        .expect("migration thread");
        assert!(spent > 0);
        assert!(migration.get() >= 0.020, "{}", migration.get());
    }
}
