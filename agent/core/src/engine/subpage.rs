//! Stage 2 of Rainbow's two-stage counting: per-4 KiB counters for the top-N superpages only.
//!
//! Rainbow keeps one 2-byte counter per subpage (15-bit value + overflow flag; overflow means
//! "definitely hot"). We keep two, reads and writes, because Eq. (1) prices them differently and
//! Memos classifies by their ratio, and each counts *samples* (what the sample stands for is the
//! engine's per-kind units, `HotnessView::units`). Counters accumulate over a
//! migration epoch (the plan reads them as the epoch's C_r and C_w) and are cooled when the plan
//! has used them.
//!
//! Bounds: a counter holds 2^31 − 1 samples, then latches its overflow flag (read as 2^31,
//! "definitely hot") until cooled. The most a page can gather is every sample of an epoch, plus
//! the cooled half of the epoch before: at 1 M samples/s and the longest default epoch (20 s)
//! that is 4·10^7, far below the bound. 4 KiB per monitored superpage.

use crate::units::{PageMask, SUBPAGES};

/// Value bits of a stage-2 counter.
pub const VALUE_MASK: u32 = 0x7FFF_FFFF;
/// Set once a counter has overflowed its 31 bits.
pub const OVERFLOW: u32 = 0x8000_0000;
const FREE: u64 = u64::MAX;

/// Adds `n` to a 31-bit counter, latching the overflow flag instead of wrapping.
pub fn bump(c: &mut u32, n: u32) {
    if *c & OVERFLOW != 0 {
        return;
    }
    let v = u64::from(*c) + u64::from(n);
    *c = if v > u64::from(VALUE_MASK) {
        OVERFLOW | VALUE_MASK
    } else {
        v as u32
    };
}

/// Count a counter stands for; an overflowed one reads as just above the 31-bit maximum.
pub fn value(c: u32) -> u32 {
    if c & OVERFLOW != 0 { VALUE_MASK + 1 } else { c }
}

/// A page's read and write counts together, in read samples (a write sample stands for
/// `write_factor` times the accesses of a read sample).
pub fn in_read_samples(reads: u32, writes: u32, write_factor: f64) -> u32 {
    // Most pages of a superpage have no count: skip the float work (the planner sums this
    // over all 512 pages of each stage-2 superpage, its hottest loop).
    if reads | writes == 0 {
        return 0;
    }
    super::superpage::read_samples(
        f64::from(value(reads)) + write_factor * f64::from(value(writes)),
    )
}

/// Cools a counter by `shift` bits; overflow is cleared (the count it stood for is cooled too).
/// From 16 bits on the count is forgotten, as stage 1's is.
pub fn cool(c: u32, shift: u32) -> u32 {
    if shift >= super::superpage::RESET_SHIFT {
        0
    } else {
        (c & VALUE_MASK) >> shift
    }
}

/// The stage-2 table: slot-indexed counters of the monitored superpages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stage2 {
    sps: Vec<u64>,
    /// Per slot: 512 read counters then 512 write counters.
    counters: Vec<u32>,
    /// Per slot, its pages with a read or a write count: most of a superpage's pages have
    /// none, and the planner's per-page sums visit only these.
    counted: Vec<PageMask>,
    free: Vec<u32>,
    /// Per slot, the samples of its current window (see [`SampleWindow`]).
    windows: Vec<SampleWindow>,
}

/// The samples of one superpage since its window opened: pages seen at least once, at least
/// twice, and the count. A window spans as many epochs as it takes to gather
/// [`WINDOW_SAMPLES`]: whether a superpage's heat sits on a few pages or on all of them is a
/// question of how many samples were seen, not of how long the epoch was, and a superpage
/// sampled ten times an epoch needs several epochs to tell.
#[derive(Clone, Copy, Debug, Default)]
struct SampleWindow {
    once: [u64; 8],
    twice: [u64; 8],
    /// Pages whose first sample in the window was a write.
    first_written: [u64; 8],
    samples: u32,
    /// Of `samples`, the writes.
    writes: u32,
    /// Coverage of the last window that closed full, read while the open one fills.
    closed_coverage: Option<f32>,
}

/// Samples that close a window. 64 samples tell 32 hot pages (the most Rainbow's sparse
/// superpages hold) from 512: coverage about 0.86 against 0.12.
pub const WINDOW_SAMPLES: u32 = 64;
/// Below this sample coverage the unseen pages are not extrapolated: nearly every sample hit a
/// new page, which is what scattered stray accesses look like as much as dense data.
const MIN_COVERAGE: f64 = 0.3;

