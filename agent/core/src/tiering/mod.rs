//! One target's tiering: its [`Engine`] (hotness) and its [`Planner`] (placement), driven in
//! the one order both the daemon and the simulator use:
//! ring records in ([`Tiering::observe_records`], the one place a record becomes an engine
//! sample) or DAMON regions ([`Tiering::observe_damon`]); when [`Tiering::next_plan_due`] comes,
//! [`Tiering::plan`] closes the intervals due, lets the planner read the engine, ends the
//! engine's epoch and hands back the [`Plan`].

mod serde_table;

use std::time::Duration;

use memtide_common::AccessSample;

use crate::{
    engine::{
        DamonObservation, Engine, EngineConfig, EngineStats, HotPageStats, Observations, Sample,
    },
    policy::{CapacityView, PlacementView, Plan, Planner, PolicyConfig},
    units::{Granularity, SUPERPAGE_SIZE},
    validate::ConfigError,
};

/// The `[engine]` table of the configuration file: the engine's tunables, and under
/// `[engine.policy]` the placement policy's. (The two are separate types; the file keeps one
/// table for both, as it always has.)
///
/// Serialized and deserialized as that one table (see `serde_table`): unknown keys are errors,
/// and TOML errors keep pointing at the key they are about.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TieringConfig {
    pub engine: EngineConfig,
    pub policy: PolicyConfig,
}

impl TieringConfig {
    /// Rejects values that would make the engine or the policy meaningless.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.engine.validate()?;
        self.policy.validate()
    }
}

/// One target's engine and planner.
#[derive(Clone, Debug)]
pub struct Tiering {
    engine: Engine,
    planner: Planner,
    /// Reused by [`Tiering::observe_records`].
    scratch: Vec<Sample>,
}

impl Tiering {
    pub fn new(config: TieringConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let engine = Engine::new(config.engine, config.policy.rw.read_write_ratio)?;
        Ok(Self {
            engine,
            planner: Planner::new(config.policy),
            scratch: Vec::new(),
        })
    }

    /// The engine, read-only (its configuration and statistics).
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The planner, read-only.
    #[must_use]
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Feeds observations made up to `now`.
    pub fn observe(&mut self, observations: Observations<'_>, now: Duration) {
        self.engine.observe(observations, now);
    }

    /// Counts sampled accesses into the interval that contains `now`.
    pub fn observe_samples(&mut self, samples: &[Sample], now: Duration) {
        self.engine.observe_samples(samples, now);
    }

    /// Counts decoded ring records (as the router delivers them) into the interval that
    /// contains `now`: each becomes an engine sample through [`Sample::from_record`]. Returns
    /// those samples, for a caller that keeps some (the daemon's hit ratio) without converting
    /// again.
    pub fn observe_records(&mut self, records: &[AccessSample], now: Duration) -> &[Sample] {
        self.scratch.clear();
        self.scratch.extend(records.iter().map(Sample::from_record));
        self.engine.observe_samples(&self.scratch, now);
        &self.scratch
    }

    /// Credits DAMON regions to the interval that contains `now`.
    pub fn observe_damon(&mut self, regions: &[DamonObservation], now: Duration) {
        self.engine.observe_damon(regions, now);
    }

    /// Closes every counting interval that ended at or before `now`.
    pub fn tick(&mut self, now: Duration) {
        self.engine.tick(now);
    }

    /// Plans the moves of the epoch ending at `now`, against where the pages are (`view`) and
    /// how much room each tier has (`capacity`).
    pub fn plan(
        &mut self,
        now: Duration,
        view: &dyn PlacementView,
        capacity: &CapacityView,
    ) -> Plan {
        self.engine.tick(now);
        let plan = self.planner.plan(&self.engine.view(), now, view, capacity);
        let room = self.planner.config().capacity.promote_room(capacity);
        self.engine.end_epoch(room / SUPERPAGE_SIZE);
        self.planner.after_epoch_end(&self.engine.view());
        plan
    }

    /// Current target granularity.
    #[must_use]
    pub fn granularity(&self) -> Granularity {
        self.planner.granularity()
    }

    /// Current migration epoch: plan again this long after the last plan.
    #[must_use]
    pub fn epoch(&self) -> Duration {
        self.planner.epoch()
    }

    /// When the next plan is due, or `None` before the first plan.
    #[must_use]
    pub fn next_plan_at(&self) -> Option<Duration> {
        self.planner.last_plan_at().map(|t| t + self.epoch())
    }

    /// When the next plan is due for a target first seen at `found`: one epoch after the last
    /// plan, or one epoch after `found` before the first.
    #[must_use]
    pub fn next_plan_due(&self, found: Duration) -> Duration {
        self.next_plan_at().unwrap_or(found + self.epoch())
    }

    /// Addresses of the 4 KiB pages of stage-2 superpages that Eq. (1) classifies hot under the
    /// current threshold and `capacity`'s (or the configured) latencies, ascending.
    #[must_use]
    pub fn hot_subpages(&self, capacity: &CapacityView) -> Vec<u64> {
        self.planner.hot_subpages(&self.engine.view(), capacity)
    }

    /// The engine's statistics of the last interval, with the planner's heap in `memory_bytes`.
    #[must_use]
    pub fn stats(&self) -> EngineStats {
        let mut stats = self.engine.stats();
        stats.memory_bytes = self.memory_bytes() as u64;
        stats
    }

    /// The hot set of the stage-2 superpages' pages (a walk of every stage-2 page: for logs and
    /// reports, not for every epoch).
    #[must_use]
    pub fn hot_page_stats(&self) -> HotPageStats {
        self.engine.hot_page_stats()
    }

    /// Heap bytes held between calls, engine and planner.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.engine.memory_bytes() + self.planner.memory_bytes()
    }
}

#[cfg(test)]
mod tests;
