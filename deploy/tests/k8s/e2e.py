#!/usr/bin/env python3
"""The DaemonSet's Kubernetes side against a real control plane (issue 47).

Started by deploy/tests/k8s/e2e.sh after control-plane.sh has started etcd and kube-apiserver
(built from the Go module proxy; no kubelet, no container runtime). Steps:
 1. deploy/kubernetes (base and the ServiceMonitor, with a stand-in for prometheus-operator's
    CRD), rendered as kustomize would, is created through the API;
 2. RBAC, by SubjectAccessReview: the agent's service account may do exactly what
    deploy/kubernetes/base/rbac.yaml grants, over a matrix of verbs and resources;
 3. `memtide run` runs outside the cluster with a TokenRequest token of that service account and
    the server's CA, as node `e2e-node`, selecting pods labelled memtide.io/tiering=enabled;
 4. pods are created with spec.nodeName set (nothing runs them: each pod's cgroup is made here
    under kubepods, by the UID the server gave the pod, with a real process moved in):
    a labelled pod on the node is a target within 5 s of its creation; an unlabelled one, or a
    labelled one on another node, never is; a pod label matching [[targets.limits]] bounds the
    pod until it is relabelled; a pod that loses the label, and one deleted, are dropped within
    5 s;
 5. kube-apiserver restarts: the agent keeps its pods through the outage, counts the failure,
    and a pod created after the restart becomes a target;
 6. the agent's requests, counted in the server's audit log: none while idle (one watch stays
    open); the total by verb is printed;
 7. `memtide run` with a token the server rejects, then with a service account RBAC does not
    allow: one clear log line each and memtide_kube_api_denied_total{reason} counting; then
    with a CA file that does not sign the server's certificate: one log line, no request sent.
Ends with "k8s-e2e: N passed, N failed".
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in the work tree
sys.path.insert(0, str(HERE.parent))
import deploylib  # noqa: E402

RUN = ROOT / "target/k8s/run"
NODE = "e2e-node"
SELECTOR = "memtide.io/tiering=enabled"
AGENT_USER = "system:serviceaccount:memtide:memtide"
# The acceptance line: a pod is picked up, or dropped, within this long.
WITHIN = 5.0
# After an API-server restart the agent's next attempt may wait up to 30 s (its back-off cap).
AFTER_RESTART = 40.0

results: list[tuple[bool, str]] = []


def record(ok: bool, what: str, detail: str = "") -> bool:
    results.append((ok, what))
    print(f"{'PASS' if ok else 'FAIL'}: {what}{(' -- ' + detail) if detail else ''}", flush=True)
    return ok


def die(message: str, code: int = 1) -> None:
    print(f"k8s-e2e: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


class Api:
    """The test's own admin client: JSON over HTTPS with the server's CA and a bearer token."""

    def __init__(self, server: str, token: str, ca: Path) -> None:
        self.server = server
        self.token = token
        self.tls = ssl.create_default_context(cafile=str(ca))

    def call(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.server}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type,
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.tls, timeout=20) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"message": text.decode(errors="replace")}

    def must(self, method: str, path: str, body: dict | None = None,
             content_type: str = "application/json") -> dict:
        status, answer = self.call(method, path, body, content_type)
        if status >= 300:
            die(f"{method} {path}: HTTP {status}: {answer.get('message', answer)}")
        return answer


def collection(doc: dict) -> str:
    """The API path that creates `doc` (the plural of its kind, namespaced or not)."""
    version = doc["apiVersion"]
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    plural = doc["kind"].lower() + "s"
    namespace = doc["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


# prometheus-operator's ServiceMonitor CRD, with an open schema: enough for the API server to
# accept deploy/kubernetes' ServiceMonitor (check-deploy.sh checks it against the operator's own
# models; its CRD is not in any registry this test can reach).
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "ServiceMonitor", "plural": "servicemonitors",
                       "singular": "servicemonitor", "listKind": "ServiceMonitorList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def apply_manifests(api: Api) -> None:
    """deploy/kubernetes (base and the ServiceMonitor), rendered as kustomize does, created."""
    api.must("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", SERVICEMONITOR_CRD)
    if wait_for(30, lambda: api.call("GET", "/apis/monitoring.coreos.com/v1")[0] == 200) is None:
        die("the ServiceMonitor CRD was not served within 30 s")
    docs = deploylib.mini_kustomize(ROOT / "deploy/kubernetes")
    for doc in docs:
        api.must("POST", collection(doc), doc)
    kinds = ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    ds = api.must("GET", "/apis/apps/v1/namespaces/memtide/daemonsets/memtide")
    sm = api.must("GET", "/apis/monitoring.coreos.com/v1/namespaces/memtide/servicemonitors/memtide")
    record(ds["metadata"]["name"] == "memtide" and sm["metadata"]["name"] == "memtide",
           "deploy/kubernetes created through the API", kinds)


def rbac_matrix(api: Api) -> None:
    """Every verb on every resource the agent might touch, allowed exactly when rbac.yaml says."""
    granted: set[tuple[str, str, str]] = set()
    for doc in yaml.safe_load_all((ROOT / "deploy/kubernetes/base/rbac.yaml").read_text()):
        if doc and doc["kind"] == "ClusterRole":
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted.update((group, resource, verb) for verb in rule["verbs"])
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
    resources = [("", "pods"), ("", "pods/exec"), ("", "pods/log"), ("", "pods/eviction"),
                 ("", "nodes"), ("", "secrets"), ("", "configmaps"), ("", "services"),
                 ("", "namespaces"), ("", "serviceaccounts/token"), ("", "events"),
                 ("apps", "daemonsets"), ("rbac.authorization.k8s.io", "clusterroles")]
    wrong = []
    for group, full in resources:
        resource, _, sub = full.partition("/")
        for verb in verbs:
            for namespace in ("", "default"):
                review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                          "spec": {"user": AGENT_USER,
                                   "groups": ["system:serviceaccounts", "system:serviceaccounts:memtide",
                                              "system:authenticated"],
                                   "resourceAttributes": {"group": group, "resource": resource,
                                                          "subresource": sub, "verb": verb,
                                                          "namespace": namespace}}}
                answer = api.must("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
                allowed = answer["status"].get("allowed", False)
                if allowed != ((group, full, verb) in granted):
                    wrong.append(f"{verb} {full or resource} in '{namespace}': allowed={allowed}")
    checked = len(resources) * len(verbs) * 2
    record(not wrong, f"RBAC allows exactly rbac.yaml's rules ({checked} SubjectAccessReviews)",
           "; ".join(wrong) or ", ".join(sorted(f"{v} {r}" for _, r, v in granted)))


def token_for(api: Api, account: str) -> str:
    answer = api.must("POST", f"/api/v1/namespaces/memtide/serviceaccounts/{account}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})
    return answer["status"]["token"]


def cgroup_v2_root() -> Path | None:
    for d in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (d / "cgroup.controllers").is_file():
            return d
    return None


class PodProcess:
    """A real process (memtide-workload holding 1 MiB) in the cgroup kubelet's cgroupfs driver
    gives a pod's container."""

    def __init__(self, cgroot: Path, uid: str) -> None:
        self.cgroot = cgroot
        self.dir = cgroot / "kubepods" / "burstable" / f"pod{uid}" / "c0"
        self.dir.mkdir(parents=True)
        self.proc = subprocess.Popen([WORKLOAD, "--pages", "256"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        if "ready" not in ready:
            die(f"memtide-workload did not say ready: {ready!r}")
        (self.dir / "cgroup.procs").write_text(str(self.proc.pid))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for d in (self.dir, self.dir.parent):
            try:
                d.rmdir()
            except OSError:
                pass


class Cluster:
    """Pods on the test server, each with its process."""

    def __init__(self, api: Api, cgroot: Path) -> None:
        self.api = api
        self.cgroot = cgroot
        self.processes: dict[str, PodProcess] = {}

    def create(self, name: str, labels: dict, node: str = NODE) -> tuple[int, float]:
        """Creates the pod and its process; returns the pid and when the pod was created."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "e2e", "labels": labels},
               "spec": {"nodeName": node, "containers": [{"name": "c0", "image": "none"}]}}
        created = time.monotonic()
        uid = self.api.must("POST", "/api/v1/namespaces/e2e/pods", pod)["metadata"]["uid"]
        process = PodProcess(self.cgroot, uid)
        self.processes[name] = process
        return process.proc.pid, created

    def label(self, name: str, labels: dict) -> float:
        patch = {"metadata": {"labels": labels}}
        self.api.must("PATCH", f"/api/v1/namespaces/e2e/pods/{name}", patch,
                      "application/merge-patch+json")
        return time.monotonic()

    def delete(self, name: str) -> float:
        # Without a kubelet to confirm, only a zero grace period deletes a bound pod at once.
        self.api.must("DELETE", f"/api/v1/namespaces/e2e/pods/{name}", {"gracePeriodSeconds": 0})
        return time.monotonic()

    def close(self) -> None:
        for process in self.processes.values():
            process.close()
        for d in (self.cgroot / "kubepods" / "burstable", self.cgroot / "kubepods"):
            try:
                d.rmdir()
            except OSError:
                pass


class Agent:
    """`memtide run` with a pod selector, against the test server."""

    def __init__(self, memtide: str, work: Path, name: str, token: str, limits: bool = False,
                 ca: Path | None = None) -> None:
        self.port = deploylib.free_port()
        self.log_path = work / f"{name}.log"
        (work / f"{name}.token").write_text(token)
        config = work / f"{name}.toml"
        limit = '[[targets.limits]]\npod_label = "tier=bronze"\nfast_bytes = 1048576\n' if limits else ""
        config.write_text(
            f'[targets]\npod_selector = "{SELECTOR}"\n{limit}'
            f'[kubernetes]\napi_server = "{API_SERVER}"\nnode_name = "{NODE}"\n'
            f'token_file = "{work / (name + ".token")}"\n'
            f'ca_file = "{ca or RUN / "pki/serving/apiserver.crt"}"\n')
        self.proc = subprocess.Popen(
            [memtide, "run", "--config", str(config), "--listen", f"127.0.0.1:{self.port}"],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")})

    def get(self, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError):
            return None

    def status(self) -> dict:
        body = self.get("/status")
        return json.loads(body) if body else {}

    def pids(self) -> set[int]:
        return {row["pid"] for row in self.status().get("targets", [])}

    def fast_share(self, pid: int) -> tuple[int | None, str | None]:
        for row in self.status().get("targets", []):
            if row["pid"] == pid:
                return row.get("fast_share_bytes"), row.get("fast_share_reason")
        return None, None

    def metric(self, name: str, labels: str = "") -> float | None:
        """The value of the series `name{labels}` (exactly those labels) in /metrics."""
        series = name + ("{" + labels + "}" if labels else "")
        for line in (self.get("/metrics") or "").splitlines():
            key, _, value = line.rpartition(" ")
            if key == series:
                try:
                    return float(value)
                except ValueError:
                    return None
        return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def wait_for(seconds: float, check, since: float | None = None) -> float | None:
    """Seconds from `since` (or now) until `check()` held, or None after `seconds` from now."""
    start = since if since is not None else time.monotonic()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return time.monotonic() - start
        time.sleep(0.1)
    return None


def audit_requests(user: str) -> list[dict]:
    out = []
    for line in (RUN / "audit.log").read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") == user:
            out.append(event)
    return out


def pod_lifecycle(agent: Agent, cluster: Cluster) -> None:
    ready = wait_for(60, lambda: agent.metric("memtide_opted_in_pods") == 0.0)
    if not record(ready is not None, "the agent listed the node's pods (none yet)",
                  f"{ready:.1f} s after start" if ready is not None else agent.log()[-2000:]):
        return
    a_pid, created = cluster.create("a", {"memtide.io/tiering": "enabled", "tier": "bronze"})
    b_pid, _ = cluster.create("unlabelled", {"tier": "bronze"})
    c_pid, _ = cluster.create("elsewhere", {"memtide.io/tiering": "enabled"}, node="other-node")
    took = wait_for(WITHIN, lambda: a_pid in agent.pids(), since=created)
    record(took is not None, f"a labelled pod on the node is a target within {WITHIN:.0f} s",
           f"{took:.2f} s" if took is not None else f"targets {agent.pids()}")
    bronze = (1 << 20, "limit (pod label tier=bronze)")
    took = wait_for(20, lambda: agent.fast_share(a_pid) == bronze)
    record(took is not None, "the pod's label selects its [[targets.limits]] table",
           str(agent.fast_share(a_pid)))
    relabelled = cluster.label("a", {"tier": "gold"})
    took = wait_for(25, lambda: agent.fast_share(a_pid) == (None, None), since=relabelled)
    record(took is not None, "relabelled, the pod loses that limit",
           f"{took:.1f} s" if took is not None else str(agent.fast_share(a_pid)))
    d_pid, created = cluster.create("d", {"memtide.io/tiering": "enabled"})
    took = wait_for(WITHIN, lambda: d_pid in agent.pids(), since=created)
    record(took is not None, "a second labelled pod is a target", f"{took:.2f} s" if took else "")
    record(not {b_pid, c_pid} & agent.pids(),
           "an unlabelled pod and a labelled pod on another node never became targets",
           f"targets {sorted(agent.pids())}")

    unlabelled = cluster.label("d", {"memtide.io/tiering": None})
    took = wait_for(WITHIN, lambda: d_pid not in agent.pids(), since=unlabelled)
    record(took is not None, f"a pod that loses the label is dropped within {WITHIN:.0f} s",
           f"{took:.2f} s" if took is not None else f"targets {sorted(agent.pids())}")
    deleted = cluster.delete("a")
    took = wait_for(WITHIN, lambda: a_pid not in agent.pids(), since=deleted)
    record(took is not None, f"a deleted pod is dropped within {WITHIN:.0f} s",
           f"{took:.2f} s" if took is not None else f"targets {sorted(agent.pids())}")


def api_server_restart(agent: Agent, cluster: Cluster) -> None:
    e_pid, _ = cluster.create("e", {"memtide.io/tiering": "enabled"})
    if not record(wait_for(WITHIN, lambda: e_pid in agent.pids()) is not None,
                  "before the restart: pod e is a target"):
        return
    errors_before = agent.metric("memtide_pod_list_errors_total") or 0.0
    subprocess.run(["bash", str(HERE / "control-plane.sh"), "restart-apiserver"], check=True)
    record(e_pid in agent.pids(), "through the API server's restart the agent kept its pod",
           f"targets {sorted(agent.pids())}")
    f_pid, created = cluster.create("f", {"memtide.io/tiering": "enabled"})
    took = wait_for(AFTER_RESTART, lambda: f_pid in agent.pids(), since=created)
    record(took is not None, "after the restart a new labelled pod becomes a target (the watch resumed)",
           f"{took:.1f} s after its creation" if took is not None else agent.log()[-3000:])
    errors = (agent.metric("memtide_pod_list_errors_total") or 0.0) - errors_before
    logged = agent.log().count("watching the opted-in pods failed")
    record(errors >= 1 and logged >= 1, "the outage was counted and logged",
           f"{errors:.0f} failures, {logged} log lines")


def steady_state(agent: Agent, seconds: float) -> None:
    """Counts the agent's requests while nothing changes. A watch lasts 290 s (kube-rs' default
    timeoutSeconds), so a window shorter than that must see none; a longer one (set
    MEMTIDE_K8S_IDLE_SECONDS) sees one new watch per 290 s, and the figure per hour is printed."""
    before = len(audit_requests(AGENT_USER))
    time.sleep(seconds)
    events = audit_requests(AGENT_USER)
    idle = events[before:]
    by_verb: dict[str, int] = {}
    for event in events:
        by_verb[event.get("verb", "?")] = by_verb.get(event.get("verb", "?"), 0) + 1
    idle_verbs = sorted({e.get("verb", "?") for e in idle})
    per_hour = len(idle) * 3600 / seconds
    detail = (f"{len(idle)} requests ({', '.join(idle_verbs) or 'none'}) in {seconds:.0f} s idle "
              f"= {per_hour:.1f} per hour; whole run by verb: {by_verb}")
    if seconds < 290:
        record(not idle, f"no request from the agent in {seconds:.0f} s idle (its watch stays open)",
               detail)
    else:
        # One watch per timeout, never a list: at most one more than the window holds timeouts.
        record(idle_verbs in ([], ["watch"]) and len(idle) <= seconds / 290 + 1,
               "idle, the agent only renews its watch (no list)", detail)


def refused(memtide: str, work: Path, name: str, token: str, reason: str, words: str) -> None:
    """An agent the server refuses: the refusal is counted by reason and logged once."""
    agent = Agent(memtide, work, name, token)
    try:
        counted = wait_for(30, lambda: (agent.metric("memtide_kube_api_denied_total",
                                                      f'reason="{reason}"') or 0.0) >= 1.0)
        time.sleep(3)  # a retry or two more: still one log line
        lines = [line for line in agent.log().splitlines() if words in line]
        record(counted is not None and len(lines) == 1,
               f"{reason}: memtide_kube_api_denied_total{{reason=\"{reason}\"}} counts, one log line",
               lines[0][-300:] if lines else agent.log()[-2000:])
    finally:
        code = agent.stop()
        record(code == 0, f"{reason}: the agent stops cleanly", f"exit {code}")


def foreign_ca(memtide: str, work: Path, token: str) -> None:
    """An agent whose CA file does not sign the server's certificate: it sends no request."""
    ca = work / "foreign-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=not-this-cluster", "-keyout", str(work / "foreign-ca.key"),
                    "-out", str(ca)], check=True, capture_output=True)
    requests_before = len(audit_requests(AGENT_USER))
    agent = Agent(memtide, work, "foreign-ca", token, ca=ca)
    try:
        failed = wait_for(30, lambda: (agent.metric("memtide_pod_list_errors_total") or 0.0) >= 1.0)
        time.sleep(3)
        lines = [line for line in agent.log().splitlines() if "watching the opted-in pods failed" in line]
        sent = len(audit_requests(AGENT_USER)) - requests_before
        record(failed is not None and len(lines) == 1 and "certificate" in lines[0].lower() and sent == 0,
               "a CA that does not sign the server: one log line about the certificate, no request sent",
               f"{sent} requests; " + (lines[0][-300:] if lines else agent.log()[-2000:]))
    finally:
        code = agent.stop()
        record(code == 0, "foreign CA: the agent stops cleanly", f"exit {code}")