impl SampleWindow {
    /// Good–Turing's coverage with each sample weighted by the accesses it stands for (a write
    /// sample `write_factor` reads): the share of the superpage's traffic on pages seen more
    /// than once. Where stores are sampled at a longer period than loads (PEBS splits its
    /// budget so), a written page is seen once where a read one of the same traffic is seen
    /// several times; counted as one sample each, those rare heavy singletons vanished in the
    /// count and written data read as resolved, its superpage as a few scattered hot pages.
    fn coverage(&self, write_factor: f64) -> f64 {
        let (mut read_once, mut written_once) = (0u32, 0u32);
        for ((o, t), w) in self.once.iter().zip(&self.twice).zip(&self.first_written) {
            let single = o & !t;
            read_once += (single & !w).count_ones();
            written_once += (single & w).count_ones();
        }
        let accesses =
            |reads: u32, writes: u32| f64::from(reads) + write_factor * f64::from(writes);
        let all = accesses(self.samples.saturating_sub(self.writes), self.writes);
        1.0 - accesses(read_once, written_once) / all.max(f64::MIN_POSITIVE)
    }
}

impl Stage2 {
    /// A zeroed slot for superpage `sp`.
    pub(crate) fn allocate(&mut self, sp: u64) -> u32 {
        if let Some(slot) = self.free.pop() {
            self.sps[slot as usize] = sp;
            self.slot_mut(slot).fill(0);
            self.counted[slot as usize] = [0; 8];
            self.windows[slot as usize] = SampleWindow::default();
            slot
        } else {
            self.sps.push(sp);
            self.counters.resize(self.counters.len() + 2 * SUBPAGES, 0);
            self.counted.push([0; 8]);
            self.windows.push(SampleWindow::default());
            (self.sps.len() - 1) as u32
        }
    }

    pub(crate) fn release(&mut self, slot: u32) {
        self.sps[slot as usize] = FREE;
        self.free.push(slot);
    }

    fn slot_mut(&mut self, slot: u32) -> &mut [u32] {
        let base = slot as usize * 2 * SUBPAGES;
        &mut self.counters[base..base + 2 * SUBPAGES]
    }

    pub(crate) fn add(&mut self, slot: u32, page: usize, write: bool, w: u32) {
        let i = slot as usize * 2 * SUBPAGES + usize::from(write) * SUBPAGES + page;
        bump(&mut self.counters[i], w);
        if self.counters[i] != 0 {
            self.counted[slot as usize][page / 64] |= 1 << (page % 64);
        }
    }

    /// Notes one sample (not a DAMON credit) on `page` for the coverage estimate, and whether
    /// it was a write (its weight there).
    pub(crate) fn note_sample(&mut self, slot: u32, page: usize, write: bool) {
        let e = &mut self.windows[slot as usize];
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        if e.once[word] & bit != 0 {
            e.twice[word] |= bit;
        } else {
            e.once[word] |= bit;
            e.first_written[word] |= u64::from(write) * bit;
        }
        e.samples = e.samples.saturating_add(1);
        e.writes = e.writes.saturating_add(u32::from(write));
    }

    /// How many pages a superpage's accessed pages stand for, given that sampling missed some:
    /// `1 / C` with its sample coverage (see [`coverage`](Self::coverage)). Dense data sampled
    /// thinly (every page seen about once) has low coverage and scales up; a few hot pages seen
    /// many times have coverage near 1. 1.0 until a window has filled, or when the coverage is
    /// too low to tell.
    pub(crate) fn density_scale(&self, slot: u32, write_factor: f64) -> f64 {
        match self.coverage(slot, write_factor) {
            Some(coverage) if coverage >= MIN_COVERAGE => 1.0 / coverage,
            _ => 1.0,
        }
    }

    /// Good–Turing's sample coverage `C = 1 − f1 / n` of a slot's window (`f1` pages seen
    /// exactly once, `n` samples, each sample weighted by the accesses it stands for, a write
    /// `write_factor` reads): the share of the superpage's coming accesses estimated to fall
    /// on pages already sampled. From the open window once it holds
    /// [`WINDOW_SAMPLES`], else from the last full one; `None` before any window filled.
    pub(crate) fn coverage(&self, slot: u32, write_factor: f64) -> Option<f64> {
        let w = &self.windows[slot as usize];
        if w.samples >= WINDOW_SAMPLES {
            Some(w.coverage(write_factor))
        } else {
            w.closed_coverage.map(f64::from)
        }
    }

