#!/usr/bin/env bash
# The DaemonSet's Kubernetes side against a real etcd and kube-apiserver (issue 47): starts the
# control plane (control-plane.sh builds it on first use, about 5 minutes on 2 cores), runs
# e2e.py (see its docstring for the steps) and stops the control plane whatever happens.
# Needs root (the agent loads BPF programs; pod cgroups are made under /sys/fs/cgroup), Go
# (to build the control plane), python3 with PyYAML (scripts/bootstrap.sh deploy), and the
# memtide and memtide-workload release binaries (`make k8s-e2e` builds them).
#
#   make k8s-e2e
#   MEMTIDE_K8S_IDLE_SECONDS=660 bash deploy/tests/k8s/e2e.sh   # the steady-state request count
#
# Exit status: 0 all passed, 1 a check failed, 2 something needed is missing.
set -euo pipefail
cd "$(dirname "$0")/../../.."
if [ "$(id -u)" -ne 0 ]; then
    echo "k8s-e2e: needs root (memtide loads BPF programs; pod cgroups are made under /sys/fs/cgroup)" >&2
    exit 2
fi
bash deploy/tests/k8s/control-plane.sh build
# What .ci/run's early background build did (its times), when there was one.
if [ -f target/k8s/prebuild.log ]; then sed 's/^/k8s-e2e: background build: /' target/k8s/prebuild.log; fi
trap 'bash deploy/tests/k8s/control-plane.sh stop' EXIT
bash deploy/tests/k8s/control-plane.sh start
python3 deploy/tests/k8s/e2e.py
