//! NUMA memory-placement system calls: move_pages, mbind, set_mempolicy, get_mempolicy (a
//! process's pidfd and process_madvise are in `sys::pidfd`). None of them has a glibc wrapper
//! (or a nix/rustix one), so
//! they go through `libc::syscall` here, with the argument encoding (node masks and the kernel's
//! `maxnode` quirk) in safe, unit-tested code.
//!
//! Minimum kernels: move_pages/mbind/set_mempolicy 2.6.18; `MPOL_PREFERRED_MANY` 5.15;
//! `MPOL_WEIGHTED_INTERLEAVE` 6.9. A positive move_pages return (pages not migrated) needs 4.17.

use std::{fmt, io};

use libc::{c_int, c_long, c_ulong};

/// Bits in one word of a kernel node mask.
const WORD_BITS: usize = c_ulong::BITS as usize;

/// Highest node number memtide accepts (the kernel's `MAX_NUMNODES` is at most 1024).
pub const MAX_NODE: u32 = 1023;

/// `MPOL_*` memory-policy modes (uapi linux/mempolicy.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Mode {
    Default = 0,
    Preferred = 1,
    Bind = 2,
    Interleave = 3,
    Local = 4,
    /// Linux 5.15.
    PreferredMany = 5,
    /// Linux 6.9: interleave with per-node weights from
    /// `/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`.
    WeightedInterleave = 6,
}

impl Mode {
    /// The mode for a raw `MPOL_*` value (flags masked off), as get_mempolicy reports it.
    #[must_use]
    pub const fn from_raw(raw: c_int) -> Option<Self> {
        Some(match raw & !MODE_FLAGS_MASK {
            0 => Self::Default,
            1 => Self::Preferred,
            2 => Self::Bind,
            3 => Self::Interleave,
            4 => Self::Local,
            5 => Self::PreferredMany,
            6 => Self::WeightedInterleave,
            _ => return None,
        })
    }
}

/// Mode flags (`MPOL_F_STATIC_NODES` etc.) live in the high bits of the mode argument.
const MODE_FLAGS_MASK: c_int = (1 << 15) | (1 << 14) | (1 << 13);
/// `MPOL_F_STATIC_NODES`.
pub const MPOL_F_STATIC_NODES: c_int = 1 << 15;
/// `MPOL_F_RELATIVE_NODES`.
pub const MPOL_F_RELATIVE_NODES: c_int = 1 << 14;
/// `MPOL_F_NUMA_BALANCING` (6.0+, with `MPOL_BIND` / `MPOL_PREFERRED_MANY`).
pub const MPOL_F_NUMA_BALANCING: c_int = 1 << 13;

/// `MPOL_MF_STRICT`: fail if a page is not on the policy's nodes.
pub const MPOL_MF_STRICT: u32 = 1 << 0;
/// `MPOL_MF_MOVE`: move pages mapped only by this process.
pub const MPOL_MF_MOVE: u32 = 1 << 1;
/// `MPOL_MF_MOVE_ALL`: also move shared pages (CAP_SYS_NICE).
pub const MPOL_MF_MOVE_ALL: u32 = 1 << 2;

/// `MPOL_F_NODE` (get_mempolicy): return a node id instead of the policy.
const MPOL_F_NODE: c_ulong = 1 << 0;
/// `MPOL_F_ADDR` (get_mempolicy): the policy of the VMA at `addr`.
const MPOL_F_ADDR: c_ulong = 1 << 1;
/// `MPOL_F_MEMS_ALLOWED` (get_mempolicy): the nodes the caller may use.
const MPOL_F_MEMS_ALLOWED: c_ulong = 1 << 2;

/// A set of NUMA nodes in the kernel's layout: an array of `unsigned long`, bit `n % BITS` of
/// word `n / BITS` for node `n`.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeMask {
    words: Vec<c_ulong>,
}

impl NodeMask {
    /// The empty mask.
    #[must_use]
    pub const fn new() -> Self {
        Self { words: Vec::new() }
    }

    /// A mask holding `nodes`. Errors (`EINVAL`) for a node above [`MAX_NODE`].
    pub fn from_nodes(nodes: impl IntoIterator<Item = u32>) -> io::Result<Self> {
        let mut mask = Self::new();
        for node in nodes {
            mask.insert(node)?;
        }
        Ok(mask)
    }

