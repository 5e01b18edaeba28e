//! The replay loop: a trace, a policy and a tier model in; hit ratio, migrations and projected
//! time out.
//!
//! Time: one record stands for `record_weight` accesses (the trace's declared sampling), and the
//! policies' clock advances a nominal [`SimConfig::access_ns`] per access, so a trace of
//! `n` records spans `n × record_weight × access_ns` of program time whatever the policy does.
//! Every `sample_rate`-th record on average (drawn with a seeded generator) becomes a PEBS-like
//! sample of weight `sample_rate × record_weight` for the sampling policies.

use std::time::Duration;

use serde::Serialize;

use super::{
    model::{Migrations, Preset, TierModel},
    policy::{Clock, SimPolicy},
    trace::{TraceError, TraceRecord, TraceSpec},
};
use memtide_core::{
    engine::Sample,
    testgen::SplitMix64,
    units::{PAGE_SIZE, SUPERPAGE_SIZE},
};

/// Records per batch between two policy steps.
pub const BATCH: usize = 1024;
/// Records per projected-time window (the bandwidth term is evaluated per window).
const TIME_WINDOW: u64 = 4096;
const LINE: f64 = 64.0;

/// Size of the fast tier.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FastSize {
    /// Fraction of the trace's footprint.
    Ratio(f64),
    Bytes(u64),
}

/// Replay parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub preset: Preset,
    pub fast: FastSize,
    /// Keep 1 in this many records as samples for the policies.
    pub sample_rate: u32,
    pub seed: u64,
    /// Nominal time per access for the policies' clock, ns. Default 250.
    pub access_ns: f64,
    /// Points of the hit-ratio timeline.
    pub timeline_points: usize,
    /// Footprint, when already measured (skips the footprint pass).
    pub footprint: Option<Footprint>,
}

impl SimConfig {
    #[must_use]
    pub fn new(preset: Preset) -> Self {
        Self {
            preset,
            fast: FastSize::Ratio(0.25),
            sample_rate: 4,
            seed: 1,
            access_ns: 250.0,
            timeline_points: 50,
            footprint: None,
        }
    }
}

/// A trace's footprint: superpages touched (THP-backed bytes) and record count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Footprint {
    pub bytes: u64,
    pub records: u64,
}

/// Measures a trace's footprint with one pass (memory proportional to the footprint).
pub fn measure_footprint(spec: &dyn TraceSpec) -> Result<Footprint, TraceError> {
    let mut src = spec.open()?;
    let mut seen = super::model::SpMap::<()>::default();
    let mut buf = Vec::with_capacity(BATCH * 8);
    let mut records = 0;
    let mut last = u64::MAX;
    loop {
        buf.clear();
        if src.fill(&mut buf, BATCH * 8)? == 0 {
            break;
        }
        records += buf.len() as u64;
        for r in &buf {
            let sp = r.addr / SUPERPAGE_SIZE;
            if sp != last {
                seen.insert(sp, ());
                last = sp;
            }
        }
    }
    Ok(Footprint {
        bytes: seen.len() as u64 * SUPERPAGE_SIZE,
        records,
    })
}

/// The fast tier's capacity for a trace of footprint `fp`, whole 4 KiB pages.
#[must_use]
pub fn fast_bytes(cfg: &SimConfig, fp: Footprint) -> u64 {
    let b = match cfg.fast {
        FastSize::Ratio(r) => (fp.bytes as f64 * r.clamp(0.0, 1.0)) as u64,
        FastSize::Bytes(b) => b,
    };
    b / PAGE_SIZE * PAGE_SIZE
}

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
    pub record_weight: u32,
    pub mlp: u32,
    pub footprint_bytes: u64,
    pub fast_capacity_bytes: u64,
    pub sample_rate: u32,
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

#[derive(Default)]
struct Window {
    n: u64,
    fast: u64,
    lat: f64,
    lat_all_fast: f64,
}

