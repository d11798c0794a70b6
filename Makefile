# laminardb developer entry points.
#   make demo   live market-data demo in the terminal (core dependencies only)
#   make test   the whole test suite (installs the dev extras once)
#   make lint   ruff over the package and the tests
# The virtualenv is .venv; stamp files inside it record what was installed, so repeated runs
# do not reinstall (they do again after pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: demo test lint clean-stamps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-core: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	$(PIP) -e ".[dev]"
	touch $@ $(VENV)/.stamp-core

demo: $(VENV)/.stamp-core
	$(BIN)/laminardb demo --seconds 15

test: $(VENV)/.stamp-dev
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check laminardb tests

clean-stamps:
	rm -f $(VENV)/.stamp-core $(VENV)/.stamp-dev
