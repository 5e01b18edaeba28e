//! What each sampling source delivers, drawn from a trace's records as decoded ring records
//! ([`AccessSample`]): from there on the simulator uses the daemon's own path (the core's
//! router, [`memtide_core::tiering::Tiering::observe_records`], the same epoch tick and plan).
//!
//! A trace record stands for `record_weight` accesses, cache hits included (lackey sees every
//! access; the synthetic workloads' records stand for LLC misses). The samplers:
//!
//! - `ideal`: every record that reaches memory (past the replay's LLC model, `run::Llc`) is a
//!   sample with probability 1/N (`--sample-rate N`), with its own load/store kind and a
//!   weight of `N × record_weight`. What an unbiased PMU counting memory accesses would give.
//! - `pebs`: Intel PEBS as memtide opens it: `mem-loads` behind the `ldlat` filter (30 cycles:
//!   loads that miss L2) and `mem-stores` with no filter, the store period `g / h` times the
//!   load period, where `g` and `h` are the shares of those loads and stores that reach memory
//!   (miss the L3 model): what the agent's cache-miss counters measure on a live target
//!   ([`memtide_core::sampling`]; the agent assumes `g` = 0.5, `h` = 0.02 until they have).
//!   One ratio for the whole replay, from the trace's counts: the agent re-measures every 5 s
//!   and keeps a ratio within 25 % of the measured one, which a trace's phases seldom move.
//!   The filter is a direct-mapped model of a 2 MiB L2 (32 Ki lines of 64 B) scaled to
//!   the trace's record weight: between two records `record_weight` accesses pass, so the cache
//!   holds the lines of the last `32 Ki / record_weight` records. Both periods are scaled by one
//!   factor so that the expected number of samples equals `ideal`'s at the same `--sample-rate`;
//!   each sample's weight is its scaled period in the trace's accesses, so Eq. 1 sees the
//!   traffic the samples stand for.
//! - `ibs`: AMD IBS op sampling with `l3missonly` (memtide's default where the PMU has it): ops
//!   that miss a 32 MiB L3 (512 Ki lines, the same model, and the very one the replay puts in
//!   front of the tiers: IBS samples the records that reach memory), sampled with one period,
//!   with no load/store kind; scaled to `ideal`'s sample count likewise.
//! - `swfault`: the software page-fault event: one sample per fault the process takes. Under the
//!   simulator's THP-always model a process faults once per 2 MiB superpage, at its first touch,
//!   and never again (memtide enables no NUMA hinting faults, and migrations do not fault), so
//!   the engine learns where memory was first touched and nothing of its later heat. Weight 1,
//!   no kind. `--sample-rate` does not apply.
//!
//! The cache models apply to traces of every access (lackey's). A trace whose records are
//! already past the caches (`TraceMeta::past_caches`: the synthetic workloads' LLC misses, or
//! `memtide record`'s PEBS and IBS samples) passes them all, and so does a recording of any
//! source (`TraceMeta::live_samples`: its records are what the sampler delivered, page faults
//! included, not accesses a cache could have served).
//!
//! The counts the scaling needs (records passing each filter) come from the footprint pass
//! ([`super::run::measure_footprint`]), so a sampler costs no pass of its own.

use std::{cell::RefCell, rc::Rc};

use serde::Serialize;

use super::trace::{TraceMeta, TraceRecord};
use memtide_common::{AccessKind, AccessSample, SampleSource};
use memtide_core::{
    ingest::{BatchSink, SampleBatch, Undelivered},
    rng::SplitMix64,
    sampling::MemoryShares,
};

/// Process id every simulated sample carries (one target per replay).
pub const SIM_PID: u32 = 1;
/// Cache lines of the L2 the `ldlat` filter stands for (2 MiB of 64 B lines).
const L2_LINES: u64 = 32 << 10;
/// Cache lines of the L3 IBS's `l3missonly` stands for (32 MiB).
const L3_LINES: u64 = 512 << 10;
const LINE_SHIFT: u32 = 6;

/// Which source the simulated samples come from (`memtide sim --sampler`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum SamplerName {
    /// 1 in N records, kind kept: an unbiased PMU.
    #[default]
    Ideal,
    /// PEBS loads past L2 and all stores, their periods split by what reaches memory.
    Pebs,
    /// IBS ops past L3, no kind.
    Ibs,
    /// Page faults: first touches only.
    Swfault,
}

impl SamplerName {
    pub const ALL: [Self; 4] = [Self::Ideal, Self::Pebs, Self::Ibs, Self::Swfault];

