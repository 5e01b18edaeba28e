//! The policies the simulator compares, behind one trait.
//!
//! [`EnginePolicy`] drives the daemon's own [`Tiering`] (engine and planner, no second copy of
//! the policy): `memtide`
//! is its default configuration; `static-4k/64k/2m` pin the granularity
//! (`granularity.fixed`) and `epoch-<ms>` pin the epoch (`epoch.adaptive = false`). Everything
//! else is in [`super::baselines`], [`super::oracle`] and [`super::bound`].

use std::time::Duration;

use serde::Serialize;

use super::{
    model::{Preset, TierModel},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_config::{EngineTable, EngineTableError};
use memtide_core::{
    tiering::{Tiering, TieringConfig},
    units::{Direction, Granularity, PAGE_SIZE, SUPERPAGE_SIZE, Tier},
};

/// What the runner tells a policy at each step.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Simulated time.
    pub now: Duration,
    /// Records replayed so far that reached memory (past the LLC model, `run::Llc`).
    pub records: u64,
}

/// A placement policy under simulation.
pub trait SimPolicy: Send {
    fn name(&self) -> String;

    /// Tier of a superpage at its first touch (THP: the whole 2 MiB). Default: first touch.
    fn place(&mut self, sp: u64, model: &TierModel) -> Tier {
        let _ = sp;
        model.first_touch()
    }

    /// The batch about to be replayed (its records that reach memory), before its first access:
    /// the bound, which knows the future by definition, places for it; free hindsight places
    /// first and only then counts it, for the batches after. Default: nothing.
    fn before_batch(&mut self, batch: &[TraceRecord], model: &mut TierModel) {
        let _ = (batch, model);
    }

    /// The records of the last batch (every access: page-table based policies see them through
    /// hint faults and accessed bits) and the samples the source delivered from them, as
    /// decoded ring records. A policy that [learns from samples
    /// alone](Self::learns_from_samples_only) may be handed only the records that reached
    /// memory (a fast-forwarded pass keeps no others).
    fn observe(
        &mut self,
        batch: &[TraceRecord],
        samples: &[AccessSample],
        model: &TierModel,
        clock: Clock,
    );

    /// Called after every batch: migrate whatever the policy decides now.
    fn step(&mut self, clock: Clock, model: &mut TierModel);

    /// Policy-specific figures for the report (final granularity, epoch...).
    fn info(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Whether the policy learns from the samples alone, never from the records of a batch or
    /// the accessed bits their touches set: then the records a cache served cannot change what
    /// it does, and a replay may skip them (`run::fast_forward`). Default false.
    fn learns_from_samples_only(&self) -> bool {
        false
    }
}

/// Engine configuration for a preset: the benefit rule gets the platform's migration costs
/// (latencies and bandwidths come through the capacity view).
#[must_use]
pub fn engine_config(preset: &Preset) -> TieringConfig {
    let mut cfg = TieringConfig::default();
    let b = &mut cfg.policy.benefit;
    b.fast_read_ns = preset.fast_read_ns;
    b.fast_write_ns = preset.fast_write_ns;
    b.slow_read_ns = preset.slow_read_ns;
    b.slow_write_ns = preset.slow_write_ns;
    b.migrate_op_ns = preset.shootdown_ns;
    b.migrate_page_ns = preset.copy_ns(PAGE_SIZE);
    b.writeback_page_ns = preset.copy_ns(PAGE_SIZE);
    b.split_access_ns = preset.tlb_4k_ns;
    cfg.policy.bandwidth.fast_gbps = preset.fast_gbps;
    cfg.policy.bandwidth.slow_gbps = preset.slow_gbps;
    cfg
}

/// [`engine_config`] with the keys of `overrides` (an agent configuration file's `[engine]`
/// table, `memtide sim --engine-config`) laid over it: every key the table sets replaces the
/// simulator's value; the keys it leaves out keep theirs. Unknown keys and invalid values are
/// errors, as they are for the daemon. The benefit rule's tier latencies and the bandwidths
/// take effect only where the tiers declare none, and the tier model declares the preset's:
/// like the daemon's firmware-declared costs, they win over the file's.
pub fn engine_config_with(
    preset: &Preset,
    overrides: Option<&EngineTable>,
) -> Result<TieringConfig, EngineTableError> {
    let base = engine_config(preset);
    match overrides {
        Some(overrides) => overrides.lay_over(&base),
        None => Ok(base),
    }
}

/// The daemon's engine and planner, applied to the tier model.
pub struct EnginePolicy {
    name: String,
    tiering: Tiering,
    plans: u64,
    last_granularity: u64,
    epochs_ms: Vec<u64>,
    /// The longest epoch any plan closed, ms.
    longest_epoch_ms: u64,
}

/// Variants of the engine the suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EngineVariant {
    Adaptive,
    StaticGranularity(Granularity),
    FixedEpochMs(u64),
}

impl EngineVariant {
    /// The policy's name in reports: `memtide`, `static-4k`, `epoch-100ms`.
    #[must_use]
    pub fn label(self) -> String {
        match self {
            Self::Adaptive => "memtide".to_owned(),
            Self::StaticGranularity(g) => match g.bytes() {
                4096 => "static-4k".to_owned(),
                65536 => "static-64k".to_owned(),
                b if b == SUPERPAGE_SIZE => "static-2m".to_owned(),
                b => format!("static-{}k", b >> 10),
            },
            Self::FixedEpochMs(ms) => format!("epoch-{ms}ms"),
        }
    }
}

