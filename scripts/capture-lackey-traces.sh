#!/usr/bin/env bash
# Captures the real-program corpus of the simulator's evaluation suite: the data accesses of
# eight programs of different kinds, under valgrind's lackey tool (--trace-mem=yes), each kept
# 1 in K systematically after the start-up, converted to memtide's native format with K
# written into the header as the record weight (`memtide convert`), so that a replay needs no
# --record-weight, and compressed with zstd -19 to traces/NAME.mt.zst. K is a multiple of 16
# chosen per program so that its whole run gives between TARGET (default 5 M) and twice that
# many records: the run is kept 1 in 16 first, then thinned. Lackey writes one line per
# access with a system call each; it goes to a file (a pipe costs half as much again in
# context switches), about 43 bytes per data access, filtered by a small C program.
#
#   kv        redis-server serving 250,000 requests of a Zipf(0.99)-skewed client (90 % GET,
#             10 % SET) over 60,000 keys of 1,200 bytes, after loading them
#   sqlite    sqlite3, an in-memory database: a 100,000-row table of 640-byte blobs, an index,
#             range scans, an indexed join, an update, aggregates
#   xz        xz -7 -T1 compressing 700 KiB of semi-random text (its 32 MiB dictionary's
#             64 MiB hash table touched all over)
#   python    python3 building and probing a 300,000-entry dict
#   pagerank  PageRank (2 iterations, pull) over a 2^19-vertex graph of 8 M edges with skewed
#             degrees, in CSR, written in C here and built with gcc -O2
#   cc1       gcc's compiler proper (cc1 -O2) on a generated C file of 300 functions
#   sort      GNU sort (one thread, all in memory) of 600,000 random lines of 60-120 bytes
#   stencil   a 3-D 7-point Jacobi stencil, 3 sweeps over two 160^3 grids of doubles (C)
#
# SET=holdout captures seven other programs instead, never committed: a check that the policy
# does as well on programs it was not tuned on (`memtide sim --suite --traces DIR` replays any
# directory of captures):
#
#   perl      perl counting the words and word pairs of 6 MiB of Zipf-distributed text
#   hashjoin  a hash join (C): an open-addressing table over 1.5 M rows of 32 bytes, probed
#             6 M times, about 90 % of the probes on a fifth of the keys
#   bfs       breadth-first search (C) from 8 roots over a uniform random graph of 2^20
#             vertices and 8 M edges in CSR
#   kmeans    k-means (Lloyd, C), 400,000 points of 16 floats, 64 clusters, 6 iterations
#   bzip2     bzip2 -9 compressing 3 MiB of Zipf-distributed text
#   oltp      sqlite3, in-memory: 200,000 accounts with an index, 60,000 history rows written
#             against random accounts, an update through a subquery, a join
#   lru       an LRU cache (C, hash table and linked list) of 300,000 entries of 128 bytes
#             serving 5 M requests skewed over 1 M keys
#
# Each program runs to its end under `setarch -R` (no address-space randomisation, so a
# capture is reproducible on one machine). Needs: valgrind, gcc, python3, sqlite3, xz, sort, zstd,
# redis-server (Debian: apt-get install valgrind redis-server sqlite3; the held-out set needs
# perl and bzip2 instead of xz, sort and redis-server), and a memtide binary (MEMTIDE, default
# target/release/memtide). Each program takes about five minutes (the held-out ones up to 15,
# when their trace reaches RAW_LIMIT); two captures can run side by side (ONLY=...), one per
# core.
#
# usage: scripts/capture-lackey-traces.sh [OUTDIR]        (default: traces/)
#        ONLY="kv sort" scripts/capture-lackey-traces.sh   (capture a subset)
#        SET=holdout scripts/capture-lackey-traces.sh /tmp/holdout   (the held-out programs)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-traces}
MEMTIDE=${MEMTIDE:-target/release/memtide}
BASE=16
TARGET=${TARGET:-5000000}
CORPUS="kv sqlite xz python pagerank cc1 sort stencil"
HOLDOUT="perl hashjoin bfs kmeans bzip2 oltp lru"
case ${SET:=corpus} in
corpus)
    programs=$CORPUS
    tools="valgrind gcc python3 sqlite3 xz sort zstd setarch"
    ;;
