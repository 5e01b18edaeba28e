//! The one system call the hint API needs, `mbind`, and the uapi constants libc lacks.
#![expect(
    unsafe_code,
    reason = "the mbind system call; the block carries a SAFETY comment"
)]

use std::{io, os::raw::c_int};

use libc::c_ulong;

pub(crate) const MPOL_PREFERRED: c_int = 1;
pub(crate) const MPOL_INTERLEAVE: c_int = 3;
pub(crate) const MPOL_PREFERRED_MANY: c_int = 5;
pub(crate) const MPOL_WEIGHTED_INTERLEAVE: c_int = 6;
const MPOL_MF_MOVE: c_ulong = 1 << 1;
const WORD_BITS: usize = c_ulong::BITS as usize;

/// `mbind(addr, len, mode, nodes, MPOL_MF_MOVE)`. Safe: a policy and page migration never
/// change memory contents; an unmapped range is an error, not undefined behaviour.
pub(crate) fn mbind_move(addr: usize, len: usize, mode: c_int, nodes: &[u32]) -> io::Result<()> {
    let highest = nodes.iter().copied().max().unwrap_or(0) as usize;
    if highest >= 4096 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut mask = vec![0 as c_ulong; highest / WORD_BITS + 1];
    for &n in nodes {
        mask[n as usize / WORD_BITS] |= 1 << (n as usize % WORD_BITS);
    }
    // The kernel reads maxnode - 1 bits (an ABI off-by-one), so pass one more than the mask has.
    let maxnode = (mask.len() * WORD_BITS + 1) as c_ulong;
    // SAFETY: the kernel reads at most `maxnode - 1` bits from `mask`, which holds exactly that
    // many and lives across the call; `addr`/`len` only name a range whose policy changes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            mode,
            mask.as_ptr(),
            maxnode,
            MPOL_MF_MOVE,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
