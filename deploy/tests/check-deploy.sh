#!/usr/bin/env bash
# Static checks of everything in deploy/, with the real tools (issue 9):
#   systemd    `make install-files` into a staging root, then systemd-analyze verify and
#              systemd-analyze security (exposure must stay below 4.0, "OK")
#   kubernetes kustomize rendering of deploy/kubernetes and deploy/kubernetes/base,
#              kubernetes-validate --strict against several Kubernetes versions, the
#              ServiceMonitor against prometheus-operator's CRD models, least-privilege checks,
#              and the ConfigMap == deploy/config/memtide.toml
#   yaml       yamllint over every YAML file
#   prometheus promtool check config / check rules / test rules; the Kubernetes scrape job
#   grafana    JSON, a JSON schema, dashboard structure, every expression parsed by promtool
#
# Usage: bash deploy/tests/check-deploy.sh   (installs what it needs: scripts/bootstrap.sh deploy;
# MEMTIDE_SKIP_BOOTSTRAP=1 skips that). Ends with "N passed, N failed".
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
TESTS=deploy/tests
# Kubernetes versions to validate against: the newest kubernetes-validate bundles and two before.
K8S_VERSIONS=${MEMTIDE_K8S_VERSIONS:-"1.35.0 1.36.0 1.37.0"}
# systemd-analyze security: exposure x10 above which the check fails (4.0 = the end of "OK").
SECURITY_THRESHOLD=39

if [ "${MEMTIDE_SKIP_BOOTSTRAP:-0}" != 1 ]; then
    bash scripts/bootstrap.sh deploy || {
        echo "check-deploy: scripts/bootstrap.sh deploy failed" >&2
        exit 1
    }
fi
if command -v pyenv >/dev/null 2>&1; then
    pyenv rehash 2>/dev/null || true
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

