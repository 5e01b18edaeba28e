//! PEBS as a running source: the perf-event source of its spec, and the split of its budget
//! between loads and stores that follows what reaches memory ([`memory_share`]).

use std::collections::BTreeMap;

use memtide_common::AccessKind;
use memtide_config::SourceKind;

use super::memory_share::{MissCounters, ShareCounts, ShareMeter};
use crate::{
    bpf::ProgramStats,
    sources::{
        Delivery, HotnessSource, RateBudget, SourceError,
        perf::{PerfSourceOptions, PerfSourceSpec, sampler::SamplerError, source::PerfSource},
    },
};

/// A running PEBS source.
#[derive(Debug)]
pub struct PebsSource {
    perf: PerfSource,
    /// With stores, where the PMU has the generic LLC miss events.
    split: Option<StoreSplit>,
}

/// What re-splits PEBS's budget between loads and stores at run time.
#[derive(Debug)]
struct StoreSplit {
    /// `None` where the PMU has no generic LLC miss events: the split stays as opened.
    misses: Option<MissCounters>,
    meter: ShareMeter,
    /// The store:load period ratio the events opened with.
    opened_at: f64,
}

impl StoreSplit {
    /// The split of a PEBS source whose spec samples stores, at the ratio of the periods it
    /// opened with, and the miss counters that measure it where the PMU has them.
    fn start(spec: &PerfSourceSpec, options: &PerfSourceOptions) -> Option<Self> {
        let period = |name: &str| {
            spec.periods
                .iter()
                .find(|(event, _)| *event == name)
                .map(|(_, choice)| choice.period as f64)
        };
        let opened_at = period("mem-stores")? / period("mem-loads")?;
        let misses = MissCounters::open(&options.cpus)
            .inspect_err(|error| {
                tracing::info!(
                    source = %SourceKind::Pebs,
                    %error,
                    ratio = opened_at,
                    "no generic LLC miss counters (LLC-load-misses, LLC-store-misses): the store \
                     sample period stays at this multiple of the load period"
                );
            })
            .ok();
        Some(Self {
            misses,
            meter: ShareMeter::new(opened_at),
            opened_at,
        })
    }
}

impl PebsSource {
    /// Opens the events of `spec` on every CPU of `options` and watches `pids`.
    pub fn start(
        spec: &PerfSourceSpec,
        options: &PerfSourceOptions,
        pids: &[u32],
    ) -> Result<Self, SourceError> {
        Ok(Self {
            perf: PerfSource::start(SourceKind::Pebs, spec, options, pids)?,
            split: StoreSplit::start(spec, options),
        })
    }
}

impl HotnessSource for PebsSource {
    fn kind(&self) -> SourceKind {
        self.perf.kind()
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        self.perf.set_targets(pids)
    }

    fn deliver(&mut self, delivery: Delivery) -> Result<tokio::task::JoinHandle<()>, SourceError> {
        self.perf.deliver(delivery)
    }

    fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        self.perf.drop_counts()
    }

    fn program_stats(&self) -> Vec<ProgramStats> {
        self.perf.program_stats()
    }

    fn sampling_streams(&self) -> u32 {
        self.perf.sampling_streams()
    }

    fn scale_periods(&mut self, scale: f64) -> Result<Vec<u64>, SourceError> {
        self.perf.scale_periods(scale)
    }

    fn rate_budget(&self) -> Option<RateBudget> {
        self.perf.rate_budget()
    }

    fn rebalance(&mut self) -> Result<Option<f64>, SourceError> {
        let Some(split) = self.split.as_mut() else {
            return Ok(None);
        };
        let Some(misses) = &split.misses else {
            return Ok(None);
        };
        let (loads_to_memory, stores_to_memory) = misses
            .read()
            .map_err(|source| SamplerError::Read { source })?;
        let sampler = self.perf.sampler_mut();
        let counts = ShareCounts {
            loads: sampler.counted(AccessKind::Load)?,
            loads_to_memory,
            stores: sampler.counted(AccessKind::Store)?,
            stores_to_memory,
        };
        let Some(ratio) = split.meter.observe(counts) else {
            return Ok(None);
        };
        sampler.set_store_ratio(ratio / split.opened_at)?;
        split.meter.applied(ratio);
        Ok(Some(ratio))
    }

    fn store_period_ratio(&self) -> Option<f64> {
        self.split.as_ref().map(|split| split.meter.ratio())
    }
}

#[cfg(test)]
mod tests {
    use memtide_host::probe::pmu::PmuScan;

    use super::*;
    use crate::sources::{
        perf::{
            ExpectedRates,
            budget::{KernelLimits, SamplingBudget},
            pmu_fixture,
        },
        registry::perf_spec_for,
    };

