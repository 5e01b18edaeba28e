//! Stage 1 of Rainbow's two-stage counting: one record per touched 2 MiB superpage.
//!
//! A record holds read and write sample counts for the interval being counted and their cooled
//! history (`heat = heat >> shift + interval` at each close), Memos' write history, and the
//! bookkeeping the epoch controller needs. Counts are samples, whatever each stands for (the
//! engine's per-kind units convert them into accesses where traffic matters).
//!
//! Bounds: every count is a saturating `u32`. An interval's count is at most the samples of one
//! interval (at 1 M samples/s and the default 50 ms interval, 5·10^4); the cooled heat at most
//! twice that (for a cooling shift of 1); the epoch counts at most the samples of one epoch
//! (2·10^7 at 1 M samples/s and the longest default epoch, 20 s). None comes near 2^32: nothing
//! saturates at 1 M samples/s, however the samples are spread over the target; past 2^32 a count
//! stays at its maximum until cooled.
//!
//! Records live in a `Vec`; an open-addressing table of `u32` indices (Fibonacci hashing, linear
//! probing) finds them, which costs 4 bytes per slot instead of a `HashMap`'s 16. Memory is
//! therefore proportional to touched superpages.

use super::domain::{self, Domain};

/// Stage-2 slot of a record that has none.
pub(crate) const NO_SLOT: u32 = u32::MAX;
const EMPTY: u32 = u32::MAX;
const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

/// The record has been touched before (a later touch is a reuse).
pub(crate) const SEEN: u8 = 1;
/// Touched since the last plan.
pub(crate) const TOUCHED_EPOCH: u8 = 2;
/// Was in the hot set at the last plan.
pub(crate) const HOT_PREV: u8 = 4;
/// The bits of `flags` above this one count the consecutive intervals touched up to
/// `last_touch`, saturating at [`RUN_MAX`].
const RUN_SHIFT: u32 = 3;
const RUN_MAX: u8 = 0xFF >> RUN_SHIFT;
const FLAG_BITS: u8 = (1 << RUN_SHIFT) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SuperpageRecord {
    /// Superpage number: address >> 21.
    pub sp: u64,
    pub heat_r: u32,
    pub heat_w: u32,
    pub ivl_r: u32,
    pub ivl_w: u32,
    /// Uncooled counts since the last plan: what the payback values last plan's moves by (the
    /// cooled heat forgets a sweep's start before the epoch ends).
    pub epoch_r: u32,
    pub epoch_w: u32,
    pub slot: u32,
    /// Interval index (mod 2^16) of the last interval with a touch.
    pub last_touch: u16,
    /// Memos' domain history, latest interval in bit 0 (1 = write-dominant).
    pub write_history: u8,
    pub flags: u8,
}

impl SuperpageRecord {
    const fn new(sp: u64) -> Self {
        Self {
            sp,
            heat_r: 0,
            heat_w: 0,
            ivl_r: 0,
            ivl_w: 0,
            epoch_r: 0,
            epoch_w: 0,
            slot: NO_SLOT,
            last_touch: 0,
            write_history: 0,
            flags: 0,
        }
    }

    /// Write-weighted cooled hotness, the stage-1 ranking key, in read samples: a write sample
    /// counts `write_factor` read samples (it stands for that many times more accesses).
    pub(crate) fn weighted(&self, write_weight: u32, write_factor: f64) -> u32 {
        read_samples(
            f64::from(self.heat_r)
                + f64::from(write_weight) * write_factor * f64::from(self.heat_w),
        )
    }

    /// Cooled accesses, in read samples.
    pub(crate) fn accesses(&self, write_factor: f64) -> u32 {
        read_samples(f64::from(self.heat_r) + write_factor * f64::from(self.heat_w))
    }

    /// Accesses sampled in the interval still open, in read samples (for a target DAMON
    /// watches, its credits count as samples).
    pub(crate) fn open_accesses(&self, write_factor: f64) -> u32 {
        read_samples(f64::from(self.ivl_r) + write_factor * f64::from(self.ivl_w))
    }

    /// Nothing counted, nothing to cool, no stage-2 slot and nothing the epoch's end resets:
    /// closing an interval or ending an epoch leaves the record as it is.
    pub(crate) fn at_rest(&self) -> bool {
        (self.heat_r | self.heat_w | self.ivl_r | self.ivl_w | self.epoch_r | self.epoch_w) == 0
            && self.write_history == 0
            && self.flags & (HOT_PREV | TOUCHED_EPOCH) == 0
            && self.slot == NO_SLOT
    }

