//! How a sampling budget splits between two events that both see memory traffic, but not
//! equally often: PEBS's `mem-loads` (loads slower than `ldlat`) and `mem-stores` (every
//! retired store).
//!
//! What tiering estimates from samples is each page's memory traffic, and only a share `g` of
//! the `ldlat` loads (those that also miss the last-level cache) and `h` of the stores reached
//! memory. Which ones did, PEBS says in `PERF_SAMPLE_DATA_SRC`, and a `perf_event` BPF program
//! cannot read it (its context exposes the registers, the period and the address only): every
//! sample counts, a load sample for `g` of the loads it stands for and a store sample for `h`
//! of its stores, on average. Sampling loads with probability `f_l` and stores with `f_s`, a
//! page with `L` such loads and `S` stores has its traffic estimated as
//! `g · n_l / f_l + h · n_s / f_s` (`n` samples of each, Poisson), with variance
//! `g² L / f_l + h² S / f_s`, for a sample rate `f_l · r_l + f_s · r_s` fixed by the CPU budget.
//! The minimum (Neyman allocation, a Lagrange multiplier) is at `f ∝ share`: the store period is
//! `g / h` times the load period, whatever the two event rates, so that a store sample and a
//! load sample stand for the same expected memory traffic.
//!
//! So when every sampled access reaches memory (`g = h`), loads and stores share one period;
//! when stores mostly hit the caches (`h` ≪ `g`, the usual case on a server) a store sample
//! says `h / g` as much about memory traffic as a load sample at the same period would, and
//! stores are sampled that much less. (Were each sample's data source known, only the samples
//! that reached memory would count, the variance would be `g L / f_l + h S / f_s`, and the
//! ratio `√(g / h)`: memtide used that ratio until it measured, in the simulator, how many of
//! the samples it bought were stores served by a cache.)

/// The store:load period ratio never goes past these bounds: below 1 stores, which no filter
/// narrows, would be sampled more often than the loads `ldlat` narrowed to the slow ones, and
/// past 64 stores stop informing the read/write split at all (and a share measured over a
/// quiet interval can be 0).
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

    /// The store period as a multiple of the load period: `loads / stores`, within
    /// [`MIN_STORE_PERIOD_RATIO`]..=[`MAX_STORE_PERIOD_RATIO`].
    #[must_use]
    pub fn store_period_ratio(&self) -> f64 {
        let ratio = self.loads / self.stores;
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
    fn stores_that_mostly_hit_the_caches_are_sampled_by_the_ratio_of_the_shares() {
        // Half the ldlat loads and 2 % of the stores reach memory: 0.5 / 0.02 = 25, so a store
        // sample stands for as much memory traffic (25 x 0.02 = 0.5 periods) as a load sample.
        let server = MemoryShares {
            loads: 0.5,
            stores: 0.02,
        };
        assert!((server.store_period_ratio() - 25.0).abs() < 1e-9);
        // A tenth of the loads and 5 % of the stores: 2.
        let cached = MemoryShares::from_counts(1000, 100, 1000, 50);
        assert!((cached.store_period_ratio() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_load_sample_and_a_store_sample_stand_for_the_same_memory_traffic() {
        // Within the bounds, a store sample's period times its share equals a load sample's.
        for (loads, stores) in [
            (0.5, 0.02),
            (0.9, 0.3),
            (0.25, 0.05),
            (1.0, 1.0),
            (0.4, 0.4),
        ] {
            let ratio = MemoryShares { loads, stores }.store_period_ratio();
            assert!(
                (ratio * stores - loads).abs() < 1e-12,
                "{loads} {stores}: {ratio}"
            );
        }
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
