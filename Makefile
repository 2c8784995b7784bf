# The README's test command is `make test`: it installs everything from scratch, then runs the suite.
PY ?= python3

.PHONY: test deps system-deps lint typecheck bench

test: deps
	$(PY) -m pytest

deps: system-deps
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[all,dev]"

system-deps:
	bash scripts/install-system-deps.sh

lint:
	$(PY) -m ruff check src tests bench

typecheck:
	$(PY) -m mypy

bench:
	$(PY) bench/plan.py
