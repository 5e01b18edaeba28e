//! AMD IBS op sampling: the `perf_event_attr` for the `ibs_op` PMU, built from its sysfs
//! `type` and `format/` files (arch/x86/events/amd/ibs.c).
//!
//! - `type`: `ibs_op`'s dynamic PMU type.
//! - `config`: `cnt_ctl=1` (format `config:19`, present with `IBS_CAPS_OPCNT`) counts dispatched
//!   ops instead of cycles, so the sample rate follows the instruction stream rather than the
//!   clock; `l3missonly=1` (format `config:16`, Zen 4+) makes the hardware discard tagged ops that
//!   did not miss the L3, so only the accesses that matter for tiering interrupt the CPU. Bits are
//!   placed from the `format/` files, never hard-coded.
//! - `sample_period`: a multiple of 16 (the op counter's low nibble is not programmable; the
//!   kernel silently masks it) and at least [`MIN_PERIOD`] = 0x90. Since Linux 6.14
//!   ("perf/amd/ibs: ... min_period") the kernel rejects smaller op periods with EINVAL; older
//!   kernels accepted 0x10 but the hardware's MaxCnt minimum for op sampling is 0x90 anyway.
//!   Periods are rounded *up*, so a budget-derived period stays within budget.
//! - `precise_ip` 0: IBS is precise by construction (core events with `precise_ip` set are what
//!   get forwarded *to* IBS).
//! - `exclude_kernel`/`exclude_user`/`exclude_hv`/`exclude_guest` all unset: `perf_ibs_init`
//!   returns EINVAL for `exclude_guest`/`exclude_host`/`exclude_idle`, and for
//!   `exclude_kernel`/`exclude_user`/`exclude_hv` unless the software filter (`swfilt`, config2
//!   bit 0, Linux 6.14+) is requested. Kernel samples are dropped in BPF (the target filter and
//!   the address check) instead.
//! - `sample_type` `ADDR | TID | WEIGHT | DATA_SRC`: IBS fills the data address for loads and
//!   stores with a valid linear address (`IbsDcLinAd`), and weight/data source since the IBS
//!   memory-profiling support (Linux 6.1); on older kernels the extra fields are zero.
//!
//! An IBS op sample can be a load, a store, or neither (a non-memory op, `addr` = 0). Only
//! `PERF_SAMPLE_DATA_SRC` says which, and the BPF program cannot read it (`bpf_perf_event_data`
//! exposes only `regs`, `sample_period` and `addr`), so the event is sampled by the
//! "unknown kind" program ([`AccessKind::Unknown`]).

use std::path::PathBuf;

use memtide_common::{AccessKind, SampleSource};

use super::{
    budget::PeriodRule,
    sampler::{EventSpec, SamplerSpec},
};
use memtide_host::probe::pmu::{
    self, ConfigWord, EncodeError, EventSpec as EventString, Pmu, PmuScan,
};
use memtide_host::{
    sys::perf::{self, PerfAttr},
    sysfs::HostRoot,
};

/// The IBS op PMU's name.
pub const PMU_NAME: &str = "ibs_op";
/// Smallest op period the kernel accepts (Linux 6.14+; the hardware minimum).
pub const MIN_PERIOD: u64 = 0x90;
/// The op counter's granularity.
pub const PERIOD_GRANULARITY: u64 = 0x10;
/// IBS periods: multiples of 16, at least 0x90.
pub const PERIOD_RULE: PeriodRule = PeriodRule {
    min: MIN_PERIOD,
    multiple: PERIOD_GRANULARITY,
};
/// What the IBS op event samples.
pub const SAMPLE_TYPE: u64 =
    perf::SAMPLE_ADDR | perf::SAMPLE_TID | perf::SAMPLE_WEIGHT | perf::SAMPLE_DATA_SRC;

/// What to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbsOptions {
    /// Ask for `l3missonly=1` where the PMU has it (default on: tiering only needs misses).
    pub l3_miss_only: bool,
    /// Count dispatched ops (`cnt_ctl=1`) where the PMU has it, rather than cycles.
    pub count_ops: bool,
    /// Requested period; rounded with [`round_period`].
    pub period: u64,
}

impl Default for IbsOptions {
    fn default() -> Self {
        Self {
            l3_miss_only: true,
            count_ops: true,
            period: 0x10000,
        }
    }
}

