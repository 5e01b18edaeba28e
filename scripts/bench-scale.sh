#!/usr/bin/env bash
# How the agent's own cost grows with the size of its targets and with their number (issue
# #18): the agent's CPU time (utime + stime from /proc) over the wall time, in percent of one
# core, and its peak RSS (VmHWM), for
#
# 1. one target of 1 GiB, 64 GiB and 1 TiB of sparse virtual memory faulted at the same rate:
#    `memtide-workload --pages 16384 --no-thp --span SIZE` places its 16,384 pages over a
#    never-touched private mapping of SIZE bytes, and the script has it churn them (`churn
#    1`: touch every page, then MADV_DONTNEED them, so each faults again) 8 times a second on
#    a fixed schedule. The page-fault rate, and so the sample rate of a page-fault source, is
#    the same at every size while the target's virtual size grows 1024x. Two layouts:
#    `spread`, one page every SIZE / 16,384 (32 pages in each of 512 superpages of 2 MiB at
#    1 GiB, but one page in each of 16,384 superpages from 32 GiB on), and `runs`
#    (`--cluster 32`), 512 runs of 32 adjacent pages one every SIZE / 512: the shape of the
#    1 GiB spread at every size, so only the virtual size changes. Samples delivered, CPU per
#    sample and the sample-rate controller's period scale at the end are printed too, since
#    the controller slows sampling down when the agent costs more per sample;
# 2. 1, 10, 100 and 1,000 idle targets managed by one agent (`--pid` each; `[targets]
#    max_targets` raised to N when N is above the default 64): each target is a
#    `memtide-workload --pages 256 --no-thp --node 0` that wrote its 1 MiB buffer and then
#    waits on an empty FIFO (IDLE_PAGES=0: `sleep` processes instead); the count the agent
#    manages is read back from /status.
#
#   scripts/bench-scale.sh [DURATION [WARMUP]]   (root; builds release binaries)
#
# Each run has WARMUP seconds (default 20) for the agent to start its targets and its
# controller to settle, then DURATION seconds (default 60) measured. Every agent runs with a
# config of its own (defaults, apart from max_targets), so /etc/memtide is not read.
# The target-size rows run with `[sources] cpu_budget_percent = SIZE_BUDGET` (default 25): with
# the default 1 % the sample-rate controller holds the sampling path's CPU at the budget and
# lets the sample rate fall instead, so rows of different cost would be measured at different
# sample rates; with room to spare every size is sampled at the same rate (the period scale
# printed at the end says whether it was) and what grows is the CPU.
# Environment: PAGES (16384) and ROUNDS_PER_SECOND (8) set the fault rate; SIZES ("1G 64G 1T"),
# LAYOUTS ("spread runs"; CLUSTER=32 pages per run) and COUNTS ("1 10 100 1000") the rows, an
# empty one skipping its part; IDLE_PAGES (256) the idle targets' resident pages; SKIP_BUILD=1
# uses the binaries already in target/release; EXTRA_CONFIG (TOML tables other than [sources]
# and [targets], which the script writes; empty by default) is appended to every agent's
# config, to compare a setting with the defaults in the same session
# (EXTRA_CONFIG=$'[engine]\ninterval_ms = 20' runs the agents at a 20 ms counting interval).
# It prints two markdown tables for docs/benchmarks.md; the agents' logs stay in the directory
# it names.
#
# The sparse mapping needs vm.overcommit_memory 0 or 1 (the workload allocates it in 1 GiB
# pieces, which the default heuristic accepts); under 2 (strict) only spans up to the commit
# limit can be had. CPU is read in clock ticks (10 ms): short runs are coarse.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
duration=${1:-60}
warmup=${2:-20}
pages=${PAGES:-16384}
rounds_per_second=${ROUNDS_PER_SECOND:-8}
sizes=${SIZES-1G 64G 1T}
layouts=${LAYOUTS-spread runs}
cluster=${CLUSTER:-32}
counts=${COUNTS-1 10 100 1000}
size_budget=${SIZE_BUDGET:-25}
idle_pages=${IDLE_PAGES:-256}
for number in "$duration" "$warmup" "$pages" "$rounds_per_second" "$idle_pages" "$cluster" "$size_budget" $counts; do
    [[ $number =~ ^[0-9]+$ ]] || {
        echo "bench-scale: $number is not a whole number" >&2
        exit 2
    }
done
[ "$(id -u)" -eq 0 ] || echo "bench-scale: not root: the agent will probably fail to start" >&2
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --bins >/tmp/memtide-bench-scale-build.log 2>&1 || {
        tail -30 /tmp/memtide-bench-scale-build.log >&2
        exit 1
    }
