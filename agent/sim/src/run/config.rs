//! What a replay is asked for: the platform, the fast tier's size, the sampler and its rate,
//! and the nominal pace that turns a trace's records into the policies' clock.

use serde::Serialize;

use super::Footprint;
use crate::{model::Preset, sampler::SamplerName, trace::TraceMeta};

/// Bytes one access moves (a cache line): the accounting's bandwidth term, and the fastest
/// pace a program can stream at.
pub(super) const LINE: f64 = 64.0;

/// Size of the fast tier.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum FastSize {
    /// Fraction of the trace's footprint.
    Ratio(f64),
    Bytes(u64),
}

/// As the report's tables name it: "10 %" of the footprint, or "512 MiB".
impl std::fmt::Display for FastSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ratio(r) => write!(f, "{:.0} %", r * 100.0),
            Self::Bytes(b) => write!(f, "{} MiB", b >> 20),
        }
    }
}

/// Nanoseconds of the policies' clock per record of one trace ([`SimConfig::record_clock`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordClock {
    accesses_per_record: f64,
    pace_ns: f64,
}

impl RecordClock {
    /// Accesses one record stands for (the trace's record weight).
    #[must_use]
    pub fn accesses_per_record(&self) -> f64 {
        self.accesses_per_record
    }

    /// Nanoseconds that `records` records span.
    #[must_use]
    pub fn ns(&self, records: u64) -> f64 {
        records as f64 * self.accesses_per_record * self.pace_ns
    }
}

/// Replay parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub preset: Preset,
    pub fast: FastSize,
    /// Where the policies' samples come from.
    pub sampler: SamplerName,
    /// One sample per this many records on average (every sampler but `swfault`).
    pub sample_rate: u32,
    pub seed: u64,
    /// Nominal time per access of a latency-bound program (one stream: its compute and a fast
    /// access) for the policies' clock, ns. Default 250. A trace's own pace is this over its
    /// parallelism ([`Self::access_pace_ns`]).
    pub access_ns: f64,
    /// Points of the hit-ratio timeline.
    pub timeline_points: usize,
    /// Footprint, when already measured (skips the footprint pass).
    pub footprint: Option<Footprint>,
    /// Keys of an `[engine]` table laid over the engine configuration of the preset, for the
    /// policies that run memtide's engine ([`crate::policy::engine_config_with`]).
    pub engine_overrides: Option<memtide_config::EngineTable>,
}

impl SimConfig {
    /// The policies' time per access for a trace of `mlp` independent streams that carries
    /// no time of its own: [`Self::access_ns`] over the streams, no faster than the fast tier
    /// streams cache lines. That is about the pace of the program's all-fast run in the tier
    /// model (`access_ns` 250 against `pmem`'s 150 ns of compute and 80 of a fast access), so
    /// its epochs, and the migration budget they accrue, pass about as its run would. One pace
    /// for every `mlp` let a bandwidth-bound trace (`bw-multistream`, mlp 1024: all-fast in
    /// 0.2 s) span 16 s of the clock, and the budget, a rate per second of it, let the
    /// policies move 80 times what its run could absorb.
    #[must_use]
    pub fn access_pace_ns(&self, mlp: u32) -> f64 {
        (self.access_ns / f64::from(mlp.max(1))).max(LINE / self.preset.fast_gbps)
    }

    /// The nominal clock of the records of a trace with `meta`: each stands for its record
    /// weight in accesses at [`Self::access_pace_ns`]. The replay's clock, the hour's lengths
    /// and the epoch oracle's window all read it.
    #[must_use]
    pub fn record_clock(&self, meta: &TraceMeta) -> RecordClock {
        RecordClock {
            accesses_per_record: f64::from(meta.record_weight),
            pace_ns: self.access_pace_ns(meta.mlp),
        }
    }

    #[must_use]
    pub fn new(preset: Preset) -> Self {
        Self {
            preset,
            fast: FastSize::Ratio(0.25),
            sampler: SamplerName::Ideal,
            sample_rate: 4,
            seed: 1,
            access_ns: 250.0,
            timeline_points: 50,
            footprint: None,
            engine_overrides: None,
        }
    }
}
