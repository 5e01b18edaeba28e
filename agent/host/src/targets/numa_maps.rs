//! `/proc/PID/numa_maps`: per mapping, its memory policy and how many pages sit on each node.
//!
//! Line format (mm/mempolicy.c `show_numa_map`): `ADDR POLICY [file=PATH | heap | stack | huge]
//! [anon=N] [dirty=N] [mapped=N] [mapcount=N] [swapcache=N] [active=N] [writeback=N] [Nn=N]...
//! kernelpagesize_kB=N`. POLICY is `mpol_to_str`'s output, which may contain spaces
//! (`weighted interleave:0-1`, `prefer (many):0-1`) and flags (`bind=static:1`). PATH has
//! white space, `\` and `=` escaped as octal (`\040`), so splitting on white space is safe.

use std::{collections::BTreeMap, path::Path};

use memtide_core::units::PAGE_SIZE;
use serde::Serialize;

use crate::sysfs::SysfsError;

/// Policy names `mpol_to_str` prints, longest first so `prefer (many)` wins over `prefer`.
const POLICY_NAMES: [&str; 7] = [
    "weighted interleave",
    "prefer (many)",
    "interleave",
    "default",
    "prefer",
    "local",
    "bind",
];

/// One line of numa_maps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NumaMap {
    pub start: u64,
    /// Policy name: `default`, `bind`, `interleave`, `weighted interleave`, `prefer`,
    /// `prefer (many)`, `local`.
    pub policy: String,
    /// Mode flags after `=`: `static`, `relative`, `balancing` (comma separated in the kernel).
    pub policy_flags: Vec<String>,
    /// The policy's nodes (`bind:0-1`), empty when it names none.
    pub policy_nodes: Vec<u32>,
    /// `file=` with the octal escapes undone.
    pub file: Option<String>,
    pub heap: bool,
    pub stack: bool,
    /// A hugetlb mapping.
    pub huge: bool,
    pub anon: u64,
    pub dirty: u64,
    pub mapped: u64,
    pub mapcount: u64,
    pub swapcache: u64,
    pub active: u64,
    pub writeback: u64,
    /// Pages (of `kernel_page_kb`) per node.
    pub nodes: BTreeMap<u32, u64>,
    pub kernel_page_kb: u64,
}

impl NumaMap {
    /// Why memtide must leave this mapping where it is, if it must: a memory policy the
    /// application set (`mbind(2)`, memtide's hint library: bind, prefer, interleave) says
    /// where its pages belong, and moving them would undo it. `default` and `local` express
    /// no placement.
    #[must_use]
    pub fn left_alone_because(&self) -> Option<&'static str> {
        match self.policy.as_str() {
            "default" | "local" | "" => None,
            _ => Some("mempolicy"),
        }
    }

    /// Resident pages of 4 KiB on all nodes.
    #[must_use]
    pub fn resident_pages(&self) -> u64 {
        let bytes = self
            .nodes
            .keys()
            .map(|&node| self.bytes_on(node))
            .fold(0, u64::saturating_add);
        bytes / PAGE_SIZE
    }

    /// Bytes on `node`. Saturates at `u64::MAX` (only a corrupt file has that many pages).
    #[must_use]
    pub fn bytes_on(&self, node: u32) -> u64 {
        self.nodes
            .get(&node)
            .copied()
            .unwrap_or(0)
            .saturating_mul(self.kernel_page_kb)
            .saturating_mul(1024)
    }
}

/// Undoes seq_file's octal escapes (`\040` → space).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0')))
            .and_then(|v| u8::try_from(v).ok());
        if let Some(value) = octal {
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one numa_maps line; `None` if it is not one.
#[must_use]
pub fn parse_line(line: &str) -> Option<NumaMap> {
    let line = line.trim();
    let (addr, rest) = line.split_once(' ')?;
    let mut entry = NumaMap {
        start: u64::from_str_radix(addr, 16).ok()?,
        ..NumaMap::default()
    };
    let name = POLICY_NAMES.iter().find(|n| rest.starts_with(**n))?;
    entry.policy = (*name).to_owned();
    let rest = &rest[name.len()..];
    // Up to the next space: `=flags` then `:nodes`, each optional.
    let (spec, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let (flags, nodes) = match spec.split_once(':') {
        Some((flags, nodes)) => (flags, Some(nodes)),
        None => (spec, None),
    };
    if let Some(flags) = flags.strip_prefix('=') {
        entry.policy_flags = flags.split(',').map(str::to_owned).collect();
    } else if !flags.is_empty() {
        return None;
    }
    if let Some(nodes) = nodes {
        entry.policy_nodes = crate::sysfs::parse_nodelist(nodes).ok()?;
    }
    for token in rest.split_whitespace() {
        match token.split_once('=') {
            None => match token {
                "heap" => entry.heap = true,
                "stack" => entry.stack = true,
                "huge" => entry.huge = true,
                // Unknown flags from newer kernels are ignored rather than fatal.
                _ => {}
            },
            Some(("file", path)) => entry.file = Some(unescape(path)),
            Some((key, value)) => {
                let value: u64 = value.parse().ok()?;
                match key {
                    "anon" => entry.anon = value,
                    "dirty" => entry.dirty = value,
                    "mapped" => entry.mapped = value,
                    "mapcount" => entry.mapcount = value,
                    "swapcache" => entry.swapcache = value,
                    "active" => entry.active = value,
                    "writeback" => entry.writeback = value,
                    "kernelpagesize_kB" => entry.kernel_page_kb = value,
                    _ => {
                        if let Some(node) = key.strip_prefix('N').and_then(|n| n.parse().ok()) {
                            entry.nodes.insert(node, value);
                        }
                    }
                }
            }
        }
    }
    Some(entry)
}

/// Parses a whole numa_maps file; `path` is for errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<NumaMap>, SysfsError> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            parse_line(line).ok_or_else(|| SysfsError::parse(path, line, "a numa_maps line"))
        })
        .collect()
}

