//! Engine hot paths: stage-1 ingest, the interval close, `plan()` for a target touching 1 TiB,
//! and engine memory.
//!
//! Run: `cargo bench -p memtide-benches --bench engine`. Figures go to docs/benchmarks.md.

use std::{collections::HashMap, hint::black_box, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group};
use memtide_core::{
    engine::{AccessKind, Engine, EngineConfig, Sample, domain::MEMOS_READ_WRITE_RATIO},
    policy::{CapacityView, PlacementView, TierCost},
    rng::SplitMix64,
    testgen::{Pattern, TraceGen},
    tiering::{Tiering, TieringConfig},
    units::{PAGE_SIZE, Residency, SUBPAGES, SUPERPAGE_SIZE, Tier, superpage_of},
};

const TIB: u64 = 1 << 40;
const GIB: u64 = 1 << 30;
const SUPERPAGES_1TIB: u64 = TIB / SUPERPAGE_SIZE;
const BATCH: usize = 1 << 20;

/// Every superpage below `fast_end` is fast, the rest slow: O(1) answers, as a daemon's cached
/// placement map or the simulator's tier model should give.
struct SplitView {
    fast_end: u64,
}

impl PlacementView for SplitView {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        Some(if page < self.fast_end {
            Tier::Fast
        } else {
            Tier::Slow
        })
    }

    fn residency(&self, superpage: u64) -> Residency {
        Residency::all(self.tier_of(superpage).unwrap_or(Tier::Slow))
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        visit(0, self.fast_end);
    }
}

/// Uniformly random samples over 1 TiB (every access a different superpage: the cache-hostile case).
fn uniform_1tib(n: usize) -> Vec<Sample> {
    let mut rng = SplitMix64::new(42);
    (0..n)
        .map(|_| Sample {
            addr: rng.below(TIB) & !7,
            kind: if rng.below(4) == 0 {
                AccessKind::Store
            } else {
                AccessKind::Load
            },
            weight: 1,
        })
        .collect()
}

/// A GUPS-like skewed stream over 64 GiB: 70 % of samples on ~5 k hot pages.
fn skewed_64gib(n: usize) -> Vec<Sample> {
    let mut g = TraceGen::new(
        7,
        Pattern::SparseHot {
            hot_superpages: 300,
            max_hot: 32,
        },
        0,
        64 * GIB,
    );
    g.write_share = 0.25;
    g.interval(n)
}

/// A target's engine and planner whose engine has seen every superpage of 1 TiB, with N = 1000
/// stage-2 superpages.
fn engine_1tib() -> Tiering {
    let cfg = TieringConfig {
        engine: EngineConfig {
            top_n: 1000,
            top_n_max: 1000,
            adapt_top_n: false,
            ..EngineConfig::default()
        },
        ..TieringConfig::default()
    };
    let mut e = Tiering::new(cfg).expect("valid config");
    let mut rng = SplitMix64::new(1);
    let all: Vec<Sample> = (0..SUPERPAGES_1TIB)
        .map(|sp| Sample {
            addr: sp * SUPERPAGE_SIZE + rng.below(SUBPAGES as u64) * PAGE_SIZE,
            kind: AccessKind::Load,
            weight: 1 + rng.below(8) as u32,
        })
        .collect();
    e.observe_samples(&all, Duration::ZERO);
    // A hot minority so stage 2 has real per-page data when the plan reads it.
    let hot = skewed_64gib(1 << 20);
    e.tick(Duration::from_millis(50));
    e.observe_samples(&hot, Duration::from_millis(60));
    e.observe_samples(&all, Duration::from_millis(70));
    e.tick(Duration::from_millis(100));
    e.observe_samples(&hot, Duration::from_millis(110));
    e
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, samples) in [
        ("uniform_1tib", uniform_1tib(BATCH)),
        ("skewed_64gib", skewed_64gib(BATCH)),
    ] {
        let mut e =
            Engine::new(EngineConfig::default(), MEMOS_READ_WRITE_RATIO).expect("valid config");
        // Warm: every superpage known, stage 2 selected; later batches stay in one interval.
        e.observe_samples(&samples, Duration::ZERO);
        e.tick(Duration::from_millis(50));
        g.bench_function(format!("engine/{name}"), |b| {
            b.iter(|| e.observe_samples(black_box(&samples), Duration::from_millis(60)));
        });
        // Baseline: one std HashMap (SipHash) counter pair per superpage, no stage 2.
        let mut naive: HashMap<u64, (u16, u16)> = HashMap::new();
        g.bench_function(format!("std_hashmap_baseline/{name}"), |b| {
            b.iter(|| {
                for s in black_box(&samples) {
                    let c = naive.entry(superpage_of(s.addr)).or_default();
                    if s.kind == AccessKind::Store {
                        c.1 = c.1.saturating_add(1);
                    } else {
                        c.0 = c.0.saturating_add(1);
                    }
                }
            });
        });
    }
    g.finish();
}

