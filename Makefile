# Sluice developer commands. `make dev` installs Sluice alone and starts it; `make test` sets up everything the
# suite needs (test tools, pyspark, a JDK and Maven, etcd, FUSE, Go) and runs it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
FULL := $(VENV)/.installed-test

.PHONY: setup dev test test-pythons lint fuzz fuzz-ci bench-store bench-reference clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The compiled codecs (src/sluice/_speedups.c) are built by the editable install: a change reinstalls.
BUILD_INPUTS := pyproject.toml setup.py src/sluice/_speedups.c

$(BASE): $(BUILD_INPUTS) | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(FULL): $(BUILD_INPUTS) scripts/ensure_fuse.sh scripts/ensure_go.sh scripts/ensure_chromium.sh | $(BIN)/python
	bash scripts/ensure_java.sh
	bash scripts/ensure_etcd.sh
	bash scripts/ensure_fuse.sh
	bash scripts/ensure_go.sh
	bash scripts/ensure_chromium.sh
	$(BIN)/python -m pip install -q --upgrade pip
	# (--no-compile: pyspark's thousands of modules are not byte-compiled at install, ~13 s; the few imported are
	# compiled at their first import)
	$(BIN)/python -m pip install -q --no-compile -e '.[test,spark]'
	touch $@ $(BASE)

setup: $(FULL)

dev: $(BASE)
	$(BIN)/sluice dev

test: $(FULL)
	$(BIN)/ruff check src tests examples bench fuzz
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n 3 --dist loadgroup --durations=30
	# The unit tests that run a pure-Python codec again with the compiled ones off (the fallback where no C compiler
	# built sluice._speedups): the list is scripts/pure_python_tests.py's, which traces tests/unit for them.
	SLUICE_NO_EXTENSIONS=1 $(BIN)/python -m pytest -q -n 2 @tests/unit/pure_python_fallback.txt

# The unit and integration tests on each Python Sluice supports, in a virtualenv each (.venv-3.12, ...: the compiled
# codecs are built per interpreter). PYTHONS and PYTHON_TESTS narrow it; CI runs the unit tests on 3.12 and 3.13.
PYTHONS ?= 3.11 3.12 3.13
PYTHON_TESTS ?= tests/unit tests/integration

test-pythons:
	PYTHON_TESTS="$(PYTHON_TESTS)" bash scripts/test_pythons.sh $(PYTHONS)

lint: $(FULL)
	$(BIN)/ruff check src tests examples bench fuzz
	$(BIN)/python -m mypy

# Coverage-guided fuzzing of every decoder of network or disk bytes (fuzz/run.py): 1,000,000 inputs per target.
fuzz: $(FULL)
	$(BIN)/python fuzz/run.py --runs 1000000

# The bounded run CI makes after the suite: 3 s per target (plus the replay of its corpus), two targets at a time;
# a finding fails it.
fuzz-ci: $(FULL)
	$(BIN)/python fuzz/run.py --seconds 3 --jobs 2

bench-store: $(BASE)
	$(BIN)/sluice bench store

bench-reference: $(FULL)
	$(BIN)/python bench/reference.py

clean:
	rm -rf $(VENV) .venv-* .pytest_cache .mypy_cache build src/*.egg-info
