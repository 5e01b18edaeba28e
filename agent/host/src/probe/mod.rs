//! `memtide probe`: what this machine offers for memory tiering.
//!
//! [`Probe::collect`] reads everything through a [`HostRoot`] (so it runs on fixture trees) and
//! never fails as a whole: a component that cannot be read is left empty and its error (which
//! names the file) is listed in [`Probe::errors`]. The BPF check needs the real kernel, so the
//! caller does it and passes the result in as [`BpfStatus`].

use memtide_config::SourceKind;
use serde::Serialize;

pub use self::sources::{SourceCheck, SourceInputs, rank, select};
use self::{
    damon::{DamonStatus, OpsProbe},
    pmu::PmuScan,
    sources::MemSampling,
};
use crate::{
    sysfs::{self, HostRoot},
    topology::{self, MemoryTier, MmSettings, Node, ThpMode, Topology},
};

pub mod damon;
pub mod kernel;
pub mod pmu;
pub mod sources;
mod table;

/// Result of loading memtide's BPF object, checked by the caller on the real kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BpfStatus {
    pub available: bool,
    pub detail: String,
}

/// How much [`Probe::collect_with`] may do besides reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Whether DAMON's `avail_operations` may be read through a temporary kdamond when none
    /// exists (see [`OpsProbe`]).
    pub damon_ops: OpsProbe,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            damon_ops: OpsProbe::ReadOnly,
        }
    }
}

/// One PMU as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PmuReport {
    pub name: String,
    #[serde(rename = "type")]
    pub perf_type: u32,
    /// The memory-sampling facility this PMU provides, if any.
    pub memory_sampling: Option<String>,
}

/// DAMON as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DamonReport {
    pub present: bool,
    pub operations: Vec<String>,
    pub operations_source: String,
    /// A kdamond memtide did not start is running.
    pub busy: bool,
    /// Pids of the running kdamonds.
    pub busy_kdamonds: Vec<u32>,
    pub nr_kdamonds: u32,
    pub tracepoint: bool,
    pub tracepoint_detail: String,
}

impl DamonReport {
    fn from_status(s: &DamonStatus) -> Self {
        Self {
            present: s.present,
            operations: s.operations.clone(),
            operations_source: s.operations_source.clone(),
            busy: s.busy(),
            busy_kdamonds: s.busy_pids(),
            nr_kdamonds: s.nr_kdamonds,
            tracepoint: s.tracepoint,
            tracepoint_detail: s.tracepoint_detail.clone(),
        }
    }

    fn absent(why: String) -> Self {
        Self {
            present: false,
            operations: Vec::new(),
            operations_source: why,
            busy: false,
            busy_kdamonds: Vec::new(),
            nr_kdamonds: 0,
            tracepoint: false,
            tracepoint_detail: String::new(),
        }
    }
}

/// The source `memtide run` would use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SelectedSource {
    /// `None` when nothing is usable.
    pub name: Option<SourceKind>,
    pub reason: String,
}

/// Everything `memtide probe` reports. Serialized as the `--json` output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    pub bpf: bool,
    pub bpf_detail: String,
    /// Names of the PMUs under `/sys/bus/event_source/devices`.
    pub pmus: Vec<String>,
    pub pmu_details: Vec<PmuReport>,
    /// Usable hotness sources, best first.
    pub sources: Vec<SourceKind>,
    /// Every source with whether it is usable and why (not).
    pub source_checks: Vec<SourceCheck>,
    pub selected_source: SelectedSource,
    pub damon: DamonReport,
    pub numa_nodes: Vec<Node>,
    /// Memory tiers, fastest first.
    pub memory_tiers: Vec<MemoryTier>,
    pub thp: Option<ThpMode>,
    pub numa_balancing: Option<u32>,
    pub demotion_enabled: Option<bool>,
    /// Files that could not be read or understood; the matching fields are left empty.
    pub errors: Vec<String>,
}

impl Probe {
    /// Collects everything under `root` without writing anything.
    #[must_use]
    pub fn collect(root: &HostRoot, bpf: BpfStatus) -> Self {
        Self::collect_with(root, bpf, ProbeOptions::default())
    }

