//! Prometheus metrics. One registry built at start-up; every family is documented in
//! docs/metrics.md (a test keeps the two in step). Labels never carry addresses, and carry a
//! process id only inside the `target` label, whose number is bounded by `targets.max_targets`.
//!
//! This file holds the families, their names and help, and the series a target adds and
//! removes; [`labels`] the label sets that key them; [`exposition`] what a scrape reads.

mod exposition;
mod labels;

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use self::{exposition::ProcessCollector, labels::VersionLabel};
pub use self::{
    exposition::{CONTENT_TYPE, TEXT_CONTENT_TYPE, encode, to_prometheus_text},
    labels::{
        Migrated, NodeKind, NodeTier, PageResult, ProgramLabel, Reason, SourceLabel, SourceReason,
        TargetDirection, TargetLabel, TargetTier,
    },
};

type GaugeF64 = Gauge<f64, AtomicU64>;
pub type CounterF64 = Counter<f64, AtomicU64>;

/// Runs `work` and adds the CPU time the calling thread spent in it to `counter` (seconds):
/// how the agent measures what each of its parts costs (sampling, epoch steps, migration),
/// whichever threads run them.
pub fn charge_thread_cpu<T>(counter: &CounterF64, work: impl FnOnce() -> T) -> T {
    let (result, spent) = crate::cpu_time::thread_cpu_of(work);
    counter.inc_by(spent.as_secs_f64());
    result
}

/// Every metric the agent exports. Cheap to clone (each family is an `Arc` inside).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub fast_tier_hit_ratio: Family<TargetLabel, GaugeF64>,
    pub accesses_sampled: Family<TargetTier, Counter>,
    pub samples: Family<SourceLabel, Counter>,
    pub samples_dropped: Family<SourceReason, Counter>,
    pub migrated_bytes: Family<Migrated, Counter>,
    pub migration_pages: Family<PageResult, Counter>,
    pub migration_failures: Family<Reason, Counter>,
    pub pages_skipped: Family<Reason, Counter>,
    pub would_migrate_bytes: Family<TargetDirection, Counter>,
    pub epoch_seconds: Family<TargetLabel, GaugeF64>,
    pub granularity_bytes: Family<TargetLabel, Gauge>,
    pub hot_bytes: Family<TargetTier, Gauge>,
    pub managed_bytes: Family<TargetTier, Gauge>,
    pub fast_share_bytes: Family<TargetLabel, Gauge>,
    pub tier_capacity_bytes: Family<NodeTier, Gauge>,
    pub tier_free_bytes: Family<NodeTier, Gauge>,
    pub tier_latency_seconds: Family<NodeKind, GaugeF64>,
    pub tier_bandwidth_bytes_per_second: Family<NodeKind, GaugeF64>,
    pub engine_memory_bytes: Gauge,
    pub bpf_run_seconds: Family<ProgramLabel, CounterF64>,
    pub sample_period_scale: Family<SourceLabel, GaugeF64>,
    pub store_period_ratio: Family<SourceLabel, GaugeF64>,
    pub engine_untracked_samples: Family<TargetLabel, Counter>,
    pub target_samples: Family<TargetLabel, Counter>,
    pub target_samples_per_second: Family<TargetLabel, GaugeF64>,
    pub target_samples_per_second_per_gib: Family<TargetLabel, GaugeF64>,
    pub sampling_cpu_ratio: GaugeF64,
    pub migration_cpu_seconds: CounterF64,
    pub epoch_cpu_seconds: CounterF64,
    pub sampling_cpu_seconds: CounterF64,
    pub http_cpu_seconds: CounterF64,
    pub source_restarts: Family<SourceReason, Counter>,
    pub source_running: Family<SourceLabel, Gauge>,
    pub sampling_cpu_budget_ratio: GaugeF64,
    pub targets_refused: Family<Reason, Counter>,
    pub opted_in_pods: Gauge,
    pub pod_list_errors: Counter,
    pub kube_api_denied: Family<Reason, Counter>,
    build_info: Family<VersionLabel, Gauge>,
}

