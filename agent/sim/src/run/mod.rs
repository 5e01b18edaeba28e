//! The replay loop: a trace, a policy and a tier model in; hit ratio, migrations and projected
//! time out.
//!
//! Time: one record stands for `record_weight` accesses (the trace's declared sampling), and the
//! policies' clock advances a nominal [`SimConfig::access_ns`] per access, so a trace of
//! `n` records spans `n × record_weight × access_ns` of program time whatever the policy does.
//! A trace that carries the time its records were taken (a recording, `TraceMeta::time_marks`)
//! sets the clock instead: its epochs pass as they passed while it was recorded.
//! The sampling policies see what [`SimConfig::sampler`] delivers ([`super::sampler`]), routed
//! as decoded ring records through the core's router, as the daemon's are.
//!
//! This file is the loop and what it runs the records through (the LLC model, the samplers);
//! [`accounting`] is what the accesses cost, [`result`] what the replay reports.

mod accounting;
mod result;

use std::sync::Arc;

use serde::Serialize;

pub use self::result::{ByGranularity, SimResult};
use self::{accounting::Accounting, result::Replay};
use super::{
    model::{Preset, TierModel},
    policy::{Clock, SimPolicy},
    sampler::{Collected, FilterCounter, FilterCounts, LineFilter, SIM_PID, Sampler, SamplerName},
    trace::{TraceError, TraceMeta, TraceRecord, TraceSpec},
};
use memtide_common::AccessSample;
use memtide_core::{
    ingest::{IngestCounters, Router},
    units::{PAGE_SIZE, SUPERPAGE_SIZE, subpage_index},
};

/// Records per batch between two policy steps.
pub const BATCH: usize = 1024;

/// Size of the fast tier.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FastSize {
    /// Fraction of the trace's footprint.
    Ratio(f64),
    Bytes(u64),
}

/// As the report's tables name it: "10 %" of the footprint, or "512 MiB".
impl std::fmt::Display for FastSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ratio(r) => write!(f, "{:.0} %", r * 100.0),
            Self::Bytes(b) => write!(f, "{} MiB", b >> 20),
        }
    }
}

/// Replay parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub preset: Preset,
    pub fast: FastSize,
    /// Where the policies' samples come from.
    pub sampler: SamplerName,
    /// One sample per this many records on average (every sampler but `swfault`).
    pub sample_rate: u32,
    pub seed: u64,
    /// Nominal time per access for the policies' clock, ns. Default 250.
    pub access_ns: f64,
    /// Points of the hit-ratio timeline.
    pub timeline_points: usize,
    /// Footprint, when already measured (skips the footprint pass).
    pub footprint: Option<Footprint>,
    /// Keys of an `[engine]` table laid over the engine configuration of the preset, for the
    /// policies that run memtide's engine ([`crate::policy::engine_config_with`]).
    pub engine_overrides: Option<memtide_config::EngineTable>,
}

impl SimConfig {
    #[must_use]
    pub fn new(preset: Preset) -> Self {
        Self {
            preset,
            fast: FastSize::Ratio(0.25),
            sampler: SamplerName::Ideal,
            sample_rate: 4,
            seed: 1,
            access_ns: 250.0,
            timeline_points: 50,
            footprint: None,
            engine_overrides: None,
        }
    }
}

/// A trace's footprint: superpages touched (THP-backed bytes), record count, and what the
/// samplers' cache filters pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Footprint {
    pub bytes: u64,
    pub records: u64,
    pub filters: FilterCounts,
}