    /// Collects everything under `root`; `options` says whether DAMON may be probed by writing.
    #[must_use]
    pub fn collect_with(root: &HostRoot, bpf: BpfStatus, options: ProbeOptions) -> Self {
        let mut errors = Vec::new();
        let read = Readings::read(root, options, &mut errors);
        let unreadable;
        let damon_status = match &read.damon {
            Some(d) => d,
            None => {
                unreadable = DamonStatus {
                    present: false,
                    nr_kdamonds: 0,
                    kdamonds: Vec::new(),
                    operations: Vec::new(),
                    operations_source: "DAMON sysfs unreadable".to_owned(),
                    tracepoint: false,
                    tracepoint_detail: String::new(),
                };
                &unreadable
            }
        };
        let source_checks = rank(&SourceInputs {
            bpf_available: bpf.available,
            kernel: &read.kernel,
            pmus: &read.pmus,
            damon: damon_status,
        });
        let selected_source = selected_source(&source_checks);

        Self {
            pmu_details: pmu_reports(&read.pmus),
            kernel: read.kernel,
            bpf: bpf.available,
            bpf_detail: bpf.detail,
            pmus: read.pmus.names(),
            sources: source_checks
                .iter()
                .filter(|c| c.usable)
                .map(|c| c.kind)
                .collect(),
            source_checks,
            selected_source,
            damon: read.damon.as_ref().map_or_else(
                || DamonReport::absent("DAMON sysfs unreadable".to_owned()),
                DamonReport::from_status,
            ),
            numa_nodes: read.topology.nodes,
            memory_tiers: read.topology.tiers,
            thp: read.mm.thp,
            numa_balancing: read.mm.numa_balancing,
            demotion_enabled: read.mm.demotion_enabled,
            errors,
        }
    }

    /// Whether the hardware offers PMU memory sampling (PEBS, IBS or SPE).
    #[must_use]
    pub fn has_hardware_sampling(&self) -> bool {
        self.pmu_details.iter().any(|p| p.memory_sampling.is_some())
    }
}

/// What the probe reads of the machine, each part on its own: one that cannot be read is left
/// empty and its error noted.
struct Readings {
    kernel: String,
    pmus: PmuScan,
    damon: Option<DamonStatus>,
    topology: Topology,
    mm: MmSettings,
}

impl Readings {
    /// Reads every part under `root`, adding each error to `errors` (and the log).
    fn read(root: &HostRoot, options: ProbeOptions, errors: &mut Vec<String>) -> Self {
        let mut note = |e: &dyn std::fmt::Display| {
            tracing::warn!("{e}");
            errors.push(e.to_string());
        };

        let kernel = match sysfs::read_trimmed(&root.path("proc/sys/kernel/osrelease")) {
            Ok(k) => k,
            Err(e) => {
                note(&e);
                "unknown".to_owned()
            }
        };
        let pmus = PmuScan::read(root).unwrap_or_else(|e| {
            note(&e);
            PmuScan::default()
        });
        for e in &pmus.errors {
            note(e);
        }
        let damon = match DamonStatus::read(root, options.damon_ops) {
            Ok(d) => Some(d),
            Err(e) => {
                note(&e);
                None
            }
        };
        let topology = Topology::read(root).unwrap_or_else(|e| {
            note(&e);
            Topology {
                nodes: Vec::new(),
                tiers: Vec::new(),
                numa_sysfs: false,
            }
        });
        // Each setting on its own: one malformed file must not hide the others.
        let mm = MmSettings {
            thp: topology::read_thp(root).unwrap_or_else(|e| {
                note(&e);
                None
            }),
            numa_balancing: topology::read_numa_balancing(root).unwrap_or_else(|e| {
                note(&e);
                None
            }),
            demotion_enabled: topology::read_demotion_enabled(root).unwrap_or_else(|e| {
                note(&e);
                None
            }),
        };
        Self {
            kernel,
            pmus,
            damon,
            topology,
            mm,
        }
    }
}

/// Each PMU with the memory-sampling facility it provides, if any.
fn pmu_reports(pmus: &PmuScan) -> Vec<PmuReport> {
    let sampling = sources::classify(&pmus.pmus);
    pmus.pmus
        .iter()
        .map(|p| PmuReport {
            name: p.name.clone(),
            perf_type: p.perf_type,
            memory_sampling: sampling
                .iter()
                .find(|s| match s {
                    MemSampling::Pebs { pmu, .. } | MemSampling::Spe { pmu, .. } => *pmu == p.name,
                    MemSampling::Ibs { .. } => p.name == "ibs_op",
                })
                .map(MemSampling::describe),
        })
        .collect()
}

/// The source `memtide run` would take, or why there is none.
fn selected_source(checks: &[SourceCheck]) -> SelectedSource {
    match select(checks) {
        Some((kind, reason)) => SelectedSource {
            name: Some(kind),
            reason,
        },
        None => SelectedSource {
            name: None,
            reason: format!(
                "no usable hotness source: {}",
                checks
                    .iter()
                    .map(|c| format!("{}: {}", c.kind, c.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        },
    }
}
