//! The `/proc/PID/maps` parser (`agent/host/src/targets/maps.rs`).
//!
//! Properties: a file parses into one mapping per non-blank line, or fails naming the path and
//! the offending line; every mapping has `start <= end`; printing a mapping as the kernel does
//! and parsing that line gives the same mapping back.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use memtide_fuzz::format_maps_line;
use memtide_host::{sysfs::SysfsError, targets::maps};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/proc/1/maps");
    match maps::parse(path, &text) {
        Ok(mappings) => {
            let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
            assert_eq!(mappings.len(), lines);
            for m in &mappings {
                assert!(m.start <= m.end);
                assert_eq!(m.len(), m.end - m.start);
                let _ = (
                    m.is_migratable(),
                    m.is_private_anonymous(),
                    m.contains(m.start),
                );
                let line = format_maps_line(m);
                let again = maps::parse_line(&line)
                    .unwrap_or_else(|| panic!("printed mapping does not parse: {line:?}"));
                assert_eq!(&again, m, "{line:?}");
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
