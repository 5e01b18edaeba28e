//! CPU time the agent measures on its own threads, kept as plain values: the sample-rate
//! controller reads what the sampling path spent from the code that measured it, and the
//! metrics mirror these values; nothing that controls the agent reads a metric back.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

/// Runs `work` and returns, with its result, the CPU time the calling thread spent in it
/// (zero where the thread's CPU clock cannot be read).
pub fn thread_cpu_of<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = thread_cpu_now();
    let result = work();
    (result, thread_cpu_since(start).unwrap_or(Duration::ZERO))
}

/// The calling thread's CPU clock, if it can be read.
fn thread_cpu_now() -> Option<Duration> {
    memtide_host::sys::process::thread_cpu_time().ok()
}

/// CPU time the calling thread spent since its clock read `start`.
fn thread_cpu_since(start: Option<Duration>) -> Option<Duration> {
    Some(thread_cpu_now()?.saturating_sub(start?))
}

/// The calling thread's CPU time since it started, for work that spans several calls (an
/// epoch's placement query and plan). Where the thread's CPU clock cannot be read it reads the
/// wall time instead: an overestimate, never a free ride.
#[derive(Debug)]
pub struct ThreadStopwatch {
    cpu_at_start: Option<Duration>,
    wall_at_start: std::time::Instant,
}

impl ThreadStopwatch {
    #[must_use]
    pub fn start() -> Self {
        Self {
            cpu_at_start: thread_cpu_now(),
            wall_at_start: std::time::Instant::now(),
        }
    }

    /// CPU time the thread spent since [`Self::start`] (wall time if its clock is unreadable).
    #[must_use]
    pub fn cpu(&self) -> Duration {
        thread_cpu_since(self.cpu_at_start).unwrap_or_else(|| self.wall())
    }

    /// Wall time since [`Self::start`].
    #[must_use]
    pub fn wall(&self) -> Duration {
        self.wall_at_start.elapsed()
    }
}

/// CPU time several threads add to (the sampling path: the delivery task and every target's
/// task taking samples). Cheap to clone; the clones share one total.
#[derive(Clone, Debug, Default)]
pub struct CpuAccount(Arc<AtomicU64>);

impl CpuAccount {
    /// Everything charged so far.
    #[must_use]
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    pub fn add(&self, spent: Duration) {
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Runs `work` and charges the CPU time the calling thread spent in it.
    pub fn charge<T>(&self, work: impl FnOnce() -> T) -> T {
        let (result, spent) = thread_cpu_of(work);
        self.add(spent);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopwatch_counts_the_threads_cpu_not_its_sleep() {
        let watch = ThreadStopwatch::start();
        std::thread::sleep(Duration::from_millis(50));
        // Sleeping takes wall time and next to no CPU time.
        assert!(watch.wall() >= Duration::from_millis(50));
        assert!(
            watch.cpu() < watch.wall(),
            "{:?} {:?}",
            watch.cpu(),
            watch.wall()
        );
    }

    #[test]
    fn clones_add_to_one_total() {
        let account = CpuAccount::default();
        let other = account.clone();
        account.add(Duration::from_millis(3));
        other.add(Duration::from_micros(500));
        assert_eq!(account.total(), Duration::from_micros(3_500));
    }
}
