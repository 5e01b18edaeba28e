//! The only place in memtide's agent with `unsafe`: thin, safe wrappers over the system calls
//! the rest of the agent needs and no crate wraps (perf_event_open + its ioctls, move_pages,
//! mbind, set_mempolicy, pidfd_open, process_madvise, pagemap's PAGEMAP_SCAN ioctl). Each
//! wrapper returns `io::Result` and owns the file descriptors it creates.
#![allow(
    unsafe_code,
    reason = "system call wrappers; every block carries a SAFETY comment"
)]

#[cfg(feature = "tokio")]
pub mod async_fd;
pub mod mempolicy;
pub mod pagemap_scan;
pub mod perf;
pub mod pidfd;
pub mod process;
