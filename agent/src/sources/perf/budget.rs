//! How often a perf-event source may sample: the sample period that keeps the whole sampling path
//! under a CPU budget and under the kernel's own sample-rate throttle.
//!
//! Every sample costs CPU twice: in the kernel (the PMU interrupt, the PEBS/IBS record, the BPF
//! program, the ring-buffer write) and in the agent (ring drain, decode, engine update). memtide
//! spends at most [`SamplingBudget::cpu_fraction`] of one core on all of it, at
//! [`SamplingBudget::sample_cost_ns`] per sample. With `streams` sampling streams (one per event
//! per CPU) sharing the budget equally, each stream may produce
//! `cpu_fraction * 1e9 / (sample_cost_ns * streams)` samples per second, so an event counting
//! `rate` times per second per CPU needs a period of at least `rate / that`.
//!
//! The kernel throttles independently (kernel/events/core.c):
//! - `kernel.perf_event_max_sample_rate` caps the samples per second of each event on each CPU
//!   (checked per tick as `DIV_ROUND_UP(rate, HZ)` interrupts; a throttled event stops sampling
//!   for the rest of the tick).
//! - `kernel.perf_cpu_time_max_percent` (default 25): when the average interrupt takes longer
//!   than `(1e9 / max_sample_rate) * percent / 100` ns, `perf_sample_event_took()` lowers the max
//!   rate to about `percent/100 * 1e9 / (1.25 * avg_len)` per second ("perf: interrupt took too
//!   long ..., lowering kernel.perf_event_max_sample_rate"). 0 and 100 turn this off.
//!
//! [`choose_period`] picks the smallest period that satisfies both (so samples are not silently
//! thrown away by the throttle) and says which limit bound. It is a pure function; only
//! [`KernelLimits::read`] touches the file system, through a [`HostRoot`].

use std::fmt;

use serde::Serialize;

use memtide_host::sysfs::{self, HostRoot, SysfsError};

/// `kernel.perf_event_max_sample_rate`, relative to the root.
pub const MAX_SAMPLE_RATE_PATH: &str = "proc/sys/kernel/perf_event_max_sample_rate";
/// `kernel.perf_cpu_time_max_percent`, relative to the root.
pub const CPU_TIME_MAX_PERCENT_PATH: &str = "proc/sys/kernel/perf_cpu_time_max_percent";

/// The kernel's sampling limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KernelLimits {
    /// `perf_event_max_sample_rate`: samples per second per event per CPU.
    pub max_sample_rate: u64,
    /// `perf_cpu_time_max_percent`: 0 or 100 disable the interrupt-time check.
    pub cpu_time_max_percent: u32,
}

impl KernelLimits {
    /// The kernel's boot defaults (`DEFAULT_MAX_SAMPLE_RATE` 100000, `DEFAULT_CPU_TIME_MAX_PERCENT`
    /// 25).
    pub const LINUX_DEFAULT: Self = Self {
        max_sample_rate: 100_000,
        cpu_time_max_percent: 25,
    };

    /// Reads both sysctls under `root`.
    pub fn read(root: &HostRoot) -> Result<Self, SysfsError> {
        Ok(Self {
            max_sample_rate: sysfs::read_parse(&root.path(MAX_SAMPLE_RATE_PATH))?,
            cpu_time_max_percent: sysfs::read_parse(&root.path(CPU_TIME_MAX_PERCENT_PATH))?,
        })
    }

    /// Whether the interrupt-time check is active.
    #[must_use]
    pub const fn time_check_enabled(&self) -> bool {
        self.cpu_time_max_percent > 0 && self.cpu_time_max_percent < 100
    }

    /// The sample rate per event per CPU the kernel will allow once it has measured interrupts
    /// of `kernel_sample_cost_ns`: `max_sample_rate`, lowered the way `perf_sample_event_took()`
    /// lowers it when the interrupts are longer than the time check allows.
    #[must_use]
    pub fn effective_max_rate(&self, kernel_sample_cost_ns: f64) -> f64 {
        let configured = self.max_sample_rate.max(1) as f64;
        if !self.time_check_enabled() || kernel_sample_cost_ns <= 0.0 {
            return configured;
        }
        let percent = f64::from(self.cpu_time_max_percent);
        let allowed_ns = 1e9 / configured * percent / 100.0;
        if kernel_sample_cost_ns <= allowed_ns {
            return configured;
        }
        // At least one sample per tick survives (`max = 1`); with HZ >= 100 that is >= 100/s.
        (percent / 100.0 * 1e9 / (1.25 * kernel_sample_cost_ns)).max(100.0)
    }
}

