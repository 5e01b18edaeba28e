//! memtide-hint: placement hints for applications (BW-AWARE's hint-based placement).
//!
//! An application marks ranges of its memory [`Hint::Fast`] (latency-critical),
//! [`Hint::Slow`] (cold, capacity) or [`Hint::Bandwidth`] (bandwidth-bound streams), and the
//! hint is applied at once with `mbind(..., MPOL_MF_MOVE)`: pages already present migrate, later
//! faults follow the policy. Which nodes are fast and which slow is decided exactly as the agent
//! decides it (`memtide-host`'s classifier: the kernel's memory tiers, HMAT, distances, CPU-less
//! nodes). C programs use `include/memtide_hint.h` and the static library.
//!
//! Applications do not pull in the agent: this crate uses `memtide-host` (the machine's readers
//! and system calls, no async runtime, no BPF), whose `sys` module holds the `mbind` call.
#![deny(unsafe_code)]

use std::{
    io,
    os::raw::{c_int, c_void},
    path::Path,
};

use memtide_config::TierOverride;
use memtide_host::{
    exec::launch::{prefer_tier, weighted_interleave_available},
    sys::mempolicy::{self, MPOL_MF_MOVE, Mode, NodeMask},
    sysfs::HostRoot,
    topology::{
        node_sets::{PlacementTier, TierNodeSets},
        tiering::TieredTopology,
    },
};

/// Where a range belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum Hint {
    /// Prefer the fast tier (spill to others when full).
    Fast = 0,
    /// Prefer the slow tier.
    Slow = 1,
    /// Interleave over every tier by bandwidth (weighted where the kernel can, Linux 6.9).
    Bandwidth = 2,
}

impl Hint {
    /// The hint for a C `memtide_hint_kind` value.
    #[must_use]
    pub const fn from_raw(raw: c_int) -> Option<Self> {
        match raw {
            0 => Some(Self::Fast),
            1 => Some(Self::Slow),
            2 => Some(Self::Bandwidth),
            _ => None,
        }
    }
}

/// A memory-policy mode and its nodes.
type Policy = (Mode, Vec<u32>);

/// Fast and slow nodes of the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    /// As the agent places memory (`TieredTopology::placement_tiers`).
    pub nodes: TierNodeSets,
    /// The kernel has `MPOL_WEIGHTED_INTERLEAVE`.
    pub weighted_interleave: bool,
}

impl Tiers {
    /// Reads the tiers of this machine.
    #[must_use]
    pub fn detect() -> Self {
        Self::detect_at(Path::new("/"))
    }

    /// Reads the tiers under `root` (a fixture tree in tests), as the agent classifies them
    /// (`memtide probe` shows the result). A machine whose topology cannot be read is one node,
    /// node 0: every hint leaves memory where it is.
    #[must_use]
    pub fn detect_at(root: &Path) -> Self {
        let host = HostRoot::new(root);
        let nodes = match TieredTopology::read(&host, &TierOverride::default()) {
            Ok(tiered) => tiered.placement_tiers(),
            Err(_) => TierNodeSets {
                fast: vec![0],
                slow: Vec::new(),
            },
        };
        Self {
            nodes,
            weighted_interleave: weighted_interleave_available(&host),
        }
    }

    /// The policy for `hint`: mode and nodes, then the fallback for kernels without the mode.
    fn policy(&self, hint: Hint) -> io::Result<(Mode, Vec<u32>, Option<Policy>)> {
        let nodes = match hint {
            Hint::Fast => self.nodes.nodes_for(PlacementTier::Fast),
            Hint::Slow => self.nodes.nodes_for(PlacementTier::Slow),
            Hint::Bandwidth => {
                let all = self.nodes.nodes_for(PlacementTier::Every);
                if all.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::ENODEV));
                }
                let mode = if self.weighted_interleave {
                    Mode::WeightedInterleave
                } else {
                    Mode::Interleave
                };
                return Ok((mode, all.clone(), Some((Mode::Interleave, all))));
            }
        };
        let first = *nodes
            .first()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
        let ((mode, nodes), fallback) = prefer_tier(nodes, first);
        Ok((mode, nodes, Some(fallback)))
    }

    /// Applies `hint` to `[addr, addr + len)` of this process.
    pub fn apply(&self, addr: usize, len: usize, hint: Hint) -> io::Result<()> {
        let (mode, nodes, fallback) = self.policy(hint)?;
        match mbind_move(addr, len, mode, &nodes) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match fallback {
                Some((mode, nodes)) => mbind_move(addr, len, mode, &nodes),
                None => Err(e),
            },
            other => other,
        }
    }
}

