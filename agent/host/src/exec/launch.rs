//! `memtide exec`: the initial memory policy for a program memtide launches. The policy is set
//! with set_mempolicy in memtide's own process and then survives execve into the program.
//!
//! - `fast-first`: `MPOL_PREFERRED_MANY` over the fast nodes (Linux 5.15; `MPOL_PREFERRED` on
//!   the fast node with most free memory before that): allocate fast, spill to slow.
//! - `interleave`: `MPOL_INTERLEAVE` over every node with memory.
//! - `bw-aware` (BW-AWARE, Agarwal et al.): spread pages in proportion to each node's bandwidth
//!   (HMAT `read_bandwidth`). With weighted interleave (Linux 6.9,
//!   `/sys/kernel/mm/mempolicy/weighted_interleave/`) that is `MPOL_WEIGHTED_INTERLEAVE` with
//!   the kernel's weights, which memtide writes only when asked; otherwise `MPOL_INTERLEAVE`
//!   over the subset of nodes whose fast share comes closest to the bandwidth ratio.

use std::{collections::BTreeMap, fmt, str::FromStr};

use serde::Serialize;

use crate::{
    sys::mempolicy::{self, Mode, NodeMask},
    sysfs::{self, HostRoot, SysfsError},
    topology::{
        node_sets::{PlacementTier, TierNodeSets},
        tiering::TieredTopology,
    },
};

const WEIGHTS_DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";
/// Largest weight memtide writes (the kernel accepts 1..=255).
const MAX_WEIGHT: u64 = 100;

/// The placements `memtide exec --placement` offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    BwAware,
    Interleave,
    FastFirst,
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bw-aware" => Ok(Self::BwAware),
            "interleave" => Ok(Self::Interleave),
            "fast-first" => Ok(Self::FastFirst),
            other => Err(format!(
                "unknown placement {other:?} (bw-aware, interleave or fast-first)"
            )),
        }
    }
}

/// A policy to apply, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LaunchPolicy {
    #[serde(skip)]
    pub mode: Mode,
    pub mode_name: &'static str,
    pub nodes: Vec<u32>,
    /// Weighted interleave weights per node, to write when asked.
    pub weights: BTreeMap<u32, u64>,
    /// Used instead of `mode` when the kernel rejects it (older kernels).
    #[serde(skip)]
    pub fallback: Option<(Mode, Vec<u32>)>,
    pub explanation: String,
}

/// A failure to set up a launch policy.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no NUMA node with memory to place on")]
    NoNodes,
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("set_mempolicy({mode:?}, nodes {nodes:?}): {source}")]
    SetPolicy {
        mode: Mode,
        nodes: Vec<u32>,
        #[source]
        source: std::io::Error,
    },
}

/// Whether the kernel has weighted interleave.
#[must_use]
pub fn weighted_interleave_available(root: &HostRoot) -> bool {
    root.path(WEIGHTS_DIR).is_dir()
}

/// Weights proportional to bandwidth, the slowest node 1, capped at [`MAX_WEIGHT`].
#[must_use]
pub fn bandwidth_weights(bandwidths: &[(u32, u64)]) -> BTreeMap<u32, u64> {
    let min = bandwidths.iter().map(|&(_, b)| b).filter(|&b| b > 0).min();
    bandwidths
        .iter()
        .map(|&(node, bw)| {
            let w = min.map_or(1, |min| ((bw + min / 2) / min).clamp(1, MAX_WEIGHT));
            (node, w)
        })
        .collect()
}

/// The subset of nodes whose interleave share on fast nodes comes closest to `fast_share`:
/// `k` fast and `m` slow nodes give `k / (k + m)`. Never empty of fast nodes.
#[must_use]
pub fn interleave_subset(fast: &[u32], slow: &[u32], fast_share: f64) -> Vec<u32> {
    let mut best = (f64::INFINITY, 0, 0);
    for k in 1..=fast.len() {
        for m in 0..=slow.len() {
            let share = k as f64 / (k + m) as f64;
            let err = (share - fast_share).abs();
            // Prefer more nodes on ties: more bandwidth in total.
            if err < best.0 - 1e-9 || ((err - best.0).abs() <= 1e-9 && k + m > best.1 + best.2) {
                best = (err, k, m);
            }
        }
    }
    let mut nodes: Vec<u32> = fast[..best.1]
        .iter()
        .chain(&slow[..best.2])
        .copied()
        .collect();
    nodes.sort_unstable();
    nodes
}

