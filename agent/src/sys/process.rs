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
