# Two commands do everything on a fresh CPU machine (Python 3.10+, no venv, no torch):
#   make quickstart   set up .venv, fetch the two models, run the demo job (a policy that learns, ~10 min)
#   make test         set up .venv and run the test suite
# Every pip install is constrained by constraints.txt (torch==2.13.0, the CPU build).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --disable-pip-version-check -q -c constraints.txt
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup browser lint test test-all test-fast test-serving quickstart bench wheelhouse wheelhouse-check gpu-check clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[train,dev]'
	touch $@

# ruff (lint + format check) and the import-layering contract of docs/architecture.md (pyproject.toml,
# [tool.importlinter]). All three run, so one pass reports every kind of failure.
lint: setup
	@rc=0; \
	echo "ruff check"; $(BIN)/ruff check --output-format concise . || rc=1; \
	echo "ruff format --check"; $(BIN)/ruff format --check --output-format concise . || rc=1; \
	echo "lint-imports"; $(BIN)/lint-imports --no-cache --no-logo || rc=1; \
	exit $$rc

# The `grm view` test renders the page in the system's Chromium (Debian package, no browser
# download at test time). Installed here when missing and possible (root with apt-get); otherwise
# that one test is skipped and says how to install it.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } \
	      || echo "could not install Chromium: the grm view browser test will be skipped"; \
	  else \
	    echo "Chromium is missing: the grm view browser test will be skipped (sudo apt-get install -y --no-install-recommends chromium)"; \
	  fi; }

# --durations: the slowest tests are listed at the end, so the suite's budget (20 min here) is easy to audit.
test: setup browser
	$(BIN)/python -m pytest -q -m "not extended" --durations=20

# Everything, the `extended` tests too: chaos kills, two-node clusters, the SGLang stand-in's async
# run, a judge actor killed mid-run (~10 min more on 2 cores).
test-all: setup browser
	$(BIN)/python -m pytest -q --durations=20

# Everything not marked slow (no model, Ray, DeepSpeed or server): the unit tests, in seconds.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# Optional: the openai engine against a real llama.cpp server (compiles llama.cpp once, ~7 min).
test-serving: setup
	$(PIP) -e '.[serving]'
	$(BIN)/python -m pytest -q tests/serving

quickstart: setup
	$(BIN)/grm models fetch smollm2-135m-instruct
	$(BIN)/grm models fetch qwen2.5-coder-0.5b-instruct
	$(BIN)/grm run builtin:keyword-grm

bench: setup
	$(BIN)/python benchmarks/generate_throughput.py

# For GPU machines with CUDA torch and no network (README "Offline GPU install"): every other wheel
# grm[train] needs, built for WHEEL_PYTHON (the GPU image's CPython 3.12), in bins of <= 60 MiB.
WHEEL_PYTHON ?= python3.12
wheelhouse:
	$(WHEEL_PYTHON) scripts/build_wheelhouse.py --out wheelhouse

# CI: the same build for this machine's Python 3.11, installed with no network into an empty venv (~3 min).
wheelhouse-check: setup
	scripts/check_wheelhouse.sh

# One CUDA GPU, no network (after `bash wheelhouse/install.sh`): scripts/gpu_check.py's checks on a
# random SmolLM2. `make gpu-check --dry-run` (make -n) lists them: the + line runs even then.
gpu-check:
	+python3 scripts/gpu_check.py $(if $(findstring n,$(firstword -$(MAKEFLAGS))),--dry-run) $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache wheelhouse wheelhouse.tmp
