//! Synthetic workloads after digest §6.5, deterministic from a seed.
//!
//! Each generator emits a post-cache (LLC-miss) stream sampled 1 in [`RECORD_WEIGHT`]: a record
//! stands for `RECORD_WEIGHT` misses, so a sequential sweep advances `RECORD_WEIGHT` cache lines
//! per record. Hot sets are sized against the footprint `F` so that they matter at the suite's
//! fast-tier ratio (25 %). Addresses start at [`BASE`].

use serde::Serialize;

use super::trace::{RecordSource, TraceError, TraceMeta, TraceRecord};
use memtide_core::{
    rng::SplitMix64,
    units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE},
};

/// First address of every generated footprint (2 MiB aligned).
pub const BASE: u64 = 0x7f00_0000_0000 & ((1 << 47) - 1);
/// Misses one generated record stands for.
pub const RECORD_WEIGHT: u32 = 32;
const LINE: u64 = 64;
/// Memory-level parallelism declared by the bandwidth-bound workload (GPU-like, BW-AWARE).
pub const MLP_BANDWIDTH_BOUND: u32 = 1024;

/// Workloads of `memtide gen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Blocked stream triad: sweeps a window of F/8 (dense 2 MiB regions) for several passes,
    /// then moves on (stream, lulesh; Ryoo: 2 MiB-preferring).
    Stream,
    /// Uniform random 8 B read-modify-write over F (gups, xsbench).
    Gups,
    /// GUPS with 70 % of updates on scattered hot 4 KiB pages (F/32 of them): sparse hotness.
    GupsHotset,
    /// As gups-hotset, but the hot pages move to new random pages every 1/8 of the trace.
    GupsMovingHotset,
    /// Key-value store: Zipf(0.99) key popularity over 256 B items in a hashed table, 90 %
    /// gets, hot keys drifting every 1/10 of the trace (Memcached/Redis-like).
    ZipfKv,
    /// 70 % of accesses on random hot 64 KiB blocks, 12 of 16 pages each (graph500, mg, minife).
    #[value(name = "clustered-64k")]
    #[serde(rename = "clustered-64k")]
    Clustered64k,
    /// Rainbow's sparse-hot superpages: hot superpages with 1–32 hot 4 KiB pages carrying 70 %.
    SparseSuperpage,
    /// Groups of pages revisited at a fixed reuse distance of 1/6 of the trace (backprop, kmeans).
    StridedReuse,
    /// Sequential traversals whose lower bound rises until F/10 is left (lud's trailing
    /// submatrix: the data touched first dies first).
    Shrinking,
    /// pagerank-like: 13.5 % of pages active in ≥ 3/4 of periods, 22 % in about half, rest rare.
    Oscillating,
    /// Address-segregated regions: a write-heavy hot region and a read-heavy hot region (Memos).
    RwMix,
    /// Eight concurrent streams with high memory-level parallelism (bandwidth-bound).
    BwMultistream,
    /// A dependent pointer chase over a random cyclic permutation (latency-bound).
    PointerChase,
    /// Phases alternating a sparse-random phase and a streaming phase on separate data (cg, ua).
    Phases,
    /// The VM suite's promotion workload (agent/tests/vm/promotion.rs): every page written once
    /// in order, then a hot subset of F/8 starting at 7F/16 read and written, one word per page
    /// per pass, the rest never touched again. Not in the suite's matrix: it calibrates the
    /// DAMON model against the real DAMON in the VM (`baselines::damon::vm_calibration`).
    HotSubset,
}

