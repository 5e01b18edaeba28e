//! Hot-set statistics (Rainbow §II-B after CHOP): the smallest set of pages that covers a given
//! share (70 %) of accesses, found with a counting histogram instead of a sort so that a
//! 512 Ki-superpage target costs one linear pass per interval. The same histogram answers the
//! top-N cut-off of stage 1.

/// Counts are bucketed exactly up to this value; larger ones share the last bucket and tie there
/// (all of them rank as the hottest). Counts are samples: a superpage's cooled heat reaches
/// 65,535 only if it takes two thirds of a 1 M samples/s stream (50,000 samples per 50 ms interval), so the ties
/// are among superpages that are unambiguously hot.
const BUCKETS: usize = 1 << 16;

/// Result of a coverage query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Units (pages or superpages) in the hot set.
    pub units: u64,
    /// Smallest count among them (Rainbow's "hot page min # access").
    pub min_count: u32,
    /// Accesses the hot set covers, and all accesses.
    pub covered: u64,
    pub total: u64,
    /// Units with a non-zero count (the working set).
    pub touched: u64,
}

/// A histogram of unit counts.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    buckets: Vec<u32>,
    /// Buckets above this are all zero: clearing and scanning stop here, so an engine whose
    /// counts stay small (the common case: a few samples per superpage per interval) pays
    /// for the buckets it uses, not for all 64 Ki of them 20 times a second.
    used: usize,
    /// Sum of the counts the last bucket holds, so coverage stays exact in total when counts
    /// pass the exact range (an epoch's count of a hot superpage can).
    top_sum: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: vec![0; BUCKETS],
            used: 0,
            top_sum: 0,
        }
    }
}

impl Histogram {
    pub(crate) fn clear(&mut self) {
        self.buckets[..=self.used].fill(0);
        self.used = 0;
        self.top_sum = 0;
    }

    pub(crate) fn add(&mut self, count: u32) {
        if count > 0 {
            let b = (count as usize).min(BUCKETS - 1);
            self.buckets[b] = self.buckets[b].saturating_add(1);
            self.used = self.used.max(b);
            if b == BUCKETS - 1 {
                self.top_sum += u64::from(count);
            }
        }
    }

    /// The largest count added since the last clear (0 when none), capped at the exact range.
    pub(crate) fn max(&self) -> u32 {
        self.used as u32
    }

    fn in_use(&self) -> &[u32] {
        &self.buckets[..=self.used]
    }

    /// Sum of the counts in bucket `v`, which holds `n` units.
    fn bucket_sum(&self, v: usize, n: u32) -> u64 {
        if v == BUCKETS - 1 {
            self.top_sum
        } else {
            v as u64 * u64::from(n)
        }
    }

    /// Smallest set of units, hottest first, whose counts reach `share` of the total.
    pub(crate) fn cover(&self, share: f64) -> Coverage {
        let (mut total, mut touched) = (0u64, 0u64);
        for (v, n) in self.in_use().iter().enumerate() {
            total += self.bucket_sum(v, *n);
            touched += u64::from(*n);
        }
        let target = (total as f64 * share).ceil() as u64;
        let mut c = Coverage {
            total,
            touched,
            ..Coverage::default()
        };
        if target == 0 {
            return c;
        }
        for (v, n) in self
            .in_use()
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, n)| **n > 0)
        {
            // The last bucket's units count at their mean.
            let v64 = self.bucket_sum(v, *n).div_ceil(u64::from(*n));
            let need = (target - c.covered).div_ceil(v64).min(u64::from(*n));
            c.units += need;
            c.covered += need * v64;
            c.min_count = v as u32;
            if c.covered >= target {
                break;
            }
        }
        c
    }

    /// Cut-off for the `n` units with the largest counts: units above `value` are in, and the
    /// first `ties` units equal to `value` are in too. `value == 0` means every touched unit fits.
    pub(crate) fn top(&self, n: usize) -> (u32, usize) {
        let mut left = n;
        for (v, c) in self.in_use().iter().enumerate().skip(1).rev() {
            let c = *c as usize;
            if c >= left {
                return (v as u32, left);
            }
            left -= c;
        }
        (0, 0)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.buckets.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seventy_percent_cover() {
        let mut h = Histogram::default();
        // 10 units of 10 and 100 units of 1: total 200; 70 % = 140 → the ten 10s (100) plus 40 ones.
        for _ in 0..10 {
            h.add(10);
        }
        for _ in 0..100 {
            h.add(1);
        }
        h.add(0);
        let c = h.cover(0.7);
        assert_eq!(
            c,
            Coverage {
                units: 50,
                min_count: 1,
                covered: 140,
                total: 200,
                touched: 110
            }
        );
        // Exactly the hot units when they alone reach the share.
        assert_eq!(h.cover(0.5).units, 10);
        assert_eq!(h.cover(0.5).min_count, 10);
        assert_eq!(Histogram::default().cover(0.7), Coverage::default());
    }

    #[test]
    fn a_cleared_histogram_answers_like_a_fresh_one() {
        let mut reused = Histogram::default();
        for count in [u32::MAX, 40_000, 7, 7, 3] {
            reused.add(count);
        }
        reused.clear();
        let mut fresh = Histogram::default();
        for h in [&mut reused, &mut fresh] {
            for count in [9, 4, 4, 1] {
                h.add(count);
            }
        }
        assert_eq!(reused.cover(0.7), fresh.cover(0.7));
        assert_eq!(reused.top(2), fresh.top(2));
        assert_eq!(reused.top(10), fresh.top(10));
        assert_eq!((reused.max(), fresh.max()), (9, 9));
        assert_eq!(
            reused.cover(1.0).total,
            18,
            "nothing of the first round survives"
        );
    }

    #[test]
    fn saturated_counts_share_the_top_bucket() {
        let mut h = Histogram::default();
        h.add(u32::MAX);
        h.add(70_000);
        assert_eq!(h.cover(1.0).min_count, 65_535);
        assert_eq!(h.cover(1.0).units, 2);
    }

    #[test]
    fn counts_past_the_exact_range_keep_their_share_of_the_total() {
        // An epoch's count of a hot superpage at 1 M samples/s: one unit of 400,000 beside a
        // hundred of 1,000. The one covers 80 % on its own; clamped to 65,535 it would not.
        let mut h = Histogram::default();
        h.add(400_000);
        for _ in 0..100 {
            h.add(1_000);
        }
        let c = h.cover(0.7);
        assert_eq!(c.total, 500_000);
        assert_eq!(c.units, 1);
    }

    #[test]
    fn top_n_cutoff_with_ties() {
        let mut h = Histogram::default();
        for v in [9, 7, 7, 7, 3, 1] {
            h.add(v);
        }
        assert_eq!(h.top(1), (9, 1));
        assert_eq!(h.top(3), (7, 2));
        assert_eq!(h.top(4), (7, 3));
        assert_eq!(h.top(5), (3, 1));
        assert_eq!(h.top(100), (0, 0));
    }
}
