//! The BPF sampler shared by every perf-event source (PEBS, IBS, SPE, software page faults):
//! load the object, attach its `perf_event` programs to events memtide opened itself, keep the
//! target allowlist in BPF, and hand the sample ring to the ingest path.
//!
//! Dropping a [`Sampler`] closes the perf events (which detaches the programs) and unloads the
//! programs and maps: nothing stays attached after the agent exits.

use std::{
    collections::BTreeMap,
    io,
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::PerfEvent,
};
use memtide_common::{AccessKind, DropReason, SampleSource, SamplerConfig, names};

use super::budget::PeriodRule;
use crate::bpf::{self, BpfError};
use memtide_host::sys::perf::{self, PerfAttr};

/// One event to open on every CPU (or on `cpus`), and which program (access kind) samples it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub attr: PerfAttr,
    pub kind: AccessKind,
    /// Opened first on each CPU as the group leader of the next spec (Sapphire Rapids'
    /// `mem-loads-aux`); carries no program. Only that next spec joins the group.
    pub group_leader: bool,
    /// Open only on these CPUs (a hybrid part's `cpu_core`/`cpu_atom` PMU counts only on its
    /// own CPUs, listed in the PMU's `cpus` file); `None`: every CPU of the sampler.
    pub cpus: Option<Vec<u32>>,
    /// The periods the PMU accepts; every period set at run time keeps to it (IBS: multiples
    /// of 16, at least 0x90).
    pub period_rule: PeriodRule,
}

impl EventSpec {
    /// Whether the event is opened on `cpu`.
    #[must_use]
    pub fn opens_on(&self, cpu: u32) -> bool {
        self.cpus.as_ref().is_none_or(|cpus| cpus.contains(&cpu))
    }
}

/// Everything needed to start sampling.
#[derive(Clone, Debug)]
pub struct SamplerSpec {
    pub source: SampleSource,
    pub events: Vec<EventSpec>,
    pub cpus: Vec<u32>,
    /// Bytes of the sample ring (a power of two, at least one page).
    pub ring_bytes: u32,
    /// Only processes in the allowlist are sampled; `false` samples everything (observe-all).
    pub filter_by_target: bool,
}

/// One event to open on one CPU: the index into [`SamplerSpec::events`], and the index of the
/// group leader it joins (opened just before it on the same CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedOpen {
    pub cpu: u32,
    pub event: usize,
    pub leader: Option<usize>,
}

impl SamplerSpec {
    /// The events to open, in order: CPU by CPU, each event on the CPUs it [opens
    /// on](EventSpec::opens_on); a group leader's group holds only the spec right after it.
    #[must_use]
    pub fn open_plan(&self) -> Vec<PlannedOpen> {
        let mut plan = Vec::with_capacity(self.cpus.len() * self.events.len());
        for &cpu in &self.cpus {
            let mut leader = None;
            for (index, event) in self.events.iter().enumerate() {
                if !event.opens_on(cpu) {
                    leader = None;
                    continue;
                }
                plan.push(PlannedOpen {
                    cpu,
                    event: index,
                    leader: if event.group_leader { None } else { leader },
                });
                leader = event.group_leader.then_some(index);
            }
        }
        plan
    }
}

/// The period of `event` at budget `scale`, stores at `store_factor` times that.
fn event_period(event: &SamplingEvent, scale: f64, store_factor: f64) -> u64 {
    let factor = if event.kind == AccessKind::Store {
        scale * store_factor
    } else {
        scale
    };
    period_at(event.base, factor, event.rule)
}

/// `base * scale`, rounded, at least 1 and at most `u64::MAX / 2` (the kernel rejects periods
/// with the top bit set).
#[must_use]
pub fn scaled_period(base: u64, scale: f64) -> u64 {
    let scaled = (base as f64 * scale).round();
    if scaled.is_nan() || scaled < 1.0 {
        1
    } else if scaled >= (u64::MAX / 2) as f64 {
        u64::MAX / 2
    } else {
        scaled as u64
    }
}

