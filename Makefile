# bertkit — `make demo` and `make test` are all a new user needs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The fast suite in parallel, one pytest-xdist worker per core (at most 4; each takes its share of the cores as torch
# threads, tests/conftest.py). PARALLEL= runs it in one process.
PARALLEL ?= -n auto --maxprocesses=4

.DEFAULT_GOAL := help
.PHONY: help install test test-slow lint bench demo docs clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@# Keep a torch the user installed (e.g. a CUDA build); otherwise take the CPU wheel first, because a
	@# bare `torch` requirement would pull a multi-GB CUDA build.
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e ".[dev,offline,onnx,sweep,track]"
	@touch $(STAMP)

install: $(STAMP) ## create .venv: CPU torch first (keeps an existing torch), then bertkit[dev,offline,onnx,sweep,track]

test: $(STAMP) ## fast test suite (tiny models, in parallel)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(PARALLEL) $(PYTEST_ARGS)

test-slow: $(STAMP) ## slow tests too (real MiniLM weights, full SST-2 runs)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "slow" $(PYTEST_ARGS)

lint: $(STAMP) ## ruff
	$(VENV)/bin/ruff check bertkit tests benchmarks

bench: $(STAMP) ## benchmarks; results in benchmarks/results/
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run_all.py

demo: $(STAMP) ## the main job end to end on the embedded demo data, offline
	HF_HUB_OFFLINE=1 bash benchmarks/demo.sh

# The docs extra only (mkdocs, mkdocs-material; its pins are read from pyproject.toml), not the whole install:
# the site needs no torch.
docs: ## build the documentation site (mkdocs --strict)
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import mkdocs, material" 2>/dev/null || $(PIP) install -q $$($(PY) -c \
		"import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))")
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean: ## remove build and run outputs (keeps .venv)
	rm -rf runs/demo build site *.egg-info