    /// Whether the samples are drawn at random (the seed matters): all but `swfault`, whose
    /// faults are the first touches.
    #[must_use]
    pub const fn draws(self) -> bool {
        !matches!(self, Self::Swfault)
    }

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ideal => "ideal",
            Self::Pebs => "pebs",
            Self::Ibs => "ibs",
            Self::Swfault => "swfault",
        }
    }
}

/// A direct-mapped cache of lines, in record units: `passes` is true for a record whose line
/// the cache does not hold (a miss), which then fills its slot.
#[derive(Clone, Debug)]
pub struct LineFilter {
    tags: Vec<u64>,
    mask: u64,
}

impl LineFilter {
    /// A cache of `lines` lines seen through a trace whose records stand for `record_weight`
    /// accesses each.
    #[must_use]
    pub fn new(lines: u64, record_weight: u32) -> Self {
        let slots = (lines / u64::from(record_weight.max(1)))
            .max(1)
            .next_power_of_two();
        Self {
            tags: vec![0; slots as usize],
            mask: slots - 1,
        }
    }

    /// The `ldlat` filter for a trace, or none when its records are past the caches already.
    fn l2(meta: &TraceMeta) -> Option<Self> {
        Self::models_caches(meta).then(|| Self::new(L2_LINES, meta.record_weight))
    }

    /// The `l3missonly` filter likewise, and the replay's last-level cache.
    pub(crate) fn l3(meta: &TraceMeta) -> Option<Self> {
        Self::models_caches(meta).then(|| Self::new(L3_LINES, meta.record_weight))
    }

    /// Whether a trace's records include accesses a cache serves.
    const fn models_caches(meta: &TraceMeta) -> bool {
        !meta.past_caches && !meta.live_samples
    }

    pub fn passes(&mut self, addr: u64) -> bool {
        let line = addr >> LINE_SHIFT;
        let slot = (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) & self.mask;
        let tag = &mut self.tags[slot as usize];
        // Tags are line + 1 so that 0 means empty.
        let hit = *tag == line + 1;
        *tag = line + 1;
        !hit
    }
}

/// Records of a trace that pass each source's filter (counted in the footprint pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FilterCounts {
    /// Loads (and kind-less records) that miss the L2 model: PEBS's `mem-loads` events.
    pub loads_past_l2: u64,
    /// Of those, the ones that also miss the L3 model: loads that reached memory.
    pub loads_past_l2_and_l3: u64,
    /// Stores: PEBS's `mem-stores` events.
    pub stores: u64,
    /// Of those, the ones that miss the L3 model.
    pub stores_past_l3: u64,
    /// Records that miss the L3 model: IBS's `l3missonly` ops.
    pub past_l3: u64,
}

/// Counts what passes the filters, record by record.
#[derive(Clone, Debug)]
pub struct FilterCounter {
    l2: Option<LineFilter>,
    l3: Option<LineFilter>,
    pub counts: FilterCounts,
}

impl FilterCounter {
    #[must_use]
    pub fn new(meta: &TraceMeta) -> Self {
        Self {
            l2: LineFilter::l2(meta),
            l3: LineFilter::l3(meta),
            counts: FilterCounts::default(),
        }
    }

    pub fn count(&mut self, r: &TraceRecord) {
        let past_l3 = u64::from(passes(self.l3.as_mut(), r.addr));
        self.counts.past_l3 += past_l3;
        if r.is_write() {
            self.counts.stores += 1;
            self.counts.stores_past_l3 += past_l3;
        } else if passes(self.l2.as_mut(), r.addr) {
            self.counts.loads_past_l2 += 1;
            self.counts.loads_past_l2_and_l3 += past_l3;
        }
    }
}

impl FilterCounts {
    /// The counts of `passes` passes of a trace, from those of its first pass and of its first
    /// two: the later passes count what the second did.
    #[must_use]
    pub fn of_passes(one: Self, two: Self, passes: u32) -> Self {
        let later = u64::from(passes.max(1) - 1);
        let total = |one: u64, two: u64| one + later * (two - one);
        Self {
            loads_past_l2: total(one.loads_past_l2, two.loads_past_l2),
            loads_past_l2_and_l3: total(one.loads_past_l2_and_l3, two.loads_past_l2_and_l3),
            stores: total(one.stores, two.stores),
            stores_past_l3: total(one.stores_past_l3, two.stores_past_l3),
            past_l3: total(one.past_l3, two.past_l3),
        }
    }

