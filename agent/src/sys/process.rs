//! Per-process knobs the test workload and `memtide exec` need.

use std::io;

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
    let page = 4096usize;
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
