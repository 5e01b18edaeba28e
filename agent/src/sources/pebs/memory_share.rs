//! How much of what PEBS samples reaches memory, measured while the agent runs, so that the
//! store period follows the workload ([`memtide_core::sampling`]: the store period is `g / h`
//! load periods, `g` and `h` the shares of `ldlat` loads and of stores that miss the last-level
//! cache).
//!
//! The sampling events count every qualifying event, sampled or not (their `read(2)` count);
//! two counting events per CPU, the kernel's generic `LLC-load-misses` and `LLC-store-misses`
//! (`PERF_TYPE_HW_CACHE`, user space only like the sampling events), count the ones that reached
//! memory. Every rate-control interval [`ShareMeter`] turns the growth of the four counts into
//! shares; a ratio that moved by more than [`ShareMeter::DEAD_BAND`] is applied. Where the PMU
//! has no generic LLC events (the kernel returns ENOENT) the assumed shares stay, and the
//! source says so once at start-up.

use std::{
    io,
    os::fd::{AsFd as _, OwnedFd},
};

use memtide_core::sampling::MemoryShares;
use memtide_host::sys::perf::{self, PerfAttr};

/// Cumulative counts since the events opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareCounts {
    /// `ldlat` loads counted by the sampling events.
    pub loads: u64,
    /// Last-level cache load misses.
    pub loads_to_memory: u64,
    /// Stores counted by the sampling events.
    pub stores: u64,
    /// Last-level cache store misses (RFOs that went to memory).
    pub stores_to_memory: u64,
}

impl ShareCounts {
    fn since(&self, earlier: &Self) -> Self {
        Self {
            loads: self.loads.saturating_sub(earlier.loads),
            loads_to_memory: self.loads_to_memory.saturating_sub(earlier.loads_to_memory),
            stores: self.stores.saturating_sub(earlier.stores),
            stores_to_memory: self
                .stores_to_memory
                .saturating_sub(earlier.stores_to_memory),
        }
    }
}

/// Turns successive [`ShareCounts`] into the store:load period ratio to run at.
#[derive(Clone, Debug)]
pub struct ShareMeter {
    last: Option<ShareCounts>,
    /// The ratio in force.
    ratio: f64,
}

impl ShareMeter {
    /// Fewer loads or stores than this in an interval say too little to move the ratio (a
    /// share from 10,000 events is within ±1 % for the shares that matter).
    pub const MIN_EVENTS: u64 = 10_000;
    /// A measured ratio within this factor of the one in force leaves it alone: each change
    /// costs an ioctl per CPU and shifts the rate controller's footing.
    pub const DEAD_BAND: f64 = 1.25;

    /// A meter starting at the `ratio` the events opened with.
    #[must_use]
    pub const fn new(ratio: f64) -> Self {
        Self { last: None, ratio }
    }

    /// The ratio in force.
    #[must_use]
    pub const fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Takes the counts at the end of an interval; returns the ratio to change to, if it
    /// should change ([`Self::applied`] once it has).
    pub fn observe(&mut self, now: ShareCounts) -> Option<f64> {
        let last = self.last.replace(now)?;
        let delta = now.since(&last);
        if delta.loads < Self::MIN_EVENTS || delta.stores < Self::MIN_EVENTS {
            return None;
        }
        let measured = MemoryShares::from_counts(
            delta.loads,
            delta.loads_to_memory,
            delta.stores,
            delta.stores_to_memory,
        )
        .store_period_ratio();
        let factor = measured / self.ratio;
        if (1.0 / Self::DEAD_BAND..=Self::DEAD_BAND).contains(&factor) {
            return None;
        }
        Some(measured)
    }

    /// The ratio is now in force.
    pub fn applied(&mut self, ratio: f64) {
        self.ratio = ratio;
    }
}

/// The generic last-level-cache miss counters, one pair per CPU.
#[derive(Debug)]
pub struct MissCounters {
    loads: Vec<OwnedFd>,
    stores: Vec<OwnedFd>,
}

