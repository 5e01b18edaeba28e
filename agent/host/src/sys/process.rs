//! Per-process knobs the test workload and `memtide exec` need.

use std::io;

use memtide_core::units::PAGE_SIZE;

/// Turns transparent huge pages off for the calling process (`PR_SET_THP_DISABLE`), so every
/// 4 KiB page of a fresh buffer faults on its own: what page-granular tests need on kernels
/// whose THP mode is `always`.
pub fn disable_thp() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Gives the pages under `buffer` back to the kernel (`MADV_DONTNEED`): the next access to
/// each page faults in a fresh zero page. The workload uses it to produce page faults on
/// demand without unmapping memory Rust still owns.
pub fn discard_pages(buffer: &mut [u8]) -> io::Result<()> {
    let start = buffer.as_mut_ptr();
    let page = PAGE_SIZE as usize;
    let misalignment = start as usize % page;
    if misalignment != 0 || !buffer.len().is_multiple_of(page) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "discard_pages needs a page-aligned, whole-page buffer",
        ));
    }
    // SAFETY: the range is exactly the caller's exclusively borrowed, page-aligned buffer of
    // private anonymous memory; MADV_DONTNEED only replaces its contents with zeros, which
    // are valid `u8` values, and no other reference to it exists during the call.
    let ret = unsafe { libc::madvise(start.cast(), buffer.len(), libc::MADV_DONTNEED) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// CPU time this process has used so far, all threads, user and system
/// (`CLOCK_PROCESS_CPUTIME_ID`: nanosecond resolution, unlike the 10 ms ticks of
/// /proc/self/stat, so a 1 % budget can be checked over a few seconds).
pub fn cpu_time() -> io::Result<std::time::Duration> {
    clock_time(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time the calling thread has used so far, user and system (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> io::Result<std::time::Duration> {
    clock_time(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_time(clock: libc::clockid_t) -> io::Result<std::time::Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live, writable timespec for the duration of the call.
    let ret = unsafe { libc::clock_gettime(clock, &raw mut now) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0);
    Ok(std::time::Duration::new(secs, nanos))
}
