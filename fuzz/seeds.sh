#!/usr/bin/env bash
# Regenerates the seed inputs (corpus/<target>/seed-*) from the repository's fixtures: the real
# lackey traces, the machine and topology fixture trees, the shipped configuration, and the
# sample files in the parsers' own tests. Inputs the fuzzer found (files named by their SHA-1)
# are left alone. Run from anywhere; needs python3 and zstd.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - <<'PY'
import os, pathlib, re, struct, subprocess

corpus = pathlib.Path("fuzz/corpus")

def seed(target, name, data):
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed-{name}").write_bytes(data)

def rust_const(path, name):
    """The text of `const NAME: &str = "\\ ... ";` in a Rust test module."""
    src = pathlib.Path(path).read_text()
    m = re.search(r'const %s: &str = "\\\n(.*?)";' % name, src, re.S)
    return m.group(1).replace('\\\\', '\\')

# --- lackey: the head of the sqlite capture and slices of the three traces ---------------------
head = pathlib.Path("agent/tests/data/lackey-sqlite-head.txt").read_text().splitlines(True)
seed("trace_lackey", "sqlite-head", "".join(head[:80]))
for trace in sorted(pathlib.Path("traces").glob("*.lackey.zst")):
    lines = subprocess.run(["zstd", "-dc", str(trace)], capture_output=True, check=False).stdout
    lines = lines.decode(errors="replace").splitlines(True)
    name = trace.name.split(".")[0]
    seed("trace_lackey", f"{name}-start", "".join(lines[:40]))
    seed("trace_lackey", f"{name}-middle", "".join(lines[100000:100060]))
seed("trace_lackey", "kinds", "==1== x\nI  0400,3\n L 1000,8\n M 0421e2a0,4\n S 2000,8\n\n")

# --- perf script: both documented layouts, IBS, several processes ------------------------------
perf = [
    "# perf script -F pid,event,addr,data_src,weight\n"
    + "".join(
        f"  {100 + i % 3} {'cpu/mem-stores/P:' if i % 4 == 0 else 'cpu/mem-loads,ldlat=30/P:'} "
        f"{0x7f0000000000 + i * 4096 * 7:x} 68100142 |OP LOAD|LVL L3 miss| 120\n"
        for i in range(24)
    ),
    "  1234 cpu/mem-loads,ldlat=30/P:     7ffd1c2f8e40         68100142 |OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A       47\n"
    "1234/1240 cpu_core/mem-stores/P: 0x55d4c8a0b2c8 2 |OP STORE|LVL N/A| 0\n",
    "         sqlite3  4711 [001] 12345.678901:      10007 cpu/mem-stores/P:     55d4c8a0b2c8 sqlite3VdbeExec+0x1a (/usr/bin/sqlite3)\n"
    "python3 99 [000] 1.000001: 1 ibs_op//: 7f00 |OP LOAD|LVL L3 hit|\n",
]
for i, text in enumerate(perf):
    seed("trace_perf", f"layout{i}", text)

# --- native: header + records (the format of agent/sim/src/trace/native.rs) ---------------------
def native(weight, mlp, footprint, records):
    out = b"MTTRACE\0" + struct.pack("<IIIIQ", 1, weight, mlp, 0, footprint)
    for addr, kind in records:
        out += struct.pack("<Q", (addr & ((1 << 56) - 1)) | (kind << 56))
    return out
seed("trace_native", "empty", native(1, 1, 0, []))
seed("trace_native", "mixed", native(64, 4, 1 << 30,
     [((i << 12) | ((i % 3) << 48), i % 3) for i in range(40)]))
seed("trace_native", "zero-weight", native(0, 0, 0, [(0x1000, 1), (0x2000, 2)]))

# --- config: the shipped file and small variants ------------------------------------------------
seed("config", "shipped", pathlib.Path("deploy/config/memtide.toml").read_text())
seed("config", "small", '[agent]\nobserve = true\nlisten = "127.0.0.1:9477"\n'
     '[targets]\nnames = ["postgres*"]\npids = [1]\n[sources]\norder = ["damon", "swfault"]\n'
     'ring_bytes = 1048576\n[topology]\nfast_nodes = [0]\nslow_nodes = [1]\n'
     '[engine.policy.epoch]\nmin_ms = 100\n')
seed("config", "unknown-key", "[agent]\nobserve = true\nlisten_addr = \"0.0.0.0:1\"\n")
seed("config", "wrong-type", "[sources]\nring_bytes = \"big\"\n")

# --- /proc/PID/{maps,numa_maps,smaps}: the parsers' test files and this machine's ----------------
seed("proc_maps", "test", rust_const("agent/host/src/targets/maps.rs", "MAPS"))
seed("proc_numa_maps", "test", rust_const("agent/host/src/targets/numa_maps.rs", "NUMA_MAPS"))
seed("proc_smaps", "test", rust_const("agent/host/src/targets/smaps.rs", "SMAPS"))
for name in ["maps", "numa_maps"]:
    text = pathlib.Path(f"/proc/self/{name}").read_text()
    seed(f"proc_{name}", "self", "".join(text.splitlines(True)[:24]))
smaps = pathlib.Path("/proc/self/smaps").read_text().splitlines(True)
seed("proc_smaps", "self", "".join(smaps[:3 * 26]))

# --- sysfs trees: the fixture machines, one part per file of memtide_fuzz::SYSFS_FILES ----------
lib = pathlib.Path("fuzz/src/lib.rs").read_text()
files = re.findall(r'^    "([^"]+)",$', lib.split("pub const SYSFS_FILES")[1].split("];")[0], re.M)
fixtures = sorted(pathlib.Path("agent/host/tests/fixtures/machines").iterdir()) + sorted(
    pathlib.Path("agent/host/tests/fixtures/topology").iterdir())
for root in fixtures:
    parts = []
    for rel in files:
        path = root / rel
        parts.append(path.read_bytes() if path.is_file() else b"\xff")
    seed("sysfs_topology", root.name, b"\0".join(parts))
    seed("sysfs_topology", root.name + "-override", b"\0".join(parts) + b"\x000|1")
non_numa = {"sys/devices/system/cpu/online": b"0-3\n",
            "proc/meminfo": b"MemTotal:        8000000 kB\nMemFree:         4000000 kB\n"}
seed("sysfs_topology", "non-numa", b"\0".join(non_numa.get(rel, b"\xff") for rel in files))

# --- ring records: samples for routed and unrouted pids, short records, route commands ----------
def sample(pid, addr, kind=1, source=1):
    return struct.pack("=QQIIIBBxx", addr, 100, pid, pid, 0, kind, source)
def region(target, start, end):
    return struct.pack("=QQQIIII", target, start, end, 3, 1, 4, 0)
def item(record):
    return bytes([len(record)]) + record
seed("ring_records", "routes", bytes([0x13]) + b"".join(
    item(sample(pid, 0x7f0000000000 + i * 4096)) for i, pid in enumerate([1, 2, 1, 1, 3, 9, 4, 2])))
seed("ring_records", "commands", bytes([0x82]) + item(sample(1, 0x1000)) + b"\xf8"
     + item(sample(1, 0x2000)) + b"\xfc" + item(sample(1, 0x3000)) + item(b"\0" * 12)
     + b"\xf9" + item(sample(2, 0x4000, 2, 0)))
seed("ring_records", "damon", bytes([0x00]) + item(region(0, 0x7f0000000000, 0x7f0000200000))
     + item(region(1, 0x1000, 0x2000)))
PY
echo "seeds written under fuzz/corpus/"
