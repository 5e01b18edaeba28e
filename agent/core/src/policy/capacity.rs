//! Capacity and safety: fast-tier watermarks, the per-epoch migration budget, and hysteresis.
//!
//! Watermarks are usage fractions of the fast tier. Promotions never push usage above the high
//! watermark (by default this keeps ≥ 0.5 % free, as DAMON's tiering recipe does); when usage is
//! already above it, the coldest resident data is demoted down to the low watermark. The gap
//! between the two keeps the planner from demoting a page at every epoch.
//!
//! Hysteresis and ping-pong are tracked per 2 MiB superpage, not per 4 KiB page, so their memory
//! stays proportional to what was moved recently rather than to the address space.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::CapacityView;
use crate::units::{Direction, SUPERPAGE_SIZE};
use crate::validate::{ConfigError, check};

/// Capacity, budget and hysteresis tunables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapacityConfig {
    /// Fast-tier usage fraction that promotions never exceed and above which demotion starts.
    /// Default 0.995 (≥ 0.5 % of the fast tier stays free).
    pub high_watermark: f64,
    /// Usage fraction that watermark demotions bring the fast tier back down to. Default 0.99.
    pub low_watermark: f64,
    /// Promotion budget, bytes per second of elapsed epoch; what a plan leaves unspent is
    /// saved for the next ones, up to one superpage, so that a short epoch can still move one.
    /// Default 256 MiB/s.
    pub promote_bytes_per_s: u64,
    /// Demotion budget, bytes per second of elapsed epoch; saved like the promotion budget, up
    /// to two superpages (the victims that make room for one). Default 256 MiB/s.
    pub demote_bytes_per_s: u64,
    /// A superpage moved in one direction is not moved back within this many epochs. Default 2.
    pub hysteresis_epochs: u64,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self {
            high_watermark: 0.995,
            low_watermark: 0.99,
            promote_bytes_per_s: 256 << 20,
            demote_bytes_per_s: 256 << 20,
            hysteresis_epochs: 2,
        }
    }
}

impl CapacityConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.high_watermark),
            "capacity.high_watermark",
            self.high_watermark,
            "must be within [0, 1]",
        )?;
        check(
            (0.0..=self.high_watermark).contains(&self.low_watermark),
            "capacity.low_watermark",
            self.low_watermark,
            "must be within [0, high_watermark]",
        )
    }

    /// Bytes that must stay free in the fast tier.
    #[must_use]
    pub fn reserve_bytes(&self, cap: &CapacityView) -> u64 {
        frac(cap.fast_total_bytes, 1.0 - self.high_watermark)
    }

    /// The most the target can hold in the fast tier: its share of the tier (all of it without
    /// one), and never more than the tier less the reserve that stays free.
    #[must_use]
    pub fn holdable_bytes(&self, cap: &CapacityView) -> u64 {
        cap.fast_reach_bytes()
            .min(cap.fast_total_bytes.saturating_sub(self.reserve_bytes(cap)))
    }

    /// Bytes promotions may fill before any demotion (never negative): free memory above the
    /// high watermark, and no more than what is left of the target's share.
    #[must_use]
    pub fn promote_room(&self, cap: &CapacityView) -> u64 {
        let free = cap.fast_free_bytes.saturating_sub(self.reserve_bytes(cap));
        cap.share.map_or(free, |share| {
            free.min(share.limit_bytes.saturating_sub(share.held_bytes))
        })
    }

    /// Bytes to demote to get back under the watermarks (0 while usage ≤ high watermark), or
    /// back within the target's share, whichever is more.
    #[must_use]
    pub fn watermark_demand(&self, cap: &CapacityView) -> u64 {
        let machine = if cap.fast_free_bytes >= self.reserve_bytes(cap) {
            0
        } else {
            frac(cap.fast_total_bytes, 1.0 - self.low_watermark).saturating_sub(cap.fast_free_bytes)
        };
        let over_share = cap.share.map_or(0, |share| {
            share.held_bytes.saturating_sub(share.limit_bytes)
        });
        machine.max(over_share)
    }

    /// (promote, demote) budget for an epoch that lasted `elapsed_ms`.
    #[must_use]
    pub fn budget(&self, elapsed_ms: u64) -> (u64, u64) {
        let per = |rate: u64| {
            u64::try_from(u128::from(rate) * u128::from(elapsed_ms) / 1000).unwrap_or(u64::MAX)
        };
        (per(self.promote_bytes_per_s), per(self.demote_bytes_per_s))
    }

    /// (promote, demote) budget for a plan `elapsed_ms` after the last one, which left
    /// `unspent` of its own. A plan may need more than its epoch accrues for the one move it
    /// cannot split: a superpage in, and out the victims that free its room, a run of cold pages
    /// short of it and then a whole superpage at worst. At 256 MiB/s a 10 ms epoch accrues
    /// 2.5 MiB, so plan after plan asked for that swap and none could afford it. What a plan
    /// does not spend is saved, but only up to that move (one superpage in, two out), or the
    /// epoch's own accrual when more: saved up to a second's worth, short plans churning
    /// through streams spent it all (`bw-multistream`, main matrix: 8 GB moved instead of
    /// 0.3 GB, 3.6 times slower).
    #[must_use]
    pub fn budget_after(&self, elapsed_ms: u64, unspent: (u64, u64)) -> (u64, u64) {
        let (promote, demote) = self.budget(elapsed_ms);
        let saved = |left: u64, accrued: u64, most: u64| {
            left.saturating_add(accrued).min(accrued.max(most))
        };
        (
            saved(unspent.0, promote, SUPERPAGE_SIZE),
            saved(unspent.1, demote, 2 * SUPERPAGE_SIZE),
        )
    }
}

