//! memtide-hint: placement hints for applications (BW-AWARE's hint-based placement).
//!
//! An application marks ranges of its memory [`Hint::Fast`] (latency-critical),
//! [`Hint::Slow`] (cold, capacity) or [`Hint::Bandwidth`] (bandwidth-bound streams), and the
//! hint is applied at once with `mbind(..., MPOL_MF_MOVE)`: pages already present migrate, later
//! faults follow the policy. The tiers are read from sysfs: the kernel's memory tiers when they
//! separate the nodes, else CPU-less nodes are slow. C programs use `include/memtide_hint.h`
//! and the static library.
//!
//! This crate stands alone (only libc) so applications do not pull in the agent; its few lines
//! of `unsafe` are the `mbind` call in [`sys`], each with a SAFETY comment.
#![deny(unsafe_code)]

use std::{
    fs, io,
    os::raw::{c_int, c_void},
    path::Path,
};

mod sys;

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
type Policy = (c_int, Vec<u32>);

/// Fast and slow nodes of the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    pub fast: Vec<u32>,
    pub slow: Vec<u32>,
    /// The kernel has `MPOL_WEIGHTED_INTERLEAVE`.
    pub weighted_interleave: bool,
}

fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

fn read_list(path: &Path) -> Option<Vec<u32>> {
    parse_list(&fs::read_to_string(path).ok()?)
}

impl Tiers {
    /// Reads the tiers of this machine.
    #[must_use]
    pub fn detect() -> Self {
        Self::detect_at(Path::new("/"))
    }