impl Workload {
    pub const ALL: [Self; 14] = [
        Self::Stream,
        Self::Gups,
        Self::GupsHotset,
        Self::GupsMovingHotset,
        Self::ZipfKv,
        Self::Clustered64k,
        Self::SparseSuperpage,
        Self::StridedReuse,
        Self::Shrinking,
        Self::Oscillating,
        Self::RwMix,
        Self::BwMultistream,
        Self::PointerChase,
        Self::Phases,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Gups => "gups",
            Self::GupsHotset => "gups-hotset",
            Self::GupsMovingHotset => "gups-moving-hotset",
            Self::ZipfKv => "zipf-kv",
            Self::Clustered64k => "clustered-64k",
            Self::SparseSuperpage => "sparse-superpage",
            Self::StridedReuse => "strided-reuse",
            Self::Shrinking => "shrinking",
            Self::Oscillating => "oscillating",
            Self::RwMix => "rw-mix",
            Self::BwMultistream => "bw-multistream",
            Self::PointerChase => "pointer-chase",
            Self::Phases => "phases",
            Self::HotSubset => "hot-subset",
        }
    }

    /// Accesses one record stands for: [`RECORD_WEIGHT`] misses, except in `hot-subset`,
    /// whose records are the VM workload's accesses one by one (so that a pass over its hot
    /// subset takes as long as DAMON's checks need it to).
    #[must_use]
    pub const fn record_weight(self) -> u32 {
        match self {
            Self::HotSubset => 1,
            _ => RECORD_WEIGHT,
        }
    }

    #[must_use]
    pub const fn mlp(self) -> u32 {
        match self {
            Self::BwMultistream => MLP_BANDWIDTH_BOUND,
            Self::Stream | Self::Shrinking => 8,
            Self::PointerChase => 1,
            _ => 2,
        }
    }
}

/// Parameters of one generated trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GenSpec {
    pub workload: Workload,
    /// Bytes (rounded down to 2 MiB, at least 16 MiB).
    pub footprint: u64,
    pub records: u64,
    pub seed: u64,
}

impl GenSpec {
    #[must_use]
    pub fn footprint(&self) -> u64 {
        (self.footprint / SUPERPAGE_SIZE).max(8) * SUPERPAGE_SIZE
    }
}

impl super::trace::TraceSpec for GenSpec {
    fn name(&self) -> String {
        self.workload.name().to_owned()
    }

    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
        Ok(Box::new(Generator::new(*self)))
    }
}

/// A streaming generator (a [`RecordSource`]).
pub struct Generator {
    spec: GenSpec,
    meta: TraceMeta,
    rng: SplitMix64,
    i: u64,
    pages: u64,
    /// Hot pages (page numbers) or hot blocks, per workload.
    hot: Vec<u64>,
    cursor: u64,
    pending: Option<TraceRecord>,
}

fn distinct(rng: &mut SplitMix64, k: u64, n: u64) -> Vec<u64> {
    let mut set = std::collections::BTreeSet::new();
    while (set.len() as u64) < k.min(n) {
        set.insert(rng.below(n));
    }
    set.into_iter().collect()
}

impl Generator {
    #[must_use]
    pub fn new(spec: GenSpec) -> Self {
        let footprint = spec.footprint();
        let mut g = Self {
            spec: GenSpec { footprint, ..spec },
            meta: TraceMeta {
                record_weight: spec.workload.record_weight(),
                mlp: spec.workload.mlp(),
                footprint_hint: footprint,
                past_caches: true,
                ..TraceMeta::default()
            },
            rng: SplitMix64::new(spec.seed ^ 0x6d65_6d74_6964_6500),
            i: 0,
            pages: footprint / PAGE_SIZE,
            hot: Vec::new(),
            cursor: 0,
            pending: None,
        };
        g.reset_hot();
        g
    }

