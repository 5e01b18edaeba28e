//! Keeps the sampling path inside its CPU budget while it runs.
//!
//! [`budget::choose_period`](super::budget::choose_period) picks a starting period from an
//! *expected* event rate; real workloads fault, miss and retire at rates that differ from it by
//! orders of magnitude (a page-fault storm is 15x the assumed rate on this machine's test
//! workload). So every [`RateController::INTERVAL`] the daemon measures what sampling really
//! cost — the CPU time of the agent's sampling path (measured on the threads that run it:
//! nothing else the agent does follows the sample period), plus the kernel-measured run time
//! of the BPF programs, plus a PMU's interrupts at their assumed cost (`daemon::sample_rate`)
//! — and scales every sampling event's period so the cost lands inside the budget:
//!
//! - over `OVER` x budget: the period grows in proportion (cost is mostly per sample), at most
//!   `MAX_STEP` x per interval so one noisy interval cannot silence sampling;
//! - under `UNDER` x budget: the period shrinks towards the budget, at most by half per
//!   interval, and never so far that a stream would exceed the kernel's
//!   `perf_event_max_sample_rate` (the kernel would throttle it and drop samples silently);
//! - in between: left alone (the dead band stops it from oscillating).
//!
//! The controller is a pure function of what it is told; the daemon does the measuring.

use std::time::Duration;

/// What one interval cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub wall: Duration,
    /// The CPU time of the agent's sampling path over the interval.
    pub agent_cpu: Duration,
    /// Kernel-measured run time of the sampling BPF programs (zero when the kernel's BPF
    /// statistics are off).
    pub bpf_run: Duration,
    /// Kernel time of the interval's samples that nothing measures (a PMU's interrupt around
    /// the BPF program), at its assumed cost per sample.
    pub interrupts: Duration,
    /// Samples that reached the agent.
    pub samples: u64,
}

impl Interval {
    /// Cost as a fraction of one core.
    #[must_use]
    pub fn cpu_fraction(&self) -> f64 {
        let wall = self.wall.as_secs_f64();
        if wall <= 0.0 {
            return 0.0;
        }
        (self.agent_cpu + self.bpf_run + self.interrupts).as_secs_f64() / wall
    }
}

/// A period change and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    pub from_scale: f64,
    pub to_scale: f64,
    /// The measured cost that prompted it, fraction of one core.
    pub cpu_fraction: f64,
}

/// Scales sample periods to keep the measured cost inside the budget.
#[derive(Clone, Debug)]
pub struct RateController {
    budget: f64,
    /// Current period multiplier relative to the starting periods.
    scale: f64,
    /// Samples per second per stream the kernel allows (its sample-rate limit).
    max_rate_per_stream: f64,
    streams: u32,
}

impl RateController {
    /// How often the daemon measures and adjusts.
    pub const INTERVAL: Duration = Duration::from_secs(5);
    /// Above this multiple of the budget the period grows.
    pub const OVER: f64 = 1.1;
    /// Below this multiple of the budget the period shrinks.
    pub const UNDER: f64 = 0.5;
    /// Largest change of the period in one interval.
    pub const MAX_STEP: f64 = 8.0;
    /// Where the controller aims inside the dead band: a little under the budget, so noise
    /// does not push it straight back over.
    pub const AIM: f64 = 0.8;
    /// Smallest multiplier: the starting period is sized for an expected rate; sampling more
    /// than 1000x that often is never needed to see hot pages and risks interrupt storms.
    pub const MIN_SCALE: f64 = 1e-3;
    /// Largest multiplier: even when the agent's fixed costs eat the whole budget a trickle of
    /// samples keeps flowing, so hot regions are still seen.
    pub const MAX_SCALE: f64 = 1e4;

    /// A controller for a budget of `cpu_fraction` of one core over `streams` sampling streams
    /// (events x CPUs), each allowed `max_rate_per_stream` samples per second by the kernel.
    #[must_use]
    pub fn new(cpu_fraction: f64, streams: u32, max_rate_per_stream: f64) -> Self {
        Self {
            budget: cpu_fraction,
            scale: 1.0,
            max_rate_per_stream,
            streams: streams.max(1),
        }
    }

    #[must_use]
    pub const fn scale(&self) -> f64 {
        self.scale
    }

    /// Puts the scale back (after the kernel refused a change).
    pub fn set_scale(&mut self, scale: f64) {
        self.scale = scale.clamp(Self::MIN_SCALE, Self::MAX_SCALE);
    }

