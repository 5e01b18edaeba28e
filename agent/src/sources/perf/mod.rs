//! Perf-event sources: Intel PEBS and AMD IBS (sampled data addresses from the PMU) and software
//! page faults (everywhere, coarse), all through one BPF `perf_event` program that filters by
//! target and writes [`memtide_common::AccessSample`]s into a ring ([`ring`]).
//!
//! [`perf_spec_for`] turns a source kind and what the machine offers into the events to open and
//! their periods, chosen from the CPU budget ([`budget`]); [`rate`] adjusts the periods at run
//! time; [`sampler`] opens the events and owns the BPF program.

pub mod budget;
pub mod ibs;
pub mod memory_share;
pub mod pebs;
pub mod rate;
pub mod ring;
pub mod sampler;
pub mod swfault;

use std::collections::BTreeMap;

use memtide_common::AccessKind;
use memtide_config::SourceKind;
use memtide_core::sampling::MemoryShares;
use memtide_host::{probe::pmu::PmuScan, sysfs::HostRoot};
use serde::Serialize;

use self::{
    budget::{BudgetError, EventLoad, KernelLimits, PeriodChoice, PeriodRule, SamplingBudget},
    memory_share::{MissCounters, ShareCounts, ShareMeter},
    sampler::{Sampler, SamplerError, SamplerSpec},
};
use super::{Delivery, HotnessSource, RateBudget, SourceError};
use crate::bpf::ProgramStats;

/// Expected event rates per busy CPU, used to size sample periods against the budget. They are
/// deliberately on the high side: an overestimate only lowers the sample rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ExpectedRates {
    /// Loads slower than the `ldlat` threshold (about the L2 misses of a memory-bound core).
    pub pebs_loads_per_sec: f64,
    /// Retired stores (PEBS store events have no latency filter).
    pub pebs_stores_per_sec: f64,
    /// Share of the `ldlat` loads that reach memory (miss the last-level cache), until the
    /// cache-miss counters measure it ([`memory_share`]).
    pub pebs_load_memory_share: f64,
    /// Share of the stores that reach memory, likewise.
    pub pebs_store_memory_share: f64,
    /// Dispatched ops (IBS counts ops with `cnt_ctl=1`).
    pub ibs_ops_per_sec: f64,
    /// Fraction of ops that pass `l3missonly` (L3-missing loads and stores; ~10-20 misses per
    /// thousand ops on memory-bound code).
    pub ibs_l3_miss_fraction: f64,
    /// Page faults.
    pub page_faults_per_sec: f64,
}

impl Default for ExpectedRates {
    fn default() -> Self {
        Self {
            pebs_loads_per_sec: 2e7,
            pebs_stores_per_sec: 5e8,
            // A memory-bound core moves ~1e7 cache lines/s each way: about half its 2e7
            // L2-missing loads and 2 % of its 5e8 stores. The store period is then
            // 0.5 / 0.02 = 25 times the load period (Neyman allocation,
            // `memtide_core::sampling`).
            pebs_load_memory_share: 0.5,
            pebs_store_memory_share: 0.02,
            ibs_ops_per_sec: 4e9,
            ibs_l3_miss_fraction: 0.02,
            page_faults_per_sec: 1e4,
        }
    }
}

/// What [`perf_spec_for`] needs besides the PMUs.
#[derive(Clone, Debug, PartialEq)]
pub struct PerfSourceOptions {
    /// CPUs to sample on (online CPUs).
    pub cpus: Vec<u32>,
    pub ring_bytes: u32,
    pub filter_by_target: bool,
    pub budget: SamplingBudget,
    /// The kernel's limits ([`KernelLimits::read`]).
    pub limits: KernelLimits,
    pub rates: ExpectedRates,
    /// PEBS load-latency threshold ([`pebs::DEFAULT_LDLAT`]).
    pub ldlat: u16,
    /// Also sample stores with PEBS.
    pub pebs_stores: bool,
    /// IBS: only L3 misses where the PMU supports it.
    pub ibs_l3_miss_only: bool,
}

impl PerfSourceOptions {
    /// Defaults for `cpus`: 1 MiB ring, target filtering, the default budget, ldlat 30, stores
    /// on, `l3missonly` on.
    #[must_use]
    pub fn new(cpus: Vec<u32>, limits: KernelLimits) -> Self {
        Self {
            cpus,
            ring_bytes: 1 << 20,
            filter_by_target: true,
            budget: SamplingBudget::default(),
            limits,
            rates: ExpectedRates::default(),
            ldlat: pebs::DEFAULT_LDLAT,
            pebs_stores: true,
            ibs_l3_miss_only: true,
        }
    }
}