fn frac(total: u64, f: f64) -> u64 {
    // Rounded, not ceiled: 1 − 0.995 is not exact in binary and would gain a byte.
    (total as f64 * f.clamp(0.0, 1.0)).round() as u64
}

/// Recent moves of one superpage: per direction, the epoch (1-based; 0 = never) of the last
/// move and the pages moved since that direction's marks were last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mark {
    promoted: u64,
    demoted: u64,
    promoted_pages: [u64; 8],
    demoted_pages: [u64; 8],
}

/// Recent moves per 4 KiB page, grouped per superpage, for hysteresis and ping-pong accounting.
///
/// Pages, not superpages: with sparse hotness one superpage legitimately sees hot pages promoted
/// and cold ones demoted; only moving the *same* page back is oscillation. A direction's pages
/// are forgotten together once its last move is older than the window, so memory stays
/// proportional to the superpages moved recently.
#[derive(Clone, Debug, Default)]
pub struct MoveMarks {
    marks: BTreeMap<u64, Mark>,
    window: u64,
}

impl MoveMarks {
    /// Pages of superpage `sp` that moving in `dir` at `epoch` would move back within
    /// `window` epochs of their last move the other way (all zero when none).
    #[must_use]
    pub fn reversed_pages(&self, sp: u64, dir: Direction, epoch: u64, window: u64) -> [u64; 8] {
        self.marks.get(&sp).map_or([0; 8], |m| {
            let (last_opposite, pages) = match dir {
                Direction::Promote => (m.demoted, m.demoted_pages),
                Direction::Demote => (m.promoted, m.promoted_pages),
            };
            if last_opposite != 0 && epoch.saturating_sub(last_opposite) <= window {
                pages
            } else {
                [0; 8]
            }
        })
    }

    /// Whether moving any page of `pages` of superpage `sp` in `dir` would undo a move made
    /// within `window` epochs.
    #[must_use]
    pub fn reverses(
        &self,
        sp: u64,
        pages: &[u64; 8],
        dir: Direction,
        epoch: u64,
        window: u64,
    ) -> bool {
        let back = self.reversed_pages(sp, dir, epoch, window);
        back.iter().zip(pages).any(|(a, b)| a & b != 0)
    }

    /// Records that `pages` of superpage `sp` moved in `dir` at `epoch`.
    pub fn record(&mut self, sp: u64, pages: &[u64; 8], dir: Direction, epoch: u64) {
        let window = self.window;
        let m = self.marks.entry(sp).or_default();
        let (last, bits) = match dir {
            Direction::Promote => (&mut m.promoted, &mut m.promoted_pages),
            Direction::Demote => (&mut m.demoted, &mut m.demoted_pages),
        };
        if *last == 0 || epoch.saturating_sub(*last) > window {
            *bits = [0; 8];
        }
        *last = epoch;
        for (b, p) in bits.iter_mut().zip(pages) {
            *b |= p;
        }
    }