/// Measures a trace's footprint with one pass (memory proportional to the footprint).
pub fn measure_footprint(spec: &dyn TraceSpec) -> Result<Footprint, TraceError> {
    let mut src = spec.open()?;
    let mut filters = FilterCounter::new(src.meta());
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
            filters.count(r);
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
        filters: filters.counts,
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

/// The source's samples on their way to the policy: sampler, then the core's router (one
/// route, this replay's process), as the daemon's ring records go.
struct SampleStream {
    sampler: Sampler,
    router: Router<Collected>,
    delivered: Collected,
}

impl SampleStream {
    fn new(sampler: Sampler) -> Self {
        let delivered = Collected::default();
        let mut router = Router::new(BATCH, Arc::new(IngestCounters::default()));
        router.add_route(SIM_PID, delivered.clone());
        Self {
            sampler,
            router,
            delivered,
        }
    }

    fn offer(&mut self, r: &TraceRecord, first_touch: bool, past_llc: bool) {
        if let Some(sample) = self.sampler.sample(r, first_touch, past_llc) {
            self.router.push(sample);
        }
    }

    /// Everything sampled since the last call, in order.
    fn take(&mut self, out: &mut Vec<AccessSample>) {
        self.router.flush();
        out.clear();
        self.delivered.drain_into(out);
    }
}

/// The last-level cache between a program and its memory, for traces whose records include
/// the accesses the caches serve (lackey's): only what misses it reaches a tier, costs a
/// tier's latency and advances the policies' clock (whose `access_ns` is the time a program
/// spends per memory access, compute and cache hits included). The model is the samplers'
/// 32 MiB L3 ([`LineFilter`]), in record units. Page-table policies still see every record
/// (an access sets the accessed bit whether or not its line was cached); the `ideal` sampler
/// and the bound see the misses.
struct Llc {
    filter: Option<LineFilter>,
    /// The batch's records that reached memory, when some did not.
    reached: Vec<bool>,
    memory: Vec<TraceRecord>,
}

/// Which records of one batch reached memory.
enum Reached<'a> {
    All,
    Some {
        reached: &'a [bool],
        memory: &'a [TraceRecord],
    },
}

impl Llc {
    fn new(meta: &TraceMeta) -> Self {
        Self {
            filter: LineFilter::l3(meta),
            reached: Vec::with_capacity(BATCH),
            memory: Vec::with_capacity(BATCH),
        }
    }

    fn filter(&mut self, batch: &[TraceRecord]) -> Reached<'_> {
        let Some(filter) = self.filter.as_mut() else {
            return Reached::All;
        };
        self.reached.clear();
        self.memory.clear();
        for r in batch {
            let miss = filter.passes(r.addr);
            self.reached.push(miss);
            if miss {
                self.memory.push(*r);
            }
        }
        Reached::Some {
            reached: &self.reached,
            memory: &self.memory,
        }
    }
}

impl Reached<'_> {
    fn reached(&self, i: usize) -> bool {
        match self {
            Self::All => true,
            Self::Some { reached, .. } => reached[i],
        }
    }

    /// The batch's records that reached memory.
    fn records<'b>(&'b self, batch: &'b [TraceRecord]) -> &'b [TraceRecord] {
        match self {
            Self::All => batch,
            Self::Some { memory, .. } => memory,
        }
    }
}

/// The model's index of `r`'s superpage, mapping it (where the policy places it) at its first
/// touch; `last` caches the previous record's superpage. True when this was the first touch.
fn locate(
    model: &mut TierModel,
    policy: &mut dyn SimPolicy,
    last: &mut (u64, usize),
    r: &TraceRecord,
) -> (usize, bool) {
    let sp = r.addr / SUPERPAGE_SIZE;
    if sp == last.0 {
        return (last.1, false);
    }
    let (idx, first) = match model.find(sp) {
        Some(i) => (i, false),
        None => {
            let tier = policy.place(sp, model);
            (model.map(sp, tier), true)
        }
    };
    *last = (sp, idx);
    (idx, first)
}

/// Replays `spec` through `policy`.
pub fn run(
    spec: &dyn TraceSpec,
    policy: &mut dyn SimPolicy,
    cfg: &SimConfig,
) -> Result<SimResult, TraceError> {
    Ok(run_keeping_model(spec, policy, cfg)?.0)
}