    fn reset_hot(&mut self) {
        let pages = self.pages;
        self.hot = match self.spec.workload {
            Workload::GupsHotset | Workload::GupsMovingHotset => {
                distinct(&mut self.rng, pages / 32, pages)
            }
            Workload::Phases => distinct(&mut self.rng, pages / 64, pages / 2),
            Workload::Clustered64k => {
                // F/64 of hot pages in 64 KiB blocks, 12 of 16 pages each.
                let blocks = (pages / 16 / 48).max(4);
                let mut hot = Vec::new();
                for b in distinct(&mut self.rng, blocks, pages / 16) {
                    for p in distinct(&mut self.rng, 12, 16) {
                        hot.push(b * 16 + p);
                    }
                }
                hot
            }
            Workload::SparseSuperpage => {
                // Half the superpages are hot, each with 1–32 hot pages (Rainbow's GUPS row).
                let sps = pages / SUBPAGES as u64;
                let mut hot = Vec::new();
                for sp in distinct(&mut self.rng, sps / 2, sps) {
                    let n = 1 + self.rng.below(32);
                    for p in distinct(&mut self.rng, n, SUBPAGES as u64) {
                        hot.push(sp * SUBPAGES as u64 + p);
                    }
                }
                hot
            }
            Workload::Oscillating => {
                // A random permutation prefix: first 13.5 % always active, next 22 % sometimes.
                let n = pages * 355 / 1000;
                distinct(&mut self.rng, n, pages)
            }
            Workload::RwMix => Vec::new(),
            _ => Vec::new(),
        };
        // Interleave the order of hot pages deterministically (the sets above are sorted).
        let len = self.hot.len();
        for i in (1..len).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            self.hot.swap(i, j);
        }
    }

    fn addr(&self, page: u64, off: u64) -> u64 {
        BASE + (page % self.pages) * PAGE_SIZE + ((off % PAGE_SIZE) & !7)
    }

    fn rand_off(&mut self) -> u64 {
        self.rng.below(PAGE_SIZE / 8) * 8
    }

    fn uniform(&mut self) -> u64 {
        let p = self.rng.below(self.pages);
        let o = self.rand_off();
        self.addr(p, o)
    }

    fn hot_or_uniform(&mut self, share: f64) -> u64 {
        if !self.hot.is_empty() && self.rng.unit() < share {
            let p = self.hot[self.rng.below(self.hot.len() as u64) as usize];
            let o = self.rand_off();
            self.addr(p, o)
        } else {
            self.uniform()
        }
    }

    /// Sequential sweep position `k` (in records) over `[start, start + len)` bytes.
    fn sweep(&self, start: u64, len: u64, k: u64) -> u64 {
        let step = LINE * u64::from(RECORD_WEIGHT);
        let n = (len / step).max(1);
        BASE + start + (k % n) * step
    }

    fn next_record(&mut self) -> TraceRecord {
        if let Some(r) = self.pending.take() {
            return r;
        }
        match self.spec.workload {
            Workload::Stream => self.stream(),
            Workload::Gups => {
                let a = self.uniform();
                self.read_modify_write(a)
            }
            Workload::GupsHotset => {
                let a = self.hot_or_uniform(0.7);
                self.read_modify_write(a)
            }
            Workload::GupsMovingHotset => {
                if self.i > 0 && self.i.is_multiple_of((self.records() / 8).max(1)) {
                    self.reset_hot();
                }
                let a = self.hot_or_uniform(0.7);
                self.read_modify_write(a)
            }
            Workload::ZipfKv => self.zipf_kv(),
            Workload::Clustered64k | Workload::SparseSuperpage => {
                let a = self.hot_or_uniform(0.7);
                let store = self.rng.unit() < 0.2;
                access(store, a)
            }
            Workload::StridedReuse => self.strided_reuse(),
            Workload::Shrinking => self.shrinking(),
            Workload::Oscillating => self.oscillating(),
            Workload::RwMix => self.rw_mix(),
            Workload::BwMultistream => self.bw_multistream(),
            Workload::PointerChase => self.pointer_chase(),
            Workload::Phases => self.phases(),
            Workload::HotSubset => self.hot_subset(),
        }
    }

    /// Records in the whole trace (at least 1).
    fn records(&self) -> u64 {
        self.spec.records.max(1)
    }

    /// A load of `a` now and a store to it as the next record.
    fn read_modify_write(&mut self, a: u64) -> TraceRecord {
        self.pending = Some(TraceRecord::store(a));
        TraceRecord::load(a)
    }

    /// The next sequential position of the workload's own sweep.
    fn next_cursor(&mut self) -> u64 {
        let k = self.cursor;
        self.cursor += 1;
        k
    }

    /// Triad over three arrays of the current window: a[i] = b[i] + s*c[i].
    fn stream(&mut self) -> TraceRecord {
        let window = self.spec.footprint / 8;
        let third = window / 3 / SUPERPAGE_SIZE * SUPERPAGE_SIZE;
        let per_window = (self.records() / 12).max(1);
        let w = (self.i / per_window) % 8;
        let k = self.next_cursor();
        let (j, arr) = (k / 3, k % 3);
        let a = self.sweep(w * window + arr * third, third, j);
        access(arr == 0, a)
    }

    /// Zipf(0.99) keys in hashed 256-byte slots, the popular keys drifting ten times.
    fn zipf_kv(&mut self) -> TraceRecord {
        let items = self.spec.footprint / 256;
        let rank = zipf(&mut self.rng, items, 0.99);
        let drift = (self.i / (self.records() / 10).max(1)) * (items / 7);
        let key = (rank + drift) % items;
        // Hashed slot: a bijection of the key space (odd multiplier, power-of-two size).
        let slots = 1u64 << (63 - items.max(1).leading_zeros());
        let slot = key.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) % slots.max(1);
        let a = BASE + slot * 256 + self.rng.below(4) * LINE;
        let store = self.rng.unit() < 0.1;
        access(store, a)
    }

    /// 12 groups of F/24 each visited in turn, one sequential pass per visit; the whole cycle
    /// repeats every n/6 records (reuse distance), 6 cycles per trace.
    fn strided_reuse(&mut self) -> TraceRecord {
        let (n, i) = (self.records(), self.i);
        let groups = 12;
        let cycle = (n / 6).max(groups);
        let g = (i % cycle) * groups / cycle;
        let k = i % (cycle / groups);
        let len = self.spec.footprint / 24;
        TraceRecord::load(self.sweep(g * len * 2, len, k))
    }

    /// Sweeps to the top of the footprint from a bottom that rises until F/10 is left. A
    /// right-looking LU (Rodinia's lud) works on the trailing submatrix, which leaves the
    /// matrix's first rows behind for good: the data first touch placed in the fast tier is
    /// the first to go idle, so the policy must evict it in time (Doudali: shorter periods
    /// best on lud). Shrinking the top instead left first touch holding the data that lives
    /// longest, and never migrating was the best placement at every epoch.
    fn shrinking(&mut self) -> TraceRecord {
        let frac = 1.0 - 0.9 * (self.i as f64 / self.records() as f64);
        let len = ((self.spec.footprint as f64 * frac) as u64).max(SUPERPAGE_SIZE);
        let k = self.next_cursor();
        let a = self.sweep(self.spec.footprint - len, len, k);
        access(k.is_multiple_of(4), a)
    }

    /// 16 periods: 13.5 % of pages always active, 22 % active every other period, rest rare.
    fn oscillating(&mut self) -> TraceRecord {
        let periods = 16;
        let period = self.i * periods / self.records();
        let always = (self.pages * 135 / 1000) as usize;
        let r = self.rng.unit();
        let page = if r < 0.55 {
            self.hot[self.rng.below(always as u64) as usize]
        } else if r < 0.9 {
            // The half of the middle class that is active this period.
            let mid = self.hot.len() - always;
            loop {
                let j = self.rng.below(mid as u64);
                if (j + period).is_multiple_of(2) {
                    break self.hot[always + j as usize];
                }
            }
        } else {
            self.rng.below(self.pages)
        };
        let o = self.rand_off();
        TraceRecord::load(self.addr(page, o))
    }

    /// [0, F/8): write-heavy hot region; [F/8, 3F/8): read-heavy hot region; the rest rare.
    fn rw_mix(&mut self) -> TraceRecord {
        let r = self.rng.unit();
        let o = self.rand_off();
        if r < 0.4 {
            let p = self.rng.below(self.pages / 8);
            let a = self.addr(p, o);
            let store = self.rng.unit() < 0.9;
            access(store, a)
        } else if r < 0.85 {
            let p = self.pages / 8 + self.rng.below(self.pages / 4);
            TraceRecord::load(self.addr(p, o))
        } else {
            let p = self.rng.below(self.pages);
            TraceRecord::load(self.addr(p, o))
        }
    }

    /// Eight interleaved sweeps over eighths of the footprint, the first one storing.
    fn bw_multistream(&mut self) -> TraceRecord {
        let streams = 8;
        let (s, k) = (self.i % streams, self.i / streams);
        let part = self.spec.footprint / streams;
        access(s == 0, self.sweep(s * part, part, k))
    }

    /// Full-period LCG over the lines of the footprint: a random cyclic chase.
    fn pointer_chase(&mut self) -> TraceRecord {
        let lines = (self.spec.footprint / LINE).next_power_of_two() / 2;
        self.cursor = (self
            .cursor
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407))
            % lines;
        TraceRecord::load(BASE + self.cursor * LINE)
    }

    /// Eight phases: even ones sparse-random on the first half, odd ones a stream over a window
    /// of the second half.
    fn phases(&mut self) -> TraceRecord {
        let phase = self.i * 8 / self.records();
        if phase.is_multiple_of(2) {
            let a = self.hot_or_uniform(0.8);
            let page = (a - BASE) / PAGE_SIZE % (self.pages / 2);
            let o = self.rand_off();
            let a = self.addr(page, o);
            self.read_modify_write(a)
        } else {
            let k = self.next_cursor();
            let f = self.spec.footprint;
            let window = f / 8;
            TraceRecord::load(self.sweep(f / 2 + (phase / 2 % 4) * window, window, k))
        }
    }

    /// Every page written once in order, then read and written over a hot F/8 from 7F/16.
    fn hot_subset(&mut self) -> TraceRecord {
        let k = self.next_cursor();
        if k < self.pages {
            return TraceRecord::store(self.addr(k, 0));
        }
        let (first, len) = (self.pages * 7 / 16, (self.pages / 8).max(1));
        let a = self.addr(first + (k - self.pages) % len, 0);
        self.read_modify_write(a)
    }
}