impl Metrics {
    /// Builds the families and registers them (plus process CPU and memory) in a new registry.
    #[must_use]
    pub fn new() -> (Self, Registry) {
        let metrics = Self::default();
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("memtide");
        metrics.register_targets(registry);
        metrics.register_migration(registry);
        metrics.register_sources(registry);
        metrics.register_machine(registry);
        let m = &metrics;
        registry.register("build_info", "memtide's version", m.build_info.clone());
        m.build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        // Failure reasons exist from the start at 0, so rates and dashboards see a series
        // before the first failure.
        for reason in [
            "ebusy", "enomem", "efault", "enoent", "eacces", "eagain", "eio", "einval",
        ] {
            m.migration_failures
                .get_or_create(&Reason {
                    reason: reason.to_owned(),
                })
                .inc_by(0);
        }
        // An alert on refusals needs the series before the first one.
        m.targets_refused
            .get_or_create(&Reason {
                reason: "max_targets".to_owned(),
            })
            .inc_by(0);
        for reason in ["unauthorized", "forbidden"] {
            m.kube_api_denied
                .get_or_create(&Reason {
                    reason: reason.to_owned(),
                })
                .inc_by(0);
        }
        for reason in ["mempolicy", "mlocked"] {
            m.pages_skipped
                .get_or_create(&Reason {
                    reason: reason.to_owned(),
                })
                .inc_by(0);
        }
        // Process metrics carry no prefix: the names every exporter uses.
        root.register_collector(Box::new(ProcessCollector));
        (metrics, root)
    }

    /// Per target: its accesses and hit ratio, epoch, granularity, hot and managed bytes, and its engine.
    fn register_targets(&self, registry: &mut Registry) {
        registry.register(
            "fast_tier_hit_ratio",
            "Share of sampled accesses of the target whose page was on a fast-tier node, over the last epoch",
            self.fast_tier_hit_ratio.clone(),
        );
        registry.register(
            "accesses_sampled",
            "Sampled accesses of the target by the tier their page was on",
            self.accesses_sampled.clone(),
        );
        registry.register(
            "epoch_seconds",
            "Current migration epoch of the target",
            self.epoch_seconds.clone(),
        );
        registry.register(
            "granularity_bytes",
            "Current migration granularity of the target",
            self.granularity_bytes.clone(),
        );
        registry.register(
            "hot_bytes",
            "Bytes of the target's hot set, by the tier they are on",
            self.hot_bytes.clone(),
        );
        registry.register(
            "managed_bytes",
            "Resident bytes of the target memtide manages, by tier",
            self.managed_bytes.clone(),
        );
        registry.register(
            "fast_share_bytes",
            "Bytes of the fast tier the target may hold: its [[targets.limits]] limit, or its fair share while targets compete for the tier; absent while neither bounds it",
            self.fast_share_bytes.clone(),
        );
        registry.register(
            "target_samples",
            "Samples the target's engine received (DAMON: region reports)",
            self.target_samples.clone(),
        );
        registry.register(
            "target_samples_per_second",
            "Samples per second the target is getting, over the last 10 s or more",
            self.target_samples_per_second.clone(),
        );
        registry.register(
            "target_samples_per_second_per_gib",
            "Samples per second per GiB of the target's resident memory: the sample density its placement rests on",
            self.target_samples_per_second_per_gib.clone(),
        );
        registry.register(
            "targets_refused",
            "Processes the agent would have managed but did not, by reason: max_targets (the [targets] max_targets limit was reached; max_targets_observing_all with no targets configured), exited (gone before it could be opened), cannot_open",
            self.targets_refused.clone(),
        );
        registry.register(
            "engine_untracked_samples",
            "Samples left out because the target's engine was at [engine] max_superpages",
            self.engine_untracked_samples.clone(),
        );
        registry.register(
            "engine_memory_bytes",
            "Memory held by the hotness engines of all targets",
            self.engine_memory_bytes.clone(),
        );
    }

    /// Pages moved between tiers, or that would have been in observe mode.
    fn register_migration(&self, registry: &mut Registry) {
        registry.register(
            "migrated_bytes",
            "Bytes moved between tiers, by direction and granularity",
            self.migrated_bytes.clone(),
        );
        registry.register(
            "migration_pages",
            "Pages the executor tried to move, by direction and result (moved, or the failure reason)",
            self.migration_pages.clone(),
        );
        registry.register(
            "migration_failures",
            "Pages that could not be moved, by reason (ebusy, enomem, efault, enoent, eacces, target_exited, ...)",
            self.migration_failures.clone(),
        );
        registry.register(
            "pages_skipped",
            "Resident pages memtide leaves where they are, by reason (mempolicy: a mapping the application placed with mbind or the hint library; mlocked: a mapping it locked), counted when first found",
            self.pages_skipped.clone(),
        );
        registry.register(
            "would_migrate_bytes",
            "Bytes the plan would have moved in observe mode, by direction",
            self.would_migrate_bytes.clone(),
        );
    }

