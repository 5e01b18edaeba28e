//! `on_damon_aggregated`: tracepoint program on `damon:damon_aggregated`; forwards each region
//! of memtide's own kdamond to `DAMON_REGIONS`. Field offsets come from tracefs at load time
//! (`DAMON_OFFSETS`).

use aya_ebpf::{
    EbpfContext as _,
    macros::{map, tracepoint},
    maps::{Array, RingBuf},
    programs::TracePointContext,
};
use memtide_common::{DamonFieldOffsets, DamonRegion, DropReason};

use crate::drops::count_drop;

/// DAMON regions, one record per region per aggregation interval.
#[map]
static DAMON_REGIONS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Thread-group id of the kdamond memtide started (slot 0). The tracepoint fires for every
/// kdamond; regions of one memtide did not start must not be mistaken for its targets'.
/// 0 until the agent knows the pid: nothing is forwarded before then.
#[map]
static DAMON_OWNER: Array<u32> = Array::with_max_entries(1, 0);

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

#[tracepoint]
fn on_damon_aggregated(ctx: TracePointContext) -> u32 {
    // The tracepoint runs in the kdamond thread, so the current task says whose region it is.
    let owner = DAMON_OWNER.get(0).copied().unwrap_or(0);
    if owner == 0 || ctx.tgid() != owner {
        count_drop(DropReason::NotTarget);
        return 0;
    }
    // SAFETY: as for `perf::SAMPLER_CONFIG`, read volatile because the loader rewrites it.
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
