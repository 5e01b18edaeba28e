//! The tier model: where every page is, what each access and each migration costs.
//!
//! - Two tiers (fast, slow); the fast tier has a capacity, the slow tier none. Latency per tier
//!   and access kind, bandwidth per tier, from a [`Preset`] (digest §6.2 H2).
//! - THP always: the first touch of any page of a 2 MiB superpage maps the whole superpage as
//!   one huge page in one tier, chosen by the policy (first touch: fast while it fits). A
//!   migration below 2 MiB splits the huge page for good (one extra shootdown); accesses to a
//!   split superpage pay a TLB-reach penalty (Rainbow's point); a whole-2 MiB move re-forms it.
//! - A migration operation moves one chunk of one granularity: one TLB shootdown (13.2 µs,
//!   Ryoo citing Oskin & Loh) plus a copy cost of `bytes × (1/b_fast + 1/b_slow)`.
//! - Projected time per window of records, after Ryoo's leading-loads model
//!   (`T = C + M·h + M·(1−h)·r`, per access stream) with a bandwidth-queueing term:
//!   `T_w = max((N·C + L) / mlp, B_fast / b_fast, B_slow / b_slow)`, where `N` is the accesses
//!   of the window, `C` the compute between two misses, `L` the summed access latency
//!   (including the TLB penalty), `mlp` the independent streams the trace declares, and `B` the
//!   bytes each tier served (64 B per access). A latency-bound program (mlp 1) pays every
//!   latency; a bandwidth-bound one is limited by the busier tier. Migrations add
//!   `T_shootdown + T_copy` on top. All-fast time is the same sum with every access fast, no
//!   TLB penalty and no migration.

use std::{
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
};

use serde::Serialize;

use memtide_core::policy::{CapacityView, PlacementView};
use memtide_core::units::{
    PAGE_SIZE, Residency, SUBPAGES, SUPERPAGE_SIZE, Tier, count_pages, page_runs,
};

mod preset;
pub use preset::{Preset, PresetName};

/// Multiply-shift hashing for superpage numbers (keys are already well spread).
#[derive(Clone, Copy, Debug, Default)]
pub struct SpHasher(u64);

impl Hasher for SpHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type SpMap<V> = HashMap<u64, V, BuildHasherDefault<SpHasher>>;

/// One mapped superpage.
#[derive(Clone, Debug)]
pub struct Superpage {
    /// Superpage number (address >> SUPERPAGE_SHIFT).
    pub sp: u64,
    pub fast: [u64; 8],
    /// Pages accessed since a policy last cleared the bit (the PTE accessed bit).
    pub accessed: [u64; 8],
    /// Mapped by one huge page.
    pub huge: bool,
    /// Per page: (time ms << 1 | direction) + 1 of its last move, 0 = never (ping-pong).
    moved: Option<Box<[u32]>>,
}

impl Superpage {
    /// Puts `pages` in `to`, stamping each move in the superpage's log; returns how many of
    /// them went back the way they came within [`PINGPONG_WINDOW_MS`].
    #[inline]
    fn move_pages(&mut self, pages: &[usize], to: Tier, now_ms: u32) -> u64 {
        let dir = u32::from(to == Tier::Slow);
        let log = self
            .moved
            .get_or_insert_with(|| vec![0u32; SUBPAGES].into_boxed_slice());
        let stamp = ((now_ms << 1) | dir).wrapping_add(1);
        let mut pingpong = 0;
        for &p in pages {
            let (w, b) = (p / 64, 1u64 << (p % 64));
            if to == Tier::Fast {
                self.fast[w] |= b;
            } else {
                self.fast[w] &= !b;
            }
            let prev = log[p];
            if prev != 0 {
                let (t, d) = ((prev - 1) >> 1, (prev - 1) & 1);
                if d != dir && now_ms.saturating_sub(t) < PINGPONG_WINDOW_MS {
                    pingpong += 1;
                }
            }
            log[p] = stamp;
        }
        pingpong
    }

    #[must_use]
    pub fn is_fast(&self, page: usize) -> bool {
        self.fast[page / 64] & (1 << (page % 64)) != 0
    }

    #[must_use]
    pub fn fast_pages(&self) -> u32 {
        count_pages(&self.fast)
    }
}

/// Granularity classes of the reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GranClass {
    K4 = 0,
    K64 = 1,
    M2 = 2,
}

impl GranClass {
    #[must_use]
    pub fn of(bytes: u64) -> Self {
        if bytes <= PAGE_SIZE {
            Self::K4
        } else if bytes < SUPERPAGE_SIZE {
            Self::K64
        } else {
            Self::M2
        }
    }
}

