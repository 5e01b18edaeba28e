//! Placement policy: turns a read-only view of the engine's hotness into a [`Plan`] of page
//! moves. It reads the engine; the engine knows nothing of it.
//!
//! One concern per module, each after the paper it comes from:
//! - [`benefit`]: Rainbow's migration-benefit rule, Eq. (1) and (2), and the ping-pong threshold;
//! - [`granularity`]: Ryoo's per-target migration granularity (move-in raises, move-out lowers);
//! - [`epoch`]: Doudali's adaptive migration epoch (reuse distance, hot-set stability, payback);
//! - [`rw`]: Memos' 8-interval write-history predictor (the domains are the engine's);
//! - [`bandwidth`]: BW-AWARE's bandwidth share and the placement ratio for new allocations;
//! - [`capacity`]: watermarks, per-epoch migration budget and hysteresis;
//! - [`plan`]: the planner that combines them.
//!
//! Everything here is pure: the caller supplies time, placement and capacity.

pub mod bandwidth;
pub mod benefit;
pub mod capacity;
pub mod epoch;
pub mod granularity;
pub mod plan;
pub mod rw;

use serde::{Deserialize, Serialize};

use crate::{
    units::{PAGE_SIZE, Residency, SUBPAGES, Tier},
    validate::ConfigError,
};

pub use self::{
    bandwidth::BandwidthConfig,
    benefit::BenefitConfig,
    capacity::CapacityConfig,
    epoch::EpochConfig,
    granularity::GranularityConfig,
    plan::{MoveReason, Plan, PlannedMove, Planner},
    rw::RwConfig,
};

/// Where the target's pages currently are. The daemon answers from `move_pages` queries, the
/// simulator from its tier model.
pub trait PlacementView {
    /// Tier of the 4 KiB page at `page` (page-aligned address); `None` when not mapped.
    fn tier_of(&self, page: u64) -> Option<Tier>;

    /// Residency of the 512 pages of the superpage starting at `superpage` (2 MiB aligned).
    /// The default asks [`Self::tier_of`] 512 times; views of large targets should override it,
    /// because the planner calls it once per touched superpage when it needs demotion victims.
    fn residency(&self, superpage: u64) -> Residency {
        let mut r = Residency::default();
        for page in 0..SUBPAGES {
            r.set(page, self.tier_of(superpage + page as u64 * PAGE_SIZE));
        }
        r
    }

    /// Whether the superpage starting at `superpage` is mapped by one huge page; `None` when
    /// the view cannot tell. Moving part of a huge page splits it (see
    /// `BenefitConfig::split_access_ns`).
    fn huge_mapped(&self, superpage: u64) -> Option<bool> {
        let _ = superpage;
        None
    }

    /// Calls `visit(start, len)` for the fast-resident ranges of the target, in address order.
    /// This is how the planner finds resident data that was never sampled (the coldest of all).
    /// The default reports nothing: only sampled superpages can then be demoted.
    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        let _ = visit;
    }
}

/// Whether moving part of the superpage at `superpage` would split a huge page. Where the
/// view cannot tell, a superpage wholly in one tier is presumed huge: THP maps first touches
/// whole, and a partial move is what splits one (khugepaged's re-collapse is slow enough to
/// ignore). A superpage across both tiers is split already.
#[must_use]
pub fn splits_huge(view: &dyn PlacementView, superpage: u64, residency: &Residency) -> bool {
    view.huge_mapped(superpage).unwrap_or_else(|| {
        residency.fast_pages() as usize == SUBPAGES || residency.slow_pages() as usize == SUBPAGES
    })
}

/// Access cost and bandwidth of one tier, where the caller knows them (HMAT, probe, config).
/// `None` fields fall back to [`BenefitConfig`] / [`BandwidthConfig`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierCost {
    /// Read latency, ns.
    pub read_ns: Option<f64>,
    /// Write latency, ns.
    pub write_ns: Option<f64>,
    /// Bandwidth, bytes per second.
    pub bandwidth_bytes_per_s: Option<f64>,
}

/// A target's share of the fast tier, when it has one: a configured limit, or its fair share
/// while several targets compete for the tier. Promotions never take the target above
/// `limit_bytes`; what it holds above it is demoted, coldest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastShare {
    /// Bytes of the fast tier the target may hold.
    pub limit_bytes: u64,
    /// Bytes of the fast tier the target holds now.
    pub held_bytes: u64,
}

/// How much room each tier has, as the caller measured it just before planning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityView {
    /// Total bytes of the fast tier available to this target (node size, or a budget).
    pub fast_total_bytes: u64,
    /// Free bytes of the fast tier.
    pub fast_free_bytes: u64,
    /// Total bytes of the slow tier.
    pub slow_total_bytes: u64,
    /// Free bytes of the slow tier.
    pub slow_free_bytes: u64,
    pub fast: TierCost,
    pub slow: TierCost,
    /// The target's share of the fast tier; `None`: the whole tier, as free memory allows.
    #[serde(default)]
    pub share: Option<FastShare>,
}

impl CapacityView {
    /// Bytes of the fast tier this target can hope to hold: its share, else the whole tier.
    #[must_use]
    pub fn fast_reach_bytes(&self) -> u64 {
        self.share.map_or(self.fast_total_bytes, |share| {
            share.limit_bytes.min(self.fast_total_bytes)
        })
    }
}

/// All tunables of the policy, grouped by concern. Every group documents its defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Migration-benefit model (Rainbow Eq. (1)/(2)) and the anti-ping-pong threshold.
    pub benefit: BenefitConfig,
    /// Migration granularity (Ryoo).
    pub granularity: GranularityConfig,
    /// Adaptive migration epoch (Doudali).
    pub epoch: EpochConfig,
    /// Read/write awareness (Memos).
    pub rw: RwConfig,
    /// Bandwidth-aware placement (BW-AWARE).
    pub bandwidth: BandwidthConfig,
    /// Watermarks, migration budget and hysteresis.
    pub capacity: CapacityConfig,
}

impl PolicyConfig {
    /// Rejects values that would make the policy meaningless (e.g. a low watermark above the high one).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.benefit.validate()?;
        self.granularity.validate()?;
        self.epoch.validate()?;
        self.rw.validate()?;
        self.bandwidth.validate()?;
        self.capacity.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid_and_round_trips() {
        let cfg = PolicyConfig::default();
        cfg.validate().unwrap();
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), cfg);
        assert!(serde_json::from_str::<PolicyConfig>(r#"{"nope": 1}"#).is_err());
    }
}
