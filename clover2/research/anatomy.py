"""A draft model taken apart on the live target: its parameters, one traced decoding step, and what
each of its components costs per step (what the architecture notebook shows)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd
import torch

from clover2.decoding.decode import DecodeConfig, prefill, speculative_steps
from clover2.decoding.drafter import Recording
from clover2.decoding.target import Target
from clover2.decoding.tree import EAGLE_25, Tree
from clover2.decoding.verify import accepted_nodes
from clover2.drafts.base import BORROWED, DraftModel, TreeAttention
from clover2.drafts.drafter import ModelDrafter
from clover2.errors import Clover2Error


def parameter_table(model: DraftModel, target: Target) -> pd.DataFrame:
    """Parameters per top-level component, whether they are trained, and their size against the target."""
    total = sum(p.numel() for p in target.model.parameters())
    rows = []
    for name, module in model.named_children():
        n = sum(p.numel() for p in module.parameters())
        if n:
            rows.append({"component": name, "parameters": n, "trained": f"{name}." not in BORROWED,
                         "share_of_target": n / total})
    return pd.DataFrame(rows)


def trace_step(target: Target, model: DraftModel, prompt_ids: Sequence[int], *, tree: Tree = EAGLE_25,
               step: int = 8) -> dict:
    """Decode greedily from step `step` on to the first step that accepts a draft token (the last
    step if none does), and return that step's draft tree, the tokens of its nodes, and which
    nodes the target accepted."""
    recorder = Recording(ModelDrafter(model, tree))
    with torch.inference_mode():
        steps = speculative_steps(target, recorder, prompt_ids, DecodeConfig(max_new_tokens=8 * step + 64))
        s = next(steps)  # the prefill, which drafts nothing
        for k, s in enumerate(steps, start=1):
            if (k >= step and len(s.tokens) > 1) or s.stop:
                break
    if not recorder.drafts:
        raise Clover2Error("the target stopped at its first token: nothing was drafted")
    draft = recorder.drafts[-1]
    # the committed tokens but the bonus: exactly the draft nodes the target accepted, root first
    accepted = [0] + [i for i, ok in enumerate(accepted_nodes(draft, s.tokens[:-1]), start=1) if ok]
    return {"parents": draft.tree.parents, "tokens": [target.decode([int(t)]) for t in draft.tokens],
            "accepted": accepted, "committed": target.decode(s.tokens), "step": k}


def draw_tree(trace: dict, ax=None):
    """The traced tree, depth left to right; accepted nodes filled."""
    parents = trace["parents"]
    tree = Tree(parents=tuple(parents))
    n, depth, kids = tree.size, tree.depth.tolist(), tree.children
    y: dict[int, float] = {}
    stack = [0]
    while stack:  # leaves on consecutive rows in depth-first order, so no two edges cross
        i = stack.pop()
        if not kids[i]:
            y[i] = float(len(y))
        stack += reversed(kids[i])
    for i in reversed(range(n)):  # a parent sits at the mean height of its children
        if kids[i]:
            y[i] = sum(y[c] for c in kids[i]) / len(kids[i])
    ax = ax or plt.gca()
    # a long token would run into the next depth's labels: cut to 9 characters
    labels = ["root", *(t if len(t) <= 9 else t[:8] + "…" for t in trace["tokens"])]
    for i in range(1, len(parents)):
        ax.plot([depth[parents[i]], depth[i]], [y[parents[i]], y[i]], color="0.6", lw=1, zorder=1)
    for i in range(len(parents)):
        ok = i in trace["accepted"]
        ax.scatter(depth[i], y[i], s=110, color="tab:green" if ok else "white", edgecolor="black", zorder=2)
        ax.annotate(repr(labels[i]).strip("'") if i else "root", (depth[i], y[i]), xytext=(7, 0), zorder=3,
                    textcoords="offset points", va="center", fontsize=9,
                    bbox=dict(boxstyle="square,pad=0.05", fc="white", ec="none", alpha=0.85))  # over the edges
    ax.set_xlabel("depth (tokens ahead of the root)")
    ax.set_yticks([])
    ax.set_title(f"step {trace.get('step', '?')}: {len(trace['accepted']) - 1} draft tokens accepted (green), "
                 f"committed {trace['committed']!r}")
    return ax


def component_costs(target: Target, model: DraftModel, prompt_ids: Sequence[int], *, width: int = 4,
                    repeats: int = 15) -> pd.DataFrame:
    """Median milliseconds per call of the target's decode step and of the draft's parts, with the
    draft's per-step total for the 25-node tree as a share of one target step."""
    prompt = list(prompt_ids)

    def timed(fn) -> float:
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return 1e3 * statistics.median(times[1:])

    rows = []
    with torch.inference_mode():
        tcache = target.new_cache()
        hidden = prefill(target, tcache, prompt[:-1], hidden=True, layers=model.hidden_layers).hidden[0]
        one = torch.tensor([[prompt[-1]]], device=target.device)
        pos = torch.tensor([[len(prompt) - 1]], device=target.device)
        mask = torch.zeros(1, 1, 1, len(prompt), dtype=target.dtype, device=target.device)

        def target_step():
            target.forward(one, pos, mask, tcache, hidden=True, layers=model.hidden_layers)
            tcache.crop(-1)
        rows.append({"part": "target: one decode step", "ms": timed(target_step)})
        h = hidden.float()[None]
        nxt = torch.tensor(prompt[1:], device=target.device)[None]
        dcache = model.new_cache()
        root = model.advance(h[:, :-1], nxt[:, :-1], dcache)

        def trunk():
            model.advance(h[:, -1:], nxt[:, -1:], dcache)
            if dcache.get_seq_length():
                dcache.crop(-1)
        rows.append({"part": "draft: trunk over one new position", "ms": timed(trunk)})
        rows.append({"part": "draft: depth 0 (root head)", "ms": timed(lambda: model.root_logits(root))})
        committed = dcache.get_seq_length()
        attention = (TreeAttention(committed, torch.zeros(width, 0, dtype=torch.bool, device=target.device))
                     if model.attends_to_tree else None)

        def deeper():  # `width` children of the root, one batched call (EAGLE-1 adds KV entries: dropped)
            model.step(root.expand(width, -1), one[0].repeat(width), 1, cache=dcache, attention=attention)
            if dcache.get_seq_length() > committed:
                dcache.crop(committed - dcache.get_seq_length())
        rows.append({"part": f"draft: one deeper depth ({width} nodes)", "ms": timed(deeper)})
        o = torch.zeros(width, model.lm_head.in_features, device=target.device, dtype=model.lm_head.weight.dtype)
        rows.append({"part": f"draft: LM head alone ({len(model.d2t)} tokens x {width} rows)",
                     "ms": timed(lambda: model.logits(o))})
        drafter = ModelDrafter(model, EAGLE_25)
        drafter.begin(prompt[:-1], hidden[:-1])
        drafter.propose(prompt[:-1])  # the trunk catches up with the prompt once

        def whole_step():  # what one decoding step asks of the draft: observe 1 token, propose the tree
            drafter.observe([prompt[-1]], hidden[-1:])
            drafter.propose(prompt)
        rows.append({"part": "draft: one whole step, 25-node tree (what decoding pays)", "ms": timed(whole_step)})
    df = pd.DataFrame(rows)
    df["share_of_target_step"] = df.ms / df.ms.iloc[0]
    return df
