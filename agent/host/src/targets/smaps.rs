//! `/proc/PID/smaps`: per mapping, resident and huge-page sizes and the VMA flags.
//!
//! Each mapping is its maps line followed by `Key:   N kB` lines, `THPeligible:    1` and a final
//! `VmFlags: rd wr mr mw me ac` line. memtide needs `AnonHugePages` (is THP backing this
//! mapping: then sub-2 MiB moves must split first), `KernelPageSize` (hugetlb) and `VmFlags`
//! (`io`/`pf`/`mm` mark device memory with no movable pages).

use std::path::Path;

use serde::Serialize;

use super::maps::{self, Mapping};
use crate::sysfs::SysfsError;

/// One mapping of smaps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SmapsEntry {
    pub mapping: Mapping,
    pub rss_kb: u64,
    pub anonymous_kb: u64,
    /// Anonymous memory backed by transparent huge pages.
    pub anon_huge_kb: u64,
    /// Page-cache THPs (`FilePmdMapped`).
    pub file_pmd_kb: u64,
    pub swap_kb: u64,
    /// `KernelPageSize`: 4 for ordinary mappings, 2048 or 1048576 for hugetlb.
    pub kernel_page_kb: u64,
    /// `THPeligible` (Linux 5.0+).
    pub thp_eligible: Option<bool>,
    /// Two-letter VMA flags (`rd`, `wr`, `ht`, `io`, `pf`, `hg`, `nh`, ...).
    pub vm_flags: Vec<String>,
}

impl SmapsEntry {
    fn new(mapping: Mapping) -> Self {
        Self {
            mapping,
            rss_kb: 0,
            anonymous_kb: 0,
            anon_huge_kb: 0,
            file_pmd_kb: 0,
            swap_kb: 0,
            kernel_page_kb: 4,
            thp_eligible: None,
            vm_flags: Vec::new(),
        }
    }

    #[must_use]
    pub fn has_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|f| f == flag)
    }

    /// [`Mapping::is_migratable`], refined by the VMA flags: `io` (VM_IO), `pf` (VM_PFNMAP)
    /// and `mm` (VM_MIXEDMAP) mappings have no pages move_pages can move.
    #[must_use]
    pub fn is_migratable(&self) -> bool {
        self.mapping.is_migratable() && !["io", "pf", "mm"].iter().any(|f| self.has_flag(f))
    }

    /// Whether some of the mapping is backed by PMD-sized pages (THP or hugetlb).
    #[must_use]
    pub fn has_huge_pages(&self) -> bool {
        self.anon_huge_kb > 0 || self.file_pmd_kb > 0 || self.is_hugetlb()
    }

    /// A hugetlbfs mapping: pages are huge by construction and cannot be split.
    #[must_use]
    pub fn is_hugetlb(&self) -> bool {
        self.kernel_page_kb > 4 || self.has_flag("ht")
    }
}

fn parse_kb(value: &str) -> Option<u64> {
    let value = value.trim();
    value
        .strip_suffix("kB")
        .unwrap_or(value)
        .trim()
        .parse()
        .ok()
}

/// Parses a whole smaps file; `path` is for errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<SmapsEntry>, SysfsError> {
    let mut out: Vec<SmapsEntry> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let first = maps::next_field(line).map_or("", |(f, _)| f);
        if let Some(key) = first.strip_suffix(':') {
            let Some(entry) = out.last_mut() else {
                return Err(SysfsError::parse(path, line, "a maps line first"));
            };
            let value = &line[line.find(':').map_or(0, |i| i + 1)..];
            let bad = || SysfsError::parse(path, line, "`Key: N kB`");
            let slot = match key {
                "VmFlags" => {
                    entry.vm_flags = value.split_whitespace().map(str::to_owned).collect();
                    continue;
                }
                "THPeligible" => {
                    entry.thp_eligible = Some(value.trim() == "1");
                    continue;
                }
                // Not sizes; not needed.
                "ProtectionKey" => continue,
                "Rss" => &mut entry.rss_kb,
                "Anonymous" => &mut entry.anonymous_kb,
                "AnonHugePages" => &mut entry.anon_huge_kb,
                "FilePmdMapped" => &mut entry.file_pmd_kb,
                "Swap" => &mut entry.swap_kb,
                "KernelPageSize" => &mut entry.kernel_page_kb,
                other => {
                    // Every other field is a size; still check it is one.
                    if parse_kb(value).is_none() {
                        return Err(SysfsError::parse(path, line, format!("a size for {other}")));
                    }
                    continue;
                }
            };
            *slot = parse_kb(value).ok_or_else(bad)?;
        } else {
            let mapping = maps::parse_line(line)
                .ok_or_else(|| SysfsError::parse(path, line, "a maps line or `Key: value`"))?;
            out.push(SmapsEntry::new(mapping));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::maps::MappingKind;

    const SMAPS: &str = "\
7f2a40000000-7f2a40800000 rw-p 00000000 00:00 0                          [anon:big arena]
Size:               8192 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                8192 kB
Pss:                8192 kB
Pss_Dirty:          8192 kB
Shared_Clean:          0 kB
Private_Dirty:      8192 kB
Anonymous:          8192 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:      6144 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:    1
ProtectionKey:         0
VmFlags: rd wr mr mw me ac sd hg
7f2a40800000-7f2a40a00000 rw-s 00000000 00:0f 12                         /dev/hugepages/huge file (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
Private_Hugetlb:    2048 kB
THPeligible:    0
VmFlags: rd wr sh mr mw me ms de ht sd
7f2a40b00000-7f2a40b01000 rw-s 00000000 00:06 88                         /dev/dri/card0
Size:                  4 kB
Rss:                   4 kB
VmFlags: rd wr sh mr mw me ms io pf dd sd
";

    #[test]
    fn parses_sizes_and_flags() {
        let entries = parse(Path::new("smaps"), SMAPS).unwrap();
        assert_eq!(entries.len(), 3);
        let arena = &entries[0];
        assert_eq!(
            arena.mapping.kind,
            MappingKind::AnonNamed("big arena".into())
        );
        assert_eq!((arena.rss_kb, arena.anon_huge_kb), (8192, 6144));
        assert_eq!(arena.thp_eligible, Some(true));
        assert!(arena.has_huge_pages() && !arena.is_hugetlb() && arena.is_migratable());
        assert!(arena.has_flag("hg"));
        let huge = &entries[1];
        assert!(huge.is_hugetlb() && huge.has_huge_pages());
        assert_eq!(huge.kernel_page_kb, 2048);
        assert_eq!(huge.thp_eligible, Some(false));
        let device = &entries[2];
        assert!(!device.is_migratable());
        assert_eq!(device.thp_eligible, None);
    }

    #[test]
    fn malformed_smaps() {
        let path = Path::new("/proc/3/smaps");
        for bad in [
            "Rss: 4 kB\n",
            "1000-2000 rw-p 00000000 00:00 0\nRss: lots kB\n",
            "1000-2000 rw-p 00000000 00:00 0\nPss: x\n",
            "garbage\n",
        ] {
            let err = parse(path, bad).unwrap_err();
            assert!(err.to_string().starts_with("/proc/3/smaps"), "{err}");
        }
    }
}
