# The two commands a new user needs: `make train` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install train test bench lint docs clean vllm-serve

install: $(STAMP)

# torch and torchvision first, as one pinned pair, so that no later step replaces them: transformers 5's
# image processors need torchvision, and torchvision 0.29.1 is the first that loads beside a torch that
# runs on CPU here (0.28 fails against the CPU-only 2.13 wheel). The 2.14.1 build carries CUDA
# libraries (6.4 GB venv, 220 s install vs 1.9 GB, 175 s for 2.13 CPU-only), which GPU users need anyway.
TORCH_PIN := torch==2.14.1 torchvision==0.29.1

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e '.[dev,vision,docs]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/honing train configs/quickstart.yaml

# Two test processes: much of the suite waits on launched runs (torchrun, kill -9, SIGTERM) and file I/O, which
# then overlaps; tests keep one torch thread each (tests/conftest.py). Files stay whole on one worker (loadfile).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python benchmarks/trainer_overhead.py

# ruff (lint and format check) and the import contracts of docs/architecture.md's layers (pyproject.toml [tool.importlinter])
lint: $(STAMP)
	$(BIN)/python -m compileall -q honing tests benchmarks examples
	$(BIN)/ruff check honing tests benchmarks examples
	$(BIN)/ruff format --check honing tests benchmarks examples
	$(BIN)/lint-imports

# the documentation site (mkdocs.yml, docs/) into site/; strict: a broken link or anchor, or a page missing from
# the nav, fails (the banner about Material's successor is silenced)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# GRPO's rollout server (use_vllm: true; docs/rollout-server.md) on a CUDA machine: vLLM in an environment of its own
# (.venv-vllm: vLLM pins its own torch), serving MODEL (the policy's folder or hub name) on PORT, on the GPUs
# CUDA_VISIBLE_DEVICES shows it; the trainer runs on the others. VLLM_ARGS: serve.py's other flags
# (--gpu-memory-utilization, --tensor-parallel-size, --dtype, --max-model-len, --enforce-eager).
VLLM_VENV := .venv-vllm
PORT ?= 8000

vllm-serve:
	@test -n "$(MODEL)" || { echo "usage: make vllm-serve MODEL=<folder or hub name> [PORT=8000] [VLLM_ARGS=...]"; exit 2; }
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	test -f $(VLLM_VENV)/.installed || { $(VLLM_VENV)/bin/pip install --quiet --upgrade pip && \
		$(VLLM_VENV)/bin/pip install --quiet vllm && touch $(VLLM_VENV)/.installed; }
	$(VLLM_VENV)/bin/python honing/rollout/serve.py --model $(MODEL) --port $(PORT) $(VLLM_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