/// [`run`], returning the tier model as the replay left it as well (final placement).
pub fn run_keeping_model(
    spec: &dyn TraceSpec,
    policy: &mut dyn SimPolicy,
    cfg: &SimConfig,
) -> Result<(SimResult, TierModel), TraceError> {
    let fp = match cfg.footprint {
        Some(f) => f,
        None => measure_footprint(spec)?,
    };
    let fast_bytes = fast_bytes(cfg, fp);
    let mut model = TierModel::new(cfg.preset, fast_bytes);
    let mut src = spec.open()?;
    let meta = src.meta().clone();
    // The timeline's windows, like the hit ratio, count the records that reached memory.
    let timeline_every = (fp.filters.past_l3 / cfg.timeline_points.max(1) as u64).max(1);
    let mut acct = Accounting::new(cfg.preset, &meta, timeline_every);
    let mut stream = SampleStream::new(Sampler::new(
        cfg.sampler,
        cfg.sample_rate,
        &meta,
        cfg.seed,
        fp.filters,
    ));
    let mut batch = Vec::with_capacity(BATCH);
    let mut llc = Llc::new(&meta);
    let mut samples = Vec::with_capacity(BATCH);
    let mut last: (u64, usize) = (u64::MAX, 0);
    loop {
        batch.clear();
        if src.fill(&mut batch, BATCH)? == 0 {
            break;
        }
        let memory = llc.filter(&batch);
        policy.before_batch(memory.records(&batch), &mut model);
        for (i, r) in batch.iter().enumerate() {
            let (idx, first_touch) = locate(&mut model, policy, &mut last, r);
            let page = subpage_index(r.addr);
            let (fast, huge) = model.touch(idx, page);
            let past_llc = memory.reached(i);
            acct.replayed += 1;
            if past_llc {
                acct.access(fast, huge, r.is_write());
            }
            stream.offer(r, first_touch, past_llc);
        }
        stream.take(&mut samples);
        acct.recorded_clock = src.clock();
        let clock = Clock {
            now: acct.clock(cfg.access_ns),
            records: acct.records,
        };
        policy.observe(&batch, &samples, &model, clock);
        policy.step(clock, &mut model);
        // A policy's migrations may have split the cached superpage's mapping; the cache holds
        // only an index, which stays valid.
    }
    acct.recorded_clock = src.clock();
    acct.finish();
    let replay = Replay {
        spec,
        cfg,
        meta: &meta,
        fp,
        fast_bytes,
        samples: stream.sampler.samples,
        skipped_lines: src.skipped(),
    };
    let result = replay.result(policy, &model, &acct);
    Ok((result, model))
}

/// A trace held in memory (tests, benches): opening it is free.
#[derive(Clone, Debug)]
pub struct MemTrace {
    pub name: String,
    pub records: Arc<Vec<TraceRecord>>,
    pub meta: TraceMeta,
}

struct MemSource {
    records: Arc<Vec<TraceRecord>>,
    pos: usize,
    meta: TraceMeta,
}

impl super::trace::RecordSource for MemSource {
    fn meta(&self) -> &TraceMeta {
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
            records: Arc::clone(&self.records),
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

    /// Records that a cache serves reach no tier: of a line read 1,000 times only the first
    /// read counts, costs and advances the clock; past the caches every record does.
    #[test]
    fn only_records_past_the_llc_reach_a_tier() {
        let base = crate::workload::BASE;
        let mut records = vec![TraceRecord::load(base); 1000];
        records.extend((1..=1000).map(|i| TraceRecord::load(base + i * PAGE_SIZE)));
        let trace = |past_caches| MemTrace {
            name: "reuse".into(),
            records: Arc::new(records.clone()),
            meta: TraceMeta {
                past_caches,
                ..TraceMeta::default()
            },
        };
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let all = simulate(&trace(false), PolicyName::NoMigration, &cfg).unwrap();
        assert_eq!((all.records, all.memory_records), (2000, 1001));
        let past = simulate(&trace(true), PolicyName::NoMigration, &cfg).unwrap();
        assert_eq!((past.records, past.memory_records), (2000, 2000));
        assert!(
            all.simulated_clock_s < past.simulated_clock_s * 0.6,
            "{all:?}"
        );
        assert!(
            all.projected_time_s < past.projected_time_s * 0.6,
            "{all:?}"
        );
    }

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
        // Hot pages are sparse: memtide migrates 4 KiB pages, not whole superpages (the cold runs
        // it evicts for them move in the 64 KiB granules they cover). A superpage ranked hot before
        // any of its pages holds `min_samples` moves whole, so one or two early whole moves can
        // weigh as many bytes as the hundreds of pages after them: the moves are counted.
        let g = &mt.migrations_by_granularity;
        assert!(g.k4 + g.k64 >= 100 * g.m2, "{g:?}");
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