    /// Untouched for more than `retain` intervals as of the interval stamped `closed`.
    pub(crate) fn untouched_beyond(&self, closed: u16, retain: u32) -> bool {
        u32::from(closed.wrapping_sub(self.last_touch)) > retain
    }

    /// Cooled to zero and untouched beyond `retain` intervals: forgotten at the next compaction
    /// once it holds no stage-2 slot.
    pub(crate) fn cold_beyond(&self, closed: u16, retain: u32) -> bool {
        self.heat_r == 0 && self.heat_w == 0 && self.untouched_beyond(closed, retain)
    }

    /// Consecutive intervals in which it was touched, ending with the interval stamped `closed`
    /// (0 when untouched in that one), at most [`RUN_MAX`].
    pub(crate) fn touched_run(&self, closed: u16) -> u8 {
        if self.flags & SEEN != 0 && self.last_touch == closed {
            self.flags >> RUN_SHIFT
        } else {
            0
        }
    }

    /// Touched at least once (a later touch is a reuse).
    pub(crate) fn seen(&self) -> bool {
        self.flags & SEEN != 0
    }

    /// Ends a migration epoch: whether the record is in the hot set (its heat at `cutoff` or
    /// above) becomes last epoch's hot set, and what the epoch counted starts again.
    pub(crate) fn end_epoch(&mut self, cutoff: u32, write_factor: f64) {
        let hot = self.accesses(write_factor) >= cutoff;
        self.flags &= !(HOT_PREV | TOUCHED_EPOCH);
        if hot {
            self.flags |= HOT_PREV;
        }
        self.epoch_r = 0;
        self.epoch_w = 0;
    }

    /// Closes `steps` intervals (the first with this record's counts, the rest empty), cooling
    /// the heat by `cooling` bits first (the shift times the cooling periods that ended).
    /// Returns the closing interval's domain and, for a touched record seen before, the reuse gap.
    pub(crate) fn close(
        &mut self,
        cooling: u32,
        steps: u32,
        interval: u16,
        (rw_ratio, write_factor): (u32, f64),
    ) -> (Domain, Option<u32>) {
        let domain = domain::classify_samples(self.ivl_r, self.ivl_w, rw_ratio, write_factor);
        let mut gap = None;
        if domain != Domain::Cold {
            if self.flags & SEEN != 0 {
                gap = Some(u32::from(interval.wrapping_sub(self.last_touch)));
            }
            let run = if gap == Some(1) {
                (self.flags >> RUN_SHIFT).saturating_add(1).min(RUN_MAX)
            } else {
                1
            };
            self.flags = (self.flags & FLAG_BITS) | (run << RUN_SHIFT);
            self.last_touch = interval;
            self.flags |= SEEN | TOUCHED_EPOCH;
        }
        let history =
            u32::from(domain::push_history(self.write_history, domain)) << (steps - 1).min(8);
        self.write_history = (history & 0xFF) as u8;
        self.heat_r = cool(self.heat_r, cooling).saturating_add(self.ivl_r);
        self.heat_w = cool(self.heat_w, cooling).saturating_add(self.ivl_w);
        self.epoch_r = self.epoch_r.saturating_add(self.ivl_r);
        self.epoch_w = self.epoch_w.saturating_add(self.ivl_w);
        self.ivl_r = 0;
        self.ivl_w = 0;
        (domain, gap)
    }
}

/// Cooling by this many bits or more forgets the count (`cooling_shift = 16`: Rainbow's
/// per-interval counts), as it did when counts had 16 bits.
pub(crate) const RESET_SHIFT: u32 = 16;

/// `v >> shift`, zero from [`RESET_SHIFT`] bits on.
pub(crate) fn cool(v: u32, shift: u32) -> u32 {
    if shift >= RESET_SHIFT { 0 } else { v >> shift }
}

/// A count in read samples, rounded and clamped to `u32`. Half up by adding 0.5 and letting
/// the cast truncate and saturate (NaN and negatives to 0): `f64::round` is a libm call, and
/// this runs for every record at every interval close and plan (it was 11 % of `plan()`).
pub(crate) fn read_samples(x: f64) -> u32 {
    (x + 0.5) as u32
}

