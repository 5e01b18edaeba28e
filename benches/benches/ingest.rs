//! Ingest path: decode ring records and route them to per-target batches, as the drain task
//! does for every wake-up, over a synthetic ring of records. The figure is samples per second
//! on one core (criterion's throughput), against a baseline that only decodes.
//!
//! Regenerate: `cargo bench -p memtide-benches --bench ingest` (docs/benchmarks.md).
use std::{hint::black_box, sync::Arc, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use memtide_common::{AccessKind, AccessSample, SampleSource};
use memtide_core::ingest::{BatchSink, IngestCounters, Router, SampleBatch, Undelivered};
use tokio::sync::mpsc;

/// The daemon's sink (`memtide::sources::TargetChannel`): a bounded tokio channel to the
/// target's task, `try_send` only. Redefined here so the bench needs no BPF build.
struct Channel(mpsc::Sender<SampleBatch>);

impl BatchSink for Channel {
    fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered> {
        self.0.try_send(batch).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => Undelivered::Full,
            mpsc::error::TrySendError::Closed(_) => Undelivered::Closed,
        })
    }
}

const RECORDS: usize = 1 << 16;
const TARGETS: u32 = 8;

/// A ring's worth of records: runs of 1..=16 samples per process (as the CPUs interleave
/// processes), spread over `TARGETS` processes plus one untracked process.
fn synthetic_ring() -> Vec<[u8; AccessSample::SIZE]> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut records = Vec::with_capacity(RECORDS);
    while records.len() < RECORDS {
        let pid = 1000 + u32::try_from(next() % u64::from(TARGETS + 1)).unwrap_or(0);
        let run = 1 + next() % 16;
        for _ in 0..run {
            records.push(
                AccessSample {
                    addr: 0x7f00_0000_0000 + (next() % (1 << 30)),
                    weight: 1,
                    pid,
                    tid: pid,
                    cpu: 0,
                    kind: AccessKind::Load as u8,
                    source: SampleSource::Pebs as u8,
                    _pad: [0; 2],
                }
                .to_ne_bytes(),
            );
        }
    }
    records.truncate(RECORDS);
    records
}

fn ingest(c: &mut Criterion) {
    let ring = synthetic_ring();
    let mut group = c.benchmark_group("ingest");
    group
        .throughput(Throughput::Elements(RECORDS as u64))
        .measurement_time(Duration::from_secs(5))
        .sample_size(20);

    group.bench_function("decode_only", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for record in &ring {
                if let Some(sample) = AccessSample::from_ne_bytes(record) {
                    sum = sum.wrapping_add(sample.addr);
                }
            }
            black_box(sum)
        });
    });

    group.bench_function("decode_and_route", |b| {
        b.iter_batched(
            || {
                let mut router = Router::new(512, Arc::new(IngestCounters::default()));
                let receivers: Vec<_> = (0..TARGETS)
                    .map(|i| {
                        // Deep enough that a drain pass never fills it: this measures routing,
                        // not the drop path.
                        let (sender, receiver) = mpsc::channel(RECORDS);
                        router.add_route(1000 + i, Channel(sender));
                        receiver
                    })
                    .collect();
                (router, receivers)
            },
            |(mut router, receivers)| {
                for record in &ring {
                    router.push_record(record);
                }
                router.flush();
                (router, receivers)
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
