//! Simulator replay throughput: trace records per second through `memtide sim`'s replay loop
//! (tier model + policy) on one core, for the adaptive engine and for the first-touch baseline
//! (the loop alone). The bar is 5 M records/s.
//!
//! Run: `cargo bench -p memtide-benches --bench sim`. Figures go to docs/benchmarks.md.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group};
use memtide_sim::{
    PolicyName,
    model::PresetName,
    run::{Footprint, MemTrace, SimConfig, measure_footprint},
    simulate,
    trace::{RecordSource as _, TraceSpec as _},
    workload::{GenSpec, Generator, Workload},
};

const RECORDS: u64 = 1_000_000;

fn trace(w: Workload) -> (MemTrace, Footprint) {
    let spec = GenSpec {
        workload: w,
        footprint: 256 << 20,
        records: RECORDS,
        seed: 1,
    };
    let mut g = Generator::new(spec);
    let mut records = Vec::with_capacity(RECORDS as usize);
    while g
        .fill(&mut records, 1 << 16)
        .expect("generator never fails")
        > 0
    {}
    let t = MemTrace {
        name: spec.name(),
        records: std::sync::Arc::new(records),
        meta: g.meta().clone(),
    };
    let fp = measure_footprint(&t).expect("in-memory trace");
    (t, fp)
}

fn replay(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_replay");
    group.sample_size(10);
    group.throughput(Throughput::Elements(RECORDS));
    for w in [Workload::GupsHotset, Workload::Stream, Workload::ZipfKv] {
        let (t, fp) = trace(w);
        for p in [
            PolicyName::NoMigration,
            PolicyName::Memtide,
            PolicyName::Tpp,
            PolicyName::Memtis,
        ] {
            let mut cfg = SimConfig::new(PresetName::Pmem.preset());
            cfg.footprint = Some(fp);
            group.bench_function(format!("{}/{}", w.name(), p.name()), |b| {
                b.iter(|| black_box(simulate(&t, p, &cfg).expect("replay")));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, replay);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
