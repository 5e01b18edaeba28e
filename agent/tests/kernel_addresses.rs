//! Privileged, real kernel and real BPF: samples whose data address is the kernel's are
//! dropped inside BPF and counted as `kernel_address`.
//!
//! IBS cannot exclude the kernel (`PERF_PMU_CAP_NO_EXCLUDE` until Linux 6.14, and an opt-in
//! software filter after), so its op samples include the kernel's own accesses. This machine has
//! no IBS; a hardware breakpoint on a kernel address produces the same thing, a perf sample
//! whose `addr` is a kernel address (`perf_bp_event` stamps `bp_addr` as the sample's address),
//! through the very program IBS uses (`on_sample_any`). The breakpoint is an execute breakpoint
//! on the `getppid` system call, which the test then calls: kallsyms lists kernel text on every
//! kernel, data only with `CONFIG_KALLSYMS_ALL`. x86 allows kernel execute breakpoints only
//! on kernels with kprobes: the test skips, saying so, where the kernel refuses the event (this
//! host's kernel), and runs in the VM (Debian's kernel), where `make vm-test` runs it.
mod support;

use memtide::sources::perf::{
    budget::PeriodRule,
    sampler::{EventSpec, Sampler, SamplerSpec},
};
use memtide_common::{AccessKind, KERNEL_SPACE_START, SampleSource};
use memtide_host::sys::perf::{self, PerfAttr};

const SYSCALL: &str = "__x64_sys_getppid";

/// Where the kernel's `getppid` starts (0 in kallsyms when kernel pointers are hidden).
fn kernel_function() -> Option<u64> {
    let symbols = std::fs::read_to_string("/proc/kallsyms").ok()?;
    symbols.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (addr, _kind, name) = (fields.next()?, fields.next()?, fields.next()?);
        let addr = u64::from_str_radix(addr, 16).ok()?;
        (name == SYSCALL && addr >= KERNEL_SPACE_START).then_some(addr)
    })
}

const TEST: &str = "samples_of_kernel_addresses_are_dropped_in_bpf_and_counted";

/// Skips on a host whose kernel cannot give the test its event; the VM's kernel must.
fn cannot_run(reason: &str) {
    assert!(
        !support::in_vm(),
        "{TEST}: {reason}, but the VM's kernel must allow it"
    );
    eprintln!("skipping {TEST}: {reason}");
}

#[test]
fn samples_of_kernel_addresses_are_dropped_in_bpf_and_counted() {
    if support::skip_unless_root(TEST) {
        return;
    }
    let Some(addr) = kernel_function() else {
        return cannot_run(&format!(
            "no {SYSCALL} address in /proc/kallsyms (not x86-64, or kptr_restrict)"
        ));
    };
    let cpus = aya::util::online_cpus().expect("online CPUs");
    let spec = SamplerSpec {
        source: SampleSource::Ibs,
        events: vec![EventSpec {
            attr: PerfAttr {
                type_: perf::TYPE_BREAKPOINT,
                config1: addr,
                // x86 execute breakpoints are sizeof(long) long.
                config2: 8,
                bp_type: perf::BREAKPOINT_X,
                sample_period: 1,
                sample_type: perf::SAMPLE_ADDR | perf::SAMPLE_TID,
                ..PerfAttr::default()
            },
            kind: AccessKind::Unknown,
            group_leader: false,
            cpus: None,
            period_rule: PeriodRule::ANY,
        }],
        cpus,
        ring_bytes: 1 << 16,
        filter_by_target: true,
    };
    let mut sampler = match Sampler::start(&spec) {
        Ok(sampler) => sampler,
        Err(error) => {
            return cannot_run(&format!(
                "the kernel refuses an execute breakpoint on {SYSCALL} (no kprobes?): {error}"
            ));
        }
    };
    sampler.add_target(std::process::id()).expect("add target");
    let mut ring = sampler.take_ring().expect("ring");
    const CALLS: u64 = 1000;
    for _ in 0..CALLS {
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    sampler.disable().expect("disable");
    let drops = sampler.drop_counts().expect("drop counts");
    assert!(
        drops["kernel_address"] >= CALLS,
        "{CALLS} calls of getppid under a breakpoint, too few kernel_address drops: {drops:?}"
    );
    let mut delivered = 0;
    while let Some(item) = ring.next() {
        delivered += 1;
        drop(item);
    }
    assert_eq!(delivered, 0, "kernel-address samples reached the ring");
    drop(ring);
    drop(sampler);
    support::assert_no_memtide_bpf_programs();
}
