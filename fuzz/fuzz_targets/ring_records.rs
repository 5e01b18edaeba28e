//! The ring-buffer record decoders: `AccessSample::from_ne_bytes` and
//! `DamonRegion::from_ne_bytes` (`common/src/lib.rs`) and the ingest router that decodes the
//! samples ring and batches samples per process (`agent/core/src/ingest.rs`).
//!
//! Input: one byte of settings (batch size, channel depth, a default route or not), then a
//! sequence of items, each a length byte and that many bytes of record (or what is left). Items
//! with a length byte 0xf8..=0xff are route commands instead: remove (0xf8..0xfb) or add again
//! (0xfc..=0xff) the route of pid 1..=4.
//!
//! Properties: a record of at least the wire size decodes and encodes back to its bytes (with
//! the padding zeroed), a shorter one is refused; every record the router sees is counted once,
//! as decoded or malformed, and every decoded sample once, as delivered, dropped or unrouted;
//! the samples a pid's channels receive are its own, in ring order (a subsequence of what was
//! sent to it, batches dropped on a full channel missing), and their total is the delivered count.
#![no_main]

use std::{
    cell::RefCell,
    collections::{BTreeMap, VecDeque},
    rc::Rc,
    sync::{Arc, atomic::Ordering},
};

use libfuzzer_sys::fuzz_target;
use memtide_common::{AccessKind, AccessSample, DamonRegion, SampleSource};
use memtide_core::ingest::{
    BatchSink, IngestCounters, RouteCommand, Router, SampleBatch, Undelivered,
};

/// A bounded queue, as the daemon's channel to a target task is: the router's end delivers,
/// the test's end receives.
#[derive(Clone)]
struct Channel {
    batches: Rc<RefCell<VecDeque<SampleBatch>>>,
    depth: usize,
}

impl BatchSink for Channel {
    fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered> {
        let mut batches = self.batches.borrow_mut();
        if batches.len() >= self.depth {
            return Err(Undelivered::Full);
        }
        batches.push_back(batch);
        Ok(())
    }
}

impl Channel {
    fn try_recv(&self) -> Option<SampleBatch> {
        self.batches.borrow_mut().pop_front()
    }
}

fn channel(depth: usize) -> (Channel, Channel) {
    let end = Channel {
        batches: Rc::default(),
        depth,
    };
    (end.clone(), end)
}

const PIDS: [u32; 4] = [1, 2, 3, 4];

fn check_decoders(record: &[u8]) {
    match AccessSample::from_ne_bytes(record) {
        Some(sample) => {
            let mut expected = [0u8; AccessSample::SIZE];
            expected.copy_from_slice(&record[..AccessSample::SIZE]);
            expected[30..].fill(0);
            assert_eq!(sample.to_ne_bytes(), expected);
            let _ = (
                AccessKind::from_u8(sample.kind),
                SampleSource::from_u8(sample.source),
            );
        }
        None => assert!(record.len() < AccessSample::SIZE),
    }
    match DamonRegion::from_ne_bytes(record) {
        Some(region) => {
            let mut expected = [0u8; DamonRegion::SIZE];
            expected.copy_from_slice(&record[..DamonRegion::SIZE]);
            expected[36..].fill(0);
            assert_eq!(region.to_ne_bytes(), expected);
        }
        None => assert!(record.len() < DamonRegion::SIZE),
    }
}

/// `sub` is a subsequence of `seq`.
fn is_subsequence(sub: &[AccessSample], seq: &[AccessSample]) -> bool {
    let mut it = seq.iter();
    sub.iter().all(|s| it.any(|t| t == s))
}

fuzz_target!(|data: &[u8]| {
    let Some((&settings, mut rest)) = data.split_first() else {
        return;
    };
    let batch_size = usize::from(settings & 0x0f) + 1;
    let depth = usize::from((settings >> 4) & 0x07) + 1;
    let with_default = settings & 0x80 != 0;

    let counters = Arc::new(IngestCounters::default());
    let mut router = Router::new(batch_size, Arc::clone(&counters));
    // Every receiver ever created per pid (0: the default route), oldest first.
    let mut receivers: BTreeMap<u32, Vec<Channel>> = BTreeMap::new();
    for pid in PIDS {
        let (tx, rx) = channel(depth);
        router.add_route(pid, tx);
        receivers.entry(pid).or_default().push(rx);
    }
    if with_default {
        let (tx, rx) = channel(depth);
        router.apply(RouteCommand::SetDefault { sender: Some(tx) });
        receivers.entry(0).or_default().push(rx);
    }
    let mut routed: BTreeMap<u32, bool> = PIDS.iter().map(|&p| (p, true)).collect();
    // What each route was handed, in order.
    let mut sent: BTreeMap<u32, Vec<AccessSample>> = BTreeMap::new();
    let mut records = 0u64;

    while let Some((&len, tail)) = rest.split_first() {
        if len >= 0xf8 {
            let pid = PIDS[usize::from(len & 3)];
            if len < 0xfc {
                router.apply(RouteCommand::Remove { pid });
                routed.insert(pid, false);
            } else {
                let (tx, rx) = channel(depth);
                router.apply(RouteCommand::Add { pid, sender: tx });
                receivers.entry(pid).or_default().push(rx);
                routed.insert(pid, true);
            }
            rest = tail;
            continue;
        }
        let (record, tail) = tail.split_at(usize::from(len).min(tail.len()));
        rest = tail;
        check_decoders(record);
        router.push_record(record);
        records += 1;
        if let Some(sample) = AccessSample::from_ne_bytes(record) {
            let route = if routed.get(&sample.pid) == Some(&true) {
                Some(sample.pid)
            } else if with_default {
                Some(0)
            } else {
                None
            };
            if let Some(route) = route {
                sent.entry(route).or_default().push(sample);
            }
        }
    }
    router.flush();

    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let decoded = load(&counters.decoded);
    assert_eq!(decoded + load(&counters.malformed), records);
    let delivered = load(&counters.delivered);
    assert_eq!(
        delivered + load(&counters.dropped_channel_full) + load(&counters.unrouted),
        decoded
    );
    let mut received_total = 0u64;
    for (pid, rxs) in &mut receivers {
        let mut received = Vec::new();
        for rx in rxs {
            while let Some(batch) = rx.try_recv() {
                assert!(
                    !batch.is_empty() && batch.len() <= batch_size,
                    "batch of {}",
                    batch.len()
                );
                received.extend(batch);
            }
        }
        received_total += received.len() as u64;
        if *pid != 0 {
            assert!(
                received.iter().all(|s| s.pid == *pid),
                "pid {pid} got another's sample"
            );
        }
        let expected = sent.get(pid).map_or(&[][..], Vec::as_slice);
        assert!(
            is_subsequence(&received, expected),
            "pid {pid}: samples reordered or invented"
        );
    }
    assert_eq!(received_total, delivered);
});