API_SERVER = ""
WORKLOAD = ""


def main() -> None:
    global API_SERVER, WORKLOAD
    memtide = os.environ.get("MEMTIDE_BIN") or str(ROOT / "target/release/memtide")
    WORKLOAD = os.environ.get("MEMTIDE_WORKLOAD_BIN") or str(ROOT / "target/release/memtide-workload")
    for binary, build in ((memtide, "memtide"), (WORKLOAD, "memtide-workload")):
        if not Path(binary).is_file():
            die(f"no {build} binary at {binary}: cargo build --release --bin {build}", 2)
    if os.geteuid() != 0:
        die("needs root (memtide loads BPF programs; pod cgroups are made under /sys/fs/cgroup)", 2)
    cgroot = cgroup_v2_root()
    if cgroot is None:
        die("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified", 2)
    kubeconfig = yaml.safe_load((RUN / "kubeconfig").read_text())
    API_SERVER = kubeconfig["clusters"][0]["cluster"]["server"]
    api = Api(API_SERVER, (RUN / "pki/admin-token").read_text().strip(),
              RUN / "pki/serving/apiserver.crt")
    version = api.must("GET", "/version")
    print(f"k8s-e2e: kube-apiserver {version.get('gitVersion')} at {API_SERVER}; memtide {memtide}")

    apply_manifests(api)
    rbac_matrix(api)
    api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                             "metadata": {"name": "e2e"}})
    # The ServiceAccount admission plugin wants each pod's account to exist; with no
    # controller-manager running, nothing makes the namespace's `default` one.
    api.must("POST", "/api/v1/namespaces/e2e/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    api.must("POST", "/api/v1/namespaces/memtide/serviceaccounts",
             {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "not-memtide"}})
    work = Path(tempfile.mkdtemp(prefix="memtide-k8s-e2e-"))
    cluster = Cluster(api, cgroot)
    agent = Agent(memtide, work, "agent", token_for(api, "memtide"), limits=True)
    try:
        pod_lifecycle(agent, cluster)
        api_server_restart(agent, cluster)
        steady_state(agent, float(os.environ.get("MEMTIDE_K8S_IDLE_SECONDS", "20")))
    finally:
        code = agent.stop()
        record(code == 0, "the agent stops cleanly on SIGTERM", f"exit {code}")
        cluster.close()
    refused(memtide, work, "bad-token", "not-a-token-of-this-cluster", "unauthorized", "rejected the agent's token")
    refused(memtide, work, "no-rbac", token_for(api, "not-memtide"), "forbidden", "denied watching pods")
    foreign_ca(memtide, work, token_for(api, "memtide"))

    failed = sum(1 for ok, _ in results if not ok)
    print(f"k8s-e2e: {len(results) - failed} passed, {failed} failed (logs in {work})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
