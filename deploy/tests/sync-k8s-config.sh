#!/usr/bin/env bash
# Copies the default configuration into the Kubernetes kustomization, which can only read files
# below its own directory: deploy/config/memtide.toml -> deploy/kubernetes/base/memtide.toml.
# check-deploy.sh fails when the two differ, so run this after every change to the default config.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=deploy/config/memtide.toml
dst=deploy/kubernetes/base/memtide.toml
if [ ! -f "$src" ]; then
    echo "sync-k8s-config: $src does not exist (yet); leaving $dst as it is" >&2
    exit 1
fi
if cmp -s "$src" "$dst"; then
    echo "sync-k8s-config: $dst is up to date"
else
    cp "$src" "$dst"
    echo "sync-k8s-config: copied $src to $dst"
fi
