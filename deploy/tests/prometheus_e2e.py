#!/usr/bin/env python3
"""A real Prometheus scraping a real `memtide run`, and every PromQL expression of the Grafana
dashboard and the alert rules evaluated through Prometheus' HTTP API (issue 9).

Started by deploy/tests/prometheus-e2e.sh (which installs Prometheus first). Steps:
 1. memtide-workload (a process whose memory it keeps faulting and sweeping) is the target;
 2. `memtide run --observe --pid PID --listen 127.0.0.1:PORT` runs with exactly the capability set
    of deploy/systemd/memtide.service (setpriv drops the rest; MEMTIDE_E2E_FULL_ROOT=1: all of root);
 3. Prometheus (Debian's package, on loopback, a temporary data directory) scrapes it every 2 s
    with deploy/prometheus/prometheus.yml (its target and intervals adjusted) and loads the alert
    rules;
 4. after MEMTIDE_E2E_SECONDS (default 40) of scraping: the dashboard's variable queries are
    resolved the way Grafana would, then every panel query must parse and return data, every
    alert expression must parse, every rule must evaluate without error, and every metric the
    dashboard and rules name must exist in Prometheus;
 5. memtide gets SIGTERM and must exit 0 within 30 s (the clean-stop path of the unit).
Ends with "prometheus-e2e: N passed, N failed".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.dont_write_bytecode = True  # no __pycache__ in the work tree
sys.path.insert(0, str(HERE))
import deploylib  # noqa: E402

DASHBOARD = ROOT / "deploy/grafana/memtide.json"
RULES = ROOT / "deploy/prometheus/rules/memtide.rules.yml"
PROM_CONFIG = ROOT / "deploy/prometheus/prometheus.yml"
UNIT = ROOT / "deploy/systemd/memtide.service"
CONFIG = ROOT / "deploy/config/memtide.toml"
SCRAPE = "2s"
RATE_INTERVAL = "20s"  # what Grafana's $__rate_interval is at a 2 s scrape interval and this range

results: list[tuple[bool, str, str]] = []


def record(ok: bool, what: str, detail: str = "") -> None:
    results.append((ok, what, detail))
    print(f"{'PASS' if ok else 'FAIL'}: {what}{(' -- ' + detail) if detail else ''}", flush=True)


def die(message: str, code: int = 1) -> None:
    print(f"prometheus-e2e: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def find_binary(env: str, names: list[str]) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    dirs = [os.environ.get("CARGO_TARGET_DIR", ""), str(ROOT / "target"), "/work/target-deploy"]
    for d in dirs:
        for profile in ("release", "debug"):
            for name in names:
                p = Path(d, profile, name)
                if d and p.is_file() and os.access(p, os.X_OK):
                    return str(p)
    return None


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str, dict]:
    try:
        # Ask for OpenMetrics as Prometheus does; without it the agent serves the classic text.
        request = urllib.request.Request(
            url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace"), {k.lower(): v for k, v in e.headers.items()}


class Prom:
    def __init__(self, base: str) -> None:
        self.base = base

    def api(self, path: str, **params) -> dict:
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        _, body, _ = http_get(url, timeout=20)
        return json.loads(body)

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr)

    def query_range(self, expr: str, seconds: int) -> dict:
        now = time.time()
        return self.api("query_range", query=expr, start=f"{now - seconds:.3f}", end=f"{now:.3f}", step="2")


def unit_caps() -> list[str]:
    return sorted(c.lower() for c in deploylib.unit_capabilities(str(UNIT)))


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def find_agent(listen: str) -> int | None:
    """The pid of the `memtide run` process listening on `listen` (not strace, not setpriv)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"memtide") and argv[1] == b"run" and listen.encode() in argv:
            return int(entry.name)
    return None


def drive_workload(proc: subprocess.Popen, stop: threading.Event) -> None:
    """Keeps the workload faulting pages (swfault) and sweeping a hot range.

    `touch` right after `churn` faults the whole buffer back in, so the pages the faults were
    sampled on are resident through the 1 s sweep, when memtide most likely queries where they
    are. In the other order 7/8 of the buffer stayed discarded during the sweep, and an epoch
    whose sampled pages were all absent reports no fast-tier hit ratio (a flaky e2e failure).
    """
    try:
        while not stop.is_set() and proc.poll() is None:
            for cmd in ("churn 3", "touch", "hot 0 1024 1 r"):
                proc.stdin.write(cmd + "\n")
                proc.stdin.flush()
                if not proc.stdout.readline():
                    return
    except (BrokenPipeError, ValueError, OSError):
        return


