//! Placement-only baselines: nothing moves after the first touch.
//!
//! - `no-migration`: Linux's default local-first allocation: a superpage goes to the fast tier
//!   while it fits, else to the slow tier (Ryoo's "no migration" baseline).
//! - `interleave`: `MPOL_INTERLEAVE` across the two tiers; with THP the kernel interleaves huge
//!   pages, so superpages alternate (BW-AWARE's INTERLEAVE).
//! - `bw-aware`: BW-AWARE's static ratio (digest §5): a superpage goes to the fast tier with
//!   probability `f = b_fast / (b_fast + b_slow)` ("rand[0, 99] ≥ 30 → BO" for 200/80 GB/s),
//!   drawn from a hash of its number so every run places it alike. The suite also sweeps `f`.

use crate::{
    model::{Preset, TierModel},
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::units::Tier;

/// Which placement rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    FirstTouch,
    Interleave,
    /// Fast share of new superpages.
    Ratio(f64),
}

pub struct StaticPlacement {
    rule: Rule,
    name: String,
    next: u64,
}

impl StaticPlacement {
    #[must_use]
    pub fn first_touch() -> Self {
        Self {
            rule: Rule::FirstTouch,
            name: "no-migration".into(),
            next: 0,
        }
    }

    #[must_use]
    pub fn interleave() -> Self {
        Self {
            rule: Rule::Interleave,
            name: "interleave".into(),
            next: 0,
        }
    }

    /// BW-AWARE at the preset's bandwidth ratio.
    #[must_use]
    pub fn bw_aware(preset: &Preset) -> Self {
        Self {
            rule: Rule::Ratio(preset.fast_gbps / (preset.fast_gbps + preset.slow_gbps)),
            name: "bw-aware".into(),
            next: 0,
        }
    }

    /// BW-AWARE at an explicit fast share (the suite's ratio sweep).
    #[must_use]
    pub fn ratio(f: f64) -> Self {
        Self {
            rule: Rule::Ratio(f),
            name: format!("bw-aware-f{f:.2}"),
            next: 0,
        }
    }
}

/// A well-mixed hash of a superpage number onto 0..10000.
fn bucket(sp: u64) -> u64 {
    let mut z = sp.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 10_000
}

impl SimPolicy for StaticPlacement {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn place(&mut self, sp: u64, model: &TierModel) -> Tier {
        match self.rule {
            Rule::FirstTouch => model.first_touch(),
            Rule::Interleave => {
                self.next += 1;
                if self.next % 2 == 1 {
                    Tier::Fast
                } else {
                    Tier::Slow
                }
            }
            Rule::Ratio(f) => {
                if (bucket(sp) as f64) < f * 10_000.0 {
                    Tier::Fast
                } else {
                    Tier::Slow
                }
            }
        }
    }

    fn observe(&mut self, _: &[TraceRecord], _: &[AccessSample], _: &TierModel, _: Clock) {}

    /// It learns nothing: first touch, or a fixed share, places everything.
    fn learns_from_samples_only(&self) -> bool {
        true
    }

    fn step(&mut self, _: Clock, _: &mut TierModel) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PresetName;

    #[test]
    fn ratio_places_its_share() {
        let preset = PresetName::BwAware.preset();
        let mut p = StaticPlacement::bw_aware(&preset);
        let model = TierModel::new(preset, 1 << 40);
        let fast = (0..10_000)
            .filter(|&sp| p.place(sp, &model) == Tier::Fast)
            .count();
        // 200 / (200 + 80) = 0.714
        assert!((6900..7400).contains(&fast), "{fast}");
        let mut i = StaticPlacement::interleave();
        let v: Vec<Tier> = (0..4).map(|sp| i.place(sp, &model)).collect();
        assert_eq!(v, [Tier::Fast, Tier::Slow, Tier::Fast, Tier::Slow]);
    }
}