    /// The hotness source: samples, drops, and what sampling costs.
    fn register_sources(&self, registry: &mut Registry) {
        registry.register(
            "source_running",
            "1 while the hotness source named by the label samples and delivers, 0 otherwise (source=\"none\": none could start); the agent is not ready (/readyz 503) while none runs",
            self.source_running.clone(),
        );
        registry.register(
            "sampling_cpu_budget_ratio",
            "The sampling path's CPU budget in cores ([sources] cpu_budget_percent / 100), the bound memtide_sampling_cpu_ratio is held to",
            self.sampling_cpu_budget_ratio.clone(),
        );
        registry.register(
            "samples",
            "Samples delivered by the hotness source",
            self.samples.clone(),
        );
        registry.register(
            "samples_dropped",
            "Samples lost before reaching an engine, by reason (ring_full, not_target, no_address, kernel_address, channel_full, unrouted)",
            self.samples_dropped.clone(),
        );
        registry.register(
            "bpf_run_seconds",
            "Kernel time spent in memtide's BPF programs",
            self.bpf_run_seconds.clone(),
        );
        registry.register(
            "sample_period_scale",
            "Sample period in force over the start-up period, as the CPU budget controller set it",
            self.sample_period_scale.clone(),
        );
        registry.register(
            "store_period_ratio",
            "PEBS store sample period over the load sample period: the share of sampled loads over the share of stores that reach memory",
            self.store_period_ratio.clone(),
        );
        registry.register(
            "sampling_cpu_ratio",
            "Measured CPU cost of sampling over the last interval, in cores: the agent's sampling path (memtide_sampling_cpu_seconds_total), the BPF programs' run time, and a PMU's interrupts at their assumed cost per sample",
            self.sampling_cpu_ratio.clone(),
        );
        registry.register(
            "migration_cpu_seconds",
            "CPU time of page migration and placement queries (move_pages), part of memtide_epoch_cpu_seconds_total",
            self.migration_cpu_seconds.clone(),
        );
        registry.register(
            "sampling_cpu_seconds",
            "CPU time the agent spends on its samples, on the threads that handle them: draining the rings, decoding and routing, and the targets' engines taking them in",
            self.sampling_cpu_seconds.clone(),
        );
        registry.register(
            "http_cpu_seconds",
            "CPU time of the thread serving /metrics and /status",
            self.http_cpu_seconds.clone(),
        );
        registry.register(
            "epoch_cpu_seconds",
            "CPU time of the targets' epoch steps: placement queries, plans, migrations and publishing what they did (memtide_migration_cpu_seconds_total is the part in move_pages)",
            self.epoch_cpu_seconds.clone(),
        );
        registry.register(
            "source_restarts",
            "Times the agent started its hotness source again, by reason (stopped_externally: for DAMON, memtide's kdamond turned off by someone else)",
            self.source_restarts.clone(),
        );
    }

    /// The tiers' nodes and the Kubernetes pod list.
    fn register_machine(&self, registry: &mut Registry) {
        registry.register(
            "tier_capacity_bytes",
            "Memory of each NUMA node, with its tier",
            self.tier_capacity_bytes.clone(),
        );
        registry.register(
            "tier_free_bytes",
            "Free memory of each NUMA node, with its tier",
            self.tier_free_bytes.clone(),
        );
        registry.register(
            "tier_latency_seconds",
            "Access latency of each NUMA node's memory by kind (read, write): [[topology.costs]], else the firmware's HMAT, else SLIT distance times the configured local latency (memtide status says which)",
            self.tier_latency_seconds.clone(),
        );
        registry.register(
            "tier_bandwidth_bytes_per_second",
            "Access bandwidth of each NUMA node's memory by kind (read, write), from [[topology.costs]] or HMAT; absent when neither gives it",
            self.tier_bandwidth_bytes_per_second.clone(),
        );
        registry.register(
            "opted_in_pods",
            "Pods of this node matching [targets] pod_selector in the last good list from the Kubernetes API server",
            self.opted_in_pods.clone(),
        );
        registry.register(
            "pod_list_errors",
            "Failed lists or watches of the opted-in pods (the last good list stays in use; retried with back-off up to 30 s)",
            self.pod_list_errors.clone(),
        );
        registry.register(
            "kube_api_denied",
            "Lists or watches of the opted-in pods the Kubernetes API server refused, by reason: unauthorized (401, the token was rejected), forbidden (403, RBAC denies watching pods)",
            self.kube_api_denied.clone(),
        );
    }
}

