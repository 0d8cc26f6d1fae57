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

.PHONY: run test lint format bench-http bench-overhead clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/compaction-proxy serve --config $(CONFIG)

# The suite runs under coverage: the sans-I/O core must stay at 100 % branch coverage.
test: $(VENV)/.installed-dev
	$(BIN)/coverage run --branch --data-file=.coverage -m pytest $(PYTEST_ARGS)
	$(BIN)/coverage report --data-file=.coverage --include='proxy/core/*' --skip-covered \
		--show-missing --fail-under=100

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench-http: $(VENV)/.installed-dev
	$(BIN)/python -m bench.http_client

bench-overhead: $(VENV)/.installed-dev
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
