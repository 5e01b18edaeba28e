//! A hotness source for the daemon's unprivileged tests: no BPF and no PMU. The test holds the
//! sending end of its "ring" and sees every target list and restart the daemon asks for; the
//! records go through the same router, route changes and target channels as a perf source's.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use memtide_common::AccessSample;
use memtide_config::SourceKind;
use tokio::{sync::mpsc, task::JoinHandle};

use super::{Delivery, HotnessSource, SampleRouter, SourceError, SourceFactory, SourceRequest};
use crate::bpf::ProgramStats;

/// The test's side of a fake source.
#[derive(Clone, Debug)]
pub(crate) struct FakeControl {
    /// Records as the ring would hold them.
    pub(crate) ring: mpsc::UnboundedSender<AccessSample>,
    /// Every target list the daemon handed the source, in order.
    pub(crate) target_lists: Arc<Mutex<Vec<Vec<u32>>>>,
    /// Set to make the source report itself stopped (as a kdamond turned off from outside).
    pub(crate) stopped: Arc<AtomicBool>,
    /// The drain period of the last delivery the daemon asked for.
    pub(crate) drain_every: Arc<Mutex<Option<std::time::Duration>>>,
}

impl FakeControl {
    pub(crate) fn last_targets(&self) -> Option<Vec<u32>> {
        self.target_lists.lock().ok()?.last().cloned()
    }
}

/// A factory that hands out one fake source, then none.
#[derive(Debug)]
pub(crate) struct FakeSources {
    source: Mutex<Option<FakeSource>>,
}

impl FakeSources {
    pub(crate) fn new() -> (Self, FakeControl) {
        let (ring, records) = mpsc::unbounded_channel();
        let control = FakeControl {
            ring,
            target_lists: Arc::default(),
            stopped: Arc::default(),
            drain_every: Arc::default(),
        };
        let source = FakeSource {
            records: Some(records),
            control: control.clone(),
        };
        (
            Self {
                source: Mutex::new(Some(source)),
            },
            control,
        )
    }
}

impl FakeSources {
    /// A machine where no source starts.
    pub(crate) fn none() -> Self {
        Self {
            source: Mutex::new(None),
        }
    }
}

impl SourceFactory for FakeSources {
    fn start(&self, request: &SourceRequest<'_>) -> Option<Box<dyn HotnessSource>> {
        let mut source = self.source.lock().ok()?.take()?;
        source.set_targets(request.pids).ok()?;
        Some(Box::new(source))
    }
}

#[derive(Debug)]
struct FakeSource {
    records: Option<mpsc::UnboundedReceiver<AccessSample>>,
    control: FakeControl,
}

impl HotnessSource for FakeSource {
    fn kind(&self) -> SourceKind {
        SourceKind::SwFault
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        if let Ok(mut lists) = self.control.target_lists.lock() {
            lists.push(pids.to_vec());
        }
        // Starting again is what the daemon does about a stopped source.
        self.control.stopped.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn deliver(&mut self, delivery: Delivery) -> Result<JoinHandle<()>, SourceError> {
        let mut records = self.records.take().ok_or(SourceError::Delivering)?;
        let Delivery {
            mut routes,
            counters,
            batch,
            drain_every,
            ..
        } = delivery;
        if let Ok(mut last) = self.control.drain_every.lock() {
            *last = Some(drain_every);
        }
        Ok(tokio::spawn(async move {
            let mut router = SampleRouter::new(batch, counters);
            loop {
                tokio::select! {
                    biased;
                    command = routes.recv() => match command {
                        Some(command) => router.apply(command),
                        None => break,
                    },
                    Some(record) = records.recv() => {
                        router.push_record(&record.to_ne_bytes());
                        while let Ok(record) = records.try_recv() {
                            router.push_record(&record.to_ne_bytes());
                        }
                        router.flush();
                    }
                }
            }
        }))
    }

    fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }

    fn program_stats(&self) -> Vec<ProgramStats> {
        Vec::new()
    }

    fn stopped(&self) -> Result<bool, SourceError> {
        Ok(self.control.stopped.load(Ordering::Relaxed))
    }
}
