//! The top of the sample path: ring records are decoded and routed, in batches, to the target
//! (process) they belong to.
//!
//! Nothing here may slow the kernel side down: the agent drains its BPF ring until empty on every
//! wake-up, and each target's batches go out through a [`BatchSink`] that never waits; a full
//! sink drops the batch and counts it. Every sample ends up in exactly one counter: delivered,
//! dropped (sink full or gone), unrouted (no target) or malformed. The agent's sink is a tokio
//! channel to the target's task; the router itself knows no runtime.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use memtide_common::AccessSample;

/// A batch of samples of one process, in ring order.
pub type SampleBatch = Vec<AccessSample>;

/// Why a sink did not take a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The receiver is behind: its queue is full.
    Full,
    /// The receiver is gone (its target ended; the route's removal is on the way).
    Closed,
}

/// Where the router hands one target's batches. Must not block: the ring drains behind it.
pub trait BatchSink {
    fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered>;
}

/// Counters of the ingest path, shared with the metrics layer.
#[derive(Debug, Default)]
pub struct IngestCounters {
    /// Records decoded from the ring.
    pub decoded: AtomicU64,
    /// Samples handed to an engine task.
    pub delivered: AtomicU64,
    /// Samples dropped because the target's channel was full (the engine fell behind).
    pub dropped_channel_full: AtomicU64,
    /// Samples of processes with no route (exited targets, or observe-all without a default).
    pub unrouted: AtomicU64,
    /// Records too short to decode (a BPF/agent version mismatch).
    pub malformed: AtomicU64,
}

impl IngestCounters {
    /// The samples the ingest path itself lost, by reason: a full channel (named as the caller
    /// reports it) and malformed records.
    #[must_use]
    pub fn losses(&self, channel_full: &str) -> [(String, u64); 2] {
        [
            (
                channel_full.to_owned(),
                self.dropped_channel_full.load(Ordering::Relaxed),
            ),
            (
                "malformed".to_owned(),
                self.malformed.load(Ordering::Relaxed),
            ),
        ]
    }
}

/// Route changes, sent by whoever manages targets while the drain task runs.
#[derive(Debug)]
pub enum RouteCommand<S> {
    Add {
        pid: u32,
        sender: S,
    },
    Remove {
        pid: u32,
    },
    /// Where samples of processes without their own route go (observe-all mode).
    SetDefault {
        sender: Option<S>,
    },
}

struct Route<S> {
    pid: u32,
    sender: S,
    pending: SampleBatch,
}

/// Decodes records and groups them per process, handing full batches to each process's sink.
pub struct Router<S> {
    routes: Vec<Route<S>>,
    index: HashMap<u32, usize>,
    default_route: Option<Route<S>>,
    batch_capacity: usize,
    /// Samples arrive in runs of one process: remembering the last route skips most lookups.
    last: Option<(u32, usize)>,
    local: LocalCounts,
    counters: Arc<IngestCounters>,
}

#[derive(Default)]
struct LocalCounts {
    decoded: u64,
    delivered: u64,
    dropped: u64,
    unrouted: u64,
    malformed: u64,
}

impl<S: BatchSink> Router<S> {
    /// `batch_capacity`: samples per batch sent to an engine task.
    #[must_use]
    pub fn new(batch_capacity: usize, counters: Arc<IngestCounters>) -> Self {
        Self {
            routes: Vec::new(),
            index: HashMap::new(),
            default_route: None,
            batch_capacity: batch_capacity.max(1),
            last: None,
            local: LocalCounts::default(),
            counters,
        }
    }

    pub fn apply(&mut self, command: RouteCommand<S>) {
        match command {
            RouteCommand::Add { pid, sender } => self.add_route(pid, sender),
            RouteCommand::Remove { pid } => self.remove_route(pid),
            RouteCommand::SetDefault { sender } => {
                self.default_route = sender.map(|sender| Route {
                    pid: 0,
                    sender,
                    pending: Vec::new(),
                });
            }
        }
    }

