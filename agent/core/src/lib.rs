//! memtide's pure core: what decides placement, with no I/O of its own.
//!
//! Bottom to top, each layer using only the ones below it:
//! - [`units`]: page geometry, tiers, directions, granularities: the vocabulary of every layer;
//! - [`engine`]: Rainbow's two-stage hotness of one target (2 MiB superpages, then the 4 KiB
//!   pages of the hottest), with Memos' read/write domains;
//! - [`policy`]: the planner that turns a read-only view of that hotness into a plan of moves
//!   (granularity, epoch, benefit, bandwidth, capacity);
//! - [`ingest`]: the router that decodes ring records and batches them per target, at the top
//!   of the sample path;
//!
//! The daemon and the simulator feed it samples and a clock and apply its plans; nothing here
//! makes a system call, reads a file or the wall clock, or draws a random number.
#![forbid(unsafe_code)]

pub mod engine;
pub mod ingest;
pub mod policy;
pub mod units;
