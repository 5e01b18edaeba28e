//! `memtide probe`'s table for people: one line per component, the NUMA nodes under their
//! line, the sources with why each is usable or not, and the files that could not be read.

use std::fmt::Write as _;

use super::Probe;
use crate::{
    sysfs,
    topology::{self, ThpMode},
};

impl Probe {
    /// The human-readable report.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut rows = self.machine_rows();
        rows.extend(self.memory_rows());
        rows.extend(self.source_rows());
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

    /// The kernel, BPF, the PMUs and DAMON.
    fn machine_rows(&self) -> Vec<(&'static str, String)> {
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
        rows
    }

    /// NUMA nodes, memory tiers and the kernel's memory-management settings.
    fn memory_rows(&self) -> Vec<(&'static str, String)> {
        let mut rows: Vec<(&str, String)> = Vec::new();
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
        rows
    }

    /// The hotness sources that are usable, and the one `memtide run` would take.
    fn source_rows(&self) -> Vec<(&'static str, String)> {
        let mut rows: Vec<(&str, String)> = Vec::new();
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
        rows
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
