//! The replay loop: a trace, a policy and a tier model in; hit ratio, migrations and projected
//! time out.
//!
//! Time: one record stands for `record_weight` accesses (the trace's declared sampling), and the
//! policies' clock advances a nominal pace per access ([`SimConfig::access_pace_ns`]: the
//! nominal [`SimConfig::access_ns`] over the trace's parallelism), so a trace of `n` records
//! spans `n × record_weight × pace` of program time whatever the policy does.
//! A trace that carries the time its records were taken (a recording, `TraceMeta::time_marks`)
//! sets the clock instead: its epochs pass as they passed while it was recorded.
//! The sampling policies see what [`SimConfig::sampler`] delivers ([`super::sampler`]), routed
//! as decoded ring records through the core's router, as the daemon's are.
//!
//! This file is the loop and what it runs the records through (the LLC model, the samplers);
//! [`config`] is what a replay is asked for, [`accounting`] what the accesses cost, [`result`]
//! what the replay reports.

mod accounting;
mod config;
mod fast_forward;
mod llc;
mod result;

use std::{sync::Arc, time::Duration};

use serde::Serialize;

use self::{
    accounting::Accounting,
    fast_forward::{PassProfile, PassRecorder},
    llc::Llc,
    result::Replay,
};
pub use self::{
    config::{FastSize, RecordClock, SimConfig},
    result::{ByGranularity, SimResult},
};
use super::{
    model::TierModel,
    policy::{Clock, SimPolicy},
    sampler::{Candidate, Collected, FilterCounter, FilterCounts, SIM_PID, Sampler},
    trace::{TraceError, TraceMeta, TraceRecord, TraceSpec},
};
use memtide_common::AccessSample;
use memtide_core::{
    ingest::{IngestCounters, Router},
    units::{PAGE_SIZE, SUPERPAGE_SIZE, subpage_index},
};

/// Records per batch between two policy steps.
pub const BATCH: usize = 1024;

/// A trace's footprint: superpages touched (THP-backed bytes), record count, and what the
/// samplers' cache filters pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Footprint {
    pub bytes: u64,
    pub records: u64,
    pub filters: FilterCounts,
}

/// Measures a trace's footprint with one pass (memory proportional to the footprint). A trace
/// repeated more than twice is read for one pass and then for two: from the second pass on every
/// pass starts with the caches in the same state, so the third and later count what the second
/// did.
pub fn measure_footprint(spec: &dyn TraceSpec) -> Result<Footprint, TraceError> {
    match spec.repetition() {
        Some((inner, passes)) if passes > 2 => {
            let one = measure_records(inner, u64::MAX)?;
            let two = measure_records(spec, 2 * one.records)?;
            Ok(Footprint {
                bytes: two.bytes,
                records: one.records * u64::from(passes),
                filters: FilterCounts::of_passes(one.filters, two.filters, passes),
            })
        }
        _ => measure_records(spec, u64::MAX),
    }
}