impl MissCounters {
    /// Opens and enables `LLC-load-misses` and `LLC-store-misses` on every CPU in `cpus`.
    pub fn open(cpus: &[u32]) -> io::Result<Self> {
        let counter = |op| PerfAttr {
            type_: perf::TYPE_HW_CACHE,
            config: perf::hw_cache_config(perf::HW_CACHE_LL, op, perf::HW_CACHE_RESULT_MISS),
            exclude_kernel: true,
            exclude_hv: true,
            ..PerfAttr::default()
        };
        let (load_attr, store_attr) = (
            counter(perf::HW_CACHE_OP_READ),
            counter(perf::HW_CACHE_OP_WRITE),
        );
        let mut counters = Self {
            loads: Vec::with_capacity(cpus.len()),
            stores: Vec::with_capacity(cpus.len()),
        };
        for &cpu in cpus {
            let cpu = i32::try_from(cpu).unwrap_or(i32::MAX);
            counters.loads.push(perf::open(&load_attr, -1, cpu, None)?);
            counters
                .stores
                .push(perf::open(&store_attr, -1, cpu, None)?);
        }
        for event in counters.loads.iter().chain(&counters.stores) {
            perf::enable(event.as_fd())?;
        }
        Ok(counters)
    }

    /// Load and store misses so far, summed over the CPUs.
    pub fn read(&self) -> io::Result<(u64, u64)> {
        let sum = |events: &[OwnedFd]| -> io::Result<u64> {
            events.iter().try_fold(0u64, |total, event| {
                Ok(total.saturating_add(perf::read_count(event.as_fd())?))
            })
        };
        Ok((sum(&self.loads)?, sum(&self.stores)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(loads: u64, to_memory: u64, stores: u64, stores_to_memory: u64) -> ShareCounts {
        ShareCounts {
            loads,
            loads_to_memory: to_memory,
            stores,
            stores_to_memory,
        }
    }

    #[test]
    fn the_first_reading_only_sets_the_baseline() {
        let mut meter = ShareMeter::new(5.0);
        assert_eq!(
            meter.observe(counts(1 << 40, 1 << 39, 1 << 40, 1 << 40)),
            None
        );
        assert_eq!(meter.ratio(), 5.0);
    }

    #[test]
    fn memory_bound_stores_bring_the_store_period_down_to_the_loads() {
        let mut meter = ShareMeter::new(5.0);
        meter.observe(counts(1_000, 500, 1_000, 20));
        // Over the interval every load and every store went to memory.
        assert_eq!(
            meter.observe(counts(101_000, 100_500, 201_000, 200_020)),
            Some(1.0)
        );
        assert_eq!(meter.ratio(), 5.0, "not in force until applied");
        meter.applied(1.0);
        assert_eq!(meter.ratio(), 1.0);
    }

    #[test]
    fn cache_resident_stores_push_it_up() {
        let mut meter = ShareMeter::new(1.0);
        meter.observe(ShareCounts::default());
        // Half the loads and 1 % of the stores went to memory: 0.5 / 0.01 = 50.
        let ratio = meter
            .observe(counts(100_000, 50_000, 1_000_000, 10_000))
            .expect("a change");
        assert!((ratio - 50.0).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn small_moves_and_quiet_intervals_leave_the_ratio_alone() {
        let mut meter = ShareMeter::new(5.0);
        meter.observe(ShareCounts::default());
        // 0.5 / 0.115 ≈ 4.35: within the dead band of 5.
        assert_eq!(
            meter.observe(counts(100_000, 50_000, 1_000_000, 115_000)),
            None
        );
        // Too few stores to say anything: all-to-memory or not.
        let before = counts(100_000, 50_000, 1_000_000, 115_000);
        let quiet = ShareCounts {
            stores: before.stores + 100,
            stores_to_memory: before.stores_to_memory + 100,
            ..counts(200_000, 150_000, 0, 0)
        };
        assert_eq!(meter.observe(quiet), None);
        assert_eq!(meter.ratio(), 5.0);
    }

    #[test]
    fn counters_open_where_the_pmu_has_generic_llc_events() {
        match MissCounters::open(&[0]) {
            Ok(counters) => {
                counters.read().expect("reading the counters");
            }
            Err(error) => eprintln!(
                "skipping: no generic LLC miss events here ({error}); the agent keeps the \
                 assumed shares"
            ),
        }
    }
}
