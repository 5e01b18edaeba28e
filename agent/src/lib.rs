//! memtide: a user-space memory-tiering agent.
//!
//! The data path, top to bottom: `sources` (eBPF sampling) → `engine` (two-stage hotness) →
//! `policy` (granularity, epoch, read/write, bandwidth, capacity → `Plan`) → `exec` (move_pages).
//! `probe` and `topology` describe the machine; `sys` is the only module with `unsafe`.
#![deny(unsafe_code)]

pub mod bpf;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod exec;
pub mod metrics;
pub mod policy;
pub mod probe;
pub mod record;
pub mod sim;
pub mod sources;
pub mod sys;
pub mod sysfs;
pub mod targets;
pub mod topology;