/// The footprint of the first `limit` records of `spec` (whole fills: a repeated trace's fill
/// ends at the end of a pass).
fn measure_records(spec: &dyn TraceSpec, limit: u64) -> Result<Footprint, TraceError> {
    let mut src = spec.open()?;
    let mut filters = FilterCounter::new(src.meta());
    let mut seen = super::model::SpMap::<()>::default();
    let mut buf = Vec::with_capacity(BATCH * 8);
    let mut records = 0;
    let mut last = u64::MAX;
    while records < limit {
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

    /// Offers `r` to the sampler; returns what passed its filters, drawn or not.
    fn offer(&mut self, r: &TraceRecord, first_touch: bool, past_llc: bool) -> Option<Candidate> {
        let candidate = self.sampler.candidate(r, first_touch, past_llc)?;
        self.draw(&candidate);
        Some(candidate)
    }

    fn draw(&mut self, candidate: &Candidate) {
        if let Some(sample) = self.sampler.draw(candidate) {
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
    let mut src = spec.open()?;
    let meta = src.meta().clone();
    let mut replayer = Replayer::new(cfg, &meta, fp, fast_bytes);
    let repeats = fast_forward::Repeats::of(spec, &*policy, fp);
    let mut recorder = None;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        if let Some(repeats) = &repeats {
            let replayed = replayer.acct.replayed;
            if replayed == repeats.records_per_pass && recorder.is_none() {
                recorder = Some(PassRecorder::new(src.clock(), src.skipped()));
            }
            if replayed == 2 * repeats.records_per_pass {
                break;
            }
        }
        batch.clear();
        if src.fill(&mut batch, BATCH)? == 0 {
            break;
        }
        replayer.replay(&batch, src.clock(), policy, recorder.as_mut());
    }
    let mut skipped_lines = src.skipped();
    replayer.acct.recorded_clock = src.clock();
    if let (Some(repeats), Some(recorder)) = (repeats, recorder) {
        let pass = recorder.finish(src.clock(), skipped_lines);
        for number in 3..=repeats.passes {
            replayer.fast_forward(&pass, number, policy);
        }
        // Every pass skips the same lines; the ones after a pass's last record are read only by
        // the fill that ends it, which the recorded pass did not make.
        skipped_lines = pass.skipped * u64::from(repeats.passes);
        // Where a recording's passes follow each other in time, the last ends `passes` of
        // them after the start.
        replayer.acct.recorded_clock = pass.clock.map(|each| each * repeats.passes);
    }
    let Replayer {
        mut acct,
        stream,
        model,
        ..
    } = replayer;
    acct.finish();
    let replay = Replay {
        spec,
        cfg,
        meta: &meta,
        fp,
        fast_bytes,
        samples: stream.sampler.samples,
        skipped_lines,
    };
    let result = replay.result(policy, &model, &acct);
    Ok((result, model))
}

/// A replay in progress: the tier model, what the accesses cost so far, and the samples on
/// their way to the policy.
struct Replayer {
    model: TierModel,
    acct: Accounting,
    stream: SampleStream,
    llc: Llc,
    samples: Vec<AccessSample>,
    /// The last record's superpage and its index in the model.
    last: (u64, usize),
}

impl Replayer {
    fn new(cfg: &SimConfig, meta: &TraceMeta, fp: Footprint, fast_bytes: u64) -> Self {
        // The timeline's windows, like the hit ratio, count the records that reached memory.
        let timeline_every = (fp.filters.past_l3 / cfg.timeline_points.max(1) as u64).max(1);
        Self {
            model: TierModel::new(cfg.preset, fast_bytes),
            acct: Accounting::new(cfg.preset, meta, cfg.record_clock(meta), timeline_every),
            stream: SampleStream::new(Sampler::new(
                cfg.sampler,
                cfg.sample_rate,
                meta,
                cfg.seed,
                fp.filters,
            )),
            llc: Llc::new(meta),
            samples: Vec::with_capacity(BATCH),
            last: (u64::MAX, 0),
        }
    }

    /// One batch of the trace, taken at `clock` (a recording's time), then the policy's step;
    /// `recorder` keeps what a steady-state pass repeats.
    fn replay(
        &mut self,
        batch: &[TraceRecord],
        clock: Option<Duration>,
        policy: &mut dyn SimPolicy,
        mut recorder: Option<&mut PassRecorder>,
    ) {
        let memory = self.llc.filter(batch);
        policy.before_batch(memory.records(batch), &mut self.model);
        for (i, r) in batch.iter().enumerate() {
            let (idx, first_touch) = locate(&mut self.model, policy, &mut self.last, r);
            let (fast, huge) = self.model.touch(idx, subpage_index(r.addr));
            let past_llc = memory.reached(i);
            self.acct.replayed += 1;
            if past_llc {
                self.acct.access(fast, huge, r.is_write());
            }
            let candidate = self.stream.offer(r, first_touch, past_llc);
            if let Some(recorder) = recorder.as_deref_mut() {
                recorder.record(r, idx, past_llc, candidate);
            }
        }
        self.end_batch(batch, clock, policy);
        if let Some(recorder) = recorder {
            recorder.end_batch(batch.len(), clock);
        }
    }

    /// Pass `number` (from 3) of a repeated trace: the second pass's records that reached
    /// memory and its sampler candidates, drawn afresh by the replay's sampler: what replaying
    /// the pass would do, for a policy that learns from samples alone.
    fn fast_forward(&mut self, pass: &PassProfile, number: u32, policy: &mut dyn SimPolicy) {
        let earlier = pass.clock.unwrap_or_default() * (number - 2);
        for b in pass.batches() {
            policy.before_batch(b.memory, &mut self.model);
            for (r, &idx) in b.memory.iter().zip(b.memory_superpages) {
                let (fast, huge) = self.model.touch(idx as usize, subpage_index(r.addr));
                self.acct.access(fast, huge, r.is_write());
            }
            self.acct.replayed += b.records;
            for c in b.candidates {
                self.stream.draw(c);
            }
            self.end_batch(b.memory, b.clock.map(|at| at + earlier), policy);
        }
    }

    /// After a batch's accesses: its samples to the policy, then the policy's step.
    fn end_batch(
        &mut self,
        observed: &[TraceRecord],
        clock: Option<Duration>,
        policy: &mut dyn SimPolicy,
    ) {
        self.stream.take(&mut self.samples);
        self.acct.recorded_clock = clock;
        let clock = Clock {
            now: self.acct.clock(),
            records: self.acct.records,
        };
        policy.observe(observed, &self.samples, &self.model, clock);
        policy.step(clock, &mut self.model);
        // A policy's migrations may have split the cached superpage's mapping; the cache holds
        // only an index, which stays valid.
    }
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

    /// The policies' clock runs at the program's own all-fast pace whatever its parallelism:
    /// a bandwidth-bound trace (mlp 1024) spanned 80 times its all-fast run when the clock
    /// ignored the parallelism, and the migration budget, a rate per second of that clock,
    /// with it.
    #[test]
    fn the_clock_keeps_the_pace_of_the_all_fast_run() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        for w in Workload::ALL {
            let run = simulate(&spec(w, 100_000), PolicyName::NoMigration, &cfg).unwrap();
            let ratio = run.simulated_clock_s / run.all_fast_time_s;
            assert!((0.9..1.25).contains(&ratio), "{w:?}: {ratio}");
        }
        assert!((cfg.access_pace_ns(1) - cfg.access_ns).abs() < 1e-9);
        assert!((cfg.access_pace_ns(2) - cfg.access_ns / 2.0).abs() < 1e-9);
        // 64 B per access at 20 GB/s: the fast tier's lines, not the latency, set the pace.
        assert!((cfg.access_pace_ns(1024) - 3.2).abs() < 1e-9);
    }

    /// The replay's clock, the hour's pass lengths and the epoch oracle's window read one rule
    /// for what a trace's records span: had one of them kept its own product, the oracle's
    /// epochs or the hour would drift from the clock the policies plan by.
    #[test]
    fn the_replay_and_the_oracle_read_one_record_clock() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        for w in [Workload::Stream, Workload::BwMultistream] {
            let s = spec(w, 100_000);
            let meta = s.open().unwrap().meta().clone();
            let clock = cfg.record_clock(&meta);
            let run = simulate(&s, PolicyName::NoMigration, &cfg).unwrap();
            let expected = clock.ns(run.memory_records) * 1e-9;
            assert!((run.simulated_clock_s - expected).abs() < 1e-12, "{w:?}");
            let window = crate::oracle_window(&meta, &cfg);
            assert_eq!(window % BATCH as u64, 0);
            // One second of that clock, in whole batches.
            let second = clock.ns(window);
            let batch = clock.ns(BATCH as u64);
            assert!(second <= 1e9 && second > 1e9 - batch, "{w:?}: {second}");
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
