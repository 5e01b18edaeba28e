//! memtide's pure core: what decides placement, with no I/O of its own.
//!
//! Bottom to top, each layer using only the ones below it:
//! - [`units`]: page geometry, tiers, directions, granularities: the vocabulary of every layer;
//! - [`engine`]: Rainbow's two-stage hotness of one target (2 MiB superpages, then the 4 KiB
//!   pages of the hottest), with Memos' read/write domains;
//! - [`policy`]: the planner that turns a read-only view of that hotness into a plan of moves
//!   (granularity, epoch, benefit, bandwidth, capacity);
//! - [`tiering`]: one target's engine and planner, run in the order the daemon and the
//!   simulator share;
//! - [`ingest`]: the router that decodes ring records and batches them per target, at the top
//!   of the sample path.
//!
//! [`sampling`] splits a sampling budget between loads and stores by what reaches memory.
//! [`validate`] holds the range checks of every tunable; [`rng`] the seeded generator the
//! daemon and the simulator draw from; `testgen` (feature `testgen`, for tests and benches) the
//! trace generators and the small tier model they use.
//!
//! The daemon and the simulator feed it samples and a clock and apply its plans; nothing here
//! makes a system call, reads a file or the wall clock, or draws a random number but from a
//! seed its caller gave ([`rng`]).
#![forbid(unsafe_code)]

pub mod engine;
pub mod ingest;
pub mod policy;
pub mod rng;
pub mod sampling;
#[cfg(any(test, feature = "testgen"))]
pub mod testgen;
pub mod tiering;
pub mod units;
pub mod validate;
