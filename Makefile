# voltstream: `make demo` runs the main job on built-in defaults, `make test` runs
# every check CI runs. Both set up what they need (scripts/bootstrap.sh).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
VENV := .venv
PY := $(VENV)/bin/python
DEPS := $(VENV)/.deps-stamp
EXT := $(VENV)/.ext-stamp
RUST_SRC := $(shell find crates -name '*.rs' -o -name Cargo.toml) Cargo.toml pyproject.toml

.PHONY: setup demo test lint rust-test py-test kernels stubs gpu-test gpu-bench fuzz bench clean \
	dpdk-test

setup: $(EXT)

$(DEPS): requirements-dev.txt requirements-nodeps.txt scripts/bootstrap.sh
	./scripts/bootstrap.sh
	touch $@

$(EXT): $(DEPS) $(RUST_SRC)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q
	touch $@

demo: setup
	$(VENV)/bin/voltstream demo

lint: $(DEPS)
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -q -- -D warnings
	$(VENV)/bin/ruff check python tests bench scripts
	$(VENV)/bin/ruff format --check python tests bench scripts
	$(VENV)/bin/mypy

rust-test: $(DEPS)
	cargo test --workspace -q

stubs: setup
	$(PY) scripts/check_stub.py

kernels: $(DEPS)
	$(PY) scripts/check_kernels.py

# Two workers (pytest-xdist): the suite mostly waits on loopback streams and child
# processes; serial it took 21 minutes of CI's 2 cores, with two workers 10. A file's
# tests stay on one worker, in order (--dist loadfile): some build on the ones before
# them (the README tour's lines share one folder).
py-test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not gpu and not dpdk and not serial"
	$(PY) -m pytest -q -m "serial and not gpu and not dpdk"

# The fuzz step runs each cargo-fuzz target for 15 s (docs/architecture.md, Fuzzing).
test: setup lint rust-test stubs kernels py-test dpdk-test
	./scripts/fuzz.sh 15

# The DPDK engine (cargo feature dpdk, off by default; needs dpdk-dev, and root for the
# veth tests): its Rust tests with the feature, then the extension rebuilt with it and
# the Python tests marked dpdk (which py-test leaves out).
dpdk-test: $(DEPS)
	cargo test -p voltstream-core --features dpdk -q dpdk
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release -q -F dpdk
	$(PY) -m pytest -q tests/test_dpdk.py

# Longer local runs: make fuzz SECS=600 (seconds per target).
fuzz: $(DEPS)
	./scripts/fuzz.sh $(SECS)

# Run on the GPU machine (see docs/gpu.md): installs the carried wheels, runs -m gpu.
gpu-test:
	./scripts/gpu.sh test

gpu-bench:
	./scripts/gpu.sh bench

clean:
	cargo clean
	rm -rf $(VENV) demo-output