holdout)
    programs=$HOLDOUT
    tools="valgrind gcc python3 sqlite3 perl bzip2 zstd setarch"
    # The corpus directory is what the suite replays and git holds.
    [ $# -ge 1 ] && [ "$(realpath -m "$OUT")" != "$(realpath -m traces)" ] || {
        echo "capture: SET=holdout needs an OUTDIR other than traces/ (held-out captures are never committed)" >&2
        exit 2
    }
    ;;
*)
    echo "capture: SET=$SET: use SET=corpus (the default, traces/) or SET=holdout" >&2
    exit 2
    ;;
esac
for name in ${ONLY:-}; do
    [[ " $programs " == *" $name "* ]] || echo "capture: ONLY: $name is not in SET=$SET ($programs): skipped" >&2
done
# The programs of the set, or those of ONLY among them.
wanted() { [[ " $programs " == *" $1 "* && (-z "${ONLY:-}" || " $ONLY " == *" $1 "*) ]]; }
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/memtide-capture.XXXXXX)
server=""
cleanup() {
    [ -z "$server" ] || kill "$server" 2>/dev/null || true
    pkill -f -- "--log-file=$WORK/" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

for tool in $tools; do
    command -v "$tool" >/dev/null || {
        echo "capture: missing $tool" >&2
        exit 1
    }
done
[ -x "$MEMTIDE" ] || {
    echo "capture: no memtide binary at $MEMTIDE (cargo build --release --bin memtide)" >&2
    exit 1
}

# Keeps 1 in BASE data accesses (lackey's " L", " S", " M" lines; instruction fetches
# dropped) after the first SKIP, with lackey's header: keep BASE SKIP < raw > kept. C, not awk:
# a run is a billion lines.
cat >"$WORK/keep.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    unsigned long long every = strtoull(argv[1], 0, 10), skip = strtoull(argv[2], 0, 10), n = 0;
    int header = 0;
    char line[512];
    static char out[1 << 20];
    setvbuf(stdout, out, _IOFBF, sizeof out);
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == '=' && line[1] == '=') {
            if (header++ < 8) fputs(line, stdout);
        } else if (line[0] == ' ' && (line[1] == 'L' || line[1] == 'S' || line[1] == 'M')) {
            if (++n > skip && n % every == 0) fputs(line, stdout);
        }
    }
    return 0;
}
C
gcc -O2 -o "$WORK/keep" "$WORK/keep.c"

# lackey NAME COMMAND...: runs COMMAND under lackey, its trace to $WORK/NAME.raw. A run
# whose trace outgrows RAW_LIMIT bytes (default 8 GB, about 190 M accesses) is stopped there:
# its capture is then the first part of the run, and says so.
lackey() {
    local name=$1
    shift
    setarch "$(uname -m)" -R valgrind --tool=lackey --trace-mem=yes \
        --log-file="$WORK/$name.raw" "$@" >/dev/null 2>"$WORK/$name.stderr" &
    local run=$!
    while kill -0 "$run" 2>/dev/null; do
        if [ "$(stat -c %s "$WORK/$name.raw" 2>/dev/null || echo 0)" -gt "${RAW_LIMIT:-8000000000}" ]; then
            echo "capture: $name: stopped at ${RAW_LIMIT:-8000000000} bytes of trace: the first part of the run" >&2
            pkill -f -- "--log-file=$WORK/$name.raw" || true
            break
        fi
        sleep 1
    done
    wait "$run" || true
}

# capture NAME SKIP COMMAND...: the program's run under lackey, sampled, converted.
capture() {
    local name=$1 skip=$2
    shift 2
    echo "capture: $name: $*" >&2
    local start=$SECONDS
    lackey "$name" "$@"
    finish "$name" "$skip" "$start"
}

