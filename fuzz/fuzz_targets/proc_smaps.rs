//! The `/proc/PID/smaps` parser (`agent/host/src/targets/smaps.rs`).
//!
//! Properties: one entry per maps line, or an error naming the path and the offending line;
//! an entry the VMA flags call migratable is migratable by its maps line too; the huge-page
//! predicates never panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use memtide_host::{
    sysfs::SysfsError,
    targets::{maps, smaps},
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/proc/1/smaps");
    match smaps::parse(path, &text) {
        Ok(entries) => {
            let mappings = text
                .lines()
                .filter(|l| maps::parse_line(l).is_some())
                .count();
            // A `Key:` line never parses as a maps line (its range would end in ':').
            assert_eq!(entries.len(), mappings);
            for e in &entries {
                if e.is_migratable() {
                    assert!(e.mapping.is_migratable());
                }
                let _ = (e.has_huge_pages(), e.is_hugetlb(), e.has_flag("ht"));
                if e.kernel_page_kb > 4 {
                    assert!(e.is_hugetlb());
                }
            }
        }
        Err(SysfsError::Parse { path: p, value, .. }) => {
            assert_eq!(p, path);
            assert!(
                text.lines().any(|l| l == value),
                "{value:?} is not a line of the input"
            );
        }
        Err(other) => panic!("unexpected error kind: {other}"),
    }
});
