#!/usr/bin/env bash
# A real Prometheus (Debian's package) on loopback scraping a real `memtide run --observe` against
# memtide-workload; every dashboard and alert-rule expression is evaluated through Prometheus' HTTP
# API (see prometheus_e2e.py for the steps). Needs root (BPF sampling), the memtide and
# memtide-workload binaries (MEMTIDE_BIN / MEMTIDE_WORKLOAD_BIN, or target/{release,debug}/),
# and installs Prometheus and the Python tools itself (scripts/bootstrap.sh deploy;
# MEMTIDE_SKIP_BOOTSTRAP=1 skips that).
#
#   make deploy-e2e                      builds both binaries (release) and runs this
#   MEMTIDE_E2E_SECONDS=60 bash deploy/tests/prometheus-e2e.sh
#   MEMTIDE_E2E_FULL_ROOT=1 ...          run memtide with all of root's capabilities instead of
#                                        the unit's set
# Exit status: 0 all passed, 1 a check failed, 2 something needed is missing (for example a
# memtide binary without the `run` subcommand).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${MEMTIDE_SKIP_BOOTSTRAP:-0}" != 1 ]; then
    bash scripts/bootstrap.sh deploy
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "prometheus-e2e: needs root (memtide loads BPF programs)" >&2
    exit 2
fi
exec python3 deploy/tests/prometheus_e2e.py
