//! What `/status` returns and `memtide status` prints: one row per target.

use std::{collections::BTreeMap, fmt::Write as _};

use memtide_host::topology::costs::NodeCost;
use serde::{Deserialize, Serialize};

/// The agent as a whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub version: String,
    /// The hotness source in use (`none` when none could start).
    pub source: String,
    /// Why memtide is not migrating, when it is not (observe mode, one node, ...).
    pub observe_reason: Option<String>,
    /// Why the agent is not ready, when it is not (what `/readyz` answers with its 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    pub fast_nodes: Vec<u32>,
    pub slow_nodes: Vec<u32>,
    /// What each node costs to access, and where that came from (`hmat`, `slit`, `config`).
    #[serde(default)]
    pub node_costs: Vec<NodeCost>,
    pub targets: Vec<TargetStatus>,
}

/// One managed process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetStatus {
    /// The metrics label (`comm:pid`).
    pub target: String,
    pub pid: u32,
    /// Resident bytes by tier (`fast`, `slow`), from move_pages queries.
    pub managed_bytes: BTreeMap<String, u64>,
    /// Bytes of the hot set.
    pub hot_bytes: u64,
    /// Share of the last epoch's sampled accesses served by the fast tier.
    pub fast_hit_ratio: Option<f64>,
    pub granularity_bytes: u64,
    pub epoch_seconds: f64,
    /// Epochs planned so far (each one plan, executed unless observing).
    #[serde(default)]
    pub epochs: u64,
    pub samples: u64,
    /// Samples per second the target is getting (over the last 10 s or more; DAMON: region
    /// reports).
    #[serde(default)]
    pub samples_per_second: Option<f64>,
    /// The same per GiB of the target's resident memory: the density its placement rests on.
    #[serde(default)]
    pub samples_per_second_per_gib: Option<f64>,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    pub would_promote_bytes: u64,
    pub would_demote_bytes: u64,
    /// Memory held by this target's engine.
    pub engine_memory_bytes: u64,
    /// Bytes of the fast tier the target may hold: its limit, or its fair share while targets
    /// compete for the tier; `None` while neither bounds it.
    #[serde(default)]
    pub fast_share_bytes: Option<u64>,
    /// Why: `limit (cgroup tenants/a)` or `fair share`.
    #[serde(default)]
    pub fast_share_reason: Option<String>,
    /// The most recent problems, newest last.
    pub last_errors: Vec<String>,
}

fn bytes(value: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value;
    let mut unit = 0;
    while scaled >= 10 * 1024 && unit < UNITS.len() - 1 {
        scaled /= 1024;
        unit += 1;
    }
    format!("{scaled} {}", UNITS[unit])
}

/// A rate with three significant digits or so: production densities are fractions of a
/// sample per second per GiB, test machines' thousands.
fn rate(value: f64) -> String {
    match value {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 1.0 => format!("{v:.2}"),
        v => format!("{v:.3}"),
    }
}

impl AgentStatus {
    /// The table `memtide status` prints.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        self.write_header(&mut out);
        if self.targets.is_empty() {
            let _ = writeln!(out, "no targets");
            return out;
        }
        let _ = writeln!(
            out,
            "{:<28} {:>10} {:>10} {:>10} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10}",
            "TARGET",
            "FAST",
            "SLOW",
            "HOT",
            "HIT%",
            "GRAN",
            "EPOCH",
            "SAMPLES",
            "PROMOTED",
            "DEMOTED"
        );
        let mut parenthesised = false;
        for t in &self.targets {
            parenthesised |= t.write_row(&mut out);
        }
        if parenthesised {
            let _ = writeln!(out, "(parenthesised: would have moved, in observe mode)");
        }
        out
    }

    /// The agent's lines: version, source and tiers, why it is not ready or not migrating,
    /// and what each node costs.
    fn write_header(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "memtide {}  source: {}  fast nodes: {:?}  slow nodes: {:?}",
            self.version, self.source, self.fast_nodes, self.slow_nodes
        );
        if let Some(reason) = &self.not_ready {
            let _ = writeln!(out, "not ready: {reason}");
        }
        if let Some(reason) = &self.observe_reason {
            let _ = writeln!(out, "not migrating: {reason}");
        }
        for cost in &self.node_costs {
            let ns = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ns"));
            let bw = |v: Option<f64>| {
                v.map_or_else(|| "-".to_owned(), |v| format!("{}/s", bytes(v as u64)))
            };
            let _ = writeln!(
                out,
                "node {}: read {} {}, write {} {} ({})",
                cost.node,
                ns(cost.read_latency_ns),
                bw(cost.read_bandwidth_bytes_per_s),
                ns(cost.write_latency_ns),
                bw(cost.write_bandwidth_bytes_per_s),
                cost.source.as_str()
            );
        }
    }
}

