//! TPP-like: upstream NUMA-balancing memory-tiering mode plus reclaim-based demotion
//! (anchors.md §1.3; Al Maruf et al., ASPLOS'23).
//!
//! What it models:
//! - **Hint faults.** Every `scan_period` (kernel `scan_period_min_ms`, 1000 ms) NUMA balancing
//!   unmaps the task's slow-tier pages; the next access to each takes a hint fault. A THP faults
//!   and migrates as one 2 MiB folio, a split superpage per 4 KiB page.
//! - **Promotion on repeated access.** TPP promotes a slow page only when it is accessed again
//!   (active-LRU check): here, a page that hint-faults in two consecutive scan rounds, with a
//!   fault latency (time since the scan armed it) under `hot_threshold` (1000 ms).
//! - **Rate limit.** `numa_balancing_promote_rate_limit_MBps`, default 65536 MB/s (the kernel
//!   default; the auto-adjusted threshold only acts when the limit binds, so it is not modelled).
//! - **LRU-style demotion.** kswapd keeps `free_target` (2 %, `watermark_scale_factor = 200`)
//!   of the fast tier free: it walks the fast folios in CLOCK order, gives accessed ones a second
//!   chance (clearing the accessed bit), and demotes the rest to the slow tier. Folios promoted
//!   in the current scan round sit on the active list and are not reclaimed. Promotions stop
//!   at the min watermark (0.5 % free) and have kswapd reclaim room for them first.

use std::time::Duration;

use crate::{
    model::{SpMap, TierModel},
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE, Tier, subpage_index};

pub struct Tpp {
    scan_period: Duration,
    hot_threshold: Duration,
    rate_limit_bytes_per_s: f64,
    free_target: f64,
    free_min: f64,
    round: u32,
    round_start: Duration,
    /// Per superpage, per page: scan round + 1 of the last hint fault.
    faults: SpMap<Box<[u32]>>,
    /// (superpage, page or None for a whole THP) to promote.
    queue: Vec<(u64, Option<usize>)>,
    /// Scan round in which a superpage was last promoted: promoted folios go to the active LRU,
    /// so reclaim does not pick them in the round they arrived.
    promoted: SpMap<u32>,
    tokens: f64,
    last_step: Duration,
    clock_hand: usize,
}

impl Default for Tpp {
    fn default() -> Self {
        Self {
            scan_period: Duration::from_millis(1000),
            hot_threshold: Duration::from_millis(1000),
            rate_limit_bytes_per_s: 65536.0 * 1e6,
            free_target: 0.02,
            free_min: 0.005,
            round: 1,
            round_start: Duration::ZERO,
            faults: SpMap::default(),
            queue: Vec::new(),
            promoted: SpMap::default(),
            tokens: 0.0,
            last_step: Duration::ZERO,
            clock_hand: 0,
        }
    }
}

impl Tpp {
    /// kswapd's free target: `free_target` of the fast tier.
    fn target_bytes(&self, model: &TierModel) -> u64 {
        (model.fast_capacity_bytes() as f64 * self.free_target) as u64
    }

    /// kswapd: demote CLOCK-cold fast folios until `target` bytes are free.
    fn reclaim(&mut self, model: &mut TierModel, target: u64, now_ms: u32) {
        let n = model.superpages().len();
        if n == 0 {
            return;
        }
        // Two sweeps at most: the first clears accessed bits (second chance).
        let mut visited = 0;
        while model.fast_free_bytes() < target && visited < 2 * n {
            let idx = self.clock_hand % n;
            self.clock_hand = (self.clock_hand + 1) % n;
            visited += 1;
            let s = model.superpage_mut(idx);
            if s.fast == [0; 8] || self.promoted.get(&s.sp) == Some(&self.round) {
                continue;
            }
            let sp = s.sp;
            if s.huge {
                if s.accessed != [0; 8] {
                    s.accessed = [0; 8];
                } else {
                    let base = sp * SUPERPAGE_SIZE;
                    model.migrate(base, SUPERPAGE_SIZE, Tier::Slow, SUPERPAGE_SIZE, now_ms);
                }
            } else {
                let mut cold = Vec::new();
                for p in 0..SUBPAGES {
                    let bit = 1u64 << (p % 64);
                    if s.fast[p / 64] & bit == 0 {
                        continue;
                    }
                    if s.accessed[p / 64] & bit != 0 {
                        s.accessed[p / 64] &= !bit;
                    } else {
                        cold.push(p);
                    }
                }
                for p in cold {
                    if model.fast_free_bytes() >= target {
                        break;
                    }
                    model.migrate_page(sp, p, Tier::Slow, now_ms);
                }
            }
        }
    }
}

impl SimPolicy for Tpp {
    fn name(&self) -> String {
        "tpp".into()
    }

    fn observe(
        &mut self,
        batch: &[TraceRecord],
        _: &[AccessSample],
        model: &TierModel,
        clock: Clock,
    ) {
        while clock.now >= self.round_start + self.scan_period {
            self.round += 1;
            self.round_start += self.scan_period;
        }
        let latency_ok = clock.now.saturating_sub(self.round_start) < self.hot_threshold;
        let mut last = (u64::MAX, None);
        for r in batch {
            let sp = r.addr / SUPERPAGE_SIZE;
            let idx = if sp == last.0 {
                last.1
            } else {
                last = (sp, model.find(sp));
                last.1
            };
            let Some(idx) = idx else { continue };
            let s = model.superpage(idx);
            let page = subpage_index(r.addr);
            if s.is_fast(page) {
                continue;
            }
            let slot = if s.huge { 0 } else { page };
            let f = self
                .faults
                .entry(sp)
                .or_insert_with(|| vec![0u32; SUBPAGES].into_boxed_slice());
            if f[slot] == self.round + 1 {
                continue; // already faulted this round: the page is mapped again
            }
            let repeated = f[slot] == self.round;
            f[slot] = self.round + 1;
            if repeated && latency_ok {
                self.queue
                    .push((sp, if s.huge { None } else { Some(page) }));
            }
        }
    }

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        let dt = clock.now.saturating_sub(self.last_step).as_secs_f64();
        self.last_step = clock.now;
        self.tokens =
            (self.tokens + dt * self.rate_limit_bytes_per_s).min(self.rate_limit_bytes_per_s);
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        let min_free = (model.fast_capacity_bytes() as f64 * self.free_min) as u64;
        let queue = std::mem::take(&mut self.queue);
        for (sp, page) in queue {
            let (start, len) = match page {
                None => (sp * SUPERPAGE_SIZE, SUPERPAGE_SIZE),
                Some(p) => (sp * SUPERPAGE_SIZE + p as u64 * PAGE_SIZE, PAGE_SIZE),
            };
            if self.tokens < len as f64 {
                break;
            }
            if model.fast_free_bytes() < min_free + len {
                self.reclaim(model, min_free + len, now_ms);
                if model.fast_free_bytes() < min_free + len {
                    continue;
                }
            }
            let moved = model.migrate(start, len, Tier::Fast, len, now_ms);
            if moved > 0 {
                self.promoted.insert(sp, self.round);
            }
            self.tokens -= moved as f64;
        }
        // kswapd wakes below the low watermark (half the target) and reclaims to the target.
        let target = self.target_bytes(model);
        if model.fast_free_bytes() < target / 2 {
            self.reclaim(model, target, now_ms);
        }
    }
}
