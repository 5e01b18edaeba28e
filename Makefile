# memtide: the two commands a fresh machine needs are `make run` and `make test`.
# Every target installs what it needs first (scripts/bootstrap.sh is idempotent).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO ?= cargo
RELEASE_BIN := target/release/memtide
# `make test` runs as root here, so privileged tests must run: a skip becomes a failure.
PRIVILEGED := $(shell [ "$$(id -u)" = 0 ] && echo 1 || echo 0)

.PHONY: all bootstrap bootstrap-host bootstrap-vm build run test host-test evaluation-check vm-test lint fmt clippy clippy-ebpf clean

all: build

bootstrap:
	bash scripts/bootstrap.sh all
	bash scripts/bootstrap.sh deploy

bootstrap-host:
	bash scripts/bootstrap.sh host

# The VM suite checks the agent's metrics with promtool (deploy mode installs it).
bootstrap-vm:
	bash scripts/bootstrap.sh vm
	bash scripts/bootstrap.sh deploy

build: bootstrap-host
	$(CARGO) build --release --bin memtide

## The main job: the agent on this machine with its default configuration (stop with Ctrl-C).
## It first prints what `memtide probe` sees, so the log starts with the machine's shape.
run: build
	$(RELEASE_BIN) probe
	$(RELEASE_BIN) run

## The whole test suite: host tests (unit, fixture, privileged BPF, the daemon), the deployment
## files against real tools (systemd-analyze, kubernetes-validate, promtool, a real Prometheus
## scraping a real agent), the agent's pod watch against a real kube-apiserver, docs/evaluation.md
## against the simulator, then the VM suite.
test: bootstrap
	$(MAKE) host-test
	$(MAKE) fuzz-ci
	$(MAKE) deploy-check
	$(MAKE) deploy-e2e
	$(MAKE) k8s-e2e
	$(MAKE) evaluation-check
	$(MAKE) vm-test

host-test: bootstrap-host
	MEMTIDE_REQUIRE_PRIVILEGED=$(PRIVILEGED) $(CARGO) test -- --test-threads=1

## docs/evaluation.md is what the code produces: the suite again (about 8 minutes on 2 cores), compared.
evaluation-check: build
	bash scripts/check-evaluation.sh $(RELEASE_BIN)

vm-test: bootstrap-vm
	bash vm/test.sh

lint: bootstrap-host fmt clippy clippy-ebpf lint-fuzz lint-imports

## No two source files of a crate import each other (scripts/check-import-cycles.py).
lint-imports:
	python3 scripts/check-import-cycles.py .

fmt:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets -- -D warnings

# The BPF crate builds only for the BPF target, with nightly's build-std.
clippy-ebpf:
	CARGO_TARGET_DIR=target/ebpf-lint $(CARGO) +nightly clippy -Z build-std=core \
		--target bpfel-unknown-none -p memtide-ebpf --bins -- -D warnings

clean:
	$(CARGO) clean

# --- Installation (systemd) and deployment checks ------------------------------------------------
# `make install` builds, then puts the binary, the unit and the default configuration in place; an
# existing /etc/memtide/memtide.toml is never overwritten. DESTDIR stages into a directory
# (packaging); INSTALL_BIN installs another binary (install-files skips the build). The installed
# copy has no debug information (`strip --strip-debug`: the release profile's line tables are most
# of the binary's size); its symbols stay, so a panic's backtrace still names functions. The
# build's own binary keeps everything (the benchmarks' profiles need it).
# Then: systemctl enable --now memtide (see docs/operations.md).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
SYSTEMD_UNIT_DIR ?= /etc/systemd/system
DESTDIR ?=
INSTALL_BIN ?= $(RELEASE_BIN)
STRIP ?= strip

.PHONY: install install-files uninstall deploy-check deploy-e2e k8s-e2e

install: build
	$(MAKE) install-files

install-files:
	install -D -m 0755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/memtide
	$(STRIP) --strip-debug $(DESTDIR)$(PREFIX)/bin/memtide
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/memtide
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/memtide/memtide.toml ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/memtide/memtide.toml; new default in memtide.toml.default"; \
		install -m 0644 deploy/config/memtide.toml $(DESTDIR)$(SYSCONFDIR)/memtide/memtide.toml.default; \
	else \
		install -m 0644 deploy/config/memtide.toml $(DESTDIR)$(SYSCONFDIR)/memtide/memtide.toml; \
	fi
	install -d -m 0755 $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	sed -e 's#/usr/local/bin/memtide#$(PREFIX)/bin/memtide#g' \
		-e 's#/etc/memtide/#$(SYSCONFDIR)/memtide/#g' \
		-e 's#/usr/local/share/doc/memtide/#$(PREFIX)/share/doc/memtide/#g' \
		deploy/systemd/memtide.service > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/memtide.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/memtide.service
	install -D -m 0644 docs/operations.md $(DESTDIR)$(PREFIX)/share/doc/memtide/operations.md
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "installed; start with: systemctl enable --now memtide"

# Stops and disables the service first (it detaches its BPF programs and stops its kdamond on
# SIGTERM). The configuration in $(SYSCONFDIR)/memtide is kept; remove it by hand if wanted.
uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then \
		systemctl disable --now memtide.service || true; fi
	rm -f $(DESTDIR)$(SYSTEMD_UNIT_DIR)/memtide.service
	rm -f $(DESTDIR)$(PREFIX)/bin/memtide
	rm -rf $(DESTDIR)$(PREFIX)/share/doc/memtide
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "uninstalled; configuration kept in $(DESTDIR)$(SYSCONFDIR)/memtide"

## Static checks of deploy/: systemd-analyze, kubernetes-validate, yamllint, promtool, dashboard.
deploy-check:
	bash deploy/tests/check-deploy.sh

## A real Prometheus scraping a real `memtide run`; every dashboard and rule query evaluated.
deploy-e2e: build
	$(CARGO) build --release --bin memtide-workload
	MEMTIDE_BIN=$(RELEASE_BIN) MEMTIDE_WORKLOAD_BIN=target/release/memtide-workload \
		bash deploy/tests/prometheus-e2e.sh

## The DaemonSet's Kubernetes side against a real etcd and kube-apiserver (built with Go on first
## use, about 5 minutes, then cached in target/k8s): manifests, RBAC, the agent's pod watch.
k8s-e2e: build
	bash scripts/bootstrap.sh deploy
	$(CARGO) build --release --bin memtide-workload
	MEMTIDE_BIN=$(RELEASE_BIN) MEMTIDE_WORKLOAD_BIN=target/release/memtide-workload \
		bash deploy/tests/k8s/e2e.sh

# --- Fuzzing (cargo fuzz on nightly; fuzz/, docs/reliability.md) -------------------------------
# `make fuzz` runs every target for FUZZ_SECONDS from its committed corpus; `make test` runs the
# bounded `fuzz-ci` (FUZZ_CI_SECONDS per target, as many at once as there are CPUs). Neither
# adds what it discovers to fuzz/corpus; crashes land in fuzz/artifacts/TARGET/.
FUZZ_SECONDS ?= 300
FUZZ_CI_SECONDS ?= 30

.PHONY: fuzz fuzz-ci lint-fuzz lint-imports

fuzz: bootstrap-host
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-ci: bootstrap-host
	bash scripts/fuzz.sh $(FUZZ_CI_SECONDS)

# The fuzz crate is a workspace of its own: format and clippy it separately. It shares the main
# workspace's target directory (and so its clippy's work on the agent and its dependencies).
lint-fuzz:
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --target-dir "$${CARGO_TARGET_DIR:-target}" \
		--all-targets -- -D warnings
