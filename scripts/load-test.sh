#!/usr/bin/env bash
# /metrics and /status under load while the agent samples: `memtide run --pid W` (swfault on
# this host) against a churning workload, then wrk with 200 connections for DURATION seconds on
# each endpoint. Prints wrk's latency distribution, and the sample drops in a quiet window of
# the same length before the load and during it, so a scrape storm that slows ingestion shows.
#
#   scripts/load-test.sh [DURATION]     (root; builds release binaries; needs wrk)
#
# Target (docs/reliability.md): p99 < 50 ms on both endpoints, no more drops under load.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-30}
command -v wrk >/dev/null || {
    echo "load-test: wrk is missing (scripts/bootstrap.sh host installs it)" >&2
    exit 1
}
cargo build --release --bins >/dev/null 2>&1
bin=target/release/memtide
workload=target/release/memtide-workload

# The workload churns on its own for the whole run: its commands come from a loop.
workload_out=$(mktemp)
(while true; do echo "churn 2"; sleep 0.05; done) | "$workload" --pages 16384 --no-thp >"$workload_out" &
feeder=$!
until grep -q "^ready" "$workload_out"; do sleep 0.1; done
pid=$(sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$workload_out")
port=$((20000 + RANDOM % 20000))
log=$(mktemp)
"$bin" run --pid "$pid" --listen "127.0.0.1:$port" 2>"$log" &
agent=$!
cleanup() {
    kill -TERM "$agent" 2>/dev/null || true
    wait "$agent" 2>/dev/null || true
    kill "$pid" "$feeder" 2>/dev/null || true
    rm -f "$log" "$workload_out"
}
trap cleanup EXIT
until curl -sf "127.0.0.1:$port/readyz" >/dev/null; do sleep 0.2; done

drops() {
    curl -s "127.0.0.1:$port/metrics" |
        awk '/^memtide_samples_dropped_total\{/ && /reason="(ring_full|channel_full|malformed)"/ {sum += $2} END {printf "%d\n", sum}'
}
# The CPU budget controller's sample period scale (1 = the start-up period; above 1 it slowed
# sampling down because sampling cost more than cpu_budget_percent).
period_scale() {
    curl -s "127.0.0.1:$port/metrics" |
        awk '/^memtide_sample_period_scale\{/ {print $2; exit}'
}
samples() {
    curl -s "127.0.0.1:$port/metrics" |
        awk '/^memtide_samples_total\{/ {sum += $2} END {printf "%d\n", sum}'
}

sleep 5
quiet_drops0=$(drops)
quiet_samples0=$(samples)
sleep "$duration"
quiet_drops=$(($(drops) - quiet_drops0))
quiet_samples=$(($(samples) - quiet_samples0))
quiet_scale=$(period_scale)

for endpoint in /metrics /status; do
    drops0=$(drops)
    samples0=$(samples)
    echo "=== wrk -t2 -c200 -d${duration}s http://127.0.0.1:$port$endpoint"
    wrk -t2 -c200 -d"${duration}s" --latency "http://127.0.0.1:$port$endpoint" |
        grep -E "Latency|50%|90%|99%|Requests/sec|requests in|Socket errors|Non-2xx"
    echo "load-test: $endpoint: samples $(($(samples) - samples0)), drops $(($(drops) - drops0)), sample period scale $(period_scale) under load;" \
        "quiet window of ${duration}s before: samples $quiet_samples, drops $quiet_drops, scale $quiet_scale"
done
kill -0 "$agent" || {
    echo "load-test: the agent died under load" >&2
    cat "$log" >&2
    exit 1
}
echo "load-test: agent alive after the load"
