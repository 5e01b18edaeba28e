//! Stage 2 of Rainbow's two-stage counting: per-4 KiB counters for the top-N superpages only.
//!
//! Rainbow keeps one 2-byte counter per subpage (15-bit value + overflow flag; overflow means
//! "definitely hot"). We keep two, reads and writes, because Eq. (1) prices them differently and
//! Memos classifies by their ratio: 2 KiB per monitored superpage instead of 1 KiB. Counters
//! accumulate over a migration epoch (the plan reads them as the epoch's C_r and C_w) and are
//! cooled when the plan has used them.

use crate::policy::SUBPAGES;

/// Value bits of a stage-2 counter.
pub const VALUE_MASK: u16 = 0x7FFF;
/// Set once a counter has overflowed its 15 bits.
pub const OVERFLOW: u16 = 0x8000;
const FREE: u64 = u64::MAX;

/// Adds `w` to a 15-bit counter, latching the overflow flag instead of wrapping.
pub fn bump(c: &mut u16, w: u32) {
    if *c & OVERFLOW != 0 {
        return;
    }
    let v = u32::from(*c) + w;
    *c = if v > u32::from(VALUE_MASK) {
        OVERFLOW | VALUE_MASK
    } else {
        v as u16
    };
}

/// Count a counter stands for; an overflowed one reads as just above the 15-bit maximum.
pub fn value(c: u16) -> u32 {
    if c & OVERFLOW != 0 {
        u32::from(VALUE_MASK) + 1
    } else {
        u32::from(c)
    }
}

/// Cools a counter by `shift` bits; overflow is cleared (the count it stood for is cooled too).
pub fn cool(c: u16, shift: u32) -> u16 {
    (c & VALUE_MASK).checked_shr(shift).unwrap_or(0)
}

/// The stage-2 table: slot-indexed counters of the monitored superpages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stage2 {
    sps: Vec<u64>,
    /// Per slot: 512 read counters then 512 write counters.
    counters: Vec<u16>,
    free: Vec<u32>,
}

impl Stage2 {
    /// A zeroed slot for superpage `sp`.
    pub(crate) fn allocate(&mut self, sp: u64) -> u32 {
        if let Some(slot) = self.free.pop() {
            self.sps[slot as usize] = sp;
            self.slot_mut(slot).fill(0);
            slot
        } else {
            self.sps.push(sp);
            self.counters.resize(self.counters.len() + 2 * SUBPAGES, 0);
            (self.sps.len() - 1) as u32
        }
    }

    pub(crate) fn release(&mut self, slot: u32) {
        self.sps[slot as usize] = FREE;
        self.free.push(slot);
    }

    fn slot_mut(&mut self, slot: u32) -> &mut [u16] {
        let base = slot as usize * 2 * SUBPAGES;
        &mut self.counters[base..base + 2 * SUBPAGES]
    }

    pub(crate) fn add(&mut self, slot: u32, page: usize, write: bool, w: u32) {
        let i = slot as usize * 2 * SUBPAGES + usize::from(write) * SUBPAGES + page;
        bump(&mut self.counters[i], w);
    }

    /// (reads, writes) counters of a slot.
    pub(crate) fn counters(&self, slot: u32) -> (&[u16], &[u16]) {
        let base = slot as usize * 2 * SUBPAGES;
        self.counters[base..base + 2 * SUBPAGES].split_at(SUBPAGES)
    }

    /// Live (slot, superpage number) pairs in ascending superpage order.
    pub(crate) fn live_sorted(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .sps
            .iter()
            .enumerate()
            .filter(|(_, sp)| **sp != FREE)
            .map(|(i, sp)| (i as u32, *sp))
            .collect();
        v.sort_unstable_by_key(|(_, sp)| *sp);
        v
    }

    pub(crate) fn live(&self) -> usize {
        self.sps.len() - self.free.len()
    }

    pub(crate) fn cool_all(&mut self, shift: u32) {
        for c in &mut self.counters {
            *c = cool(*c, shift);
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.sps.capacity() * size_of::<u64>()
            + self.counters.capacity() * size_of::<u16>()
            + self.free.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifteen_bits_then_overflow_latches() {
        let mut c = 0u16;
        bump(&mut c, 0x7FFE);
        assert_eq!(value(c), 0x7FFE);
        bump(&mut c, 1);
        assert_eq!((c, value(c)), (0x7FFF, 0x7FFF));
        bump(&mut c, 1);
        assert_eq!(c, OVERFLOW | VALUE_MASK);
        assert_eq!(value(c), 0x8000);
        bump(&mut c, 1_000_000);
        assert_eq!(c, OVERFLOW | VALUE_MASK);
        let mut big = 0u16;
        bump(&mut big, u32::MAX);
        assert_eq!(value(big), 0x8000);
    }

    #[test]
    fn cooling_clears_overflow() {
        assert_eq!(cool(OVERFLOW | VALUE_MASK, 1), 0x3FFF);
        assert_eq!(cool(3, 1), 1);
        assert_eq!(cool(OVERFLOW | VALUE_MASK, 15), 0);
        assert_eq!(cool(VALUE_MASK, 40), 0);
    }

    #[test]
    fn slots_are_reused_zeroed() {
        let mut t = Stage2::default();
        let a = t.allocate(10);
        let b = t.allocate(5);
        t.add(a, 3, false, 2);
        t.add(a, 3, true, 1);
        assert_eq!((t.counters(a).0[3], t.counters(a).1[3]), (2, 1));
        assert_eq!(t.live_sorted(), vec![(b, 5), (a, 10)]);
        t.release(a);
        assert_eq!(t.live(), 1);
        let c = t.allocate(7);
        assert_eq!(c, a);
        assert!(
            t.counters(c)
                .0
                .iter()
                .chain(t.counters(c).1)
                .all(|v| *v == 0)
        );
        t.add(b, 0, false, 9);
        t.cool_all(1);
        assert_eq!(t.counters(b).0[0], 4);
    }
}
