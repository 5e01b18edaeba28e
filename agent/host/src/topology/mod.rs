//! NUMA nodes, memory tiers and the kernel's own tiering settings.
//!
//! Sources (all read through a [`HostRoot`]):
//! - `/sys/devices/system/node/online` and `nodeN/{cpulist,meminfo}`. A kernel built without
//!   `CONFIG_NUMA` has no `node/` directory; the machine is then one node 0 holding every online
//!   CPU (`/sys/devices/system/cpu/online`) and all memory (`/proc/meminfo`).
//! - `/sys/devices/virtual/memory_tiering/memory_tierN/nodelist` (Linux 6.1+; the file was called
//!   `nodes` in early versions of the series). A smaller N is a faster tier.
//! - THP mode, `numa_balancing` and `demotion_enabled` ([`MmSettings`]).
//! - Distances, HMAT attributes, the fast/slow classification and memory hotplug:
//!   [`tiering`].

use std::{fmt, path::Path, str::FromStr};

use serde::Serialize;

use crate::sysfs::{self, HostRoot, SysfsError};

pub mod costs;
pub mod locality;
pub mod node_sets;
pub mod tiering;

const NODE_DIR: &str = "sys/devices/system/node";
const TIERS_DIR: &str = "sys/devices/virtual/memory_tiering";

/// One NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Node {
    pub id: u32,
    /// CPUs of the node; empty for a CPU-less (CXL, PMEM, HBM-only) node.
    pub cpus: Vec<u32>,
    /// `MemTotal` of the node.
    pub memory_bytes: u64,
    /// `MemFree` of the node at the time of reading.
    pub free_bytes: u64,
    /// The memory tier (`memory_tierN`) the node belongs to, if the kernel has memory tiers.
    pub tier: Option<u32>,
}

impl Node {
    /// Whether the node has no CPUs (memory only: typical for CXL expanders).
    #[must_use]
    pub fn is_cpuless(&self) -> bool {
        self.cpus.is_empty()
    }
}

/// One memory tier. Tiers with smaller ids are faster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryTier {
    pub id: u32,
    pub nodes: Vec<u32>,
}

/// The nodes and tiers of a machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Nodes, sorted by id. Never empty: a non-NUMA kernel yields one node 0.
    pub nodes: Vec<Node>,
    /// Memory tiers, fastest (smallest id) first; empty on kernels without memory tiering.
    pub tiers: Vec<MemoryTier>,
    /// False when the kernel has no `/sys/devices/system/node` (built without NUMA).
    pub numa_sysfs: bool,
}

impl Topology {
    /// Reads nodes and tiers under `root`.
    pub fn read(root: &HostRoot) -> Result<Self, SysfsError> {
        let tiers = read_memory_tiers(root)?;
        let node_dir = root.path(NODE_DIR);
        let (mut nodes, numa_sysfs) = if sysfs::exists(&node_dir) {
            (read_nodes(root)?, true)
        } else {
            (vec![read_non_numa_node(root)?], false)
        };
        for node in &mut nodes {
            node.tier = tiers
                .iter()
                .find(|t| t.nodes.contains(&node.id))
                .map(|t| t.id);
        }
        Ok(Self {
            nodes,
            tiers,
            numa_sysfs,
        })
    }

    /// The node with id `id`.
    #[must_use]
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Every node's id, in order: what a configuration's node numbers are checked against
    /// (`memtide_config::Config::problems`).
    #[must_use]
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Nodes that have memory (a node can be online with 0 bytes, for example during hotplug).
    pub fn nodes_with_memory(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.memory_bytes > 0)
    }

    /// Whether there is anywhere to migrate to: at least two nodes with memory.
    #[must_use]
    pub fn can_migrate(&self) -> bool {
        self.nodes_with_memory().count() >= 2
    }
}

