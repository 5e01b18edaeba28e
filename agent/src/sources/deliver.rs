//! What a source hands a target: the channel from a source's delivery task to a target's task,
//! and the route changes that say which target a process's records go to.

use std::sync::Arc;

use memtide_core::{
    engine::DamonObservation,
    ingest::{BatchSink, IngestCounters, RouteCommand, Router, SampleBatch, Undelivered},
};
use tokio::sync::mpsc;

use crate::cpu_time::CpuAccount;

/// One delivery to a target's task.
#[derive(Debug)]
pub enum TargetInput {
    /// Sampled accesses of the process, in ring order.
    Samples(SampleBatch),
    /// DAMON's latest regions of the process.
    Regions(Vec<DamonObservation>),
}

/// A target task's input channel: bounded, and never waited on (a full one drops and counts).
#[derive(Clone, Debug)]
pub struct TargetChannel(pub mpsc::Sender<TargetInput>);

impl TargetChannel {
    /// Hands `input` on without waiting.
    pub fn try_send(&self, input: TargetInput) -> Result<(), Undelivered> {
        self.0.try_send(input).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => Undelivered::Full,
            mpsc::error::TrySendError::Closed(_) => Undelivered::Closed,
        })
    }
}

impl BatchSink for TargetChannel {
    fn try_deliver(&mut self, batch: SampleBatch) -> Result<(), Undelivered> {
        self.try_send(TargetInput::Samples(batch))
    }
}

/// The router the perf sources run: batches go to target tasks' channels.
pub type SampleRouter = Router<TargetChannel>;
/// A route change: a process's records go to this target from now on, or nowhere.
pub type SampleRoute = RouteCommand<TargetChannel>;

/// What a source's delivery task needs.
#[derive(Debug)]
pub struct Delivery {
    /// Route changes while delivery runs (the first ones before any record); delivery ends when
    /// the sending side is dropped.
    pub routes: mpsc::UnboundedReceiver<SampleRoute>,
    /// Every record ends up in exactly one of these counters.
    pub counters: Arc<IngestCounters>,
    /// Samples per batch handed to a target.
    pub batch: usize,
    /// How often a source drains what its kernel side has not woken it for: the engine's
    /// counting interval, so each sample counts in the interval it arrived in.
    pub drain_every: std::time::Duration,
    /// Where the delivery task adds the CPU time it spends draining, decoding and routing
    /// (the sampling path's account, which the sample-rate controller reads and
    /// `memtide_sampling_cpu_seconds_total` mirrors): part of what samples cost the agent.
    pub cpu: CpuAccount,
}
