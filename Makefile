# medseg developer commands. `make run` and `make test` are the README's quick start.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test lint bench clean

$(STAMP): pyproject.toml .ci/system-deps
	bash .ci/system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## Set up and start the app on its built-in demo study.
run: $(STAMP)
	$(PY) -m medseg demo

## Set up and run the whole test suite (this is what CI runs).
test: $(STAMP)
	$(VENV)/bin/lint-imports
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info test-artifacts