    /// The shares of PEBS's load and store events that reached memory: what the agent's
    /// cache-miss counters measure on a live target.
    #[must_use]
    pub fn memory_shares(&self) -> MemoryShares {
        MemoryShares::from_counts(
            self.loads_past_l2,
            self.loads_past_l2_and_l3,
            self.stores,
            self.stores_past_l3,
        )
    }
}

/// Whether a record passes a filter; no filter passes everything.
fn passes(filter: Option<&mut LineFilter>, addr: u64) -> bool {
    filter.is_none_or(|f| f.passes(addr))
}

/// A record that passed a source's filters: whether it becomes a sample is the draw's to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub addr: u64,
    pub kind: AccessKind,
    pub class: CandidateClass,
}

/// Which of the source's events a [`Candidate`] is, and so which period draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateClass {
    /// `ideal`: an access that reached memory.
    Access,
    /// PEBS `mem-loads` past the `ldlat` filter.
    Load,
    /// PEBS `mem-stores`.
    Store,
    /// An IBS op past `l3missonly`.
    Op,
    /// A page fault (`swfault`).
    Fault,
}

/// One replay's sampler: decides, record by record, what the source would have delivered.
#[derive(Clone, Debug)]
pub struct Sampler {
    name: SamplerName,
    rng: SplitMix64,
    /// 1 in this many records (`ideal`).
    rate: u64,
    /// PEBS's `ldlat` filter (the L2 model); none for the other sources.
    filter: Option<LineFilter>,
    /// Probability that a qualifying load (or op) / store becomes a sample.
    load_p: f64,
    store_p: f64,
    /// Accesses a load (or op) / store sample stands for.
    load_weight: u64,
    store_weight: u64,
    record_weight: u64,
    /// Samples delivered so far.
    pub samples: u64,
}

impl Sampler {
    /// A sampler for a trace whose filters passed `counts`, at one sample per `sample_rate`
    /// records reaching memory (`counts.past_l3`, past the replay's LLC model) on average (not
    /// `swfault`).
    #[must_use]
    pub fn new(
        name: SamplerName,
        sample_rate: u32,
        meta: &TraceMeta,
        seed: u64,
        counts: FilterCounts,
    ) -> Self {
        let rate = u64::from(sample_rate.max(1));
        let record_weight = u64::from(meta.record_weight.max(1));
        let memory = counts.past_l3 as f64;
        let wanted = memory / rate as f64;
        // Events per load sample so that the expected samples equal `wanted`: loads at 1/n,
        // stores at 1/(ratio·n).
        let ratio = counts.memory_shares().store_period_ratio();
        let (filter, events, store_ratio) = match name {
            SamplerName::Pebs => (
                LineFilter::l2(meta),
                counts.loads_past_l2 as f64 + counts.stores as f64 / ratio,
                ratio,
            ),
            // IBS's `l3missonly` is the replay's LLC model: the records past it are `past_llc`.
            SamplerName::Ibs | SamplerName::Ideal | SamplerName::Swfault => (None, memory, 1.0),
        };
        let per_sample = if wanted > 0.0 {
            (events / wanted).max(1.0)
        } else {
            1.0
        };
        let weight = |period: f64| ((period * record_weight as f64).round() as u64).max(1);
        Self {
            name,
            rng: SplitMix64::new(seed ^ 0x5eed),
            rate,
            filter,
            load_p: 1.0 / per_sample,
            store_p: 1.0 / (per_sample * store_ratio),
            load_weight: weight(per_sample),
            store_weight: weight(per_sample * store_ratio),
            record_weight,
            samples: 0,
        }
    }

    #[must_use]
    pub fn name(&self) -> SamplerName {
        self.name
    }

    /// The sample the source delivers for `r`, if any. `first_touch`: the record is the first
    /// access to its superpage (where the process faults); `past_llc`: it missed the replay's
    /// LLC model, which is what `ideal` samples and what IBS's `l3missonly` passes (PEBS
    /// applies its own L2 filter). The replay calls the two halves itself, [`Self::candidate`]
    /// to record a steady pass's candidates and [`Self::draw`]; the tests ask for both at once.
    #[cfg(test)]
    pub fn sample(
        &mut self,
        r: &TraceRecord,
        first_touch: bool,
        past_llc: bool,
    ) -> Option<AccessSample> {
        let candidate = self.candidate(r, first_touch, past_llc)?;
        self.draw(&candidate)
    }