impl Default for KernelLimits {
    fn default() -> Self {
        Self::LINUX_DEFAULT
    }
}

/// How much CPU the sampling path may use, and what one sample costs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SamplingBudget {
    /// Fraction of one core for the whole path (kernel and agent), summed over all CPUs.
    pub cpu_fraction: f64,
    /// Nanoseconds of CPU per sample for the whole path.
    pub sample_cost_ns: f64,
    /// Nanoseconds per sample spent in the kernel's interrupt path (what the kernel's own
    /// interrupt-time check measures).
    pub kernel_sample_cost_ns: f64,
    /// The part of `kernel_sample_cost_ns` outside the BPF program, which nothing measures
    /// while the agent runs: the running cost controller charges it per sample on top of the
    /// BPF programs' measured run time.
    pub interrupt_cost_ns: f64,
}

impl SamplingBudget {
    /// 1 % of one core.
    pub const DEFAULT_CPU_FRACTION: f64 = 0.01;
    /// 2 µs per sample for the whole path: about 1 µs in the kernel (PMU interrupt, PEBS/IBS
    /// record read, BPF program, ring write; the usual figure for PEBS/IBS interrupts on
    /// server parts) and about 1 µs in the agent (ring drain, decode, engine update), rounded
    /// up so the budget errs towards fewer samples.
    pub const DEFAULT_SAMPLE_COST_NS: f64 = 2_000.0;
    /// The kernel's share of [`Self::DEFAULT_SAMPLE_COST_NS`].
    pub const DEFAULT_KERNEL_SAMPLE_COST_NS: f64 = 1_000.0;
    /// The kernel's share less the BPF program, whose run time the kernel measures (145 ns a
    /// run, ring write included, on the software page-fault path: docs/benchmarks.md): PMU
    /// interrupt entry and exit, the PEBS assist (200-300 ns a record, Akiyama and Hirofuchi,
    /// ROSS '17) or the IBS register reads, and perf's sample set-up. It cannot be measured
    /// without a PMU; docs/operations.md ("What a sample costs") says which parts are
    /// measured and which assumed.
    pub const DEFAULT_INTERRUPT_COST_NS: f64 = 850.0;
}

impl Default for SamplingBudget {
    fn default() -> Self {
        Self {
            cpu_fraction: Self::DEFAULT_CPU_FRACTION,
            sample_cost_ns: Self::DEFAULT_SAMPLE_COST_NS,
            kernel_sample_cost_ns: Self::DEFAULT_KERNEL_SAMPLE_COST_NS,
            interrupt_cost_ns: Self::DEFAULT_INTERRUPT_COST_NS,
        }
    }
}

/// What periods a PMU accepts: at least `min`, a multiple of `multiple`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PeriodRule {
    pub min: u64,
    pub multiple: u64,
}

impl PeriodRule {
    /// Any period of at least 1.
    pub const ANY: Self = Self {
        min: 1,
        multiple: 1,
    };

    /// `period` rounded up to a multiple of `multiple`, and at least `min`. Rounding up keeps a
    /// budget-derived period within the budget.
    #[must_use]
    pub fn apply(&self, period: u64) -> u64 {
        let multiple = self.multiple.max(1);
        // Near u64::MAX rounding up would overflow: take the largest multiple instead.
        let up = |p: u64| {
            p.checked_next_multiple_of(multiple)
                .unwrap_or(p - p % multiple)
        };
        up(period).max(up(self.min.max(1)))
    }
}

