//! Per-CPU drop counters shared by every program: a record not passed on is counted, never
//! waited for.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use memtide_common::DropReason;

/// Per-CPU drop counters, indexed by `DropReason`.
#[map]
static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DropReason::COUNT, 0);

#[inline(always)]
pub(crate) fn count_drop(reason: DropReason) {
    if let Some(counter) = DROPS.get_ptr_mut(reason as u32) {
        // SAFETY: the pointer comes from a per-CPU array slot of this CPU; BPF programs on one
        // CPU do not preempt each other for the same perf event, so the increment is not racy.
        unsafe { *counter += 1 };
    }
}