    fn split_for(kind: SourceKind, pmus: &str) -> Option<StoreSplit> {
        let root = pmu_fixture(pmus);
        let scan = PmuScan::read(&root).expect("fixture PMUs");
        let options = PerfSourceOptions::new(vec![0], KernelLimits::read(&root).expect("limits"));
        let spec = perf_spec_for(kind, &scan, &root, &options).expect("a spec");
        StoreSplit::start(&spec, &options)
    }

    /// Thousands separators, as docs/operations.md writes numbers.
    fn grouped(value: f64) -> String {
        let digits = format!("{value:.0}");
        let mut out = String::new();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(digit);
        }
        out
    }

    /// The row of docs/operations.md's density table for a PEBS server with `cpus` CPUs at
    /// the shipped defaults (budget, expected rates) and a stock kernel's limits.
    fn density_row(cpus: u32) -> String {
        let root = pmu_fixture("sapphire-rapids");
        let scan = PmuScan::read(&root).expect("fixture PMUs");
        let options = PerfSourceOptions::new((0..cpus).collect(), KernelLimits::LINUX_DEFAULT);
        let spec = perf_spec_for(SourceKind::Pebs, &scan, &root, &options).expect("a spec");
        let period = |event: &str| {
            let (_, choice) = spec
                .periods
                .iter()
                .find(|(name, _)| *name == event)
                .unwrap();
            choice
        };
        let (loads, stores) = (period("mem-loads"), period("mem-stores"));
        let streams = 2 * cpus;
        let per_stream = f64::from(cpus)
            * (loads.samples_per_sec_per_stream + stores.samples_per_sec_per_stream)
            / f64::from(streams);
        let rates = &options.rates;
        #[expect(clippy::cast_precision_loss, reason = "periods as event counts")]
        let misses = loads.period as f64 * rates.pebs_load_memory_share;
        #[expect(clippy::cast_precision_loss, reason = "periods as event counts")]
        let store_misses = stores.period as f64 * rates.pebs_store_memory_share;
        assert!(
            (misses - store_misses).abs() <= 1e-6 * misses,
            "a load and a store sample stand for as many misses (Neyman): {misses} {store_misses}"
        );
        format!(
            "| {cpus} | {streams} | {} | {} | {} | {} | {} | {} to {} |",
            grouped(per_stream * f64::from(streams)),
            grouped(per_stream),
            grouped(loads.period as f64),
            grouped(stores.period as f64),
            grouped(misses),
            grouped(misses / 32.0),
            grouped(misses / 16.0),
        )
    }

    #[test]
    fn the_simulators_density_model_is_the_agents_defaults() {
        let budget = SamplingBudget::default();
        let rates = ExpectedRates::default();
        for cpus in [8, 32, 128] {
            let model = memtide_sim::density::DensityModel::shipped(cpus);
            assert!((model.cpu_budget_percent / 100.0 - budget.cpu_fraction).abs() < 1e-12);
            assert!((model.sample_cost_ns - budget.sample_cost_ns).abs() < 1e-9);
            let traffic = rates.pebs_loads_per_sec * rates.pebs_load_memory_share
                + rates.pebs_stores_per_sec * rates.pebs_store_memory_share;
            assert!((model.misses_per_cpu_per_s - traffic).abs() < 1e-6);
            // And the periods the agent opens make it: misses per PEBS sample.
            let row = density_row(cpus);
            let misses = grouped(model.misses_per_sample());
            assert!(
                row.contains(&format!(" | {misses} | ")),
                "{row} vs {misses}"
            );
        }
    }

    #[test]
    fn the_density_table_in_the_operations_guide_is_what_the_defaults_give() {
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
        )
        .expect("docs/operations.md");
        let rows: Vec<String> = [8, 32, 128].into_iter().map(density_row).collect();
        let missing: Vec<&String> = rows
            .iter()
            .filter(|row| !docs.contains(row.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/operations.md's density table must have these rows:\n{}",
            rows.join("\n")
        );
    }

    #[test]
    fn the_store_split_starts_at_the_ratio_of_the_periods_opened() {
        let split = split_for(SourceKind::Pebs, "sapphire-rapids").expect("PEBS with stores");
        // Half the ldlat loads and 2 % of the stores assumed to reach memory: 0.5 / 0.02.
        assert!((split.opened_at - 25.0).abs() < 1e-9, "{}", split.opened_at);
        assert!((split.meter.ratio() - 25.0).abs() < 1e-9);
        assert!(
            split_for(SourceKind::Ibs, "zen4").is_none(),
            "IBS has no store events"
        );
    }
}