/// The load one sampled event puts on the budget.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EventLoad {
    /// How often the event would produce a sample at period 1, per CPU per second (for a
    /// filtered event such as IBS with `l3missonly`, the counted rate times the fraction that
    /// passes the filter).
    pub events_per_sec_per_cpu: f64,
    /// Sampling streams sharing the budget: sampling events times the CPUs each is opened on,
    /// over every event of the source (not only this one).
    pub streams: u32,
    /// This event's streams' share of the budget relative to an equal split (1: every stream
    /// gets `1 / streams`; PEBS splits loads against stores by [`load_store_shares`]).
    pub share: f64,
}

impl EventLoad {
    /// An event whose streams get an equal share of the budget.
    #[must_use]
    pub const fn equal(events_per_sec_per_cpu: f64, streams: u32) -> Self {
        Self {
            events_per_sec_per_cpu,
            streams,
            share: 1.0,
        }
    }
}

/// How PEBS's load and store streams share the budget, relative to an equal split: by Neyman
/// allocation ([`memtide_core::sampling`]) the store period is `store_period_ratio` times the
/// load period, so per CPU the loads take `r_l / (r_l + r_s / ratio)` of the samples and the
/// stores the rest. Returns `(load share, store share)`, averaging 1.
#[must_use]
pub fn load_store_shares(
    loads_per_sec: f64,
    stores_per_sec: f64,
    store_period_ratio: f64,
) -> (f64, f64) {
    let loads = loads_per_sec.max(0.0);
    let stores = stores_per_sec.max(0.0) / store_period_ratio.max(f64::MIN_POSITIVE);
    let total = loads + stores;
    if total <= 0.0 || !total.is_finite() {
        return (1.0, 1.0);
    }
    (2.0 * loads / total, 2.0 * stores / total)
}

/// Which limit decided the period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// memtide's own CPU budget.
    CpuBudget,
    /// The kernel's throttle (`perf_event_max_sample_rate`, possibly lowered by
    /// `perf_cpu_time_max_percent`) is stricter than the budget.
    KernelThrottle,
    /// The PMU's minimum period (or its granularity) is larger than either.
    PmuMinimum,
}

/// The chosen period and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeriodChoice {
    pub period: u64,
    /// Smallest period the CPU budget allows.
    pub budget_period: u64,
    /// Smallest period the kernel throttle allows.
    pub kernel_period: u64,
    /// Samples per second per event per CPU the kernel allows.
    pub kernel_max_rate: f64,
    /// Expected samples per second on one stream at `period`.
    pub samples_per_sec_per_stream: f64,
    /// Expected share of one core spent on this event's samples, over all its streams.
    pub expected_cpu_fraction: f64,
    pub binding: Binding,
    /// The kernel throttle is stricter than the CPU budget: the period was raised so the kernel
    /// does not throttle (operators can raise `kernel.perf_event_max_sample_rate`).
    pub kernel_throttle_binds: bool,
    /// One sentence for logs and `memtide probe`.
    pub explanation: String,
}

/// Invalid budget inputs.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("sampling budget: {what} must be a positive finite number, got {value}")]
    NotPositive { what: &'static str, value: f64 },
    #[error("sampling budget: expected event rate must be finite and >= 0, got {0}")]
    BadRate(f64),
}

fn positive(what: &'static str, value: f64) -> Result<f64, BudgetError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(BudgetError::NotPositive { what, value })
    }
}

/// `ceil(x)` as a period, at least 1 (saturating for absurd inputs). A quotient within
/// floating-point noise of a whole number is that number, not the next.
fn ceil_period(x: f64) -> u64 {
    if x.is_finite() {
        let nearest = x.round();
        let whole = if (x - nearest).abs() <= 1e-9 * nearest.abs() {
            nearest
        } else {
            x.ceil()
        };
        whole.max(1.0) as u64
    } else {
        u64::MAX
    }
}

