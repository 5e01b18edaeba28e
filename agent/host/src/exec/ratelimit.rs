//! Token buckets for migration bandwidth: bytes per second with a burst, on a caller-supplied
//! clock (so the executor is deterministic under test).

use std::time::{Duration, Instant};

/// A token bucket over bytes. A rate of 0 means unlimited.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// `rate` bytes per second, holding at most `burst` bytes (at least one rate's worth is
    /// not required; a burst below the largest request only lets it through in parts). Starts
    /// full.
    #[must_use]
    pub fn new(rate: u64, burst: u64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst as f64,
            last: None,
        }
    }

    /// An unlimited bucket.
    #[must_use]
    pub fn unlimited() -> Self {
        Self::new(0, 0)
    }

    #[must_use]
    pub const fn is_unlimited(&self) -> bool {
        self.rate == 0
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last);
            self.tokens =
                (self.tokens + elapsed.as_secs_f64() * self.rate as f64).min(self.burst as f64);
        }
        self.last = Some(now);
    }

    /// Bytes available at `now`.
    pub fn available(&mut self, now: Instant) -> u64 {
        if self.is_unlimited() {
            return u64::MAX;
        }
        self.refill(now);
        self.tokens as u64
    }

    /// Takes up to `want` bytes, in whole multiples of `unit`, and returns how many it took.
    pub fn take_up_to(&mut self, want: u64, unit: u64, now: Instant) -> u64 {
        if self.is_unlimited() {
            return want;
        }
        let unit = unit.max(1);
        let granted = (self.available(now).min(want) / unit) * unit;
        self.tokens -= granted as f64;
        granted
    }

    /// How long until `bytes` are available (zero if they are now).
    pub fn wait_for(&mut self, bytes: u64, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        let have = self.available(now);
        if have >= bytes {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((bytes - have) as f64 / self.rate as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_grants_burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 4096);
        assert_eq!(b.take_up_to(10_000, 1024, t0), 4096);
        assert_eq!(b.take_up_to(1024, 1024, t0), 0);
        // 2.5 s later: 2500 bytes refilled, two whole units.
        let t1 = t0 + Duration::from_millis(2500);
        assert_eq!(b.take_up_to(10_000, 1024, t1), 2048);
        assert_eq!(b.available(t1), 452);
        assert_eq!(b.wait_for(1452, t1), Duration::from_secs(1));
        // Never more than the burst, however long the pause.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(b.available(t2), 4096);
        // A clock that goes backwards refills nothing.
        assert_eq!(b.take_up_to(4096, 1, t0), 4096);
        assert_eq!(b.available(t0), 0);
    }

    #[test]
    fn unlimited_bucket() {
        let mut b = TokenBucket::unlimited();
        let now = Instant::now();
        assert_eq!(b.take_up_to(u64::MAX / 2, 4096, now), u64::MAX / 2);
        assert_eq!(b.wait_for(1 << 40, now), Duration::ZERO);
    }
}