fi
bin=target/release/memtide
workload=target/release/memtide-workload
tmp=$(mktemp -d /tmp/memtide-bench-scale.XXXXXX)
hz=$(getconf CLK_TCK)

agent=""
workload_pid=""
idle_pids=()
pause_pid=""
cleanup() {
    trap - EXIT INT TERM
    [ -z "$pause_pid" ] || kill "$pause_pid" 2>/dev/null || true
    stop_agent
    stop_workload
    stop_idle
    exec 9>&- 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kib() { awk -v key="$2:" '$1 == key {print $2}' "/proc/$1/status"; }
now_us() { now=${EPOCHREALTIME/./}; }
# `sleep` that a signal to the script interrupts at once (bash runs traps only between commands).
pause() {
    sleep "$1" &
    pause_pid=$!
    wait "$pause_pid"
    pause_pid=""
}
metric() { curl -s "127.0.0.1:$port/metrics" | awk -v name="$1" '$1 == name {print $2}'; }

# Starts `memtide run` with config file $1 and the remaining arguments; waits for /readyz.
start_agent() {
    local config=$1 log=$2
    shift 2
    port=$((20000 + RANDOM % 20000))
    "$bin" run --config "$config" --listen "127.0.0.1:$port" "$@" 2>"$log" 9>&- &
    agent=$!
    local deadline=$((SECONDS + 180))
    until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do
        if ! kill -0 "$agent" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
            echo "bench-scale: the agent did not get ready; its log ($log) ends:" >&2
            tail -5 "$log" >&2
            exit 1
        fi
        sleep 0.2
    done
    source=$(curl -s "127.0.0.1:$port/status" | python3 -c 'import json, sys; print(json.load(sys.stdin)["source"])')
}

# Gives child $1, already asked to stop, 5 s to exit before it is killed; reaps it either way.
reap() {
    for _ in $(seq 50); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

stop_agent() {
    [ -n "$agent" ] || return 0
    kill -TERM "$agent" 2>/dev/null || true
    reap "$agent"
    agent=""
}

stop_workload() {
    [ -n "$workload_pid" ] || return 0
    # Bash unsets WORKLOAD once the coprocess is gone.
    [ -z "${WORKLOAD[1]:-}" ] || echo quit >&"${WORKLOAD[1]}" 2>/dev/null || true
    reap "$workload_pid"
    workload_pid=""
}

stop_idle() {
    [ "${#idle_pids[@]}" -gt 0 ] || return 0
    kill -KILL "${idle_pids[@]}" 2>/dev/null || true
    wait "${idle_pids[@]}" 2>/dev/null || true
    idle_pids=()
}

# Runs the command "$@"; sets elapsed_us to the wall time it took and ticks to the agent's CPU
# time over it.
measure_agent() {
    local start_ticks start_us
    start_ticks=$(cpu_ticks "$agent")
    now_us
    start_us=$now
    "$@"
    now_us
    elapsed_us=$((now - start_us))
    ticks=$(($(cpu_ticks "$agent") - start_ticks))
}

# `churn 1` ROUNDS_PER_SECOND times a second for $1 seconds, on a fixed schedule (a round that
# overruns its slot is not made up for); adds the faults to $faults and overruns to $late.
churn_paced() {
    local interval=$((1000000 / rounds_per_second)) end next reply wait_us
    now_us
    end=$((now + $1 * 1000000))
    next=$now
    while [ "$now" -lt "$end" ]; do
        { echo "churn 1" >&"${WORKLOAD[1]:-}" && read -r reply <&"${WORKLOAD[0]:-}"; } 2>/dev/null || {
            echo "bench-scale: the workload (pid $workload_pid) is gone" >&2
            exit 1
        }
        [[ $reply == "churned faults="* ]] || {
            echo "bench-scale: workload answered $reply" >&2
            exit 1
        }
        faults=$((faults + ${reply#churned faults=}))
        next=$((next + interval))
        now_us
        if [ "$now" -lt "$next" ]; then
            wait_us=$((next - now))
            sleep "$((wait_us / 1000000)).$(printf %06d $((wait_us % 1000000)))"
            now_us
        else
            late=$((late + 1))
            next=$now
        fi
    done
}

kernel=$(uname -r)
echo "bench-scale: $(nproc) CPUs, kernel $kernel, vm.overcommit_memory=$(cat /proc/sys/vm/overcommit_memory);" \
    "${warmup} s warm-up, ${duration} s measured; logs in $tmp"

# 1. Target size at an equal fault rate.
: >"$tmp/sizes.tsv"
printf '# defaults\n%s\n' "${EXTRA_CONFIG:-}" >"$tmp/defaults.toml"
printf '[sources]\ncpu_budget_percent = %s\n%s\n' "$size_budget" "${EXTRA_CONFIG:-}" >"$tmp/sizes.toml"
for layout in $layouts; do
    case $layout in
    spread) layout_args=() ;;
    runs) layout_args=(--cluster "$cluster") ;;
    *)
        echo "bench-scale: unknown layout $layout (spread or runs)" >&2
        exit 2
        ;;
    esac
    for size in $sizes; do
        coproc WORKLOAD { exec "$workload" --pages "$pages" --no-thp --span "$size" "${layout_args[@]}" 9>&-; }
        workload_pid=$WORKLOAD_PID
        if ! read -r -t 120 ready <&"${WORKLOAD[0]}" || [[ $ready != ready* ]]; then
            echo "bench-scale: the workload with --span $size ${layout_args[*]} did not start (overcommit?)" >&2
            exit 1
        fi
        start_agent "$tmp/sizes.toml" "$tmp/agent-$layout-$size.log" --pid "$workload_pid"
        faults=0
        late=0
        churn_paced "$warmup"
        samples_metric="memtide_samples_total{source=\"$source\"}"
        start_samples=$(metric "$samples_metric")
        faults=0
        late=0
        measure_agent churn_paced "$duration"
        samples=$(metric "$samples_metric")
        scale=$(metric "memtide_sample_period_scale{source=\"$source\"}")
        stride=$(sed -n 's/.* stride=\([0-9]*\).*/\1/p' <<<"$ready")
        run=$(sed -n 's/.* cluster=\([0-9]*\).*/\1/p' <<<"$ready")
        printf '%s\t' "$layout" "$size" "$elapsed_us" "$faults" "${start_samples:-0}" "${samples:-0}" \
            "$ticks" "$(status_kib "$agent" VmHWM)" "$(status_kib "$agent" VmRSS)" "${scale:-nan}" \
            "$late" "$source" "$(status_kib "$workload_pid" VmSize)" \
            "$(status_kib "$workload_pid" VmRSS)" "$stride" >>"$tmp/sizes.tsv"
        printf '%s\n' "${run:-1}" >>"$tmp/sizes.tsv"
        echo "bench-scale: $layout over $size done ($ready; $faults faults, $late rounds late)"
        stop_agent
        stop_workload
    done
done

# 2. Number of idle targets.
: >"$tmp/counts.tsv"
if [ "$idle_pages" -gt 0 ]; then
    mkfifo "$tmp/idle.fifo"
    exec 9<>"$tmp/idle.fifo" # held open, never written: the idle workloads wait on it
fi
for count in $counts; do
    : >"$tmp/idle-ready.log"
    for _ in $(seq "$count"); do
        if [ "$idle_pages" -gt 0 ]; then
            "$workload" --pages "$idle_pages" --no-thp --node 0 <"$tmp/idle.fifo" >>"$tmp/idle-ready.log" 9>&- &
        else
            sleep 100000 9>&- &
        fi
        idle_pids+=("$!")
    done
    if [ "$idle_pages" -gt 0 ]; then
        deadline=$((SECONDS + 120))
        until [ "$(wc -l <"$tmp/idle-ready.log")" -ge "$count" ]; do
            [ "$SECONDS" -lt "$deadline" ] || {
                echo "bench-scale: the idle workloads did not all start" >&2
                exit 1
            }
            sleep 0.2
        done
    fi
    max=$((count > 64 ? count : 64))
    if [ "$max" -gt 64 ]; then
        printf '[targets]\nmax_targets = %d\n%s\n' "$max" "${EXTRA_CONFIG:-}" >"$tmp/targets-$count.toml"
    else
        cp "$tmp/defaults.toml" "$tmp/targets-$count.toml"
    fi
    pid_args=()
    for pid in "${idle_pids[@]}"; do pid_args+=(--pid "$pid"); done
    start_agent "$tmp/targets-$count.toml" "$tmp/agent-targets-$count.log" "${pid_args[@]}"
    pause "$warmup"
    measure_agent pause "$duration"
    managed=$(curl -s "127.0.0.1:$port/status" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["targets"]))')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$count" "$managed" "$elapsed_us" "$ticks" \
        "$(status_kib "$agent" VmHWM)" "$(status_kib "$agent" VmRSS)" "$(metric memtide_engine_memory_bytes)" >>"$tmp/counts.tsv"
    echo "bench-scale: $count idle targets done ($managed managed)"
    [ "$managed" -eq "$count" ] || echo "bench-scale: WARNING: $count targets started, the agent manages $managed" >&2
    stop_agent
    stop_idle
done

python3 - "$tmp/sizes.tsv" "$tmp/counts.tsv" "$hz" "$pages" "$rounds_per_second" "$idle_pages" <<'PY'
import sys

sizes_path, counts_path, hz, pages, rounds, idle_pages = sys.argv[1:]
hz = float(hz)


def size_label(text):
    units = {"K": "KiB", "M": "MiB", "G": "GiB", "T": "TiB"}
    return f"{text[:-1]} {units[text[-1].upper()]}" if text[-1:].upper() in units else f"{text} B"


def growth(value, first):
    return f"{value / first:.2f}x" if first else "—"


rows = [line.rstrip("\n").split("\t") for line in open(sizes_path) if line.strip()]
if rows:
    print()
    print(f"Agent against target size: one target, {int(pages):,} pages over SIZE of sparse memory, "
          f"churned {rounds} times a second (`spread`: one page every SIZE / {int(pages):,}; "
          f"`runs`: runs of adjacent pages); source {rows[0][11]}.")
    print()
    print("| layout | target size (virtual) | superpages touched | workload VmSize / VmRSS | page faults/s | samples/s "
          "| agent CPU | CPU per sample | agent peak RSS | period scale at the end | CPU growth | CPU per sample growth | RSS growth |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    firsts = {}
    verdicts = []
    for (layout, size, us, faults, start, end, ticks, hwm, rss, scale, late, source, vmsize, vmrss,
         stride, run) in rows:
        samples = round(float(end) - float(start))
        secs = int(us) / 1e6
        cpu = int(ticks) / hz
        per_sample = cpu / samples * 1e6 if samples > 0 else float("nan")
        values = (100 * cpu / secs, per_sample, int(hwm) / 1024)
        first = firsts.setdefault(layout, (size, values))
        stride, run = int(stride), int(run)
        superpages = len({(i // run * stride + i % run * 4096) >> 21 for i in range(int(pages))})
        late_note = f" ({late} rounds late)" if int(late) else ""
        print(f"| {layout} | {size_label(size)} | {superpages:,} | {int(vmsize) / 2**20:,.1f} GiB / {int(vmrss) / 1024:,.1f} MiB "
              f"| {int(faults) / secs:,.0f}{late_note} | {samples / secs:,.0f} "
              f"| {values[0]:.2f} % of one core | {per_sample:.2f} µs | {values[2]:.1f} MiB | {float(scale):.2f} "
              f"| {growth(values[0], first[1][0])} | {growth(values[1], first[1][1])} | {growth(values[2], first[1][2])} |")
        if first[0] != size:
            verdicts.append(f"{layout}, {size_label(size)} against {size_label(first[0])}: agent CPU "
                            f"{growth(values[0], first[1][0])}, CPU per sample {growth(values[1], first[1][1])}")
    if verdicts:
        print()
        print("Acceptance: agent CPU within 1.5x of 1 GiB's at the same sample rate.")
        for line in verdicts:
            print(f"- {line}")

rows = [line.rstrip("\n").split("\t") for line in open(counts_path) if line.strip()]
if rows:
    kind = (f"memtide-workload with {int(idle_pages) * 4096 // 1024} KiB resident, waiting"
            if int(idle_pages) else "sleep")
    print()
    print(f"Agent against the number of idle targets ({kind}).")
    print()
    print("| targets | managed (/status) | agent CPU | CPU per target | agent peak RSS | agent RSS at the end | engine memory | CPU growth | RSS growth |")
    print("|---|---|---|---|---|---|---|---|---|")
    first = None
    for count, managed, us, ticks, hwm, rss, engine in rows:
        secs = int(us) / 1e6
        cpu = 100 * int(ticks) / hz / secs
        values = (cpu, int(hwm) / 1024)
        first = first or values
        engine_mib = f"{float(engine) / 2**20:.1f} MiB" if engine else "?"
        print(f"| {int(count):,} | {managed} | {cpu:.2f} % of one core | {cpu / int(count):.4f} % "
              f"| {values[1]:.1f} MiB | {int(rss) / 1024:.1f} MiB | {engine_mib} "
              f"| {growth(values[0], first[0])} | {growth(values[1], first[1])} |")
    last = rows[-1]
    cpu = 100 * int(last[3]) / hz / (int(last[2]) / 1e6)
    print()
    print(f"{int(last[0]):,} idle targets: {cpu:.2f} % of one core (acceptance: under 1 %)")
PY
