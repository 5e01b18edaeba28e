//! The software page-fault source: `PERF_COUNT_SW_PAGE_FAULTS` with `PERF_SAMPLE_ADDR`, on
//! every CPU, through the same BPF sampler as PEBS and IBS. It exists on every kernel and in
//! every VM, so it is the fallback when there is no memory-sampling PMU and no usable DAMON.
//!
//! What it sees: first touches, faults after migration or reclaim, NUMA-hinting faults, and
//! anything a process maps and unmaps repeatedly. It does not see accesses to resident pages,
//! so it under-reports long-lived hot data; the engine treats its samples as "unknown kind".

use memtide_common::{AccessKind, SampleSource};

use super::{
    PerfSpecError,
    perf::{
        PerfSourceOptions, PerfSourceSpec,
        budget::PeriodRule,
        sampler::{EventSpec, SamplerSpec},
    },
};
use memtide_host::sys::perf::{self, PerfAttr};

/// The event, sampling one fault in `period`.
#[must_use]
pub fn page_fault_event(period: u64) -> EventSpec {
    EventSpec {
        attr: PerfAttr {
            type_: perf::TYPE_SOFTWARE,
            config: perf::SW_PAGE_FAULTS,
            sample_period: period.max(1),
            sample_type: perf::SAMPLE_ADDR | perf::SAMPLE_TID,
            // The agent cares about user-space data; kernel-internal faults are noise.
            exclude_kernel: true,
            exclude_hv: true,
            ..PerfAttr::default()
        },
        kind: AccessKind::Unknown,
        group_leader: false,
        cpus: None,
        period_rule: PeriodRule::ANY,
    }
}

/// A sampler spec for page faults on `cpus`.
#[must_use]
pub fn spec(cpus: Vec<u32>, period: u64, ring_bytes: u32, filter_by_target: bool) -> SamplerSpec {
    SamplerSpec {
        source: SampleSource::SwFault,
        events: vec![page_fault_event(period)],
        cpus,
        ring_bytes,
        filter_by_target,
    }
}

/// Page faults on every CPU, one period for all of them from the CPU budget.
pub fn source_spec(options: &PerfSourceOptions) -> Result<PerfSourceSpec, PerfSpecError> {
    let choice = options.choose(
        options.rates.page_faults_per_sec,
        options.streams_on(None),
        1.0,
        PeriodRule::ANY,
    )?;
    Ok(PerfSourceSpec {
        spec: spec(
            options.cpus.clone(),
            choice.period,
            options.ring_bytes,
            options.filter_by_target,
        ),
        periods: vec![("page-faults", choice)],
        notes: Vec::new(),
        // A software event raises no interrupt: the fault path runs the program.
        interrupts: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_fault_event_requests_the_data_address() {
        let event = page_fault_event(0);
        assert_eq!(event.attr.type_, 1, "PERF_TYPE_SOFTWARE");
        assert_eq!(event.attr.config, 2, "PERF_COUNT_SW_PAGE_FAULTS");
        assert_eq!(
            event.attr.sample_period, 1,
            "a zero period would mean frequency mode"
        );
        assert_ne!(event.attr.sample_type & perf::SAMPLE_ADDR, 0);
        assert!(event.attr.exclude_kernel);
        assert_eq!(
            event.attr.precise_ip, 0,
            "software events reject precise_ip"
        );
    }
}