    pub fn add_route(&mut self, pid: u32, sender: S) {
        self.remove_route(pid);
        self.index.insert(pid, self.routes.len());
        self.routes.push(Route {
            pid,
            sender,
            pending: Vec::with_capacity(self.batch_capacity),
        });
    }

    pub fn remove_route(&mut self, pid: u32) {
        let Some(slot) = self.index.remove(&pid) else {
            return;
        };
        let mut route = self.routes.swap_remove(slot);
        if let Some(moved) = self.routes.get(slot) {
            self.index.insert(moved.pid, slot);
        }
        self.last = None;
        Self::send(&mut route, &mut self.local);
    }

    /// Number of processes with a route.
    #[must_use]
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }

    /// Decodes one ring record and queues it for its process.
    pub fn push_record(&mut self, record: &[u8]) {
        let Some(sample) = AccessSample::from_ne_bytes(record) else {
            self.local.malformed += 1;
            return;
        };
        self.push(sample);
    }

    /// Queues one decoded record for its process (the simulator's samplers enter here).
    pub fn push(&mut self, sample: AccessSample) {
        self.local.decoded += 1;
        let slot = match self.last {
            Some((pid, slot)) if pid == sample.pid => Some(slot),
            _ => {
                let slot = self.index.get(&sample.pid).copied();
                if let Some(slot) = slot {
                    self.last = Some((sample.pid, slot));
                }
                slot
            }
        };
        let route = match slot {
            Some(slot) => &mut self.routes[slot],
            None => match self.default_route.as_mut() {
                Some(route) => route,
                None => {
                    self.local.unrouted += 1;
                    return;
                }
            },
        };
        route.pending.push(sample);
        if route.pending.len() >= self.batch_capacity {
            Self::send(route, &mut self.local);
        }
    }

    /// Sends every partial batch and publishes the counters. Call after each drain pass.
    pub fn flush(&mut self) {
        for route in &mut self.routes {
            Self::send(route, &mut self.local);
        }
        if let Some(route) = self.default_route.as_mut() {
            Self::send(route, &mut self.local);
        }
        let local = std::mem::take(&mut self.local);
        let counters = &self.counters;
        counters.decoded.fetch_add(local.decoded, Ordering::Relaxed);
        counters
            .delivered
            .fetch_add(local.delivered, Ordering::Relaxed);
        counters
            .dropped_channel_full
            .fetch_add(local.dropped, Ordering::Relaxed);
        counters
            .unrouted
            .fetch_add(local.unrouted, Ordering::Relaxed);
        counters
            .malformed
            .fetch_add(local.malformed, Ordering::Relaxed);
    }

    fn send(route: &mut Route<S>, local: &mut LocalCounts) {
        if route.pending.is_empty() {
            return;
        }
        let capacity = route.pending.capacity();
        let batch = std::mem::replace(&mut route.pending, Vec::with_capacity(capacity));
        let len = batch.len() as u64;
        match route.sender.try_deliver(batch) {
            Ok(()) => local.delivered += len,
            // Closed: the target's task ended; its remove command is on the way.
            Err(Undelivered::Full | Undelivered::Closed) => local.dropped += len,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, collections::VecDeque, rc::Rc};

    use memtide_common::{AccessKind, SampleSource};

    use super::*;

    /// A bounded queue shared with the test, as a channel would be.
    #[derive(Clone)]
    struct Queue {
        batches: Rc<RefCell<VecDeque<SampleBatch>>>,
        depth: usize,
    }

    impl BatchSink for Queue {
        fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered> {
            let mut batches = self.batches.borrow_mut();
            if batches.len() >= self.depth {
                return Err(Undelivered::Full);
            }
            batches.push_back(batch);
            Ok(())
        }
    }

    impl Queue {
        fn try_recv(&mut self) -> Result<SampleBatch, ()> {
            self.batches.borrow_mut().pop_front().ok_or(())
        }
    }

    fn channel(depth: usize) -> (Queue, Queue) {
        let queue = Queue {
            batches: Rc::default(),
            depth,
        };
        (queue.clone(), queue)
    }

    fn record(pid: u32, addr: u64) -> [u8; AccessSample::SIZE] {
        AccessSample {
            addr,
            weight: 1,
            pid,
            tid: pid,
            cpu: 0,
            kind: AccessKind::Load as u8,
            source: SampleSource::SwFault as u8,
            _pad: [0; 2],
        }
        .to_ne_bytes()
    }

    #[test]
    fn samples_reach_their_own_process_in_order() {
        let counters = Arc::new(IngestCounters::default());
        let mut router = Router::new(2, Arc::clone(&counters));
        let (tx_a, mut rx_a) = channel(16);
        let (tx_b, mut rx_b) = channel(16);
        router.add_route(10, tx_a);
        router.add_route(20, tx_b);
        for (pid, addr) in [(10, 1), (20, 2), (10, 3), (10, 5), (30, 9)] {
            router.push_record(&record(pid, addr));
        }
        router.flush();
        let mut a = Vec::new();
        while let Ok(batch) = rx_a.try_recv() {
            a.extend(batch.iter().map(|s| s.addr));
        }
        let b: Vec<u64> = rx_b.try_recv().unwrap().iter().map(|s| s.addr).collect();
        assert_eq!(a, [1, 3, 5]);
        assert_eq!(b, [2]);
        assert_eq!(counters.decoded.load(Ordering::Relaxed), 5);
        assert_eq!(counters.delivered.load(Ordering::Relaxed), 4);
        assert_eq!(counters.unrouted.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_full_channel_drops_and_counts_instead_of_blocking() {
        let counters = Arc::new(IngestCounters::default());
        let mut router = Router::new(1, Arc::clone(&counters));
        let (tx, _rx) = channel(1);
        router.add_route(7, tx);
        for addr in 0..5 {
            router.push_record(&record(7, addr));
        }
        router.flush();
        assert_eq!(counters.delivered.load(Ordering::Relaxed), 1);
        assert_eq!(counters.dropped_channel_full.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn short_records_are_counted_not_decoded() {
        let counters = Arc::new(IngestCounters::default());
        let mut router: Router<Queue> = Router::new(8, Arc::clone(&counters));
        router.push_record(&[0u8; 12]);
        router.flush();
        assert_eq!(counters.malformed.load(Ordering::Relaxed), 1);
        assert_eq!(counters.decoded.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn removing_a_route_flushes_it_and_keeps_the_others_reachable() {
        let counters = Arc::new(IngestCounters::default());
        let mut router = Router::new(100, Arc::clone(&counters));
        let (tx_a, mut rx_a) = channel(4);
        let (tx_b, mut rx_b) = channel(4);
        let (tx_c, mut rx_c) = channel(4);
        router.add_route(1, tx_a);
        router.add_route(2, tx_b);
        router.add_route(3, tx_c);
        router.push_record(&record(1, 11));
        router.remove_route(1);
        assert_eq!(
            rx_a.try_recv().unwrap()[0].addr,
            11,
            "pending batch sent on removal"
        );
        router.push_record(&record(3, 33));
        router.push_record(&record(2, 22));
        router.push_record(&record(1, 12));
        router.flush();
        assert_eq!(rx_b.try_recv().unwrap()[0].addr, 22);
        assert_eq!(rx_c.try_recv().unwrap()[0].addr, 33);
        assert_eq!(counters.unrouted.load(Ordering::Relaxed), 1);
        assert_eq!(router.route_count(), 2);
    }

    #[test]
    fn default_route_catches_everyone_else() {
        let counters = Arc::new(IngestCounters::default());
        let mut router = Router::new(8, Arc::clone(&counters));
        let (tx, mut rx) = channel(4);
        router.apply(RouteCommand::SetDefault { sender: Some(tx) });
        router.push_record(&record(99, 1));
        router.push_record(&record(98, 2));
        router.flush();
        let pids: Vec<u32> = rx.try_recv().unwrap().iter().map(|s| s.pid).collect();
        assert_eq!(pids, [99, 98]);
    }
}