/// Computes the policy for `placement` on the machine described by `t`.
pub fn plan(
    placement: Placement,
    t: &TieredTopology,
    weighted_available: bool,
) -> Result<LaunchPolicy, LaunchError> {
    let tiers = t.placement_tiers();
    let all = tiers.nodes_for(PlacementTier::Every);
    if all.is_empty() {
        return Err(LaunchError::NoNodes);
    }
    Ok(match placement {
        Placement::Interleave => LaunchPolicy::simple(
            Mode::Interleave,
            "interleave",
            all.clone(),
            format!("interleave over every node with memory {all:?}"),
        ),
        Placement::FastFirst => {
            let fast = tiers.nodes_for(PlacementTier::Fast);
            // Unlike a hint, a launch falls back to the fast node with the most free memory:
            // the program's whole footprint lands there on an old kernel.
            let best = t.classes.best_node(&t.topology, true).unwrap_or(fast[0]);
            let explanation = format!("prefer the fast nodes {fast:?}, spill to the others");
            let ((mode, nodes), fallback) = prefer_tier(fast, best);
            let mut p = LaunchPolicy::simple(mode, "preferred-many", nodes, explanation);
            p.fallback = Some(fallback);
            p
        }
        Placement::BwAware => bw_aware(t, all, &tiers, weighted_available),
    })
}

impl LaunchPolicy {
    /// A policy of one mode over `nodes`, without weights or a fallback.
    fn simple(mode: Mode, mode_name: &'static str, nodes: Vec<u32>, explanation: String) -> Self {
        Self {
            mode,
            mode_name,
            nodes,
            weights: BTreeMap::new(),
            fallback: None,
            explanation,
        }
    }
}

/// Keeping memory on the nodes of one tier while letting it spill to the others when they are
/// full: `MPOL_PREFERRED_MANY` over `nodes`, and for kernels without that mode (before Linux
/// 5.15) `MPOL_PREFERRED` on `fallback_node`, one of them. The mode and nodes, then the
/// fallback's; `memtide exec` and the hint library both place a tier so.
#[must_use]
pub fn prefer_tier(nodes: Vec<u32>, fallback_node: u32) -> ((Mode, Vec<u32>), (Mode, Vec<u32>)) {
    (
        (Mode::PreferredMany, nodes),
        (Mode::Preferred, vec![fallback_node]),
    )
}

/// `bw-aware`: interleave weighted by HMAT read bandwidth where the kernel can, else the
/// plain interleave (or the preferred node) closest to the fast tier's share of bandwidth.
fn bw_aware(
    t: &TieredTopology,
    all: Vec<u32>,
    tiers: &TierNodeSets,
    weighted_available: bool,
) -> LaunchPolicy {
    let bandwidth: Option<Vec<(u32, u64)>> = all
        .iter()
        .map(|&id| {
            t.attrs
                .iter()
                .find(|a| a.id == id)
                .and_then(|a| a.hmat)
                .and_then(|h| h.read_bandwidth)
                .map(|b| (id, b))
        })
        .collect();
    match bandwidth {
        None => LaunchPolicy::simple(
            Mode::Interleave,
            "interleave",
            all,
            "bw-aware: no HMAT bandwidth for every node; plain interleave over all nodes"
                .to_owned(),
        ),
        Some(bw) if weighted_available => {
            let weights = bandwidth_weights(&bw);
            let mut p = LaunchPolicy::simple(
                Mode::WeightedInterleave,
                "weighted-interleave",
                all,
                format!("bw-aware: weighted interleave, weights from HMAT bandwidth {weights:?}"),
            );
            p.weights = weights;
            p
        }
        Some(bw) => {
            let total: u64 = bw.iter().map(|&(_, b)| b).sum();
            let fast_bw: u64 = bw
                .iter()
                .filter(|(id, _)| tiers.fast.contains(id))
                .map(|&(_, b)| b)
                .sum();
            let share = fast_bw as f64 / total.max(1) as f64;
            let nodes = interleave_subset(&tiers.fast, &tiers.slow, share);
            if nodes.len() == 1 {
                LaunchPolicy::simple(
                    Mode::Preferred,
                    "preferred",
                    nodes,
                    format!(
                        "bw-aware: fast share {share:.2} is closest to all-fast; prefer the fast node (no weighted interleave here)"
                    ),
                )
            } else {
                LaunchPolicy::simple(
                    Mode::Interleave,
                    "interleave",
                    nodes.clone(),
                    format!(
                        "bw-aware: interleave over {nodes:?} approximates fast share {share:.2} (no weighted interleave here)"
                    ),
                )
            }
        }
    }
}

/// Writes the weighted-interleave weights (only called when the user asked for it).
pub fn write_weights(root: &HostRoot, weights: &BTreeMap<u32, u64>) -> Result<(), SysfsError> {
    for (node, weight) in weights {
        sysfs::write_value(
            &root.path(format!("{WEIGHTS_DIR}/node{node}")),
            &weight.to_string(),
        )?;
    }
    Ok(())
}

