//! Intel PEBS memory sampling: `perf_event_attr`s for the load-latency event (`mem-loads`) and
//! the precise store event (`mem-stores`) of a core PMU, built from its sysfs `format/` and
//! `events/` files (see [`memtide_host::probe::pmu`]).
//!
//! Per core PMU (`cpu`, or on hybrid parts `cpu_core` and `cpu_atom`):
//! - `mem-loads` with `ldlat` (the `config1:0-15` format field) = [`PebsOptions::ldlat`]:
//!   only loads slower than the threshold are counted and sampled. `precise_ip` = 2: PEBS load
//!   latency returns EINVAL with 3 on Sapphire Rapids (PDist exists only on GP counter 0, which
//!   load latency cannot use), and 2 is enough for an exact data address.
//! - `mem-loads-aux` (Sapphire/Emerald Rapids, Alder Lake's `cpu_core`) opened first as a
//!   counting group leader: the kernel rejects a load-latency event that asks for
//!   `PERF_SAMPLE_DATA_SRC` without it (`-ENODATA`, arch/x86/events/intel/core.c
//!   `intel_pmu_hw_config`). Its count is irrelevant, it only has to be scheduled, so it samples
//!   nothing (period 0) and costs no interrupts. `mem-stores` is not in that group.
//! - `mem-stores`, when the PMU has it, with the same sample type.
//!
//! Every event asks for `ADDR | TID | WEIGHT | DATA_SRC` and excludes kernel and hypervisor
//! (memtide places user memory only). Hybrid PMUs count only on their own CPUs (the `cpus` file
//! in the PMU directory), so their events carry that CPU list.

pub mod memory_share;
pub mod source;

use std::path::PathBuf;

use memtide_common::{AccessKind, SampleSource};

use memtide_host::probe::pmu::{self, EncodeError, Pmu, PmuScan};
use memtide_host::{
    sys::perf::{self, PerfAttr},
    sysfs::{self, HostRoot, SysfsError},
};

use super::{
    PerfSpecError,
    perf::{
        PerfSourceOptions, PerfSourceSpec, budget,
        budget::PeriodRule,
        sampler::{EventSpec, SamplerSpec},
    },
};

/// The smallest threshold the hardware supports (the kernel's own `ldlat=3` default).
pub const MIN_LDLAT: u16 = 3;
/// `precise_ip` for every PEBS event (3 is EINVAL for load latency on Sapphire Rapids).
pub const PRECISE_IP: u8 = 2;
/// What every PEBS event samples.
pub const SAMPLE_TYPE: u64 =
    perf::SAMPLE_ADDR | perf::SAMPLE_TID | perf::SAMPLE_WEIGHT | perf::SAMPLE_DATA_SRC;
/// PEBS takes any period.
pub const PERIOD_RULE: PeriodRule = PeriodRule::ANY;

/// The core PMU names, non-hybrid first.
pub const CORE_PMUS: [&str; 3] = ["cpu", "cpu_core", "cpu_atom"];

/// What to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PebsOptions {
    /// Load-latency threshold in cycles ([`DEFAULT_LDLAT`](super::perf::DEFAULT_LDLAT)).
    pub ldlat: u16,
    /// Sample one in `load_period` qualifying loads.
    pub load_period: u64,
    /// Sample one in `store_period` stores; `None` opens no store event.
    pub store_period: Option<u64>,
}

/// Why the PEBS events could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PebsError {
    #[error("PMU {pmu} has no mem-loads event ({} is missing): no PEBS load latency", path.display())]
    MissingMemLoads { pmu: String, path: PathBuf },
    #[error(
        "no core PMU (cpu or cpu_core) under {}: no PEBS here",
        dir.display()
    )]
    NoCorePmu { dir: PathBuf },
    #[error("PMU {pmu}: {event}: {source}")]
    Encode {
        pmu: String,
        event: &'static str,
        #[source]
        source: EncodeError,
    },
    #[error("ldlat {0} is below the hardware minimum of {MIN_LDLAT} cycles")]
    LdlatTooSmall(u16),
    #[error("reading the CPUs of PMU {pmu}: {source}")]
    Cpus {
        pmu: String,
        #[source]
        source: SysfsError,
    },
    #[error("hybrid PMU {pmu} has no cpus file ({}): cannot tell which CPUs it counts on", path.display())]
    MissingCpus { pmu: String, path: PathBuf },
}

/// The events of one core PMU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PebsSet {
    pub pmu: String,
    pub perf_type: u32,
    /// The PMU's CPUs (hybrid parts); `None`: every CPU.
    pub cpus: Option<Vec<u32>>,
    /// `mem-loads-aux` leads the `mem-loads` group.
    pub aux_leader: bool,
    /// A `mem-stores` event is included.
    pub stores: bool,
    /// In open order: `[mem-loads-aux,] mem-loads [, mem-stores]`.
    pub events: Vec<EventSpec>,
}

impl PebsSet {
    /// The events that produce samples (everything but the aux leader).
    pub fn sampling_events(&self) -> impl Iterator<Item = &EventSpec> {
        self.events.iter().filter(|e| !e.group_leader)
    }
}

