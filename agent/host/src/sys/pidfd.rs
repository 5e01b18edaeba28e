//! A process held by its pidfd (Linux 5.3): opening one, whether the process has exited, and
//! advice on its memory through process_madvise (Linux 5.10; `MADV_COLLAPSE` 6.1).

use std::{
    ffi::c_void,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

use libc::{c_int, c_uint};

use super::mempolicy::{Pid, check};

/// Opens a pidfd for `pid` (Linux 5.3). The fd keeps naming that very process, even after it
/// exits and its pid is reused.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = Pid::Other(pid).raw()?;
    // SAFETY: pidfd_open takes a pid and flags (0) and returns a new fd or -1.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as c_int) };
    let fd = check(ret)?;
    let fd = c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process behind `pidfd` has exited (a pidfd polls readable once it has; a zombie
/// counts as exited). Never blocks.
pub fn pidfd_exited(pidfd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, timeout 0 (no blocking).
        let ret = unsafe { libc::poll(&raw mut pfd, 1, 0) };
        if ret < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        return Ok(ret > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP) != 0);
    }
}

/// The advice process_madvise accepts for another process's memory
/// (mm/madvise.c `process_madvise_remote_valid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteAdvice {
    Cold,
    Pageout,
    WillNeed,
    /// Linux 6.1: collapse the range into huge pages synchronously.
    Collapse,
}

impl RemoteAdvice {
    const fn raw(self) -> c_int {
        match self {
            Self::Cold => libc::MADV_COLD,
            Self::Pageout => libc::MADV_PAGEOUT,
            Self::WillNeed => libc::MADV_WILLNEED,
            Self::Collapse => libc::MADV_COLLAPSE,
        }
    }
}

/// Applies `advice` to the ranges `(start, len)` of the process behind `pidfd` (Linux 5.10).
/// Returns the number of bytes advised (less than asked when the kernel stopped early). Needs
/// CAP_SYS_NICE and ptrace access.
pub fn process_madvise(
    pidfd: BorrowedFd<'_>,
    ranges: &[(usize, usize)],
    advice: RemoteAdvice,
) -> io::Result<usize> {
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|&(start, len)| libc::iovec {
            iov_base: start as *mut c_void,
            iov_len: len,
        })
        .collect();
    // SAFETY: the kernel reads `iov.len()` iovecs from a live array; the iovecs describe memory
    // of the target process, which none of the allowed advice values changes the contents of
    // (cold/pageout/willneed/collapse keep data intact), so no Rust memory is affected.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd.as_raw_fd(),
            iov.as_ptr(),
            iov.len(),
            advice.raw(),
            0 as c_uint,
        )
    };
    check(ret).map(|n| usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn pidfd_of_self_is_alive() {
        let fd = pidfd_open(std::process::id()).unwrap();
        assert!(!pidfd_exited(fd.as_fd()).unwrap());
    }
}
