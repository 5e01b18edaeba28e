//! The agent-wide metrics, published once a second: samples and drops of the source and the
//! ingest path, the BPF programs' run time, the tiers' capacity and the engines' memory.
//! (Each target publishes its own after every epoch: `target::publish`.) The agent lends what
//! they are read from ([`Readings`]); nothing here knows the agent.

use std::{
    collections::BTreeMap,
    sync::{RwLock, atomic::Ordering},
    time::Duration,
};

use memtide_core::{ingest::IngestCounters, units::Tier};
use memtide_host::{
    sysfs::HostRoot,
    topology::{Topology, costs::NodeCost, node_sets::TierNodeSets},
};

use super::{http::CpuMeter, status::AgentStatus};
use crate::{
    cpu_time::CpuAccount,
    metrics::{Metrics, NodeKind, NodeTier, ProgramLabel, SourceLabel, SourceReason},
    sources::HotnessSource,
};

/// What the agent-wide metrics are read from, lent by the agent for one publication.
pub(super) struct Readings<'a> {
    pub(super) metrics: &'a Metrics,
    pub(super) source: Option<&'a dyn HotnessSource>,
    /// A source samples (what `/readyz` answers).
    pub(super) source_running: bool,
    pub(super) ingest: &'a IngestCounters,
    /// The sampling path's CPU time, mirrored into `memtide_sampling_cpu_seconds_total`.
    pub(super) sampling_cpu: &'a CpuAccount,
    /// Every process is observed: the BPF filter is off, so nothing is unrouted.
    pub(super) observe_all: bool,
    pub(super) tiers: &'a TierNodeSets,
    pub(super) root: &'a HostRoot,
    pub(super) status: &'a RwLock<AgentStatus>,
}

/// Last values pushed into counters that mirror cumulative kernel or ingest counts.
#[derive(Debug, Default)]
pub(super) struct Published {
    samples: u64,
    drops: BTreeMap<String, u64>,
    bpf_nanos: BTreeMap<String, u128>,
    /// The HTTP server thread's CPU time, and what of it the metric has.
    http_cpu: Option<(CpuMeter, Duration)>,
    /// What of the sampling path's CPU time the metric has.
    sampling_cpu: Duration,
}

impl Published {
    /// Mirrors `meter` (the HTTP server thread's CPU time) into `memtide_http_cpu_seconds_total`.
    pub(super) fn watch_http(&mut self, meter: CpuMeter) {
        self.http_cpu = Some((meter, Duration::ZERO));
    }
}

impl Published {
    pub(super) fn publish(&mut self, r: &Readings<'_>) {
        let kind = r.source.map_or("none", |source| source.kind().as_str());
        r.metrics
            .source_running
            .get_or_create(&SourceLabel {
                source: kind.to_owned(),
            })
            .set(i64::from(r.source_running));
        self.publish_samples(r, kind);
        self.publish_drops(r, kind);
        self.publish_bpf_time(r);
        let sampling_cpu = r.sampling_cpu.total();
        r.metrics
            .sampling_cpu_seconds
            .inc_by(sampling_cpu.saturating_sub(self.sampling_cpu).as_secs_f64());
        self.sampling_cpu = sampling_cpu.max(self.sampling_cpu);
        if let Some((meter, published)) = &mut self.http_cpu {
            let now = meter.get();
            r.metrics
                .http_cpu_seconds
                .inc_by(now.saturating_sub(*published).as_secs_f64());
            *published = now.max(*published);
        }
        match Topology::read(r.root) {
            Ok(topology) => publish_tiers(r, &topology),
            Err(error) => tracing::debug!(%error, "reading the topology for the tier gauges"),
        }
        let engine_memory: u64 = read_status(r.status)
            .targets
            .iter()
            .map(|t| t.engine_memory_bytes)
            .sum();
        r.metrics
            .engine_memory_bytes
            .set(i64::try_from(engine_memory).unwrap_or(i64::MAX));
    }