fn pmu_dir(root: &HostRoot, pmu: &str) -> PathBuf {
    root.path(pmu::PMU_DIR).join(pmu)
}

fn encode(
    pmu: &Pmu,
    event: &'static str,
    overrides: &[(&str, u64)],
) -> Result<pmu::PerfConfig, PebsError> {
    let spec = pmu.events.get(event).ok_or_else(|| PebsError::Encode {
        pmu: pmu.name.clone(),
        event,
        source: EncodeError::UnknownTerm {
            pmu: pmu.name.clone(),
            term: event.to_owned(),
        },
    })?;
    pmu.encode(spec, overrides)
        .map_err(|source| PebsError::Encode {
            pmu: pmu.name.clone(),
            event,
            source,
        })
}

fn sampling_attr(pmu: &Pmu, config: pmu::PerfConfig, period: u64) -> PerfAttr {
    PerfAttr {
        type_: pmu.perf_type,
        config: config.get(pmu::ConfigWord::Config),
        config1: config.get(pmu::ConfigWord::Config1),
        config2: config.get(pmu::ConfigWord::Config2),
        sample_period: period.max(1),
        sample_type: SAMPLE_TYPE,
        precise_ip: PRECISE_IP,
        exclude_kernel: true,
        exclude_hv: true,
        exclude_guest: false,
        bp_type: 0,
    }
}

/// The PEBS events of one core PMU, to be opened on `cpus` (`None`: every CPU). `root` only
/// names files in errors.
pub fn pmu_events(
    root: &HostRoot,
    pmu: &Pmu,
    cpus: Option<Vec<u32>>,
    options: &PebsOptions,
) -> Result<PebsSet, PebsError> {
    if !pmu.has_event("mem-loads") {
        return Err(PebsError::MissingMemLoads {
            pmu: pmu.name.clone(),
            path: pmu_dir(root, &pmu.name).join("events/mem-loads"),
        });
    }
    if options.ldlat < MIN_LDLAT {
        return Err(PebsError::LdlatTooSmall(options.ldlat));
    }
    let mut events = Vec::with_capacity(3);
    let aux_leader = pmu.has_event("mem-loads-aux");
    if aux_leader {
        let config = encode(pmu, "mem-loads-aux", &[])?;
        events.push(EventSpec {
            // A counting event: it only has to be scheduled for the load-latency event to work.
            attr: PerfAttr {
                type_: pmu.perf_type,
                config: config.get(pmu::ConfigWord::Config),
                config1: config.get(pmu::ConfigWord::Config1),
                config2: config.get(pmu::ConfigWord::Config2),
                exclude_kernel: true,
                exclude_hv: true,
                ..PerfAttr::default()
            },
            kind: AccessKind::Load,
            group_leader: true,
            cpus: cpus.clone(),
            period_rule: PERIOD_RULE,
        });
    }
    let loads = encode(pmu, "mem-loads", &[("ldlat", u64::from(options.ldlat))])?;
    events.push(EventSpec {
        attr: sampling_attr(pmu, loads, options.load_period),
        kind: AccessKind::Load,
        group_leader: false,
        cpus: cpus.clone(),
        period_rule: PERIOD_RULE,
    });
    let stores = options.store_period.is_some() && pmu.has_event("mem-stores");
    if let (true, Some(period)) = (stores, options.store_period) {
        let config = encode(pmu, "mem-stores", &[])?;
        events.push(EventSpec {
            attr: sampling_attr(pmu, config, period),
            kind: AccessKind::Store,
            group_leader: false,
            cpus: cpus.clone(),
            period_rule: PERIOD_RULE,
        });
    }
    Ok(PebsSet {
        pmu: pmu.name.clone(),
        perf_type: pmu.perf_type,
        cpus,
        aux_leader,
        stores,
        events,
    })
}

/// A core PMU to sample and the CPUs it counts on.
#[derive(Clone, Copy, Debug)]
pub struct CorePmu<'a> {
    pub pmu: &'a Pmu,
    /// From the PMU's `cpus` file (hybrid parts); `None`: every CPU.
    pub cpus: Option<&'a [u32]>,
}

/// The core PMUs to sample, with the CPU lists read from their `cpus` files.
#[derive(Clone, Debug)]
pub struct CorePmus<'a> {
    entries: Vec<(&'a Pmu, Option<Vec<u32>>)>,
}

impl CorePmus<'_> {
    /// Each PMU and its CPUs.
    pub fn iter(&self) -> impl Iterator<Item = CorePmu<'_>> {
        self.entries.iter().map(|(pmu, cpus)| CorePmu {
            pmu,
            cpus: cpus.as_deref(),
        })
    }

    /// The PEBS events of every PMU, one [`PebsSet`] each.
    pub fn events(
        &self,
        root: &HostRoot,
        options: &PebsOptions,
    ) -> Result<Vec<PebsSet>, PebsError> {
        self.iter()
            .map(|core| pmu_events(root, core.pmu, core.cpus.map(<[u32]>::to_vec), options))
            .collect()
    }
}