fn read_nodes(root: &HostRoot) -> Result<Vec<Node>, SysfsError> {
    let node_dir = root.path(NODE_DIR);
    let online = node_dir.join("online");
    let ids = match sysfs::read_list_optional(&online)? {
        Some(ids) => ids,
        None => sysfs::numbered_entries(&node_dir, "node")?
            .unwrap_or_default()
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    };
    // A NUMA kernel always has node 0 online: an empty list is a broken file, and accepting it
    // would break the "never empty" promise of `Topology::nodes`.
    if ids.is_empty() {
        return Err(if sysfs::exists(&online) {
            SysfsError::parse(&online, "", "a non-empty node list")
        } else {
            SysfsError::parse(&node_dir, "", "at least one nodeN directory")
        });
    }
    ids.into_iter()
        .map(|id| {
            let dir = node_dir.join(format!("node{id}"));
            let cpus = sysfs::read_list(&dir.join("cpulist"))?;
            let meminfo = dir.join("meminfo");
            let text = sysfs::read_trimmed(&meminfo)?;
            let info = parse_node_meminfo(&meminfo, &text, id)?;
            Ok(Node {
                id,
                cpus,
                memory_bytes: info.total_bytes,
                free_bytes: info.free_bytes,
                tier: None,
            })
        })
        .collect()
}

fn read_non_numa_node(root: &HostRoot) -> Result<Node, SysfsError> {
    let cpus = sysfs::read_list(&root.path("sys/devices/system/cpu/online"))?;
    let meminfo = root.path("proc/meminfo");
    let text = sysfs::read_trimmed(&meminfo)?;
    let info = parse_meminfo(&meminfo, &text, Some)?;
    Ok(Node {
        id: 0,
        cpus,
        memory_bytes: info.total_bytes,
        free_bytes: info.free_bytes,
        tier: None,
    })
}

/// `MemTotal` and `MemFree` of one node or the whole machine, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    pub total_bytes: u64,
    pub free_bytes: u64,
}

/// Parses a node's `meminfo` (`Node 0 MemTotal:        6777048 kB`). `path` is for errors.
pub fn parse_node_meminfo(path: &Path, text: &str, node: u32) -> Result<MemInfo, SysfsError> {
    let prefix = format!("Node {node} ");
    parse_meminfo(path, text, |line| line.strip_prefix(prefix.as_str()))
}

/// Parses `/proc/meminfo`-style text. `strip` maps each line to its `Key: value kB` part or
/// rejects it.
fn parse_meminfo<'a>(
    path: &Path,
    text: &'a str,
    strip: impl Fn(&'a str) -> Option<&'a str>,
) -> Result<MemInfo, SysfsError> {
    let mut total = None;
    let mut free = None;
    for line in text.lines() {
        let Some(rest) = strip(line.trim()) else {
            continue;
        };
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "MemTotal" => &mut total,
            "MemFree" => &mut free,
            _ => continue,
        };
        *slot = Some(parse_kb(path, value)?);
    }
    match (total, free) {
        (Some(total_bytes), Some(free_bytes)) => Ok(MemInfo {
            total_bytes,
            free_bytes,
        }),
        _ => Err(SysfsError::parse(
            path,
            text.lines().next().unwrap_or(""),
            "meminfo with MemTotal and MemFree lines",
        )),
    }
}

fn parse_kb(path: &Path, value: &str) -> Result<u64, SysfsError> {
    let value = value.trim();
    let number = value.strip_suffix("kB").unwrap_or(value).trim();
    number
        .parse::<u64>()
        .ok()
        .and_then(|kb| kb.checked_mul(1024))
        .ok_or_else(|| SysfsError::parse(path, value, "a size in kB"))
}

/// Reads `memory_tierN/nodelist` (or the early `nodes`) for every tier, fastest first. Empty when
/// the kernel has no memory tiering.
pub fn read_memory_tiers(root: &HostRoot) -> Result<Vec<MemoryTier>, SysfsError> {
    let dir = root.path(TIERS_DIR);
    let Some(entries) = sysfs::numbered_entries(&dir, "memory_tier")? else {
        return Ok(Vec::new());
    };
    let mut tiers = Vec::with_capacity(entries.len());
    for (id, path) in entries {
        let nodes = match sysfs::read_list_optional(&path.join("nodelist"))? {
            Some(nodes) => nodes,
            None => sysfs::read_list(&path.join("nodes"))?,
        };
        tiers.push(MemoryTier { id, nodes });
    }
    Ok(tiers)
}

/// Transparent huge page mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    Always,
    Madvise,
    Never,
}

impl ThpMode {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Madvise => "madvise",
            Self::Never => "never",
        }
    }

    /// Parses the sysfs file content, `always [madvise] never`: the bracketed word is the mode.
    pub fn from_sysfs(text: &str) -> Option<Self> {
        let start = text.find('[')?;
        let end = start + text[start..].find(']')?;
        text[start + 1..end].parse().ok()
    }
}

