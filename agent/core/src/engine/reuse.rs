//! Reuse distances of superpages (Doudali's input to the migration epoch): how many counting
//! intervals pass between two touches of the same superpage, as a histogram the engine fills at
//! every interval close and the epoch controller reads.

/// Sampled reuse times, in counting intervals: exact up to 64, power-of-two buckets beyond.
#[derive(Clone, Debug)]
pub struct ReuseHistogram {
    linear: [u64; 65],
    log: [u64; 11],
}

impl Default for ReuseHistogram {
    fn default() -> Self {
        Self {
            linear: [0; 65],
            log: [0; 11],
        }
    }
}

impl ReuseHistogram {
    /// Records one reuse after `gap` intervals (≥ 1).
    pub fn record(&mut self, gap: u32) {
        if gap <= 64 {
            self.linear[gap as usize] += 1;
        } else {
            // gap in [2^k, 2^(k+1)) with k in 6..=16 → bucket k-6.
            let k = (31 - gap.leading_zeros()).min(16) as usize;
            self.log[k - 6] += 1;
        }
    }

    #[must_use]
    pub fn count(&self) -> u64 {
        self.linear.iter().chain(&self.log).sum()
    }

    /// (lowest gap, highest gap, count) of every bucket, shortest gaps first.
    fn buckets(&self) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        let linear = (0u32..).zip(&self.linear).map(|(gap, &c)| (gap, gap, c));
        let log = (6u32..).zip(&self.log).map(|(k, &c)| {
            let high = if k == 16 { u32::MAX } else { (2 << k) - 1 };
            (1 << k, high, c)
        });
        linear.chain(log)
    }

    /// Median reuse gap in intervals (a lower bound of its bucket beyond 64).
    #[must_use]
    pub fn median(&self) -> Option<u32> {
        self.median_within(u32::MAX)
    }

    /// Median of the gaps up to `limit` intervals (buckets starting beyond it are left out).
    #[must_use]
    pub fn median_within(&self, limit: u32) -> Option<u32> {
        let kept = || self.buckets().take_while(|&(low, _, _)| low <= limit);
        let n: u64 = kept().map(|(_, _, c)| c).sum();
        let half = n.div_ceil(2);
        let mut seen = 0;
        kept().find_map(|(low, _, c)| {
            seen += c;
            (n > 0 && seen >= half).then_some(low)
        })
    }

    /// The shortest gap (an upper bound of its bucket beyond 64) that at least `k` of the recorded
    /// values do not exceed; `None` if fewer than `k` were recorded.
    #[must_use]
    pub fn reached_by(&self, k: u64) -> Option<u32> {
        let mut seen = 0;
        self.buckets().find_map(|(_, high, c)| {
            seen += c;
            (seen >= k).then_some(high)
        })
    }

    /// Halves every count; the engine does it at the end of every epoch instead of clearing, so the
    /// median weighs older epochs less without forgetting them. Cleared each epoch, the median
    /// of a short epoch is a handful of reuses: on stream, the one epoch in which a window swept
    /// seconds earlier returned lifted the floor from 100 ms to 6.4 s, and no plan ran again.
    pub fn halve(&mut self) {
        for c in self.linear.iter_mut().chain(&mut self.log) {
            *c /= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_histogram_median() {
        let mut h = ReuseHistogram::default();
        assert_eq!(h.median(), None);
        for g in [2, 3, 3, 10, 64] {
            h.record(g);
        }
        assert_eq!(h.median(), Some(3));
        for _ in 0..6 {
            h.record(1000);
        }
        assert_eq!(h.median(), Some(512));
        h.record(u32::MAX);
        assert_eq!(h.count(), 12);
        // Halving keeps the shape (odd counts round down) and empties an all-ones histogram.
        h.halve();
        assert_eq!((h.count(), h.median()), (4, Some(512)));
        h.halve();
        assert_eq!((h.count(), h.median()), (1, Some(512)));
        h.halve();
        assert_eq!((h.count(), h.median()), (0, None));
    }

    #[test]
    fn reuse_histogram_median_within_a_limit_and_the_reach_of_a_count() {
        let mut h = ReuseHistogram::default();
        for g in [1, 1, 2, 40, 40, 40, 200, 200, 200] {
            h.record(g);
        }
        assert_eq!(h.median(), Some(40));
        // Up to 39 intervals only 1, 1, 2 count; up to 64, the 40s as well.
        assert_eq!(h.median_within(39), Some(1));
        assert_eq!(h.median_within(64), Some(2));
        assert_eq!(h.median_within(0), None);
        // 200 is in the bucket [128, 255]: counted from its lower bound.
        assert_eq!(h.median_within(128), Some(40));
        // The 3rd shortest is 2; the 6th 40; the 7th lies in [128, 255], reported as 255.
        assert_eq!(h.reached_by(3), Some(2));
        assert_eq!(h.reached_by(6), Some(40));
        assert_eq!(h.reached_by(7), Some(255));
        assert_eq!(h.reached_by(10), None);
        h.record(u32::MAX);
        assert_eq!(h.reached_by(10), Some(u32::MAX));
    }
}