fn plan(c: &mut Criterion) {
    let base = engine_1tib();
    // 100 GiB fast tier, full above the high watermark: the planner must collect victims over
    // all 512 Ki superpages, the expensive path.
    let view = SplitView {
        fast_end: 100 * GIB,
    };
    let cap = CapacityView {
        fast_total_bytes: 100 * GIB,
        fast_free_bytes: 100 * GIB / 1000,
        slow_total_bytes: TIB,
        slow_free_bytes: 0,
        fast: TierCost {
            read_ns: Some(80.0),
            write_ns: Some(80.0),
            bandwidth_bytes_per_s: Some(200e9),
        },
        slow: TierCost {
            read_ns: Some(240.0),
            write_ns: Some(480.0),
            bandwidth_bytes_per_s: Some(80e9),
        },
        share: None,
    };
    let mut g = c.benchmark_group("plan");
    g.bench_function("1tib_n1000_full_fast_tier", |b| {
        b.iter_batched(
            || base.clone(),
            |mut e| black_box(e.plan(Duration::from_secs(1), &view, &cap)),
            BatchSize::LargeInput,
        );
    });
    let roomy = CapacityView {
        fast_free_bytes: 50 * GIB,
        ..cap
    };
    g.bench_function("1tib_n1000_free_room", |b| {
        b.iter_batched(
            || base.clone(),
            |mut e| black_box(e.plan(Duration::from_secs(1), &view, &roomy)),
            BatchSize::LargeInput,
        );
    });
    g.finish();
}

/// One sample in each of `count` superpages spread evenly over the first `tracked`.
fn spread_samples(tracked: u64, count: u64) -> Vec<Sample> {
    let mut rng = SplitMix64::new(3);
    let stride = tracked / count;
    (0..count)
        .map(|i| Sample {
            addr: i * stride * SUPERPAGE_SIZE + rng.below(SUBPAGES as u64) * PAGE_SIZE,
            kind: AccessKind::Load,
            weight: 1 + rng.below(8) as u32,
        })
        .collect()
}

/// One interval close (`Engine::tick` across one boundary), N = 1000, of an engine tracking
/// `tracked` superpages of which `sampled` have samples in every interval: all of them (the
/// agent's worst case: samples spread over more superpages than stage 2 holds), or 16 Ki of
/// 1 TiB's (a large target whose other superpages were sampled once and have cooled to zero).
fn close(c: &mut Criterion) {
    let mut g = c.benchmark_group("close");
    for (name, tracked, sampled) in [
        ("16k_superpages", 16 * 1024, 16 * 1024),
        ("1tib", SUPERPAGES_1TIB, SUPERPAGES_1TIB),
        ("1tib_16k_sampled", SUPERPAGES_1TIB, 16 * 1024),
    ] {
        let cfg = EngineConfig {
            top_n: 1000,
            top_n_max: 1000,
            adapt_top_n: false,
            ..EngineConfig::default()
        };
        let interval = cfg.interval();
        let all = spread_samples(tracked, tracked);
        let some = spread_samples(tracked, sampled);
        let mut e = Engine::new(cfg, MEMOS_READ_WRITE_RATIO).expect("valid config");
        e.observe_samples(&all, Duration::ZERO);
        // Long enough for the superpages sampled once to cool to zero; stage 2 selected and
        // filled from the sampled ones; a plan's epoch end every 5 intervals.
        for k in 1..40u32 {
            e.observe_samples(&some, interval * k);
            e.tick(interval * k);
            if k % 5 == 0 {
                e.end_epoch(0);
            }
        }
        e.observe_samples(&some, interval * 40);
        g.throughput(Throughput::Elements(tracked));
        g.bench_function(name, |b| {
            b.iter_batched(
                || e.clone(),
                |mut e| {
                    e.tick(interval * 41);
                    e
                },
                BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

fn memory_report() {
    let e = engine_1tib();
    let naive = SUPERPAGES_1TIB * SUBPAGES as u64 * 2;
    let mem = e.memory_bytes() as u64;
    let st = e.stats();
    println!(
        "engine memory, 1 TiB target ({} superpages touched, N = {}): {:.2} MiB; naive 2 B per 4 KiB: {} MiB; ratio 1/{:.1}",
        st.touched_superpages,
        st.stage2_superpages,
        mem as f64 / f64::from(1 << 20),
        naive >> 20,
        naive as f64 / mem as f64
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = ingest, close, plan
}

fn main() {
    memory_report();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