def main() -> None:
    memtide = find_binary("MEMTIDE_BIN", ["memtide"])
    workload = find_binary("MEMTIDE_WORKLOAD_BIN", ["memtide-workload"])
    if not memtide:
        die("no memtide binary: build it (cargo build --release --bin memtide) or set MEMTIDE_BIN", 2)
    if not workload:
        die("no memtide-workload binary: cargo build --release --bin memtide-workload, or set MEMTIDE_WORKLOAD_BIN", 2)
    probe = subprocess.run([memtide, "run", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        die(f"`{memtide} run` is not available in this build (the daemon has not landed yet?): "
            f"{(probe.stderr or probe.stdout).strip().splitlines()[-1:] or ''}", 2)
    help_text = probe.stdout
    for flag in ("--observe", "--pid", "--listen", "--config", "--log-format"):
        if flag not in help_text:
            die(f"`memtide run --help` does not list {flag}: the e2e test needs it (contract of issue 9)", 2)
    prometheus = shutil.which("prometheus")
    if not prometheus:
        die("no prometheus binary: bash scripts/bootstrap.sh deploy", 2)
    print(f"memtide: {memtide}\nworkload: {workload}\nprometheus: "
          f"{subprocess.run([prometheus, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")

    seconds = int(os.environ.get("MEMTIDE_E2E_SECONDS", "40"))
    work = Path(tempfile.mkdtemp(prefix="memtide-e2e-"))
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    memtide_proc = None
    agent_pid_holder: list[int] = []
    try:
        # 1. the workload
        wl = subprocess.Popen([workload, "--pages", "8192", "--no-thp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, bufsize=1)
        procs.append(wl)
        ready = wl.stdout.readline()
        m = re.search(r"ready pid=(\d+)", ready)
        if not m:
            die(f"workload did not say ready: {ready!r}")
        pid = m.group(1)
        print(f"workload: {ready.strip()}")
        threading.Thread(target=drive_workload, args=(wl, stop), daemon=True).start()

        # 2. memtide, with the unit's capabilities only
        mport = deploylib.free_port()
        cmd = [memtide, "run", "--observe", "--pid", pid, "--listen", f"127.0.0.1:{mport}", "--log-format", "json"]
        if CONFIG.exists():
            cmd[2:2] = ["--config", str(CONFIG)]
        else:
            print(f"note: {CONFIG} does not exist; memtide runs with its built-in defaults")
        if os.environ.get("MEMTIDE_E2E_FULL_ROOT") != "1" and shutil.which("setpriv") and os.geteuid() == 0:
            caps = unit_caps()
            cmd = ["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in caps), "--inh-caps=-all",
                   "--no-new-privs", "--"] + cmd
            print(f"capabilities: only the unit's ({', '.join(caps)})")
        # strace -c: which system calls memtide makes, compared below with the unit's
        # SystemCallFilter= (a call outside it would fail with EPERM under systemd).
        strace_out = work / "strace.txt"
        use_strace = os.environ.get("MEMTIDE_E2E_STRACE", "1") != "0" and shutil.which("strace")
        if use_strace:
            cmd = ["strace", "-f", "-qq", "-c", "-o", str(strace_out)] + cmd
        log = work / "memtide.log"
        print("starting: " + " ".join(cmd), flush=True)
        memtide_proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(memtide_proc)
        agent_pid = memtide_proc.pid
        agent_pid_holder.append(agent_pid)
        if use_strace:
            # Under strace the agent is a traced descendant: find it by its unique --listen
            # argument and signal it, not strace (which would detach and leave it running).
            for _ in range(100):
                found = find_agent(f"127.0.0.1:{mport}")
                if found:
                    agent_pid = found
                    agent_pid_holder[:] = [agent_pid]
                    break
                time.sleep(0.1)
        base = f"http://127.0.0.1:{mport}"
        deadline = time.time() + 60
        status = 0
        while time.time() < deadline:
            if memtide_proc.poll() is not None:
                record(False, "memtide run starts", f"exited with {memtide_proc.returncode}:\n{tail(log)}")
                return
            try:
                status, _, _ = http_get(base + "/readyz", timeout=2)
            except (urllib.error.URLError, OSError):
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        record(status == 200, "memtide /readyz answers 200 within 60 s", f"last status {status}")
        if status != 200:
            print(tail(log))
            return
        code, _, _ = http_get(base + "/healthz")
        record(code == 200, "memtide /healthz answers 200")
        code, body, headers = http_get(base + "/metrics")
        ctype = headers.get("content-type", "")
        record(code == 200 and "openmetrics" in ctype.lower() and body.rstrip().endswith("# EOF"),
               "/metrics is OpenMetrics text", f"Content-Type {ctype!r}, ends {body.rstrip()[-20:]!r}")
        code, body, _ = http_get(base + "/status")
        try:
            json.loads(body)
            record(code == 200, "/status is JSON")
        except ValueError:
            record(False, "/status is JSON", body[:200])

        # 3. Prometheus with the shipped configuration, pointed at this agent
        cfg = yaml.safe_load(PROM_CONFIG.read_text())
        cfg["global"]["scrape_interval"] = SCRAPE
        cfg["global"]["evaluation_interval"] = SCRAPE
        cfg["rule_files"] = [str(RULES)]
        (job,) = [j for j in cfg["scrape_configs"] if j["job_name"] == "memtide"]
        job["scrape_interval"] = SCRAPE
        job["scrape_timeout"] = SCRAPE
        job["static_configs"] = [{"targets": [f"127.0.0.1:{mport}"]}]
        (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        pport = deploylib.free_port()
        prom_log = work / "prometheus.log"
        prom = subprocess.Popen([prometheus, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{pport}",
                                 "--storage.tsdb.retention.time=1h", "--log.level=warn"],
                                stdout=open(prom_log, "w"), stderr=subprocess.STDOUT)
        procs.append(prom)
        p = Prom(f"http://127.0.0.1:{pport}")
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if http_get(p.base + "/-/ready", timeout=2)[0] == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if prom.poll() is not None:
                record(False, "prometheus starts", tail(prom_log))
                return
            time.sleep(0.5)
        print(f"prometheus on 127.0.0.1:{pport}, scraping 127.0.0.1:{mport} every {SCRAPE}; waiting {seconds} s",
              flush=True)
        time.sleep(seconds)
        if memtide_proc.poll() is not None:
            record(False, "memtide keeps running while scraped", f"exited with {memtide_proc.returncode}:\n{tail(log)}")
            return
        up = p.query('up{job="memtide"}')
        ok = up.get("status") == "success" and any(r["value"][1] == "1" for r in up["data"]["result"])
        record(ok, "Prometheus scrapes memtide (up == 1)", json.dumps(up.get("data", up))[:300])
        scrapes = p.query(f'count_over_time(up{{job="memtide"}}[{seconds}s])')
        n = int(float(scrapes["data"]["result"][0]["value"][1])) if scrapes.get("data", {}).get("result") else 0
        record(n >= 5, "at least 5 scrapes", f"{n} scrapes")

        # 4a. every metric the dashboard and rules name exists
        names = set(p.api("label/__name__/values").get("data", []))
        wanted = deploylib.metric_names_of(deploylib.exprs(str(DASHBOARD), str(RULES)))
        missing = sorted(wanted - names)
        record(not missing, f"all {len(wanted)} metric names used by the dashboard and rules exist in Prometheus",
               f"missing: {', '.join(missing)}" if missing else "")

        # 4b. variables, resolved the way Grafana would (first job; every instance and target)
        items = deploylib.exprs(str(DASHBOARD), str(RULES))
        values: dict[str, str] = {}
        for it in [i for i in items if i["kind"] == "variable"]:
            os.environ["MEMTIDE_VARS"] = json.dumps(values)
            label = deploylib.LABEL_VALUES.match(it["expr"]).group(2)
            res = p.query(deploylib.substitute(it["expr"]))
            got = sorted({r["metric"].get(label, "") for r in res.get("data", {}).get("result", [])} - {""})
            record(res.get("status") == "success" and bool(got), f"variable {it['name']} has values",
                   f"{got[:5]}" if got else json.dumps(res)[:300])
            if not got:
                values[it["name"]] = ".*"
            elif it["name"] == "job":
                values["job"] = "memtide" if "memtide" in got else got[0]
            else:
                # Grafana's regex formatting of a multi-value variable, then escaped for a PromQL string.
                values[it["name"]] = ("(" + "|".join(re.escape(v) for v in got) + ")").replace("\\", "\\\\")
        print(f"variables: {values}")
        os.environ["MEMTIDE_VARS"] = json.dumps(values)
        os.environ["MEMTIDE_RATE_INTERVAL"] = RATE_INTERVAL

        # 4c. every panel query parses and returns data
        for it in [i for i in items if i["kind"] == "panel"]:
            expr = deploylib.substitute(it["expr"])
            if it["panel_type"] == "stat":
                res = p.query(expr)
                series = res.get("data", {}).get("result", [])
            else:
                res = p.query_range(expr, seconds)
                series = [s for s in res.get("data", {}).get("result", []) if s.get("values")]
            if res.get("status") != "success":
                record(False, f"{it['where']} parses", f"{res.get('error')}: {expr}")
            else:
                record(bool(series), f"{it['where']} returns data", "" if series else f"no series: {expr}")

        # 4d. every alert expression parses (it need not return anything: nothing is wrong)
        for it in [i for i in items if i["kind"] == "rule"]:
            res = p.query(it["expr"])
            record(res.get("status") == "success", f"{it['where']} parses and evaluates",
                   "" if res.get("status") == "success" else f"{res.get('error')}")
        time.sleep(3)  # let the rule manager evaluate at least once more
        groups = p.api("rules").get("data", {}).get("groups", [])
        loaded = {r["name"]: r for g in groups for r in g["rules"]}
        for it in [i for i in items if i["kind"] == "rule"]:
            name = it["where"].removeprefix("rule ")
            r = loaded.get(name)
            record(r is not None and r.get("health") == "ok", f"{it['where']} loaded by Prometheus, health ok",
                   json.dumps({k: r.get(k) for k in ("health", "lastError", "state")}) if r else "not loaded")

        # 5. clean stop
        try:
            os.kill(agent_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            rc = memtide_proc.wait(timeout=30)
            record(rc == 0, "memtide exits 0 within 30 s of SIGTERM", f"exit status {rc}")
        except subprocess.TimeoutExpired:
            record(False, "memtide exits 0 within 30 s of SIGTERM", "still running")
        if use_strace and strace_out.exists():
            used = deploylib.strace_summary_calls(str(strace_out))
            blocked = sorted(used - deploylib.unit_syscalls(str(UNIT)))
            record(bool(used) and not blocked,
                   f"the {len(used)} system calls memtide made are all allowed by the unit's SystemCallFilter=",
                   f"not allowed: {', '.join(blocked)}" if blocked else "")
        if any(not ok for ok, _, _ in results):
            print(f"--- memtide log (last lines, {log}):\n{tail(log, 40)}")
    finally:
        stop.set()
        for leftover in agent_pid_holder:
            try:
                # Still our agent (not a reused pid)? Then it must not outlive the test.
                argv = Path(f"/proc/{leftover}/cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"memtide") and argv[1:2] == [b"run"]:
                    os.kill(leftover, signal.SIGKILL)
            except (OSError, IndexError):
                pass
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if os.environ.get("MEMTIDE_E2E_KEEP") == "1":
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    code = None
    try:
        main()
    except SystemExit as e:  # die(): a set-up problem, not a test result
        code = e.code
    except Exception as e:  # noqa: BLE001 (report, then fail)
        import traceback
        traceback.print_exc()
        record(False, "the test itself ran to the end", repr(e))
    passed = sum(1 for ok, _, _ in results if ok)
    failed = len(results) - passed
    if failed:
        print("\nfailed:")
        for ok, what, detail in results:
            if not ok:
                print(f"  {what}{(' -- ' + detail) if detail else ''}")
    if results:
        print(f"prometheus-e2e: {passed} passed, {failed} failed")
    if code not in (None, 0):
        sys.exit(code)
    sys.exit(1 if (not results or failed) else 0)
