//! Empty library target: it lets `agent/build.rs` depend on this crate so cargo rebuilds the
//! agent when the BPF programs change. The programs themselves are in `main.rs` and the modules it declares.
#![no_std]
