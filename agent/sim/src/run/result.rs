//! What a replay reports: [`SimResult`], the JSON contract of `memtide sim`, from the tier
//! model and the accounting as the replay left them.

use serde::Serialize;

use super::{Footprint, SimConfig, accounting::Accounting};
use crate::{
    model::{Migrations, TierModel},
    policy::SimPolicy,
    sampler::SamplerName,
    trace::{TraceMeta, TraceSpec},
};

/// Per-granularity byte counts, keyed as the JSON contract says.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ByGranularity {
    #[serde(rename = "4k")]
    pub k4: u64,
    #[serde(rename = "64k")]
    pub k64: u64,
    #[serde(rename = "2m")]
    pub m2: u64,
}

/// Everything one replay measured.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    pub policy: String,
    pub trace: String,
    pub preset: &'static str,
    pub records: u64,
    /// Records that reached memory: past the LLC model for traces whose records include cache
    /// hits (lackey's), all of them otherwise. The hit ratios and the clock count these.
    pub memory_records: u64,
    pub record_weight: u32,
    pub mlp: u32,
    pub footprint_bytes: u64,
    pub fast_capacity_bytes: u64,
    /// The source the samples came from (`ideal`, `pebs`, `ibs`, `swfault`).
    pub sampler: &'static str,
    pub sample_rate: u32,
    /// Samples the policies received.
    pub samples: u64,
    /// `pebs`: the store sample period over the load sample period (the Neyman split by the
    /// shares of loads and stores that reach memory; [`memtide_core::sampling`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_period_ratio: Option<f64>,
    pub fast_hit_ratio: f64,
    /// Share of writes served by the fast tier.
    pub fast_write_ratio: f64,
    pub migrated_bytes: u64,
    pub migrated_bytes_by_granularity: ByGranularity,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    /// Migration operations (one chunk of one granularity each).
    pub migrations: u64,
    pub migrations_by_granularity: ByGranularity,
    pub tlb_shootdowns: u64,
    pub huge_page_splits: u64,
    pub pingpong_pages: u64,
    pub failed_promotions: u64,
    pub huge_pages_kept: u64,
    pub huge_pages_total: u64,
    pub projected_time_s: f64,
    pub all_fast_time_s: f64,
    /// Projected over all-fast time.
    pub relative_time: f64,
    /// Parts of the projected time, s.
    pub access_time_s: f64,
    pub migration_time_s: f64,
    /// Simulated program time the policies saw, s.
    pub simulated_clock_s: f64,
    /// Fast-tier hit ratio per timeline window.
    pub timeline: Vec<f64>,
    pub skipped_lines: u64,
    pub policy_info: serde_json::Value,
}

/// What a finished replay reports besides the model and the accounting.
pub(super) struct Replay<'a> {
    pub(super) spec: &'a dyn TraceSpec,
    pub(super) cfg: &'a SimConfig,
    pub(super) meta: &'a TraceMeta,
    pub(super) fp: Footprint,
    pub(super) fast_bytes: u64,
    pub(super) samples: u64,
    pub(super) skipped_lines: u64,
}

impl Replay<'_> {
    pub(super) fn result(
        &self,
        policy: &dyn SimPolicy,
        model: &TierModel,
        acct: &Accounting,
    ) -> SimResult {
        let m: &Migrations = &model.migrations;
        let by = |x: &[[u64; 2]; 3]| ByGranularity {
            k4: x[0][0] + x[0][1],
            k64: x[1][0] + x[1][1],
            m2: x[2][0] + x[2][1],
        };
        let promoted: u64 = m.bytes.iter().map(|d| d[0]).sum();
        let demoted: u64 = m.bytes.iter().map(|d| d[1]).sum();
        let projected = acct.time_ns + m.cost_ns;
        let records = acct.records;
        SimResult {
            policy: policy.name(),
            trace: self.spec.name(),
            preset: self.cfg.preset.name.name(),
            records: acct.replayed,
            memory_records: records,
            record_weight: self.meta.record_weight,
            mlp: self.meta.mlp,
            footprint_bytes: self.fp.bytes,
            fast_capacity_bytes: self.fast_bytes,
            sampler: self.cfg.sampler.name(),
            sample_rate: self.cfg.sample_rate.max(1),
            samples: self.samples,
            store_period_ratio: (self.cfg.sampler == SamplerName::Pebs)
                .then(|| self.fp.filters.memory_shares().store_period_ratio()),
            fast_hit_ratio: ratio(acct.hits, records),
            fast_write_ratio: ratio(acct.fast_writes, acct.writes),
            migrated_bytes: promoted + demoted,
            migrated_bytes_by_granularity: by(&m.bytes),
            promoted_bytes: promoted,
            demoted_bytes: demoted,
            migrations: m.ops.iter().flatten().sum(),
            migrations_by_granularity: by(&m.ops),
            tlb_shootdowns: m.shootdowns,
            huge_page_splits: m.splits,
            pingpong_pages: m.pingpong_pages,
            failed_promotions: m.failed_ops,
            huge_pages_kept: model.huge_pages(),
            huge_pages_total: model.mapped_superpages(),
            projected_time_s: projected * 1e-9,
            all_fast_time_s: acct.all_fast_ns * 1e-9,
            relative_time: if acct.all_fast_ns > 0.0 {
                projected / acct.all_fast_ns
            } else {
                1.0
            },
            access_time_s: acct.time_ns * 1e-9,
            migration_time_s: m.cost_ns * 1e-9,
            simulated_clock_s: acct
                .recorded_clock
                .map_or(acct.nominal_clock_ns() * 1e-9, |at| at.as_secs_f64()),
            timeline: acct.timeline.clone(),
            skipped_lines: self.skipped_lines,
            policy_info: policy.info(),
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}