/// The smallest period (under `rule`) that keeps `load` within `budget` and under the kernel's
/// throttle.
pub fn choose_period(
    budget: &SamplingBudget,
    limits: &KernelLimits,
    load: &EventLoad,
    rule: PeriodRule,
) -> Result<PeriodChoice, BudgetError> {
    let fraction = positive("cpu_fraction", budget.cpu_fraction)?;
    let cost_ns = positive("sample_cost_ns", budget.sample_cost_ns)?;
    let rate = load.events_per_sec_per_cpu;
    if !rate.is_finite() || rate < 0.0 {
        return Err(BudgetError::BadRate(rate));
    }
    let streams = load.streams.max(1);
    let share = positive("share", load.share)?;
    let stream_rate_budget = fraction * share * 1e9 / (cost_ns * f64::from(streams));
    let budget_period = ceil_period(rate / stream_rate_budget);
    let kernel_max_rate = limits.effective_max_rate(budget.kernel_sample_cost_ns);
    let kernel_period = ceil_period(rate / kernel_max_rate);
    let period = rule.apply(budget_period.max(kernel_period));
    let binding = if period > budget_period.max(kernel_period) && period == rule.apply(1) {
        Binding::PmuMinimum
    } else if kernel_period > budget_period {
        Binding::KernelThrottle
    } else {
        Binding::CpuBudget
    };
    let kernel_throttle_binds = kernel_period > budget_period;
    let per_stream = rate / period as f64;
    let expected_cpu_fraction = per_stream * f64::from(streams) * cost_ns / 1e9;
    let explanation = explain(&Explain {
        rate,
        streams,
        share,
        period,
        per_stream,
        expected_cpu_fraction,
        budget,
        limits,
        kernel_max_rate,
        binding,
    });
    Ok(PeriodChoice {
        period,
        budget_period,
        kernel_period,
        kernel_max_rate,
        samples_per_sec_per_stream: per_stream,
        expected_cpu_fraction,
        binding,
        kernel_throttle_binds,
        explanation,
    })
}

struct Explain<'a> {
    rate: f64,
    streams: u32,
    share: f64,
    period: u64,
    per_stream: f64,
    expected_cpu_fraction: f64,
    budget: &'a SamplingBudget,
    limits: &'a KernelLimits,
    kernel_max_rate: f64,
    binding: Binding,
}

fn explain(e: &Explain<'_>) -> String {
    let kernel = format!(
        "kernel limit {:.0} samples/s per event per CPU (perf_event_max_sample_rate={}, \
         perf_cpu_time_max_percent={})",
        e.kernel_max_rate, e.limits.max_sample_rate, e.limits.cpu_time_max_percent
    );
    let why = match e.binding {
        Binding::CpuBudget => format!("the CPU budget binds; {kernel} does not"),
        Binding::KernelThrottle => format!(
            "the {kernel} binds before the CPU budget: the period was raised so the kernel does \
             not throttle (raise kernel.perf_event_max_sample_rate to sample more)"
        ),
        Binding::PmuMinimum => format!("the PMU's minimum period binds; {kernel}"),
    };
    let share = if (e.share - 1.0).abs() > 1e-9 {
        format!(" at {:.2}x an equal share", e.share)
    } else {
        String::new()
    };
    format!(
        "period {} for {:.3e} events/s per CPU on {} stream(s){share}: {:.1} samples/s per \
         stream, {:.2}% of one core at {:.1} µs/sample (budget {:.2}%); {why}",
        e.period,
        e.rate,
        e.streams,
        e.per_stream,
        e.expected_cpu_fraction * 100.0,
        e.budget.sample_cost_ns / 1000.0,
        e.budget.cpu_fraction * 100.0,
    )
}

