//! The two-node VM suite: runs inside the guest started by `make vm-test` (vm/test.sh), where
//! node 1 is a CPU-less slow tier and DAMON is free. On any other machine every test prints
//! why it is skipped.
//!
//! The two-tier suite (issue #8) drives the real `memtide run` against `memtide-workload`:
//! `promotion` (tests 1 and 6), `pressure` (2), `granularity` (3), `integrity` (4), `churn`
//! (5), `sources` (7) and `compare` (8); `exec` holds the executor benchmark; `faults`
//! turns memtide's kdamond off from outside; `hints` shows a range marked with the hint library
//! left where the application put it; `tenancy` holds a limited tenant to its share of the
//! fast tier while another gets the rest; `sockets` runs in the two-socket layout vm/test.sh
//! boots after the rest, and shows each socket's hot set promoted into its own DRAM.
mod support;
mod vm {
    pub(crate) mod churn;
    pub(crate) mod compare;
    pub(crate) mod daemon;
    pub(crate) mod damon;
    pub(crate) mod exec;
    pub(crate) mod faults;
    pub(crate) mod granularity;
    pub(crate) mod hints;
    pub(crate) mod integrity;
    pub(crate) mod pressure;
    pub(crate) mod promotion;
    pub(crate) mod smoke;
    pub(crate) mod sockets;
    pub(crate) mod sources;
    pub(crate) mod tenancy;
    pub(crate) mod tiering;
}
