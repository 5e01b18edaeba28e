//! What every perf-event sampler shares (PEBS, IBS, software page faults: the folders beside
//! this one): one BPF `perf_event` program that filters by target and writes
//! [`memtide_common::AccessSample`]s into a ring ([`ring`]).
//!
//! A sampler turns what the machine offers into the events to open and their periods, chosen
//! from the CPU budget ([`budget`]) through [`PerfSourceOptions`]; [`rate`] adjusts the periods
//! at run time; [`sampler`] opens the events and owns the BPF program; [`source`] runs them as
//! a [`HotnessSource`](super::HotnessSource). Nothing here names a particular sampler: each
//! sampler's folder uses this one, and `sources::registry` picks the sampler.

pub mod budget;
pub mod rate;
pub mod ring;
pub mod sampler;
pub mod source;

use memtide_common::SampleSource;
use memtide_core::sampling::MemoryShares;
#[cfg(test)]
use memtide_host::sysfs::HostRoot;
use serde::Serialize;

use self::{
    budget::{BudgetError, EventLoad, KernelLimits, PeriodChoice, PeriodRule, SamplingBudget},
    sampler::{EventSpec, SamplerSpec},
};

/// Default PEBS load-latency threshold in core cycles: `perf mem`'s default
/// (tools/perf/util/mem-events.c `perf_mem_events__loads_ldlat = 30`). Loads that hit L1/L2
/// finish well under it; L3 hits, remote caches and memory (the accesses tiering cares about)
/// take longer.
pub const DEFAULT_LDLAT: u16 = 30;

/// Expected event rates per busy CPU, used to size sample periods against the budget. They are
/// deliberately on the high side: an overestimate only lowers the sample rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ExpectedRates {
    /// Loads slower than the `ldlat` threshold (about the L2 misses of a memory-bound core).
    pub pebs_loads_per_sec: f64,
    /// Retired stores (PEBS store events have no latency filter).
    pub pebs_stores_per_sec: f64,
    /// Share of the `ldlat` loads that reach memory (miss the last-level cache), until the
    /// cache-miss counters measure it ([`memory_share`](super::pebs::memory_share)).
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

/// What a sampler needs besides the PMUs to plan its events
/// ([`perf_spec_for`](super::registry::perf_spec_for)).
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
    /// PEBS load-latency threshold ([`DEFAULT_LDLAT`]).
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
            ldlat: DEFAULT_LDLAT,
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
    /// Whether each sample raises a PMU interrupt, which the BPF programs' run time leaves out
    /// ([`super::RateBudget::interrupt_cost_ns`]); a software event raises none: the fault path
    /// runs the program.
    pub interrupts: bool,
}

impl PerfSourceOptions {
    /// Sampling streams of one event on `cpus` (every CPU sampled when `None`).
    #[must_use]
    pub fn streams_on(&self, cpus: Option<&[u32]>) -> u32 {
        let n = cpus.map_or(self.cpus.len(), |own| {
            self.cpus.iter().filter(|c| own.contains(c)).count()
        });
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// A sampler spec for `source`'s `events` on these CPUs, ring and target filter: what
    /// a sampler chose is only its events, the rest every perf sampler takes from here.
    #[must_use]
    pub fn sampler_spec(&self, source: SampleSource, events: Vec<EventSpec>) -> SamplerSpec {
        SamplerSpec {
            source,
            events,
            cpus: self.cpus.clone(),
            ring_bytes: self.ring_bytes,
            filter_by_target: self.filter_by_target,
        }
    }

    /// The period for an event seen `rate` times a second per CPU, over `streams` streams
    /// taking `share` of an equal split each.
    pub fn choose(
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

/// The PMU tree `tests/fixtures/pmus/<name>` as a host root, for the tests of the perf
/// samplers.
#[cfg(test)]
pub(crate) fn pmu_fixture(name: &str) -> HostRoot {
    HostRoot::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pmus")
            .join(name),
    )
}