    /// Whether `r` passes the source's filters, and as what: the part of [`Self::sample`] that
    /// depends on the record and the caches alone, not on the draw. A steady-state pass of a
    /// repeated trace has the same candidates every pass (`run::fast_forward`).
    pub fn candidate(
        &mut self,
        r: &TraceRecord,
        first_touch: bool,
        past_llc: bool,
    ) -> Option<Candidate> {
        let name = self.name;
        let class = match name {
            SamplerName::Ideal if past_llc => CandidateClass::Access,
            SamplerName::Pebs if r.is_write() => CandidateClass::Store,
            SamplerName::Pebs if self.past_filter(r.addr) => CandidateClass::Load,
            SamplerName::Ibs if past_llc => CandidateClass::Op,
            SamplerName::Swfault if first_touch => CandidateClass::Fault,
            _ => return None,
        };
        Some(Candidate {
            addr: r.addr,
            kind: r.kind,
            class,
        })
    }

    /// Draws whether `candidate` becomes a sample, as the source's period would.
    pub fn draw(&mut self, candidate: &Candidate) -> Option<AccessSample> {
        let (kind, weight, source) = match candidate.class {
            CandidateClass::Access => {
                if self.rate > 1 && self.rng.below(self.rate) != 0 {
                    return None;
                }
                (
                    candidate.kind,
                    self.rate * self.record_weight,
                    SampleSource::Pebs,
                )
            }
            CandidateClass::Load | CandidateClass::Store => {
                let store = candidate.class == CandidateClass::Store;
                let (p, weight, kind) = if store {
                    (self.store_p, self.store_weight, AccessKind::Store)
                } else {
                    (self.load_p, self.load_weight, AccessKind::Load)
                };
                if self.rng.unit() >= p {
                    return None;
                }
                (kind, weight, SampleSource::Pebs)
            }
            CandidateClass::Op => {
                if self.rng.unit() >= self.load_p {
                    return None;
                }
                (AccessKind::Unknown, self.load_weight, SampleSource::Ibs)
            }
            CandidateClass::Fault => (AccessKind::Unknown, 1, SampleSource::SwFault),
        };
        self.samples += 1;
        Some(AccessSample {
            addr: candidate.addr,
            weight,
            pid: SIM_PID,
            tid: SIM_PID,
            cpu: 0,
            kind: kind as u8,
            source: source as u8,
            _pad: [0; 2],
        })
    }

    fn past_filter(&mut self, addr: u64) -> bool {
        passes(self.filter.as_mut(), addr)
    }
}

/// The router's sink in a replay: batches wait here until the policy takes them.
#[derive(Clone, Debug, Default)]
pub struct Collected(Rc<RefCell<Vec<SampleBatch>>>);

impl BatchSink for Collected {
    fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered> {
        self.0.borrow_mut().push(batch);
        Ok(())
    }
}