/// Migration counters, `[granularity class][0 = promote, 1 = demote]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Migrations {
    pub bytes: [[u64; 2]; 3],
    pub ops: [[u64; 2]; 3],
    pub shootdowns: u64,
    pub splits: u64,
    pub collapses: u64,
    /// 4 KiB pages whose move reversed one made less than the ping-pong window earlier.
    pub pingpong_pages: u64,
    /// Promotions refused because the fast tier was full.
    pub failed_ops: u64,
    /// Cost of the migrations, ns.
    pub cost_ns: f64,
}

/// Ping-pong window: a reversal within this many ms counts.
pub const PINGPONG_WINDOW_MS: u32 = 2000;

/// Placement of every mapped page.
#[derive(Clone, Debug)]
pub struct TierModel {
    pub preset: Preset,
    index: SpMap<u32>,
    sps: Vec<Superpage>,
    /// Superpage numbers in ascending order.
    sorted: Vec<u64>,
    sorted_dirty: bool,
    fast_cap_pages: u64,
    fast_used_pages: u64,
    pub migrations: Migrations,
}

impl TierModel {
    #[must_use]
    pub fn new(preset: Preset, fast_capacity_bytes: u64) -> Self {
        Self {
            preset,
            index: SpMap::default(),
            sps: Vec::new(),
            sorted: Vec::new(),
            sorted_dirty: false,
            fast_cap_pages: fast_capacity_bytes / PAGE_SIZE,
            fast_used_pages: 0,
            migrations: Migrations::default(),
        }
    }

    #[must_use]
    pub const fn fast_capacity_bytes(&self) -> u64 {
        self.fast_cap_pages * PAGE_SIZE
    }

    #[must_use]
    pub const fn fast_used_bytes(&self) -> u64 {
        self.fast_used_pages * PAGE_SIZE
    }

    #[must_use]
    pub const fn fast_free_bytes(&self) -> u64 {
        (self.fast_cap_pages - self.fast_used_pages) * PAGE_SIZE
    }

    /// First-touch rule: fast while a whole superpage still fits.
    #[must_use]
    pub const fn first_touch(&self) -> Tier {
        if self.fast_used_pages + SUBPAGES as u64 <= self.fast_cap_pages {
            Tier::Fast
        } else {
            Tier::Slow
        }
    }

    /// Index of a mapped superpage.
    #[must_use]
    pub fn find(&self, sp: u64) -> Option<usize> {
        self.index.get(&sp).map(|&i| i as usize)
    }

    /// Maps superpage `sp` as one huge page in `tier` (falls back to slow when fast is full).
    pub fn map(&mut self, sp: u64, tier: Tier) -> usize {
        let tier = if tier == Tier::Fast && self.first_touch() == Tier::Slow {
            Tier::Slow
        } else {
            tier
        };
        let fast = if tier == Tier::Fast {
            self.fast_used_pages += SUBPAGES as u64;
            [u64::MAX; 8]
        } else {
            [0; 8]
        };
        let idx = self.sps.len();
        self.sps.push(Superpage {
            sp,
            fast,
            accessed: [0; 8],
            huge: true,
            moved: None,
        });
        self.index.insert(sp, idx as u32);
        self.sorted.push(sp);
        self.sorted_dirty = true;
        idx
    }

    #[must_use]
    pub fn superpage(&self, idx: usize) -> &Superpage {
        &self.sps[idx]
    }

    pub fn superpage_mut(&mut self, idx: usize) -> &mut Superpage {
        &mut self.sps[idx]
    }

    #[must_use]
    pub fn superpages(&self) -> &[Superpage] {
        &self.sps
    }

    pub fn superpages_mut(&mut self) -> &mut [Superpage] {
        &mut self.sps
    }

    /// Records an access at `page` (0..512) of superpage `idx`; returns (fast, huge).
    #[inline]
    pub fn touch(&mut self, idx: usize, page: usize) -> (bool, bool) {
        let s = &mut self.sps[idx];
        s.accessed[page / 64] |= 1 << (page % 64);
        (s.fast[page / 64] & (1 << (page % 64)) != 0, s.huge)
    }

    /// Superpage numbers in ascending order.
    pub fn sorted(&mut self) -> &[u64] {
        if self.sorted_dirty {
            self.sorted.sort_unstable();
            self.sorted_dirty = false;
        }
        &self.sorted
    }

    #[must_use]
    pub fn huge_pages(&self) -> u64 {
        self.sps.iter().filter(|s| s.huge).count() as u64
    }

    #[must_use]
    pub fn mapped_superpages(&self) -> u64 {
        self.sps.len() as u64
    }

