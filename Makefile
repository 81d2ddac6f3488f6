# The two newcomer commands are `make run` and `make test` (see README.md); CI runs
# `.ci/run`, which is `make test` in a fresh virtual environment.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel of torch must be installed before anything that depends on torch, or pip
# resolves the default build with several GB of CUDA packages.
TORCH_SPEC ?= torch==2.13.0
# Where that wheel comes from. Empty: pip's configured indexes (a machine that carries the CPU
# wheel locally). Elsewhere plain PyPI serves the CUDA build, so point pip at PyTorch's CPU
# index: `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=
# `make run` installs what the main job needs (the core and the torch extra; `pulumi up` needs
# no more); `make test` adds the rest (TensorFlow, JAX, the dev tools). One stamp file per set,
# so `make test` upgrades a venv that `make run` made, and `make run` finds a venv that
# `make test` made complete.
RUN_EXTRAS ?= torch
TEST_EXTRAS ?= torch,tensorflow,dev

.PHONY: install install-dev run test lint typecheck unit bench plan-all pin-plans docs docs-serve clean

$(VENV)/.installed-run: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(RUN_EXTRAS)]"
	touch $@

$(VENV)/.installed: $(VENV)/.installed-run
	$(PY) -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	touch $@

## The core and torch: what `make run`, `trainstack plan` and `pulumi up` need.
install: $(VENV)/.installed-run

## Everything the tests, lint, type check and benchmarks need.
install-dev: $(VENV)/.installed

## The main job on the embedded default: a real 2-process distributed run, no cloud.
run: install
	$(VENV)/bin/trainstack local-run --stack local

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-dev
	$(VENV)/bin/mypy

unit: install-dev
	$(VENV)/bin/pytest -q

## The tests: lint, type check, then the whole default pytest run.
test: lint typecheck unit

bench: install-dev
	$(PY) benchmarks/plan_scaling.py
	$(PY) benchmarks/trainer_overhead.py
	$(PY) benchmarks/goodput.py

plan-all: install
	for s in $$($(VENV)/bin/trainstack stacks); do $(VENV)/bin/trainstack plan --stack $$s || exit 1; done

## Regenerate tests/plans/<stack>.json after an intended change to what a stack creates;
## STACKS="mine" pins (or re-pins) only those stacks, e.g. one you added to stacks/.
pin-plans: install-dev
	$(PY) -m tests.unit.test_pinned_plans $(STACKS)

## The documentation site (docs/, mkdocs.yml) into site/; docs-serve serves it while you edit.
docs: install-dev
	$(VENV)/bin/mkdocs build --strict

docs-serve: install-dev
	$(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) site .trainstack .pytest_cache .mypy_cache .ruff_cache
