#!/usr/bin/env bash
# `make vm-test`: builds the agent and the VM test suite on the host, boots the two-node VM
# (vm/run.sh) and runs the suite inside it. Extra arguments go to the test binary (a test
# name filter, --nocapture, ...). Prerequisites: scripts/bootstrap.sh vm.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"

# The guest's root filesystem is read-only: everything it runs is built here first.
# VM_TESTS: the integration tests that run in the guest. `vm` holds the VM-only suite; the
# others also run on the host and must work on a real two-node machine too.
VM_TESTS=(vm swfault bpf_load kernel_addresses)
# Optimised by default: under software emulation a debug agent and workload are an order of
# magnitude slower (the workload's checksum pattern over 512 MiB alone takes minutes), and the
# executor benchmark must measure release code. MEMTIDE_VM_RELEASE=0 builds the debug profile.
profile=(--release)
[ "${MEMTIDE_VM_RELEASE:-1}" = 0 ] && profile=()
cargo build -p memtide --bins "${profile[@]}"
test_args=()
for name in "${VM_TESTS[@]}"; do
    test_args+=(--test "$name")
done
mapfile -t binaries < <(cargo test -p memtide "${profile[@]}" "${test_args[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
wanted = set(sys.argv[1:])
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] in wanted and msg.get("executable"):
        print(msg["executable"])
' "${VM_TESTS[@]}")
if [ "${#binaries[@]}" -ne "${#VM_TESTS[@]}" ]; then
    echo "vm/test.sh: could not build the VM test binaries (cargo test -p memtide ${test_args[*]} --no-run)" >&2
    exit 1
fi

mkdir -p target/vm
# The suite's knobs (MEMTIDE_VM_*, MEMTIDE_BENCH_*) set here reach the tests in the guest, which
# reads them from target/vm/guest-env (vm/guest.sh).
env | grep -E '^MEMTIDE_(VM|BENCH)_[A-Z0-9_]*=' | grep -v '^MEMTIDE_VM_LAYOUT=' | while IFS='=' read -r name value; do
    printf 'export %s=%q\n' "$name" "$value"
done >target/vm/guest-env || true

# Boots the guest, runs the suite, prints the guest kernel's warnings if it failed; sets status.
run_suite() {
    rm -f target/vm/boot-seconds target/vm/kmsg.log target/vm/memory.log target/vm/progress.log \
        target/vm/console.log
    local start_ns elapsed_ms boot
    start_ns=$(date +%s%N)
    # Through a pipe: virtme-ng reopens its stdout, which truncates it when it is a file (a CI
    # log), wiping everything printed before the VM started.
    set +e
    vm/run.sh "${layout_args[@]}" --console-log target/vm/console.log -- vm/guest.sh "${suite_binaries[@]}" -- "$@" \
        </dev/null 2>&1 | cat
    status=${PIPESTATUS[0]}
    set -e
    elapsed_ms=$((($(date +%s%N) - start_ns) / 1000000))
    if [ "$status" -ne 0 ] && [ -s target/vm/progress.log ]; then
        echo "vm-test: the suite's last steps, guest uptime first (target/vm/progress.log):"
        tail -n 6 target/vm/progress.log
    fi
    if [ "$status" -ne 0 ] && [ -s target/vm/memory.log ]; then
        echo "vm-test: the guest's memory in its last seconds (target/vm/memory.log):"
        tail -n 4 target/vm/memory.log
    fi
    if [ "$status" -ne 0 ] && [ -s target/vm/kmsg.log ]; then
        # Priority 0-4 (emerg..warning) records, plus anything about OOM or a panic: enough to
        # tell a guest that died from a test that failed.
        echo "vm-test: the guest kernel's last warnings (target/vm/kmsg.log has the whole log):"
        awk -F';' '/^[0-9]+,/ { split($1, f, ","); if (f[1] % 8 <= 4 || $0 ~ /oom|panic|Killed process|segfault/) print }' \
            target/vm/kmsg.log | tail -n 60
    fi
    if [ "$status" -ne 0 ] && [ -s target/vm/console.log ]; then
        # The serial console is written synchronously, so unlike kmsg.log (read by a process
        # inside the guest) it keeps an oops or a panic up to the guest's last instruction.
        echo "vm-test: the guest console's last lines (target/vm/console.log):"
        tail -n 40 target/vm/console.log
    fi
    boot=$(cat target/vm/boot-seconds 2>/dev/null || echo "?")
    printf 'vm-test: guest boot %s s, round trip %d.%03d s, exit status %d\n' \
        "$boot" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)) "$status"
}

# Runs the suite, and boots it once more if the guest died (below).
run_suite_once_more_if_dead() {
    run_suite "$@"
    # 255 is virtme-ng's "the guest ended without reporting a status": the emulated machine died.
    # The deaths seen (at boot, and mid-suite in CI) were "Oops: int3" from multi-threaded TCG
    # running stale kernel text (see vm/run.sh), which single-threaded TCG, the default now, avoids.
    # A failing test exits 1 and is never retried; a dead guest gets one more boot, and says so.
    if [ "$status" -eq 255 ] && [ "${MEMTIDE_VM_RETRY_DEAD_GUEST:-1}" = 1 ]; then
        echo "vm-test: the guest died without reporting a result (exit status 255); booting it once more" >&2
        mv target/vm/kmsg.log target/vm/kmsg-dead-guest.log 2>/dev/null || true
        mv target/vm/memory.log target/vm/memory-dead-guest.log 2>/dev/null || true
        mv target/vm/progress.log target/vm/progress-dead-guest.log 2>/dev/null || true
        mv target/vm/console.log target/vm/console-dead-guest.log 2>/dev/null || true
        run_suite "$@"
    fi
}

# The two-node machine: every test binary, with the extra arguments.
layout_args=()
suite_binaries=("${binaries[@]}")
run_suite_once_more_if_dead "$@"
two_node_status=$status

# The two-socket machine (vm/run.sh --layout two-socket: four nodes) for the tests that need
# it, `vm::sockets` of the `vm` binary, unless a name filter among the extra arguments leaves
# them out. They know the layout from MEMTIDE_VM_LAYOUT, and skip with a message elsewhere.
filters=()
options=()
takes_value=0
for arg in "$@"; do
    if [ "$takes_value" = 1 ]; then
        options+=("$arg")
        takes_value=0
        continue
    fi
    case "$arg" in
    --skip | --test-threads | --color | --format | --logfile | -Z)
        options+=("$arg")
        takes_value=1
        ;;
    -*) options+=("$arg") ;;
    *) filters+=("$arg") ;;
    esac
done
sockets_test=vm::sockets::each_sockets_hot_set_lands_in_its_own_dram
wanted=$((${#filters[@]} == 0))
for filter in "${filters[@]}"; do
    # A filter selects the tests whose name contains it.
    [[ "$sockets_test" == *"$filter"* ]] && wanted=1
done
if [ "$wanted" = 1 ]; then
    cp target/vm/guest-env target/vm/guest-env.two-node
    echo "export MEMTIDE_VM_LAYOUT=two-socket" >>target/vm/guest-env
    layout_args=(--layout two-socket --memory-per-node 768)
    suite_binaries=()
    for binary in "${binaries[@]}"; do
        [[ "$(basename "$binary")" == vm-* ]] && suite_binaries+=("$binary")
    done
    echo "vm-test: booting the two-socket machine for vm::sockets"
    run_suite_once_more_if_dead "${options[@]}" "$sockets_test"
    mv target/vm/guest-env.two-node target/vm/guest-env
fi
[ "$two_node_status" -ne 0 ] && exit "$two_node_status"
exit "$status"
