//! BW-AWARE (§3.1): with bandwidths `b_i`, the service time of uniformly spread traffic is
//! minimal when tier i serves `f_i = b_i / Σ b_j` of it. CPUs are latency-sensitive (the paper's
//! own sgemm lost 12 %), so the planner applies the share only while the sampled access rate says
//! the workload is bandwidth-bound; otherwise it keeps the hottest data in the fast tier.

use serde::{Deserialize, Serialize};

use super::CapacityView;
use crate::units::Tier;
use crate::validate::{ConfigError, check};

/// Bandwidth tunables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BandwidthConfig {
    /// Apply the bandwidth share at all. Default true.
    pub enabled: bool,
    /// Fast-tier bandwidth, GB/s (1e9 bytes/s), used when the capacity view has none; 0 = unknown.
    /// Default 0.
    pub fast_gbps: f64,
    /// Slow-tier bandwidth, GB/s; 0 = unknown. Default 0.
    pub slow_gbps: f64,
    /// The workload counts as bandwidth-bound when its estimated traffic reaches this fraction of
    /// the fast tier's bandwidth (the digest's 80–90 % of peak). Default 0.8.
    pub bound_fraction: f64,
    /// Bytes moved per sampled access (one cache line). Default 64.
    pub bytes_per_access: u64,
    /// Slack above the target fast share before bandwidth demotions start; they bring the share
    /// back to the target, and promotions stop at it, so data is not handed back and promoted
    /// again at one edge. Default 0.05.
    pub share_tolerance: f64,
}

impl Default for BandwidthConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            fast_gbps: 0.0,
            slow_gbps: 0.0,
            bound_fraction: 0.8,
            bytes_per_access: 64,
            share_tolerance: 0.05,
        }
    }
}

impl BandwidthConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.fast_gbps >= 0.0 && self.slow_gbps >= 0.0,
            "bandwidth.*_gbps",
            self.fast_gbps,
            "must be >= 0",
        )?;
        check(
            self.bound_fraction > 0.0,
            "bandwidth.bound_fraction",
            self.bound_fraction,
            "must be > 0",
        )?;
        check(
            (0.0..1.0).contains(&self.share_tolerance),
            "bandwidth.share_tolerance",
            self.share_tolerance,
            "must be within [0, 1)",
        )
    }

    /// (fast, slow) bandwidth in bytes/s from the view, else config; `None` when either is unknown.
    #[must_use]
    pub fn bandwidths(&self, cap: &CapacityView) -> Option<(f64, f64)> {
        let known = |v: Option<f64>, gbps: f64| {
            v.or((gbps > 0.0).then_some(gbps * 1e9))
                .filter(|b| *b > 0.0)
        };
        Some((
            known(cap.fast.bandwidth_bytes_per_s, self.fast_gbps)?,
            known(cap.slow.bandwidth_bytes_per_s, self.slow_gbps)?,
        ))
    }
}

/// Share of traffic each tier should serve, `b_i / Σ b_j`; `None` if no bandwidth is positive.
#[must_use]
pub fn tier_shares(bandwidths: &[f64]) -> Option<Vec<f64>> {
    let total: f64 = bandwidths.iter().filter(|b| **b > 0.0).sum();
    (total > 0.0).then(|| bandwidths.iter().map(|b| b.max(0.0) / total).collect())
}

/// The fast tier's share `f = b_fast / (b_fast + b_slow)`.
#[must_use]
pub fn fast_share(fast: f64, slow: f64) -> Option<f64> {
    tier_shares(&[fast, slow]).map(|s| s[0])
}

/// Whether traffic of `accesses_per_s` saturates the fast tier.
#[must_use]
pub fn is_bandwidth_bound(accesses_per_s: f64, fast_bandwidth: f64, cfg: &BandwidthConfig) -> bool {
    accesses_per_s * cfg.bytes_per_access as f64 >= cfg.bound_fraction * fast_bandwidth
}

/// Placement ratio for new allocations (`memtide exec`): the fast fraction of pages, and the
/// equivalent `MPOL_WEIGHTED_INTERLEAVE` weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlacementRatio {
    pub fast_fraction: f64,
}

impl PlacementRatio {
    #[must_use]
    pub fn from_bandwidths(fast: f64, slow: f64) -> Option<Self> {
        fast_share(fast, slow).map(|fast_fraction| Self { fast_fraction })
    }

    /// The paper's allocation rule with a caller-drawn uniform number in `[0, 1)`: fast when the
    /// draw falls below the fast fraction (BW-AWARE's `rand[0,99] ≥ 30 → BO` for 30C-70B).
    #[must_use]
    pub fn place(&self, draw: f64) -> Tier {
        if draw < self.fast_fraction {
            Tier::Fast
        } else {
            Tier::Slow
        }
    }

    /// Integer (fast, slow) weights in `1..=max_weight`, largest first scaled to `max_weight`,
    /// as `/sys/kernel/mm/mempolicy/weighted_interleave/nodeN` takes them.
    #[must_use]
    pub fn interleave_weights(&self, max_weight: u8) -> (u8, u8) {
        let f = self.fast_fraction.clamp(0.0, 1.0);
        let big = f.max(1.0 - f);
        let scale = |x: f64| {
            // The clamp keeps the cast in range.
            (x / big * f64::from(max_weight))
                .round()
                .clamp(1.0, f64::from(max_weight)) as u8
        };
        (scale(f), scale(1.0 - f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_aware_200_80() {
        let f = fast_share(200.0, 80.0).unwrap();
        assert!((f - 0.714).abs() < 0.0005, "{f}");
        let shares = tier_shares(&[200.0, 80.0, 40.0]).unwrap();
        assert!(
            (shares[0] - 0.625).abs() < 1e-12
                && (shares[1] - 0.25).abs() < 1e-12
                && (shares[2] - 0.125).abs() < 1e-12
        );
        assert_eq!(tier_shares(&[0.0, 0.0]), None);
    }

    #[test]
    fn placement_ratio_helpers() {
        let r = PlacementRatio::from_bandwidths(200.0, 80.0).unwrap();
        assert_eq!(r.place(0.70), Tier::Fast);
        assert_eq!(r.place(0.72), Tier::Slow);
        assert_eq!(r.interleave_weights(10), (10, 4));
        let even = PlacementRatio::from_bandwidths(1.0, 1.0).unwrap();
        assert_eq!(even.interleave_weights(255), (255, 255));
        let lopsided = PlacementRatio {
            fast_fraction: 0.999,
        };
        assert_eq!(lopsided.interleave_weights(10), (10, 1));
    }

    #[test]
    fn bound_detection() {
        let cfg = BandwidthConfig::default();
        // 1e9 accesses/s × 64 B = 64 GB/s against 80 GB/s: exactly 0.8.
        assert!(is_bandwidth_bound(1e9, 80e9, &cfg));
        assert!(!is_bandwidth_bound(0.99e9, 80e9, &cfg));
    }

    #[test]
    fn bandwidths_fall_back_to_config() {
        let mut cfg = BandwidthConfig::default();
        let mut cap = CapacityView::default();
        assert_eq!(cfg.bandwidths(&cap), None);
        cfg.fast_gbps = 200.0;
        cfg.slow_gbps = 80.0;
        assert_eq!(cfg.bandwidths(&cap), Some((200e9, 80e9)));
        cap.slow.bandwidth_bytes_per_s = Some(10.0);
        assert_eq!(cfg.bandwidths(&cap), Some((200e9, 10.0)));
    }
}
