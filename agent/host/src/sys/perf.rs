//! perf_event_open(2) and the ioctls that attach a loaded BPF program to the event.
//!
//! aya's own `PerfEvent::attach` cannot request `PERF_SAMPLE_ADDR`, `precise_ip` or `config1`
//! (PEBS load latency), so the agent opens its events here and hands the program over with
//! `PERF_EVENT_IOC_SET_BPF`. Dropping the returned fd detaches the program.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
};

use perf_event_open_sys::{bindings, ioctls};

/// `PERF_TYPE_SOFTWARE`.
pub const TYPE_SOFTWARE: u32 = bindings::PERF_TYPE_SOFTWARE;
/// `PERF_TYPE_BREAKPOINT`: a hardware data breakpoint; its samples carry the watched address.
pub const TYPE_BREAKPOINT: u32 = bindings::PERF_TYPE_BREAKPOINT;
/// `HW_BREAKPOINT_X`: trap on execution of the address.
pub const BREAKPOINT_X: u32 = 4;
/// `PERF_TYPE_RAW`: a core PMU's raw event encoding (the `cpu` PMU's own type is the same 4).
pub const TYPE_RAW: u32 = bindings::PERF_TYPE_RAW;
/// `PERF_TYPE_HW_CACHE`: the kernel's generic cache events, encoded by [`hw_cache_config`].
pub const TYPE_HW_CACHE: u32 = bindings::PERF_TYPE_HW_CACHE;
/// `PERF_COUNT_HW_CACHE_LL`: the last-level cache.
pub const HW_CACHE_LL: u64 = bindings::PERF_COUNT_HW_CACHE_LL as u64;
/// `PERF_COUNT_HW_CACHE_OP_READ` and `_OP_WRITE`.
pub const HW_CACHE_OP_READ: u64 = bindings::PERF_COUNT_HW_CACHE_OP_READ as u64;
pub const HW_CACHE_OP_WRITE: u64 = bindings::PERF_COUNT_HW_CACHE_OP_WRITE as u64;
/// `PERF_COUNT_HW_CACHE_RESULT_MISS`.
pub const HW_CACHE_RESULT_MISS: u64 = bindings::PERF_COUNT_HW_CACHE_RESULT_MISS as u64;

/// A generic cache event's `config` (`cache | op << 8 | result << 16`, as
/// `include/uapi/linux/perf_event.h` lays it out).
#[must_use]
pub const fn hw_cache_config(cache: u64, op: u64, result: u64) -> u64 {
    cache | (op << 8) | (result << 16)
}

/// `PERF_COUNT_SW_PAGE_FAULTS`.
pub const SW_PAGE_FAULTS: u64 = bindings::PERF_COUNT_SW_PAGE_FAULTS as u64;
/// `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = bindings::PERF_SAMPLE_TID as u64;
/// `PERF_SAMPLE_ADDR`: the data address; without it the BPF program's `ctx.addr` is 0 for
/// hardware events.
pub const SAMPLE_ADDR: u64 = bindings::PERF_SAMPLE_ADDR as u64;
/// `PERF_SAMPLE_WEIGHT`: load latency on PEBS.
pub const SAMPLE_WEIGHT: u64 = bindings::PERF_SAMPLE_WEIGHT as u64;
/// `PERF_SAMPLE_DATA_SRC`: where the access was served from.
pub const SAMPLE_DATA_SRC: u64 = bindings::PERF_SAMPLE_DATA_SRC as u64;

/// The fields of `perf_event_attr` memtide sets, as plain data. Sources build these (and test
/// them field by field against fixture PMUs); [`open`] turns one into the kernel struct.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfAttr {
    /// PMU type: a `PERF_TYPE_*` constant or a dynamic PMU's `type` from sysfs.
    pub type_: u32,
    pub config: u64,
    /// PEBS: load-latency threshold (`ldlat`); IBS: extra filters on newer parts.
    pub config1: u64,
    pub config2: u64,
    /// Events between two samples.
    pub sample_period: u64,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// 0..=3; PEBS needs at least 1.
    pub precise_ip: u8,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub exclude_guest: bool,
    /// Breakpoint events (`PERF_TYPE_BREAKPOINT`): `HW_BREAKPOINT_*` access bits; the address
    /// and length go in `config1` and `config2` (the kernel's `bp_addr` and `bp_len`).
    pub bp_type: u32,
}