impl TargetStatus {
    /// The target's row and the lines under it. Returns whether the moves shown are the ones
    /// observe mode would have made (parenthesised).
    fn write_row(&self, out: &mut String) -> bool {
        let tier = |name: &str| bytes(self.managed_bytes.get(name).copied().unwrap_or(0));
        let hit = self
            .fast_hit_ratio
            .map_or_else(|| "-".to_owned(), |ratio| format!("{:.1}", ratio * 100.0));
        let would_have = self.promoted_bytes + self.demoted_bytes == 0
            && self.would_promote_bytes + self.would_demote_bytes > 0;
        let (promoted, demoted) = if would_have {
            (
                format!("({})", bytes(self.would_promote_bytes)),
                format!("({})", bytes(self.would_demote_bytes)),
            )
        } else {
            (bytes(self.promoted_bytes), bytes(self.demoted_bytes))
        };
        let _ = writeln!(
            out,
            "{:<28} {:>10} {:>10} {:>10} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10}",
            self.target,
            tier("fast"),
            tier("slow"),
            bytes(self.hot_bytes),
            hit,
            bytes(self.granularity_bytes),
            epoch(self.epoch_seconds),
            self.samples,
            promoted,
            demoted,
        );
        if let Some(per_second) = self.samples_per_second {
            let per_gib = self
                .samples_per_second_per_gib
                .map_or_else(String::new, |v| format!(", {} per GiB", rate(v)));
            let _ = writeln!(out, "    sampled: {} samples/s{per_gib}", rate(per_second));
        }
        if let (Some(share), Some(reason)) = (self.fast_share_bytes, &self.fast_share_reason) {
            let _ = writeln!(out, "    fast-tier share: {} ({reason})", bytes(share));
        }
        for error in &self.last_errors {
            let _ = writeln!(out, "    last error: {error}");
        }
        would_have
    }
}

/// An epoch as people read it: milliseconds below a second (epochs start at 10 ms, which
/// one decimal of a second shows as 0.0s), seconds from there.
fn epoch(seconds: f64) -> String {
    if seconds < 0.9995 {
        format!("{:.0}ms", seconds * 1000.0)
    } else {
        format!("{seconds:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_one_row_per_target_and_the_observe_reason() {
        let status = AgentStatus {
            version: "0.1.0".into(),
            source: "swfault".into(),
            observe_reason: Some("one NUMA node".into()),
            not_ready: None,
            fast_nodes: vec![0],
            slow_nodes: vec![],
            node_costs: vec![NodeCost {
                node: 0,
                read_latency_ns: Some(80.0),
                write_latency_ns: Some(80.0),
                read_bandwidth_bytes_per_s: None,
                write_bandwidth_bytes_per_s: None,
                source: memtide_host::topology::costs::CostSource::Slit,
            }],
            targets: vec![TargetStatus {
                target: "workload:42".into(),
                pid: 42,
                managed_bytes: [("fast".to_owned(), 64 << 20)].into(),
                hot_bytes: 1 << 20,
                fast_hit_ratio: Some(1.0),
                granularity_bytes: 4096,
                epoch_seconds: 1.5,
                samples: 1000,
                samples_per_second: Some(12.5),
                samples_per_second_per_gib: Some(0.0625),
                would_promote_bytes: 8192,
                fast_share_bytes: Some(32 << 20),
                fast_share_reason: Some("limit (cgroup tenants/a)".into()),
                last_errors: vec!["move_pages: EBUSY".into()],
                ..TargetStatus::default()
            }],
        };
        let table = status.to_table();
        assert!(table.contains("not migrating: one NUMA node"), "{table}");
        assert!(!table.contains("not ready"), "{table}");
        let idle = AgentStatus {
            not_ready: Some("no hotness source runs".into()),
            ..AgentStatus::default()
        };
        assert!(
            idle.to_table()
                .contains("not ready: no hotness source runs\n")
        );
        assert!(
            table.contains("node 0: read 80 ns -, write 80 ns - (slit)"),
            "{table}"
        );
        let row = table
            .lines()
            .find(|l| l.starts_with("workload:42"))
            .expect("row");
        assert!(
            row.contains("64 MiB") && row.contains("100.0") && row.contains("(8192 B)"),
            "{row}"
        );
        assert!(table.contains("last error: move_pages: EBUSY"));
        assert!(
            table.contains("    sampled: 12.5 samples/s, 0.062 per GiB"),
            "{table}"
        );
        assert!(
            table.contains("    fast-tier share: 32 MiB (limit (cgroup tenants/a))"),
            "{table}"
        );
        assert!(row.contains("   1.5s "), "{row}");
        assert!(
            table.contains("(parenthesised: would have moved"),
            "{table}"
        );

        // What moved is not parenthesised, nor explained; a short epoch shows in ms.
        let mut moved = status.clone();
        moved.targets[0].promoted_bytes = 4096;
        moved.targets[0].epoch_seconds = 0.01;
        let table = moved.to_table();
        assert!(!table.contains("parenthesised"), "{table}");
        assert!(table.contains("    10ms "), "{table}");
        assert_eq!(epoch(0.25), "250ms");
        assert_eq!(epoch(2.0), "2.0s");

        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<AgentStatus>(&json).unwrap(), status);
    }
}
