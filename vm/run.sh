#!/usr/bin/env bash
# Boots a real two-node NUMA machine under QEMU software emulation and runs a command in it.
#
#   vm/run.sh [--memory-per-node MiB] [--layout two-tier|two-socket] [--console-log FILE] -- COMMAND [ARGS...]
#
# --layout two-socket: four nodes instead of two, a two-socket server with a CXL expander per
# socket: nodes 0 and 1 are DRAM with one CPU each (CPU 0 on node 0, CPU 1 on node 1), nodes 2
# and 3 CPU-less memory behind socket 0 and socket 1. SLIT and HMAT say so: from each socket,
# its own DRAM at 100 ns, the other's at 200 ns, its own expander at 300 ns and the other's at
# 400 ns (bandwidths 20, 10, 5 and 4 GB/s).
#
# --console-log FILE: the guest kernel's console at loglevel 5 (errors, warnings, oopses and a
# panic's last words, which /dev/kmsg readers inside a dying guest never get) goes to FILE;
# without it the console stays quiet.
# Node 0 has both CPUs and is the fast tier; node 1 is CPU-less memory that ACPI HMAT
# describes as 3x the latency and 1/4 the bandwidth, so the kernel puts it in a lower memory
# tier (a CXL-like slow tier). The guest runs Debian's 6.12 kernel over a read-only view of
# the host's root filesystem (virtme-ng), so binaries built on the host run unchanged;
# target/vm/ is writable from the guest for results. The exit status is the command's.
#
# Why TCG and not KVM: nested KVM on these machines cannot boot a guest (QEMU asserts on MSR
# 0x10a); see docs/development.md. Compare ratios in the guest, never absolute times.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
kernel_release=${MEMTIDE_VM_KERNEL:-6.12.100+deb12-amd64}
kernel=/boot/vmlinuz-$kernel_release
mib_per_node=1024
layout=two-tier
console_log=

while [ $# -gt 0 ]; do
    case "$1" in
    --memory-per-node)
        mib_per_node=$2
        shift 2
        ;;
    --layout)
        layout=$2
        shift 2
        ;;
    --console-log)
        console_log=$2
        shift 2
        ;;
    --)
        shift
        break
        ;;
    *)
        echo "vm/run.sh: unknown option $1 (usage: vm/run.sh [--memory-per-node MiB] [--layout two-tier|two-socket] [--console-log FILE] -- CMD...)" >&2
        exit 2
        ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "vm/run.sh: no command given (usage: vm/run.sh [--memory-per-node MiB] [--layout two-tier|two-socket] [--console-log FILE] -- CMD...)" >&2
    exit 2
fi

vng=$(command -v vng || true)
if [ -z "$vng" ]; then
    scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)
    [ -x "$scripts_dir/vng" ] && vng=$scripts_dir/vng
fi
for need in "$vng:virtme-ng (vng)" "$kernel:the guest kernel $kernel" "$(command -v qemu-system-x86_64 || true):qemu-system-x86_64" "$(command -v busybox || true):busybox"; do
    if [ -z "${need%%:*}" ] || [ ! -e "${need%%:*}" ]; then
        echo "vm/run.sh: missing ${need#*:}; run scripts/bootstrap.sh vm" >&2
        exit 1
    fi
done

mkdir -p "$repo/target/vm"
nodes=2
[ "$layout" = two-socket ] && nodes=4
case "$layout" in
two-tier | two-socket) ;;
*)
    echo "vm/run.sh: --layout must be two-tier or two-socket, not '$layout'" >&2
    exit 2
    ;;
esac
total_mib=$((nodes * mib_per_node))
# One host thread runs both vCPUs by default: with a thread per vCPU (QEMU's multi-threaded
# TCG) a vCPU can run a stale translation of kernel text another vCPU has just patched (static
# keys and tracepoints are switched by writing an int3 first), and the guest dies with
# "Oops: int3" — seen at boot in enqueue_timer and, in CI, when a test attached BPF programs.
# The suite takes as long either way on 2 host cores; MEMTIDE_VM_TCG=multi brings the thread
# per vCPU back, for benchmarks that need both vCPUs at once (docs/benchmarks.md, Executor).
tcg_threads=${MEMTIDE_VM_TCG:-single}
case "$tcg_threads" in
single | multi) ;;
*)
    echo "vm/run.sh: MEMTIDE_VM_TCG must be single or multi, not '$tcg_threads'" >&2
    exit 2
    ;;
esac
qemu_opts=("-machine hmat=on -accel tcg,thread=$tcg_threads -cpu max")
if [ "$layout" = two-tier ]; then
    qemu_opts+=(
        "-object memory-backend-ram,id=m0,size=${mib_per_node}M -numa node,memdev=m0,cpus=0-1,nodeid=0,initiator=0"
        "-object memory-backend-ram,id=m1,size=${mib_per_node}M -numa node,memdev=m1,nodeid=1,initiator=0"
        "-numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100"
        "-numa hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-bandwidth,bandwidth=20G"
        "-numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300"
        "-numa hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5G"
    )
else
    qemu_opts+=(
        "-object memory-backend-ram,id=m0,size=${mib_per_node}M -numa node,memdev=m0,cpus=0,nodeid=0,initiator=0"
        "-object memory-backend-ram,id=m1,size=${mib_per_node}M -numa node,memdev=m1,cpus=1,nodeid=1,initiator=1"
        "-object memory-backend-ram,id=m2,size=${mib_per_node}M -numa node,memdev=m2,nodeid=2,initiator=0"
        "-object memory-backend-ram,id=m3,size=${mib_per_node}M -numa node,memdev=m3,nodeid=3,initiator=1"
        "-numa dist,src=0,dst=1,val=21 -numa dist,src=0,dst=2,val=14 -numa dist,src=0,dst=3,val=24"
        "-numa dist,src=1,dst=2,val=24 -numa dist,src=1,dst=3,val=14 -numa dist,src=2,dst=3,val=26"
    )
    # From socket S: its DRAM, the other DRAM, its expander, the other expander.
    for socket in 0 1; do
        other=$((1 - socket))
        for pair in "$socket 100 20G" "$other 200 10G" "$((socket + 2)) 300 5G" "$((other + 2)) 400 4G"; do
            read -r target latency bandwidth <<<"$pair"
            qemu_opts+=(
                "-numa hmat-lb,initiator=$socket,target=$target,hierarchy=memory,data-type=access-latency,latency=$latency"
                "-numa hmat-lb,initiator=$socket,target=$target,hierarchy=memory,data-type=access-bandwidth,bandwidth=$bandwidth"
            )
        done
    done
fi

# vng runs --exec through a shell: quote every argument so it arrives as given.
printf -v command ' %q' "$@"
vng_args=(--run "$kernel" --disable-kvm --cpus 2 --memory "${total_mib}M"
    --rwdir "$repo/target/vm" --cwd "$repo"
    --qemu-opts="${qemu_opts[*]}"
    --exec "${command# }")
if [ -z "$console_log" ]; then
    exec "$vng" "${vng_args[@]}"
fi
# vng --verbose puts the console on stderr, with its own start-up chatter and the command's
# stderr: lines with a printk time stamp and the chatter go to the file, the rest stays on
# stderr.
: >"$console_log"
exec "$vng" --verbose --append "loglevel=5" "${vng_args[@]}" 2> >(
    awk -v out="$console_log" '
        /^\[ *[0-9]+\.[0-9]+\] / || /^(virtme|fuse: |Probing EDD|Memory KASLR|Poking KASLR)/ {
            print >> out; fflush(out); next
        }
        { print > "/dev/stderr"; fflush("/dev/stderr") }'
)
