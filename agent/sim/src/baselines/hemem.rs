//! HeMem-like (anchors.md §1.4; Raybuck et al., SOSP'21, `cuhk-mass/hemem` `src/pebs.h`).
//!
//! What it models:
//! - PEBS samples counted per 2 MiB page (HeMem manages huge pages only), reads and writes
//!   apart; a page is hot when either count reaches 4 samples (`HOT_READ_THRESHOLD`,
//!   `HOT_WRITE_THRESHOLD`).
//! - Cooling: when any page's count reaches 10 samples (`PEBS_COOLING_THRESHOLD`) the global
//!   cooling clock advances; every page's counts are halved once per clock tick it missed
//!   (lazily).
//! - A migration thread every 10 ms (`PEBS_KSWAPD_INTERVAL`): hot slow pages are promoted,
//!   write-hot first; when the fast tier is full a cold fast page (not hot) is demoted for each;
//!   with no cold fast page left, promotion stops. Bounded by `PEBS_KSWAPD_MIGRATE_RATE`
//!   (10 GB/s). Everything moves at 2 MiB.
//!
//! Its design point: HeMem's thresholds are counts of samples taken every `SAMPLE_PERIOD`
//! (19,997) events, so "hot" means 4 × 19,997 accesses seen in a 2 MiB page, and cooling starts
//! at 10 × 19,997. The simulator's samples are the shared stream every sampling policy gets
//! (the same 1 in N the engine gets), each carrying the accesses it stands for as its weight;
//! HeMem counts those accesses against its thresholds in accesses, so it acts on the same
//! amount of traffic whatever the sample rate. Counting the samples themselves against 4 and
//! 10 would put it at a period of N × record weight instead (128 accesses in the suite, 156
//! times more eager than HeMem: every page hot, and cooling every few samples).

use std::time::Duration;

use crate::{
    model::{SpMap, TierModel},
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::units::{SUBPAGES, SUPERPAGE_SIZE, Tier};

/// HeMem's PEBS sample period (`SAMPLE_PERIOD`, src/pebs.h): the events one of its samples
/// stands for.
const SAMPLE_PERIOD: u64 = 19_997;
/// `HOT_READ_THRESHOLD`, `HOT_WRITE_THRESHOLD` and `PEBS_COOLING_THRESHOLD` (4, 4 and 10
/// samples), in accesses.
const HOT_READ: u64 = 4 * SAMPLE_PERIOD;
const HOT_WRITE: u64 = 4 * SAMPLE_PERIOD;
const COOLING: u64 = 10 * SAMPLE_PERIOD;

/// Accesses per 2 MiB page, as of global cooling tick `clock`.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    reads: u64,
    writes: u64,
    clock: u32,
}

pub struct HeMem {
    counts: SpMap<Counts>,
    global: u32,
    interval: Duration,
    rate_bytes_per_s: f64,
    last: Duration,
}

impl Default for HeMem {
    fn default() -> Self {
        Self {
            counts: SpMap::default(),
            global: 0,
            interval: Duration::from_millis(10),
            rate_bytes_per_s: 10e9,
            last: Duration::ZERO,
        }
    }
}

impl HeMem {
    fn cooled(&self, c: &Counts) -> (u64, u64) {
        let d = self.global - c.clock;
        (
            c.reads.checked_shr(d).unwrap_or(0),
            c.writes.checked_shr(d).unwrap_or(0),
        )
    }
}

impl SimPolicy for HeMem {
    fn name(&self) -> String {
        "hemem".into()
    }

    fn observe(&mut self, _: &[TraceRecord], samples: &[AccessSample], _: &TierModel, _: Clock) {
        for s in samples {
            let sp = s.addr / SUPERPAGE_SIZE;
            let global = self.global;
            let c = self.counts.entry(sp).or_default();
            let d = global - c.clock;
            c.reads = c.reads.checked_shr(d).unwrap_or(0);
            c.writes = c.writes.checked_shr(d).unwrap_or(0);
            c.clock = global;
            if memtide_common::AccessKind::from_u8(s.kind) == memtide_common::AccessKind::Store {
                c.writes = c.writes.saturating_add(s.weight);
            } else {
                c.reads = c.reads.saturating_add(s.weight);
            }
            if c.reads >= COOLING || c.writes >= COOLING {
                self.global += 1;
            }
        }
    }

    fn learns_from_samples_only(&self) -> bool {
        true
    }

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        if clock.now < self.last + self.interval {
            return;
        }
        let mut budget = (clock.now - self.last).as_secs_f64() * self.rate_bytes_per_s;
        self.last = clock.now;
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        // (write-hot, heat, sp) of hot slow pages; (heat, sp) of cold fast pages.
        let mut hot = Vec::new();
        let mut cold = Vec::new();
        for s in model.superpages() {
            let (r, w) = self.counts.get(&s.sp).map_or((0, 0), |c| self.cooled(c));
            let is_hot = r >= HOT_READ || w >= HOT_WRITE;
            let fast = s.fast_pages() > 0;
            if is_hot && s.fast_pages() < SUBPAGES as u32 {
                hot.push((w >= HOT_WRITE, r + w, s.sp));
            } else if !is_hot && fast {
                cold.push((r + w, s.sp));
            }
        }
        hot.sort_unstable_by(|a, b| b.cmp(a));
        cold.sort_unstable();
        let mut cold = cold.into_iter();
        for (_, _, sp) in hot {
            if budget < SUPERPAGE_SIZE as f64 {
                break;
            }
            if model.fast_free_bytes() < SUPERPAGE_SIZE {
                let Some((_, victim)) = cold.next() else {
                    break;
                };
                budget -= model.migrate(
                    victim * SUPERPAGE_SIZE,
                    SUPERPAGE_SIZE,
                    Tier::Slow,
                    SUPERPAGE_SIZE,
                    now_ms,
                ) as f64;
            }
            budget -= model.migrate(
                sp * SUPERPAGE_SIZE,
                SUPERPAGE_SIZE,
                Tier::Fast,
                SUPERPAGE_SIZE,
                now_ms,
            ) as f64;
        }
    }
}