# Keeps 1 in BASE of $WORK/NAME.raw after SKIP accesses, thins that to between TARGET and
# 2 x TARGET records and converts it into OUT/NAME.mt.zst with its record weight.
finish() {
    local name=$1 skip=$2 start=$3
    local kept thin
    "$WORK/keep" "$BASE" "$skip" <"$WORK/$name.raw" >"$WORK/$name.lackey"
    rm -f "$WORK/$name.raw"
    kept=$(grep -c '^ [LSM] ' "$WORK/$name.lackey" || true)
    thin=$((kept / TARGET > 1 ? kept / TARGET : 1))
    [ "$kept" -ge "$TARGET" ] || echo "capture: $name: only $kept records (fewer than $TARGET)" >&2
    awk -v k="$thin" '/^==/ { print; next } { if (++n % k == 0) print }' "$WORK/$name.lackey" \
        >"$WORK/$name.thin.lackey"
    "$MEMTIDE" convert --trace "$WORK/$name.thin.lackey" --format lackey \
        --record-weight $((BASE * thin)) --out "$WORK/$name.mt"
    zstd -q -19 --long=27 -f "$WORK/$name.mt" -o "$OUT/$name.mt.zst"
    echo "capture: $name: $kept records kept (1 in $BASE accesses), then 1 in $thin: $(($(stat -c %s "$WORK/$name.mt") / 8 - 4)) records of weight $((BASE * thin)), $(stat -c %s "$OUT/$name.mt.zst") bytes, $((SECONDS - start)) s" >&2
    rm -f "$WORK/$name.lackey" "$WORK/$name.thin.lackey" "$WORK/$name.mt"
}

cat >"$WORK/text.py" <<'PY'
import random, sys
random.seed(3)
words = [''.join(random.choice('etaoinshrdlu') for _ in range(random.randint(2, 9))) for _ in range(20000)]
size = int(sys.argv[2])
with open(sys.argv[1], 'w') as f:
    n = 0
    while n < size:
        line = ' '.join(random.choice(words) for _ in range(12)) + '\n'
        f.write(line)
        n += len(line)
PY

cat >"$WORK/zipf-text.py" <<'PY'
import random, sys
random.seed(4)
words = [''.join(random.choice('etaoinshrdlucmfwyp') for _ in range(random.randint(2, 10))) for _ in range(50000)]
weights = [1.0 / (i + 1) for i in range(len(words))]
size = int(sys.argv[2])
with open(sys.argv[1], 'w') as f:
    n = 0
    while n < size:
        line = ' '.join(random.choices(words, weights=weights, k=12)) + '\n'
        f.write(line)
        n += len(line)
PY

if wanted kv; then
    command -v redis-server >/dev/null || {
        echo "capture: missing redis-server" >&2
        exit 1
    }
    cat >"$WORK/client.py" <<'PY'
# A Zipf(0.99) client of a redis server, in RESP with pipelining: loads KEYS keys of 100
# bytes, then sends OPS requests, 90 % GET and 10 % SET, keys drawn by popularity rank
# (rank 1 the most popular) and scattered over the key space by a fixed permutation.
import bisect, random, socket, sys, time
port, keys, ops = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for _ in range(600):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.5)
else:
    sys.exit("no server")
rng = random.Random(11)
def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
buf = b""
def replies(want):
    """Reads `want` complete RESP replies (status, error, integer or bulk)."""
    global buf
    pos = got = 0
    while got < want:
        end = buf.find(b"\r\n", pos)
        if end >= 0 and buf[pos:pos + 1] == b"$" and int(buf[pos + 1:end]) >= 0:
            end = end + 2 + int(buf[pos + 1:end])
            end = end if len(buf) >= end + 2 else -1
        if end < 0:
            chunk = s.recv(1 << 20)
            if not chunk:
                sys.exit("the server closed the connection")
            buf = buf[pos:] + chunk
            pos = 0
            continue
        pos = end + 2
        got += 1
    buf = buf[pos:]
