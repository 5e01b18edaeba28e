//! How finely DAMON resolves the targets: the minimum number of regions memtide asks for.
//!
//! DAMON never merges regions past the monitored span divided by `min_nr_regions` (its
//! `damon_region_sz_limit`), over all the context's targets together, and a vaddr target's
//! span runs from its first mapping to its last less the two widest gaps (its "three
//! regions"): with address-space randomisation that includes the heap's random offset. At 10
//! regions a region is tens of MiB, and one reaching from a hot set into cold memory carries
//! one access count for all of it, so its cold superpages move with the hot ones.

use memtide_config::DamonMonitorConfig;
use memtide_host::{
    sysfs::{self, HostRoot},
    targets::maps::{self, Mapping, MappingKind},
};

/// The bytes DAMON's vaddr monitoring spans for a process with `maps`: from its first mapping
/// to its last, less the two widest unmapped gaps. `[vsyscall]` is not in the process's
/// memory map, only in the file.
#[must_use]
pub fn monitored_span(maps: &[Mapping]) -> u64 {
    let mut ranges: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| !matches!(&m.kind, MappingKind::Special(name) if name == "vsyscall"))
        .map(|m| (m.start, m.end))
        .collect();
    ranges.sort_unstable();
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
        return 0;
    };
    let whole = last.1.saturating_sub(first.0);
    let mut gaps: Vec<u64> = ranges
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].1))
        .collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    whole.saturating_sub(gaps.iter().take(2).sum::<u64>())
}

/// The monitored span of every target in `pids` together, as far as their maps can be read
/// (a process that is gone spans nothing).
#[must_use]
pub fn targets_span(root: &HostRoot, pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let path = root.path(format!("proc/{pid}/maps"));
            let text = sysfs::read_trimmed(&path).ok()?;
            maps::parse(&path, &text).ok()
        })
        .map(|maps| monitored_span(&maps))
        .sum()
}

/// The minimum number of regions for targets spanning `span` bytes: `min_regions`, raised so
/// that no region exceeds `region_bytes`, but to at most half of `max_regions`, the count
/// below which DAMON still splits regions where their accesses differ.
#[must_use]
pub fn min_regions(config: &DamonMonitorConfig, span: u64) -> u32 {
    if config.region_bytes == 0 {
        return config.min_regions;
    }
    let wanted = u32::try_from(span.div_ceil(config.region_bytes)).unwrap_or(u32::MAX);
    wanted.min(config.max_regions / 2).max(config.min_regions)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const MIB: u64 = 1 << 20;

    /// A binary, a heap 600 MiB past it (a randomised offset), a 256 MiB buffer and a library
    /// far above, the stack and `[vsyscall]` at the top.
    const MAPS: &str = "\
55d0c8a00000-55d0c8a21000 r--p 00000000 fd:01 1315009                    /usr/bin/memtide-workload
55d0eea21000-55d0eea42000 rw-p 00000000 00:00 0                          [heap]
7f2a20000000-7f2a30000000 rw-p 00000000 00:00 0 
7f2a30000000-7f2a30200000 r-xp 00000000 fd:01 42                         /usr/lib/libc.so.6
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    fn parsed() -> Vec<Mapping> {
        maps::parse(Path::new("maps"), MAPS).unwrap()
    }

    #[test]
    fn the_span_keeps_the_heap_offset_and_drops_the_two_widest_gaps() {
        let span = monitored_span(&parsed());
        // The gaps heap → buffer and library → stack are dropped; binary → heap stays.
        let binary_to_heap_end = 0x55d0_eea4_2000 - 0x55d0_c8a0_0000;
        let buffer_and_library = 0x7f2a_3020_0000 - 0x7f2a_2000_0000;
        let stack = 0x21000;
        assert_eq!(span, binary_to_heap_end + buffer_and_library + stack);
        assert!(span > 600 * MIB && span < 900 * MIB, "{span}");
        assert_eq!(monitored_span(&[]), 0);
    }

    #[test]
    fn regions_are_raised_to_the_span_over_region_bytes_within_half_the_maximum() {
        let config = DamonMonitorConfig::default();
        // 300 MiB at 2 MiB a region.
        assert_eq!(min_regions(&config, 300 * MIB), 150);
        // A small target keeps the configured floor.
        assert_eq!(min_regions(&config, 8 * MIB), 10);
        // A large one stops at half the maximum.
        assert_eq!(min_regions(&config, 64 << 30), 500);
        let off = DamonMonitorConfig {
            region_bytes: 0,
            ..config
        };
        assert_eq!(min_regions(&off, 300 * MIB), 10);
    }

    #[test]
    fn targets_span_reads_maps_under_the_root_and_skips_gone_processes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/41")).unwrap();
        std::fs::write(dir.path().join("proc/41/maps"), MAPS).unwrap();
        let root = HostRoot::new(dir.path());
        let one = monitored_span(&parsed());
        assert_eq!(targets_span(&root, &[41]), one);
        assert_eq!(targets_span(&root, &[41, 42]), one);
    }
}