    /// Every record the source delivered, dropped on a full channel or had no target for.
    fn publish_samples(&mut self, r: &Readings<'_>, kind: &str) {
        let counters = r.ingest;
        let decoded = counters.delivered.load(Ordering::Relaxed)
            + counters.dropped_channel_full.load(Ordering::Relaxed)
            + counters.unrouted.load(Ordering::Relaxed);
        let delta = decoded.saturating_sub(self.samples);
        self.samples = decoded;
        r.metrics
            .samples
            .get_or_create(&SourceLabel {
                source: kind.to_owned(),
            })
            .inc_by(delta);
    }

    /// Drops by reason: the source's own (in BPF) and the ingest path's.
    fn publish_drops(&mut self, r: &Readings<'_>, kind: &str) {
        let mut drops: BTreeMap<String, u64> = r
            .source
            .map(|source| {
                source
                    .drop_counts()
                    .into_iter()
                    .map(|(reason, count)| (reason.to_owned(), count))
                    .collect()
            })
            .unwrap_or_default();
        let counters = r.ingest;
        drops.extend(counters.losses("channel_full"));
        if !r.observe_all {
            drops.insert(
                "unrouted".to_owned(),
                counters.unrouted.load(Ordering::Relaxed),
            );
        }
        for (reason, count) in drops {
            // With observe-all the BPF filter is off: not_target stays 0 by construction.
            let last = self.drops.entry(reason.clone()).or_insert(0);
            let delta = count.saturating_sub(*last);
            *last = count;
            r.metrics
                .samples_dropped
                .get_or_create(&SourceReason {
                    source: kind.to_owned(),
                    reason,
                })
                .inc_by(delta);
        }
    }

    fn publish_bpf_time(&mut self, r: &Readings<'_>) {
        let Some(source) = r.source else {
            return;
        };
        for program in source.program_stats() {
            let nanos = program.run_time.as_nanos();
            let last = self.bpf_nanos.entry(program.name.clone()).or_insert(0);
            let delta = nanos.saturating_sub(*last);
            *last = nanos;
            #[expect(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
            r.metrics
                .bpf_run_seconds
                .get_or_create(&ProgramLabel {
                    program: program.name,
                })
                .inc_by(delta as f64 / 1e9);
        }
    }
}

fn publish_tiers(r: &Readings<'_>, topology: &Topology) {
    for node in &topology.nodes {
        // A node without memory is in neither set; it keeps the "fast" label it always had,
        // so no dashboard's series changes its labels (its capacity is 0 either way).
        let tier = match r.tiers.tier_of(node.id) {
            Some(Tier::Slow) => "slow",
            Some(Tier::Fast) | None => "fast",
        };
        let labels = NodeTier {
            node: node.id.to_string(),
            tier: tier.to_owned(),
        };
        r.metrics
            .tier_capacity_bytes
            .get_or_create(&labels)
            .set(i64::try_from(node.memory_bytes).unwrap_or(i64::MAX));
        r.metrics
            .tier_free_bytes
            .get_or_create(&labels)
            .set(i64::try_from(node.free_bytes).unwrap_or(i64::MAX));
    }
}

/// The nodes' access costs (`memtide_tier_latency_seconds`,
/// `memtide_tier_bandwidth_bytes_per_second`). They follow from the configuration and the
/// topology read at start, so they are set before the first scrape is served and again only
/// when either changes (`Agent::publish_node_costs`), not in the once-a-second publication.
pub(super) fn publish_node_costs(metrics: &Metrics, node_costs: &BTreeMap<u32, NodeCost>) {
    for cost in node_costs.values() {
        let kinds = [
            (
                "read",
                cost.read_latency_ns,
                cost.read_bandwidth_bytes_per_s,
            ),
            (
                "write",
                cost.write_latency_ns,
                cost.write_bandwidth_bytes_per_s,
            ),
        ];
        for (kind, latency_ns, bandwidth) in kinds {
            let labels = NodeKind {
                node: cost.node.to_string(),
                kind: kind.to_owned(),
            };
            if let Some(ns) = latency_ns {
                metrics
                    .tier_latency_seconds
                    .get_or_create(&labels)
                    .set(ns / 1e9);
            }
            if let Some(bytes_per_s) = bandwidth {
                metrics
                    .tier_bandwidth_bytes_per_second
                    .get_or_create(&labels)
                    .set(bytes_per_s);
            }
        }
    }
}

pub(super) fn read_status(status: &RwLock<AgentStatus>) -> AgentStatus {
    match status.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}
