# The two commands of README.md: `make demo` and `make test`.
# Both set up everything they need first (scripts/bootstrap.sh is idempotent
# and takes seconds once its caches under ~/.cache/airflow-provider-ct exist).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test lint unit bench clean

setup:
	@scripts/bootstrap.sh

demo: setup
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check airflow_provider_ct tests scripts bench dags_examples
	$(VENV)/bin/ruff format --check airflow_provider_ct tests scripts bench dags_examples
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Fast subset: no JVM, no PostgreSQL server.
unit: setup
	$(PY) -m pytest -m "not spark and not postgres and not e2e" $(PYTEST_ARGS)

bench: setup
	$(PY) bench/view_bench.py
	$(PY) bench/ct_bench.py

clean:
	rm -rf $(VENV) .demo build *.egg-info .mypy_cache .ruff_cache .pytest_cache