/// `mbind(addr, len, mode, nodes, MPOL_MF_MOVE)`: the policy, and the pages already present
/// moved to it.
fn mbind_move(addr: usize, len: usize, mode: Mode, nodes: &[u32]) -> io::Result<()> {
    let mask = NodeMask::from_nodes(nodes.iter().copied())?;
    mempolicy::mbind(addr, len, mode, 0, &mask, MPOL_MF_MOVE)
}

/// Applies `hint` to `[addr, addr + len)` of this process, with this machine's tiers.
pub fn hint(addr: usize, len: usize, hint: Hint) -> io::Result<()> {
    Tiers::detect().apply(addr, len, hint)
}

/// C entry point: see `include/memtide_hint.h`. Returns 0 or a negative errno.
#[expect(
    unsafe_code,
    reason = "no_mangle is an unsafe attribute in edition 2024"
)]
#[unsafe(no_mangle)]
pub extern "C" fn memtide_hint(addr: *mut c_void, len: usize, hint_kind: c_int) -> c_int {
    let Some(kind) = Hint::from_raw(hint_kind) else {
        return -libc::EINVAL;
    };
    match hint(addr as usize, len, kind) {
        Ok(()) => 0,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use memtide_core::units::PAGE_SIZE;

    use super::*;

    fn fixture(kind: &str, name: &str) -> PathBuf {
        PathBuf::from(memtide_host::FIXTURES).join(kind).join(name)
    }

    #[test]
    fn tiers_are_the_agents() {
        // DRAM and a CPU-less CXL node in a lower memory tier (HMAT).
        let t = Tiers::detect_at(&fixture("topology", "vm-hmat"));
        let agent = TieredTopology::read(
            &HostRoot::new(fixture("topology", "vm-hmat")),
            &TierOverride::default(),
        )
        .unwrap();
        assert_eq!(t.nodes, agent.classes.nodes);
        assert_eq!(
            (t.nodes.fast.clone(), t.nodes.slow.clone()),
            (vec![0], vec![1])
        );
        let (mode, nodes, fallback) = t.policy(Hint::Slow).unwrap();
        assert_eq!((mode, nodes), (Mode::PreferredMany, vec![1]));
        assert_eq!(fallback, Some((Mode::Preferred, vec![1])));
        let (mode, nodes, _) = t.policy(Hint::Bandwidth).unwrap();
        assert_eq!((mode, nodes), (Mode::Interleave, vec![0, 1]));
        let weighted = Tiers {
            weighted_interleave: true,
            ..t
        };
        assert_eq!(
            weighted.policy(Hint::Bandwidth).unwrap().0,
            Mode::WeightedInterleave
        );
    }

    #[test]
    fn single_node_machine_hints_stay_on_it() {
        let t = Tiers::detect_at(&fixture("machines", "vm-single-node"));
        assert_eq!(
            (t.nodes.fast.clone(), t.nodes.slow.clone()),
            (vec![0], vec![])
        );
        assert_eq!(t.policy(Hint::Slow).unwrap().1, vec![0]);
        // No topology at all: node 0, where memory already is.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(Tiers::detect_at(empty.path()).nodes.fast, vec![0]);
    }

    #[test]
    fn hint_applies_to_own_memory() {
        // A fresh anonymous mapping (a large Vec) hinted FAST on this machine, then BANDWIDTH.
        let buf = vec![1u8; 1 << 20];
        let page = PAGE_SIZE as usize;
        let start = (buf.as_ptr() as usize).div_ceil(page) * page;
        let len = (buf.as_ptr() as usize + buf.len() - start) / page * page;
        hint(start, len, Hint::Fast).unwrap();
        hint(start, len, Hint::Bandwidth).unwrap();
        assert_eq!(
            memtide_hint(start as *mut c_void, len, Hint::Slow as c_int),
            0
        );
        assert_eq!(memtide_hint(start as *mut c_void, len, 9), -libc::EINVAL);
        // Unaligned start: the kernel's EINVAL comes back as a negative errno.
        assert_eq!(
            memtide_hint((start + 1) as *mut c_void, len - page, Hint::Fast as c_int),
            -libc::EINVAL
        );
    }
}
