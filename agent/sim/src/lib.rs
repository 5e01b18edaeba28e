//! The tier simulator and evaluation suite (`memtide sim`, `memtide gen`).
//!
//! Traces ([`trace`]: native, lackey, perf-script; or [`workload`]'s synthetic workloads) stream
//! through a policy ([`policy`]: the daemon's own engine, [`baselines`], the [`bound`], free
//! [`hindsight`] and the epoch [`oracle`]) and a tier model ([`model`]); [`run`] replays one
//! trace under one policy, [`suite`] runs the matrix and writes the report. Everything is
//! deterministic from seeds.
//!
//! It depends on `memtide-core`, and on `memtide-config` for `--engine-config` (the daemon's
//! `[engine]` parser), never on `memtide-host` or the agent: a simulation runs the very engine
//! and planner the daemon runs, configured as the daemon is, without a kernel.
#![forbid(unsafe_code)]

pub mod args;
pub mod baselines;
pub mod bound;
pub mod cli;
pub mod density;
pub mod hindsight;
pub mod model;
pub mod oracle;
pub mod policy;
pub mod run;
pub mod sampler;
pub mod suite;
pub mod svg;
pub mod trace;
pub mod workload;

use std::time::Duration;

use serde::Serialize;

use self::{
    baselines::{
        damon::Damon, hemem::HeMem, memtis::Memtis, static_place::StaticPlacement, tpp::Tpp,
    },
    bound::{Bound, FixedBound},
    hindsight::Hindsight,
    model::Preset,
    oracle::EpochOracle,
    policy::{EnginePolicy, EngineVariant, SimPolicy},
    run::{BATCH, SimConfig},
    trace::{TraceError, TraceMeta, TraceSpec},
};
use memtide_core::units::Granularity;

/// Policies of `memtide sim --policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    Memtide,
    Oracle,
    #[value(name = "oracle-epoch")]
    #[serde(rename = "oracle-epoch")]
    OracleEpoch,
    /// The best placement held still for the whole replay, with foresight. Not in
    /// [`PolicyName::ALL`]: the suite runs it in its long-steady-state section only.
    #[value(name = "oracle-fixed")]
    #[serde(rename = "oracle-fixed")]
    OracleFixed,
    Hindsight,
    #[value(name = "hindsight-epoch")]
    #[serde(rename = "hindsight-epoch")]
    HindsightEpoch,
    /// Free hindsight from the samples alone (memtide's evidence), re-placed every batch. Not
    /// in [`PolicyName::ALL`]: the suite runs it in its cadence section only.
    #[value(name = "hindsight-samples")]
    #[serde(rename = "hindsight-samples")]
    HindsightSamples,
    NoMigration,
    Interleave,
    BwAware,
    #[value(name = "static-4k")]
    #[serde(rename = "static-4k")]
    Static4k,
    #[value(name = "static-64k")]
    #[serde(rename = "static-64k")]
    Static64k,
    #[value(name = "static-2m")]
    #[serde(rename = "static-2m")]
    Static2m,
    Tpp,
    Hemem,
    Memtis,
    Damon,
}

impl PolicyName {
    pub const ALL: [Self; 15] = [
        Self::Memtide,
        Self::Oracle,
        Self::OracleEpoch,
        Self::Hindsight,
        Self::HindsightEpoch,
        Self::NoMigration,
        Self::Interleave,
        Self::BwAware,
        Self::Static4k,
        Self::Static64k,
        Self::Static2m,
        Self::Tpp,
        Self::Hemem,
        Self::Memtis,
        Self::Damon,
    ];

    /// Whether the policy runs memtide's engine and planner (and so reads `--engine-config`).
    #[must_use]
    pub const fn uses_engine(self) -> bool {
        matches!(
            self,
            Self::Memtide | Self::Static4k | Self::Static64k | Self::Static2m
        )
    }

