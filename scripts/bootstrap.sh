#!/usr/bin/env bash
# Installs exactly what memtide's build and tests need and is missing, and says what it does.
# Idempotent: a second run on a prepared machine only checks and prints "ok" lines.
#
#   scripts/bootstrap.sh host   toolchain for the agent and its BPF object (nightly + rust-src,
#                               bpf-linker 0.10.4), cargo-fuzz 0.13.2 for the fuzz targets, and
#                               the Debian tools the host tests use
#   scripts/bootstrap.sh vm     host + what `make vm-test` needs (QEMU, Debian's 6.12 kernel,
#                               virtme-ng, numactl)
#   scripts/bootstrap.sh all    everything (default)
#   scripts/bootstrap.sh deploy only what the deployment checks need (deploy/tests/): Debian's
#                               prometheus (prometheus + promtool), util-linux's setpriv, strace,
#                               and from PyPI yamllint, kubernetes-validate, check-jsonschema,
#                               cloudcoil-models-prometheus-operator; no Rust toolchain
#
# Why these versions: aya 0.14 / aya-ebpf 0.2.1 build the BPF crate with nightly's
# `-Z build-std=core`, which needs rust-src. bpf-linker must use the same LLVM as rustc;
# 0.10.4 is the last release that loads rustc's own libLLVM (see docs/development.md).
set -euo pipefail

what=${1:-all}
case "$what" in host | vm | all | deploy) ;; *)
    echo "usage: $0 [host|vm|all|deploy]" >&2
    exit 2
    ;;
esac

BPF_LINKER_VERSION=0.10.4
CARGO_FUZZ_VERSION=0.13.2
VM_KERNEL_PACKAGE=linux-image-6.12.100+deb12-amd64
VIRTME_NG_VERSION=1.42

say() { printf 'bootstrap: %s\n' "$*"; }
# Another apt or dpkg (unattended upgrades, a second bootstrap) may hold the lock: wait for it
# rather than fail, and finish an install someone else left half-configured.
apt_get() { apt-get -o DPkg::Lock::Timeout=900 "$@"; }
apt_install() {
    if ! DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "$@"; then
        say "apt-get install failed; finishing pending package configuration and retrying once"
        DEBIAN_FRONTEND=noninteractive dpkg --configure -a || true
        DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "$@"
    fi
}
need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        say "need root to install $1 (run: sudo $0 $what)" >&2
        exit 1
    fi
}

# Installs the Debian packages named that are missing, after one `apt-get update` a run.
# $install_note, when set, is said after the packages' names.
apt_updated=0
install_debs() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            say "ok: $pkg"
        else
            missing+=("$pkg")
        fi
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    need_root "${missing[*]}"
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        apt_get update -qq
        apt_updated=1
    fi
    say "installing ${missing[*]}${install_note:+ $install_note}"
    apt_install "${missing[@]}" >/dev/null
}

export PATH="$HOME/.cargo/bin:$PATH"

