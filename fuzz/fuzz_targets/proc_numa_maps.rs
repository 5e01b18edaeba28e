//! The `/proc/PID/numa_maps` parser (`agent/host/src/targets/numa_maps.rs`).
//!
//! Properties: one entry per non-blank line or an error naming the path and line; the policy
//! is one of the kernel's names and its node list is sorted without duplicates; per-node byte
//! counts (`bytes_on`, `bytes_per_node`) are computed without overflow and equal the exact
//! product when it fits in 64 bits (saturating otherwise).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use memtide_host::{sysfs::SysfsError, targets::numa_maps};

const POLICIES: [&str; 7] = [
    "default",
    "bind",
    "interleave",
    "weighted interleave",
    "prefer",
    "prefer (many)",
    "local",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/proc/1/numa_maps");
    match numa_maps::parse(path, &text) {
        Ok(entries) => {
            let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
            assert_eq!(entries.len(), lines);
            for e in &entries {
                assert!(POLICIES.contains(&e.policy.as_str()), "{:?}", e.policy);
                assert!(e.policy_nodes.windows(2).all(|w| w[0] < w[1]));
                for (&node, &pages) in &e.nodes {
                    // Two u64 factors always fit in u128; the third (1024) may not.
                    let expected = (u128::from(pages) * u128::from(e.kernel_page_kb))
                        .checked_mul(1024)
                        .and_then(|bytes| u64::try_from(bytes).ok())
                        .unwrap_or(u64::MAX);
                    assert_eq!(e.bytes_on(node), expected);
                }
            }
            let total = numa_maps::bytes_per_node(&entries);
            for (node, bytes) in total {
                let exact: u128 = entries.iter().map(|e| u128::from(e.bytes_on(node))).sum();
                assert_eq!(bytes, u64::try_from(exact).unwrap_or(u64::MAX));
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
