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

# MEMTIDE_VM_* / MEMTIDE_BENCH_* knobs set on the host (written by vm/test.sh).
if [ -f target/vm/guest-env ]; then
    # shellcheck disable=SC1091
    . target/vm/guest-env
fi
export MEMTIDE_IN_VM=1
# In the VM every privileged test must run: a skip is a failure here.
export MEMTIDE_REQUIRE_PRIVILEGED=1
# No backtraces: symbolizing one makes the test process parse and keep its debug info (hundreds
# of MiB on node 0, for the rest of the run), and the following tests then find node 0 short
# of memory and fail for that reason instead of their own. The panic message and location are
# printed either way; MEMTIDE_VM_BACKTRACE=1 turns backtraces back on.
export RUST_BACKTRACE="${MEMTIDE_VM_BACKTRACE:-0}"

# The kernel log, kept on the host side: when the guest dies (an OOM kill of init, a panic) vng
# only reports exit status 255, and vm/test.sh prints the end of this file.
cat /dev/kmsg >target/vm/kmsg.log 2>/dev/null &
kmsg_reader=$!
# Free memory per node and the largest processes every 2 s: the other half of a post-mortem.
while sleep 2; do
    printf '%s node0 %s node1 %s kB free; top: %s\n' "$(cut -d' ' -f1 /proc/uptime)" \
        "$(awk '/MemFree/ {print $4}' /sys/devices/system/node/node0/meminfo)" \
        "$(awk '/MemFree/ {print $4}' /sys/devices/system/node/node1/meminfo 2>/dev/null)" \
        "$(ps -eo rss=,comm= --sort=-rss 2>/dev/null | head -n 3 | tr -s ' ' | paste -sd, -)"
done >target/vm/memory.log 2>/dev/null &
memory_logger=$!

status=0
for binary in "${binaries[@]}"; do
    echo "vm: running $(basename "$binary")"
    "$binary" --test-threads=1 "$@" || status=1
done
kill "$kmsg_reader" "$memory_logger" 2>/dev/null
exit "$status"
