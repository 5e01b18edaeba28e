//! Registering BPF ring buffers with tokio's reactor.
//!
//! tokio 1.54 deprecates the safe-looking `AsyncFd::new` (it cannot guarantee the fd stays
//! open); `register_with_interest` states that contract as `unsafe`, and this is where it is
//! upheld.

use std::{io, os::fd::AsRawFd};

use tokio::io::{Interest, unix::AsyncFd};

/// Wraps an object that owns its file descriptor (a ring buffer map) for readiness polling.
pub fn register_readable<T: AsRawFd>(inner: T) -> io::Result<AsyncFd<T>> {
    // SAFETY: `T` owns its descriptor (aya's RingBuf owns the map fd and its mmaps), AsyncFd
    // takes ownership of `T`, so the descriptor stays open and unchanged until the AsyncFd is
    // dropped or `into_inner` is called.
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }.map_err(io::Error::from)
}
