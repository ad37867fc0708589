# The two commands of the README: `make demo` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Build output lives outside the clone so CI and fresh clones rebuild incrementally.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/sluice-target
# `dev-release` rebuilds in seconds after an edit; `release` (what the wheel gets, fat LTO and one
# codegen unit) is what benchmarks and `make wheel` build. See Cargo.toml.
MATURIN_PROFILE ?= dev-release

.PHONY: venv venv-demo build build-demo demo test test-rust test-python browser lint bench bench-setup performance wheel clean

# Two steps of dependencies: what `make demo` needs (the package's own dependencies, numpy and
# cloudpickle, and maturin to build it: ~100 MB, well under a minute), then what the tests
# import (torch, jax, ray, moto, PyAV, ...: several GB), added by `make test` only.
DEMO_DEPS := "maturin>=1.5,<2" "numpy>=1.24" "cloudpickle>=2"

venv-demo: $(VENV)/.demo-stamp
venv: $(VENV)/.deps-stamp

$(VENV)/.demo-stamp: pyproject.toml
	@echo "sluice: creating $(VENV) with what the demo needs (numpy, cloudpickle, maturin)"
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(DEMO_DEPS)
	touch $@

$(VENV)/.deps-stamp: $(VENV)/.demo-stamp Makefile
	@echo "sluice: installing the test dependencies into $(VENV) (torch, jax, ray, moto, PyAV, ...; several minutes and GBs the first time)"
	$(PY) -m pip install -q "pytest>=7" "pytest-timeout>=2" "pillow>=10" "psutil>=5" "tokenizers>=0.20" "hypothesis>=6" "tqdm>=4" "jax[cpu]>=0.4.30" "ray==2.60.0"
	$(PY) -m pip install -q "torch>=2.1" "torchvision>=0.16" "torchdata>=0.10"  # the PyTorch adapters are tested against real torch (the PyPI build; it runs on the CPU)
	$(PY) -m pip install -q "pyarrow>=14" "pandas>=2" "moto[server]>=5"  # Arrow interop and object-store (loopback S3) tests
	$(PY) -m pip install -q "av>=12"  # FFmpeg (PyAV's wheel bundles it): the reference decoder AAC/M4A is checked against
	$(PY) -m pip install -q "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26"  # the docs site, built strictly by the tests
	touch $@

# The first build compiles every Rust dependency; say so before the long silence.
define BUILD_EXTENSION
	@if [ -e "$(CARGO_TARGET_DIR)/$(MATURIN_PROFILE)/lib_native.so" ]; then \
	  echo "sluice: building the Rust extension ($(MATURIN_PROFILE), incremental: seconds to a minute)"; \
	else \
	  echo "sluice: building the Rust extension for the first time ($(MATURIN_PROFILE) profile, every dependency): about 10 minutes on 2 cores, under a minute after that"; \
	fi
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop -q --profile $(MATURIN_PROFILE)
endef

build: venv
	$(BUILD_EXTENSION)

build-demo: venv-demo
	$(BUILD_EXTENSION)

# The wheel users get (abi3, release profile, `sluice` console script inside) in dist/, tagged
# manylinux_2_28 (glibc >= 2.28: RHEL 8, Debian 10, Ubuntu 18.10 and later) whatever this
# machine's glibc: zig (maturin[zig], installed on first use and found as the venv's
# `python -m ziglang`) links against glibc 2.28's symbols. maturin audits the result with
# auditwheel's rules. `make wheel WHEEL_FLAGS=` builds with the
# system linker instead, tagged with the oldest manylinux this machine's glibc allows
# (manylinux_2_34 on Debian 12).
WHEEL_FLAGS ?= --zig --compatibility manylinux_2_28
MATURIN_ZIG := "maturin[zig]>=1.5,<2"
wheel: venv
	$(if $(findstring --zig,$(WHEEL_FLAGS)),$(PY) -m pip install -q $(MATURIN_ZIG))
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/maturin build --release --auditwheel check $(WHEEL_FLAGS) --out dist

demo: build-demo
	$(PY) examples/demo.py

test: test-rust test-python

test-rust:
	cargo test --workspace --exclude sluice-py -q
	cargo test -q --manifest-path vendor/symphonia-bundle-mp3/Cargo.toml  # the patched MP3 decoder against upstream's code (vendor/README.md)

# The report's browser test opens pages in headless Chromium: Debian's package, installed when
# missing and we may (root with apt); otherwise that test skips and says why.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	      || echo "warning: could not install chromium; the report's browser test will skip"; \
	  else echo "note: no chromium (apt-get install chromium); the report's browser test will skip"; fi; }

test-python: build browser
	$(PY) -m pytest -q tests/python --doctest-modules python/sluice --ignore=tests/python/fixtures

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

bench-setup:
	bash benchmarks/setup.sh

bench: bench-setup
	MATURIN_PROFILE=release $(MAKE) build
	.venv-bench/bin/python benchmarks/run.py

# docs/PERFORMANCE.md and README's headline from one run of every peer and limit, with the
# release build users install (~10 min to set up the first time, then ~15 min on 2 cores).
performance:
	bash benchmarks/setup.sh --data
	MATURIN_PROFILE=release $(MAKE) build
	.venv-bench/bin/python benchmarks/performance.py

clean:
	rm -rf $(VENV)
