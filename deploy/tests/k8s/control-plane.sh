#!/usr/bin/env bash
# A real Kubernetes control plane for the tests (issue 47): etcd and kube-apiserver built from
# the Go module proxy (no container images, no kubelet), started on loopback with a generated
# service-account key and a token file for the test's own admin user, and stopped again.
#
#   bash deploy/tests/k8s/control-plane.sh build   # target/k8s/bin/{etcd,kube-apiserver}
#   bash deploy/tests/k8s/control-plane.sh start   # writes target/k8s/run/kubeconfig
#   bash deploy/tests/k8s/control-plane.sh restart-apiserver   # etcd keeps running
#   bash deploy/tests/k8s/control-plane.sh stop
#
# The run directory holds what a client needs: pki/serving/apiserver.crt (the CA to trust),
# pki/admin-token (a system:masters token) and audit.log (one line per request received from
# a service account, which is how the e2e test counts the agent's requests).
#
# kube-apiserver comes from k8s.io/kubernetes, whose go.mod replaces its staging modules with
# ./staging directories the module zip does not ship: apiserver/go.mod requires it and replaces
# each with its published v0.<minor> twin. etcd is etcdmain.Main from go.etcd.io/etcd/server.
# Built binaries are kept in target/k8s/bin, keyed by the wrapper modules' go.sum, so a second
# run on the same machine does not build again (measured idle here, fresh build cache: 244 s
# for kube-apiserver, 58 s for etcd).
set -euo pipefail

cd "$(dirname "$0")/../../.." || exit 1
ROOT=$PWD
HERE=deploy/tests/k8s
OUT=$ROOT/target/k8s
BIN=$OUT/bin
RUN=$OUT/run
ETCD_PORT=${MEMTIDE_K8S_ETCD_PORT:-23790}
API_PORT=${MEMTIDE_K8S_API_PORT:-16443}

# What /version reports (the module zip carries no git metadata for the build to read).
KUBE_VERSION=v1.34.0
LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"

stamp() { cat "$HERE/apiserver/go.sum" "$HERE/etcd/go.sum" <(echo "$LDFLAGS") | sha256sum | cut -c1-16; }

# One build at a time: .ci/run starts one early in the background, and `make k8s-e2e` waits
# for it here, then finds the binaries up to date. The lock's descriptor stays in the subshell,
# so the servers started later do not inherit it.
build() {
    mkdir -p "$BIN"
    (
        flock 9
        build_locked
    ) 9>"$OUT/build.lock"
}

build_locked() {
    if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && [ "$(cat "$BIN/stamp" 2>/dev/null)" = "$(stamp)" ]; then
        echo "control-plane: binaries up to date in $BIN"
        return
    fi
    if ! command -v go >/dev/null; then
        echo "control-plane: needs Go 1.24 or newer to build etcd and kube-apiserver (this kind of machine has it in /usr/local/go)" >&2
        exit 2
    fi
    local start=$SECONDS
    (cd "$HERE/etcd" && go build -o "$BIN/etcd" .)
    echo "control-plane: etcd built in $((SECONDS - start)) s"
    start=$SECONDS
    (cd "$HERE/apiserver" && go build -ldflags "$LDFLAGS" -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
    echo "control-plane: kube-apiserver built in $((SECONDS - start)) s"
    stamp >"$BIN/stamp"
}

start() {
    build
    stop quietly
    rm -rf "$RUN" && mkdir -p "$RUN/pki"
    openssl genrsa -out "$RUN/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub" 2>/dev/null
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RUN/pki/admin-token"
    printf '%s,memtide-test-admin,memtide-test-admin,"system:masters"\n' "$(cat "$RUN/pki/admin-token")" >"$RUN/pki/tokens.csv"
    # Requests of service accounts only (the agent's among them), at their arrival: a watch
    # that lasts minutes is one line.
    cat >"$RUN/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
POLICY
    "$BIN/etcd" --data-dir "$RUN/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" >"$RUN/etcd.log" 2>&1 &
    echo $! >"$RUN/etcd.pid"
    start_apiserver
    cat >"$RUN/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: memtide-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $RUN/pki/serving/apiserver.crt
users:
- name: memtide-test-admin
  user:
    token: $(cat "$RUN/pki/admin-token")
contexts:
- name: memtide-test
  context: {cluster: memtide-test, user: memtide-test-admin}
current-context: memtide-test
KUBECONFIG
}

# Starts kube-apiserver against the running etcd and waits until /readyz answers.
start_apiserver() {
    "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address 127.0.0.1 --secure-port "$API_PORT" --cert-dir "$RUN/pki/serving" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$RUN/pki/sa.pub" \
        --service-account-signing-key-file "$RUN/pki/sa.key" \
        --token-auth-file "$RUN/pki/tokens.csv" --authorization-mode RBAC \
        --audit-policy-file "$RUN/audit-policy.yaml" --audit-log-path "$RUN/audit.log" \
        --service-cluster-ip-range 10.96.0.0/16 >>"$RUN/apiserver.log" 2>&1 &
    echo $! >"$RUN/apiserver.pid"
    local started=$SECONDS
    for _ in $(seq 1 120); do
        if [ -s "$RUN/pki/serving/apiserver.crt" ] &&
            curl -sf --max-time 2 --cacert "$RUN/pki/serving/apiserver.crt" \
                -H "Authorization: Bearer $(cat "$RUN/pki/admin-token")" \
                "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; then
            echo "control-plane: ready at https://127.0.0.1:$API_PORT after $((SECONDS - started)) s (KUBECONFIG=$RUN/kubeconfig)"
            return
        fi
        sleep 0.5
    done
    echo "control-plane: kube-apiserver not ready after 60 s; see $RUN/apiserver.log and $RUN/etcd.log" >&2
    stop quietly
    return 1
}

# Stops the process of a pid file: SIGTERM, then SIGKILL after 30 s, so nothing outlives the
# tests (the API server drains its requests on SIGTERM, which takes seconds).
stop_pidfile() {
    local pidfile=$1 pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

# The API server first, then etcd.
stop() {
    stop_pidfile "$RUN/apiserver.pid"
    stop_pidfile "$RUN/etcd.pid"
    [ "${1:-}" = quietly ] || echo "control-plane: stopped"
}

restart_apiserver() {
    stop_pidfile "$RUN/apiserver.pid"
    echo "control-plane: kube-apiserver stopped"
    start_apiserver
}

# Go as this kind of machine installs it, when it is not on PATH already; the module's own go
# line is enough (no toolchain download).
[ -x /usr/local/go/bin/go ] && PATH=$PATH:/usr/local/go/bin
export GOTOOLCHAIN=local

case "${1:-}" in
build | start | stop) "$1" ;;
restart-apiserver) restart_apiserver ;;
*)
    echo "usage: $0 build|start|restart-apiserver|stop" >&2
    exit 2
    ;;
esac
