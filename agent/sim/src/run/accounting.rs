//! What the accesses of a replay cost: the fast tier's hits, the projected time window by
//! window (latency over the streams' parallelism, bounded below by the tiers' bandwidths), and
//! the hit-ratio timeline.

use std::time::Duration;

use super::config::{LINE, RecordClock};
use crate::{model::Preset, trace::TraceMeta};

/// Records per projected-time window (the bandwidth term is evaluated per window).
const TIME_WINDOW: u64 = 4096;

#[derive(Default)]
struct Window {
    n: u64,
    fast: u64,
    lat: f64,
    lat_all_fast: f64,
}

/// What the accesses cost: hits, the projected time window by window, the hit-ratio timeline.
pub(super) struct Accounting {
    preset: Preset,
    mlp: f64,
    /// The policies' clock where the trace carries none.
    nominal: RecordClock,
    win: Window,
    pub(super) time_ns: f64,
    pub(super) all_fast_ns: f64,
    /// Records replayed, and those of them that reached memory (past the LLC model).
    pub(super) replayed: u64,
    pub(super) records: u64,
    pub(super) hits: u64,
    pub(super) writes: u64,
    pub(super) fast_writes: u64,
    timeline_every: u64,
    timeline_window: (u64, u64),
    pub(super) timeline: Vec<f64>,
    /// The trace's own time at the end, when it carries time.
    pub(super) recorded_clock: Option<Duration>,
}

impl Accounting {
    pub(super) fn new(
        preset: Preset,
        meta: &TraceMeta,
        nominal: RecordClock,
        timeline_every: u64,
    ) -> Self {
        Self {
            preset,
            mlp: f64::from(meta.mlp.max(1)),
            nominal,
            win: Window::default(),
            time_ns: 0.0,
            all_fast_ns: 0.0,
            replayed: 0,
            records: 0,
            hits: 0,
            writes: 0,
            fast_writes: 0,
            timeline_every,
            timeline_window: (0, 0),
            timeline: Vec::new(),
            recorded_clock: None,
        }
    }

    /// The policies' clock after the records so far: the trace's own time where it has one,
    /// the nominal pace per access otherwise.
    pub(super) fn clock(&self) -> Duration {
        self.recorded_clock
            .unwrap_or_else(|| Duration::from_nanos(self.nominal_clock_ns() as u64))
    }

    /// Nanoseconds of the nominal clock that the records so far span.
    pub(super) fn nominal_clock_ns(&self) -> f64 {
        self.nominal.ns(self.records)
    }

    /// One record, served by the fast tier or not, through a huge mapping or not.
    pub(super) fn access(&mut self, fast: bool, huge: bool, write: bool) {
        let p = &self.preset;
        self.win.n += 1;
        self.win.fast += u64::from(fast);
        self.win.lat += p.latency(fast, write) + if huge { 0.0 } else { p.tlb_4k_ns };
        self.win.lat_all_fast += p.latency(true, write);
        self.records += 1;
        self.hits += u64::from(fast);
        self.writes += u64::from(write);
        self.fast_writes += u64::from(write && fast);
        let (n, hits) = &mut self.timeline_window;
        *n += 1;
        *hits += u64::from(fast);
        if *n == self.timeline_every {
            self.timeline.push(*hits as f64 / *n as f64);
            self.timeline_window = (0, 0);
        }
        if self.win.n == TIME_WINDOW {
            self.close_window();
        }
    }

    fn close_window(&mut self) {
        let (w, p, k) = (&self.win, &self.preset, self.nominal.accesses_per_record());
        if w.n == 0 {
            return;
        }
        let n = w.n as f64 * k;
        let fast_b = w.fast as f64 * k * LINE;
        let slow_b = (w.n - w.fast) as f64 * k * LINE;
        // `mlp` independent streams overlap their compute and their misses (leading loads per
        // stream); the tiers' bandwidths bound the window from below (roofline).
        self.time_ns += ((n * p.compute_ns + w.lat * k) / self.mlp)
            .max(fast_b / p.fast_gbps)
            .max(slow_b / p.slow_gbps);
        self.all_fast_ns +=
            ((n * p.compute_ns + w.lat_all_fast * k) / self.mlp).max(n * LINE / p.fast_gbps);
        self.win = Window::default();
    }

    pub(super) fn finish(&mut self) {
        self.close_window();
        let (n, hits) = self.timeline_window;
        if n > 0 {
            self.timeline.push(hits as f64 / n as f64);
        }
    }
}
