# memtide: the two commands a fresh machine needs are `make run` and `make test`.
# Every target installs what it needs first (scripts/bootstrap.sh is idempotent).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

CARGO ?= cargo
RELEASE_BIN := target/release/memtide
# `make test` runs as root here, so privileged tests must run: a skip becomes a failure.
PRIVILEGED := $(shell [ "$$(id -u)" = 0 ] && echo 1 || echo 0)

.PHONY: all bootstrap bootstrap-host bootstrap-vm build run test host-test vm-test lint fmt clippy clippy-ebpf clean

all: build

bootstrap:
	bash scripts/bootstrap.sh all

bootstrap-host:
	bash scripts/bootstrap.sh host

bootstrap-vm:
	bash scripts/bootstrap.sh vm

build: bootstrap-host
	$(CARGO) build --release --bin memtide

## The main job: the agent on this machine with its default configuration.
## (Until the daemon lands, this describes the machine and the source the agent would use.)
run: build
	$(RELEASE_BIN) probe

## The whole test suite: host tests (unit, fixture, privileged BPF), then the two-node VM suite.
test: bootstrap
	$(MAKE) host-test
	$(MAKE) vm-test

host-test: bootstrap-host
	MEMTIDE_REQUIRE_PRIVILEGED=$(PRIVILEGED) $(CARGO) test -- --test-threads=1

vm-test: bootstrap-vm
	bash vm/test.sh

lint: bootstrap-host fmt clippy clippy-ebpf

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