/// Why the IBS event could not be built.
#[derive(Debug, thiserror::Error)]
pub enum IbsError {
    #[error("no {PMU_NAME} PMU ({} is missing): no IBS op sampling here", path.display())]
    NoIbsOp { path: PathBuf },
    #[error("PMU {PMU_NAME}: {0}")]
    Encode(#[from] EncodeError),
}

/// The IBS op event and what was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IbsEvent {
    pub event: EventSpec,
    /// `cnt_ctl=1` was set.
    pub count_ops: bool,
    /// `l3missonly=1` was set.
    pub l3_miss_only: bool,
    /// The requested period, when rounding changed it.
    pub requested_period: Option<u64>,
}

/// `period` as the op counter takes it: rounded up to a multiple of 16, at least 0x90.
#[must_use]
pub fn round_period(period: u64) -> u64 {
    PERIOD_RULE.apply(period)
}

/// The op event for the `ibs_op` PMU `pmu`.
pub fn op_event(pmu: &Pmu, options: &IbsOptions) -> Result<IbsEvent, IbsError> {
    let count_ops = options.count_ops && pmu.has_format("cnt_ctl");
    let l3_miss_only = options.l3_miss_only && pmu.has_format("l3missonly");
    let mut overrides = Vec::with_capacity(2);
    if count_ops {
        overrides.push(("cnt_ctl", 1));
    }
    if l3_miss_only {
        overrides.push(("l3missonly", 1));
    }
    let config = pmu.encode(&EventString { terms: Vec::new() }, &overrides)?;
    let period = round_period(options.period);
    Ok(IbsEvent {
        event: EventSpec {
            attr: PerfAttr {
                type_: pmu.perf_type,
                config: config.get(ConfigWord::Config),
                config1: config.get(ConfigWord::Config1),
                config2: config.get(ConfigWord::Config2),
                sample_period: period,
                sample_type: SAMPLE_TYPE,
                precise_ip: 0,
                exclude_kernel: false,
                exclude_hv: false,
                exclude_guest: false,
            },
            kind: AccessKind::Unknown,
            group_leader: false,
            cpus: None,
        },
        count_ops,
        l3_miss_only,
        requested_period: (period != options.period).then_some(options.period),
    })
}

/// The `ibs_op` PMU of `scan`, or an error naming where it should be.
pub fn find<'a>(root: &HostRoot, scan: &'a PmuScan) -> Result<&'a Pmu, IbsError> {
    scan.get(PMU_NAME).ok_or_else(|| IbsError::NoIbsOp {
        path: root.path(pmu::PMU_DIR).join(PMU_NAME),
    })
}

/// A sampler spec for the IBS op event on `cpus`.
#[must_use]
pub fn spec(
    event: IbsEvent,
    cpus: Vec<u32>,
    ring_bytes: u32,
    filter_by_target: bool,
) -> SamplerSpec {
    SamplerSpec {
        source: SampleSource::Ibs,
        events: vec![event.event],
        cpus,
        ring_bytes,
        filter_by_target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_rounding() {
        assert_eq!(round_period(0), 0x90);
        assert_eq!(round_period(1), 0x90);
        assert_eq!(round_period(0x8f), 0x90);
        assert_eq!(round_period(0x90), 0x90);
        assert_eq!(round_period(0x91), 0xa0);
        assert_eq!(round_period(100_000), 100_000);
        assert_eq!(round_period(100_001), 100_016);
        assert_eq!(round_period(u64::MAX - 3), u64::MAX - 15);
        for p in [0x90, 0xa0, 12_345, 1 << 20, (1 << 27) + 7] {
            let r = round_period(p);
            assert_eq!(r % 16, 0, "{p} -> {r}");
            assert!(r >= p && r - p < 16, "{p} -> {r}");
        }
    }

    #[test]
    fn missing_format_fields_are_skipped() {
        let pmu = Pmu {
            name: PMU_NAME.to_owned(),
            perf_type: 9,
            formats: std::collections::BTreeMap::new(),
            events: std::collections::BTreeMap::new(),
        };
        let event = op_event(&pmu, &IbsOptions::default()).unwrap();
        assert!(!event.count_ops);
        assert!(!event.l3_miss_only);
        assert_eq!(event.event.attr.config, 0);
        assert_eq!(event.event.attr.type_, 9);
    }

    #[test]
    fn find_names_the_missing_pmu_dir() {
        let root = HostRoot::new("/nonexistent-memtide-root");
        let err = find(&root, &PmuScan::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("sys/bus/event_source/devices/ibs_op"),
            "{err}"
        );
    }
}