/// The period an event that opened at `base` runs at when the budget scales it by `scale`:
/// [`scaled_period`] within the PMU's `rule`, so the kernel never refuses a budget change
/// (since Linux 6.15 `perf_ibs_check_period` rejects IBS periods off the rule with EINVAL).
#[must_use]
pub fn period_at(base: u64, scale: f64, rule: PeriodRule) -> u64 {
    rule.apply(scaled_period(base, scale))
}

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error("changing the sample period to {period}: {source}")]
    SetPeriod {
        period: u64,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error("BPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error(
        "perf_event_open({what}) on CPU {cpu} failed: {source}{hint}",
        hint = perf_open_hint(source)
    )]
    OpenEvent {
        what: String,
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("attaching {program} to the perf event on CPU {cpu}: {source}")]
    Attach {
        program: &'static str,
        cpu: u32,
        #[source]
        source: io::Error,
    },
    #[error("enabling a perf event: {source}")]
    Enable {
        #[source]
        source: io::Error,
    },
    #[error("reading a perf event's count: {source}")]
    Read {
        #[source]
        source: io::Error,
    },
    #[error("disabling a perf event: {source}")]
    Disable {
        #[source]
        source: io::Error,
    },
    #[error("sampler spec has no events to open")]
    NoEvents,
}

fn perf_open_hint(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            " (needs CAP_PERFMON, or kernel.perf_event_paranoid <= -1 for system-wide events)"
        }
        Some(libc::ENOENT | libc::EOPNOTSUPP) => " (this PMU or event does not exist here)",
        Some(libc::EINVAL) => " (the PMU rejected the attributes: precise_ip, period or filters)",
        Some(libc::EMFILE) => " (too many open files: raise LimitNOFILE)",
        _ => "",
    }
}

const fn program_for(kind: AccessKind) -> &'static str {
    match kind {
        AccessKind::Load => names::PROG_SAMPLE_LOAD,
        AccessKind::Store => names::PROG_SAMPLE_STORE,
        AccessKind::Unknown => names::PROG_SAMPLE_ANY,
    }
}

/// One sampling event on one CPU.
#[derive(Clone, Copy, Debug)]
struct SamplingEvent {
    /// Index into [`Sampler::events`].
    index: usize,
    /// The period it opened with.
    base: u64,
    rule: PeriodRule,
    kind: AccessKind,
}

/// A running sampler. Holds the BPF object and the perf events.
pub struct Sampler {
    // Field order is drop order: events close (detaching the programs) before the object.
    events: Vec<OwnedFd>,
    /// The sampling (non-leader) events.
    sampling: Vec<SamplingEvent>,
    /// The period multiplier the budget last set ([`Self::scale_periods`]).
    scale: f64,
    /// Store periods relative to their opening periods ([`Self::set_store_ratio`]).
    store_factor: f64,
    targets: BpfHashMap<MapData, u32, u8>,
    drops: PerCpuArray<MapData, u64>,
    ring: Option<RingBuf<MapData>>,
    ebpf: Ebpf,
}

/// The BPF object with the sampler's configuration, and the programs `spec`'s events need
/// loaded.
fn load_programs(spec: &SamplerSpec) -> Result<Ebpf, SamplerError> {
    let config = SamplerConfig {
        source: spec.source as u8,
        filter_by_target: u8::from(spec.filter_by_target),
        _pad: [0; 2],
        // An eighth of the ring: a wake-up drains thousands of samples, and the ring
        // still has room for the drain timer's worth of samples after it.
        wakeup_bytes: spec.ring_bytes / 8,
    };
    let mut loader = EbpfLoader::new();
    loader
        .override_global(names::GLOBAL_SAMPLER_CONFIG, &config, true)
        .map_max_entries(names::MAP_SAMPLES, spec.ring_bytes);
    let mut ebpf = bpf::load_object(&mut loader)?;

    let mut needed: Vec<&'static str> = spec
        .events
        .iter()
        .filter(|event| !event.group_leader)
        .map(|event| program_for(event.kind))
        .collect();
    needed.sort_unstable();
    needed.dedup();
    for name in needed {
        bpf::load_program(&mut ebpf, name, PerfEvent::load)?;
    }
    Ok(ebpf)
}

