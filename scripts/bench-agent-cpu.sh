#!/usr/bin/env bash
# The agent's own CPU cost at its default sample rate: `memtide run --pid W` against a workload
# that keeps faulting pages (the swfault source on this host), for DURATION seconds; the
# agent's CPU time (utime + stime from /proc) over the wall time, in percent of one core.
#
#   scripts/bench-agent-cpu.sh [DURATION [WARMUP]]   (root; builds release binaries)
#
# The workload churns through WARMUP seconds first (default 30) so the sample-rate controller
# has settled before the measurement starts.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-60}
warmup=${2:-30}
cargo build --release --bins >/dev/null 2>&1
bin=target/release/memtide
workload=target/release/memtide-workload

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

coproc WORKLOAD { "$workload" --pages 16384 --no-thp; }
read -r ready <&"${WORKLOAD[0]}"
pid=$(sed 's/.*pid=\([0-9]*\).*/\1/' <<<"$ready")
port=$((20000 + RANDOM % 20000))
"$bin" run --pid "$pid" --listen "127.0.0.1:$port" 2>/tmp/memtide-bench-agent.log &
agent=$!
trap 'kill -TERM $agent 2>/dev/null || true; echo quit >&"${WORKLOAD[1]}" 2>/dev/null || true' EXIT
until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done
churn_for() {
    local until=$((SECONDS + $1))
    while [ "$SECONDS" -lt "$until" ]; do
        echo "churn 4" >&"${WORKLOAD[1]}"
        read -r _ <&"${WORKLOAD[0]}"
        sleep 0.1
    done
}
churn_for "$warmup"
start_samples=$(curl -s "127.0.0.1:$port/metrics" | awk '/^memtide_samples_total\{source="swfault"\}/ {print $2}')
start_ticks=$(cpu_ticks "$agent")
start_workload=$(cpu_ticks "$pid")
start_ns=$(date +%s%N)
faults=0
while [ $(($(date +%s%N) - start_ns)) -lt $((duration * 1000000000)) ]; do
    echo "churn 4" >&"${WORKLOAD[1]}"
    read -r reply <&"${WORKLOAD[0]}"
    faults=$((faults + ${reply#churned faults=}))
    sleep 0.1
done
elapsed_ns=$(($(date +%s%N) - start_ns))
agent_ticks=$(($(cpu_ticks "$agent") - start_ticks))
workload_ticks=$(($(cpu_ticks "$pid") - start_workload))
samples=$(curl -s "127.0.0.1:$port/metrics" | awk -v start="${start_samples:-0}" '/^memtide_samples_total\{source="swfault"\}/ {print $2 - start}')
scale=$(curl -s "127.0.0.1:$port/metrics" | awk '/^memtide_sample_period_scale\{source="swfault"\}/ {print $2}')
echo "agent-cpu: sample period scale at the end: ${scale:-?} (1 = the start-up period)"
python3 - "$agent_ticks" "$workload_ticks" "$elapsed_ns" "$faults" "${samples:-0}" <<'PY'
import sys
agent, workload, ns, faults, samples = (float(x) for x in sys.argv[1:])
secs = ns / 1e9
print(f"agent-cpu: {secs:.0f} s steady state; {faults/secs:,.0f} page faults/s in the workload; "
      f"{samples:,.0f} samples delivered; agent CPU {agent/100:.2f} s = {100*agent/100/secs:.2f} % of one core "
      f"(workload CPU {workload/100:.2f} s; agent/workload {agent/max(workload,1):.3f})")
PY
