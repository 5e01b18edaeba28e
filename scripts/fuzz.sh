#!/usr/bin/env bash
# Builds memtide's fuzz targets (fuzz/, cargo fuzz on nightly) and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]     every target for SECONDS (default 30) of fuzzing
#
# Environment:
#   FUZZ_TARGETS="a b"  only these targets (default: all, from `cargo fuzz list`)
#   FUZZ_JOBS=N         targets fuzzed at once (default: the number of CPUs, at most 4)
#   FUZZ_TARGET_DIR=DIR cargo's target directory for the fuzz build (default fuzz/target)
#
# Each target starts from its committed corpus (fuzz/corpus/TARGET), with its dictionary
# (fuzz/dict/TARGET.dict) when there is one. It only reads the committed corpus: the
# inputs a run discovers go to a temporary directory and are thrown away, so a run never grows
# the repository. A crash, a failed property (a panic), an input slower than 10 s or one
# needing more than 2 GiB fails the run; the input is kept in fuzz/artifacts/TARGET/ and the
# line to reproduce it is printed. Ends with one summary line per target: executions, final
# corpus size (committed + discovered), coverage.
#
# Build: the targets depend on memtide-core, -host, -sim and -config only, never on the agent,
# so no BPF tool chain is needed. No sanitizer (-s none): the code under test is
# safe Rust, where a memory error is already a panic; debug assertions and overflow checks stay
# on (cargo fuzz's default), so an arithmetic overflow is a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

seconds=${1:-30}
case "$seconds" in '' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

say() { printf 'fuzz: %s\n' "$*"; }

if ! cargo fuzz --version >/dev/null 2>&1 || ! rustup run nightly rustc --version >/dev/null 2>&1; then
    say "cargo-fuzz or the nightly toolchain is missing: run scripts/bootstrap.sh host" >&2
    exit 1
fi

unset CARGO_TARGET_DIR
target_dir=$(realpath -m "${FUZZ_TARGET_DIR:-fuzz/target}")
triple=$(rustc -vV | sed -n 's/^host: //p')
bin_dir=$target_dir/$triple/release

build_start=$(date +%s)
say "building the fuzz targets ($(cargo fuzz --version), $(rustup run nightly rustc --version))"
(cd fuzz && cargo +nightly fuzz build --sanitizer none --target-dir "$target_dir")
build_seconds=$(($(date +%s) - build_start))
say "built in ${build_seconds} s"

if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
jobs=${FUZZ_JOBS:-$(nproc)}
if [ "$jobs" -gt 4 ]; then jobs=4; fi

# Under /dev/shm when there is one: the sysfs target writes a small file tree per input.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then scratch=/dev/shm; else scratch=${TMPDIR:-/tmp}; fi
work=$(mktemp -d "$scratch/memtide-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Runs one target; its libFuzzer log goes to $work/TARGET.log, its exit code to TARGET.rc.
run_target() {
    local target=$1
    local corpus=$work/$target.corpus
    mkdir -p "$corpus" "$work/$target.tmp" "fuzz/artifacts/$target"
    local rc=0
    local dict=()
    if [ -f "fuzz/dict/$target.dict" ]; then dict=(-dict="fuzz/dict/$target.dict"); fi
    # The sysfs target writes its tree under TMPDIR: keep that inside $work.
    TMPDIR=$work/$target.tmp "$bin_dir/$target" \
        "$corpus" "fuzz/corpus/$target" "${dict[@]}" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$target/" \
        >"$work/$target.log" 2>&1 || rc=$?
    echo "$rc" >"$work/$target.rc"
}

run_start=$(date +%s)
say "fuzzing ${#targets[@]} targets for ${seconds} s each, ${jobs} at a time"
running=0
for target in "${targets[@]}"; do
    if [ ! -x "$bin_dir/$target" ]; then
        say "no fuzz target named $target" >&2
        exit 2
    fi
    run_target "$target" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

failed=0
for target in "${targets[@]}"; do
    log=$work/$target.log
    rc=$(cat "$work/$target.rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    committed=$(find "fuzz/corpus/$target" -type f | wc -l)
    found=$(find "$work/$target.corpus" -type f | wc -l)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2 || true)
    if [ "$rc" = 0 ]; then
        status=ok
    else
        status="FAILED (exit $rc)"
        failed=$((failed + 1))
    fi
    printf 'fuzz: %-16s %s: %s execs (%s/s), corpus %s committed + %s new, coverage %s\n' \
        "$target" "$status" "${execs:-?}" "${rate:-?}" "$committed" "$found" "${cov:-?}"
    if [ "$rc" != 0 ]; then
        echo "----- last lines of the $target log -----"
        tail -n 40 "$log"
        artifact=$(grep -Eo "fuzz/artifacts/$target/[a-z-]+-[0-9a-f]+" "$log" | tail -n 1 || true)
        if [ -n "$artifact" ]; then
            echo "reproduce: (cd fuzz && cargo +nightly fuzz run -s none $target ../$artifact)"
            echo "      or: $bin_dir/$target $artifact"
        fi
        echo "-----"
    fi
done
say "build ${build_seconds} s, fuzzing $(($(date +%s) - run_start)) s, ${failed} of ${#targets[@]} targets failed"
[ "$failed" -eq 0 ]
