#!/usr/bin/env python3
"""Helpers for deploy/tests/check-deploy.sh and prometheus-e2e.sh.

Each subcommand prints what it checked and exits non-zero on the first kind of failure:

  render DIR                   kustomize DIR to stdout (kubectl kustomize, or the small subset of
                               kustomize that deploy/kubernetes uses when kubectl is missing or
                               MEMTIDE_NO_KUBECTL=1)
  split RENDERED OUTDIR        writes core.yaml (built-in kinds) and crds.yaml (the rest)
  k8s-policy RENDERED UNIT CONFIG
                               least-privilege and consistency checks of the rendered manifests
                               against the systemd unit and the default configuration
  servicemonitor FILE          validates ServiceMonitors against prometheus-operator's models
  dashboard FILE               structural checks of the Grafana dashboard
  exprs FILE RULES             every PromQL expression (dashboard targets, variable queries, alert
                               rules) as JSON lines {"kind","where","expr"}
  exprs-as-rules FILE RULES OUT
                               the expressions as a recording-rule file, so `promtool check rules`
                               parses every one offline
  metric-names FILE RULES      metric names the expressions refer to, one a line
  substitute EXPR              an expression with Grafana's variables made concrete (env:
                               MEMTIDE_VARS='{"job": "memtide", ...}', MEMTIDE_RATE_INTERVAL)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml

# The metric names the agent exports (the contract in the daemon issue and docs/metrics.md).
CONTRACT_METRICS = {
    "memtide_fast_tier_hit_ratio",
    "memtide_accesses_sampled_total",
    "memtide_samples_total",
    "memtide_samples_dropped_total",
    "memtide_migrated_bytes_total",
    "memtide_migration_pages_total",
    "memtide_migration_failures_total",
    "memtide_pages_skipped_total",
    "memtide_would_migrate_bytes_total",
    "memtide_epoch_seconds",
    "memtide_granularity_bytes",
    "memtide_hot_bytes",
    "memtide_managed_bytes",
    "memtide_tier_capacity_bytes",
    "memtide_tier_free_bytes",
    "memtide_tier_latency_seconds",
    "memtide_tier_bandwidth_bytes_per_second",
    "memtide_engine_memory_bytes",
    "memtide_bpf_run_seconds_total",
    "memtide_epoch_cpu_seconds_total",
    "memtide_sampling_cpu_seconds_total",
    "memtide_http_cpu_seconds_total",
    "memtide_target_samples_total",
    "memtide_target_samples_per_second",
    "memtide_target_samples_per_second_per_gib",
    "memtide_source_running",
    "memtide_sampling_cpu_budget_ratio",
    "memtide_targets_refused_total",
    "memtide_migration_cpu_seconds_total",
    "memtide_sampling_cpu_ratio",
    "memtide_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
}
# Series Prometheus itself adds to every scrape.
SCRAPE_METRICS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}

BUILTIN_GROUPS = {"", "v1", "apps/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "networking.k8s.io/v1"}

# The panels the operations guide describes (issue 9): a title fragment each must match.
REQUIRED_PANELS = [
    "hit ratio by node",
    "hit ratio by target",
    "promoted / demoted bytes/s by granularity",
    "hot vs managed bytes per tier",
    "tier capacity and free",
    "epoch",
    "granularity",
    "migration failures by reason",
    "samples by source",
    "samples dropped",
    "agent cpu",
    "agent memory",
]


def free_port() -> int:
    """A loopback TCP port nothing listens on now (the end-to-end tests' servers and agents)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


# --- Kubernetes ---------------------------------------------------------------------------------


def render(directory: str) -> str:
    if shutil.which("kubectl") and os.environ.get("MEMTIDE_NO_KUBECTL") != "1":
        out = subprocess.run(["kubectl", "kustomize", directory], check=True, capture_output=True, text=True)
        return out.stdout
    return "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in mini_kustomize(Path(directory)))


def mini_kustomize(directory: Path) -> list[dict]:
    """The part of kustomize deploy/kubernetes uses: resources (files and directories), namespace,
    labels (without selectors), configMapGenerator with files (no hash suffix), images."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for res in kust.get("resources", []):
        path = directory / res
        if path.is_dir():
            docs.extend(mini_kustomize(path))
        else:
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for gen in kust.get("configMapGenerator", []):
        data = {}
        for spec in gen.get("files", []):
            key, _, name = spec.partition("=")
            name = name or key
            data[Path(key).name] = (directory / name).read_text()
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    namespace = kust.get("namespace")
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if namespace and doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            meta["namespace"] = namespace
        for group in kust.get("labels", []):
            meta.setdefault("labels", {}).update(group.get("pairs", {}))
        for image in kust.get("images", []):
            for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                if container.get("image") == image["name"]:
                    container["image"] = f'{image.get("newName", image["name"])}:{image["newTag"]}'
    return docs


def split(rendered: str, outdir: str) -> None:
    docs = [d for d in yaml.safe_load_all(Path(rendered).read_text()) if d]
    core = [d for d in docs if d.get("apiVersion", "") in BUILTIN_GROUPS]
    crds = [d for d in docs if d.get("apiVersion", "") not in BUILTIN_GROUPS]
    Path(outdir, "core.yaml").write_text(yaml.safe_dump_all(core, sort_keys=False))
    Path(outdir, "crds.yaml").write_text(yaml.safe_dump_all(crds, sort_keys=False))
    print(f"{len(core)} built-in resources ({', '.join(d['kind'] for d in core)}), "
          f"{len(crds)} custom ({', '.join(d['kind'] for d in crds) or 'none'})")


def unit_capabilities(unit: str) -> set[str]:
    for line in Path(unit).read_text().splitlines():
        if line.startswith("CapabilityBoundingSet="):
            return {c.removeprefix("CAP_") for c in line.split("=", 1)[1].split()}
    fail(f"{unit}: no CapabilityBoundingSet=")
    return set()


def _syscall_group(group: str, seen: set[str] | None = None) -> set[str]:
    """The system calls of a systemd syscall group (`systemd-analyze syscall-filter @group`)."""
    seen = seen if seen is not None else set()
    seen.add(group)
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True,
                         check=True).stdout
    names: set[str] = set()
    for line in out.splitlines()[1:]:
        word = line.strip().split(" ")[0] if line.strip() else ""
        if not word or word.startswith("#"):
            continue
        if word.startswith("@"):
            if word not in seen:
                names |= _syscall_group(word, seen)
        else:
            names.add(word)
    return names


def unit_syscalls(unit: str) -> set[str]:
    """The system calls the unit's SystemCallFilter= lines allow (allow lists, then ~deny lists)."""
    allow: set[str] = set()
    deny: set[str] = set()
    for line in Path(unit).read_text().splitlines():
        if not line.startswith("SystemCallFilter="):
            continue
        value = line.split("=", 1)[1].strip()
        target = deny if value.startswith("~") else allow
        for item in value.lstrip("~").split():
            target |= _syscall_group(item) if item.startswith("@") else {item}
    if not allow:
        fail(f"{unit}: no SystemCallFilter= allow list")
    return allow - deny


def strace_summary_calls(path: str) -> set[str]:
    """System call names from `strace -c -o FILE` output."""
    calls = set()
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and re.match(r"^[0-9.]+$", parts[0]) and parts[-1] != "total":
            calls.add(parts[-1])
    return calls


def k8s_policy(rendered: str, unit: str, config: str) -> None:
    docs = [d for d in yaml.safe_load_all(Path(rendered).read_text()) if d]
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    problems: list[str] = []

    def need(cond: bool, what: str) -> None:
        print(f"  {'ok ' if cond else 'BAD'} {what}")
        if not cond:
            problems.append(what)

    for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Service"):
        need(len(by_kind.get(kind, [])) == 1, f"exactly one {kind}")
    if problems:
        fail("; ".join(problems))
    ds = by_kind["DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container.get("securityContext", {})
    caps = sc.get("capabilities", {})
    need(pod.get("hostPID") is True, "hostPID: true (targets are host processes)")
    need(not pod.get("hostNetwork"), "no hostNetwork")
    need(sc.get("privileged") is False, "privileged: false")
    need(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
    need(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true")
    need(caps.get("drop") == ["ALL"], "capabilities: drop ALL")
    want = unit_capabilities(unit)
    need(set(caps.get("add", [])) == want,
         f"capabilities added == the systemd unit's bounding set {sorted(want)} (got {sorted(caps.get('add', []))})")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    for path, writable in [("/sys/fs/bpf", False), ("/sys/kernel/tracing", False), ("/sys/kernel/debug", True),
                           ("/sys/kernel/mm/damon", True), ("/sys/fs/cgroup", False), ("/host/proc", False),
                           ("/etc/memtide", False), ("/run/memtide", True)]:
        m = mounts.get(path)
        need(m is not None and bool(m.get("readOnly")) != writable,
             f"mount {path} ({'read-write' if writable else 'read-only'})")
    need(set(mounts) <= {"/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/debug", "/sys/kernel/mm/damon",
                         "/sys/fs/cgroup", "/host/proc", "/etc/memtide", "/run/memtide"}, "no other mounts")
    need(container.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", "liveness probe on /healthz")
    need(container.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz", "readiness probe on /readyz")
    res = container.get("resources", {})
    need(all(k in res.get("requests", {}) for k in ("cpu", "memory")) and "memory" in res.get("limits", {}),
         "resource requests (cpu, memory) and a memory limit")
    need(ds["spec"].get("updateStrategy", {}).get("type") == "RollingUpdate", "rolling update")
    need("memtide.io/tiered-memory" in pod.get("nodeSelector", {}), "node selector for tiered nodes")
    need(bool(pod.get("tolerations")), "tolerations")
    args = container.get("args", [])
    need(args[:1] == ["run"] and "--listen=0.0.0.0:9477" in args and "--config=/etc/memtide/memtide.toml" in args,
         "runs `memtide run --config=/etc/memtide/memtide.toml --listen=0.0.0.0:9477`")
    ports = [p["containerPort"] for p in container.get("ports", [])]
    need(ports == [9477], "container port 9477")
    cm = by_kind["ConfigMap"][0]
    vol = {v["name"]: v for v in pod["volumes"]}["config"]
    need(vol["configMap"]["name"] == cm["metadata"]["name"], "the config volume names the generated ConfigMap")
    if Path(config).exists():
        need(cm["data"].get("memtide.toml") == Path(config).read_text(),
             f"ConfigMap memtide.toml == {config} (else run deploy/tests/sync-k8s-config.sh)")
    else:
        print(f"  --  {config} does not exist: ConfigMap content not compared")
    svc = by_kind["Service"][0]
    need(svc["spec"]["selector"].items() <= pod_labels(ds).items(), "Service selects the DaemonSet's pods")
    rules = by_kind["ClusterRole"][0]["rules"]
    need(all(r.get("resources") == ["pods"] and set(r["verbs"]) <= {"get", "list", "watch"} for r in rules),
         "ClusterRole: read-only pods, nothing else")
    ns = by_kind["Namespace"][0]
    need(all(d["metadata"].get("namespace") == ns["metadata"]["name"] for d in docs
             if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")),
         f"every namespaced resource in namespace {ns['metadata']['name']}")
    if problems:
        fail("; ".join(problems))


def pod_labels(ds: dict) -> dict:
    return ds["spec"]["template"]["metadata"]["labels"]


def servicemonitor(path: str) -> None:
    from cloudcoil.models.prometheus_operator import v1  # noqa: PLC0415 (optional dependency)
    from pydantic import BaseModel, RootModel  # noqa: PLC0415

    def unknown_keys(model: BaseModel, data, where: str) -> list[str]:
        found = []
        if isinstance(model, RootModel):
            return unknown_keys(model.root, data, where)
        if isinstance(model, list):
            for i, (m, d) in enumerate(zip(model, data)):
                found += unknown_keys(m, d, f"{where}[{i}]")
            return found
        if not isinstance(model, BaseModel) or not isinstance(data, dict):
            return found
        fields = type(model).model_fields
        aliases = {(f.alias or name): name for name, f in fields.items()}
        for key, value in data.items():
            if key not in aliases:
                found.append(f"{where}.{key}")
            else:
                found += unknown_keys(getattr(model, aliases[key]), value, f"{where}.{key}")
        return found

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    monitors = [d for d in docs if d.get("kind") == "ServiceMonitor"]
    if not monitors:
        fail(f"{path}: no ServiceMonitor")
    for d in monitors:
        model = v1.ServiceMonitor.model_validate(d)
        extra = [k for k in unknown_keys(model, d, "") if not k.startswith(".metadata.")]
        if extra:
            fail(f"ServiceMonitor {d['metadata']['name']}: fields the CRD does not have: {', '.join(extra)}")
        print(f"  ok  ServiceMonitor {d['metadata']['name']} matches monitoring.coreos.com/v1 (no unknown fields)")


# --- Grafana --------------------------------------------------------------------------------------


def panels_of(dash: dict) -> list[dict]:
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard(path: str) -> None:
    dash = json.loads(Path(path).read_text())
    problems: list[str] = []

    def need(cond: bool, what: str) -> None:
        print(f"  {'ok ' if cond else 'BAD'} {what}")
        if not cond:
            problems.append(what)

    inputs = dash.get("__inputs", [])
    need(any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in inputs),
         "__inputs has DS_PROMETHEUS (importable with any Prometheus data source)")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    need(variables.get("datasource", {}).get("type") == "datasource"
         and variables["datasource"].get("query") == "prometheus", "datasource variable")
    for name in ("instance", "target"):
        v = variables.get(name, {})
        need(v.get("type") == "query" and v.get("includeAll") and v.get("multi"), f"{name} variable (query, multi, All)")
    need(dash.get("id") is None and bool(dash.get("uid")), "id null (importable) and a fixed uid")
    panels = [p for p in panels_of(dash) if p.get("type") != "row"]
    ids = [p["id"] for p in panels_of(dash)]
    need(len(ids) == len(set(ids)), "panel ids unique")
    for p in panels:
        ds = p.get("datasource", {})
        if ds.get("uid") != "${datasource}":
            problems.append(f"panel {p['title']!r} does not use the datasource variable")
        for t in p.get("targets", []):
            if not t.get("expr"):
                problems.append(f"panel {p['title']!r} target {t.get('refId')} has no expr")
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"panel {p['title']!r} target {t.get('refId')} does not use the datasource variable")
        g = p["gridPos"]
        if g["x"] + g["w"] > 24:
            problems.append(f"panel {p['title']!r} wider than the grid")
    need(not any("datasource variable" in x or "no expr" in x or "grid" in x for x in problems),
         f"{len(panels)} panels: all use ${{datasource}}, have expressions and fit the grid")
    titles = [p["title"].lower() for p in panels]
    for want in REQUIRED_PANELS:
        need(any(want in t for t in titles), f"a panel about {want!r}")
    for p in panels:
        for t in p.get("targets", []):
            expr = t.get("expr", "")
            if "$target" not in expr and any(m in expr for m in ("memtide_hot_bytes", "memtide_managed_bytes",
                                                                  "memtide_migrated_bytes_total",
                                                                  "memtide_fast_tier_hit_ratio")):
                problems.append(f"panel {p['title']!r}: a per-target metric without the $target filter")
            if "$instance" not in expr:
                problems.append(f"panel {p['title']!r}: expression without the $instance filter: {expr}")
    need(not any("filter" in x for x in problems), "every expression filters by $instance (and $target where per-target)")
    names = metric_names_of(exprs(path, None))
    unknown = sorted(names - CONTRACT_METRICS - SCRAPE_METRICS)
    need(not unknown, f"every metric is one the agent exports (unknown: {unknown or 'none'})")
    if problems:
        fail("; ".join(problems))


# --- PromQL expressions ---------------------------------------------------------------------------


def exprs(dash_path: str, rules_path: str | None) -> list[dict]:
    out = []
    dash = json.loads(Path(dash_path).read_text())
    for p in panels_of(dash):
        for t in p.get("targets", []):
            out.append({"kind": "panel", "panel": p["title"], "panel_type": p["type"],
                        "where": f"panel {p['title']!r} {t['refId']}", "expr": t["expr"]})
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append({"kind": "variable", "name": v["name"], "where": f"variable {v['name']}", "expr": q})
    if rules_path:
        for g in yaml.safe_load(Path(rules_path).read_text())["groups"]:
            for r in g["rules"]:
                name = r.get("alert") or r.get("record")
                out.append({"kind": "rule", "where": f"rule {name}", "expr": r["expr"]})
    return out


LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$")


def variable_as_promql(expr: str) -> str:
    """label_values(SELECTOR, LABEL) -> a PromQL query with the same series."""
    m = LABEL_VALUES.match(expr.strip())
    if not m:
        return expr
    return f"count by ({m.group(2)}) ({m.group(1)})"


def substitute(expr: str) -> str:
    values = json.loads(os.environ.get("MEMTIDE_VARS", "{}"))
    rate = os.environ.get("MEMTIDE_RATE_INTERVAL", "1m")
    expr = expr.replace("$__rate_interval", rate).replace("${__rate_interval}", rate)
    expr = expr.replace("$__interval", rate).replace("$__range", rate)
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return variable_as_promql(expr)


PROMQL_WORDS = {
    "sum", "by", "rate", "count", "on", "group_left", "group_right", "and", "or", "unless", "without", "avg",
    "max", "min", "clamp_min", "clamp_max", "increase", "label_values", "offset", "bool", "ignoring", "topk",
    "histogram_quantile", "irate", "delta", "deriv", "abs", "vector", "time", "absent", "humanizePercentage",
}


def metric_names_of(items: list[dict]) -> set[str]:
    names = set()
    for it in items:
        expr = re.sub(r'"[^"]*"', '""', it["expr"])  # drop label values
        expr = re.sub(r"\{[^}]*\}", "{}", expr)  # drop matchers
        expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # drop ranges
        expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
        for tok in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
            if tok not in PROMQL_WORDS and not tok.startswith("$") and (tok.startswith("memtide_") or tok in
                                                                         CONTRACT_METRICS | SCRAPE_METRICS):
                names.add(tok)
    return names


def exprs_as_rules(dash_path: str, rules_path: str, out: str) -> None:
    os.environ.setdefault("MEMTIDE_VARS", json.dumps({"job": "memtide", "instance": ".*", "target": ".*"}))
    rules = [{"record": f"memtide_check:expr_{i}", "expr": substitute(it["expr"])}
             for i, it in enumerate(exprs(dash_path, rules_path))]
    Path(out).write_text(yaml.safe_dump({"groups": [{"name": "every-expression", "rules": rules}]}, sort_keys=False))
    print(f"{len(rules)} expressions written to {out}")


def main() -> None:
    cmd, *args = sys.argv[1:] or ["help"]
    if cmd == "render":
        sys.stdout.write(render(args[0]))
    elif cmd == "split":
        split(*args)
    elif cmd == "k8s-policy":
        k8s_policy(*args)
    elif cmd == "servicemonitor":
        servicemonitor(*args)
    elif cmd == "dashboard":
        dashboard(*args)
    elif cmd == "exprs":
        for it in exprs(args[0], args[1] if len(args) > 1 else None):
            print(json.dumps(it))
    elif cmd == "exprs-as-rules":
        exprs_as_rules(*args)
    elif cmd == "metric-names":
        print("\n".join(sorted(metric_names_of(exprs(args[0], args[1] if len(args) > 1 else None)))))
    elif cmd == "unit-syscalls":
        print("\n".join(sorted(unit_syscalls(args[0]))))
    elif cmd == "substitute":
        print(substitute(args[0]))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
