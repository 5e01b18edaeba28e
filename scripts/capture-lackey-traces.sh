#!/usr/bin/env bash
# Captures the real memory-access traces of the simulator's evaluation suite with valgrind's
# lackey tool (--trace-mem=yes), from programs available on a stock Debian/Ubuntu machine:
#   sqlite    sqlite3 building and querying a 200k-row table (inserts, index, joins, aggregates)
#   python    python3 building and probing dicts and lists
#   xz        xz compressing 8 MiB of semi-random text at -6
# Each trace keeps one data-access record in SAMPLE (default 64), systematically, after
# skipping the first SKIP records (start-up), and at most MAX records (default 400,000); it is
# written as lackey text compressed with zstd to traces/NAME.lackey.zst. The suite replays them
# with --record-weight equal to SAMPLE. Needs: valgrind, sqlite3, python3, xz, zstd.
#
# usage: scripts/capture-lackey-traces.sh [OUTDIR]    (default: traces/)
#        ONLY="python xz" scripts/capture-lackey-traces.sh   (capture a subset)
set -euo pipefail

OUT=${1:-traces}
SAMPLE=${SAMPLE:-64}
SKIP=${SKIP:-200000}
MAX=${MAX:-400000}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for tool in valgrind sqlite3 python3 xz zstd; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 1; }
done

# Keep lackey's header lines and 1 in SAMPLE data accesses (instruction fetches dropped).
sample() {
    awk -v s="$SAMPLE" -v skip="$SKIP" -v max="$MAX" '
        /^==/ { if (hdr++ < 8) print; next }
        /^ [LSM] / { n++; if (n > skip && (n % s) == 0) { print; if (++kept >= max) exit } }
    '
}

capture() {
    local name=$1; shift
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then return; fi
    echo "capturing $name: $*" >&2
    # awk stops reading after MAX records; valgrind keeps running the program to its end (it
    # ignores the broken pipe), bounded by a timeout. Neither is an error here.
    { timeout 900 valgrind --tool=lackey --trace-mem=yes --log-fd=3 "$@" 3>&1 >/dev/null 2>/dev/null || true; } \
        | sample | zstd -q -19 -o "$OUT/$name.lackey.zst" -f
    echo "  $(zstd -dc "$OUT/$name.lackey.zst" | wc -l) lines, $(stat -c %s "$OUT/$name.lackey.zst") bytes" >&2
}

cat >"$WORK/q.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, (x * 7919) % 100003, hex(randomblob(24)) FROM c;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(length(v)) FROM t WHERE k BETWEEN 1000 AND 60000;
SELECT a.k, count(*) FROM t a JOIN t b ON a.k = b.id % 100003 WHERE a.id % 97 = 0 GROUP BY a.k ORDER BY 2 DESC LIMIT 5;
UPDATE t SET v = upper(v) WHERE id % 13 = 0;
SELECT k % 100, avg(id) FROM t GROUP BY 1 ORDER BY 2 LIMIT 3;
SQL
capture sqlite sqlite3 "$WORK/db.sqlite" ".read $WORK/q.sql"

cat >"$WORK/dict.py" <<'PY'
import random
random.seed(7)
d = {}
for i in range(300_000):
    d[f"key{i * 7919 % 1_000_003}"] = [i, str(i)]
lst = list(d.values())
hits = 0
for _ in range(400_000):
    k = f"key{random.randrange(1_000_003)}"
    if k in d:
        hits += len(d[k][1])
lst.sort(key=lambda v: v[1])
print(hits, len(lst))
PY
# The interpreter itself, not a wrapper script (pyenv shims exec it, and valgrind would only
# trace the shell).
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
capture python "$PYTHON" "$WORK/dict.py"

python3 - "$WORK/input.txt" <<'PY'
import random, sys
random.seed(3)
words = [''.join(random.choice('etaoinshrdlu') for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], 'w') as f:
    n = 0
    while n < 8 << 20:
        line = ' '.join(random.choice(words) for _ in range(12)) + '\n'
        f.write(line)
        n += len(line)
PY
capture xz xz -6 -T1 -k -c "$WORK/input.txt"
ls -l "$OUT"