/// Reads the kernel's current weights for `nodes`.
pub fn read_weights(root: &HostRoot, nodes: &[u32]) -> Result<BTreeMap<u32, u64>, SysfsError> {
    nodes
        .iter()
        .map(|&n| sysfs::read_parse(&root.path(format!("{WEIGHTS_DIR}/node{n}"))).map(|w| (n, w)))
        .collect()
}

/// Sets `policy` on the calling thread (then execve keeps it), falling back on `EINVAL`.
pub fn apply(policy: &LaunchPolicy) -> Result<(), LaunchError> {
    let set = |mode: Mode, nodes: &[u32]| {
        let mask = NodeMask::from_nodes(nodes.iter().copied()).map_err(|source| {
            LaunchError::SetPolicy {
                mode,
                nodes: nodes.to_vec(),
                source,
            }
        })?;
        mempolicy::set_mempolicy(mode, 0, &mask).map_err(|source| LaunchError::SetPolicy {
            mode,
            nodes: nodes.to_vec(),
            source,
        })
    };
    match (set(policy.mode, &policy.nodes), &policy.fallback) {
        (Ok(()), _) => Ok(()),
        (Err(LaunchError::SetPolicy { source, .. }), Some((mode, nodes)))
            if source.raw_os_error() == Some(libc::EINVAL) =>
        {
            set(*mode, nodes)
        }
        (Err(e), _) => Err(e),
    }
}

impl fmt::Display for LaunchPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over nodes {:?}: {}",
            self.mode_name, self.nodes, self.explanation
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::tiering::tests::read as fixture;

    #[test]
    fn weights_follow_bandwidth() {
        assert_eq!(
            bandwidth_weights(&[(0, 20480), (1, 5120)]),
            BTreeMap::from([(0, 4), (1, 1)])
        );
        assert_eq!(
            bandwidth_weights(&[(0, 1_000_000), (1, 1)]),
            BTreeMap::from([(0, MAX_WEIGHT), (1, 1)])
        );
    }

    #[test]
    fn interleave_subsets_approximate_the_share() {
        // CXL box: 2 fast, 1 slow, bandwidth 200+200 vs 50: share 0.89 → 2 fast alone (1.0)
        // beats 2:1 (0.67).
        assert_eq!(interleave_subset(&[0, 1], &[2], 0.89), vec![0, 1]);
        assert_eq!(interleave_subset(&[0, 1], &[2], 0.7), vec![0, 1, 2]);
        assert_eq!(interleave_subset(&[0], &[1], 0.5), vec![0, 1]);
        assert_eq!(interleave_subset(&[0], &[1], 0.8), vec![0]);
    }

    #[test]
    fn plans_on_the_vm_and_the_cxl_box() {
        let vm = fixture("vm-hmat");
        let p = plan(Placement::BwAware, &vm, true).unwrap();
        assert_eq!(
            (p.mode, p.nodes.clone()),
            (Mode::WeightedInterleave, vec![0, 1])
        );
        assert_eq!(p.weights, BTreeMap::from([(0, 4), (1, 1)]));
        let p = plan(Placement::BwAware, &vm, false).unwrap();
        assert_eq!((p.mode, p.nodes), (Mode::Preferred, vec![0]));
        let p = plan(Placement::FastFirst, &vm, true).unwrap();
        assert_eq!((p.mode, p.nodes.clone()), (Mode::PreferredMany, vec![0]));
        assert_eq!(p.fallback, Some((Mode::Preferred, vec![0])));
        let cxl = fixture("cxl-cpuless");
        let p = plan(Placement::Interleave, &cxl, true).unwrap();
        assert_eq!((p.mode, p.nodes), (Mode::Interleave, vec![0, 1, 2]));
        let p = plan(Placement::BwAware, &cxl, false).unwrap();
        assert_eq!(p.mode, Mode::Interleave);
        assert_eq!(p.nodes, vec![0, 1]);
        // No HMAT: bw-aware degrades to plain interleave, and says so.
        let p = plan(Placement::BwAware, &fixture("one-tier"), true).unwrap();
        assert_eq!((p.mode, p.nodes.clone()), (Mode::Interleave, vec![0, 1]));
        assert!(p.explanation.contains("no HMAT"));
    }

    #[test]
    fn placement_names() {
        assert_eq!("bw-aware".parse(), Ok(Placement::BwAware));
        assert_eq!("fast-first".parse(), Ok(Placement::FastFirst));
        assert!("fastest".parse::<Placement>().is_err());
    }

    #[test]
    fn weights_are_written_only_where_told() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        std::fs::create_dir_all(root.path(WEIGHTS_DIR)).unwrap();
        assert!(weighted_interleave_available(&root));
        write_weights(&root, &BTreeMap::from([(0, 4), (1, 1)])).unwrap();
        assert_eq!(
            read_weights(&root, &[0, 1]).unwrap(),
            BTreeMap::from([(0, 4), (1, 1)])
        );
    }
}