/// A perf-event source ready for [`sampler::Sampler::start`], with the reasoning behind it.
#[derive(Clone, Debug)]
pub struct PerfSourceSpec {
    pub spec: SamplerSpec,
    /// The period of each sampling event (`mem-loads`, `mem-stores`, `ibs_op`, `page-faults`).
    pub periods: Vec<(&'static str, PeriodChoice)>,
    /// What was left out or not available, for logs.
    pub notes: Vec<String>,
}

/// Why no perf-event spec could be built.
#[derive(Debug, thiserror::Error)]
pub enum PerfSpecError {
    #[error("{0} is not a perf-event source")]
    NotPerf(SourceKind),
    #[error("no CPUs to sample on")]
    NoCpus,
    #[error(transparent)]
    Pebs(#[from] pebs::PebsError),
    #[error(transparent)]
    Ibs(#[from] ibs::IbsError),
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// The sampler spec for `kind` (PEBS, IBS or software page faults), with periods chosen from
/// the CPU budget ([`budget::choose_period`]); every sampling stream (event × CPU) gets an equal
/// share, except that PEBS splits its loads against its stores by what reaches memory
/// ([`budget::load_store_shares`]). `root` is where the PMU directories live (for `cpus` files and error messages).
pub fn perf_spec_for(
    kind: SourceKind,
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    if options.cpus.is_empty() {
        return Err(PerfSpecError::NoCpus);
    }
    match kind {
        SourceKind::Pebs => pebs_spec(scan, root, options),
        SourceKind::Ibs => ibs_spec(scan, root, options),
        SourceKind::SwFault => {
            let choice = options.choose(
                options.rates.page_faults_per_sec,
                options.streams_on(None),
                1.0,
                PeriodRule::ANY,
            )?;
            Ok(PerfSourceSpec {
                spec: swfault::spec(
                    options.cpus.clone(),
                    choice.period,
                    options.ring_bytes,
                    options.filter_by_target,
                ),
                periods: vec![("page-faults", choice)],
                notes: Vec::new(),
            })
        }
        SourceKind::Spe | SourceKind::Damon => Err(PerfSpecError::NotPerf(kind)),
    }
}

impl PerfSourceOptions {
    /// Sampling streams of one event on `cpus` (every CPU sampled when `None`).
    fn streams_on(&self, cpus: Option<&[u32]>) -> u32 {
        let n = cpus.map_or(self.cpus.len(), |own| {
            self.cpus.iter().filter(|c| own.contains(c)).count()
        });
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The period for an event seen `rate` times a second per CPU, over `streams` streams
    /// taking `share` of an equal split each.
    fn choose(
        &self,
        rate: f64,
        streams: u32,
        share: f64,
        rule: PeriodRule,
    ) -> Result<PeriodChoice, BudgetError> {
        budget::choose_period(
            &self.budget,
            &self.limits,
            &EventLoad {
                events_per_sec_per_cpu: rate,
                streams,
                share,
            },
            rule,
        )
    }

    /// The store period as a multiple of the load period at the expected memory shares.
    #[must_use]
    pub fn assumed_store_period_ratio(&self) -> f64 {
        MemoryShares {
            loads: self.rates.pebs_load_memory_share,
            stores: self.rates.pebs_store_memory_share,
        }
        .store_period_ratio()
    }
}

/// PEBS: loads above the latency threshold and (where the core PMU has them) stores, on every
/// core PMU's CPUs.
fn pebs_spec(
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    let mut notes = Vec::new();
    let pmus = pebs::core_pmus(root, scan)?;
    let mut streams = 0u32;
    for core in pmus.iter() {
        let per_event = options.streams_on(core.cpus);
        let stores = options.pebs_stores && core.pmu.has_event("mem-stores");
        streams = streams.saturating_add(per_event.saturating_mul(1 + u32::from(stores)));
        if options.pebs_stores && !stores {
            notes.push(format!("{} has no mem-stores: loads only", core.pmu.name));
        }
    }
    if let Some(atom) = scan.get("cpu_atom").filter(|p| !p.has_event("mem-loads")) {
        notes.push(format!(
            "{} has no mem-loads: its CPUs are not sampled",
            atom.name
        ));
    }
    let (load_share, store_share) = budget::load_store_shares(
        options.rates.pebs_loads_per_sec,
        options.rates.pebs_stores_per_sec,
        options.assumed_store_period_ratio(),
    );
    let loads = options.choose(
        options.rates.pebs_loads_per_sec,
        streams,
        load_share,
        pebs::PERIOD_RULE,
    )?;
    let stores = options.choose(
        options.rates.pebs_stores_per_sec,
        streams,
        store_share,
        pebs::PERIOD_RULE,
    )?;
    let pebs_options = pebs::PebsOptions {
        ldlat: options.ldlat,
        load_period: loads.period,
        store_period: options.pebs_stores.then_some(stores.period),
    };
    let sets = pmus.events(root, &pebs_options)?;
    let mut periods = vec![("mem-loads", loads)];
    if sets.iter().any(|set| set.stores) {
        periods.push(("mem-stores", stores));
    }
    Ok(PerfSourceSpec {
        spec: pebs::spec(
            sets,
            options.cpus.clone(),
            options.ring_bytes,
            options.filter_by_target,
        ),
        periods,
        notes,
    })
}

/// IBS: op sampling, L3 misses only where the PMU can filter them (Zen 4).
fn ibs_spec(
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    let mut notes = Vec::new();
    let pmu = ibs::find(root, scan)?;
    let l3 = options.ibs_l3_miss_only && pmu.has_format("l3missonly");
    if options.ibs_l3_miss_only && !l3 {
        notes.push("ibs_op has no l3missonly (before Zen 4): sampling every op".to_owned());
    }
    let fraction = if l3 {
        options.rates.ibs_l3_miss_fraction
    } else {
        1.0
    };
    let choice = options.choose(
        options.rates.ibs_ops_per_sec * fraction,
        options.streams_on(None),
        1.0,
        ibs::PERIOD_RULE,
    )?;
    let event = ibs::op_event(
        pmu,
        &ibs::IbsOptions {
            l3_miss_only: options.ibs_l3_miss_only,
            count_ops: true,
            period: choice.period,
        },
    )?;
    Ok(PerfSourceSpec {
        spec: ibs::spec(
            event,
            options.cpus.clone(),
            options.ring_bytes,
            options.filter_by_target,
        ),
        periods: vec![("ibs_op", choice)],
        notes,
    })
}

/// A running perf-event source (PEBS, IBS, software page faults) and its current allowlist.
#[derive(Debug)]
pub struct PerfSource {
    kind: SourceKind,
    sampler: Sampler,
    targets: Vec<u32>,
    rate: RateBudget,
    /// PEBS with stores, where the PMU has the generic LLC miss events.
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
    fn start(kind: SourceKind, spec: &PerfSourceSpec, options: &PerfSourceOptions) -> Option<Self> {
        if kind != SourceKind::Pebs {
            return None;
        }
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
                    source = %kind,
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

impl PerfSource {
    /// Opens the events of `kind` on every CPU of `options` and watches `pids`.
    pub fn start(
        kind: SourceKind,
        root: &HostRoot,
        pmus: &PmuScan,
        options: &PerfSourceOptions,
        pids: &[u32],
    ) -> Result<Self, SourceError> {
        let spec = perf_spec_for(kind, pmus, root, options)?;
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
                interrupt_cost_ns: match kind {
                    // A software event raises no interrupt: the fault path runs the program.
                    SourceKind::SwFault => 0.0,
                    _ => options.budget.interrupt_cost_ns,
                },
            },
            split: StoreSplit::start(kind, &spec, options),
        };
        source.set_targets(pids)?;
        Ok(source)
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
        let counts = ShareCounts {
            loads: self.sampler.counted(AccessKind::Load)?,
            loads_to_memory,
            stores: self.sampler.counted(AccessKind::Store)?,
            stores_to_memory,
        };
        let Some(ratio) = split.meter.observe(counts) else {
            return Ok(None);
        };
        self.sampler.set_store_ratio(ratio / split.opened_at)?;
        split.meter.applied(ratio);
        Ok(Some(ratio))
    }

    fn store_period_ratio(&self) -> Option<f64> {
        self.split.as_ref().map(|split| split.meter.ratio())
    }
}

/// The PMU tree `tests/fixtures/pmus/<name>` as a host root, for the tests of this folder.
#[cfg(test)]
fn pmu_fixture(name: &str) -> HostRoot {
    HostRoot::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pmus")
            .join(name),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_for(kind: SourceKind, pmus: &str) -> Option<StoreSplit> {
        let root = pmu_fixture(pmus);
        let scan = PmuScan::read(&root).expect("fixture PMUs");
        let options = PerfSourceOptions::new(vec![0], KernelLimits::read(&root).expect("limits"));
        let spec = perf_spec_for(kind, &scan, &root, &options).expect("a spec");
        StoreSplit::start(kind, &spec, &options)
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
