"""Greedy acceptance without timing: how many tokens each draft's tree gets accepted, by replay.

Greedy accept lengths depend on the target's outputs only, never on time. Each prompt is decoded
plainly once (`plain_reference`), and each draft's speculative decoding is replayed against it
(`clover2.decoding.replay`: the draft runs for real, the target's forwards are read off the plain
decoding). The tau of many drafts (variants, a run's snapshots) on several trees therefore costs
one plain decoding per prompt plus the drafts themselves, and can run beside training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from clover2.decoding.decode import DecodeConfig
from clover2.decoding.replay import Reference, plain_reference, replay
from clover2.decoding.target import Target
from clover2.drafts.base import DraftModel
from clover2.drafts.checkpoint import load_draft
from clover2.drafts.drafter import ModelDrafter
from clover2.drafts.methods import parse_tree
from clover2.errors import Clover2Error
from clover2.files import atomic_path


def layers_read(target: Target, archs: Sequence[str]) -> tuple[int, ...]:
    """The target layers whose inputs drafts of these architectures read between them (index L: the
    last hidden state), for `references`."""
    from clover2.drafts import ARCHITECTURES

    text = target.config.get_text_config()
    return tuple(sorted({i for a in archs for i in ARCHITECTURES[a].layers_read(text) or (text.num_hidden_layers,)}))


def references(target: Target, prompts: Sequence[tuple[str, list[int]]], config: DecodeConfig,
               cache: Path | None = None, *, layers: tuple[int, ...] = ()) -> list[Reference]:
    """Plain greedy decoding of each `(task, ids)` prompt with the states of `layers` (`layers_read`;
    default: the last hidden state), kept for replays (in `cache`, a `.pt` file, when given: written
    atomically, reused when it holds these very prompts, limits and layers)."""
    layers = tuple(layers) or (target.config.get_text_config().num_hidden_layers,)
    if cache is not None and Path(cache).exists():
        saved = torch.load(cache, weights_only=False)
        if saved["prompts"] == list(prompts) and saved["config"] == config and \
                all(r.layers == layers for r in saved["refs"]):
            return saved["refs"]
    refs = [plain_reference(target, ids, config, layers=layers)
            for _, ids in tqdm(prompts, desc="plain decoding", unit="prompt")]
    if cache is not None:
        with atomic_path(Path(cache)) as tmp:
            torch.save({"prompts": list(prompts), "config": config, "refs": refs}, tmp)
    return refs


def replayed_steps(target: Target, drafts: Mapping[str, Path | DraftModel], prompts: Sequence[tuple[str, list[int]]],
                   refs: Sequence[Reference], *, trees: Sequence[str] = ("eagle25",),
                   engine: str = "eager") -> pd.DataFrame:
    """One row per draft, tree and prompt: `task`, `tokens` committed, decoding `steps`, `first`
    (steps that accepted at least one draft token: on the 1-node tree `chain1`, the draft's
    first-token acceptance), `lengths` (each step's accept length, bonus token included, space-
    separated so that a CSV keeps it: the input of `depth_acceptance` and `accept_histogram`),
    `depth` (the tree's deepest draft token) and `in_vocab` (of the target's greedy answer, the
    tokens inside the draft's vocabulary: the ones it can propose at all). Drafts are folders
    (loaded with float weights) or loaded models."""
    rows = []
    for name, draft in drafts.items():
        model = draft if isinstance(draft, DraftModel) else load_draft(draft, target)
        for tree in trees:
            shape = parse_tree(tree)
            for p, ((task, _), ref) in enumerate(zip(prompts, tqdm(refs, desc=f"tau {name} {tree}", unit="prompt"))):
                g = replay(target, ModelDrafter(model, shape, graphs=engine == "graphs"), ref)
                answer = torch.tensor(ref.ids[ref.prompt_len:], device=model.d2t.device)
                rows.append({"draft": name, "tree": tree, "prompt": p, "task": task, "tokens": sum(g.accept_lengths),
                             "steps": len(g.steps), "first": sum(a > 1 for a in g.accept_lengths),
                             "lengths": " ".join(map(str, g.accept_lengths)), "depth": shape.max_depth,
                             "answer_tokens": len(answer), "in_vocab": int(torch.isin(answer, model.d2t).sum())})
    return pd.DataFrame(rows)


def _lengths(rows: pd.DataFrame) -> np.ndarray:
    """Every step's accept length in `rows` (their `lengths` strings), as one array."""
    return np.concatenate([np.array(str(x).split(), dtype=np.int64) for x in rows.lengths])


def depth_acceptance(steps: pd.DataFrame) -> pd.DataFrame:
    """Acceptance at each depth of the tree at decode time, per draft and tree (`steps`: the rows of
    `replayed_steps`). Of the steps that accepted d - 1 draft tokens or more, `rate` is the share that
    accepted a d-th (the per-position acceptance rate EAGLE and Medusa report), and `reached` is the
    share of all steps with at least d accepted; tau = 1 + the sum of `reached` over d."""
    rows = []
    for (draft, tree), g in steps.groupby(["draft", "tree"], sort=False):
        accepted = _lengths(g) - 1  # draft tokens accepted per step
        for d in range(1, int(g.depth.max()) + 1):
            before, now = int((accepted >= d - 1).sum()), int((accepted >= d).sum())
            rows.append({"draft": draft, "tree": tree, "depth": d, "steps": before, "accepted": now,
                         "rate": now / before if before else np.nan, "reached": now / len(accepted)})
    return pd.DataFrame(rows)


def accept_histogram(steps: pd.DataFrame) -> pd.DataFrame:
    """How many tokens each decoding step committed (bonus included: 1 = no draft token accepted),
    per draft and tree: `steps` and their `share`."""
    rows = []
    for (draft, tree), g in steps.groupby(["draft", "tree"], sort=False):
        lengths = _lengths(g)
        counts = np.bincount(lengths, minlength=int(g.depth.max()) + 2)[1:]
        rows += [{"draft": draft, "tree": tree, "length": k, "steps": int(n), "share": n / len(lengths)}
                 for k, n in enumerate(counts, start=1)]
    return pd.DataFrame(rows)


def vocabulary_coverage(steps: pd.DataFrame) -> pd.DataFrame:
    """Per draft and task (and `overall`): the share of the target's greedy answer tokens inside the
    draft's vocabulary, a ceiling on what it can get accepted there."""
    one_tree = steps[steps.tree == steps.tree.iloc[0]]  # the answers do not depend on the tree
    per_task = one_tree.groupby(["draft", "task"], sort=False)[["in_vocab", "answer_tokens"]].sum().reset_index()
    overall = (one_tree.groupby("draft", sort=False)[["in_vocab", "answer_tokens"]].sum().reset_index()
               .assign(task="overall"))
    out = pd.concat([per_task, overall], ignore_index=True)
    return out.assign(coverage=out.in_vocab / out.answer_tokens)


def tau_table(steps: pd.DataFrame, *, n_boot: int = 2000) -> pd.DataFrame:
    """Greedy tau (tokens per target forward, bonus included) of each draft (column `variant`) per
    task and `overall` (`steps`: the rows of `replayed_steps` on one tree). The `overall` rows carry
    a 95% bootstrap interval over prompts (`tau_lo`, `tau_hi`) and the interval of each variant's
    difference from Clover-2's (else the first variant's) on the same resampled prompts (`delta_lo`,
    `delta_hi`: an interval excluding 0 is a difference beyond prompt-to-prompt noise)."""
    df = steps.rename(columns={"draft": "variant"})
    if df.tree.nunique() > 1:
        raise Clover2Error(f"tau_table: give the steps of one tree, not {sorted(df.tree.unique())}")
    variants = list(dict.fromkeys(df.variant))
    per_task = df.groupby(["variant", "task"], sort=False)[["tokens", "steps"]].sum().reset_index()
    overall = df.groupby("variant", sort=False)[["tokens", "steps"]].sum().reset_index().assign(task="overall")
    reference = "clover2" if "clover2" in variants else variants[0]
    overall = overall.join(paired_tau_intervals(df, reference=reference, n_boot=n_boot), on="variant")
    out = pd.concat([per_task, overall], ignore_index=True)
    out["tau"] = out.tokens / out.steps
    return out


def paired_tau_intervals(runs: pd.DataFrame, *, reference: str, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per variant, 95% bootstrap intervals of tau (sum of tokens / sum of steps over resampled
    prompts) and of its difference from the `reference` variant's on the same resample. `runs`: one
    row per variant and prompt, with columns variant, prompt, tokens, steps."""
    tokens = runs.pivot(index="prompt", columns="variant", values="tokens")
    steps = runs.pivot(index="prompt", columns="variant", values="steps")
    variants = list(dict.fromkeys(runs.variant))
    picks = np.random.default_rng(seed).integers(0, len(tokens), size=(n_boot, len(tokens)))
    taus = {v: tokens[v].to_numpy()[picks].sum(1) / steps[v].to_numpy()[picks].sum(1) for v in variants}
    rows = {v: {"tau_lo": np.percentile(t, 2.5), "tau_hi": np.percentile(t, 97.5),
                "delta_lo": np.percentile(t - taus[reference], 2.5),
                "delta_hi": np.percentile(t - taus[reference], 97.5)} for v, t in taus.items()}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("variant")
