//! `on_sample_{load,store,any}`: `perf_event` programs attached by the agent to the sampling
//! events it opens itself (PEBS, IBS, Arm SPE or the software page-fault event, all with
//! `PERF_SAMPLE_ADDR`). They keep samples of target processes and push them to `SAMPLES`.
//! Three copies differ only in the access kind they stamp, because an event opened for
//! `mem-stores` cannot say so itself at run time.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::{map, perf_event},
    maps::{HashMap, RingBuf},
    programs::PerfEventContext,
};
use memtide_common::{AccessKind, AccessSample, DropReason, KERNEL_SPACE_START, SamplerConfig};

use crate::drops::count_drop;

/// Accepted samples. Sized by the agent at load time (`set_max_entries`); this is the default.
#[map]
static SAMPLES: RingBuf = RingBuf::with_byte_size(1 << 22, 0);

/// Thread-group ids of the processes to sample (value unused). Maintained by the agent.
#[map]
static TARGETS: HashMap<u32, u8> = HashMap::with_max_entries(16384, 0);

/// Set by the agent with `EbpfLoader::set_global` before loading.
#[unsafe(no_mangle)]
static SAMPLER_CONFIG: SamplerConfig = SamplerConfig {
    source: 0,
    filter_by_target: 1,
    _pad: [0; 2],
    wakeup_bytes: 0,
};

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
