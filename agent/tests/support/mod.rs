//! Shared helpers for integration tests: explicit, printed skips for tests that need root,
//! BPF or the two-node VM, turned into failures where those must be present.
#![allow(
    dead_code,
    reason = "each test crate includes this module and uses a different subset of it"
)]

use std::path::PathBuf;

/// Set by `make test` / CI on machines where privileged tests must run, and always in the VM:
/// a skip there would hide a broken environment, so it fails instead.
const REQUIRE_PRIVILEGED: &str = "MEMTIDE_REQUIRE_PRIVILEGED";
/// Set by `vm/guest.sh` inside the two-node VM.
const IN_VM: &str = "MEMTIDE_IN_VM";

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|value| value == "1")
}

/// True inside the two-node VM started by `make vm-test`.
pub(crate) fn in_vm() -> bool {
    env_flag(IN_VM)
}

/// Prints why `test` is skipped and returns true, or panics when skipping is not allowed here.
pub(crate) fn skip(test: &str, reason: &str) -> bool {
    assert!(
        !env_flag(REQUIRE_PRIVILEGED),
        "{test}: cannot run ({reason}) but {REQUIRE_PRIVILEGED}=1 says it must"
    );
    eprintln!("skipping {test}: {reason}");
    true
}

/// True (after printing why) when `test` must be skipped because this process is not root.
pub(crate) fn skip_unless_root(test: &str) -> bool {
    // /proc/self/status carries the effective uid; no libc call needed.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse::<u32>().ok());
    if euid == Some(0) {
        false
    } else {
        skip(test, "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_NICE)")
    }
}

/// True (after printing why) when `test` must be skipped because it only runs in the VM.
pub(crate) fn skip_unless_vm(test: &str) -> bool {
    if in_vm() {
        false
    } else {
        eprintln!("skipping {test}: runs only inside the two-node VM (make vm-test)");
        true
    }
}

/// Path of the `memtide` binary built for this test run.
pub(crate) fn memtide_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memtide"))
}
