//! memtide's BPF programs, one module per program and the maps only it uses:
//!
//! * [`perf`]: the `perf_event` sampler every PMU and software-event source (PEBS, IBS, software
//!   page faults) attaches to the events the agent opens;
//! * [`damon`]: the `damon:damon_aggregated` tracepoint forwarder of memtide's kdamond;
//! * [`drops`]: the drop counters both share.
//!
//! The object's program, map and global names are the agent's contract
//! (`memtide_common::names`); they come from the items' own names, not from these modules.
//! Nothing here blocks or loops: a full ring drops the record and counts it in `DROPS`.
#![no_std]
#![no_main]
#![expect(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand the context over by value"
)]

mod damon;
mod drops;
mod perf;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