impl fmt::Display for PeriodChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explanation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::perf::pmu_fixture;

    #[test]
    fn reads_the_sysctls_from_the_root() {
        assert_eq!(
            KernelLimits::read(&pmu_fixture("skylake-server")).unwrap(),
            KernelLimits::LINUX_DEFAULT
        );
        assert_eq!(
            KernelLimits::read(&pmu_fixture("sapphire-rapids")).unwrap(),
            KernelLimits {
                max_sample_rate: 12_000,
                cpu_time_max_percent: 25
            }
        );
        let err = KernelLimits::read(&HostRoot::new("/nonexistent-memtide-root")).unwrap_err();
        assert!(err.path().ends_with(MAX_SAMPLE_RATE_PATH), "{err}");
    }

    #[test]
    fn effective_rate_follows_perf_sample_event_took() {
        let limits = KernelLimits::LINUX_DEFAULT;
        // allowed_ns = 1e9 / 100000 * 25 / 100 = 2500 ns.
        assert!((limits.effective_max_rate(2_500.0) - 100_000.0).abs() < f64::EPSILON);
        // 4000 ns: lowered to 0.25 * 1e9 / 5000 = 50000/s.
        assert!((limits.effective_max_rate(4_000.0) - 50_000.0).abs() < 1e-6);
        for percent in [0, 100] {
            let off = KernelLimits {
                cpu_time_max_percent: percent,
                ..limits
            };
            assert!((off.effective_max_rate(1e6) - 100_000.0).abs() < f64::EPSILON);
        }
    }

    #[test]
    fn budget_binds_with_default_limits() {
        // 2e7 events/s per CPU on 64 streams: 1 % of a core at 2 µs is 5000 samples/s in all,
        // 78.125 per stream, so the period is 2e7 / 78.125 = 256000.
        let choice = choose_period(
            &SamplingBudget::default(),
            &KernelLimits::LINUX_DEFAULT,
            &EventLoad::equal(2e7, 64),
            PeriodRule::ANY,
        )
        .unwrap();
        assert_eq!(choice.period, 256_000);
        assert_eq!(choice.budget_period, 256_000);
        assert_eq!(choice.kernel_period, 200);
        assert_eq!(choice.binding, Binding::CpuBudget);
        assert!(!choice.kernel_throttle_binds);
        assert!((choice.expected_cpu_fraction - 0.01).abs() < 1e-9);
        assert!(
            choice.explanation.contains("the CPU budget binds"),
            "{}",
            choice.explanation
        );
    }

    #[test]
    fn kernel_throttle_binds_when_lowered() {
        // A generous budget (50 % of a core) on 2 streams would allow 125000 samples/s per
        // stream; the kernel, lowered to 1000/s, does not.
        let budget = SamplingBudget {
            cpu_fraction: 0.5,
            ..SamplingBudget::default()
        };
        let limits = KernelLimits {
            max_sample_rate: 1_000,
            cpu_time_max_percent: 25,
        };
        let choice =
            choose_period(&budget, &limits, &EventLoad::equal(1e8, 2), PeriodRule::ANY).unwrap();
        assert_eq!(choice.budget_period, 800);
        assert_eq!(choice.kernel_period, 100_000);
        assert_eq!(choice.period, 100_000);
        assert_eq!(choice.binding, Binding::KernelThrottle);
        assert!(choice.kernel_throttle_binds);
        assert!(
            choice
                .explanation
                .contains("raise kernel.perf_event_max_sample_rate"),
            "{}",
            choice.explanation
        );
    }

    #[test]
    fn pmu_rule_rounds_up_and_floors() {
        let ibs = PeriodRule {
            min: 0x90,
            multiple: 0x10,
        };
        assert_eq!(ibs.apply(1), 0x90);
        assert_eq!(ibs.apply(0x90), 0x90);
        assert_eq!(ibs.apply(0x91), 0xa0);
        assert_eq!(ibs.apply(100_001), 100_016);
        let choice = choose_period(
            &SamplingBudget::default(),
            &KernelLimits::LINUX_DEFAULT,
            &EventLoad::equal(10.0, 1),
            ibs,
        )
        .unwrap();
        assert_eq!(choice.period, 0x90);
        assert_eq!(choice.binding, Binding::PmuMinimum);
    }

    #[test]
    fn rejects_nonsense() {
        let load = EventLoad::equal(1e6, 1);
        let limits = KernelLimits::LINUX_DEFAULT;
        for budget in [
            SamplingBudget {
                cpu_fraction: 0.0,
                ..SamplingBudget::default()
            },
            SamplingBudget {
                sample_cost_ns: f64::NAN,
                ..SamplingBudget::default()
            },
        ] {
            assert!(matches!(
                choose_period(&budget, &limits, &load, PeriodRule::ANY),
                Err(BudgetError::NotPositive { .. })
            ));
        }
        let bad = EventLoad::equal(-1.0, 1);
        assert_eq!(
            choose_period(&SamplingBudget::default(), &limits, &bad, PeriodRule::ANY),
            Err(BudgetError::BadRate(-1.0))
        );
    }
}