/// Opens `spec`'s events on every CPU and attaches each sampling one to its program: the
/// events in the order they close (members before their leader), and the sampling ones.
fn open_events(
    spec: &SamplerSpec,
    ebpf: &Ebpf,
) -> Result<(Vec<OwnedFd>, Vec<SamplingEvent>), SamplerError> {
    let plan = spec.open_plan();
    let mut events = Vec::with_capacity(plan.len());
    let mut sampling = Vec::with_capacity(plan.len());
    // The leader opened last, until the spec after it has joined its group.
    let mut leader: Option<(usize, OwnedFd)> = None;
    for step in plan {
        let (cpu, event) = (step.cpu, &spec.events[step.event]);
        let group = match (&leader, step.leader) {
            (Some((index, fd)), Some(wanted)) if *index == wanted => Some(fd.as_fd()),
            _ => None,
        };
        let cpu_arg = i32::try_from(cpu).unwrap_or(i32::MAX);
        let fd = perf::open(&event.attr, -1, cpu_arg, group).map_err(|source| {
            SamplerError::OpenEvent {
                what: format!(
                    "type {} config {:#x} period {}",
                    event.attr.type_, event.attr.config, event.attr.sample_period
                ),
                cpu,
                source,
            }
        })?;
        // A leader whose member has been opened (or that has none) is done.
        let finished = leader.take().map(|(_, fd)| fd);
        if event.group_leader {
            events.extend(finished);
            leader = Some((step.event, fd));
            continue;
        }
        attach(ebpf, program_for(event.kind), fd.as_fd(), cpu)?;
        // Members before their leader: they close first on drop.
        sampling.push(SamplingEvent {
            index: events.len(),
            base: event.attr.sample_period,
            rule: event.period_rule,
            kind: event.kind,
        });
        events.push(fd);
        events.extend(finished);
    }
    events.extend(leader.map(|(_, fd)| fd));
    Ok((events, sampling))
}

