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
//!   kernel silently masks it at open) and at least [`MIN_PERIOD`] = 0x90. Since Linux 6.15
//!   (b2fc7b282bf7, `min_period`) the kernel rejects smaller op periods with EINVAL at open, and
//!   (1afbdd970f50, `perf_ibs_check_period`) rejects a period change by ioctl whose low nibble
//!   is set or that is under the minimum; older kernels accepted 0x10, but the hardware's MaxCnt
//!   minimum for op sampling is 0x90 anyway. Periods are rounded *up*, so a budget-derived
//!   period stays within budget, at open and at every change the CPU budget makes
//!   ([`super::perf::sampler::period_at`]).
//! - `precise_ip` 0: IBS is precise by construction (core events with `precise_ip` set are what
//!   get forwarded *to* IBS).
//! - `exclude_kernel`/`exclude_user`/`exclude_hv`/`exclude_guest` all unset: `perf_ibs_init`
//!   returns EINVAL for `exclude_guest`/`exclude_host`/`exclude_idle`, and for
//!   `exclude_kernel`/`exclude_user`/`exclude_hv` unless the software filter (`swfilt`, config2
//!   bit 0, Linux 6.14+) is requested. Kernel samples are dropped in BPF (the target filter and
//!   the address check: a data address at or above `KERNEL_SPACE_START` is dropped and counted
//!   as `kernel_address`) instead. Refused before Linux 6.1, whose op samples carry no data
//!   address ([`memtide_host::probe::kernel`]).
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
    PerfSpecError,
    perf::{PerfSourceOptions, PerfSourceSpec, budget::PeriodRule, sampler::EventSpec},
};
use memtide_host::probe::pmu::{
    self, ConfigWord, EncodeError, EventSpec as EventString, Pmu, PmuScan,
};
use memtide_host::{
    probe::kernel,
    sys::perf::{self, PerfAttr},
    sysfs::{self, HostRoot},
};

/// The IBS op PMU's name.
pub const PMU_NAME: &str = "ibs_op";
/// Smallest op period the kernel accepts (Linux 6.15+; the hardware minimum).
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
    #[error("PMU {PMU_NAME} found, but {0}")]
    NoDataAddress(String),
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
                bp_type: 0,
            },
            kind: AccessKind::Unknown,
            group_leader: false,
            cpus: None,
            period_rule: PERIOD_RULE,
        },
        count_ops,
        l3_miss_only,
        requested_period: (period != options.period).then_some(options.period),
    })
}

/// The `ibs_op` PMU of `scan`, or an error naming where it should be, or why the kernel
/// under `root` cannot use it ([`kernel::ibs_refusal`]: no data address before Linux 6.1).
pub fn find<'a>(root: &HostRoot, scan: &'a PmuScan) -> Result<&'a Pmu, IbsError> {
    let pmu = scan.get(PMU_NAME).ok_or_else(|| IbsError::NoIbsOp {
        path: root.path(pmu::PMU_DIR).join(PMU_NAME),
    })?;
    let release = sysfs::read_trimmed(&root.path(kernel::OSRELEASE)).unwrap_or_default();
    match kernel::ibs_refusal(&release) {
        Some(reason) => Err(IbsError::NoDataAddress(reason)),
        None => Ok(pmu),
    }
}

/// IBS: op sampling, L3 misses only where the PMU can filter them (Zen 4).
pub fn source_spec(
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    let pmu = find(root, scan)?;
    let l3 = options.ibs_l3_miss_only && pmu.has_format("l3missonly");
    let notes = if options.ibs_l3_miss_only && !l3 {
        vec!["ibs_op has no l3missonly (before Zen 4): sampling every op".to_owned()]
    } else {
        Vec::new()
    };
    let fraction = if l3 {
        options.rates.ibs_l3_miss_fraction
    } else {
        1.0
    };
    let choice = options.choose(
        options.rates.ibs_ops_per_sec * fraction,
        options.streams_on(None),
        1.0,
        PERIOD_RULE,
    )?;
    let event = op_event(
        pmu,
        &IbsOptions {
            l3_miss_only: options.ibs_l3_miss_only,
            count_ops: true,
            period: choice.period,
        },
    )?;
    Ok(PerfSourceSpec {
        spec: options.sampler_spec(SampleSource::Ibs, vec![event.event]),
        periods: vec![("ibs_op", choice)],
        notes,
        interrupts: true,
    })
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
    fn find_refuses_the_pmu_on_a_kernel_whose_op_samples_have_no_address() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let osrelease = root.path(kernel::OSRELEASE);
        std::fs::create_dir_all(osrelease.parent().unwrap()).unwrap();
        let pmu_dir = root.path(pmu::PMU_DIR).join(PMU_NAME);
        std::fs::create_dir_all(pmu_dir.join("format")).unwrap();
        std::fs::write(pmu_dir.join("type"), "11\n").unwrap();
        let scan = PmuScan::read(&root).unwrap();

        std::fs::write(&osrelease, "5.15.0-91-generic\n").unwrap();
        let err = find(&root, &scan).unwrap_err();
        assert!(matches!(err, IbsError::NoDataAddress(_)), "{err}");
        assert!(err.to_string().contains("5.15.0-91-generic"), "{err}");

        std::fs::write(&osrelease, "6.1.0-13-amd64\n").unwrap();
        assert_eq!(find(&root, &scan).unwrap().perf_type, 11);
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