passed=0
failed=0
failures=()
# check NAME COMMAND...: runs the command, its output indented, and counts the result.
check() {
    local name=$1
    shift
    echo "=== $name"
    if "$@" >"$WORK/out" 2>&1; then
        sed 's/^/    /' "$WORK/out"
        echo "--- PASS: $name"
        passed=$((passed + 1))
    else
        sed 's/^/    /' "$WORK/out"
        echo "--- FAIL: $name"
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

# --- systemd --------------------------------------------------------------------------------------
# A binary for ExecStart: systemd-analyze verify wants an executable at that path.
bin_for_unit() {
    local b
    for b in "${MEMTIDE_BIN:-}" target/release/memtide target/debug/memtide; do
        if [ -n "$b" ] && [ -x "$b" ]; then
            case "$b" in /*) echo "$b" ;; *) echo "$ROOT/$b" ;; esac
            return
        fi
    done
    type -P true
}
STAGE=$WORK/stage
install_files() {
    make --no-print-directory install-files DESTDIR="$STAGE" INSTALL_BIN="$(bin_for_unit)" &&
        for f in usr/local/bin/memtide etc/memtide/memtide.toml etc/systemd/system/memtide.service \
            usr/local/share/doc/memtide/operations.md; do
            test -e "$STAGE/$f" || {
                echo "missing after install: $f"
                return 1
            }
            echo "installed: /$f"
        done
}
check "systemd: make install-files into a staging root" install_files

systemd_verify() {
    # The unit as installed, with its paths pointing into the staging root.
    sed -e "s#/usr/local/bin/memtide#$STAGE/usr/local/bin/memtide#g" \
        -e "s#/etc/memtide/memtide.toml#$STAGE/etc/memtide/memtide.toml#g" \
        "$STAGE/etc/systemd/system/memtide.service" >"$WORK/memtide.service"
    # verify prints problems but (systemd 252) may still exit 0: any output is a failure.
    systemd-analyze verify "$WORK/memtide.service" >"$WORK/verify.out" 2>&1
    local rc=$?
    cat "$WORK/verify.out"
    [ "$rc" -eq 0 ] && [ ! -s "$WORK/verify.out" ] && echo "systemd-analyze verify: no findings"
}
check "systemd: systemd-analyze verify memtide.service" systemd_verify

systemd_security() {
    systemd-analyze security --offline=true --threshold="$SECURITY_THRESHOLD" "$WORK/memtide.service" \
        >"$WORK/security.out" 2>&1
    local rc=$?
    grep -E '^✗|Overall exposure' "$WORK/security.out"
    grep -o 'Overall exposure level for memtide.service: [0-9.]* [A-Z]*' "$WORK/security.out" \
        >"$WORK/security.score" || true
    return $rc
}
check "systemd: systemd-analyze security (exposure below 4.0)" systemd_security

uninstall_files() {
    # On a copy of the staging root, so the checks below still see the installed unit.
    cp -a "$STAGE" "$WORK/stage2" &&
        make --no-print-directory uninstall DESTDIR="$WORK/stage2" &&
        test ! -e "$WORK/stage2/usr/local/bin/memtide" &&
        test ! -e "$WORK/stage2/etc/systemd/system/memtide.service" &&
        test -e "$WORK/stage2/etc/memtide/memtide.toml" &&
        echo "binary and unit removed, configuration kept"
}
check "systemd: make uninstall removes binary and unit, keeps the configuration" uninstall_files

# --- Kubernetes -------------------------------------------------------------------------------------
render() {
    python3 $TESTS/deploylib.py render deploy/kubernetes >"$WORK/k8s.yaml" &&
        python3 $TESTS/deploylib.py render deploy/kubernetes/base >"$WORK/k8s-base.yaml" &&
        python3 $TESTS/deploylib.py split "$WORK/k8s.yaml" "$WORK" &&
        if command -v kubectl >/dev/null && [ "${MEMTIDE_NO_KUBECTL:-0}" != 1 ]; then
            echo "rendered with: $(kubectl version --client | tr '\n' ' ')"
        else
            echo "rendered with: the kustomize subset in deploy/tests/deploylib.py (no kubectl)"
        fi
}
check "kubernetes: kustomize renders deploy/kubernetes and deploy/kubernetes/base" render

validate() {
    local v rc=0
    echo "kubernetes-validate $(kubernetes-validate --version)"
    for v in $K8S_VERSIONS; do
        kubernetes-validate --strict -k "$v" "$WORK/core.yaml" || rc=1
    done
    return $rc
}
check "kubernetes: kubernetes-validate --strict ($K8S_VERSIONS)" validate
check "kubernetes: ServiceMonitor against prometheus-operator's monitoring.coreos.com/v1 models" \
    python3 $TESTS/deploylib.py servicemonitor "$WORK/k8s.yaml"
base_has_no_servicemonitor() {
    ! grep -q '^kind: ServiceMonitor' "$WORK/k8s-base.yaml" && echo "deploy/kubernetes/base: no ServiceMonitor"
}
check "kubernetes: base works without prometheus-operator CRDs" base_has_no_servicemonitor
check "kubernetes: least privilege, probes, mounts, same capabilities as the unit, config in sync" \
    python3 $TESTS/deploylib.py k8s-policy "$WORK/k8s.yaml" deploy/systemd/memtide.service deploy/config/memtide.toml

# --- YAML ---------------------------------------------------------------------------------------------
lint() {
    local files=()
    mapfile -t files < <(find deploy -name '*.yml' -o -name '*.yaml' | sort)
    yamllint --version && yamllint -c $TESTS/yamllint.yml -s "${files[@]}" && echo "${#files[@]} files clean"
}
check "yaml: yamllint deploy/" lint

# --- Prometheus -------------------------------------------------------------------------------------
check "prometheus: promtool check config deploy/prometheus/prometheus.yml" \
    promtool check config deploy/prometheus/prometheus.yml
check "prometheus: promtool check rules" promtool check rules deploy/prometheus/rules/memtide.rules.yml
rules_test() { (cd deploy/prometheus/rules && promtool test rules memtide.rules.test.yml); }
check "prometheus: promtool test rules" rules_test
kubernetes_job() {
    # Debian's Prometheus has no Kubernetes service discovery: check the job with the same
    # relabelling and a static target instead.
    python3 - "$WORK/k8s-job.yml" <<'EOF'
import sys, yaml
cfg = yaml.safe_load(open("deploy/prometheus/scrape-kubernetes.yml"))
for job in cfg["scrape_configs"]:
    assert job.pop("kubernetes_sd_configs"), "the job has no kubernetes_sd_configs"
    job["static_configs"] = [{"targets": ["127.0.0.1:9477"]}]
yaml.safe_dump(cfg, open(sys.argv[1], "w"))
EOF
    promtool check config "$WORK/k8s-job.yml"
}
check "prometheus: the Kubernetes scrape job (static stand-in for kubernetes_sd)" kubernetes_job

# --- Grafana ------------------------------------------------------------------------------------------
check "grafana: memtide.json is JSON and matches deploy/tests/dashboard.schema.json" \
    check-jsonschema --schemafile $TESTS/dashboard.schema.json deploy/grafana/memtide.json
check "grafana: datasource input and variables, required panels, only exported metrics" \
    python3 $TESTS/deploylib.py dashboard deploy/grafana/memtide.json
every_expr_parses() {
    python3 $TESTS/deploylib.py exprs-as-rules deploy/grafana/memtide.json \
        deploy/prometheus/rules/memtide.rules.yml "$WORK/exprs.rules.yml" &&
        promtool check rules "$WORK/exprs.rules.yml"
}
check "grafana+rules: promtool parses every dashboard and alert expression" every_expr_parses

echo
if [ -s "$WORK/security.score" ]; then
    echo "systemd-analyze security: $(cat "$WORK/security.score")"
fi
for f in "${failures[@]}"; do
    echo "FAILED: $f"
done
echo "deploy: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
