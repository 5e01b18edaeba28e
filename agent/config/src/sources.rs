//! `[sources]`: where hotness comes from, and `[sources.damon]`, the kdamond memtide starts.

use std::{fmt, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::Problem;

/// One kind of hotness source: what `[sources] order` lists, and what the host's probe ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Pebs,
    Ibs,
    Spe,
    Damon,
    SwFault,
}

impl SourceKind {
    /// All kinds, best first.
    pub const ALL: [Self; 5] = [Self::Pebs, Self::Ibs, Self::Spe, Self::Damon, Self::SwFault];

    /// The name used in configs, metrics labels and JSON.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pebs => "pebs",
            Self::Ibs => "ibs",
            Self::Spe => "spe",
            Self::Damon => "damon",
            Self::SwFault => "swfault",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[sources]`: where hotness comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourcesConfig {
    /// Sources to try, in order; empty means "the best this machine offers" (`memtide probe`
    /// prints that ranking). The first that starts is used.
    pub order: Vec<SourceKind>,
    /// Bytes of the BPF sample ring (a power of two, at least 4096).
    pub ring_bytes: u32,
    /// CPU budget of the whole sampling path, in percent of one core; sample periods are
    /// chosen from it.
    pub cpu_budget_percent: f64,
    /// DAMON monitoring attributes (the `damon` source).
    pub damon: DamonMonitorConfig,
    /// Samples per batch sent from the ingest task to a target's engine.
    pub batch: usize,
    /// Batches queued per target before new ones are dropped (and counted).
    pub queue_batches: usize,
}

impl SourcesConfig {
    /// Sizes, budgets and queues that cannot work, then the kdamond's attributes.
    pub(crate) fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let ring = self.ring_bytes;
        if ring < 4096 || !ring.is_power_of_two() {
            problems.push(Problem::new(
                "sources.ring_bytes",
                format!("{ring} must be a power of two of at least 4096"),
            ));
        }
        if !(self.cpu_budget_percent > 0.0 && self.cpu_budget_percent <= 100.0) {
            problems.push(Problem::new(
                "sources.cpu_budget_percent",
                format!("{} must be in (0, 100]", self.cpu_budget_percent),
            ));
        }
        if self.batch == 0 || self.queue_batches == 0 {
            problems.push(Problem::new(
                "sources.batch",
                "batch and queue_batches must be at least 1".to_owned(),
            ));
        }
        problems.extend(self.damon.problems());
        problems
    }
}

impl Default for SourcesConfig {
    fn default() -> Self {
        Self {
            order: Vec::new(),
            ring_bytes: 4 << 20,
            cpu_budget_percent: 1.0,
            damon: DamonMonitorConfig::default(),
            batch: 512,
            queue_batches: 64,
        }
    }
}

/// Monitoring attributes written to the kdamond's context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DamonMonitorConfig {
    /// Sampling interval: how often DAMON checks one page per region for access (µs).
    /// Default 5000 (5 ms), DAMON's own default.
    pub sample_us: u64,
    /// Aggregation interval: regions are reported (tracepoint) once per interval (µs).
    /// Default 100000 (100 ms); `nr_accesses` then ranges over 0..=aggr_us/sample_us.
    pub aggr_us: u64,
    /// How often DAMON re-reads the targets' memory maps (µs). Default 1000000 (1 s).
    pub update_us: u64,
    /// Minimum number of regions, a floor that region_bytes raises. DAMON never grows a region
    /// past the monitored span divided by this, and a process's span runs from its first
    /// mapping to its last less the two widest gaps: it includes the heap's randomised offset
    /// (up to 1 GiB on x86-64) and reserved but unused address space. Hot pages are told from
    /// cold neighbours only as finely as span ÷ min_regions, at a CPU cost that grows with the
    /// number of regions. Default 10.
    pub min_regions: u32,
    /// Maximum number of regions per target; bounds DAMON's overhead. Default 1000.
    pub max_regions: u32,
    /// The largest region the agent lets DAMON keep: it raises the minimum number of regions
    /// to the targets' monitored span divided by this, up to half of max_regions (DAMON splits
    /// its regions only below that count, and grows to it by itself where their accesses
    /// differ). A region reaching from a hot set into cold memory is reported with one access
    /// count, and the superpages it covers move with the hot ones; at 10 regions and a
    /// randomised heap one reached 18 MiB into the cold rest. 0: min_regions alone decides.
    /// Default 2097152 (2 MiB, the superpage moves are made of).
    pub region_bytes: u64,
    /// Where the agent records the kdamond it started (its own pid and start time, the
    /// kdamond's thread and targets), so that after a SIGKILL the next agent can tell the
    /// kdamond left behind from anyone else's and remove it instead of finding DAMON busy. Must
    /// survive a restart of the agent (systemd: `RuntimeDirectory=memtide` with
    /// `RuntimeDirectoryPreserve=restart`; Kubernetes: a `hostPath`, as deploy/kubernetes does). Empty: keep no record (a
    /// killed agent's kdamond then blocks DAMON until removed by hand). Default
    /// "/run/memtide/kdamond".
    pub owner_file: PathBuf,
}

impl Default for DamonMonitorConfig {
    fn default() -> Self {
        Self {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_regions: 10,
            max_regions: 1_000,
            region_bytes: 2 << 20,
            owner_file: PathBuf::from("/run/memtide/kdamond"),
        }
    }
}

impl DamonMonitorConfig {
    /// Intervals out of order, a relative record path, a region count DAMON refuses.
    fn problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        if self.sample_us == 0 || self.aggr_us < self.sample_us {
            problems.push(Problem::new(
                "sources.damon.aggr_us",
                format!(
                    "aggregation interval {} µs must be at least the sampling interval {} µs (> 0)",
                    self.aggr_us, self.sample_us
                ),
            ));
        }
        if !self.owner_file.as_os_str().is_empty() && !self.owner_file.is_absolute() {
            problems.push(Problem::new(
                "sources.damon.owner_file",
                format!(
                    "{} is not an absolute path; give one (default /run/memtide/kdamond) or \"\" to keep no record",
                    self.owner_file.display()
                ),
            ));
        }
        if self.min_regions < 3 || self.min_regions > self.max_regions {
            problems.push(Problem::new(
                "sources.damon.min_regions",
                format!(
                    "need 3 <= min_regions ({}) <= max_regions ({})",
                    self.min_regions, self.max_regions
                ),
            ));
        }
        if self.region_bytes != 0 && self.region_bytes < 4096 {
            problems.push(Problem::new(
                "sources.damon.region_bytes",
                format!(
                    "{} bytes is below a page; give at least 4096 (default 2097152) or 0 to let min_regions alone decide",
                    self.region_bytes
                ),
            ));
        }
        problems
    }

    /// The largest `nr_accesses` a region can report: samples per aggregation interval.
    #[must_use]
    pub fn max_nr_accesses(&self) -> u32 {
        u32::try_from(self.aggr_us / self.sample_us.max(1)).unwrap_or(u32::MAX)
    }
}
