# The README's test command is `make test`: it installs everything from scratch, then runs the suite.
# Python packages come from constraints.txt (the pinned set the suite last passed with), so a new
# upstream release cannot break a fresh clone; `make lock` re-resolves on purpose.
PY ?= python3

.PHONY: test deps system-deps lint typecheck bench lock

test: deps
	$(PY) -m pytest

deps: system-deps
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,dev]"

system-deps:
	bash scripts/install-system-deps.sh

# A fresh resolve with the newest releases, written back to constraints.txt; run the suite after.
lock: system-deps
	rm -rf .lock-venv && $(PY) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e ".[all,dev]"
	{ sed -n '1,2p' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable | grep -v '^tailbudget'; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .lock-venv

lint:
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck:
	$(PY) -m mypy

bench:
	$(PY) bench/plan.py