impl FromStr for ThpMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "always" => Ok(Self::Always),
            "madvise" => Ok(Self::Madvise),
            "never" => Ok(Self::Never),
            _ => Err(()),
        }
    }
}

impl fmt::Display for ThpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kernel's own placement knobs. `None` = the file does not exist on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MmSettings {
    pub thp: Option<ThpMode>,
    /// `/proc/sys/kernel/numa_balancing`: 0 off, 1 NUMA balancing, 2 memory-tiering mode
    /// (promotion from slow tiers), 3 both.
    pub numa_balancing: Option<u32>,
    /// `/sys/kernel/mm/numa/demotion_enabled`: reclaim demotes to slower tiers.
    pub demotion_enabled: Option<bool>,
}

impl MmSettings {
    /// Reads the three settings under `root`; the first malformed one is the error.
    pub fn read(root: &HostRoot) -> Result<Self, SysfsError> {
        Ok(Self {
            thp: read_thp(root)?,
            numa_balancing: read_numa_balancing(root)?,
            demotion_enabled: read_demotion_enabled(root)?,
        })
    }
}

/// `/sys/kernel/mm/transparent_hugepage/enabled` (`always [madvise] never`); `None` without THP.
pub fn read_thp(root: &HostRoot) -> Result<Option<ThpMode>, SysfsError> {
    let path = root.path("sys/kernel/mm/transparent_hugepage/enabled");
    sysfs::read_optional(&path)?
        .map(|text| {
            ThpMode::from_sysfs(&text).ok_or_else(|| {
                SysfsError::parse(&path, &text, "one bracketed word of always/madvise/never")
            })
        })
        .transpose()
}

/// `/proc/sys/kernel/numa_balancing`; `None` on kernels without NUMA balancing.
pub fn read_numa_balancing(root: &HostRoot) -> Result<Option<u32>, SysfsError> {
    sysfs::read_parse_optional(&root.path("proc/sys/kernel/numa_balancing"))
}

/// `/sys/kernel/mm/numa/demotion_enabled`; `None` on kernels without demotion (before 5.15).
pub fn read_demotion_enabled(root: &HostRoot) -> Result<Option<bool>, SysfsError> {
    let path = root.path("sys/kernel/mm/numa/demotion_enabled");
    sysfs::read_optional(&path)?
        .map(|text| match text.as_str() {
            // The kernel prints true/false and accepts kstrtobool input.
            "true" | "1" | "y" | "Y" => Ok(true),
            "false" | "0" | "n" | "N" => Ok(false),
            _ => Err(SysfsError::parse(&path, &text, "true or false")),
        })
        .transpose()
}

