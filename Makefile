# Sluice developer commands. `make test` sets everything up from scratch and runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup dev test lint bench-store clean

$(STAMP): pyproject.toml
	bash scripts/ensure_java.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

setup: $(STAMP)

dev: $(STAMP)
	$(BIN)/sluice dev

test: $(STAMP)
	$(BIN)/ruff check src tests examples
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests examples

bench-store: $(STAMP)
	$(BIN)/sluice bench store

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
