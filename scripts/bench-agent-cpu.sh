#!/usr/bin/env bash
# The agent's own CPU cost at its default sample rate: `memtide run --pid W` against a workload
# that keeps faulting pages (the swfault source on this host), for DURATION seconds; the
# agent's CPU time (utime + stime from /proc) over the wall time, in percent of one core, and
# what it was spent on: the sampling path (memtide_sampling_cpu_seconds_total, what the
# sampling budget holds), the targets' epoch steps (memtide_epoch_cpu_seconds_total: placement
# queries, plans, migration), of which move_pages (memtide_migration_cpu_seconds_total), the HTTP
# thread, the rest, and the BPF programs' kernel time (memtide_bpf_run_seconds_total: charged to the faulting
# workload's CPU, not the agent's, and added to the agent's total here).
#
#   scripts/bench-agent-cpu.sh [DURATION [WARMUP]]   (root; builds release binaries)
#
# CASE picks the workload:
#   churn (default)  memtide-workload churns 16,384 pages (64 MiB) faulted in and given back
#   heap             a process with an 80 MiB heap re-faulting 16 MiB of it in a loop, the agent
#                    in observe mode (`memtide run --observe`): the case issue #45 measured at
#                    7 % of a core, placement queries alone
#
# The workload runs WARMUP seconds first (default 30) so the sample-rate controller has settled
# before the measurement starts.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
warmup=${2:-30}
case=${CASE:-churn}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --bins >/dev/null 2>&1
fi
bin=target/release/memtide
workload=target/release/memtide-workload

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { # metric NAME-PREFIX: the sum of every series of the family
    curl -s "127.0.0.1:$port/metrics" | awk -v name="$1" 'index($0, name) == 1 {sum += $NF} END {print sum + 0}'
}

observe=()
case "$case" in
    churn)
        coproc WORKLOAD { "$workload" --pages 16384 --no-thp; }
        read -r ready <&"${WORKLOAD[0]}"
        pid=$(sed 's/.*pid=\([0-9]*\).*/\1/' <<<"$ready")
        drive() { echo "churn 4" >&"${WORKLOAD[1]}"; read -r reply <&"${WORKLOAD[0]}"; faults=$((faults + ${reply#churned faults=})); }
        ;;
    heap)
        # 80 MiB touched once, then 16 MiB of it given back and faulted in again, ten times a
        # second: each "round" line is 4,096 page faults.
        coproc WORKLOAD { python3 -u -c '
import mmap, os, sys
heap = mmap.mmap(-1, 80 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
page = 4096
for off in range(0, len(heap), page):
    heap[off] = 1
print(f"ready pid={os.getpid()}", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    heap.madvise(mmap.MADV_DONTNEED, 32 << 20, 16 << 20)
    for off in range(32 << 20, 48 << 20, page):
        heap[off] = 1
    print("round faults=4096", flush=True)
'; }
        read -r ready <&"${WORKLOAD[0]}"
        pid=${ready#ready pid=}
        drive() { echo round >&"${WORKLOAD[1]}"; read -r reply <&"${WORKLOAD[0]}"; faults=$((faults + ${reply#round faults=})); }
        observe=(--observe)
        ;;
    *) echo "bench-agent-cpu: CASE must be churn or heap, not $case" >&2; exit 2 ;;
esac
port=$((20000 + RANDOM % 20000))
"$bin" run "${observe[@]}" --pid "$pid" --listen "127.0.0.1:$port" 2>/tmp/memtide-bench-agent.log &
agent=$!
trap 'kill -TERM $agent 2>/dev/null || true; echo quit >&"${WORKLOAD[1]}" 2>/dev/null || true' EXIT
until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
faults=0
until=$((SECONDS + warmup))
while [ "$SECONDS" -lt "$until" ]; do drive; sleep 0.1; done
start_samples=$(metric 'memtide_samples_total{')
start_migration=$(metric 'memtide_migration_cpu_seconds_total')
start_epochs=$(metric 'memtide_epoch_cpu_seconds_total')
start_sampling=$(metric 'memtide_sampling_cpu_seconds_total')
start_http=$(metric 'memtide_http_cpu_seconds_total')
start_bpf=$(metric 'memtide_bpf_run_seconds_total{')
start_ticks=$(cpu_ticks "$agent")
start_workload=$(cpu_ticks "$pid")
start_ns=$(date +%s%N)
faults=0
while [ $(($(date +%s%N) - start_ns)) -lt $((duration * 1000000000)) ]; do drive; sleep 0.1; done
elapsed_ns=$(($(date +%s%N) - start_ns))
agent_ticks=$(($(cpu_ticks "$agent") - start_ticks))
workload_ticks=$(($(cpu_ticks "$pid") - start_workload))
samples=$(python3 -c "print($(metric 'memtide_samples_total{') - $start_samples)")
migration=$(python3 -c "print($(metric 'memtide_migration_cpu_seconds_total') - $start_migration)")
epochs=$(python3 -c "print($(metric 'memtide_epoch_cpu_seconds_total') - $start_epochs)")
sampling=$(python3 -c "print($(metric 'memtide_sampling_cpu_seconds_total') - $start_sampling)")
http=$(python3 -c "print($(metric 'memtide_http_cpu_seconds_total') - $start_http)")
bpf=$(python3 -c "print($(metric 'memtide_bpf_run_seconds_total{') - $start_bpf)")
scale=$(curl -s "127.0.0.1:$port/metrics" | awk '/^memtide_sample_period_scale\{/ {print $2}')
echo "agent-cpu: case $case; sample period scale at the end: ${scale:-?} (1 = the start-up period)"
python3 - "$agent_ticks" "$workload_ticks" "$elapsed_ns" "$faults" "$samples" "$migration" "$bpf" "$epochs" "$sampling" "$http" <<'PY'
import sys
agent, workload, ns, faults, samples, migration, bpf, epochs, sampling, http = (float(x) for x in sys.argv[1:])
secs = ns / 1e9
agent_s = agent / 100
pct = lambda s: 100 * s / secs
rest = agent_s - epochs - sampling - http
per_sample = (sampling + bpf) / samples * 1e6 if samples else float("nan")
print(f"agent-cpu: {secs:.0f} s steady state; {faults/secs:,.0f} page faults/s in the workload; "
      f"{samples:,.0f} samples delivered")
print(f"agent-cpu: agent process {pct(agent_s):.2f} % of one core: sampling path {pct(sampling):.2f} %, "
      f"epoch steps {pct(epochs):.2f} % (move_pages {pct(migration):.2f} %), HTTP {pct(http):.2f} %, "
      f"the rest (runtime, timers, target discovery) {pct(rest):.2f} %; "
      f"BPF programs {pct(bpf):.3f} % (in the workload's CPU); total {pct(agent_s + bpf):.2f} %")
print(f"agent-cpu: per sample: sampling path plus BPF {per_sample:.2f} µs; "
      f"workload CPU {workload/100:.2f} s, agent/workload {agent/max(workload,1):.3f}")
PY