/// Human meaning of a `numa_balancing` value.
#[must_use]
pub fn describe_numa_balancing(value: u32) -> &'static str {
    match value {
        0 => "off",
        1 => "NUMA balancing",
        2 => "memory tiering (promotion)",
        3 => "NUMA balancing + memory tiering",
        _ => "unknown mode",
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::test_tree::write;

    #[test]
    fn thp_bracketed_word() {
        assert_eq!(
            ThpMode::from_sysfs("always [madvise] never"),
            Some(ThpMode::Madvise)
        );
        assert_eq!(
            ThpMode::from_sysfs("[always] madvise never"),
            Some(ThpMode::Always)
        );
        assert_eq!(
            ThpMode::from_sysfs("always madvise [never]"),
            Some(ThpMode::Never)
        );
        assert_eq!(ThpMode::from_sysfs("always madvise never"), None);
        assert_eq!(ThpMode::from_sysfs("always [sometimes] never"), None);
        assert_eq!(ThpMode::from_sysfs("]["), None);
    }

    #[test]
    fn node_meminfo() {
        let text = "Node 1 MemTotal:       1048576 kB\nNode 1 MemFree:         524288 kB\nNode 1 MemUsed: 1 kB";
        let info = parse_node_meminfo(Path::new("m"), text, 1).unwrap();
        assert_eq!(info.total_bytes, 1 << 30);
        assert_eq!(info.free_bytes, 1 << 29);
        // Lines of another node do not count.
        assert!(parse_node_meminfo(Path::new("m"), text, 0).is_err());
    }

    #[test]
    fn node_meminfo_malformed_is_path_error() {
        let err = parse_node_meminfo(
            Path::new("/x/meminfo"),
            "Node 0 MemTotal: lots kB\nNode 0 MemFree: 1 kB",
            0,
        )
        .unwrap_err();
        assert_eq!(err.path(), Path::new("/x/meminfo"));
        let err = parse_node_meminfo(
            Path::new("/x/meminfo"),
            "Node 0 MemTotal: 99999999999999999999 kB\nNode 0 MemFree: 1 kB",
            0,
        )
        .unwrap_err();
        assert!(matches!(err, SysfsError::Parse { .. }));
    }

    #[test]
    fn non_numa_kernel_is_one_node() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "sys/devices/system/cpu/online", "0-3\n");
        write(
            dir.path(),
            "proc/meminfo",
            "MemTotal:        8000000 kB\nMemFree:         4000000 kB\nMemAvailable: 5 kB\n",
        );
        let topo = Topology::read(&HostRoot::new(dir.path())).unwrap();
        assert!(!topo.numa_sysfs);
        assert_eq!(
            topo.nodes,
            vec![Node {
                id: 0,
                cpus: vec![0, 1, 2, 3],
                memory_bytes: 8_000_000 * 1024,
                free_bytes: 4_000_000 * 1024,
                tier: None
            }]
        );
        assert!(!topo.can_migrate());
    }

    #[test]
    fn nodes_without_online_file_and_old_tier_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/devices/system/node/node0/cpulist", "0-1\n");
        write(
            r,
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 100 kB\nNode 0 MemFree: 50 kB\n",
        );
        write(r, "sys/devices/system/node/node2/cpulist", "\n");
        write(
            r,
            "sys/devices/system/node/node2/meminfo",
            "Node 2 MemTotal: 200 kB\nNode 2 MemFree: 150 kB\n",
        );
        write(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier4/nodes",
            "0\n",
        );
        write(
            r,
            "sys/devices/virtual/memory_tiering/memory_tier12/nodelist",
            "2\n",
        );
        let topo = Topology::read(&HostRoot::new(r)).unwrap();
        let ids: Vec<_> = topo.nodes.iter().map(|n| (n.id, n.tier)).collect();
        assert_eq!(ids, vec![(0, Some(4)), (2, Some(12))]);
        assert!(topo.node(2).unwrap().is_cpuless());
        assert_eq!(topo.node(2).unwrap().memory_bytes, 200 * 1024);
        assert!(topo.can_migrate());
    }

    #[test]
    fn malformed_settings_are_path_errors() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/kernel/mm/numa/demotion_enabled", "maybe\n");
        let err = MmSettings::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("sys/kernel/mm/numa/demotion_enabled"));
        write(r, "sys/kernel/mm/numa/demotion_enabled", "true\n");
        write(r, "proc/sys/kernel/numa_balancing", "two\n");
        let err = MmSettings::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("proc/sys/kernel/numa_balancing"));
        write(r, "proc/sys/kernel/numa_balancing", "2\n");
        write(
            r,
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always madvise never\n",
        );
        let err = MmSettings::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("transparent_hugepage/enabled"));
        fs::remove_file(r.join("sys/kernel/mm/transparent_hugepage/enabled")).unwrap();
        let settings = MmSettings::read(&HostRoot::new(r)).unwrap();
        assert_eq!(
            settings,
            MmSettings {
                thp: None,
                numa_balancing: Some(2),
                demotion_enabled: Some(true)
            }
        );
    }

    /// Found by the `sysfs_topology` fuzz target: an empty `node/online` (or a node directory
    /// without `nodeN` entries) gave a topology with no node at all, which `Topology::nodes`
    /// promises never happens.
    #[test]
    fn an_empty_node_list_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/devices/system/node/online", "\n");
        let err = Topology::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("node/online"), "{err}");
        fs::remove_file(r.join("sys/devices/system/node/online")).unwrap();
        let err = Topology::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("system/node"), "{err}");
    }

    #[test]
    fn malformed_node_files_are_path_errors() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/devices/system/node/online", "0\n");
        write(r, "sys/devices/system/node/node0/cpulist", "0-x\n");
        let err = Topology::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("node0/cpulist"), "{err}");
        write(r, "sys/devices/system/node/node0/cpulist", "0\n");
        let err = Topology::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("node0/meminfo"), "{err}");
        assert!(matches!(err, SysfsError::Io { .. }));
        write(r, "sys/devices/system/node/online", "zero\n");
        let err = Topology::read(&HostRoot::new(r)).unwrap_err();
        assert!(err.path().ends_with("node/online"), "{err}");
    }
}
