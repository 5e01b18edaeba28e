//! The two-node VM suite: runs inside the guest started by `make vm-test` (vm/test.sh), where
//! node 1 is a CPU-less slow tier and DAMON is free. On any other machine every test prints
//! why it is skipped.
mod support;
mod vm {
    pub(crate) mod daemon;
    pub(crate) mod damon;
    pub(crate) mod exec;
    pub(crate) mod smoke;
}