    /// Splits a huge page into 4 KiB mappings without moving it (one shootdown).
    pub fn split(&mut self, idx: usize) {
        let s = &mut self.sps[idx];
        if s.huge {
            s.huge = false;
            self.migrations.splits += 1;
            self.migrations.shootdowns += 1;
            self.migrations.cost_ns += self.preset.shootdown_ns;
        }
    }

    /// Moves page `page` (4 KiB) of superpage `sp` to `to` on its own, as [`Self::migrate`]
    /// does; returns the bytes moved.
    pub fn migrate_page(&mut self, sp: u64, page: usize, to: Tier, now_ms: u32) -> u64 {
        let start = sp * SUPERPAGE_SIZE + page as u64 * PAGE_SIZE;
        self.migrate(start, PAGE_SIZE, to, PAGE_SIZE, now_ms)
    }

    /// Moves the pages of `[start, start + len)` that are not in `to`, one operation per
    /// `granularity` chunk. Promotions that do not fit are refused whole (counted). Returns the
    /// bytes moved.
    pub fn migrate(
        &mut self,
        start: u64,
        len: u64,
        to: Tier,
        granularity: u64,
        now_ms: u32,
    ) -> u64 {
        let g = granularity.clamp(PAGE_SIZE, SUPERPAGE_SIZE);
        let class = GranClass::of(g) as usize;
        let dir = usize::from(to == Tier::Slow);
        let mut moved = 0;
        let mut at = start & !(PAGE_SIZE - 1);
        let end = start + len;
        while at < end {
            let chunk_end = ((at / g) + 1) * g;
            let chunk_end = chunk_end
                .min(end)
                .min((at / SUPERPAGE_SIZE + 1) * SUPERPAGE_SIZE);
            let Some(idx) = self.find(at / SUPERPAGE_SIZE) else {
                at = chunk_end;
                continue;
            };
            let first = ((at % SUPERPAGE_SIZE) / PAGE_SIZE) as usize;
            let last = first + ((chunk_end - at).div_ceil(PAGE_SIZE)) as usize;
            let s = &self.sps[idx];
            let need: Vec<usize> = (first..last)
                .filter(|&p| s.is_fast(p) != (to == Tier::Fast))
                .collect();
            at = chunk_end;
            if need.is_empty() {
                continue;
            }
            let n = need.len() as u64;
            if to == Tier::Fast && self.fast_used_pages + n > self.fast_cap_pages {
                self.migrations.failed_ops += 1;
                continue;
            }
            let m = &mut self.migrations;
            let s = &mut self.sps[idx];
            if g < SUPERPAGE_SIZE && s.huge {
                s.huge = false;
                m.splits += 1;
                m.shootdowns += 1;
                m.cost_ns += self.preset.shootdown_ns;
            } else if g >= SUPERPAGE_SIZE && !s.huge {
                s.huge = true;
                m.collapses += 1;
            }
            m.pingpong_pages += s.move_pages(&need, to, now_ms);
            if to == Tier::Fast {
                self.fast_used_pages += n;
            } else {
                self.fast_used_pages -= n;
            }
            let bytes = n * PAGE_SIZE;
            m.bytes[class][dir] += bytes;
            m.ops[class][dir] += 1;
            m.shootdowns += 1;
            m.cost_ns += self.preset.shootdown_ns + self.preset.copy_ns(bytes);
            moved += bytes;
        }
        moved
    }

    /// Makes exactly the pages of `fast` (a bit per page) of superpage `idx` fast, for
    /// nothing: no migration is counted or charged. Only the bound places this way (see
    /// `bound`); the caller keeps the fast tier within its capacity.
    pub fn place_free(&mut self, idx: usize, fast: [u64; 8]) {
        let s = &mut self.sps[idx];
        let before = u64::from(s.fast_pages());
        s.fast = fast;
        self.fast_used_pages = self.fast_used_pages - before + u64::from(s.fast_pages());
        debug_assert!(self.fast_used_pages <= self.fast_cap_pages);
    }

    /// Capacity as the engine's planner sees it.
    #[must_use]
    pub fn capacity(&self) -> CapacityView {
        let (fast, slow) = self.preset.tier_costs();
        CapacityView {
            fast_total_bytes: self.fast_capacity_bytes(),
            fast_free_bytes: self.fast_free_bytes(),
            slow_total_bytes: 1 << 50,
            slow_free_bytes: 1 << 50,
            fast,
            slow,
            share: None,
        }
    }
}