def send(batch):
    s.sendall(b"".join(batch))
    replies(len(batch))
value = lambda i: (b"%010d" % i) * 120
batch = []
for i in range(keys):
    batch.append(cmd(b"SET", b"key:%d" % i, value(i)))
    if len(batch) == 200:
        send(batch); batch = []
if batch:
    send(batch); batch = []
# Zipf(0.99) by inverse transform over the cumulative weights.
cdf, total = [], 0.0
for r in range(1, keys + 1):
    total += r ** -0.99
    cdf.append(total)
perm = list(range(keys)); rng.shuffle(perm)
for n in range(ops):
    k = perm[bisect.bisect_left(cdf, rng.random() * total)]
    if rng.random() < 0.9:
        batch.append(cmd(b"GET", b"key:%d" % k))
    else:
        batch.append(cmd(b"SET", b"key:%d" % k, value(n)))
    if len(batch) == 100:
        send(batch); batch = []
if batch:
    send(batch)
s.sendall(cmd(b"SHUTDOWN", b"NOSAVE"))
PY
    port=6391
    start=$SECONDS
    echo "capture: kv: redis-server under lackey, the client outside it" >&2
    lackey kv redis-server --port "$port" --save "" --appendonly no &
    server=$!
    # A server stopped at RAW_LIMIT resets the client's connection: the capture is then the
    # first part of the run, as for any program.
    if ! python3 "$WORK/client.py" "$port" "${KV_KEYS:-60000}" "${KV_OPS:-250000}"; then
        echo "capture: kv: the client ended early (above)" >&2
        # It sent no SHUTDOWN: stop the server, or the wait below never ends.
        pkill -f -- "--log-file=$WORK/kv.raw" || true
    fi
    wait "$server" || true
    server=""
    finish kv 20000000 "$start"
fi

if wanted sqlite; then
    cat >"$WORK/q.sql" <<'SQL'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO t SELECT x, (x * 7919) % 50021, randomblob(16) || zeroblob(624) FROM c;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(length(v)) FROM t WHERE k BETWEEN 1000 AND 20000;
SELECT a.k, count(*) FROM t a JOIN t b ON b.k = a.k WHERE a.id % 97 = 0 GROUP BY a.k ORDER BY 2 DESC LIMIT 5;
UPDATE t SET v = upper(v) WHERE id % 13 = 0;
SELECT k % 100, avg(id) FROM t GROUP BY 1 ORDER BY 2 LIMIT 3;
SELECT count(*) FROM t a WHERE EXISTS (SELECT 1 FROM t b WHERE b.k = a.k AND b.id <> a.id);
SQL
    capture sqlite 2000000 \
        sqlite3 -cmd "PRAGMA cache_size=-262144" :memory: ".read $WORK/q.sql"
fi

if wanted xz; then
    python3 "$WORK/text.py" "$WORK/xz-input.txt" $((700 << 10))
    capture xz 2000000 xz -7 -T1 -k -c "$WORK/xz-input.txt"
fi

if wanted python; then
    cat >"$WORK/dict.py" <<'PY'
import random
random.seed(7)
d = {}
for i in range(300_000):
    d[f"key{i * 7919 % 1_000_003}"] = [i, str(i)]
hits = 0
for _ in range(200_000):
    k = f"key{random.randrange(1_000_003)}"
    if k in d:
        hits += len(d[k][1])
print(hits, sum(v[0] for v in d.values()))
PY
    # The interpreter itself, not a wrapper script (pyenv shims exec it, and valgrind would
    # only trace the shell).
    python=$(python3 -c 'import sys; print(sys.executable)')
    capture python 2000000 "$python" "$WORK/dict.py"
fi

if wanted pagerank; then
    cat >"$WORK/pagerank.c" <<'C'
