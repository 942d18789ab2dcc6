# The two commands of README.md: `make demo` and `make test`.
# Both set up what they need first (scripts/bootstrap.sh is idempotent and
# takes seconds once its caches under ~/.cache/airflow-provider-ct exist):
# `make demo` only what the demo runs, `make test` (and every other target)
# everything, test-only packages included.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# e.g. make demo DEMO_ARGS=--keep-running
DEMO_ARGS ?=

.PHONY: setup setup-demo demo walkthrough test lint unit e2e faults bench clean

setup:
	@scripts/bootstrap.sh test

# No PostgreSQL server, Chromium, DuckDB or pytest: the demo runs none of them.
setup-demo:
	@scripts/bootstrap.sh demo

# The example DAGs on a real local Airflow: backfill, ticks, frontiers; stops it after.
demo: setup-demo
	$(PY) scripts/demo.py $(DEMO_ARGS)

# The frontier core alone (no Airflow): compare-and-append on a real Iceberg table.
walkthrough: setup-demo
	$(PY) scripts/core_walkthrough.py

lint: setup
	$(VENV)/bin/ruff check airflow_provider_ct devtools tests scripts bench dags_examples
	$(VENV)/bin/ruff format --check airflow_provider_ct devtools tests scripts bench dags_examples
	$(VENV)/bin/mypy

# Two pytest processes side by side (scripts/run_tests.sh says which and why);
# with PYTEST_ARGS, one process runs them as given.
test: lint
	VENV=$(VENV) scripts/run_tests.sh $(PYTEST_ARGS)

# Fast subset: no JVM, no PostgreSQL server.
unit: setup
	$(PY) -m pytest -m "not spark and not postgres and not e2e" $(PYTEST_ARGS)

# Only the end-to-end suite (real Airflow, Spark cluster, PostgreSQL, Chromium).
e2e: setup
	$(PY) -m pytest -m e2e $(PYTEST_ARGS)

# Only the fault-injection, hostile-input and model-checked tests.
faults: setup
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

bench: setup
	$(PY) bench/view_bench.py
	$(PY) bench/ct_bench.py

clean:
	rm -rf $(VENV) .demo build *.egg-info .mypy_cache .ruff_cache .pytest_cache
