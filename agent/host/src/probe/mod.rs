//! `memtide probe`: what this machine offers for memory tiering.
//!
//! [`Probe::collect`] reads everything through a [`HostRoot`] (so it runs on fixture trees) and
//! never fails as a whole: a component that cannot be read is left empty and its error (which
//! names the file) is listed in [`Probe::errors`]. The BPF check needs the real kernel, so the
//! caller does it and passes the result in as [`BpfStatus`].

use std::fmt::Write as _;

use memtide_config::SourceKind;
use serde::Serialize;

pub use self::sources::{SourceCheck, SourceInputs, rank, select};
use self::{
    damon::{DamonStatus, OpsProbe},
    pmu::PmuScan,
};
use crate::{
    sysfs::{self, HostRoot},
    topology::{self, MemoryTier, MmSettings, Node, ThpMode, Topology},
};

pub mod damon;
pub mod kernel;
pub mod pmu;
pub mod sources;

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

        let sampling = pmu::classify(&pmus.pmus);
        let pmu_details =
            pmus.pmus
                .iter()
                .map(|p| PmuReport {
                    name: p.name.clone(),
                    perf_type: p.perf_type,
                    memory_sampling: sampling
                        .iter()
                        .find(|s| match s {
                            pmu::MemSampling::Pebs { pmu, .. }
                            | pmu::MemSampling::Spe { pmu, .. } => *pmu == p.name,
                            pmu::MemSampling::Ibs { .. } => p.name == "ibs_op",
                        })
                        .map(pmu::MemSampling::describe),
                })
                .collect();

        let unreadable_damon;
        let damon_status = match &damon {
            Some(d) => d,
            None => {
                unreadable_damon = DamonStatus {
                    present: false,
                    nr_kdamonds: 0,
                    kdamonds: Vec::new(),
                    operations: Vec::new(),
                    operations_source: "DAMON sysfs unreadable".to_owned(),
                    tracepoint: false,
                    tracepoint_detail: String::new(),
                };
                &unreadable_damon
            }
        };
        let source_checks = rank(&SourceInputs {
            bpf_available: bpf.available,
            kernel: &kernel,
            pmus: &pmus,
            damon: damon_status,
        });
        let selected_source = match select(&source_checks) {
            Some((kind, reason)) => SelectedSource {
                name: Some(kind),
                reason,
            },
            None => SelectedSource {
                name: None,
                reason: format!(
                    "no usable hotness source: {}",
                    source_checks
                        .iter()
                        .map(|c| format!("{}: {}", c.kind, c.reason))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            },
        };

        Self {
            kernel,
            bpf: bpf.available,
            bpf_detail: bpf.detail,
            pmus: pmus.names(),
            pmu_details,
            sources: source_checks
                .iter()
                .filter(|c| c.usable)
                .map(|c| c.kind)
                .collect(),
            source_checks,
            selected_source,
            damon: damon.as_ref().map_or_else(
                || DamonReport::absent("DAMON sysfs unreadable".to_owned()),
                DamonReport::from_status,
            ),
            numa_nodes: topology.nodes,
            memory_tiers: topology.tiers,
            thp: mm.thp,
            numa_balancing: mm.numa_balancing,
            demotion_enabled: mm.demotion_enabled,
            errors,
        }
    }

    /// Whether the hardware offers PMU memory sampling (PEBS, IBS or SPE).
    #[must_use]
    pub fn has_hardware_sampling(&self) -> bool {
        self.pmu_details.iter().any(|p| p.memory_sampling.is_some())
    }

    /// The human-readable report.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut rows: Vec<(&str, String)> = Vec::new();
        rows.push(("kernel", self.kernel.clone()));
        rows.push((
            "BPF",
            format!(
                "{} ({})",
                if self.bpf {
                    "available"
                } else {
                    "NOT available"
                },
                self.bpf_detail
            ),
        ));
        rows.push((
            "PMUs",
            if self.pmus.is_empty() {
                "none".to_owned()
            } else {
                self.pmus.join(", ")
            },
        ));
        let hw: Vec<String> = self
            .pmu_details
            .iter()
            .filter_map(|p| p.memory_sampling.clone())
            .collect();
        rows.push((
            "memory sampling PMU",
            if hw.is_empty() {
                "none (no hardware PMU with PEBS, IBS or SPE)".to_owned()
            } else {
                hw.join("; ")
            },
        ));
        rows.push(("DAMON", self.damon_line()));
        if self.damon.present {
            rows.push((
                "  operations",
                format!(
                    "{} (from {})",
                    if self.damon.operations.is_empty() {
                        "unknown".to_owned()
                    } else {
                        self.damon.operations.join(" ")
                    },
                    self.damon.operations_source
                ),
            ));
            rows.push((
                "  tracepoint",
                format!(
                    "damon_aggregated {} ({})",
                    if self.damon.tracepoint { "yes" } else { "no" },
                    self.damon.tracepoint_detail
                ),
            ));
        }
        rows.push(("NUMA", self.numa_line()));
        rows.push((
            "memory tiers",
            if self.memory_tiers.is_empty() {
                "none (kernel without memory tiering)".to_owned()
            } else {
                self.memory_tiers
                    .iter()
                    .map(|t| format!("memory_tier{}: nodes {}", t.id, list_or_none(&t.nodes)))
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        ));
        rows.push(("THP", opt(self.thp.map(ThpMode::as_str))));
        rows.push((
            "numa_balancing",
            self.numa_balancing.map_or_else(
                || "unknown (no /proc/sys/kernel/numa_balancing)".to_owned(),
                |v| format!("{v} ({})", topology::describe_numa_balancing(v)),
            ),
        ));
        rows.push((
            "demotion_enabled",
            opt(self
                .demotion_enabled
                .map(|d| if d { "true" } else { "false" })),
        ));
        rows.push((
            "usable sources",
            if self.sources.is_empty() {
                "none".to_owned()
            } else {
                self.sources
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ));
        rows.push((
            "selected source",
            match self.selected_source.name {
                Some(kind) => format!("{kind}: {}", self.selected_source.reason),
                None => format!("none: {}", self.selected_source.reason),
            },
        ));

        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (key, value) in &rows {
            let _ = writeln!(out, "{key:<width$}  {value}");
            if *key == "NUMA" && !self.numa_nodes.is_empty() {
                out.push_str(&indent(&self.node_table(), width + 2));
            }
        }
        out.push_str("\nsources (best first):\n");
        let checks: Vec<Vec<String>> = self
            .source_checks
            .iter()
            .map(|c| {
                vec![
                    c.kind.as_str().to_owned(),
                    if c.usable { "usable" } else { "no" }.to_owned(),
                    c.reason.clone(),
                ]
            })
            .collect();
        out.push_str(&indent(&align(&checks), 2));
        if !self.errors.is_empty() {
            out.push_str("\nerrors (the fields above that depend on these files are empty):\n");
            for e in &self.errors {
                let _ = writeln!(out, "  {e}");
            }
        }
        out
    }

    fn damon_line(&self) -> String {
        let d = &self.damon;
        if !d.present {
            return format!("not present ({})", d.operations_source);
        }
        if d.busy {
            let pids: Vec<String> = d.busy_kdamonds.iter().map(u32::to_string).collect();
            format!(
                "present, BUSY: kdamond pid {} running, not started by memtide (memtide leaves it alone)",
                if pids.is_empty() {
                    "unknown".to_owned()
                } else {
                    pids.join(", ")
                }
            )
        } else if d.nr_kdamonds > 0 {
            format!(
                "present, not busy, but {} idle kdamond(s) configured by someone else",
                d.nr_kdamonds
            )
        } else {
            "present, free (no kdamond)".to_owned()
        }
    }

    fn numa_line(&self) -> String {
        let with_memory = self
            .numa_nodes
            .iter()
            .filter(|n| n.memory_bytes > 0)
            .count();
        match self.numa_nodes.len() {
            0 => "unknown (node information unreadable)".to_owned(),
            1 => "one NUMA node: nothing to migrate to".to_owned(),
            n if with_memory < 2 => {
                format!("{n} nodes, but only {with_memory} with memory: nothing to migrate to")
            }
            n => {
                let tiers: std::collections::BTreeSet<_> =
                    self.numa_nodes.iter().filter_map(|n| n.tier).collect();
                match tiers.len() {
                    0 => format!("{n} nodes (no memory tier information)"),
                    1 => format!("{n} nodes in one memory tier"),
                    t => format!("{n} nodes in {t} memory tiers"),
                }
            }
        }
    }

    fn node_table(&self) -> String {
        let mut rows = vec![vec![
            "node".to_owned(),
            "cpus".to_owned(),
            "memory".to_owned(),
            "free".to_owned(),
            "tier".to_owned(),
        ]];
        for n in &self.numa_nodes {
            rows.push(vec![
                n.id.to_string(),
                if n.cpus.is_empty() {
                    "none (memory only)".to_owned()
                } else {
                    sysfs::format_list(&n.cpus)
                },
                gib(n.memory_bytes),
                gib(n.free_bytes),
                n.tier.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            ]);
        }
        align(&rows)
    }
}

fn opt(value: Option<&str>) -> String {
    value.map_or_else(|| "unknown (file missing)".to_owned(), str::to_owned)
}

fn list_or_none(items: &[u32]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        sysfs::format_list(items)
    }
}

/// Display only: two decimals of GiB (the f64 rounding is far below that).
fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// Aligns rows into columns separated by two spaces (last column unpadded).
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn indent(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
}
