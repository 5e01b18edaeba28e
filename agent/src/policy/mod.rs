//! Placement policy: turns the engine's hotness into a [`Plan`] of page moves.
//!
//! One concern per module, each after the paper it comes from:
//! - [`benefit`]: Rainbow's migration-benefit rule, Eq. (1) and (2), and the ping-pong threshold;
//! - [`granularity`]: Ryoo's per-target migration granularity (move-in raises, move-out lowers);
//! - [`epoch`]: Doudali's adaptive migration epoch (reuse distance, hot-set stability, payback);
//! - [`rw`]: Memos' read/write domains and 8-interval write-history predictor;
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

pub use self::{
    bandwidth::BandwidthConfig,
    benefit::BenefitConfig,
    capacity::CapacityConfig,
    epoch::EpochConfig,
    granularity::GranularityConfig,
    plan::{Direction, MoveReason, Plan, PlannedMove},
    rw::RwConfig,
};

/// Size of a base page.
pub const PAGE_SIZE: u64 = 4096;
/// Size of a superpage (x86-64 PMD huge page).
pub const SUPERPAGE_SIZE: u64 = 2 << 20;
/// Base pages per superpage.
pub const SUBPAGES: usize = 512;

/// A memory tier as the policy sees it: two classes, whatever the number of NUMA nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Fast,
    Slow,
}

/// Migration granularity: the size of one virtually contiguous chunk moved in one operation.
/// Always a non-zero multiple of 4 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Granularity(u64);

impl Default for Granularity {
    fn default() -> Self {
        Self::KIB_4
    }
}

impl Granularity {
    /// One base page: the finest granularity, splits huge pages.
    pub const KIB_4: Self = Self(PAGE_SIZE);
    /// Ryoo's middle granularity (16 base pages).
    pub const KIB_64: Self = Self(64 << 10);
    /// A whole superpage: keeps a THP intact.
    pub const MIB_2: Self = Self(SUPERPAGE_SIZE);

    /// `None` unless `bytes` is a non-zero multiple of 4 KiB.
    #[must_use]
    pub const fn new(bytes: u64) -> Option<Self> {
        if bytes == 0 || !bytes.is_multiple_of(PAGE_SIZE) {
            None
        } else {
            Some(Self(bytes))
        }
    }

    #[must_use]
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Number of 4 KiB pages in one chunk.
    #[must_use]
    pub const fn pages(self) -> u64 {
        self.0 / PAGE_SIZE
    }
}

impl TryFrom<u64> for Granularity {
    type Error = String;

    fn try_from(bytes: u64) -> Result<Self, Self::Error> {
        Self::new(bytes)
            .ok_or_else(|| format!("granularity {bytes} is not a non-zero multiple of 4096"))
    }
}

impl From<Granularity> for u64 {
    fn from(g: Granularity) -> Self {
        g.0
    }
}

/// Which 4 KiB pages of one superpage sit in each tier: Rainbow's 512-bit migration bitmap,
/// plus a second bitmap because a page can also be unmapped (in neither tier).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    pub fast: [u64; 8],
    pub slow: [u64; 8],
}

impl Residency {
    /// Every page of the superpage in `tier`.
    #[must_use]
    pub const fn all(tier: Tier) -> Self {
        match tier {
            Tier::Fast => Self {
                fast: [u64::MAX; 8],
                slow: [0; 8],
            },
            Tier::Slow => Self {
                fast: [0; 8],
                slow: [u64::MAX; 8],
            },
        }
    }

    pub fn set(&mut self, page: usize, tier: Option<Tier>) {
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        self.fast[word] &= !bit;
        self.slow[word] &= !bit;
        match tier {
            Some(Tier::Fast) => self.fast[word] |= bit,
            Some(Tier::Slow) => self.slow[word] |= bit,
            None => {}
        }
    }

    #[must_use]
    pub const fn tier(&self, page: usize) -> Option<Tier> {
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        if self.fast[word] & bit != 0 {
            Some(Tier::Fast)
        } else if self.slow[word] & bit != 0 {
            Some(Tier::Slow)
        } else {
            None
        }
    }

    #[must_use]
    pub fn fast_pages(&self) -> u32 {
        self.fast.iter().map(|w| w.count_ones()).sum()
    }

    #[must_use]
    pub fn slow_pages(&self) -> u32 {
        self.slow.iter().map(|w| w.count_ones()).sum()
    }
}

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

    /// Calls `visit(start, len)` for the fast-resident ranges of the target, in address order.
    /// This is how the planner finds resident data that was never sampled (the coldest of all).
    /// The default reports nothing: only sampled superpages can then be demoted.
    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        let _ = visit;
    }
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

/// A configuration value out of its allowed range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("{field} = {value}: {reason}")]
    OutOfRange {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

pub(crate) fn check(
    ok: bool,
    field: &'static str,
    value: impl std::fmt::Display,
    reason: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value: value.to_string(),
            reason,
        })
    }
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
    fn granularity_must_be_page_multiple() {
        assert_eq!(Granularity::new(0), None);
        assert_eq!(Granularity::new(4095), None);
        assert_eq!(Granularity::new(8192).map(Granularity::pages), Some(2));
        assert_eq!(Granularity::MIB_2.pages(), 512);
        assert!(serde_json::from_str::<Granularity>("4097").is_err());
        assert_eq!(
            serde_json::from_str::<Granularity>("65536").ok(),
            Some(Granularity::KIB_64)
        );
    }

    #[test]
    fn residency_bitmaps() {
        let mut r = Residency::all(Tier::Slow);
        r.set(3, Some(Tier::Fast));
        r.set(511, None);
        assert_eq!(r.tier(3), Some(Tier::Fast));
        assert_eq!(r.tier(511), None);
        assert_eq!(r.tier(0), Some(Tier::Slow));
        assert_eq!((r.fast_pages(), r.slow_pages()), (1, 510));
    }

    #[test]
    fn default_config_is_valid_and_round_trips() {
        let cfg = PolicyConfig::default();
        cfg.validate().unwrap();
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), cfg);
        assert!(serde_json::from_str::<PolicyConfig>(r#"{"nope": 1}"#).is_err());
    }
}
