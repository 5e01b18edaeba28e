//! memtide: a user-space memory-tiering agent, the composition root of its crates.
//!
//! The data path, top to bottom: `sources` (eBPF sampling, DAMON) → the ingest router and the
//! per-target engine and planner of `memtide-core` → the executor of `memtide-host`
//! (move_pages). This crate wires them into the daemon (`daemon`), loads the BPF programs
//! (`bpf`), exports metrics (`metrics`) and answers `memtide probe` and `memtide record`.
//! Everything that touches the kernel outside BPF is in `memtide-host`, whose `sys` module is
//! the only place with `unsafe`.
#![forbid(unsafe_code)]

pub mod bpf;
pub mod cpu_time;
pub mod daemon;
pub mod kube;
pub mod metrics;
pub mod record;
pub mod sources;