/* PageRank, pull style (GAP's pr), over a graph with skewed degrees in CSR: each endpoint is
   the square of a uniform draw scaled to the vertex count, so low ids are hubs (R-MAT's twenty
   draws per edge would make the capture mostly instruction fetches). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static uint64_t state = 88172645463325252ull;
static uint64_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; }
static uint32_t skewed(uint32_t n) { uint64_t u = next() >> 32; return (uint32_t)((u * u >> 32) * n >> 32); }
int main(void) {
    const int scale = 19, degree = 16, iterations = 2;
    const uint32_t n = 1u << scale;
    const uint64_t m = (uint64_t)n * degree;
    uint32_t *src = malloc(m * 4), *dst = malloc(m * 4);
    for (uint64_t e = 0; e < m; e++) {
        src[e] = skewed(n);
        dst[e] = (uint32_t)(next() % n) ^ (skewed(n) & 0xff);
    }
    uint64_t *start = calloc(n + 1, 8);
    uint32_t *out_degree = calloc(n, 4), *in = malloc(m * 4);
    for (uint64_t e = 0; e < m; e++) { start[dst[e] + 1]++; out_degree[src[e]]++; }
    for (uint32_t v = 0; v < n; v++) start[v + 1] += start[v];
    uint64_t *fill = malloc((size_t)n * 8);
    for (uint32_t v = 0; v < n; v++) fill[v] = start[v];
    for (uint64_t e = 0; e < m; e++) in[fill[dst[e]]++] = src[e];
    free(fill); free(src); free(dst);
    double *rank = malloc((size_t)n * 8), *contrib = malloc((size_t)n * 8);
    for (uint32_t v = 0; v < n; v++) rank[v] = 1.0 / n;
    for (int it = 0; it < iterations; it++) {
        for (uint32_t v = 0; v < n; v++) contrib[v] = out_degree[v] ? rank[v] / out_degree[v] : 0;
        double change = 0;
        for (uint32_t v = 0; v < n; v++) {
            double sum = 0;
            for (uint64_t e = start[v]; e < start[v + 1]; e++) sum += contrib[in[e]];
            double r = 0.15 / n + 0.85 * sum;
            change += r > rank[v] ? r - rank[v] : rank[v] - r;
            rank[v] = r;
        }
        printf("iteration %d: change %g\n", it, change);
    }
    return 0;
}
C
    gcc -O2 -o "$WORK/pagerank" "$WORK/pagerank.c"
    capture pagerank 2000000 "$WORK/pagerank"
fi

if wanted cc1; then
    python3 - "$WORK/big.c" <<'PY'
import random, sys
random.seed(5)
with open(sys.argv[1], "w") as f:
    # cc1 run by hand knows no multiarch include paths: declare what the code uses.
    f.write("void *memcpy(void *, const void *, unsigned long);\nstruct s { int a[16]; double d; char name[32]; };\n")
    for i in range(300):
        f.write(f"static int table{i}[64] = {{{', '.join(str(random.randrange(1000)) for _ in range(64))}}};\n")
        f.write(f"int f{i}(struct s *p, int x) {{\n  int acc = {i};\n")
        for j in range(12):
            f.write(f"  if (x > {random.randrange(100)}) {{ acc += table{i}[(x + {j}) & 63] * p->a[{j} & 15]; p->d += acc / 3.0; }}\n")
            f.write(f"  else {{ for (int k = 0; k < {random.randrange(2, 9)}; k++) acc ^= (acc << 3) + k * {random.randrange(99)}; }}\n")
        called = random.randrange(i) if i else 0
        f.write(f"  if (x & 1) memcpy(p->name, \"f{i}\", 3);\n  return acc + {'f%d(p, x - 1)' % called if i else '0'};\n}}\n")
PY
    cc1=$(gcc -print-prog-name=cc1)
    capture cc1 2000000 "$cc1" -quiet -O2 "$WORK/big.c" -o "$WORK/big.s"
fi

if wanted sort; then
    python3 - "$WORK/lines.txt" <<'PY'
import random, sys
random.seed(9)
alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
with open(sys.argv[1], "w") as f:
    for _ in range(600_000):
        f.write("".join(random.choice(alphabet) for _ in range(random.randint(60, 120))) + "\n")
PY
    # valgrind follows no exec: the locale comes from this shell, not from env(1).
    LC_ALL=C capture sort 2000000 \
        sort --parallel=1 -S 1G -o "$WORK/sorted.txt" "$WORK/lines.txt"
fi

if wanted stencil; then
    cat >"$WORK/stencil.c" <<'C'
/* 3-D 7-point Jacobi over an N^3 grid of doubles, two grids swapped each sweep. */
#include <stdio.h>
#include <stdlib.h>
#define N 160
#define AT(g, i, j, k) g[((size_t)(i) * N + (j)) * N + (k)]
int main(void) {
    double *a = malloc(sizeof(double) * N * N * N), *b = malloc(sizeof(double) * N * N * N);
    for (size_t x = 0; x < (size_t)N * N * N; x++) a[x] = b[x] = (double)(x % 97);
    for (int sweep = 0; sweep < 3; sweep++) {
        for (int i = 1; i < N - 1; i++)
            for (int j = 1; j < N - 1; j++)
                for (int k = 1; k < N - 1; k++)
                    AT(b, i, j, k) = (AT(a, i, j, k) + AT(a, i - 1, j, k) + AT(a, i + 1, j, k) +
                                      AT(a, i, j - 1, k) + AT(a, i, j + 1, k) +
                                      AT(a, i, j, k - 1) + AT(a, i, j, k + 1)) / 7.0;
        double *t = a; a = b; b = t;
    }
    printf("%f\n", AT(a, N / 2, N / 2, N / 2));
    return 0;
}
C
    gcc -O2 -o "$WORK/stencil" "$WORK/stencil.c"
    capture stencil 2000000 "$WORK/stencil"