    /// A mask big enough for every node up to `max_node`, all clear (get_mempolicy's output).
    fn with_capacity(max_node: u32) -> Self {
        Self {
            words: vec![0; max_node as usize / WORD_BITS + 1],
        }
    }

    /// Adds `node`.
    pub fn insert(&mut self, node: u32) -> io::Result<()> {
        if node > MAX_NODE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node {node} above the highest supported node {MAX_NODE}"),
            ));
        }
        let (word, bit) = (node as usize / WORD_BITS, node as usize % WORD_BITS);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << bit;
        Ok(())
    }

    /// Whether `node` is in the mask.
    #[must_use]
    pub fn contains(&self, node: u32) -> bool {
        let (word, bit) = (node as usize / WORD_BITS, node as usize % WORD_BITS);
        self.words.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    /// The nodes in the mask, ascending.
    #[must_use]
    pub fn nodes(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (i, &word) in self.words.iter().enumerate() {
            for bit in 0..WORD_BITS {
                if word & (1 << bit) != 0 {
                    out.push(u32::try_from(i * WORD_BITS + bit).unwrap_or(u32::MAX));
                }
            }
        }
        out
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The words as the kernel reads them.
    #[must_use]
    pub fn words(&self) -> &[c_ulong] {
        &self.words
    }

    /// The `maxnode` argument for this mask: the number of bits the kernel may read, plus one.
    /// The kernel's `get_nodes` decrements `maxnode` before use (an off-by-one kept for ABI
    /// compatibility), so passing exactly the bit count would drop the highest node.
    #[must_use]
    pub fn maxnode(&self) -> c_ulong {
        if self.words.is_empty() {
            0
        } else {
            (self.words.len() * WORD_BITS + 1) as c_ulong
        }
    }

    /// Pointer for the kernel: NULL for an empty mask (what `MPOL_DEFAULT`/`MPOL_LOCAL` want).
    fn as_ptr(&self) -> *const c_ulong {
        if self.words.is_empty() {
            std::ptr::null()
        } else {
            self.words.as_ptr()
        }
    }
}

impl fmt::Debug for NodeMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.nodes()).finish()
    }
}

/// Why the kernel did not put one page where asked (or could not report where it is): the
/// negative errno in move_pages' status array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageError {
    /// `ENOENT`: not present (never touched, or swapped out) or the zero page.
    NotPresent,
    /// `EBUSY`: under I/O or pinned right now; worth retrying.
    Busy,
    /// `EFAULT`: not mapped, or a kernel-internal / special mapping.
    Fault,
    /// `ENOMEM`: no memory on the destination node.
    NoMemory,
    /// `EACCES`: shared with other processes (needs `MPOL_MF_MOVE_ALL`).
    Shared,
    /// `EIO`: a dirty page of a file system that cannot write it out.
    Io,
    /// `EINVAL`: for example a dirty page whose file system has no migrate function.
    Invalid,
    /// `EAGAIN` (e.g. the folio was being split); worth retrying.
    Again,
    /// Any other errno.
    Other(i32),
}

impl PageError {
    /// The error for the errno `errno` (positive).
    #[must_use]
    pub const fn from_errno(errno: i32) -> Self {
        match errno {
            libc::ENOENT => Self::NotPresent,
            libc::EBUSY => Self::Busy,
            libc::EFAULT => Self::Fault,
            libc::ENOMEM => Self::NoMemory,
            libc::EACCES => Self::Shared,
            libc::EIO => Self::Io,
            libc::EINVAL => Self::Invalid,
            libc::EAGAIN => Self::Again,
            other => Self::Other(other),
        }
    }

    /// Whether trying again later may succeed.
    #[must_use]
    pub const fn is_transient(self) -> bool {
        matches!(self, Self::Busy | Self::Again | Self::NoMemory)
    }

    /// A short, stable name (metric label).
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::NotPresent => "enoent",
            Self::Busy => "ebusy",
            Self::Fault => "efault",
            Self::NoMemory => "enomem",
            Self::Shared => "eacces",
            Self::Io => "eio",
            Self::Invalid => "einval",
            Self::Again => "eagain",
            Self::Other(_) => "other",
        }
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(errno) => write!(f, "errno {errno}"),
            other => f.write_str(other.label()),
        }
    }
}