impl EnginePolicy {
    pub fn new(
        preset: &Preset,
        variant: EngineVariant,
    ) -> Result<Self, memtide_core::validate::ConfigError> {
        Self::configured(engine_config(preset), variant)
    }

    /// The engine with configuration `cfg`, changed as `variant` asks.
    pub fn configured(
        mut cfg: TieringConfig,
        variant: EngineVariant,
    ) -> Result<Self, memtide_core::validate::ConfigError> {
        match variant {
            EngineVariant::Adaptive => {}
            EngineVariant::StaticGranularity(g) => {
                cfg.policy.granularity.initial = g;
                cfg.policy.granularity.fixed = true;
            }
            EngineVariant::FixedEpochMs(ms) => {
                cfg.policy.epoch.adaptive = false;
                cfg.policy.epoch.initial_ms = ms;
                cfg.policy.epoch.min_ms = cfg.policy.epoch.min_ms.min(ms);
                cfg.policy.epoch.max_ms = cfg.policy.epoch.max_ms.max(ms);
            }
        }
        Ok(Self {
            name: variant.label(),
            tiering: Tiering::new(cfg)?,
            plans: 0,
            last_granularity: 0,
            epochs_ms: Vec::new(),
            longest_epoch_ms: 0,
        })
    }
}

impl SimPolicy for EnginePolicy {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn observe(
        &mut self,
        _: &[TraceRecord],
        samples: &[AccessSample],
        _: &TierModel,
        clock: Clock,
    ) {
        self.tiering.observe_records(samples, clock.now);
    }

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        if clock.now < self.tiering.next_plan_due(Duration::ZERO) {
            return;
        }
        let plan = self.tiering.plan(clock.now, &*model, &model.capacity());
        self.plans += 1;
        self.last_granularity = plan.granularity.bytes();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(
            at_ms = ms(clock.now),
            promote_bytes = plan.promote_bytes,
            demote_bytes = plan.demote_bytes,
            would_promote_bytes = plan.would_promote_bytes,
            room = plan.promote_room,
            threshold_ns = plan.benefit_threshold_ns,
            moves = plan.moves.len(),
            granularity = plan.granularity.bytes(),
            next_epoch_ms = ms(plan.epoch),
            epoch_change = ?plan.epoch_change,
            bandwidth_bound = plan.bandwidth_bound,
            fast_share = ?plan.fast_share,
            "{}: plan",
            self.name
        );
        if self.epochs_ms.len() < 4096 {
            self.epochs_ms.push(ms(plan.epoch));
        }
        self.longest_epoch_ms = self.longest_epoch_ms.max(ms(plan.epoch));
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        // Demotions first, so the promotions find their room.
        for dir in [Direction::Demote, Direction::Promote] {
            for m in plan.moves.iter().filter(|m| m.direction == dir) {
                let to = if dir == Direction::Promote {
                    Tier::Fast
                } else {
                    Tier::Slow
                };
                tracing::trace!(
                    sp = m.start / SUPERPAGE_SIZE,
                    offset_kib = (m.start % SUPERPAGE_SIZE) >> 10,
                    len_kib = m.len >> 10,
                    direction = ?m.direction,
                    reason = ?m.reason,
                    benefit_ns = m.expected_benefit,
                    "{}: move",
                    self.name
                );
                model.migrate(m.start, m.len, to, m.granularity.bytes(), now_ms);
            }
        }
    }

    fn learns_from_samples_only(&self) -> bool {
        true
    }

    fn info(&self) -> serde_json::Value {
        let mean_epoch = if self.epochs_ms.is_empty() {
            0.0
        } else {
            self.epochs_ms.iter().sum::<u64>() as f64 / self.epochs_ms.len() as f64
        };
        serde_json::json!({
            "plans": self.plans,
            "final_granularity_bytes": self.last_granularity,
            "final_epoch_ms": self.tiering.epoch().as_millis() as u64,
            "mean_epoch_ms": mean_epoch,
            "longest_epoch_ms": self.longest_epoch_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::model::PresetName;

    #[test]
    fn an_engine_table_replaces_only_the_keys_it_sets() {
        let preset = PresetName::Cxl.preset();
        assert_eq!(
            engine_config_with(&preset, None).unwrap(),
            engine_config(&preset)
        );
        let table = EngineTable::from_file(
            Path::new("engine.toml"),
            concat!(
                "[engine]\ninterval_ms = 20\n",
                "[engine.policy.epoch]\nreuse_floor = true\n",
                "[engine.policy.benefit]\nmin_samples = 5\nmigrate_op_ns = 3000.0\n",
            ),
        )
        .unwrap()
        .unwrap();
        let mut expected = engine_config(&preset);
        expected.engine.interval_ms = 20;
        expected.policy.epoch.reuse_floor = true;
        expected.policy.benefit.min_samples = 5;
        expected.policy.benefit.migrate_op_ns = 3000.0;
        assert_eq!(engine_config_with(&preset, Some(&table)).unwrap(), expected);
    }
}