impl Collected {
    /// Moves every delivered sample, in order, into `out`.
    pub fn drain_into(&self, out: &mut Vec<AccessSample>) {
        for batch in self.0.borrow_mut().drain(..) {
            out.extend_from_slice(&batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: u64) -> Vec<TraceRecord> {
        let mut rng = SplitMix64::new(3);
        (0..n)
            .map(|i| {
                let addr = rng.below(1 << 30) & !63;
                if i % 4 == 0 {
                    TraceRecord::store(addr)
                } else {
                    TraceRecord::load(addr)
                }
            })
            .collect()
    }

    fn lackey() -> TraceMeta {
        TraceMeta {
            record_weight: 64,
            ..TraceMeta::default()
        }
    }

    fn counts(rs: &[TraceRecord], meta: &TraceMeta) -> FilterCounts {
        let mut c = FilterCounter::new(meta);
        rs.iter().for_each(|r| c.count(r));
        c.counts
    }

    /// What `name` delivers from `rs`, the records' LLC misses told apart as the replay does.
    fn delivered_from(
        name: SamplerName,
        rs: &[TraceRecord],
        meta: &TraceMeta,
    ) -> Vec<AccessSample> {
        let mut s = Sampler::new(name, 8, meta, 1, counts(rs, meta));
        let mut llc = LineFilter::l3(meta);
        rs.iter()
            .filter_map(|r| {
                let past_llc = llc.as_mut().is_none_or(|f| f.passes(r.addr));
                s.sample(r, false, past_llc)
            })
            .collect()
    }

    fn delivered(name: SamplerName, rs: &[TraceRecord]) -> Vec<AccessSample> {
        delivered_from(name, rs, &lackey())
    }

    #[test]
    fn pebs_and_ibs_deliver_as_many_samples_as_ideal() {
        let rs = records(200_000);
        let ideal = delivered(SamplerName::Ideal, &rs).len() as f64;
        for name in [SamplerName::Pebs, SamplerName::Ibs] {
            let n = delivered(name, &rs).len() as f64;
            assert!(
                (n / ideal - 1.0).abs() < 0.03,
                "{name:?}: {n} samples vs ideal's {ideal}"
            );
        }
    }

    #[test]
    fn pebs_samples_memory_bound_stores_as_often_as_loads() {
        // Every record is a line of its own in 1 GiB: loads and stores all reach memory.
        let rs = records(200_000);
        let meta = lackey();
        assert!((counts(&rs, &meta).memory_shares().store_period_ratio() - 1.0).abs() < 0.01);
        let samples = delivered(SamplerName::Pebs, &rs);
        let stores = samples
            .iter()
            .filter(|s| s.kind == AccessKind::Store as u8)
            .count() as f64;
        let share = stores / samples.len() as f64;
        assert!((0.2..0.3).contains(&share), "a quarter are stores: {share}");
    }

    #[test]
    fn pebs_stores_that_hit_the_caches_are_rarer_and_weigh_the_period_ratio() {
        // Stores to 64 lines over and over (cache hits), loads all over 1 GiB.
        let rs: Vec<TraceRecord> = records(200_000)
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                if r.is_write() {
                    TraceRecord::store(0x10_0000 + (i as u64 % 64) * 64)
                } else {
                    r
                }
            })
            .collect();
        let ratio = counts(&rs, &lackey())
            .memory_shares()
            .store_period_ratio()
            .round() as u64;
        assert!(ratio > 8, "stores rarely reach memory: ratio {ratio}");
        let samples = delivered(SamplerName::Pebs, &rs);
        let weight = |k: AccessKind| {
            samples
                .iter()
                .find(|s| s.kind == k as u8)
                .map(|s| s.weight)
                .expect("a sample of each kind")
        };
        let (loads, stores) = (weight(AccessKind::Load), weight(AccessKind::Store));
        assert!(
            stores.abs_diff(loads * ratio) <= ratio,
            "{stores} vs {loads} x {ratio}"
        );
        let store_share = samples
            .iter()
            .filter(|s| s.kind == AccessKind::Store as u8)
            .count() as f64
            / samples.len() as f64;
        // A quarter of the records are stores; sampled `ratio` times rarer than loads.
        let expected = 0.25 / ratio as f64 / (0.75 + 0.25 / ratio as f64);
        assert!(
            store_share < 2.0 * expected,
            "store share {store_share}, expected about {expected}"
        );
    }

    #[test]
    fn ibs_samples_carry_no_kind_and_pebs_no_unknown() {
        let rs = records(50_000);
        assert!(
            delivered(SamplerName::Ibs, &rs)
                .iter()
                .all(|s| s.kind == AccessKind::Unknown as u8)
        );
        assert!(
            delivered(SamplerName::Pebs, &rs)
                .iter()
                .all(|s| s.kind != AccessKind::Unknown as u8)
        );
    }

    #[test]
    fn the_cache_filter_drops_reuse_within_its_reach() {
        let mut f = LineFilter::new(L2_LINES, 64);
        assert!(f.passes(0x1000));
        assert!(!f.passes(0x1008), "same line again: a hit");
        // A sweep far beyond the cache's 512 record-unit lines evicts it.
        for line in 1..100_000u64 {
            f.passes(0x1000 + line * 64);
        }
        assert!(f.passes(0x1000));
    }

    #[test]
    fn records_past_the_caches_all_pass_the_filters() {
        // One line over and over: every record after the first hits the cache model...
        let rs = vec![TraceRecord::load(0x4000); 1000];
        assert_eq!(counts(&rs, &lackey()).loads_past_l2, 1);
        // ...unless the trace says its records are misses already.
        let misses = TraceMeta {
            past_caches: true,
            ..lackey()
        };
        assert_eq!(counts(&rs, &misses).loads_past_l2, 1000);
        assert_eq!(counts(&rs, &misses).past_l3, 1000);
        let n = delivered_from(SamplerName::Pebs, &rs, &misses).len();
        assert!((100..150).contains(&n), "1 in 8 of 1000: {n}");
    }

    #[test]
    fn swfault_samples_first_touches_only() {
        let mut s = Sampler::new(
            SamplerName::Swfault,
            8,
            &lackey(),
            1,
            FilterCounts::default(),
        );
        let r = TraceRecord::load(0x20_0000);
        assert!(s.sample(&r, false, true).is_none());
        let sample = s.sample(&r, true, true).expect("a fault");
        assert_eq!((sample.weight, sample.kind), (1, AccessKind::Unknown as u8));
    }
}