/// Where one page is after a move_pages call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageStatus {
    /// On this node.
    Node(u32),
    /// Not moved / not placed, and why.
    Error(PageError),
}

impl PageStatus {
    /// Decodes one element of move_pages' status array.
    #[must_use]
    pub fn from_raw(raw: c_int) -> Self {
        match u32::try_from(raw) {
            Ok(node) => Self::Node(node),
            Err(_) => Self::Error(PageError::from_errno(raw.saturating_neg())),
        }
    }

    /// The node, if the page is resident.
    #[must_use]
    pub const fn node(self) -> Option<u32> {
        match self {
            Self::Node(n) => Some(n),
            Self::Error(_) => None,
        }
    }
}

/// Which process a call concerns: the caller, or another process by pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pid {
    /// The calling process (pid 0 to the kernel).
    Current,
    Other(u32),
}

impl Pid {
    pub(super) fn raw(self) -> io::Result<libc::pid_t> {
        match self {
            Self::Current => Ok(0),
            Self::Other(pid) => libc::pid_t::try_from(pid)
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH)),
        }
    }
}

/// A system call's return value, or the errno it set.
pub(super) fn check(ret: c_long) -> io::Result<c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Asks the kernel which node each page in `pages` (page-aligned addresses in `pid`) is on.
/// `status` receives one entry per page. Needs ptrace read access to `pid`.
pub fn query_pages(pid: Pid, pages: &[usize], status: &mut Vec<PageStatus>) -> io::Result<()> {
    let mut raw = vec![0 as c_int; pages.len()];
    move_pages_raw(pid, pages, None, &mut raw, 0)?;
    status.clear();
    status.extend(raw.iter().map(|&r| PageStatus::from_raw(r)));
    Ok(())
}

/// Moves each page in `pages` to the node at the same index of `nodes` and fills `status`
/// with where each page is afterwards. Returns the number of pages the kernel reported as not
/// migrated (Linux 4.17+; 0 on older kernels, where only `status` tells).
///
/// `flags` is 0 or [`MPOL_MF_MOVE_ALL`]. Errors are for the call as a whole: `ESRCH` when the
/// process is gone, `EPERM`/`EACCES` without the right, `ENODEV` for a node that does not exist
/// or has no memory, `E2BIG`, `EINVAL`.
pub fn move_pages(
    pid: Pid,
    pages: &[usize],
    nodes: &[u32],
    flags: u32,
    status: &mut Vec<PageStatus>,
) -> io::Result<usize> {
    if nodes.len() != pages.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} pages but {} nodes", pages.len(), nodes.len()),
        ));
    }
    let nodes = nodes
        .iter()
        .map(|&n| {
            if n > MAX_NODE {
                Err(io::Error::from_raw_os_error(libc::ENODEV))
            } else {
                c_int::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))
            }
        })
        .collect::<io::Result<Vec<c_int>>>()?;
    let mut raw = vec![0 as c_int; pages.len()];
    let not_moved = move_pages_raw(pid, pages, Some(&nodes), &mut raw, flags)?;
    status.clear();
    status.extend(raw.iter().map(|&r| PageStatus::from_raw(r)));
    Ok(not_moved)
}

fn move_pages_raw(
    pid: Pid,
    pages: &[usize],
    nodes: Option<&[c_int]>,
    status: &mut [c_int],
    flags: u32,
) -> io::Result<usize> {
    assert_eq!(pages.len(), status.len(), "one status per page");
    if let Some(nodes) = nodes {
        assert_eq!(pages.len(), nodes.len(), "one node per page");
    }
    if pages.is_empty() {
        return Ok(0);
    }
    let pid = pid.raw()?;
    let nodes_ptr = nodes.map_or(std::ptr::null(), <[c_int]>::as_ptr);
    // SAFETY: `pages` holds `pages.len()` pointer-sized values the kernel only reads (they are
    // addresses in the target, never dereferenced here); `nodes` is NULL or the same length
    // and only read; `status` has the same length and is written by the kernel. All three live
    // across the call. The addresses name memory of the target process, whose contents a
    // migration does not change, so no Rust-visible memory is affected.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid,
            pages.len() as c_ulong,
            pages.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            flags as c_int,
        )
    };
    check(ret).map(|n| usize::try_from(n).unwrap_or(0))
}