fi
if wanted perl; then
    python3 "$WORK/zipf-text.py" "$WORK/perl-input.txt" $((6 << 20))
    cat >"$WORK/wc.pl" <<'PL'
my %c; my %bigram; my $prev = "";
while (<>) { for my $w (split) { $c{$w}++; $bigram{"$prev $w"}++; $prev = $w; } }
my @top = (sort { $c{$b} <=> $c{$a} } keys %c)[0..20];
print "$_ $c{$_}\n" for @top;
print scalar(keys %bigram), "\n";
PL
    capture perl 2000000 perl "$WORK/wc.pl" "$WORK/perl-input.txt"
fi

if wanted hashjoin; then
    cat >"$WORK/hashjoin.c" <<'C'
/* Hash join: build an open-addressing table over 1.5 M rows of 32 bytes, probe with 6 M
   keys of which most hit, drawn with a skew (about 90 % of probes on 20 % of keys). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static uint64_t s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
typedef struct { uint64_t key, a, b, c; } row;
int main(void) {
    const uint64_t n = 1500000, cap = 1u << 22, probes = 6000000;
    row *rows = malloc(n * sizeof(row));
    uint32_t *table = malloc(cap * 4);
    for (uint64_t i = 0; i < cap; i++) table[i] = UINT32_MAX;
    for (uint64_t i = 0; i < n; i++) {
        rows[i] = (row){ i * 2654435761u + 1, i, i * 3, i * 7 };
        uint64_t h = (rows[i].key * 0x9E3779B97F4A7C15ull) >> 42;
        while (table[h & (cap - 1)] != UINT32_MAX) h++;
        table[h & (cap - 1)] = (uint32_t)i;
    }
    uint64_t sum = 0, found = 0;
    for (uint64_t p = 0; p < probes; p++) {
        uint64_t r = rnd();
        uint64_t i = (r & 7) < 7 ? (r >> 8) % (n / 5) : (r >> 8) % n;
        i = (i * 7919) % n;
        uint64_t key = i * 2654435761u + 1 + ((r >> 4) % 10 == 0);
        uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 42;
        for (;;) {
            uint32_t x = table[h & (cap - 1)];
            if (x == UINT32_MAX) break;
            if (rows[x].key == key) { sum += rows[x].a + rows[x].c; found++; break; }
            h++;
        }
    }
    printf("%llu %llu\n", (unsigned long long)found, (unsigned long long)sum);
    return 0;
}
C
    gcc -O2 -o "$WORK/hashjoin" "$WORK/hashjoin.c"
    capture hashjoin 2000000 "$WORK/hashjoin"
fi

if wanted bfs; then
    cat >"$WORK/bfs.c" <<'C'
/* Breadth-first search from 8 sources over a uniform random graph of 2^20 vertices and 8 M
   edges in CSR (top-down, a frontier queue and a parent array). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static uint64_t s = 88172645463325252ull;
static uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
int main(void) {
    const uint32_t n = 1u << 20; const uint64_t m = 8ull << 20;
    uint32_t *src = malloc(m * 4), *dst = malloc(m * 4), *adj = malloc(m * 4);
    uint64_t *off = calloc(n + 1, 8);
    for (uint64_t e = 0; e < m; e++) { src[e] = rnd() % n; dst[e] = rnd() % n; off[src[e] + 1]++; }
    for (uint32_t v = 0; v < n; v++) off[v + 1] += off[v];
    uint64_t *fill = malloc((size_t)n * 8); memcpy(fill, off, (size_t)n * 8);
    for (uint64_t e = 0; e < m; e++) adj[fill[src[e]]++] = dst[e];
    free(fill); free(src); free(dst);
    int32_t *parent = malloc((size_t)n * 4); uint32_t *queue = malloc((size_t)n * 4);
    uint64_t reached = 0;
    for (int k = 0; k < 8; k++) {
        memset(parent, 0xff, (size_t)n * 4);
        uint32_t root = rnd() % n, head = 0, tail = 0;
        parent[root] = root; queue[tail++] = root;
        while (head < tail) {
            uint32_t v = queue[head++];
            for (uint64_t e = off[v]; e < off[v + 1]; e++)
                if (parent[adj[e]] < 0) { parent[adj[e]] = v; queue[tail++] = adj[e]; }
        }
        reached += tail;
    }
    printf("%llu\n", (unsigned long long)reached);
    return 0;
}
C
    gcc -O2 -o "$WORK/bfs" "$WORK/bfs.c"
    capture bfs 2000000 "$WORK/bfs"
fi

if wanted kmeans; then
    cat >"$WORK/kmeans.c" <<'C'
/* k-means (Lloyd), 400,000 points of 16 floats, 64 clusters, 6 iterations. */
#include <stdio.h>
#include <stdlib.h>
#include <float.h>
#define D 16
#define K 64
int main(void) {
    const int n = 400000; unsigned seed = 12345;
    float *x = malloc(sizeof(float) * n * D), *c = malloc(sizeof(float) * K * D), *sum = malloc(sizeof(float) * K * D);
    int *label = malloc(sizeof(int) * n), *cnt = malloc(sizeof(int) * K);
    for (int i = 0; i < n * D; i++) { seed = seed * 1103515245 + 12345; x[i] = (seed >> 8) % 1000 / 10.0f; }
    for (int i = 0; i < K * D; i++) c[i] = x[i * 97 % (n * D)];
    for (int it = 0; it < 6; it++) {
        for (int i = 0; i < K * D; i++) sum[i] = 0;
        for (int k = 0; k < K; k++) cnt[k] = 0;
        for (int i = 0; i < n; i++) {
            float best = FLT_MAX; int bk = 0;
            for (int k = 0; k < K; k++) { float d = 0; for (int j = 0; j < D; j++) { float t = x[i * D + j] - c[k * D + j]; d += t * t; } if (d < best) { best = d; bk = k; } }
            label[i] = bk; cnt[bk]++;
            for (int j = 0; j < D; j++) sum[bk * D + j] += x[i * D + j];
        }
        for (int k = 0; k < K; k++) if (cnt[k]) for (int j = 0; j < D; j++) c[k * D + j] = sum[k * D + j] / cnt[k];
    }
    printf("%d %f\n", label[0], c[0]);
    return 0;
}
C
    gcc -O2 -o "$WORK/kmeans" "$WORK/kmeans.c"
    capture kmeans 2000000 "$WORK/kmeans"
