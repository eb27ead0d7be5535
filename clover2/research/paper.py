"""The Clover-2 paper's published numbers (arXiv 2408.00264, repo figures `result.png` and
`hit_radio.png`), for side-by-side tables. Targets Vicuna-7B v1.5 and LLaMA3-8B-Instruct on GPUs
(model not stated), Spec-Bench's six tasks, up to 1024 new tokens. Medusa, Clover-1 and plain
decoding rows are not published."""

from __future__ import annotations

import pandas as pd

TASKS = ("mt_bench", "translation", "summarization", "qa", "gsm8k", "rag")  # MT-bench, WMT14, CNN/DM, NQ, GSM8K, DPR

# tokens/s and speedup over plain decoding, per (temperature, target, method), in TASKS order
_THROUGHPUT = {
    (0, "vicuna-7b", "clover2"): [(145.6, 3.00), (111.0, 2.43), (121.9, 2.55),
                                  (115.0, 2.40), (149.2, 3.09), (107.6, 2.44)],
    (0, "vicuna-7b", "eagle1"): [(142.6, 2.94), (106.8, 2.34), (120.6, 2.52),
                                 (107.4, 2.24), (141.9, 2.94), (102.8, 2.34)],
    (0, "llama3-8b", "clover2"): [(121.0, 2.47), (108.6, 2.24), (99.5, 2.09),
                                  (103.2, 2.08), (132.0, 2.65), (97.4, 2.14)],
    (0, "llama3-8b", "eagle1"): [(113.6, 2.32), (106.7, 2.20), (96.0, 2.02),
                                 (100.1, 2.02), (123.4, 2.47), (96.5, 2.12)],
    (1, "vicuna-7b", "clover2"): [(112.9, 2.25), (90.0, 1.95), (98.0, 2.03),
                                  (93.2, 1.91), (116.9, 2.39), (87.8, 1.98)],
    (1, "vicuna-7b", "eagle1"): [(109.9, 2.19), (82.3, 1.79), (95.1, 1.97),
                                 (91.4, 1.87), (113.6, 2.32), (87.7, 1.98)],
    (1, "llama3-8b", "clover2"): [(98.5, 2.16), (87.6, 1.93), (81.3, 1.80),
                                  (81.6, 1.77), (105.5, 2.28), (81.6, 1.90)],
    (1, "llama3-8b", "eagle1"): [(91.3, 2.00), (84.7, 1.87), (78.1, 1.73),
                                 (78.0, 1.69), (97.9, 2.11), (78.9, 1.84)],
}

# extra tokens per step (tau - 1 in clover2's convention), temperature 0
_EXTRA_TOKENS = {
    ("vicuna-7b", "clover2"): [2.95, 2.51, 2.57, 2.16, 3.16, 2.70],
    ("vicuna-7b", "eagle1"): [2.85, 2.33, 2.57, 2.15, 3.09, 2.61],
    ("llama3-8b", "clover2"): [2.57, 2.25, 2.19, 2.07, 2.89, 2.47],
    ("llama3-8b", "eagle1"): [2.42, 2.22, 2.13, 2.02, 2.69, 2.44],
}


def throughput() -> pd.DataFrame:
    """One row per temperature x target x method x task: tokens/s and speedup."""
    return pd.DataFrame([{"temperature": t, "target": m, "method": a, "task": task, "tokens_per_s": tps, "speedup": s}
                         for (t, m, a), vals in _THROUGHPUT.items() for task, (tps, s) in zip(TASKS, vals)])


def tau() -> pd.DataFrame:
    """One row per target x method x task: tau (bonus token included) and the paper's tau - 1."""
    return pd.DataFrame([{"target": m, "method": a, "task": task, "tau_minus_1": x, "tau": x + 1}
                         for (m, a), vals in _EXTRA_TOKENS.items() for task, x in zip(TASKS, vals)])


def tau_beside(bench: pd.DataFrame, label: str) -> pd.DataFrame:
    """The paper's tau per target, method and task, and this run's Clover-2 and EAGLE-1 at the
    paper's 25-node tree (T = 0) as source `label` (`bench`: a bench.csv table). Columns source,
    method, task, tau: the input of `clover2_over_eagle1`."""
    ours = bench[(bench.temperature == 0) & bench.method.isin(["clover2@eagle25", "eagle1@eagle25"])
                 & (bench.task != "overall")]
    ours = ours.assign(source=label, method=ours.method.str.split("@").str[0])
    theirs = tau().assign(source=lambda d: d.target + " (paper)")
    return pd.concat([theirs, ours], ignore_index=True)[["source", "method", "task", "tau"]]


# The paper's training budget in answer tokens (the positions a draft's loss counts): 68k ShareGPT
# conversations, 95% of them for training, 21 epochs, each conversation's first 2048 tokens. Its
# answers hold ~872 tokens on average there (measured with SmolLM2's tokenizer and chat template
# over 600 random conversations: 1253 tokens in all): ~1.2e9. The learning curves extrapolate to it.
PAPER_ANSWER_TOKENS = round(68_000 * 0.95 * 21 * 872)

# Medusa-1's logged per-head top-1 accuracy on Vicuna-7B (assets/medusa_acc.csv), heads 0..4
MEDUSA_HEAD_TOP1 = (0.560, 0.316, 0.201, 0.147, 0.118)


def clover2_over_eagle1(tau: pd.DataFrame) -> pd.DataFrame:
    """Per source and task, Clover-2's tau over EAGLE-1's, and the same for tau - 1 (the paper's extra
    tokens per step, where it reports Clover-2 +0 to 7.7% above EAGLE-1). `tau`: columns source,
    method, task, tau."""
    wide = tau.pivot_table(index=["source", "task"], columns="method", values="tau", sort=False)
    return pd.DataFrame({"clover2_tau": wide.clover2, "eagle1_tau": wide.eagle1,
                         "tau_ratio": wide.clover2 / wide.eagle1,
                         "extra_tokens_ratio": (wide.clover2 - 1) / (wide.eagle1 - 1)}).reset_index()


def ratios() -> pd.DataFrame:
    """The paper's own Clover-2 / EAGLE-1 ratios per target (as `source`) and task, in tau and in tau - 1
    (`clover2_over_eagle1` of the published numbers)."""
    return clover2_over_eagle1(tau().assign(source=lambda d: d.target))