/// Sets the policy of `[addr, addr + len)` in the calling process. With [`MPOL_MF_MOVE`] in
/// `flags`, pages already there that violate the policy are migrated. `mode_flags` is 0 or
/// `MPOL_F_STATIC_NODES`/`MPOL_F_RELATIVE_NODES`.
///
/// This is a safe function: a memory policy and page migration never change the contents of
/// memory, and an unmapped range is an `EFAULT`/`ENOMEM` error, not undefined behaviour.
pub fn mbind(
    addr: usize,
    len: usize,
    mode: Mode,
    mode_flags: c_int,
    nodes: &NodeMask,
    flags: u32,
) -> io::Result<()> {
    // SAFETY: the kernel reads `nodes.maxnode() - 1` bits from `nodes.as_ptr()`, which is NULL
    // (maxnode 0) or points at exactly that many bits, alive across the call. `addr`/`len` only
    // name a range whose policy changes; its contents are untouched (see the function docs).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            mode as c_int | mode_flags,
            nodes.as_ptr(),
            nodes.maxnode(),
            flags,
        )
    };
    check(ret).map(drop)
}

/// Sets the calling thread's default policy (inherited by children and kept across execve).
pub fn set_mempolicy(mode: Mode, mode_flags: c_int, nodes: &NodeMask) -> io::Result<()> {
    // SAFETY: as in `mbind`, the kernel reads at most `maxnode - 1` bits of a live mask.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            mode as c_int | mode_flags,
            nodes.as_ptr(),
            nodes.maxnode(),
        )
    };
    check(ret).map(drop)
}

/// A memory policy as get_mempolicy reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    /// `MPOL_F_STATIC_NODES` / `MPOL_F_RELATIVE_NODES` / `MPOL_F_NUMA_BALANCING` bits.
    pub mode_flags: c_int,
    pub nodes: NodeMask,
}

fn get_mempolicy_raw(addr: usize, flags: c_ulong) -> io::Result<(c_int, NodeMask)> {
    let mut mode: c_int = 0;
    let mut mask = NodeMask::with_capacity(MAX_NODE);
    // SAFETY: `mode` is a valid c_int to write; the kernel writes at most `maxnode - 1` bits
    // into `mask`, which holds MAX_NODE + 1 bits (maxnode = words * BITS + 1). `addr` is only
    // looked up (MPOL_F_ADDR) or ignored.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &raw mut mode,
            mask.words.as_mut_ptr(),
            mask.maxnode(),
            addr,
            flags,
        )
    };
    check(ret)?;
    mask.words.truncate(
        mask.words
            .iter()
            .rposition(|&w| w != 0)
            .map_or(0, |last| last + 1),
    );
    Ok((mode, mask))
}

fn policy_from_raw(mode: c_int, nodes: NodeMask) -> io::Result<Policy> {
    let decoded = Mode::from_raw(mode).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unknown mempolicy mode {mode}"),
        )
    })?;
    Ok(Policy {
        mode: decoded,
        mode_flags: mode & MODE_FLAGS_MASK,
        nodes,
    })
}

/// The calling thread's default policy.
pub fn get_mempolicy() -> io::Result<Policy> {
    let (mode, nodes) = get_mempolicy_raw(0, 0)?;
    policy_from_raw(mode, nodes)
}

/// The policy of the calling process's mapping that contains `addr`.
pub fn get_mempolicy_at(addr: usize) -> io::Result<Policy> {
    let (mode, nodes) = get_mempolicy_raw(addr, MPOL_F_ADDR)?;
    policy_from_raw(mode, nodes)
}

