//! memtide's view of the machine, everything it reads from or asks of the kernel outside BPF:
//! - [`sysfs`]: /proc and /sys readers under an injectable [`sysfs::HostRoot`] (fixture trees in
//!   tests), with errors that carry the path;
//! - [`topology`]: NUMA nodes, memory tiers, HMAT attributes and the fast/slow classification;
//! - [`probe`]: what the machine offers for tiering (`memtide probe`): PMUs with memory
//!   sampling, DAMON's state, the settings that matter, and which hotness source can run;
//! - [`targets`]: processes (pidfds), their maps, numa_maps and smaps, placement queries, and the
//!   selection of pids, cgroups and pods;
//! - [`exec`]: the migration executor (batched, verified move_pages; watermarks; THP);
//! - [`sys`]: the system-call wrappers, the only module of memtide's agent with `unsafe`.
#![deny(unsafe_code)]

pub mod exec;
pub mod probe;
pub mod sys;
pub mod sysfs;
pub mod targets;
#[cfg(test)]
mod test_child;
#[cfg(test)]
mod test_tree;
pub mod topology;

/// The fixture machines (`machines/`, whole machines; `topology/`, NUMA layouts) as trees of
/// `/proc` and `/sys`. They sit beside this crate, the lowest that reads them; the crates above
/// read the same trees through this path rather than a copy or a path of their own.
#[cfg(any(test, feature = "test-fixtures"))]
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