    /// Forgets moves older than `window` epochs (and keeps `window` for [`Self::record`]).
    pub fn prune(&mut self, epoch: u64, window: u64) {
        self.window = window;
        self.marks
            .retain(|_, m| epoch.saturating_sub(m.promoted.max(m.demoted)) <= window);
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// Heap bytes, counting B-tree nodes as at least half full (std's B = 6: ≤ 11 entries per node).
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        let nodes = self.marks.len().div_ceil(5);
        nodes * (11 * (size_of::<u64>() + size_of::<Mark>()) + 16 * size_of::<usize>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::page_bits;

    fn cap(total: u64, free: u64) -> CapacityView {
        CapacityView {
            fast_total_bytes: total,
            fast_free_bytes: free,
            ..CapacityView::default()
        }
    }

    #[test]
    fn watermarks_keep_half_a_percent_free() {
        let cfg = CapacityConfig::default();
        let c = cap(100_000, 1_000);
        assert_eq!(cfg.reserve_bytes(&c), 500);
        assert_eq!(cfg.promote_room(&c), 500);
        assert_eq!(cfg.watermark_demand(&c), 0);
        // Exactly at the reserve: no room, no demand.
        assert_eq!(cfg.promote_room(&cap(100_000, 500)), 0);
        assert_eq!(cfg.watermark_demand(&cap(100_000, 500)), 0);
        // One byte below: demote back to 1 % free.
        assert_eq!(cfg.watermark_demand(&cap(100_000, 499)), 501);
        assert_eq!(cfg.watermark_demand(&cap(100_000, 0)), 1000);
    }

    #[test]
    fn a_share_bounds_promotions_and_demotes_what_is_held_above_it() {
        let cfg = CapacityConfig::default();
        let shared = |limit, held| CapacityView {
            share: Some(crate::policy::FastShare {
                limit_bytes: limit,
                held_bytes: held,
            }),
            ..cap(100_000, 50_000)
        };
        // Room is what is left of the share while the tier has more free.
        assert_eq!(cfg.promote_room(&shared(30_000, 10_000)), 20_000);
        assert_eq!(cfg.watermark_demand(&shared(30_000, 10_000)), 0);
        // A share larger than the free memory leaves the machine's room.
        assert_eq!(cfg.promote_room(&shared(90_000, 0)), 49_500);
        // Above the share: no room, and the excess is demoted.
        assert_eq!(cfg.promote_room(&shared(30_000, 34_000)), 0);
        assert_eq!(cfg.watermark_demand(&shared(30_000, 34_000)), 4_000);
        // The machine's own demand wins when it is larger.
        let full = CapacityView {
            share: Some(crate::policy::FastShare {
                limit_bytes: 30_000,
                held_bytes: 30_100,
            }),
            ..cap(100_000, 0)
        };
        assert_eq!(cfg.watermark_demand(&full), 1_000);
        assert_eq!(shared(30_000, 0).fast_reach_bytes(), 30_000);
        assert_eq!(cap(100_000, 0).fast_reach_bytes(), 100_000);
        // What it can hold: its share, within what the reserve leaves of the tier.
        assert_eq!(cfg.holdable_bytes(&shared(30_000, 0)), 30_000);
        assert_eq!(cfg.holdable_bytes(&shared(99_800, 0)), 99_500);
        assert_eq!(cfg.holdable_bytes(&cap(100_000, 0)), 99_500);
    }

    #[test]
    fn budget_scales_with_elapsed_time() {
        let cfg = CapacityConfig {
            promote_bytes_per_s: 1000,
            demote_bytes_per_s: 10,
            ..CapacityConfig::default()
        };
        assert_eq!(cfg.budget(1000), (1000, 10));
        assert_eq!(cfg.budget(500), (500, 5));
        assert_eq!(cfg.budget(0), (0, 0));
    }

    #[test]
    fn unspent_budget_is_saved_up_to_one_superpage_swap() {
        let sp = SUPERPAGE_SIZE;
        let cfg = CapacityConfig {
            promote_bytes_per_s: sp,
            demote_bytes_per_s: sp,
            ..CapacityConfig::default()
        };
        assert_eq!(cfg.budget_after(100, (0, 0)), (sp / 10, sp / 10));
        assert_eq!(
            cfg.budget_after(100, (sp / 2, sp / 2)),
            (sp * 6 / 10, sp * 6 / 10)
        );
        // One superpage in and two out at most, however long nothing was spent...
        assert_eq!(cfg.budget_after(100, (5 * sp, 5 * sp)), (sp, 2 * sp));
        // ...or the epoch's own accrual, when it is more.
        assert_eq!(cfg.budget_after(3000, (5 * sp, 5 * sp)), (3 * sp, 3 * sp));
    }

    #[test]
    fn hysteresis_window_boundaries() {
        let mut m = MoveMarks::default();
        m.prune(0, 8);
        let all = [u64::MAX; 8];
        m.record(7, &all, Direction::Promote, 10);
        assert!(m.reverses(7, &all, Direction::Demote, 12, 2));
        assert!(!m.reverses(7, &all, Direction::Demote, 13, 2));
        assert!(!m.reverses(7, &all, Direction::Promote, 11, 2));
        assert!(!m.reverses(8, &all, Direction::Demote, 11, 2));
        m.prune(18, 8);
        assert_eq!(m.len(), 1);
        m.prune(19, 8);
        assert!(m.is_empty());
    }

    #[test]
    fn only_the_same_pages_moving_back_reverse_a_move() {
        let mut m = MoveMarks::default();
        m.prune(0, 8);
        m.record(3, &page_bits(0, 16), Direction::Promote, 5);
        // Demoting other pages of the superpage is not a reversal; demoting a promoted one is.
        assert!(!m.reverses(3, &page_bits(16, 496), Direction::Demote, 6, 2));
        assert!(m.reverses(3, &page_bits(15, 2), Direction::Demote, 6, 2));
        assert_eq!(
            m.reversed_pages(3, Direction::Demote, 6, 2),
            page_bits(0, 16)
        );
        // A later promotion adds pages while the window is open, and starts afresh after it.
        m.record(3, &page_bits(100, 1), Direction::Promote, 7);
        assert!(m.reverses(3, &page_bits(0, 1), Direction::Demote, 8, 2));
        m.record(3, &page_bits(200, 1), Direction::Promote, 20);
        assert!(!m.reverses(3, &page_bits(0, 1), Direction::Demote, 21, 2));
        assert!(m.reverses(3, &page_bits(200, 1), Direction::Demote, 21, 2));
    }
}
