# laminardb developer entry points.
#   make demo      live market-data demo in the terminal (core dependencies, pandas and polars)
#   make test      the test suite on both cores, under 20 minutes (installs the dev extras once;
#                  how the tests share the two pytest-xdist workers: tests/conftest.py)
#   make test-long the long tier `make test` leaves out: fault-injection matrices, `ray up`, the
#                  autoscalers, multi-node clusters, dependency floors (tests/conftest.py: _LONG).
#                  CI (.ci/run) runs both.
#   make fuzz      the SQL differential test with many more random expressions (minutes)
#   make lint      ruff over the package and the tests, mypy (both connections against
#                  laminardb.api.ConnectionAPI: [tool.mypy]) and the import contracts (.importlinter)
#   make upgrade   move uv.lock to the newest releases the ranges in pyproject.toml allow, then test
# Installs come from uv.lock (exact versions with hashes), so a fresh machine gets what CI last
# passed with. uv itself is pinned and lives in .tools/; the project's virtualenv is .venv.
# Stamp files inside .venv record what was installed, so repeated runs do not reinstall (they do
# again after pyproject.toml or uv.lock change).

PYTHON     ?= python3
UV_VERSION := 0.13.8
TOOLS      := .tools
UV         := $(TOOLS)/bin/uv
VENV       := .venv
BIN        := $(VENV)/bin
# --locked: refuse to run when uv.lock no longer matches pyproject.toml (run `make upgrade` or `uv lock`)
SYNC       := UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --locked --quiet --python $(PYTHON)

.PHONY: demo test test-long fuzz lint upgrade clean-stamps

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --inexact: the demo's install never removes what `make test` installed
$(VENV)/.stamp-core: pyproject.toml uv.lock | $(UV)
	$(SYNC) --inexact --extra pandas --extra polars
	touch $@

$(VENV)/.stamp-dev: pyproject.toml uv.lock | $(UV)
	$(SYNC) --extra dev
	touch $@ $(VENV)/.stamp-core

demo: $(VENV)/.stamp-core
	$(BIN)/laminardb demo --seconds 15

test: $(VENV)/.stamp-dev
	UV=$(abspath $(UV)) $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m "not long"

test-long: $(VENV)/.stamp-dev
	UV=$(abspath $(UV)) $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 -m long

fuzz: $(VENV)/.stamp-dev
	LAMINARDB_FUZZ_EXAMPLES=5000 LAMINARDB_FUZZ_RANDOM=1 $(BIN)/python -m pytest -q -p no:cacheprovider -o timeout=1800 tests/sql_functions/test_differential.py

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check laminardb tests
	$(BIN)/python -m mypy
	$(BIN)/lint-imports

upgrade: | $(UV)
	$(UV) lock --upgrade --python $(PYTHON)
	$(MAKE) test

clean-stamps:
	rm -f $(VENV)/.stamp-core $(VENV)/.stamp-dev