# --- deploy: the tools deploy/tests/*.sh run; nothing of the Rust toolchain ----------------------
# Versions: whatever Debian bookworm ships (prometheus 2.42) and the PyPI releases below, checked
# November 2026 (cloudcoil 0.80.1.0: the last release for Python < 3.14). kubernetes-validate bundles the Kubernetes schemas (offline); cloudcoil's
# prometheus-operator models are generated from the operator's CRDs and validate the
# ServiceMonitor.
if [ "$what" = deploy ]; then
    DEPLOY_PIP_PACKAGES=(
        "yamllint==1.38.0"
        "kubernetes-validate==1.37.0"
        "check-jsonschema==0.39.0"
        "cloudcoil-models-prometheus-operator==0.80.1.0"
    )
    install_note="(the package's own service is not started: policy-rc.d or no systemd)" \
        install_debs prometheus util-linux strace openssl curl
    # The Kubernetes e2e test builds etcd and kube-apiserver with Go (deploy/tests/k8s).
    if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
        say "ok: go ($(PATH=$PATH:/usr/local/go/bin go version | cut -d' ' -f3))"
    else
        say "go not found: make k8s-e2e needs Go 1.24 or newer to build its control plane" >&2
    fi
    pip_missing=()
    for spec in "${DEPLOY_PIP_PACKAGES[@]}"; do
        name=${spec%%==*}
        version=${spec##*==}
        if [ "$(python3 -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')" = "$version" ]; then
            say "ok: $name $version (PyPI)"
        else
            pip_missing+=("$spec")
        fi
    done
    if [ "${#pip_missing[@]}" -gt 0 ]; then
        say "installing ${pip_missing[*]} from PyPI"
        python3 -m pip install --quiet --disable-pip-version-check "${pip_missing[@]}"
        if command -v pyenv >/dev/null 2>&1; then
            pyenv rehash
        fi
    fi
    if command -v kubectl >/dev/null 2>&1; then
        say "ok: kubectl ($(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: //p' | sed 's/^/kustomize /'))"
    else
        say "kubectl not found: the checks render deploy/kubernetes with their own small kustomize subset"
    fi
    say "deploy set-up done"
    exit 0
fi

# --- Rust: nightly with rust-src, for the BPF target -------------------------------------------
if ! command -v rustup >/dev/null 2>&1; then
    say "rustup not found: install Rust with rustup first (https://rustup.rs)" >&2
    exit 1
fi
if rustup run nightly rustc --version >/dev/null 2>&1; then
    say "ok: nightly toolchain ($(rustup run nightly rustc --version))"
else
    say "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    say "ok: rust-src for nightly"
else
    say "installing rust-src for nightly (needed for -Z build-std=core on bpfel-unknown-none)"
    rustup component add rust-src --toolchain nightly
fi
for component in rustfmt clippy; do
    if rustup component list --installed 2>/dev/null | grep -q "^$component"; then
        say "ok: $component (stable)"
    else
        say "installing $component for the default toolchain"
        rustup component add "$component"
    fi
done

# --- bpf-linker, linked against rustc's own LLVM ------------------------------------------------
if command -v bpf-linker >/dev/null 2>&1 && bpf-linker --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
    say "ok: bpf-linker $BPF_LINKER_VERSION"
else
    say "installing bpf-linker $BPF_LINKER_VERSION (cargo install --locked; a few minutes on 2 cores)"
    cargo install bpf-linker --version "$BPF_LINKER_VERSION" --locked
fi

# --- cargo-fuzz: builds and runs the fuzz targets (fuzz/, scripts/fuzz.sh) with nightly ---------
if cargo fuzz --version 2>/dev/null | grep -q "^cargo-fuzz $CARGO_FUZZ_VERSION\$"; then
    say "ok: cargo-fuzz $CARGO_FUZZ_VERSION"
else
    say "installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install --locked; about 2 minutes on 2 cores)"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# --- Debian packages ----------------------------------------------------------------------------
# bpftool: the tests check that no BPF program is left attached after the agent exits.
# numactl: migratepages and numactl -H for the migration benchmark and the VM checks.
# wrk: scripts/load-test.sh (the /metrics and /status load figures in docs/reliability.md).
# linux-perf: perf, for the sim test that replays a real `perf script` capture of page faults.
install_debs bpftool numactl wrk linux-perf

if [ "$what" = host ]; then
    say "host set-up done"
    exit 0
fi

# --- The two-node VM: QEMU (software emulation), Debian's 6.12 kernel, virtme-ng ----------------
# busybox: virtme-ng builds the guest's initramfs with it.
install_debs qemu-system-x86 busybox-static "$VM_KERNEL_PACKAGE"

if command -v vng >/dev/null 2>&1; then
    say "ok: virtme-ng ($(vng --version 2>/dev/null | head -n 1))"
else
    say "installing virtme-ng $VIRTME_NG_VERSION from PyPI"
    python3 -m pip install --quiet --disable-pip-version-check "virtme-ng==$VIRTME_NG_VERSION"
    if command -v pyenv >/dev/null 2>&1; then
        pyenv rehash
    fi
    if ! command -v vng >/dev/null 2>&1; then
        say "virtme-ng installed but 'vng' is not on PATH ($(python3 -m site --user-base)/bin?)" >&2
        exit 1
    fi
fi
say "vm set-up done"