    /// Whether any sample (not a DAMON credit) reached the slot since it was given out.
    pub(crate) fn sampled(&self, slot: u32) -> bool {
        let w = &self.windows[slot as usize];
        w.samples > 0 || w.closed_coverage.is_some()
    }

    /// (reads, writes) counters of a slot.
    pub(crate) fn counters(&self, slot: u32) -> (&[u32], &[u32]) {
        let base = slot as usize * 2 * SUBPAGES;
        self.counters[base..base + 2 * SUBPAGES].split_at(SUBPAGES)
    }

    /// The pages of a slot with a read or a write count.
    pub(crate) fn counted_pages(&self, slot: u32) -> PageMask {
        self.counted[slot as usize]
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

    /// Whether any page's read or write count has reached `samples`.
    pub(crate) fn any_count_reaches(&self, samples: u32) -> bool {
        self.counters.iter().any(|&c| value(c) >= samples)
    }

    pub(crate) fn cool_all(&mut self, shift: u32, write_factor: f64) {
        // Only the pages with a count have one to cool; cooling zeroes some of them.
        let slots = self.counters.chunks_exact_mut(2 * SUBPAGES);
        for (counters, counted) in slots.zip(&mut self.counted) {
            let (r, w) = counters.split_at_mut(SUBPAGES);
            for (word, bits) in counted.iter_mut().enumerate() {
                let mut left = *bits;
                while left != 0 {
                    let bit = left.trailing_zeros();
                    left &= left - 1;
                    let p = word * 64 + bit as usize;
                    r[p] = cool(r[p], shift);
                    w[p] = cool(w[p], shift);
                    // Branch-free: whether a count survives is a coin toss per page.
                    *bits &= !(u64::from(r[p] | w[p] == 0) << bit);
                }
            }
        }
        for w in &mut self.windows {
            if w.samples >= WINDOW_SAMPLES {
                *w = SampleWindow {
                    closed_coverage: Some(w.coverage(write_factor) as f32),
                    ..SampleWindow::default()
                };
            }
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.sps.capacity() * size_of::<u64>()
            + self.counters.capacity() * size_of::<u32>()
            + self.counted.capacity() * size_of::<PageMask>()
            + self.free.capacity() * size_of::<u32>()
            + self.windows.capacity() * size_of::<SampleWindow>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counted-page masks follow the counters through counting, cooling and slot reuse.
    #[test]
    fn counted_pages_are_the_pages_with_a_count() {
        let from_counters = |s: &Stage2, slot: u32| {
            let (r, w) = s.counters(slot);
            let mut mask = [0u64; 8];
            for p in 0..SUBPAGES {
                if r[p] | w[p] != 0 {
                    mask[p / 64] |= 1 << (p % 64);
                }
            }
            mask
        };
        let mut s = Stage2::default();
        let a = s.allocate(1);
        let b = s.allocate(2);
        for (page, write, n) in [(0, false, 1), (63, true, 3), (64, false, 4), (511, true, 1)] {
            s.add(a, page, write, n);
        }
        s.add(b, 7, false, 0);
        s.add(b, 300, false, 2);
        assert_eq!(s.counted_pages(a), from_counters(&s, a));
        assert_eq!(s.counted_pages(b), from_counters(&s, b));
        assert_eq!(s.counted_pages(b)[0], 0, "a zero add counts nothing");
        // Halving zeroes the counts of 1, keeps 3, 4 and 2.
        s.cool_all(1, 1.0);
        for slot in [a, b] {
            assert_eq!(s.counted_pages(slot), from_counters(&s, slot));
        }
        assert_eq!(s.counted_pages(a)[0], 1 << 63);
        let (r, w) = s.counters(a);
        assert_eq!(
            (r[0], w[63], r[64], w[511]),
            (0, 1, 2, 0),
            "each count halved"
        );
        assert_eq!(s.counters(b).0[300], 1);
        s.release(a);
        let c = s.allocate(3);
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(s.counted_pages(c), [0; 8]);
    }

    #[test]
    fn thin_samples_of_dense_data_scale_up_and_repeated_hot_pages_do_not() {
        let mut s = Stage2::default();
        let dense = s.allocate(1);
        // 128 samples, one on each of 128 pages of which 64 got a second one: f1 = 64 of
        // n = 192, coverage 2/3, so each observed page stands for 1.5.
        for p in 0..128 {
            s.note_sample(dense, p * 4, false);
        }
        for p in 0..64 {
            s.note_sample(dense, p * 4, false);
        }
        assert!((s.density_scale(dense, 1.0) - 1.5).abs() < 1e-9);
        // Eight hot pages seen 20 times each: coverage 1, no extrapolation.
        let hot = s.allocate(2);
        for _ in 0..20 {
            for p in 0..8 {
                s.note_sample(hot, p, false);
            }
        }
        assert_eq!(s.coverage(hot, 1.0), Some(1.0));
        assert_eq!(s.density_scale(hot, 1.0), 1.0);
        // Every sample on a new page (uniform stray accesses): coverage 0, not extrapolated.
        let stray = s.allocate(3);
        for p in 0..100 {
            s.note_sample(stray, p, false);
        }
        assert_eq!(s.coverage(stray, 1.0), Some(0.0));
        assert_eq!(s.density_scale(stray, 1.0), 1.0);
    }

    /// PEBS samples stores at a longer period than loads: a write sample stands for
    /// `write_factor` reads. A superpage whose reads come back to eight pages while its writes
    /// spread over every page looks resolved when each sample counts one, and not when each
    /// counts what it stands for.
    #[test]
    fn coverage_weighs_each_sample_by_the_accesses_it_stands_for() {
        let mut s = Stage2::default();
        let slot = s.allocate(1);
        for i in 0..56 {
            s.note_sample(slot, i % 8, false);
        }
        for p in 100..108 {
            s.note_sample(slot, p, true);
        }
        let even = s.coverage(slot, 1.0).unwrap();
        assert!((even - 56.0 / 64.0).abs() < 1e-9, "{even}");
        // Each write stands for 7 reads: 56 of the 112 accesses fell on pages seen once.
        let weighted = s.coverage(slot, 7.0).unwrap();
        assert!((weighted - 0.5).abs() < 1e-9, "{weighted}");
        // A write seen twice is no singleton, whatever it weighs.
        let again = s.allocate(2);
        for i in 0..64 {
            s.note_sample(again, i % 8, i % 2 == 0);
        }
        assert_eq!(s.coverage(again, 7.0), Some(1.0));
    }

    #[test]
    fn a_window_spans_epochs_until_it_holds_enough_samples() {
        let mut s = Stage2::default();
        let slot = s.allocate(1);
        // 40 samples on four pages, over an epoch: too few to tell, whatever the epoch.
        for i in 0..40 {
            s.note_sample(slot, (i % 4) * 100, false);
        }
        assert_eq!(s.coverage(slot, 1.0), None);
        assert_eq!(s.density_scale(slot, 1.0), 1.0);
        s.cool_all(1, 1.0);
        // The window stays open across the epoch's end and fills in the next one.
        for i in 0..24 {
            s.note_sample(slot, (i % 4) * 100, false);
        }
        assert_eq!(s.coverage(slot, 1.0), Some(1.0));
        // Closed at the next epoch's end, its coverage stands while the next window fills.
        s.cool_all(1, 1.0);
        s.note_sample(slot, 7, false);
        assert_eq!(s.coverage(slot, 1.0), Some(1.0));
        // A slot given to another superpage starts with nothing.
        s.release(slot);
        let again = s.allocate(2);
        assert_eq!(again, slot);
        assert_eq!(s.coverage(again, 1.0), None);
    }

    #[test]
    fn thirty_one_bits_then_overflow_latches() {
        let mut c = 0u32;
        bump(&mut c, 0x7FFF_FFFE);
        assert_eq!(value(c), 0x7FFF_FFFE);
        bump(&mut c, 1);
        assert_eq!((c, value(c)), (0x7FFF_FFFF, 0x7FFF_FFFF));
        bump(&mut c, 1);
        assert_eq!(c, OVERFLOW | VALUE_MASK);
        assert_eq!(value(c), 0x8000_0000);
        bump(&mut c, 1_000_000);
        assert_eq!(c, OVERFLOW | VALUE_MASK);
        let mut big = 0u32;
        bump(&mut big, u32::MAX);
        assert_eq!(value(big), 0x8000_0000);
    }

    #[test]
    fn cooling_clears_overflow() {
        assert_eq!(cool(OVERFLOW | VALUE_MASK, 1), 0x3FFF_FFFF);
        assert_eq!(cool(3, 1), 1);
        assert_eq!(cool(OVERFLOW | VALUE_MASK, 16), 0);
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
        t.cool_all(1, 1.0);
        assert_eq!(t.counters(b).0[0], 4);
    }
}