/// Bytes per node summed over `entries` (saturating, like [`NumaMap::bytes_on`]).
#[must_use]
pub fn bytes_per_node(entries: &[NumaMap]) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for entry in entries {
        for &node in entry.nodes.keys() {
            let total: &mut u64 = out.entry(node).or_insert(0);
            *total = total.saturating_add(entry.bytes_on(node));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use memtide_core::units::SUPERPAGE_SIZE;

    use super::*;

    const NUMA_MAPS: &str = "\
55d0c8a00000 default file=/usr/bin/memtide-workload mapped=33 mapcount=2 active=0 N0=33 kernelpagesize_kB=4
55d0c9e3c000 default heap anon=12 dirty=12 N0=12 kernelpagesize_kB=4
7f2a3c000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f2a40000000 weighted interleave:0-1 anon=100 dirty=100 N0=60 N1=40 kernelpagesize_kB=4
7f2a40200000 prefer (many):0-1 anon=2 dirty=2 N0=2 kernelpagesize_kB=4
7f2a40400000 interleave=static:0,1 file=/memfd:shared\\040buf\\040(deleted) dirty=3 mapped=3 N1=3 kernelpagesize_kB=4
7f2a40600000 default file=/dev/hugepages/huge huge dirty=1 N1=1 kernelpagesize_kB=2048
7f2a40800000 default
7f2a40a00000 prefer=relative:1 anon=1 dirty=1 swapcache=1 writeback=0 N0=1 kernelpagesize_kB=4
7ffd1a2b3000 default stack anon=5 dirty=5 N0=5 kernelpagesize_kB=4
7ffd1a2b4000 local anon=1 N0=1 kernelpagesize_kB=4 future_flag
";

    #[test]
    fn parses_policies_files_and_counts() {
        let maps = parse(Path::new("numa_maps"), NUMA_MAPS).unwrap();
        assert_eq!(maps.len(), 11);
        assert_eq!(maps[0].file.as_deref(), Some("/usr/bin/memtide-workload"));
        assert_eq!(maps[0].mapcount, 2);
        assert!(maps[1].heap);
        assert_eq!(
            (maps[2].policy.as_str(), &maps[2].policy_nodes[..]),
            ("bind", &[1][..])
        );
        assert_eq!(maps[2].bytes_on(1), 512 * PAGE_SIZE);
        assert_eq!(maps[3].policy, "weighted interleave");
        assert_eq!(maps[3].policy_nodes, vec![0, 1]);
        assert_eq!(maps[3].nodes, BTreeMap::from([(0, 60), (1, 40)]));
        assert_eq!(maps[4].policy, "prefer (many)");
        assert_eq!(maps[5].policy_flags, vec!["static"]);
        assert_eq!(maps[5].policy_nodes, vec![0, 1]);
        assert_eq!(maps[5].file.as_deref(), Some("/memfd:shared buf (deleted)"));
        assert!(maps[6].huge);
        assert_eq!(maps[6].bytes_on(1), SUPERPAGE_SIZE);
        assert_eq!(maps[7].policy, "default");
        assert!(maps[7].nodes.is_empty());
        assert_eq!(maps[8].policy, "prefer");
        assert_eq!(maps[8].policy_flags, vec!["relative"]);
        assert_eq!(maps[8].swapcache, 1);
        assert!(maps[9].stack);
        assert_eq!(maps[10].policy, "local");
        let total = bytes_per_node(&maps);
        assert_eq!(total[&1], (512 + 40 + 3) * PAGE_SIZE + SUPERPAGE_SIZE);
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "zz default",
            "1000 sometimes anon=1",
            "1000 bind:x anon=1",
            "1000 default anon=many",
            "1000 bindx:1 anon=1",
        ] {
            let err = parse(Path::new("/proc/7/numa_maps"), bad).unwrap_err();
            assert!(err.to_string().starts_with("/proc/7/numa_maps"), "{err}");
        }
    }

    /// Found by the `proc_numa_maps` fuzz target: a page count times the page size that does not
    /// fit in 64 bits overflowed (a panic with overflow checks, a wrapped total without).
    #[test]
    fn huge_page_counts_saturate_instead_of_overflowing() {
        let text = "1000 default anon=1 N0=18446744073709551615 N1=2 kernelpagesize_kB=4\n\
                    2000 default anon=1 N0=9007199254740992 kernelpagesize_kB=2048\n\
                    3000 default N0=18446744073709551615 kernelpagesize_kB=18446744073709551615\n";
        let maps = parse(Path::new("numa_maps"), text).unwrap();
        assert_eq!(maps[0].bytes_on(0), u64::MAX);
        assert_eq!(maps[0].bytes_on(1), 2 * PAGE_SIZE);
        assert_eq!(maps[1].bytes_on(0), u64::MAX);
        assert_eq!(maps[2].bytes_on(0), u64::MAX);
        let total = bytes_per_node(&maps);
        assert_eq!(total[&0], u64::MAX);
        assert_eq!(total[&1], 2 * PAGE_SIZE);
    }

    #[test]
    fn octal_escapes() {
        assert_eq!(unescape("a\\040b\\075c\\134"), "a b=c\\");
        assert_eq!(unescape("x\\04"), "x\\04");
        assert_eq!(unescape("\\777"), "\\777");
        assert_eq!(unescape("\\012"), "\n");
        assert_eq!(unescape("plain"), "plain");
    }
}
