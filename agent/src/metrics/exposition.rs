//! What a scrape reads: the registry as OpenMetrics text or as the classic Prometheus text,
//! and the process's own CPU time and memory, read when the scrape comes.

use memtide_core::units::PAGE_SIZE;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

/// `process_cpu_seconds_total` and `process_resident_memory_bytes`, read at scrape time.
#[derive(Debug)]
pub(super) struct ProcessCollector;

/// User + system CPU seconds and resident bytes of this process, from /proc/self/stat.
fn process_usage() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    // After the comm: field 14 utime, 15 stime, 24 rss (pages), counted from 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let rss_pages: u64 = fields.get(21)?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture memtide runs on; pages are 4 KiB there.
    #[expect(clippy::cast_precision_loss, reason = "CPU ticks stay far below 2^52")]
    let cpu = (utime + stime) as f64 / 100.0;
    Some((cpu, rss_pages * PAGE_SIZE))
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some((cpu, rss)) = process_usage() else {
            return Ok(());
        };
        let counter = ConstCounter::new(cpu);
        let metric = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent by the agent",
            None,
            MetricType::Counter,
        )?;
        counter.encode(metric)?;
        let gauge = ConstGauge::new(i64::try_from(rss).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory of the agent",
            None,
            MetricType::Gauge,
        )?;
        gauge.encode(metric)
    }
}

/// The registry as OpenMetrics text.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::error!(%error, "encoding metrics");
    }
    text
}

/// Content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of [`to_prometheus_text`]'s output.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Rewrites OpenMetrics text as the classic Prometheus text format (0.0.4), for scrapers and
/// linters that do not negotiate OpenMetrics (`promtool check metrics`, older agents): a
/// counter family's HELP and TYPE name its `_total` samples, and `# UNIT` / `# EOF` go.
#[must_use]
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut counters = std::collections::HashSet::new();
    for line in &lines {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.insert(name.to_owned());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in lines {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match rewritten {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