impl PerfAttr {
    fn to_kernel(&self) -> bindings::perf_event_attr {
        let mut attr = bindings::perf_event_attr::default();
        attr.type_ = self.type_;
        attr.size = u32::try_from(size_of::<bindings::perf_event_attr>())
            .expect("perf_event_attr fits in u32");
        attr.config = self.config;
        attr.sample_type = self.sample_type;
        attr.__bindgen_anon_1.sample_period = self.sample_period;
        attr.__bindgen_anon_3.config1 = self.config1;
        attr.__bindgen_anon_4.config2 = self.config2;
        // Created disabled: the program is attached first, then the event is enabled, so no
        // sample is ever taken without the filter in place.
        attr.set_disabled(1);
        attr.set_precise_ip(u64::from(self.precise_ip));
        attr.set_exclude_kernel(u64::from(self.exclude_kernel));
        attr.set_exclude_hv(u64::from(self.exclude_hv));
        attr.set_exclude_guest(u64::from(self.exclude_guest));
        attr.bp_type = self.bp_type;
        attr
    }
}

fn check(ret: i32) -> io::Result<i32> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Opens one sampling event. `pid = -1, cpu = N` samples every process on CPU N (the agent's
/// mode: targets are filtered in BPF); `group` makes the event a member of a group, as
/// Sapphire Rapids' `mem-loads` needs under its `mem-loads-aux` leader.
pub fn open(
    attr: &PerfAttr,
    pid: i32,
    cpu: i32,
    group: Option<BorrowedFd<'_>>,
) -> io::Result<OwnedFd> {
    let mut kernel_attr = attr.to_kernel();
    let group_fd: RawFd = group.map_or(-1, |fd| fd.as_raw_fd());
    // SAFETY: kernel_attr is a fully initialised perf_event_attr whose `size` matches the
    // struct we pass; the kernel only reads it (and may write `size` back on E2BIG).
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &raw mut kernel_attr,
            pid,
            cpu,
            group_fd,
            libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    let fd = check(fd)?;
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches a loaded `perf_event` BPF program to the event (`PERF_EVENT_IOC_SET_BPF`).
pub fn set_bpf(event: BorrowedFd<'_>, program: BorrowedFd<'_>) -> io::Result<()> {
    let program = u32::try_from(program.as_raw_fd())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative program fd"))?;
    // SAFETY: both descriptors are open for the duration of the call; the ioctl takes the
    // program fd by value.
    check(unsafe { ioctls::SET_BPF(event.as_raw_fd(), program) }).map(drop)
}

/// Starts counting and sampling (`PERF_EVENT_IOC_ENABLE`).
pub fn enable(event: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the descriptor is open; the argument is unused by the kernel for this ioctl.
    check(unsafe { ioctls::ENABLE(event.as_raw_fd(), 0) }).map(drop)
}

/// Changes the sample period of a running event (`PERF_EVENT_IOC_PERIOD`); the new period
/// takes effect from the event's next overflow.
pub fn set_period(event: BorrowedFd<'_>, period: u64) -> io::Result<()> {
    let mut period = period.max(1);
    // The kernel reads the period through a pointer (`copy_from_user(&value, (u64 __user
    // *)arg, 8)`); the binding types the argument as a plain u64, so pass the address in it.
    let pointer = (&raw mut period) as u64;
    // SAFETY: the descriptor is open; the kernel reads one u64 at `pointer`, which is a live
    // local for the duration of the call.
    check(unsafe { ioctls::PERIOD(event.as_raw_fd(), pointer) }).map(drop)
}

/// The event's count so far (a `read(2)` with the default `read_format`: one u64). For a
/// sampling event this is every event counted, not only the sampled ones.
pub fn read_count(event: BorrowedFd<'_>) -> io::Result<u64> {
    let mut count = 0u64;
    // SAFETY: the descriptor is open and `count` is a live u64 the kernel writes at most 8
    // bytes into.
    let read = unsafe {
        libc::read(
            event.as_raw_fd(),
            (&raw mut count).cast::<libc::c_void>(),
            size_of::<u64>(),
        )
    };
    match usize::try_from(read) {
        Ok(n) if n == size_of::<u64>() => Ok(count),
        Ok(n) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("perf event read returned {n} bytes, expected 8"),
        )),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Stops the event (`PERF_EVENT_IOC_DISABLE`); closing the fd also does.
pub fn disable(event: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: as for enable.
    check(unsafe { ioctls::DISABLE(event.as_raw_fd(), 0) }).map(drop)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn generic_cache_events_encode_as_the_uapi_header_says() {
        // `perf list`'s LLC-store-misses: PERF_COUNT_HW_CACHE_LL (2), OP_WRITE (1), MISS (1).
        assert_eq!(
            hw_cache_config(HW_CACHE_LL, HW_CACHE_OP_WRITE, HW_CACHE_RESULT_MISS),
            0x1_0102
        );
        assert_eq!(
            hw_cache_config(HW_CACHE_LL, HW_CACHE_OP_READ, HW_CACHE_RESULT_MISS),
            0x1_0002
        );
    }

    #[test]
    fn a_software_counter_reads_its_count() {
        // The task clock of this thread counts wherever perf exists (paranoid <= 2 allows a
        // process to count itself); where perf_event_open is refused the test says so.
        let attr = PerfAttr {
            type_: TYPE_SOFTWARE,
            config: u64::from(bindings::PERF_COUNT_SW_TASK_CLOCK),
            ..PerfAttr::default()
        };
        let event = match open(&attr, 0, -1, None) {
            Ok(event) => event,
            Err(error) => {
                eprintln!("skipping: perf_event_open refused here: {error}");
                return;
            }
        };
        enable(event.as_fd()).unwrap();
        let spin: u64 = (0..2_000_000u64).map(std::hint::black_box).sum();
        std::hint::black_box(spin);
        let first = read_count(event.as_fd()).unwrap();
        assert!(first > 0, "the task clock counted nothing");
        disable(event.as_fd()).unwrap();
    }

    #[test]
    fn attr_fields_reach_the_kernel_struct() {
        let attr = PerfAttr {
            type_: 4,
            config: 0x1cd,
            config1: 3,
            config2: 7,
            sample_period: 4001,
            sample_type: SAMPLE_ADDR | SAMPLE_TID | SAMPLE_WEIGHT,
            precise_ip: 2,
            exclude_kernel: true,
            exclude_hv: true,
            exclude_guest: false,
            bp_type: 0,
        };
        let kernel = attr.to_kernel();
        assert_eq!(kernel.type_, 4);
        assert_eq!(kernel.config, 0x1cd);
        assert_eq!(kernel.sample_type, SAMPLE_ADDR | SAMPLE_TID | SAMPLE_WEIGHT);
        assert_eq!(kernel.precise_ip(), 2);
        assert_eq!(kernel.exclude_kernel(), 1);
        assert_eq!(kernel.exclude_hv(), 1);
        assert_eq!(kernel.exclude_guest(), 0);
        assert_eq!(
            kernel.disabled(),
            1,
            "events start disabled until the program is attached"
        );
        assert_eq!(kernel.size as usize, size_of::<bindings::perf_event_attr>());
        // SAFETY: reading plain integer fields of unions we just wrote.
        unsafe {
            assert_eq!(kernel.__bindgen_anon_1.sample_period, 4001);
            assert_eq!(kernel.__bindgen_anon_3.config1, 3);
            assert_eq!(kernel.__bindgen_anon_4.config2, 7);
        }
    }
}
