#!/usr/bin/env bash
# Fails when docs/evaluation.md is not what the code produces: regenerates the whole suite
# (its command is in the report; about 8 minutes on 2 cores) into a scratch directory with the
# committed VM comparison, and compares the two pages line by line, apart from the line giving
# the suite's own run time. The suite is deterministic from its seeds, so any other difference
# means a change to the engine, the planner, a baseline, the model or the report that the
# committed page does not show yet.
#
#   scripts/check-evaluation.sh [MEMTIDE_BIN]   (default target/release/memtide; `make evaluation-check`)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/memtide}
[ -x "$bin" ] || {
    echo "check-evaluation: no $bin; build it with \`make build\`" >&2
    exit 2
}
committed=docs/evaluation.md
command=$(grep -m1 -- '-- sim --suite' "$committed") || {
    echo "check-evaluation: $committed names no \`memtide sim --suite\` command" >&2
    exit 1
}
# The committed command, run with the release binary and writing to a scratch directory.
read -r -a args <<<"${command#*-- }"
tmp=$(mktemp -d /tmp/memtide-evaluation.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/evaluation"
cp docs/evaluation/vm-comparison.md "$tmp/evaluation/"
for i in "${!args[@]}"; do
    [ "${args[$i]}" != --out ] || args[i + 1]=$tmp
done
"$bin" "${args[@]}" >"$tmp/suite.log" 2>&1 || {
    tail -20 "$tmp/suite.log" >&2
    echo "check-evaluation: the suite failed: $bin ${args[*]}" >&2
    exit 1
}
normalise() {
    sed -e '/^Regenerate with .* runs took /d' -e "s|--out $tmp |--out docs |" "$1"
}
if ! diff -u <(normalise "$committed") <(normalise "$tmp/evaluation.md") >"$tmp/diff"; then
    head -60 "$tmp/diff" >&2
    echo >&2
    echo "check-evaluation: $committed differs from what the code produces (above: - committed, + now)." >&2
    echo "Regenerate it with: $command" >&2
    exit 1
fi
echo "check-evaluation: $committed matches the code ($(grep -c '' "$committed") lines)"
