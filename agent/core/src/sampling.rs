//! How a sampling budget splits between two events that both see memory traffic, but not
//! equally often: PEBS's `mem-loads` (loads slower than `ldlat`) and `mem-stores` (every
//! retired store).
//!
//! What tiering estimates from samples is each page's memory traffic. A sampled event counts
//! towards it only when the access reached memory: a share `g` of the `ldlat` loads (those that
//! also miss the last-level cache) and a share `h` of the stores. Sampling loads with
//! probability `f_l` and stores with `f_s`, the estimate of a page's traffic has variance
//! `M_l / f_l + M_s / f_s` (Horvitz-Thompson over the accesses that reached memory, `M_l` and
//! `M_s` of them), for a sample rate `f_l · r_l + f_s · r_s` fixed by the CPU budget. With
//! `M_l = g · r_l` and `M_s = h · r_s` for the page's share of the events, the minimum (Neyman
//! allocation, a Lagrange multiplier) is at `f ∝ √(share)`: the store period is `√(g / h)`
//! times the load period, whatever the two event rates.
//!
//! So when every sampled access reaches memory (`g = h`), loads and stores share one period;
//! when stores mostly hit the caches (`h` ≪ `g`, the usual case on a server) they are sampled
//! less, but only by the square root of the ratio: a store that does reach memory is evidence
//! the planner weighs as a write, and starving stores by the full ratio loses it. An equal share
//! of samples per event instead sets the ratio to `r_s / r_l` (25 at memtide's expected rates),
//! which under-samples the writes of write-heavy memory-bound code by the same factor.

/// The store:load period ratio never goes past these bounds: below 1 a store would be sampled
/// more often than a load that reached memory as surely, and past 64 stores stop informing the
/// read/write split at all (and a share measured over a quiet interval can be 0).
pub const MIN_STORE_PERIOD_RATIO: f64 = 1.0;
pub const MAX_STORE_PERIOD_RATIO: f64 = 64.0;

/// The share of `ldlat` loads and of stores that reached memory (each in 0..=1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryShares {
    pub loads: f64,
    pub stores: f64,
}

impl MemoryShares {
    /// Shares from event counts: `loads_to_memory` of `loads`, `stores_to_memory` of `stores`.
    /// A stream with no events counts as fully memory-bound (nothing tells otherwise).
    #[must_use]
    pub fn from_counts(
        loads: u64,
        loads_to_memory: u64,
        stores: u64,
        stores_to_memory: u64,
    ) -> Self {
        let share = |n: u64, of: u64| {
            if of == 0 {
                1.0
            } else {
                (n as f64 / of as f64).clamp(0.0, 1.0)
            }
        };
        Self {
            loads: share(loads_to_memory, loads),
            stores: share(stores_to_memory, stores),
        }
    }

    /// The store period as a multiple of the load period: `√(loads / stores)`, within
    /// [`MIN_STORE_PERIOD_RATIO`]..=[`MAX_STORE_PERIOD_RATIO`].
    #[must_use]
    pub fn store_period_ratio(&self) -> f64 {
        let ratio = (self.loads / self.stores).sqrt();
        if ratio.is_nan() {
            return MIN_STORE_PERIOD_RATIO;
        }
        ratio.clamp(MIN_STORE_PERIOD_RATIO, MAX_STORE_PERIOD_RATIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_shares_sample_loads_and_stores_alike() {
        let all = MemoryShares::from_counts(1000, 1000, 5000, 5000);
        assert!((all.store_period_ratio() - 1.0).abs() < 1e-12);
        let half = MemoryShares::from_counts(1000, 500, 5000, 2500);
        assert!((half.store_period_ratio() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn stores_that_mostly_hit_the_caches_are_sampled_by_the_root_of_the_ratio() {
        // Half the ldlat loads and 2 % of the stores reach memory: √25 = 5.
        let server = MemoryShares {
            loads: 0.5,
            stores: 0.02,
        };
        assert!((server.store_period_ratio() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn the_ratio_stays_within_its_bounds() {
        let none = MemoryShares::from_counts(1000, 900, 5000, 0);
        assert_eq!(none.store_period_ratio(), MAX_STORE_PERIOD_RATIO);
        let stores_only = MemoryShares::from_counts(1000, 0, 5000, 5000);
        assert_eq!(stores_only.store_period_ratio(), MIN_STORE_PERIOD_RATIO);
        let idle = MemoryShares::from_counts(0, 0, 0, 0);
        assert_eq!(idle.store_period_ratio(), MIN_STORE_PERIOD_RATIO);
        let nothing = MemoryShares {
            loads: 0.0,
            stores: 0.0,
        };
        assert_eq!(nothing.store_period_ratio(), MIN_STORE_PERIOD_RATIO);
    }
}
