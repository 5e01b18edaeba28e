//! The agent-wide metrics, published once a second: samples and drops of the source and the
//! ingest path, the BPF programs' run time, the tiers' capacity and the engines' memory.
//! (Each target publishes its own after every epoch: `target::publish`.)

use std::{collections::BTreeMap, sync::atomic::Ordering, time::Duration};

use memtide_host::topology::Topology;

use super::{agent::Agent, http::CpuMeter, status::AgentStatus};
use crate::metrics::{NodeKind, NodeTier, ProgramLabel, SourceLabel, SourceReason};

/// Last values pushed into counters that mirror cumulative kernel or ingest counts.
#[derive(Debug, Default)]
pub(super) struct Published {
    samples: u64,
    drops: BTreeMap<String, u64>,
    bpf_nanos: BTreeMap<String, u128>,
    /// The HTTP server thread's CPU time, and what of it the metric has.
    http_cpu: Option<(CpuMeter, Duration)>,
}

impl Published {
    /// Mirrors `meter` (the HTTP server thread's CPU time) into `memtide_http_cpu_seconds_total`.
    pub(super) fn watch_http(&mut self, meter: CpuMeter) {
        self.http_cpu = Some((meter, Duration::ZERO));
    }
}

impl Agent {
    pub(super) fn publish_metrics(&mut self) {
        let kind = self
            .source
            .as_ref()
            .map_or("none", |source| source.kind().as_str())
            .to_owned();
        let running = i64::from(self.not_ready().is_none());
        self.metrics
            .source_running
            .get_or_create(&SourceLabel {
                source: kind.clone(),
            })
            .set(running);
        self.publish_samples(&kind);
        self.publish_drops(&kind);
        self.publish_bpf_time();
        if let Some((meter, published)) = &mut self.published.http_cpu {
            let now = meter.get();
            self.metrics
                .http_cpu_seconds
                .inc_by(now.saturating_sub(*published).as_secs_f64());
            *published = now.max(*published);
        }
        match Topology::read(&self.root) {
            Ok(topology) => self.publish_tiers(&topology),
            Err(error) => tracing::debug!(%error, "reading the topology for the tier gauges"),
        }
        let engine_memory: u64 = read_status(&self.status)
            .targets
            .iter()
            .map(|t| t.engine_memory_bytes)
            .sum();
        self.metrics
            .engine_memory_bytes
            .set(i64::try_from(engine_memory).unwrap_or(i64::MAX));
    }

    /// Every record the source delivered, dropped on a full channel or had no target for.
    fn publish_samples(&mut self, kind: &str) {
        let counters = &self.ingest_counters;
        let decoded = counters.delivered.load(Ordering::Relaxed)
            + counters.dropped_channel_full.load(Ordering::Relaxed)
            + counters.unrouted.load(Ordering::Relaxed);
        let delta = decoded.saturating_sub(self.published.samples);
        self.published.samples = decoded;
        self.metrics
            .samples
            .get_or_create(&SourceLabel {
                source: kind.to_owned(),
            })
            .inc_by(delta);
    }

    /// Drops by reason: the source's own (in BPF) and the ingest path's.
    fn publish_drops(&mut self, kind: &str) {
        let mut drops: BTreeMap<String, u64> = self
            .source
            .as_ref()
            .map(|source| {
                source
                    .drop_counts()
                    .into_iter()
                    .map(|(reason, count)| (reason.to_owned(), count))
                    .collect()
            })
            .unwrap_or_default();
        let counters = &self.ingest_counters;
        drops.insert(
            "channel_full".to_owned(),
            counters.dropped_channel_full.load(Ordering::Relaxed),
        );
        drops.insert(
            "malformed".to_owned(),
            counters.malformed.load(Ordering::Relaxed),
        );
        if !self.observe_all {
            drops.insert(
                "unrouted".to_owned(),
                counters.unrouted.load(Ordering::Relaxed),
            );
        }
        for (reason, count) in drops {
            // With observe-all the BPF filter is off: not_target stays 0 by construction.
            let last = self.published.drops.entry(reason.clone()).or_insert(0);
            let delta = count.saturating_sub(*last);
            *last = count;
            self.metrics
                .samples_dropped
                .get_or_create(&SourceReason {
                    source: kind.to_owned(),
                    reason,
                })
                .inc_by(delta);
        }
    }

    fn publish_bpf_time(&mut self) {
        let Some(source) = &self.source else {
            return;
        };
        for program in source.program_stats() {
            let nanos = program.run_time.as_nanos();
            let last = self
                .published
                .bpf_nanos
                .entry(program.name.clone())
                .or_insert(0);
            let delta = nanos.saturating_sub(*last);
            *last = nanos;
            #[expect(clippy::cast_precision_loss, reason = "nanoseconds to seconds")]
            self.metrics
                .bpf_run_seconds
                .get_or_create(&ProgramLabel {
                    program: program.name,
                })
                .inc_by(delta as f64 / 1e9);
        }
    }

    fn publish_tiers(&self, topology: &Topology) {
        for node in &topology.nodes {
            let tier = if self.tiered.classes.slow.contains(&node.id) {
                "slow"
            } else {
                "fast"
            };
            let labels = NodeTier {
                node: node.id.to_string(),
                tier: tier.to_owned(),
            };
            self.metrics
                .tier_capacity_bytes
                .get_or_create(&labels)
                .set(i64::try_from(node.memory_bytes).unwrap_or(i64::MAX));
            self.metrics
                .tier_free_bytes
                .get_or_create(&labels)
                .set(i64::try_from(node.free_bytes).unwrap_or(i64::MAX));
        }
        for cost in self.node_costs().into_values() {
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
                    self.metrics
                        .tier_latency_seconds
                        .get_or_create(&labels)
                        .set(ns / 1e9);
                }
                if let Some(bytes_per_s) = bandwidth {
                    self.metrics
                        .tier_bandwidth_bytes_per_second
                        .get_or_create(&labels)
                        .set(bytes_per_s);
                }
            }
        }
    }
}

pub(super) fn read_status(status: &std::sync::RwLock<AgentStatus>) -> AgentStatus {
    match status.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}