fi

if wanted bzip2; then
    python3 "$WORK/zipf-text.py" "$WORK/bz-input.txt" $((3 << 20))
    capture bzip2 2000000 bzip2 -9 -k -c "$WORK/bz-input.txt"
fi

if wanted oltp; then
    cat >"$WORK/oltp.sql" <<'SQL'
CREATE TABLE acct(id INTEGER PRIMARY KEY, owner TEXT, balance INTEGER, note TEXT);
CREATE TABLE hist(id INTEGER PRIMARY KEY, acct INTEGER, delta INTEGER, at INTEGER);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO acct SELECT (x * 48271) % 2147483647, hex(randomblob(12)), x % 1000, zeroblob(200) FROM c;
CREATE INDEX acct_owner ON acct(owner);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 60000)
INSERT INTO hist(acct, delta, at) SELECT ((1 + abs(random()) % 200000) * 48271) % 2147483647, x % 50, x FROM c;
UPDATE acct SET balance = balance + 1 WHERE id IN (SELECT acct FROM hist WHERE delta < 10);
SELECT count(*), sum(balance) FROM acct a JOIN hist h ON h.acct = a.id;
SQL
    capture oltp 2000000 sqlite3 -cmd "PRAGMA cache_size=-262144" :memory: ".read $WORK/oltp.sql"