/// The node the page at `addr` of the calling process is on (faulting it in if needed).
pub fn node_of_address(addr: usize) -> io::Result<u32> {
    let (node, _) = get_mempolicy_raw(addr, MPOL_F_NODE | MPOL_F_ADDR)?;
    u32::try_from(node).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The nodes the calling process may allocate on (its cpuset).
pub fn mems_allowed() -> io::Result<NodeMask> {
    get_mempolicy_raw(0, MPOL_F_MEMS_ALLOWED).map(|(_, mask)| mask)
}

#[cfg(test)]
mod tests {
    use memtide_core::units::PAGE_SIZE;

    use super::*;

    #[test]
    fn node_mask_layout() {
        let mask = NodeMask::from_nodes([0, 2, 64, 65]).unwrap();
        if WORD_BITS == 64 {
            assert_eq!(mask.words(), &[0b101, 0b11]);
            // Two words = 128 bits; the kernel wants one more.
            assert_eq!(mask.maxnode(), 129);
        }
        assert_eq!(mask.nodes(), vec![0, 2, 64, 65]);
        assert!(mask.contains(64) && !mask.contains(1) && !mask.contains(4000));
        assert_eq!(format!("{mask:?}"), "{0, 2, 64, 65}");
    }

    #[test]
    fn empty_mask_is_null_with_maxnode_zero() {
        let mask = NodeMask::new();
        assert!(mask.is_empty());
        assert_eq!(mask.maxnode(), 0);
        assert!(mask.as_ptr().is_null());
        let one = NodeMask::from_nodes([0]).unwrap();
        assert_eq!(one.maxnode(), WORD_BITS as c_ulong + 1);
        assert!(!one.as_ptr().is_null());
    }

    #[test]
    fn node_mask_rejects_huge_nodes() {
        let err = NodeMask::from_nodes([MAX_NODE + 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let full = NodeMask::with_capacity(MAX_NODE);
        assert_eq!(full.maxnode(), (c_ulong::from(MAX_NODE) + 1) + 1);
    }

    #[test]
    fn page_status_decoding() {
        assert_eq!(PageStatus::from_raw(1), PageStatus::Node(1));
        assert_eq!(
            PageStatus::from_raw(-libc::ENOENT),
            PageStatus::Error(PageError::NotPresent)
        );
        assert_eq!(
            PageStatus::from_raw(-libc::EBUSY),
            PageStatus::Error(PageError::Busy)
        );
        assert_eq!(
            PageStatus::from_raw(-libc::EACCES),
            PageStatus::Error(PageError::Shared)
        );
        assert_eq!(
            PageStatus::from_raw(-libc::E2BIG),
            PageStatus::Error(PageError::Other(libc::E2BIG))
        );
        assert!(PageError::Busy.is_transient() && !PageError::Fault.is_transient());
        assert_eq!(PageError::NoMemory.label(), "enomem");
    }

    #[test]
    fn mode_decoding_masks_flags() {
        assert_eq!(
            Mode::from_raw(Mode::Bind as c_int | MPOL_F_STATIC_NODES),
            Some(Mode::Bind)
        );
        assert_eq!(Mode::from_raw(6), Some(Mode::WeightedInterleave));
        assert_eq!(Mode::from_raw(7), None);
    }

    #[test]
    fn move_pages_checks_lengths_and_nodes() {
        let mut status = Vec::new();
        let err = move_pages(Pid::Current, &[0x1000], &[], 0, &mut status).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = move_pages(Pid::Current, &[0x1000], &[MAX_NODE + 1], 0, &mut status);
        assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::ENODEV));
        // Nothing to do is not a system call.
        assert_eq!(
            move_pages(Pid::Current, &[], &[], 0, &mut status).unwrap(),
            0
        );
        assert!(status.is_empty());
        assert_eq!(
            Pid::Other(0).raw().unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
    }

    #[test]
    fn query_own_page() {
        // A page of our own stack is resident, on some node this process may use.
        let value = std::hint::black_box([1u8; PAGE_SIZE as usize]);
        let addr = value.as_ptr() as usize & !(PAGE_SIZE as usize - 1);
        let mut status = Vec::new();
        query_pages(Pid::Current, &[addr], &mut status).unwrap();
        let node = status[0].node().expect("own stack page resident");
        assert!(mems_allowed().unwrap().contains(node), "{node}");
        assert_eq!(node_of_address(addr).unwrap(), node);
    }

    #[test]
    fn thread_policy_round_trip() {
        // Policies are per thread: a scratch thread keeps the test runner's untouched.
        std::thread::spawn(|| {
            let node0 = NodeMask::from_nodes([0]).unwrap();
            set_mempolicy(Mode::Preferred, 0, &node0).unwrap();
            let policy = get_mempolicy().unwrap();
            assert_eq!(policy.mode, Mode::Preferred);
            assert_eq!(policy.nodes.nodes(), vec![0]);
            set_mempolicy(Mode::Default, 0, &NodeMask::new()).unwrap();
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        })
        .join()
        .unwrap();
    }
}