    /// Whether the policy reads `--engine-config`: the engine's, and `hindsight-epoch`, whose
    /// cadence is memtide's shortest epoch (`[engine.policy.epoch] min_ms`).
    #[must_use]
    pub const fn reads_engine_config(self) -> bool {
        self.uses_engine() || matches!(self, Self::HindsightEpoch)
    }

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Memtide => "memtide",
            Self::Oracle => "oracle",
            Self::OracleEpoch => "oracle-epoch",
            Self::OracleFixed => "oracle-fixed",
            Self::Hindsight => "hindsight",
            Self::HindsightEpoch => "hindsight-epoch",
            Self::HindsightSamples => "hindsight-samples",
            Self::NoMigration => "no-migration",
            Self::Interleave => "interleave",
            Self::BwAware => "bw-aware",
            Self::Static4k => "static-4k",
            Self::Static64k => "static-64k",
            Self::Static2m => "static-2m",
            Self::Tpp => "tpp",
            Self::Hemem => "hemem",
            Self::Memtis => "memtis",
            Self::Damon => "damon",
        }
    }
}

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    // The cause is the error's source: `{:#}` prints it after the context, once.
    #[error("engine configuration")]
    Config(#[from] memtide_core::validate::ConfigError),
    #[error("engine configuration")]
    EngineOverrides(#[from] memtide_config::EngineTableError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Epoch oracle's epoch: 1 s of simulated time (the engine's initial epoch), in whole batches.
#[must_use]
pub fn oracle_window(meta: &TraceMeta, cfg: &SimConfig) -> u64 {
    let records = (1e9 / cfg.record_clock(meta).ns(1)) as u64;
    (records / BATCH as u64).max(1) * BATCH as u64
}

/// Builds a policy. The trace is read ahead by the epoch oracle and the best fixed placement;
/// `fast_capacity_bytes` is needed by the epoch oracle only.
pub fn make_policy(
    name: PolicyName,
    preset: &Preset,
    spec: &dyn TraceSpec,
    cfg: &SimConfig,
    fast_capacity_bytes: u64,
) -> Result<Box<dyn SimPolicy>, SimError> {
    let engine = |variant| -> Result<Box<dyn SimPolicy>, SimError> {
        let base = policy::engine_config_with(preset, cfg.engine_overrides.as_ref())?;
        Ok(Box::new(EnginePolicy::configured(base, variant)?))
    };
    Ok(match name {
        PolicyName::Memtide => engine(EngineVariant::Adaptive)?,
        PolicyName::Static4k => engine(EngineVariant::StaticGranularity(Granularity::KIB_4))?,
        PolicyName::Static64k => engine(EngineVariant::StaticGranularity(Granularity::KIB_64))?,
        PolicyName::Static2m => engine(EngineVariant::StaticGranularity(Granularity::MIB_2))?,
        PolicyName::NoMigration => Box::new(StaticPlacement::first_touch()),
        PolicyName::Interleave => Box::new(StaticPlacement::interleave()),
        PolicyName::BwAware => Box::new(StaticPlacement::bw_aware(preset)),
        PolicyName::Tpp => Box::new(Tpp::default()),
        PolicyName::Hemem => Box::new(HeMem::default()),
        PolicyName::Memtis => Box::new(Memtis::default()),
        PolicyName::Damon => Box::new(Damon::default()),
        PolicyName::Oracle => Box::new(Bound::default()),
        PolicyName::OracleFixed => Box::new(FixedBound::new(spec)?),
        PolicyName::Hindsight => Box::new(Hindsight::default()),
        PolicyName::HindsightSamples => Box::new(Hindsight::from_samples(None)),
        PolicyName::HindsightEpoch => {
            let epoch = policy::engine_config_with(preset, cfg.engine_overrides.as_ref())?
                .policy
                .epoch;
            Box::new(Hindsight::every(Duration::from_millis(epoch.min_ms)))
        }
        PolicyName::OracleEpoch => {
            let meta = spec.open()?.meta().clone();
            Box::new(EpochOracle::new(
                spec,
                oracle_window(&meta, cfg),
                fast_capacity_bytes,
            )?)
        }
    })
}

/// Measures the footprint once, builds the policy and replays the trace.
pub fn simulate(
    spec: &dyn TraceSpec,
    name: PolicyName,
    cfg: &SimConfig,
) -> Result<run::SimResult, SimError> {
    let mut cfg = cfg.clone();
    let fp = match cfg.footprint {
        Some(f) => f,
        None => run::measure_footprint(spec)?,
    };
    cfg.footprint = Some(fp);
    let cap = run::fast_bytes(&cfg, fp);
    let mut policy = make_policy(name, &cfg.preset, spec, &cfg, cap)?;
    Ok(run::run(spec, &mut *policy, &cfg)?)
}