fi

if wanted lru; then
    cat >"$WORK/lru.c" <<'C'
/* An LRU cache of 300,000 entries of 128 bytes (hash table + doubly linked list), serving
   5 M requests whose keys follow a Zipf-like skew over 1 M keys: hits move to the front,
   misses evict the tail and insert. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
typedef struct node { uint64_t key; struct node *prev, *next, *chain; char val[96]; } node;
static uint64_t s = 0x1234567ull;
static double u01(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
int main(void) {
    const uint64_t cap = 300000, keys = 1000000, buckets = 1 << 19; const int reqs = 5000000;
    node **tab = calloc(buckets, sizeof(node *)); node *pool = malloc(cap * sizeof(node));
    node head = { 0 }; head.next = head.prev = &head; uint64_t used = 0, hits = 0;
    for (int r = 0; r < reqs; r++) {
        uint64_t k = (uint64_t)(pow(u01(), 3.0) * keys); k = (k * 2654435761u) % keys;
        node **b = &tab[(k * 0x9E3779B97F4A7C15ull) >> 45], *x = *b;
        while (x && x->key != k) x = x->chain;
        if (x) { hits++; x->prev->next = x->next; x->next->prev = x->prev; x->val[0]++; }
        else {
            if (used < cap) x = &pool[used++];
            else { x = head.prev; x->prev->next = &head; head.prev = x->prev;
                   node **o = &tab[(x->key * 0x9E3779B97F4A7C15ull) >> 45]; while (*o != x) o = &(*o)->chain; *o = x->chain; }
            x->key = k; x->chain = *b; *b = x; for (int i = 0; i < 96; i += 8) x->val[i] = (char)k;
        }
        x->next = head.next; x->prev = &head; head.next->prev = x; head.next = x;
    }
    printf("%llu\n", (unsigned long long)hits);
    return 0;
}
C
    gcc -O2 -o "$WORK/lru" "$WORK/lru.c" -lm
    capture lru 2000000 "$WORK/lru"
fi
ls -l "$OUT"