/// Replays `spec` through `policy`.
pub fn run(
    spec: &dyn TraceSpec,
    policy: &mut dyn SimPolicy,
    cfg: &SimConfig,
) -> Result<SimResult, TraceError> {
    let fp = match cfg.footprint {
        Some(f) => f,
        None => measure_footprint(spec)?,
    };
    let fast_bytes = fast_bytes(cfg, fp);
    let p = cfg.preset;
    let mut model = TierModel::new(p, fast_bytes);
    let mut src = spec.open()?;
    let meta = src.meta().clone();
    let k = f64::from(meta.record_weight);
    let mlp = f64::from(meta.mlp.max(1));
    let sample_rate = cfg.sample_rate.max(1);
    let weight = sample_rate.saturating_mul(meta.record_weight);
    let mut rng = SplitMix64::new(cfg.seed ^ 0x5eed);
    let timeline_every = (fp.records / cfg.timeline_points.max(1) as u64).max(1);

    let mut batch = Vec::with_capacity(BATCH);
    let mut samples = Vec::with_capacity(BATCH);
    let (mut records, mut hits, mut writes, mut fast_writes) = (0u64, 0u64, 0u64, 0u64);
    let (mut time_ns, mut all_fast_ns) = (0.0f64, 0.0f64);
    let mut win = Window::default();
    let (mut tl_n, mut tl_hits) = (0u64, 0u64);
    let mut timeline = Vec::new();
    let mut last: (u64, usize) = (u64::MAX, 0);
    let close = |w: &mut Window, time: &mut f64, all: &mut f64| {
        if w.n == 0 {
            return;
        }
        let n = w.n as f64 * k;
        let fast_b = w.fast as f64 * k * LINE;
        let slow_b = (w.n - w.fast) as f64 * k * LINE;
        // `mlp` independent streams overlap their compute and their misses (leading loads per
        // stream); the tiers' bandwidths bound the window from below (roofline).
        *time += ((n * p.compute_ns + w.lat * k) / mlp)
            .max(fast_b / p.fast_gbps)
            .max(slow_b / p.slow_gbps);
        *all += ((n * p.compute_ns + w.lat_all_fast * k) / mlp).max(n * LINE / p.fast_gbps);
        *w = Window::default();
    };
    loop {
        batch.clear();
        if src.fill(&mut batch, BATCH)? == 0 {
            break;
        }
        samples.clear();
        for r in &batch {
            let sp = r.addr / SUPERPAGE_SIZE;
            let idx = if sp == last.0 {
                last.1
            } else {
                let idx = match model.find(sp) {
                    Some(i) => i,
                    None => {
                        let tier = policy.place(sp, &model);
                        model.map(sp, tier)
                    }
                };
                last = (sp, idx);
                idx
            };
            let page = ((r.addr / PAGE_SIZE) % 512) as usize;
            let (fast, huge) = model.touch(idx, page);
            let w = r.is_write();
            win.n += 1;
            win.fast += u64::from(fast);
            win.lat += p.latency(fast, w) + if huge { 0.0 } else { p.tlb_4k_ns };
            win.lat_all_fast += p.latency(true, w);
            hits += u64::from(fast);
            writes += u64::from(w);
            fast_writes += u64::from(w && fast);
            tl_n += 1;
            tl_hits += u64::from(fast);
            if tl_n == timeline_every {
                timeline.push(tl_hits as f64 / tl_n as f64);
                (tl_n, tl_hits) = (0, 0);
            }
            if win.n == TIME_WINDOW {
                close(&mut win, &mut time_ns, &mut all_fast_ns);
            }
            if sample_rate == 1 || rng.below(u64::from(sample_rate)) == 0 {
                samples.push(Sample {
                    addr: r.addr,
                    kind: r.kind,
                    weight,
                });
            }
        }
        records += batch.len() as u64;
        let clock = Clock {
            now: Duration::from_nanos((records as f64 * k * cfg.access_ns) as u64),
            records,
        };
        policy.observe(&batch, &samples, &model, clock);
        policy.step(clock, &mut model);
        // A policy's migrations may have split the cached superpage's mapping; the cache holds
        // only an index, which stays valid.
    }
    close(&mut win, &mut time_ns, &mut all_fast_ns);
    if tl_n > 0 {
        timeline.push(tl_hits as f64 / tl_n as f64);
    }
    let m: &Migrations = &model.migrations;
    let by = |x: &[[u64; 2]; 3]| ByGranularity {
        k4: x[0][0] + x[0][1],
        k64: x[1][0] + x[1][1],
        m2: x[2][0] + x[2][1],
    };
    let promoted: u64 = m.bytes.iter().map(|d| d[0]).sum();
    let demoted: u64 = m.bytes.iter().map(|d| d[1]).sum();
    let projected = time_ns + m.cost_ns;
    Ok(SimResult {
        policy: policy.name(),
        trace: spec.name(),
        preset: p.name.name(),
        records,
        record_weight: meta.record_weight,
        mlp: meta.mlp,
        footprint_bytes: fp.bytes,
        fast_capacity_bytes: fast_bytes,
        sample_rate,
        fast_hit_ratio: ratio(hits, records),
        fast_write_ratio: ratio(fast_writes, writes),
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
        all_fast_time_s: all_fast_ns * 1e-9,
        relative_time: if all_fast_ns > 0.0 {
            projected / all_fast_ns
        } else {
            1.0
        },
        access_time_s: time_ns * 1e-9,
        migration_time_s: m.cost_ns * 1e-9,
        simulated_clock_s: records as f64 * k * cfg.access_ns * 1e-9,
        timeline,
        skipped_lines: src.skipped(),
        policy_info: policy.info(),
    })
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// A trace held in memory (tests, benches): opening it is free.
#[derive(Clone, Debug)]
pub struct MemTrace {
    pub name: String,
    pub records: std::sync::Arc<Vec<TraceRecord>>,
    pub meta: super::trace::TraceMeta,
}

struct MemSource {
    records: std::sync::Arc<Vec<TraceRecord>>,
    pos: usize,
    meta: super::trace::TraceMeta,
}

impl super::trace::RecordSource for MemSource {
    fn meta(&self) -> &super::trace::TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        let end = (self.pos + max).min(self.records.len());
        out.extend_from_slice(&self.records[self.pos..end]);
        let n = end - self.pos;
        self.pos = end;
        Ok(n)
    }
}