/// Attaches the loaded program `name` to the event `fd` on `cpu`.
fn attach(
    ebpf: &Ebpf,
    name: &'static str,
    fd: BorrowedFd<'_>,
    cpu: u32,
) -> Result<(), SamplerError> {
    let program: &PerfEvent = ebpf
        .program(name)
        .ok_or(BpfError::MissingProgram(name))?
        .try_into()
        .map_err(|source| BpfError::Program { name, source })?;
    let program_fd = program
        .fd()
        .map_err(|source| BpfError::Program { name, source })?;
    perf::set_bpf(fd, program_fd.as_fd()).map_err(|source| SamplerError::Attach {
        program: name,
        cpu,
        source,
    })
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Loads the programs, opens and attaches the events on every CPU, then enables them.
    /// On any error everything opened so far is closed again.
    pub fn start(spec: &SamplerSpec) -> Result<Self, SamplerError> {
        if spec.events.iter().all(|event| event.group_leader) {
            return Err(SamplerError::NoEvents);
        }
        let mut ebpf = load_programs(spec)?;
        let (events, sampling) = open_events(spec, &ebpf)?;
        let targets = bpf::take_map(&mut ebpf, names::MAP_TARGETS)?;
        let drops = bpf::take_map(&mut ebpf, names::MAP_DROPS)?;
        let ring = bpf::take_map(&mut ebpf, names::MAP_SAMPLES)?;
        let sampler = Self {
            events,
            sampling,
            scale: 1.0,
            store_factor: 1.0,
            targets,
            drops,
            ring: Some(ring),
            ebpf,
        };
        // Members of a group only count while their leader is enabled too: enable all.
        for event in &sampler.events {
            perf::enable(event.as_fd()).map_err(|source| SamplerError::Enable { source })?;
        }
        Ok(sampler)
    }

    /// The sample ring, for the ingest task. Taken once.
    pub fn take_ring(&mut self) -> Option<RingBuf<MapData>> {
        self.ring.take()
    }

    /// Starts sampling process `pid` (its thread-group id).
    pub fn add_target(&mut self, pid: u32) -> Result<(), SamplerError> {
        self.targets
            .insert(pid, 1, 0)
            .map_err(|source| SamplerError::Map {
                name: names::MAP_TARGETS,
                source,
            })
    }

    /// Stops sampling `pid`. Removing a pid that is not a target is not an error.
    pub fn remove_target(&mut self, pid: u32) -> Result<(), SamplerError> {
        match self.targets.remove(&pid) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(SamplerError::Map {
                name: names::MAP_TARGETS,
                source,
            }),
        }
    }

    /// Samples dropped in BPF so far, summed over CPUs, by reason.
    pub fn drop_counts(&self) -> Result<BTreeMap<&'static str, u64>, SamplerError> {
        let mut counts = BTreeMap::new();
        for reason in DropReason::ALL {
            let per_cpu =
                self.drops
                    .get(&(reason as u32), 0)
                    .map_err(|source| SamplerError::Map {
                        name: names::MAP_DROPS,
                        source,
                    })?;
            counts.insert(reason.label(), per_cpu.iter().sum());
        }
        Ok(counts)
    }

    /// Kernel-measured run time of the sampler programs (zero unless run-time stats are on,
    /// see [`bpf::enable_run_time_stats`]).
    #[must_use]
    pub fn program_stats(&self) -> Vec<bpf::ProgramStats> {
        bpf::program_stats(&self.ebpf)
    }

    /// Sets every sampling event's period to its starting period times `scale` (at least 1,
    /// within its PMU's [`PeriodRule`]), so a source with several events (PEBS loads and stores)
    /// keeps their ratio. Returns the periods now in force, one per spec event kind as opened,
    /// for logs and metrics.
    pub fn scale_periods(&mut self, scale: f64) -> Result<Vec<u64>, SamplerError> {
        let applied = self.apply_periods(scale, self.store_factor)?;
        self.scale = scale;
        Ok(applied)
    }

    /// Sets the store events' periods to `factor` times their opening periods (at the scale
    /// in force), leaving the loads alone: the PEBS store:load split following what reaches
    /// memory ([`memory_share`](crate::sources::pebs::memory_share)). Returns the periods now in force.
    pub fn set_store_ratio(&mut self, factor: f64) -> Result<Vec<u64>, SamplerError> {
        let applied = self.apply_periods(self.scale, factor)?;
        self.store_factor = factor;
        Ok(applied)
    }

    fn apply_periods(&self, scale: f64, store_factor: f64) -> Result<Vec<u64>, SamplerError> {
        let mut applied = Vec::with_capacity(self.sampling.len());
        for event in &self.sampling {
            let period = event_period(event, scale, store_factor);
            perf::set_period(self.events[event.index].as_fd(), period)
                .map_err(|source| SamplerError::SetPeriod { period, source })?;
            applied.push(period);
        }
        Ok(applied)
    }

    /// Events counted so far by the sampling events of `kind` (sampled or not), over every
    /// CPU.
    pub fn counted(&self, kind: AccessKind) -> Result<u64, SamplerError> {
        self.sampling
            .iter()
            .filter(|event| event.kind == kind)
            .try_fold(0u64, |total, event| {
                let count = perf::read_count(self.events[event.index].as_fd())
                    .map_err(|source| SamplerError::Read { source })?;
                Ok(total.saturating_add(count))
            })
    }

    /// Stops every event (the programs stay attached; dropping the sampler detaches them), so
    /// a reader can drain the ring knowing nothing more arrives.
    pub fn disable(&mut self) -> Result<(), SamplerError> {
        for event in &self.events {
            perf::disable(event.as_fd()).map_err(|source| SamplerError::Disable { source })?;
        }
        Ok(())
    }

    /// Number of sampling events (group leaders that only count are not among them).
    #[must_use]
    pub fn sampling_streams(&self) -> usize {
        self.sampling.len()
    }

    /// Number of perf events open (one or two per CPU).
    #[must_use]
    pub fn event_count(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(group_leader: bool, cpus: Option<Vec<u32>>) -> EventSpec {
        EventSpec {
            attr: PerfAttr::default(),
            kind: AccessKind::Load,
            group_leader,
            cpus,
            period_rule: PeriodRule::ANY,
        }
    }

    fn spec(events: Vec<EventSpec>, cpus: Vec<u32>) -> SamplerSpec {
        SamplerSpec {
            source: SampleSource::Pebs,
            events,
            cpus,
            ring_bytes: 4096,
            filter_by_target: true,
        }
    }

    fn plan(spec: &SamplerSpec) -> Vec<(u32, usize, Option<usize>)> {
        spec.open_plan()
            .into_iter()
            .map(|p| (p.cpu, p.event, p.leader))
            .collect()
    }

    #[test]
    fn events_without_cpus_open_everywhere() {
        let s = crate::sources::swfault::spec(vec![0, 3], 1, 4096, false);
        assert_eq!(plan(&s), vec![(0, 0, None), (3, 0, None)]);
    }

    #[test]
    fn a_leader_groups_only_the_next_event_on_its_cpus() {
        let s = spec(
            vec![
                event(true, Some(vec![0])),
                event(false, None),
                event(false, None),
            ],
            vec![0, 1],
        );
        assert_eq!(
            plan(&s),
            vec![
                (0, 0, None),
                (0, 1, Some(0)),
                (0, 2, None),
                // No leader on CPU 1: the member opens on its own.
                (1, 1, None),
                (1, 2, None),
            ]
        );
    }

    #[test]
    fn budget_changes_keep_ibs_periods_on_the_op_counters_rule() {
        let ibs = crate::sources::ibs::PERIOD_RULE;
        let base = crate::sources::ibs::round_period(0x1_0000);
        for scale in [0.0001, 0.013, 0.5, 0.77, 1.0, 1.37, 3.3, 1000.0] {
            let period = period_at(base, scale, ibs);
            assert_eq!(period % 16, 0, "scale {scale}: period {period:#x}");
            assert!(period >= 0x90, "scale {scale}: period {period:#x}");
            // Rounded up: a period the budget chose is never shorter than it asked for.
            assert!(period as f64 >= (base as f64 * scale).round().max(1.0));
        }
        // PEBS takes any period.
        assert_eq!(period_at(64_000, 1.37, PeriodRule::ANY), 87_680);
    }

    #[test]
    fn the_store_ratio_moves_only_the_store_periods_and_composes_with_the_budget() {
        let event = |kind, base| SamplingEvent {
            index: 0,
            base,
            rule: PeriodRule::ANY,
            kind,
        };
        let (load, store) = (
            event(AccessKind::Load, 192_000),
            event(AccessKind::Store, 960_000),
        );
        // Opened 5 load periods apart; stores measured memory-bound: factor 1/5.
        assert_eq!(event_period(&load, 1.0, 0.2), 192_000);
        assert_eq!(event_period(&store, 1.0, 0.2), 192_000);
        // The budget doubles every period afterwards; the stores keep their factor.
        assert_eq!(event_period(&load, 2.0, 0.2), 384_000);
        assert_eq!(event_period(&store, 2.0, 0.2), 384_000);
        assert_eq!(event_period(&store, 2.0, 1.0), 1_920_000);
    }

    #[test]
    fn scaled_periods_stay_valid() {
        assert_eq!(scaled_period(1000, 2.5), 2500);
        assert_eq!(
            scaled_period(1000, 0.0001),
            1,
            "never 0: that would mean frequency mode"
        );
        assert_eq!(scaled_period(3, f64::NAN), 1);
        assert_eq!(scaled_period(u64::MAX / 4, 1e6), u64::MAX / 2);
    }
}