impl Metrics {
    /// Creates a new target's migration series at 0, so a target that has not moved anything
    /// yet (observe mode, one tier) still shows up as "0 bytes" rather than "no data".
    pub fn register_target(&self, target: &str) {
        for direction in ["promote", "demote"] {
            for granularity in ["4k", "64k", "2m"] {
                self.migrated_bytes
                    .get_or_create(&Migrated {
                        target: target.to_owned(),
                        direction: direction.to_owned(),
                        granularity: granularity.to_owned(),
                    })
                    .inc_by(0);
            }
            self.migration_pages
                .get_or_create(&PageResult {
                    target: target.to_owned(),
                    direction: direction.to_owned(),
                    result: "moved".to_owned(),
                })
                .inc_by(0);
            self.would_migrate_bytes
                .get_or_create(&TargetDirection {
                    target: target.to_owned(),
                    direction: direction.to_owned(),
                })
                .inc_by(0);
        }
    }

    /// Drops a gone target's series, so label sets do not accumulate over the agent's life.
    pub fn forget_target(&self, target: &str) {
        let target = target.to_owned();
        let tiers = ["fast", "slow"];
        self.fast_tier_hit_ratio.remove(&TargetLabel {
            target: target.clone(),
        });
        self.epoch_seconds.remove(&TargetLabel {
            target: target.clone(),
        });
        self.granularity_bytes.remove(&TargetLabel {
            target: target.clone(),
        });
        self.fast_share_bytes.remove(&TargetLabel {
            target: target.clone(),
        });
        self.target_samples_per_second.remove(&TargetLabel {
            target: target.clone(),
        });
        self.target_samples_per_second_per_gib.remove(&TargetLabel {
            target: target.clone(),
        });
        for tier in tiers {
            let labels = TargetTier {
                target: target.clone(),
                tier: tier.to_owned(),
            };
            self.hot_bytes.remove(&labels);
            self.managed_bytes.remove(&labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metric names fixed by the daemon issue; dashboards and alerts use them.
    pub(crate) const CONTRACT: [&str; 31] = [
        "memtide_fast_tier_hit_ratio",
        "memtide_accesses_sampled_total",
        "memtide_samples_total",
        "memtide_samples_dropped_total",
        "memtide_migrated_bytes_total",
        "memtide_migration_pages_total",
        "memtide_migration_failures_total",
        "memtide_pages_skipped_total",
        "memtide_would_migrate_bytes_total",
        "memtide_epoch_seconds",
        "memtide_granularity_bytes",
        "memtide_hot_bytes",
        "memtide_managed_bytes",
        "memtide_tier_capacity_bytes",
        "memtide_tier_free_bytes",
        "memtide_tier_latency_seconds",
        "memtide_tier_bandwidth_bytes_per_second",
        "memtide_engine_memory_bytes",
        "memtide_bpf_run_seconds_total",
        "memtide_epoch_cpu_seconds_total",
        "memtide_sampling_cpu_seconds_total",
        "memtide_http_cpu_seconds_total",
        "memtide_target_samples_total",
        "memtide_target_samples_per_second",
        "memtide_target_samples_per_second_per_gib",
        "memtide_source_running",
        "memtide_sampling_cpu_budget_ratio",
        "memtide_targets_refused_total",
        "memtide_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ];

    fn populated() -> (Metrics, Registry) {
        let (m, registry) = Metrics::new();
        let target = || "pid:1/test".to_owned();
        m.fast_tier_hit_ratio
            .get_or_create(&TargetLabel { target: target() })
            .set(0.5);
        m.accesses_sampled
            .get_or_create(&TargetTier {
                target: target(),
                tier: "fast".into(),
            })
            .inc();
        m.samples
            .get_or_create(&SourceLabel {
                source: "swfault".into(),
            })
            .inc();
        m.samples_dropped
            .get_or_create(&SourceReason {
                source: "swfault".into(),
                reason: "ring_full".into(),
            })
            .inc();
        m.migrated_bytes
            .get_or_create(&Migrated {
                target: target(),
                direction: "promote".into(),
                granularity: "4k".into(),
            })
            .inc_by(4096);
        m.migration_pages
            .get_or_create(&PageResult {
                target: target(),
                direction: "promote".into(),
                result: "moved".into(),
            })
            .inc();
        m.migration_failures
            .get_or_create(&Reason {
                reason: "ebusy".into(),
            })
            .inc();
        m.would_migrate_bytes
            .get_or_create(&TargetDirection {
                target: target(),
                direction: "demote".into(),
            })
            .inc();
        m.epoch_seconds
            .get_or_create(&TargetLabel { target: target() })
            .set(1.0);
        m.granularity_bytes
            .get_or_create(&TargetLabel { target: target() })
            .set(4096);
        for family in [&m.hot_bytes, &m.managed_bytes] {
            family
                .get_or_create(&TargetTier {
                    target: target(),
                    tier: "slow".into(),
                })
                .set(1);
        }
        for family in [&m.tier_capacity_bytes, &m.tier_free_bytes] {
            family
                .get_or_create(&NodeTier {
                    node: "0".into(),
                    tier: "fast".into(),
                })
                .set(1);
        }
        m.bpf_run_seconds
            .get_or_create(&ProgramLabel {
                program: "on_sample_any".into(),
            })
            .inc_by(0.5);
        m.sample_period_scale
            .get_or_create(&SourceLabel {
                source: "swfault".into(),
            })
            .set(2.0);
        m.store_period_ratio
            .get_or_create(&SourceLabel {
                source: "pebs".into(),
            })
            .set(5.0);
        m.sampling_cpu_ratio.set(0.008);
        for counter in [
            &m.epoch_cpu_seconds,
            &m.sampling_cpu_seconds,
            &m.http_cpu_seconds,
        ] {
            counter.inc_by(0.5);
        }
        for family in [&m.tier_latency_seconds, &m.tier_bandwidth_bytes_per_second] {
            family
                .get_or_create(&NodeKind {
                    node: "0".into(),
                    kind: "read".into(),
                })
                .set(1.0);
        }
        m.engine_untracked_samples
            .get_or_create(&TargetLabel { target: target() })
            .inc();
        m.target_samples
            .get_or_create(&TargetLabel { target: target() })
            .inc();
        for family in [
            &m.target_samples_per_second,
            &m.target_samples_per_second_per_gib,
        ] {
            family
                .get_or_create(&TargetLabel { target: target() })
                .set(1.0);
        }
        m.source_running
            .get_or_create(&SourceLabel {
                source: "swfault".into(),
            })
            .set(1);
        (m, registry)
    }

    #[test]
    fn every_contract_metric_is_exported_under_its_exact_name() {
        let (_m, registry) = populated();
        let text = encode(&registry);
        for name in CONTRACT {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(&format!("{name}{{"))
                        || line.starts_with(&format!("{name} "))),
                "{name} missing from:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn prometheus_text_names_counter_families_by_their_samples() {
        let (_m, registry) = populated();
        let text = to_prometheus_text(&encode(&registry));
        assert!(
            text.contains("# TYPE memtide_migrated_bytes_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP memtide_migrated_bytes_total Bytes moved"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE memtide_epoch_seconds gauge\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
        assert!(text.contains("memtide_migrated_bytes_total{"), "{text}");
    }

    #[test]
    fn work_is_charged_with_the_threads_own_cpu_time() {
        let counter = CounterF64::default();
        let charged = counter.clone();
        let spent = std::thread::spawn(move || {
            charge_thread_cpu(&charged, || {
                // Work until this thread has used 20 ms of CPU, by its own clock.
                let clock = memtide_host::sys::process::thread_cpu_time;
                let start = clock().expect("thread CPU clock");
                let mut spins = 0u64;
                while clock().expect("thread CPU clock") - start
                    < std::time::Duration::from_millis(20)
                {
                    spins = std::hint::black_box(spins + 1);
                }
                spins
            })
        })
        .join()
        .expect("worker thread");
        assert!(spent > 0);
        assert!(counter.get() >= 0.020, "{}", counter.get());
    }

    #[test]
    fn every_metric_is_documented_in_docs_metrics_md() {
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md"),
        )
        .expect("docs/metrics.md");
        for name in CONTRACT {
            assert!(
                docs.contains(&format!("`{name}`")),
                "{name} is not in docs/metrics.md"
            );
        }
    }
}
