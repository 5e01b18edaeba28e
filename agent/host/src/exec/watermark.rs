//! Free memory and watermarks per node, so the executor never pushes a node below the point
//! where the kernel starts reclaiming (the zones' `high` watermark) plus a configured reserve.
//!
//! Sources: `nodeN/meminfo` (`MemFree`) and `/proc/zoneinfo` (per zone `pages free`, `min`,
//! `low`, `high`, in pages).

use std::{collections::BTreeMap, path::Path};

use memtide_core::units::PAGE_SIZE;

use crate::{
    sysfs::{self, HostRoot, SysfsError},
    topology,
};

/// Watermarks of one node, summed over its zones, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeWatermarks {
    pub min: u64,
    pub low: u64,
    pub high: u64,
}

/// Parses `/proc/zoneinfo` into per-node watermark sums. `page_size` converts pages to bytes.
pub fn parse_zoneinfo(
    path: &Path,
    text: &str,
    page_size: u64,
) -> Result<BTreeMap<u32, NodeWatermarks>, SysfsError> {
    let mut out: BTreeMap<u32, NodeWatermarks> = BTreeMap::new();
    let mut node: Option<u32> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Node ") {
            // `Node 0, zone   Normal`
            let id = rest
                .split(',')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| SysfsError::parse(path, trimmed, "`Node N, zone NAME`"))?;
            node = Some(id);
            out.entry(id).or_default();
            continue;
        }
        let Some(id) = node else { continue };
        let mut words = trimmed.split_whitespace();
        let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if !matches!(key, "min" | "low" | "high") {
            continue;
        }
        let pages: u64 = value
            .parse()
            .map_err(|_| SysfsError::parse(path, trimmed, "a page count"))?;
        let entry = out.entry(id).or_default();
        let slot = match key {
            "min" => &mut entry.min,
            "low" => &mut entry.low,
            _ => &mut entry.high,
        };
        *slot += pages * page_size;
    }
    Ok(out)
}

/// Reads `/proc/zoneinfo` under `root`.
pub fn read_watermarks(root: &HostRoot) -> Result<BTreeMap<u32, NodeWatermarks>, SysfsError> {
    let path = root.path("proc/zoneinfo");
    let text = sysfs::read_trimmed(&path)?;
    parse_zoneinfo(&path, &text, PAGE_SIZE)
}

/// `MemFree` of `node`, from `nodeN/meminfo`; `None` when the node does not exist.
pub fn read_node_free(root: &HostRoot, node: u32) -> Result<Option<u64>, SysfsError> {
    let path = root.path(format!("sys/devices/system/node/node{node}/meminfo"));
    let Some(text) = sysfs::read_optional(&path)? else {
        return Ok(None);
    };
    topology::parse_node_meminfo(&path, &text, node).map(|m| Some(m.free_bytes))
}

/// How many of `want` bytes may move to a node with `free` bytes free without going below
/// `floor`.
#[must_use]
pub const fn room(free: u64, floor: u64, want: u64) -> u64 {
    let spare = free.saturating_sub(floor);
    if spare < want { spare } else { want }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONEINFO: &str = "\
Node 0, zone      DMA
  per-node stats
      nr_inactive_anon 0
  pages free     3840
        min      19
        low      23
        high     27
        spanned  4095
        protection: (0, 2906, 7888, 7888, 7888)
Node 0, zone   Normal
  pages free     604093
        min      12957
        low      16196
        high     19435
Node 1, zone  Movable
  pages free     0
        min      32
        low      40
        high     48
";

    #[test]
    fn zoneinfo_sums_per_node() {
        let marks = parse_zoneinfo(Path::new("zoneinfo"), ZONEINFO, PAGE_SIZE).unwrap();
        assert_eq!(marks[&0].min, (19 + 12957) * PAGE_SIZE);
        assert_eq!(marks[&0].high, (27 + 19435) * PAGE_SIZE);
        assert_eq!(
            marks[&1],
            NodeWatermarks {
                min: 32 * PAGE_SIZE,
                low: 40 * PAGE_SIZE,
                high: 48 * PAGE_SIZE
            }
        );
        let err = parse_zoneinfo(Path::new("/proc/zoneinfo"), "Node x, zone DMA\n", PAGE_SIZE)
            .unwrap_err();
        assert!(err.to_string().starts_with("/proc/zoneinfo"));
        let err = parse_zoneinfo(
            Path::new("z"),
            "Node 0, zone DMA\n   high lots\n",
            PAGE_SIZE,
        )
        .unwrap_err();
        assert!(matches!(err, SysfsError::Parse { .. }));
    }

    #[test]
    fn room_never_crosses_the_floor() {
        assert_eq!(room(100, 30, 50), 50);
        assert_eq!(room(100, 30, 80), 70);
        assert_eq!(room(20, 30, 10), 0);
    }

    #[test]
    fn node_free_from_fixture() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sys/devices/system/node/node1");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("meminfo"),
            "Node 1 MemTotal: 1000 kB\nNode 1 MemFree: 600 kB\n",
        )
        .unwrap();
        let root = HostRoot::new(dir.path());
        assert_eq!(read_node_free(&root, 1).unwrap(), Some(600 * 1024));
        assert_eq!(read_node_free(&root, 5).unwrap(), None);
    }
}
