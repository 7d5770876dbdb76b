# Two entry points for a fresh machine: `make demo` (one real episode on the embedded local model)
# and `make test` (the test suite). Both create/refresh the virtual environment by themselves.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_MODEL ?= qwen2.5-coder-0.5b-instruct
PYTEST_ARGS ?=

.PHONY: setup system-deps test test-fast demo lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,train]"
	touch $(STAMP)

# bubblewrap gives the code sandbox its own network/PID namespaces; without it the sandbox reports degraded isolation.
system-deps:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "warning: could not install bubblewrap"; \
	  else echo "warning: bubblewrap (bwrap) missing; install it for full sandbox isolation"; fi; \
	fi

test: setup system-deps
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

demo: setup system-deps
	$(VENV)/bin/flowsteer demo --model $(DEMO_MODEL)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: setup
	$(PY) benchmarks/canvas_overhead.py --quick
	$(PY) benchmarks/memoisation.py --quick
	$(PY) benchmarks/sandbox_throughput.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
