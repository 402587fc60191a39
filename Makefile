# The two commands a new user needs: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install train test bench lint clean

install: $(STAMP)

# torch first, from its pinned CPU wheel, so that no later step pulls a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/honing train configs/quickstart.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/trainer_overhead.py

# ruff (lint and format check) and the import contracts of DESIGN.md's layers (pyproject.toml [tool.importlinter])
lint: $(STAMP)
	$(BIN)/python -m compileall -q honing tests benchmarks
	$(BIN)/ruff check honing tests benchmarks
	$(BIN)/ruff format --check honing tests benchmarks
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) runs .pytest_cache
