# Two commands do everything on a fresh CPU machine (Python 3.10+, no venv, no torch):
#   make quickstart   set up .venv, fetch the embedded model, run the demo job
#   make test         set up .venv and run the test suite
# Every pip install is constrained by constraints.txt (torch==2.13.0, the CPU build).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --disable-pip-version-check -q -c constraints.txt
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-fast test-serving quickstart bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[train,dev]'
	touch $@

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q tests/unit

# Optional: the openai engine against a real llama.cpp server (compiles llama.cpp once, ~7 min).
test-serving: setup
	$(PIP) -e '.[serving]'
	$(BIN)/python -m pytest -q tests/serving

quickstart: setup
	$(BIN)/grm models fetch smollm2-135m-instruct
	$(BIN)/grm run builtin:quickstart

bench: setup
	$(BIN)/python benchmarks/generate_throughput.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