impl PlacementView for TierModel {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        let idx = self.find(page / SUPERPAGE_SIZE)?;
        let p = ((page % SUPERPAGE_SIZE) / PAGE_SIZE) as usize;
        Some(if self.sps[idx].is_fast(p) {
            Tier::Fast
        } else {
            Tier::Slow
        })
    }

    fn residency(&self, superpage: u64) -> Residency {
        match self.find(superpage / SUPERPAGE_SIZE) {
            Some(idx) => {
                let fast = self.sps[idx].fast;
                let mut slow = [0; 8];
                for (s, f) in slow.iter_mut().zip(fast) {
                    *s = !f;
                }
                Residency { fast, slow }
            }
            None => Residency::default(),
        }
    }

    fn huge_mapped(&self, superpage: u64) -> Option<bool> {
        self.find(superpage / SUPERPAGE_SIZE)
            .map(|idx| self.sps[idx].huge)
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        let mut fast: Vec<(u64, usize)> = self
            .sps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.fast != [0; 8])
            .map(|(idx, s)| (s.sp, idx))
            .collect();
        fast.sort_unstable();
        for (sp, idx) in fast {
            let base = sp * SUPERPAGE_SIZE;
            page_runs(&self.sps[idx].fast, |first, n| {
                visit(base + first as u64 * PAGE_SIZE, n as u64 * PAGE_SIZE);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(fast_sps: u64) -> TierModel {
        TierModel::new(PresetName::Pmem.preset(), fast_sps * SUPERPAGE_SIZE)
    }

    #[test]
    fn first_touch_fills_fast_then_slow() {
        let mut m = model(1);
        let a = m.map(10, Tier::Fast);
        let b = m.map(11, Tier::Fast);
        assert!(m.superpage(a).is_fast(0));
        assert!(!m.superpage(b).is_fast(0));
        assert_eq!(m.tier_of(11 * SUPERPAGE_SIZE + 4096), Some(Tier::Slow));
        assert_eq!(m.tier_of(12 * SUPERPAGE_SIZE), None);
        assert_eq!(m.fast_free_bytes(), 0);
    }

    #[test]
    fn migration_costs_splits_and_pingpong() {
        let mut m = model(2);
        m.map(0, Tier::Slow);
        // 4 KiB promote: one op, a split, two shootdowns.
        assert_eq!(m.migrate(8192, 4096, Tier::Fast, 4096, 0), 4096);
        assert!(!m.superpage(0).huge);
        assert_eq!(m.huge_mapped(0), Some(false));
        assert_eq!(m.migrations.shootdowns, 2);
        assert_eq!(m.migrations.ops[0][0], 1);
        // Already there: nothing.
        assert_eq!(m.migrate(8192, 4096, Tier::Fast, 4096, 1), 0);
        // Whole-superpage promote moves the remaining 511 pages, one op, re-forms the THP.
        assert_eq!(
            m.migrate(0, SUPERPAGE_SIZE, Tier::Fast, SUPERPAGE_SIZE, 2),
            511 * 4096
        );
        assert!(m.superpage(0).huge);
        assert_eq!(m.huge_mapped(0), Some(true));
        assert_eq!(m.huge_mapped(SUPERPAGE_SIZE), None);
        assert_eq!(m.migrations.ops[2][0], 1);
        // Demote back within the window: 512 ping-pong pages.
        m.migrate(0, SUPERPAGE_SIZE, Tier::Slow, SUPERPAGE_SIZE, 100);
        assert_eq!(m.migrations.pingpong_pages, 512);
        assert_eq!(m.fast_used_bytes(), 0);
        // 64 KiB chunks of a 128 KiB range: two ops.
        m.migrate(0, 128 << 10, Tier::Fast, 64 << 10, 10_000);
        assert_eq!(m.migrations.ops[1][0], 2);
        assert_eq!(m.migrations.bytes[1][0], 128 << 10);
        let mut ranges = Vec::new();
        m.for_each_fast_range(&mut |s, l| ranges.push((s, l)));
        assert_eq!(ranges, vec![(0, 128 << 10)]);
        assert!(m.migrations.cost_ns > 4.0 * 13_200.0);
    }

    #[test]
    fn promotions_respect_capacity() {
        let mut m = model(1);
        m.map(0, Tier::Fast);
        m.map(1, Tier::Slow);
        assert_eq!(m.migrate(SUPERPAGE_SIZE, 4096, Tier::Fast, 4096, 0), 0);
        assert_eq!(m.migrations.failed_ops, 1);
        assert_eq!(m.migrate(0, 4096, Tier::Slow, 4096, 0), 4096);
        assert_eq!(m.migrate(SUPERPAGE_SIZE, 4096, Tier::Fast, 4096, 0), 4096);
        assert_eq!(m.capacity().fast_free_bytes, 0);
    }
}
