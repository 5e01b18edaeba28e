//! memtide's BPF programs.
//!
//! * `on_sample_{load,store,any}`: `perf_event` programs attached by the agent to the sampling
//!   events it opens itself (PEBS, IBS, Arm SPE or the software page-fault event, all with
//!   `PERF_SAMPLE_ADDR`). They keep samples of target processes and push them to `SAMPLES`.
//!   Three copies differ only in the access kind they stamp, because an event opened for
//!   `mem-stores` cannot say so itself at run time.
//! * `on_damon_aggregated`: tracepoint program on `damon:damon_aggregated`; forwards each region
//!   to `DAMON_REGIONS`. Field offsets come from tracefs at load time (`DAMON_OFFSETS`).
//!
//! Nothing here blocks or loops: a full ring drops the record and counts it in `DROPS`.
#![no_std]
#![no_main]
#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand the context over by value"
)]

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::{map, perf_event, tracepoint},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{PerfEventContext, TracePointContext},
};
use memtide_common::{
    AccessKind, AccessSample, DamonFieldOffsets, DamonRegion, DropReason, KERNEL_SPACE_START,
    SamplerConfig,
};

/// Accepted samples. Sized by the agent at load time (`set_max_entries`); this is the default.
#[map]
static SAMPLES: RingBuf = RingBuf::with_byte_size(1 << 22, 0);

/// DAMON regions, one record per region per aggregation interval.
#[map]
static DAMON_REGIONS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Thread-group ids of the processes to sample (value unused). Maintained by the agent.
#[map]
static TARGETS: HashMap<u32, u8> = HashMap::with_max_entries(16384, 0);

/// Thread-group id of the kdamond memtide started (slot 0). The tracepoint fires for every
/// kdamond; regions of one memtide did not start must not be mistaken for its targets'.
/// 0 until the agent knows the pid: nothing is forwarded before then.
#[map]
static DAMON_OWNER: Array<u32> = Array::with_max_entries(1, 0);

/// Per-CPU drop counters, indexed by `DropReason`.
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DropReason::COUNT, 0);

/// Set by the agent with `EbpfLoader::set_global` before loading.
#[unsafe(no_mangle)]
static SAMPLER_CONFIG: SamplerConfig = SamplerConfig {
    source: 0,
    filter_by_target: 1,
    _pad: [0; 2],
    wakeup_bytes: 0,
};

/// Set by the agent from `events/damon/damon_aggregated/format` before loading.
#[unsafe(no_mangle)]
static DAMON_OFFSETS: DamonFieldOffsets = DamonFieldOffsets {
    target_id: 8,
    nr_regions: 16,
    start: 24,
    end: 32,
    nr_accesses: 40,
    age: 44,
};

#[inline(always)]
fn count_drop(reason: DropReason) {
    if let Some(counter) = DROPS.get_ptr_mut(reason as u32) {
        // SAFETY: the pointer comes from a per-CPU array slot of this CPU; BPF programs on one
        // CPU do not preempt each other for the same perf event, so the increment is not racy.
        unsafe { *counter += 1 };
    }
}

#[inline(always)]
fn on_sample(ctx: &PerfEventContext, kind: AccessKind) -> u32 {
    // SAFETY: the global is a plain value the loader may have rewritten; a volatile read keeps
    // the compiler from folding the default above into the program.
    let config = unsafe { core::ptr::read_volatile(&SAMPLER_CONFIG) };
    let pid = ctx.tgid();
    if config.filter_by_target != 0 && TARGETS.get_ptr(pid).is_none() {
        count_drop(DropReason::NotTarget);
        return 0;
    }
    // SAFETY: ctx.ctx points at the kernel's bpf_perf_event_data for this invocation; the
    // verifier rewrites the field loads into reads of the perf sample.
    let (addr, period) = unsafe { ((*ctx.ctx).addr, (*ctx.ctx).sample_period) };
    if addr == 0 {
        count_drop(DropReason::NoAddress);
        return 0;
    }
    if addr >= KERNEL_SPACE_START {
        count_drop(DropReason::KernelAddress);
        return 0;
    }
    let Some(mut entry) = SAMPLES.reserve::<AccessSample>(0) else {
        count_drop(DropReason::RingFull);
        return 0;
    };
    entry.write(AccessSample {
        addr,
        weight: period,
        pid,
        tid: ctx.pid(),
        // SAFETY: helper without preconditions.
        cpu: unsafe { aya_ebpf::helpers::bpf_get_smp_processor_id() },
        kind: kind as u8,
        source: config.source,
        _pad: [0; 2],
    });
    // Batch wake-ups: the agent is woken once enough samples wait, and drains on a timer.
    let waiting = SAMPLES.query(u64::from(BPF_RB_AVAIL_DATA));
    let flags = if waiting >= u64::from(config.wakeup_bytes) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(u64::from(flags));
    // 0: the kernel skips its own perf ring output for this sample; ours is the only copy.
    0
}

#[perf_event]
fn on_sample_load(ctx: PerfEventContext) -> u32 {
    on_sample(&ctx, AccessKind::Load)
}

#[perf_event]
fn on_sample_store(ctx: PerfEventContext) -> u32 {
    on_sample(&ctx, AccessKind::Store)
}

#[perf_event]
fn on_sample_any(ctx: PerfEventContext) -> u32 {
    on_sample(&ctx, AccessKind::Unknown)
}

#[tracepoint]
fn on_damon_aggregated(ctx: TracePointContext) -> u32 {
    // The tracepoint runs in the kdamond thread, so the current task says whose region it is.
    let owner = DAMON_OWNER.get(0).copied().unwrap_or(0);
    if owner == 0 || ctx.tgid() != owner {
        count_drop(DropReason::NotTarget);
        return 0;
    }
    // SAFETY: see SAMPLER_CONFIG.
    let offsets = unsafe { core::ptr::read_volatile(&DAMON_OFFSETS) };
    // SAFETY: read_at uses bpf_probe_read on the tracepoint record; a bad offset yields an
    // error, not a fault.
    let region = unsafe {
        match (
            ctx.read_at::<u64>(offsets.target_id as usize),
            ctx.read_at::<u32>(offsets.nr_regions as usize),
            ctx.read_at::<u64>(offsets.start as usize),
            ctx.read_at::<u64>(offsets.end as usize),
            ctx.read_at::<u32>(offsets.nr_accesses as usize),
            ctx.read_at::<u32>(offsets.age as usize),
        ) {
            (Ok(target), Ok(nr_regions), Ok(start), Ok(end), Ok(nr_accesses), Ok(age)) => {
                DamonRegion {
                    target,
                    start,
                    end,
                    nr_accesses,
                    age,
                    nr_regions,
                    _pad: 0,
                }
            }
            _ => return 0,
        }
    };
    if DAMON_REGIONS.output::<DamonRegion>(&region, 0).is_err() {
        count_drop(DropReason::RingFull);
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