/// A store of `a` when `store`, else a load.
fn access(store: bool, a: u64) -> TraceRecord {
    if store {
        TraceRecord::store(a)
    } else {
        TraceRecord::load(a)
    }
}

/// Zipf(s) rank in `0..n` by inverting the continuous approximation of the CDF.
fn zipf(rng: &mut SplitMix64, n: u64, s: f64) -> u64 {
    let u = rng.unit();
    let e = 1.0 - s;
    let x = (u * ((n as f64).powf(e) - 1.0) + 1.0).powf(1.0 / e);
    (x as u64).saturating_sub(1).min(n - 1)
}

impl RecordSource for Generator {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        let left = self.spec.records - self.i;
        let take = left.min(max as u64);
        for _ in 0..take {
            let r = self.next_record();
            out.push(r);
            self.i += 1;
        }
        Ok(take as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use memtide_core::units::{PAGE_SHIFT, SUPERPAGE_SHIFT};

    use super::*;
    use crate::trace::read_all;

    fn gen_all(w: Workload, records: u64) -> Vec<TraceRecord> {
        let spec = GenSpec {
            workload: w,
            footprint: 64 << 20,
            records,
            seed: 3,
        };
        read_all(&mut Generator::new(spec)).unwrap()
    }

    #[test]
    fn deterministic_and_in_range() {
        for w in Workload::ALL {
            let a = gen_all(w, 5000);
            assert_eq!(a, gen_all(w, 5000), "{w:?}");
            assert_eq!(a.len(), 5000);
            assert!(
                a.iter()
                    .all(|r| (BASE..BASE + (64 << 20)).contains(&r.addr)),
                "{w:?} out of range"
            );
        }
    }

    #[test]
    fn shapes() {
        // Streaming touches every page of its window densely; gups-hotset concentrates 70 %.
        let s = gen_all(Workload::Stream, 120_000);
        let pages: HashSet<u64> = s.iter().map(|r| r.addr >> PAGE_SHIFT).collect();
        let sps: HashSet<u64> = s.iter().map(|r| r.addr >> SUPERPAGE_SHIFT).collect();
        assert!(
            pages.len() as u64 >= sps.len() as u64 * 500,
            "dense 2 MiB regions"
        );
        let g = gen_all(Workload::GupsHotset, 40_000);
        let mut counts: HashMap<u64, u32> = HashMap::new();
        for r in &g {
            *counts.entry(r.addr >> PAGE_SHIFT).or_default() += 1;
        }
        let mut v: Vec<u32> = counts.into_values().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = v.iter().take(512).sum();
        assert!(f64::from(top) / 40_000.0 > 0.6, "hot share {top}");
        // RMW: every load is followed by a store to the same address.
        assert_eq!(g[0].addr, g[1].addr);
        assert!(g[1].is_write() && !g[0].is_write());
        // rw-mix: most stores fall in the first eighth.
        let m = gen_all(Workload::RwMix, 20_000);
        let w: Vec<_> = m.iter().filter(|r| r.is_write()).collect();
        assert!(w.iter().all(|r| r.addr < BASE + (8 << 20)));
        // Pointer chase visits distinct lines (a permutation cycle).
        let p = gen_all(Workload::PointerChase, 10_000);
        let lines: HashSet<u64> = p.iter().map(|r| r.addr).collect();
        assert_eq!(lines.len(), 10_000);
        // hot-subset writes each page once, then read-modify-writes F/8 of them from 7F/16.
        let pages = 64 << 20 >> PAGE_SHIFT;
        let h = gen_all(Workload::HotSubset, 30_000);
        assert!(h[..pages].iter().all(TraceRecord::is_write));
        let first: HashSet<u64> = h[..pages].iter().map(|r| r.addr >> PAGE_SHIFT).collect();
        assert_eq!(first.len(), pages);
        let hot: HashSet<u64> = h[pages..]
            .iter()
            .map(|r| (r.addr - BASE) >> PAGE_SHIFT)
            .collect();
        assert_eq!(hot.len() as u64, pages as u64 / 8);
        assert_eq!(hot.iter().min(), Some(&(pages as u64 * 7 / 16)));
    }

    /// The shrinking sweep covers the whole footprint at first and only its top tenth at the
    /// end: its first pages go idle for good, its last stay live throughout.
    #[test]
    fn the_shrinking_sweep_leaves_its_first_pages_behind() {
        let records = 200_000;
        let t = gen_all(Workload::Shrinking, records);
        let (first, last) = t.split_at(t.len() / 5);
        let span = |rs: &[TraceRecord]| {
            let lo = rs.iter().map(|r| r.addr).min().unwrap() - BASE;
            let hi = rs.iter().map(|r| r.addr).max().unwrap() - BASE;
            (lo, hi)
        };
        let footprint = 64u64 << 20;
        let (lo, hi) = span(first);
        assert!(
            lo < footprint / 100 && hi > footprint * 99 / 100,
            "{lo} {hi}"
        );
        let (lo, hi) = span(&last[last.len() - 5000..]);
        assert!(
            lo >= footprint * 85 / 100,
            "the end sweeps only the top: {lo}"
        );
        assert!(hi > footprint * 99 / 100, "{hi}");
    }

    #[test]
    fn zipf_is_skewed() {
        let mut rng = SplitMix64::new(1);
        let n = 1_000_000;
        let top = (0..100_000)
            .filter(|_| zipf(&mut rng, n, 0.99) < 1000)
            .count();
        assert!(top > 30_000 && top < 70_000, "{top}");
    }
}