/// All stage-1 records of one target.
#[derive(Clone, Debug)]
pub(crate) struct Stage1 {
    records: Vec<SuperpageRecord>,
    slots: Vec<u32>,
    shift: u32,
}

impl Default for Stage1 {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            slots: vec![EMPTY; 16],
            shift: 64 - 4,
        }
    }
}

impl Stage1 {
    fn home(&self, sp: u64) -> usize {
        (sp.wrapping_mul(FIB) >> self.shift) as usize
    }

    pub(crate) fn find(&self, sp: u64) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(sp);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if self.records[s as usize].sp == sp {
                return Some(s as usize);
            }
            i = (i + 1) & mask;
        }
    }

    /// Index of the record of `sp`, created if absent.
    pub(crate) fn find_or_insert(&mut self, sp: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(sp);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                break;
            }
            if self.records[s as usize].sp == sp {
                return s as usize;
            }
            i = (i + 1) & mask;
        }
        let idx = self.records.len();
        self.records.push(SuperpageRecord::new(sp));
        // Keep the load factor at or below 3/4 so probe chains stay short.
        if (idx + 1) * 4 > self.slots.len() * 3 {
            self.rebuild(self.slots.len() * 2);
        } else {
            self.slots[i] = idx as u32;
        }
        idx
    }

    fn rebuild(&mut self, nslots: usize) {
        self.slots.clear();
        self.slots.resize(nslots, EMPTY);
        self.shift = 64 - nslots.trailing_zeros();
        let mask = nslots - 1;
        for (idx, r) in self.records.iter().enumerate() {
            let mut i = (r.sp.wrapping_mul(FIB) >> self.shift) as usize;
            while self.slots[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = idx as u32;
        }
    }

    /// Drops the records for which `keep` is false and re-indexes.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&SuperpageRecord) -> bool) {
        self.records.retain(keep);
        self.records.shrink_to(self.records.len() * 5 / 4);
        let nslots = (self.records.len() * 4 / 3 + 1).next_power_of_two().max(16);
        self.slots = Vec::new();
        self.rebuild(nslots);
    }

    pub(crate) fn records(&self) -> &[SuperpageRecord] {
        &self.records
    }

    pub(crate) fn records_mut(&mut self) -> &mut [SuperpageRecord] {
        &mut self.records
    }

    pub(crate) fn get_mut(&mut self, idx: usize) -> &mut SuperpageRecord {
        &mut self.records[idx]
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.records.capacity() * size_of::<SuperpageRecord>()
            + self.slots.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sample_counts_round_like_f64_round_and_saturate() {
        for x in [
            0.0,
            0.49,
            0.5,
            1.5,
            2.5,
            2.499_999,
            1e6 + 0.5,
            4_294_967_294.6,
        ] {
            assert_eq!(read_samples(x), x.round() as u32, "{x}");
        }
        assert_eq!(read_samples(-3.0), 0);
        assert_eq!(read_samples(f64::NAN), 0);
        assert_eq!(read_samples(1e20), u32::MAX);
    }

    #[test]
    fn index_finds_every_record_across_growth_and_retain() {
        let mut s = Stage1::default();
        let keys: Vec<u64> = (0..10_000u64)
            .map(|k| k.wrapping_mul(0x1234_5678_9ABC) >> 7)
            .collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(s.find_or_insert(*k), i);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(s.find(*k), Some(i));
            assert_eq!(s.find_or_insert(*k), i);
        }
        assert_eq!(s.find(u64::MAX), None);
        s.retain(|r| r.sp % 2 == 0);
        for k in &keys {
            assert_eq!(s.find(*k).is_some(), k % 2 == 0);
        }
        assert!(s.len() < keys.len());
        // 40-byte records and 4-byte slots: the memory figures of docs/benchmarks.md.
        assert_eq!(size_of::<SuperpageRecord>(), 40);
    }

    #[test]
    fn counters_saturate_and_cool() {
        let one = (2, 1.0);
        let mut r = SuperpageRecord::new(1);
        r.ivl_r = 65_535;
        r.ivl_w = 3;
        r.close(1, 1, 1, one);
        assert_eq!((r.heat_r, r.heat_w), (65_535, 3));
        r.ivl_r = 1;
        r.close(1, 1, 2, one);
        // 65535 >> 1 = 32767, + 1.
        assert_eq!((r.heat_r, r.heat_w), (32_768, 1));
        r.ivl_r = 65_535;
        r.close(1, 1, 3, one);
        assert_eq!(r.heat_r, 16_384 + 65_535, "no 16-bit ceiling any more");
        // Eight missed cooling periods at shift 1 cool by 8 bits; 16 or more clear.
        r.close(8, 8, 11, one);
        assert_eq!(r.heat_r, 81_919 >> 8);
        r.close(16, 16, 27, one);
        assert_eq!((r.heat_r, r.heat_w), (0, 0));
        // Saturating, never wrapping.
        r.ivl_r = u32::MAX;
        r.close(1, 1, 28, one);
        r.ivl_r = u32::MAX;
        r.close(1, 1, 29, one);
        assert_eq!(r.heat_r, u32::MAX);
        assert_eq!(cool(7, 0), 7);
        assert_eq!(cool(u32::MAX, 16), 0);
        assert_eq!(cool(u32::MAX, u32::MAX), 0);
    }

    #[test]
    fn a_write_sample_weighs_as_many_read_samples_as_its_accesses() {
        let mut r = SuperpageRecord::new(1);
        r.heat_r = 10;
        r.heat_w = 2;
        // Stores sampled 25 times more sparsely than loads: each stands for 25 loads' worth.
        assert_eq!(r.accesses(25.0), 60);
        assert_eq!(r.weighted(2, 25.0), 110);
        assert_eq!(r.accesses(1.0), 12);
        // 10 reads against 2 writes of 25 each: write-dominant for Memos.
        r.ivl_r = 10;
        r.ivl_w = 2;
        assert_eq!(r.close(1, 1, 1, (2, 25.0)).0, Domain::WriteDominant);
        r.ivl_r = 10;
        r.ivl_w = 2;
        assert_eq!(r.close(1, 1, 2, (2, 1.0)).0, Domain::ReadDominant);
    }

    #[test]
    fn close_tracks_domain_history_and_reuse() {
        let mut r = SuperpageRecord::new(1);
        r.ivl_w = 1;
        assert_eq!(r.close(1, 1, 5, (2, 1.0)), (Domain::WriteDominant, None));
        assert_eq!(r.write_history, 1);
        r.ivl_r = 3;
        r.ivl_w = 1;
        assert_eq!(r.close(1, 1, 9, (2, 1.0)), (Domain::ReadDominant, Some(4)));
        assert_eq!(r.write_history, 0b10);
        assert_eq!(r.close(1, 3, 10, (2, 1.0)), (Domain::Cold, None));
        assert_eq!(r.write_history, 0b1_0000);
        // Interval indices wrap at 2^16.
        r.ivl_r = 1;
        assert_eq!(r.close(1, 1, 2, (2, 1.0)).1, Some(65_529));
        assert_eq!(r.weighted(2, 1.0), r.heat_r + 2 * r.heat_w);
    }

    #[test]
    fn the_touched_run_counts_consecutive_intervals_up_to_the_last_closed_one() {
        let one = (2, 1.0);
        let mut r = SuperpageRecord::new(1);
        assert_eq!(r.touched_run(0), 0, "never touched");
        for interval in 10..13 {
            r.ivl_r = 1;
            r.close(1, 1, interval, one);
            assert_eq!(r.touched_run(interval), (interval - 9) as u8);
        }
        // The other flags keep their bits.
        assert_eq!(r.flags & FLAG_BITS, SEEN | TOUCHED_EPOCH);
        // An interval without samples ends the run: the record is not closed again while it
        // rests, so the run reads 0 from the interval stamp alone...
        r.close(1, 1, 13, one);
        assert_eq!(r.touched_run(13), 0);
        // ...and a touch after a gap starts a new run.
        r.ivl_w = 1;
        r.close(1, 1, 14, one);
        assert_eq!(r.touched_run(14), 1);
        // Several intervals closed at once, the first with the samples: untouched after it.
        r.ivl_r = 1;
        r.close(1, 3, 15, one);
        assert_eq!((r.touched_run(15), r.touched_run(17)), (2, 0));
        // It saturates, and the stamps wrap at 2^16.
        let mut r = SuperpageRecord::new(2);
        for i in 0..40u32 {
            let interval = (65_520 + i) as u16;
            r.ivl_r = 1;
            r.close(1, 1, interval, one);
            assert_eq!(
                r.touched_run(interval),
                (i + 1).min(u32::from(RUN_MAX)) as u8
            );
        }
        assert_eq!(r.flags & FLAG_BITS, SEEN | TOUCHED_EPOCH);
    }
}
