#!/usr/bin/env bash
# A real Kubernetes control plane for the tests (issue 47): etcd and kube-apiserver built from
# the Go module proxy (no container images, no kubelet), started on loopback with a generated
# service-account key and a token file for the test's own admin user, and stopped again.
#
#   bash deploy/tests/k8s/control-plane.sh build   # target/k8s/bin/{etcd,kube-apiserver}
#   bash deploy/tests/k8s/control-plane.sh start   # writes target/k8s/run/kubeconfig
#   bash deploy/tests/k8s/control-plane.sh stop
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

stamp() { cat "$HERE/apiserver/go.sum" "$HERE/etcd/go.sum" | sha256sum | cut -c1-16; }

build() {
    mkdir -p "$BIN"
    if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && [ "$(cat "$BIN/stamp" 2>/dev/null)" = "$(stamp)" ]; then
        echo "control-plane: binaries up to date in $BIN"
        return
    fi
    local start=$SECONDS
    (cd "$HERE/etcd" && go build -o "$BIN/etcd" .)
    echo "control-plane: etcd built in $((SECONDS - start)) s"
    start=$SECONDS
    (cd "$HERE/apiserver" && go build -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
    echo "control-plane: kube-apiserver built in $((SECONDS - start)) s"
    stamp >"$BIN/stamp"
}

start() {
    build
    stop quietly
    rm -rf "$RUN" && mkdir -p "$RUN/pki"
    openssl genrsa -out "$RUN/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub" 2>/dev/null
    local token
    token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s,memtide-test-admin,memtide-test-admin,"system:masters"\n' "$token" >"$RUN/pki/tokens.csv"
    "$BIN/etcd" --data-dir "$RUN/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" >"$RUN/etcd.log" 2>&1 &
    echo $! >"$RUN/etcd.pid"
    "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address 127.0.0.1 --secure-port "$API_PORT" --cert-dir "$RUN/pki/serving" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$RUN/pki/sa.pub" \
        --service-account-signing-key-file "$RUN/pki/sa.key" \
        --token-auth-file "$RUN/pki/tokens.csv" --authorization-mode RBAC \
        --service-cluster-ip-range 10.96.0.0/16 >"$RUN/apiserver.log" 2>&1 &
    echo $! >"$RUN/apiserver.pid"
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
    token: $token
contexts:
- name: memtide-test
  context: {cluster: memtide-test, user: memtide-test-admin}
current-context: memtide-test
KUBECONFIG
    for _ in $(seq 1 60); do
        if KUBECONFIG=$RUN/kubeconfig kubectl get --raw /readyz >/dev/null 2>&1; then
            echo "control-plane: ready at https://127.0.0.1:$API_PORT (KUBECONFIG=$RUN/kubeconfig)"
            return
        fi
        sleep 1
    done
    echo "control-plane: kube-apiserver not ready after 60 s; see $RUN/apiserver.log and $RUN/etcd.log" >&2
    stop quietly
    return 1
}

# The API server first (it drains its requests on SIGTERM, which takes seconds), then etcd;
# anything still there after 30 s is killed, so nothing outlives the tests.
stop() {
    local pidfile pid
    for pidfile in "$RUN/apiserver.pid" "$RUN/etcd.pid"; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
    [ "${1:-}" = quietly ] || echo "control-plane: stopped"
}

case "${1:-}" in
build | start | stop) "$1" ;;
*)
    echo "usage: $0 build|start|stop" >&2
    exit 2
    ;;
esac