    /// Reads the tiers under `root` (a fixture tree in tests).
    #[must_use]
    pub fn detect_at(root: &Path) -> Self {
        let node_dir = root.join("sys/devices/system/node");
        let nodes = read_list(&node_dir.join("has_memory"))
            .or_else(|| read_list(&node_dir.join("online")))
            .unwrap_or_else(|| vec![0]);
        let weighted_interleave = root
            .join("sys/kernel/mm/mempolicy/weighted_interleave")
            .is_dir();
        // Kernel memory tiers: the smallest tier id holding one of our nodes is fast.
        let mut tiers: Vec<(u32, Vec<u32>)> =
            fs::read_dir(root.join("sys/devices/virtual/memory_tiering"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let id = name.strip_prefix("memory_tier")?.parse().ok()?;
                    let list = read_list(&e.path().join("nodelist"))?;
                    Some((
                        id,
                        list.into_iter()
                            .filter(|n| nodes.contains(n))
                            .collect::<Vec<_>>(),
                    ))
                })
                .filter(|(_, list)| !list.is_empty())
                .collect();
        tiers.sort_unstable();
        let (fast, slow) = if tiers.len() > 1 {
            let fast = tiers[0].1.clone();
            (
                fast.clone(),
                nodes
                    .iter()
                    .copied()
                    .filter(|n| !fast.contains(n))
                    .collect(),
            )
        } else {
            let cpuless: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|n| {
                    fs::read_to_string(node_dir.join(format!("node{n}/cpulist")))
                        .is_ok_and(|c| c.trim().is_empty())
                })
                .collect();
            if cpuless.is_empty() || cpuless.len() == nodes.len() {
                (nodes, Vec::new())
            } else {
                (
                    nodes
                        .iter()
                        .copied()
                        .filter(|n| !cpuless.contains(n))
                        .collect(),
                    cpuless,
                )
            }
        };
        Self {
            fast,
            slow,
            weighted_interleave,
        }
    }

    /// The policy for `hint`: mode and nodes, then the fallback for kernels without the mode.
    fn policy(&self, hint: Hint) -> io::Result<(c_int, Vec<u32>, Option<Policy>)> {
        let nodes = match hint {
            Hint::Fast => &self.fast,
            Hint::Slow if self.slow.is_empty() => &self.fast,
            Hint::Slow => &self.slow,
            Hint::Bandwidth => {
                let all: Vec<u32> = self.fast.iter().chain(&self.slow).copied().collect();
                if all.is_empty() {
                    return Err(io::Error::from_raw_os_error(libc::ENODEV));
                }
                let mode = if self.weighted_interleave {
                    sys::MPOL_WEIGHTED_INTERLEAVE
                } else {
                    sys::MPOL_INTERLEAVE
                };
                return Ok((mode, all.clone(), Some((sys::MPOL_INTERLEAVE, all))));
            }
        };
        let first = *nodes
            .first()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
        Ok((
            sys::MPOL_PREFERRED_MANY,
            nodes.clone(),
            Some((sys::MPOL_PREFERRED, vec![first])),
        ))
    }

    /// Applies `hint` to `[addr, addr + len)` of this process.
    pub fn apply(&self, addr: usize, len: usize, hint: Hint) -> io::Result<()> {
        let (mode, nodes, fallback) = self.policy(hint)?;
        match sys::mbind_move(addr, len, mode, &nodes) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => match fallback {
                Some((mode, nodes)) => sys::mbind_move(addr, len, mode, &nodes),
                None => Err(e),
            },
            other => other,
        }
    }
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
    use super::*;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    #[test]
    fn tiers_from_kernel_tiers_or_cpuless_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/devices/system/node/has_memory", "0-1\n");
        write(r, "sys/devices/system/node/node0/cpulist", "0-1\n");
        write(r, "sys/devices/system/node/node1/cpulist", "\n");
        // One tier for both: the CPU-less node is slow.
        write(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0-1\n",
        );
        let t = Tiers::detect_at(r);
        assert_eq!((t.fast.clone(), t.slow.clone()), (vec![0], vec![1]));
        assert!(!t.weighted_interleave);
        // Two tiers (HMAT): the kernel decides.
        write(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0\n",
        );
        write(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier54/nodelist",
            "1\n",
        );
        fs::create_dir_all(r.join("sys/kernel/mm/mempolicy/weighted_interleave")).unwrap();
        let t = Tiers::detect_at(r);
        assert_eq!((t.fast.clone(), t.slow.clone()), (vec![0], vec![1]));
        assert!(t.weighted_interleave);
        let (mode, nodes, _) = t.policy(Hint::Bandwidth).unwrap();
        assert_eq!((mode, nodes), (sys::MPOL_WEIGHTED_INTERLEAVE, vec![0, 1]));
        let (mode, nodes, fallback) = t.policy(Hint::Slow).unwrap();
        assert_eq!((mode, nodes), (sys::MPOL_PREFERRED_MANY, vec![1]));
        assert_eq!(fallback, Some((sys::MPOL_PREFERRED, vec![1])));
    }

    #[test]
    fn single_node_machine_hints_stay_on_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/devices/system/node/has_memory", "0\n");
        let t = Tiers::detect_at(dir.path());
        assert_eq!((t.fast.clone(), t.slow.clone()), (vec![0], vec![]));
        assert_eq!(t.policy(Hint::Slow).unwrap().1, vec![0]);
    }

    #[test]
    fn hint_applies_to_own_memory() {
        // A fresh anonymous mapping (a large Vec) hinted FAST on this machine, then BANDWIDTH.
        let buf = vec![1u8; 1 << 20];
        let start = (buf.as_ptr() as usize).div_ceil(4096) * 4096;
        let len = (buf.as_ptr() as usize + buf.len() - start) / 4096 * 4096;
        hint(start, len, Hint::Fast).unwrap();
        hint(start, len, Hint::Bandwidth).unwrap();
        assert_eq!(
            memtide_hint(start as *mut c_void, len, Hint::Slow as c_int),
            0
        );
        assert_eq!(memtide_hint(start as *mut c_void, len, 9), -libc::EINVAL);
        // Unaligned start: the kernel's EINVAL comes back as a negative errno.
        assert_eq!(
            memtide_hint((start + 1) as *mut c_void, len - 4096, Hint::Fast as c_int),
            -libc::EINVAL
        );
        assert_eq!(parse_list("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_list("2-1"), None);
    }
}
