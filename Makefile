# Everything installs from nothing: `make demo` and `make test` are the two commands.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv browser test lint demo docs bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	$(BIN)/pip install --disable-pip-version-check -q --no-deps 'quantus>=0.6'
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Headless Chromium for the web viewer's browser tests (Debian's package; installed only if missing).
CHROMIUM := /usr/bin/chromium

browser:
	test -x $(CHROMIUM) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

test: lint browser
	$(BIN)/pytest -q

demo: venv
	$(BIN)/repinterp demo

# The documentation site, built offline into site/ (strict: no broken link or reference).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: venv
	$(BIN)/python benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