/// The core PMUs to sample and their CPUs: `cpu` (all CPUs) if it has `mem-loads`; otherwise
/// `cpu_core` (which must have it) and `cpu_atom` when it has it, each on the CPUs of its `cpus`
/// file. A `cpu` PMU without `mem-loads` and no `cpu_core` is an error naming the missing file
/// (raised by [`CorePmus::events`]).
pub fn core_pmus<'a>(root: &HostRoot, scan: &'a PmuScan) -> Result<CorePmus<'a>, PebsError> {
    if let Some(cpu) = scan.get("cpu")
        && (cpu.has_event("mem-loads") || scan.get("cpu_core").is_none())
    {
        return Ok(CorePmus {
            entries: vec![(cpu, None)],
        });
    }
    let Some(core) = scan.get("cpu_core") else {
        return Err(PebsError::NoCorePmu {
            dir: root.path(pmu::PMU_DIR),
        });
    };
    let mut pmus = vec![core];
    pmus.extend(scan.get("cpu_atom").filter(|p| p.has_event("mem-loads")));
    let hybrid = scan.get("cpu_atom").is_some();
    let entries = pmus
        .into_iter()
        .map(|pmu| {
            let path = pmu_dir(root, &pmu.name).join("cpus");
            let cpus = sysfs::read_list_optional(&path).map_err(|source| PebsError::Cpus {
                pmu: pmu.name.clone(),
                source,
            })?;
            match cpus {
                None if hybrid => Err(PebsError::MissingCpus {
                    pmu: pmu.name.clone(),
                    path,
                }),
                cpus => Ok((pmu, cpus)),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(CorePmus { entries })
}

/// The PEBS events of every core PMU ([`core_pmus`]), one [`PebsSet`] each.
pub fn plan(
    root: &HostRoot,
    scan: &PmuScan,
    options: &PebsOptions,
) -> Result<Vec<PebsSet>, PebsError> {
    core_pmus(root, scan)?.events(root, options)
}

/// A sampler spec for `sets` on `options`' CPUs (each set's events open only on its own CPUs
/// among them).
#[must_use]
pub fn spec(sets: Vec<PebsSet>, options: &PerfSourceOptions) -> SamplerSpec {
    options.sampler_spec(
        SampleSource::Pebs,
        sets.into_iter().flat_map(|set| set.events).collect(),
    )
}

/// PEBS: loads above the latency threshold and (where the core PMU has them) stores, on every
/// core PMU's CPUs, with periods chosen from the CPU budget; loads and stores split it by what
/// reaches memory ([`budget::load_store_shares`]). `root` is where the PMU directories live.
pub fn source_spec(
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    let mut notes = Vec::new();
    let pmus = core_pmus(root, scan)?;
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
        PERIOD_RULE,
    )?;
    let stores = options.choose(
        options.rates.pebs_stores_per_sec,
        streams,
        store_share,
        PERIOD_RULE,
    )?;
    let pebs_options = PebsOptions {
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
        spec: spec(sets, options),
        periods,
        notes,
        interrupts: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::perf::{DEFAULT_LDLAT, pmu_fixture};

    const OPTIONS: PebsOptions = PebsOptions {
        ldlat: DEFAULT_LDLAT,
        load_period: 1000,
        store_period: Some(5000),
    };

    #[test]
    fn missing_mem_loads_names_pmu_and_file() {
        let root = pmu_fixture("no-mem-loads");
        let scan = PmuScan::read(&root).unwrap();
        let err = plan(&root, &scan, &OPTIONS).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PebsError::MissingMemLoads { ref pmu, .. } if pmu == "cpu"));
        assert!(text.contains("PMU cpu"), "{text}");
        assert!(
            text.contains("sys/bus/event_source/devices/cpu/events/mem-loads"),
            "{text}"
        );
    }

    #[test]
    fn no_core_pmu_at_all() {
        let root = pmu_fixture("zen4");
        let mut scan = PmuScan::read(&root).unwrap();
        scan.pmus.retain(|p| p.name != "cpu");
        assert!(matches!(
            plan(&root, &scan, &OPTIONS),
            Err(PebsError::NoCorePmu { .. })
        ));
    }

    #[test]
    fn ldlat_below_minimum_is_rejected() {
        let root = pmu_fixture("skylake-server");
        let scan = PmuScan::read(&root).unwrap();
        let options = PebsOptions {
            ldlat: 2,
            ..OPTIONS
        };
        assert!(matches!(
            plan(&root, &scan, &options),
            Err(PebsError::LdlatTooSmall(2))
        ));
    }

    #[test]
    fn stores_can_be_left_out() {
        let root = pmu_fixture("skylake-server");
        let scan = PmuScan::read(&root).unwrap();
        let options = PebsOptions {
            store_period: None,
            ..OPTIONS
        };
        let sets = plan(&root, &scan, &options).unwrap();
        assert_eq!(sets.len(), 1);
        assert!(!sets[0].stores);
        assert_eq!(sets[0].events.len(), 1);
        assert_eq!(sets[0].events[0].kind, AccessKind::Load);
    }
}