impl TraceSpec for MemTrace {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn open(&self) -> Result<Box<dyn super::trace::RecordSource>, TraceError> {
        Ok(Box::new(MemSource {
            records: std::sync::Arc::clone(&self.records),
            pos: 0,
            meta: self.meta.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        PolicyName,
        model::PresetName,
        simulate,
        workload::{GenSpec, Workload},
    };

    fn spec(w: Workload, records: u64) -> GenSpec {
        GenSpec {
            workload: w,
            footprint: 64 << 20,
            records,
            seed: 9,
        }
    }

    #[test]
    fn deterministic_and_consistent() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let s = spec(Workload::ZipfKv, 100_000);
        let a = simulate(&s, PolicyName::Memtide, &cfg).unwrap();
        let b = simulate(&s, PolicyName::Memtide, &cfg).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert_eq!(a.records, 100_000);
        assert_eq!(a.footprint_bytes, 64 << 20);
        assert_eq!(a.fast_capacity_bytes, 16 << 20);
        assert_eq!(
            a.migrated_bytes,
            a.migrated_bytes_by_granularity.k4
                + a.migrated_bytes_by_granularity.k64
                + a.migrated_bytes_by_granularity.m2
        );
        assert!(a.projected_time_s >= a.all_fast_time_s);
        assert!(!a.timeline.is_empty());
    }

    #[test]
    fn policies_that_migrate_beat_first_touch_on_a_hot_set() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let s = spec(Workload::GupsHotset, 400_000);
        let none = simulate(&s, PolicyName::NoMigration, &cfg).unwrap();
        let mt = simulate(&s, PolicyName::Memtide, &cfg).unwrap();
        let oracle = simulate(&s, PolicyName::Oracle, &cfg).unwrap();
        assert_eq!(none.migrated_bytes, 0);
        assert!(
            mt.fast_hit_ratio > none.fast_hit_ratio + 0.1,
            "{} vs {}",
            mt.fast_hit_ratio,
            none.fast_hit_ratio
        );
        assert!(oracle.fast_hit_ratio >= mt.fast_hit_ratio);
        // Hot pages are sparse: memtide migrates 4 KiB pages, not whole superpages.
        assert!(mt.migrated_bytes_by_granularity.k4 > mt.migrated_bytes_by_granularity.m2);
    }

    #[test]
    fn bandwidth_term_rewards_spreading_only_with_parallelism() {
        let mut cfg = SimConfig::new(PresetName::BwAware.preset());
        cfg.fast = FastSize::Ratio(1.0);
        let time = |w: Workload, f: f64| {
            let s = spec(w, 50_000);
            let mut p = crate::baselines::static_place::StaticPlacement::ratio(f);
            run(&s, &mut p, &cfg).unwrap().projected_time_s
        };
        assert!(time(Workload::BwMultistream, 0.7) < time(Workload::BwMultistream, 1.0));
        assert!(time(Workload::PointerChase, 1.0) < time(Workload::PointerChase, 0.7));
    }
}
