#!/usr/bin/env bash
# Runs inside the VM (started by vm/test.sh through vm/run.sh): records the boot time, puts
# the kernel in a known state and runs each test binary given, then reports.
#
#   vm/guest.sh TEST_BINARY... [-- TEST_ARGS...]
set -uo pipefail

binaries=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    binaries+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift

read -r uptime _ </proc/uptime
echo "$uptime" >target/vm/boot-seconds
echo "vm: guest up after ${uptime} s; kernel $(uname -r); $(nproc) CPUs"

# The guest kernel enables NUMA balancing on a two-node machine; it would move pages behind
# the tests' backs. Tests that compare against it turn it back on themselves.
echo 0 >/proc/sys/kernel/numa_balancing

# The executor splits huge pages through debugfs split_huge_pages.
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true

export MEMTIDE_IN_VM=1
# In the VM every privileged test must run: a skip is a failure here.
export MEMTIDE_REQUIRE_PRIVILEGED=1
export RUST_BACKTRACE=1

status=0
for binary in "${binaries[@]}"; do
    echo "vm: running $(basename "$binary")"
    "$binary" --test-threads=1 "$@" || status=1
done
exit "$status"