    /// Takes one interval's measurements; returns the new scale when it changed.
    pub fn observe(&mut self, interval: &Interval) -> Option<Change> {
        let wall = interval.wall.as_secs_f64();
        if wall <= 0.0 || self.budget <= 0.0 {
            return None;
        }
        let cost = interval.cpu_fraction();
        let load = cost / self.budget;
        let target = if load > Self::OVER {
            self.scale * (load / Self::AIM).min(Self::MAX_STEP)
        } else if load < Self::UNDER && interval.samples > 0 {
            // Cost that does not scale with samples makes this optimistic; the next interval
            // corrects it from above.
            let mut target = self.scale * (load / Self::AIM).max(0.5);
            // The kernel's limit: samples per stream per second at the new period.
            let rate_per_stream = interval.samples as f64 / wall / f64::from(self.streams);
            let floor = self.scale * rate_per_stream / self.max_rate_per_stream;
            if target < floor {
                target = floor;
            }
            target
        } else {
            return None;
        };
        let target = target.clamp(Self::MIN_SCALE, Self::MAX_SCALE);
        // Changes under 10 % are noise, not worth a round of ioctls.
        if (target / self.scale - 1.0).abs() < 0.1 {
            return None;
        }
        let change = Change {
            from_scale: self.scale,
            to_scale: target,
            cpu_fraction: cost,
        };
        self.scale = target;
        Some(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workload producing `events_per_sec` sampled events at period `base * scale`, an
    /// agent costing `fixed` of a core plus `per_sample` seconds per sample.
    struct Model {
        events_per_sec: f64,
        base_period: f64,
        fixed: f64,
        per_sample: f64,
    }

    impl Model {
        fn interval(&self, scale: f64) -> Interval {
            let samples = self.events_per_sec / (self.base_period * scale) * 5.0;
            let cpu = self.fixed * 5.0 + samples * self.per_sample;
            Interval {
                wall: Duration::from_secs(5),
                agent_cpu: Duration::from_secs_f64(cpu),
                bpf_run: Duration::ZERO,
                interrupts: Duration::ZERO,
                samples: samples as u64,
            }
        }
    }

    fn settle(controller: &mut RateController, model: &Model, rounds: usize) -> f64 {
        for _ in 0..rounds {
            let interval = model.interval(controller.scale());
            controller.observe(&interval);
        }
        model.interval(controller.scale()).cpu_fraction()
    }

    #[test]
    fn a_fault_storm_is_brought_back_inside_the_budget() {
        // The measured case: 146k faults/s against a period sized for 10k/s, ~1.1 us per sample.
        let model = Model {
            events_per_sec: 146_000.0,
            base_period: 4.0,
            fixed: 0.001,
            per_sample: 1.1e-6,
        };
        let mut controller = RateController::new(0.01, 2, 100_000.0);
        assert!(
            model.interval(1.0).cpu_fraction() > 0.03,
            "starts over budget"
        );
        let cost = settle(&mut controller, &model, 6);
        assert!(
            (0.01 * RateController::UNDER..=0.01 * RateController::OVER).contains(&cost),
            "settled at {cost}"
        );
        assert!(controller.scale() > 1.0);
    }

    #[test]
    fn a_quiet_workload_gets_more_samples_up_to_the_budget() {
        let model = Model {
            events_per_sec: 500.0,
            base_period: 40.0,
            fixed: 0.0005,
            per_sample: 2e-6,
        };
        let mut controller = RateController::new(0.01, 2, 100_000.0);
        let before = model.interval(1.0);
        let cost = settle(&mut controller, &model, 20);
        assert!(controller.scale() < 1.0, "period shrank");
        assert!(cost <= 0.01 * RateController::OVER, "still inside: {cost}");
        assert!(model.interval(controller.scale()).samples > before.samples);
    }

    #[test]
    fn the_kernel_sample_rate_limit_is_never_exceeded() {
        // Cheap samples would let the budget ask for more than the kernel allows.
        let model = Model {
            events_per_sec: 1e7,
            base_period: 1000.0,
            fixed: 0.0,
            per_sample: 1e-9,
        };
        let max_rate = 5_000.0;
        let mut controller = RateController::new(0.01, 1, max_rate);
        settle(&mut controller, &model, 30);
        let interval = model.interval(controller.scale());
        let rate = interval.samples as f64 / 5.0;
        assert!(rate <= max_rate * 1.01, "{rate} samples/s over the limit");
    }

    #[test]
    fn fixed_costs_over_budget_slow_sampling_to_a_trickle_not_to_zero() {
        let model = Model {
            events_per_sec: 1e5,
            base_period: 10.0,
            fixed: 0.05,
            per_sample: 1e-6,
        };
        let mut controller = RateController::new(0.01, 2, 100_000.0);
        settle(&mut controller, &model, 50);
        assert!((controller.scale() - RateController::MAX_SCALE).abs() < 1e-6);
        assert!(model.interval(controller.scale()).samples > 0);
    }

    #[test]
    fn inside_the_dead_band_nothing_changes() {
        let mut controller = RateController::new(0.01, 2, 100_000.0);
        let interval = Interval {
            wall: Duration::from_secs(5),
            agent_cpu: Duration::from_millis(40),
            bpf_run: Duration::ZERO,
            interrupts: Duration::ZERO,
            samples: 10_000,
        };
        assert_eq!(controller.observe(&interval), None);
        assert!((controller.scale() - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn one_step_is_bounded() {
        let mut controller = RateController::new(0.01, 2, 100_000.0);
        let change = controller
            .observe(&Interval {
                wall: Duration::from_secs(5),
                agent_cpu: Duration::from_secs(5),
                bpf_run: Duration::ZERO,
                interrupts: Duration::ZERO,
                samples: 1,
            })
            .expect("way over budget");
        assert!((change.to_scale - RateController::MAX_STEP).abs() < 1e-9);
    }
}
