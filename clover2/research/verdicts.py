"""The designed study's statistics (book/protocol.md): tau ratios with intervals over training seeds and
prompts together, each family's correction (Bonferroni for the primary pair, Holm's for the others), the
protocol's decision rules, the power the finished seeds give, and the learning curve's fits.

`cells` turns the replays (`clover2.research.design`, `replays.csv`) into one (seeds x prompts) table
of tokens and of target forwards per arm, budget, share of the data and tree. `bootstrap` resamples
them two levels deep: the prompts once per resample, shared by every cell (paired by prompt), and each
arm's seeds on their own, shared by that arm's cells (the 300-step draft of a seed is a branch of the
same seed's 600-step run). A cell's tau is the mean over its seeds of each seed's tokens / forwards
pooled over the prompts; a comparison is the ratio of two cells' taus, its interval the percentiles
of the resampled ratios, its p-value twice the smaller tail beyond 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit
from scipy.stats import norm

from clover2.drafts.methods import parse_tree
from clover2.errors import Clover2Error
from clover2.files import stable_hash
from clover2.research.design import ELSEWHERE, DesignConfig, chosen_lr, run_lr
from clover2.research.paper import PAPER_ANSWER_TOKENS, clover2_over_eagle1
from clover2.research.paper import ratios as paper_ratios
from clover2.research.paper import tau as paper_tau
from clover2.research.report import TASK_LABELS, bracket

# How far a percentile bound moves with the bootstrap's own seed at 10,000 resamples: the primary upper
# bound of the study ranged over 0.0003 across six seeds; a bound nearer 1 than this could cross it.
RESAMPLING = 0.001
# The protocol's target for the primary interval: if five seeds per arm predict a wider half-width (as a share
# of the ratio), seeds are added.
TARGET_HALF_WIDTH = 0.025


@dataclass(frozen=True)
class Cell:
    """One arm's replays at one budget, share and tree: tokens and forwards per seed (rows) and prompt."""

    arm: str
    seeds: tuple[int, ...]
    tokens: np.ndarray
    steps: np.ndarray

    def tau(self) -> float:
        return float((self.tokens.sum(1) / self.steps.sum(1)).mean())


Key = tuple[str, int, float, str]  # arm, budget, share, tree


def cells(replays: pd.DataFrame, design: DesignConfig, dev: dict, *, curve: bool = False) -> dict[Key, Cell]:
    """Every (arm, budget, share, tree) the replays hold at the rate the study evaluates there (`run_lr`: the
    arm's chosen rate, or the curve's pinned one; `curve`: the curve's at every budget), as a Cell whose
    prompts are in one order for all (a cell missing a prompt another has is an error: a replay interrupted
    between prompts). Rows of arms the design does not have (a machine replicate) are left out."""
    lrs = {key: run_lr(design, key[0], dev, budget=int(key[1]), share=float(key[2]), curve=curve)
            for key in set(zip(replays.arm, replays.budget, replays.share)) if key[0] in design.arms}
    r = replays[[math.isclose(lr, lrs.get(key) or -1)
                 for key, lr in zip(zip(replays.arm, replays.budget, replays.share), replays.lr)]]
    prompts = sorted(set(r.prompt))
    out = {}
    for (arm, budget, share, tree), g in r.groupby(["arm", "budget", "share", "tree"]):
        tokens = g.pivot_table(index="seed", columns="prompt", values="tokens", aggfunc="sum")
        steps = g.pivot_table(index="seed", columns="prompt", values="steps", aggfunc="sum")
        if list(tokens.columns) != prompts or tokens.isna().any().any():
            raise Clover2Error(f"replays of {arm} at {budget} steps on {tree} do not cover every prompt")
        out[(arm, int(budget), float(share), tree)] = Cell(arm, tuple(int(s) for s in tokens.index),
                                                           tokens.to_numpy(float), steps.to_numpy(float))
    return out


def bootstrap(cells: dict[Key, Cell], n_boot: int, seed: int = 0) -> dict[Key, np.ndarray]:
    """Each cell's tau in `n_boot` two-level resamples (prompts shared by all cells, seeds shared
    within an arm: a seed drawn for an arm is drawn for each of its cells that has it). The prompts'
    weights come from a generator of `seed` alone and each arm's seed weights from one of its own (`seed`
    and the arm's name), so that a cell's draws depend only on its own arm's seeds and on the prompts'
    count: adding an arm, or seeds to one, leaves every other arm's draws as they were."""
    n_prompts = next(iter(cells.values())).tokens.shape[1]
    prompt_w = np.random.default_rng([seed, 0]).multinomial(n_prompts, np.full(n_prompts, 1 / n_prompts),
                                                            size=n_boot).T  # prompts x n_boot
    seed_w = {}
    for arm in sorted({c.arm for c in cells.values()}):
        seeds = sorted({s for c in cells.values() if c.arm == arm for s in c.seeds})
        rng = np.random.default_rng([seed, 1, int(stable_hash(arm), 16)])
        seed_w[arm] = dict(zip(seeds, rng.multinomial(len(seeds), np.full(len(seeds), 1 / len(seeds)), size=n_boot).T))
    out = {}
    for key, c in cells.items():
        per_seed = (c.tokens @ prompt_w) / (c.steps @ prompt_w)  # seeds x n_boot
        w = np.stack([seed_w[c.arm][s] for s in c.seeds]).astype(float)
        empty = w.sum(0) == 0  # a resample that drew none of this cell's seeds (when it lacks some of the arm's)
        w[:, empty] = 1.0
        out[key] = (per_seed * w).sum(0) / w.sum(0)
    return out


def compare(point: float, draws: np.ndarray, level: float) -> dict:
    """A ratio's point value, its percentile interval at `level` and two-sided bootstrap p-value (against 1)."""
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    p = min(1.0, 2 * min((draws <= 1).mean(), (draws >= 1).mean()))
    return {"ratio": point, "lo": float(lo), "hi": float(hi), "level": level, "p": max(p, 1 / len(draws))}


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    p = np.asarray(p, float)
    order = np.argsort(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return out


def primary_verdict(lo: float, hi: float, margin: float, smallest_claim: float) -> str:
    """The protocol's rule for a primary comparison, on its interval (taken in this order)."""
    if lo > 1:
        return "reproduced: Clover-2 ahead"
    if hi < 1:
        return "not reproduced: the rival ahead"
    if lo >= 1 - margin and hi <= 1 + margin:
        return ("not reproduced: equivalent within {:.0%}, the paper's smallest gain excluded"
                if hi < 1 + smallest_claim else "equivalent within {:.0%}").format(margin)
    return "inconclusive at this power"


def reason(lo: float, hi: float, margin: float, smallest_claim: float, largest_claim: float,
           rival: str = "the rival") -> str:
    """Why the rule gives a primary comparison its verdict, the rival named; where a bound lies within the
    bootstrap's resampling error of 1 (so that another bootstrap seed could put it on the other side), the
    reading on its other side too; for Clover-2 ahead, where the interval lies against the paper's claimed
    gains (the protocol's rule 1)."""
    said = primary_verdict(lo, hi, margin, smallest_claim)
    for bound, name in ((lo, "lower"), (hi, "upper")):
        if abs(bound - 1) < RESAMPLING:
            moved = 1 + RESAMPLING if bound < 1 else 1 - RESAMPLING
            other = primary_verdict(*((moved, hi) if name == "lower" else (lo, moved)), margin, smallest_claim)
            if other != said:
                return (f"{said.split(': ', 1)[-1]} (its {name} bound lies within the bootstrap's resampling "
                        f"error of 1: had it fallen just {'above' if moved > 1 else 'below'} 1, the rule would read "
                        f"{other.split(': ', 1)[-1]})").replace("the rival", rival)
    said = said.split(": ", 1)[-1]
    if lo > 1:
        claimed = f"the paper's {smallest_claim * 100:g}-{largest_claim:.0%}"
        said += (f", the interval inside {claimed}" if lo >= 1 + smallest_claim and hi <= 1 + largest_claim else
                 f", the interval above {claimed}" if lo > 1 + largest_claim else
                 f", the interval overlapping {claimed}" if hi >= 1 + smallest_claim else
                 f", the interval below {claimed}")
    return said.replace("the rival", rival)


def p_text(p: float) -> str:
    """A bootstrap p-value as every page prints it (10,000 resamples resolve no finer than 0.001 here)."""
    return f"{p:.3f}" if p >= 0.001 else "< 0.001"


PART_HELPS, PART_HURTS = "the part helps", "the part hurts"  # a part's verdict (amendment 1: S5)


def secondary_verdict(ratio: float, p_holm: float, alpha: float = 0.05,
                      words: tuple[str, str] = ("ahead", "behind")) -> str:
    """A secondary comparison's verdict by its Holm-adjusted p: `words` (above 1, below 1) where it is below
    `alpha`, else "no difference shown". Each family says it in its own words (`verdict_words`)."""
    if p_holm >= alpha:
        return "no difference shown"
    return words[0] if ratio > 1 else words[1]


def verdict_words(family: str, comparison: str) -> tuple[str, str]:
    """A secondary family's words for a ratio above and below 1: for Clover-2's parts (the arm without the part
    over the official Clover-2) as the protocol words it, behind being "the part helps"; for a budget comparison
    ("a / b: longer over shorter") which way training moves the ratio ("ahead" would read as a ahead of b)."""
    if family == "parts":
        return PART_HURTS, PART_HELPS
    if family == "budget":
        first, second = comparison.split(":")[0].split(" / ")
        return f"moves toward {first}", f"moves toward {second}"
    return "ahead", "behind"


def rivals(design: DesignConfig) -> list[str]:
    """The architectures family's rivals: every arm with a grid of its own beside the primary arms and the
    reference, not cut."""
    return [a for a, s in design.arms.items()
            if not s.lr_from and not s.cut and a not in (*design.primary, design.reference)]


def part_arms(design: DesignConfig, *, cut: bool = False) -> list[str]:
    """The parts family's arms: each removes one part of the arm whose rate it trains at; those not cut (with
    `cut`, those cut)."""
    return [a for a, s in design.arms.items() if s.lr_from and bool(s.cut) == cut]


def comparisons(design: DesignConfig, table: dict[Key, Cell], *, planned: bool = False) -> list[dict]:
    """The protocol's families: each a list of (name, numerator key, denominator key) whose cells exist
    (`planned`: every one the design plans); the budget family compares a primary ratio at the shorter
    budget with the main one."""
    main, half = design.main, design.budgets[0]
    ref = design.reference
    rival_arms = rivals(design)
    parts = part_arms(design)
    key = lambda arm, budget=main, tree="eagle25": (arm, budget, 1.0, tree)  # noqa: E731
    dynamic = [t for t in design.main_trees]
    families = {
        "primary": [(f"{a} / {ref}", key(a), key(ref)) for a in design.primary],
        "architectures": [(f"{a} / {r}", key(a), key(r)) for a in design.primary for r in rival_arms],
        "value gain": [(f"{b} / {a}", key(b), key(a)) for a, b in zip(design.primary, design.primary[1:])],
        "budget": [(f"{a} / {ref}: {main} steps over {half}", (key(a), key(ref)), (key(a, half), key(ref, half)))
                   for a in design.primary] if half != main else [],
        "tree": [(f"{a} / {ref}", key(a, tree=t), key(ref, tree=t)) for a in design.primary for t in dynamic],
        "parts": [(f"{a} / {design.arms[a].lr_from}", key(a), key(design.arms[a].lr_from)) for a in parts],
    }
    present = lambda k: all(x in table for x in (k if isinstance(k[0], tuple) else (k,)))  # noqa: E731
    return [{"family": f, "comparison": n, "num": a, "den": b} for f, rows in families.items()
            for n, a, b in rows if planned or (present(a) and present(b))]


WAITS = "waits for its seeds"  # the verdict of a comparison whose arms have not finished their planned seeds


def primary_level(design: DesignConfig) -> float:
    """The primary family's interval level: 95% shared by its comparisons (Bonferroni)."""
    return 1 - 0.05 / len(design.primary)


def verdicts(design: DesignConfig, table: dict[Key, Cell], *, seed: int = 0) -> pd.DataFrame:
    """Every comparison the finished replays allow, one row each: its family, ratio, interval (97.5% for
    the primary family's two, Bonferroni; 95% otherwise), p-value, adjusted as the interval is
    (Bonferroni in the primary family, Holm's within every other), verdict
    (`WAITS` until both arms have all their planned seeds), and the seeds and prompts behind it."""
    draws = bootstrap(table, design.n_boot, seed)
    point = {k: c.tau() for k, c in table.items()}
    rows = []
    for c in comparisons(design, table):
        def value(k, source):
            if isinstance(k[0], tuple):  # a ratio of two cells
                return source[k[0]] / source[k[1]]
            return source[k]
        level = primary_level(design) if c["family"] == "primary" else 0.95
        num, den = c["num"], c["den"]
        stats = compare(value(num, point) / value(den, point), value(num, draws) / value(den, draws), level)
        first = num[0] if isinstance(num[0], tuple) else num
        other = den[0] if isinstance(den[0], tuple) else den
        # the paper's own convention beside it: the ratio of the extra tokens per step, tau - 1 (a cell pair only)
        excess = ({} if isinstance(num[0], tuple) or min(point[num], point[den]) <= 1 else  # none without extra tokens
                  {f"excess_{k}": v for k, v in compare((point[num] - 1) / (point[den] - 1),
                                                        (draws[num] - 1) / (draws[den] - 1), level).items()
                   if k in ("ratio", "lo", "hi")})
        rows.append({"family": c["family"], "comparison": c["comparison"], "tree": first[3], "budget": first[1],
                     **stats, **excess, "seeds": f"{len(table[first].seeds)} vs {len(table[other].seeds)}",
                     "prompts": table[first].tokens.shape[1],
                     "complete": all(len(table[k].seeds) >= design.arms[k[0]].seeds for k in (first, other))})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    # The adjusted p: Bonferroni in the primary family, as its intervals are; Holm in every other, over the
    # family's planned comparisons, those not replayed yet counted at p = 1 (exact once all are in; never
    # looser before): a family's verdicts do not loosen as its comparisons arrive
    size = pd.Series([c["family"] for c in comparisons(design, table, planned=True)]).value_counts()
    out["p_adjusted"] = out.groupby("family").p.transform(
        lambda p: np.minimum(1.0, p * len(design.primary)) if p.name == "primary" else
        holm(np.r_[p.to_numpy(), np.ones(max(int(size.get(p.name, 0)) - len(p), 0))])[:len(p)])
    out["verdict"] = [primary_verdict(r.lo, r.hi, design.margin, design.smallest_claim) if r.family == "primary"
                      else secondary_verdict(r.ratio, r.p_adjusted, words=verdict_words(r.family, r.comparison))
                      for r in out.itertuples()]
    # the rule decides once both arms have every seed the protocol plans (the study's cuts say otherwise)
    out.loc[~out.complete, "verdict"] = WAITS
    return out.drop(columns="complete")


# Clover-2's parts (amendment 1), by the arm that removes each from the official recipe: the part in words
# (the ablation table's and the front page's), and the `cpu` profile's variant without it, where it removed it
PARTS = {"official-extraction-after": ("extracting the token before the augmenting block", None),
         "official-no-projector": ("the output projector", "clover2-no-projector"),
         "official-1-layer-block": ("the augmenting block's second layer", None),
         "official-hard-labels": ("distillation from the target (not hard labels)", "clover2-hard-labels")}


def parts(design: DesignConfig, verdicts: pd.DataFrame, spread: pd.DataFrame) -> pd.DataFrame:
    """The ablation table: per part of the official recipe removed (the parts family), the tau of the arm without
    it and of the official arm (the main budget, the first tree, each its seeds' mean), and the part's effect on
    tau, official over without - 1, with its interval (the comparison's, inverted) and its Holm-adjusted p and
    verdict."""
    v = verdicts[verdicts.family == "parts"] if not verdicts.empty else verdicts
    if v.empty:
        return pd.DataFrame()
    tau = spread[(spread.budget == design.main) & (spread.share == 1) & (spread.tree == design.trees[0])] \
        .set_index("arm").tau
    rows = []
    for r in v.itertuples():
        arm, official = r.comparison.split(" / ")
        rows.append({"arm": arm, "part": PARTS.get(arm, (arm, None))[0], "seeds": r.seeds,
                     "tau_without": tau.get(arm, np.nan), "tau_official": tau.get(official, np.nan),
                     "effect": 1 / r.ratio - 1, "effect_lo": 1 / r.hi - 1, "effect_hi": 1 / r.lo - 1,
                     "p_adjusted": r.p_adjusted, "verdict": r.verdict})
    return pd.DataFrame(rows)


def with_cpu_reading(table: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The ablation table with the `cpu` profile's one-seed reading of the same part beside it (its ablations'
    `summary.csv`: Clover-2 with this project's value gain over the variant without the part, - 1), where the
    profile removed that part."""
    if table.empty or summary.empty:
        return table
    tau = summary.set_index("variant").tau
    earlier = [tau["clover2"] / tau[v] - 1 if v in tau.index and "clover2" in tau.index else np.nan
               for v in (PARTS.get(arm, ("", None))[1] for arm in table.arm)]
    return table.assign(cpu_profile_effect=earlier)


def prompts_alike(table: dict[Key, Cell]) -> dict[Key, Cell]:
    """Each cell with every prompt weighted alike: its log tau per seed and prompt stands as the `tokens` over
    `steps` of one each, so that `bootstrap`, which resamples ratios of sums, resamples their means, and a ratio
    of two cells' exp(tau) is the geometric mean of the per-prompt tau ratios (the seeds averaged in logs)."""
    return {k: Cell(c.arm, c.seeds, np.log(c.tokens / c.steps), np.ones_like(c.steps)) for k, c in table.items()}


def weighting(design: DesignConfig, table: dict[Key, Cell], *, seen: Sequence[int] = (), seed: int = 0) -> pd.DataFrame:
    """The primary comparisons read with each prompt weighted alike beside the protocol's pooled tau (tokens over
    forwards summed over the prompts, which weights a prompt by its forwards), and pooled without the prompts
    `seen` while this project's departures were developed (their places among the prompts; none: no such
    column): descriptive, the verdict stays the pooled one's. One row per comparison at the main budget on the
    first tree, each ratio with its interval at the primary family's level, from the same two-level bootstrap,
    and the primary rule's reading of each other reading (what the verdict would say)."""
    level = primary_level(design)
    keys = [((a, design.main, 1.0, design.trees[0]), (design.reference, design.main, 1.0, design.trees[0]))
            for a in design.primary]
    keys = [(a, b) for a, b in keys if a in table and b in table]
    if not keys:
        return pd.DataFrame()
    used = {k: table[k] for pair in keys for k in pair}
    pooled, alike = bootstrap(used, design.n_boot, seed), prompts_alike(used)
    logs = bootstrap(alike, design.n_boot, seed)
    unseen = {k: replace(c, tokens=np.delete(c.tokens, list(seen), 1), steps=np.delete(c.steps, list(seen), 1))
              for k, c in used.items()}
    held = bootstrap(unseen, design.n_boot, seed) if seen else {}
    rows = []
    for a, b in keys:
        p = compare(used[a].tau() / used[b].tau(), pooled[a] / pooled[b], level)
        e = compare(math.exp(alike[a].tau() - alike[b].tau()), np.exp(logs[a] - logs[b]), level)
        row = {"comparison": f"{a[0]} / {b[0]}", "pooled": p["ratio"], "pooled_lo": p["lo"], "pooled_hi": p["hi"],
               "prompts_alike": e["ratio"], "prompts_alike_lo": e["lo"], "prompts_alike_hi": e["hi"], "level": level,
               "reading": primary_verdict(e["lo"], e["hi"], design.margin, design.smallest_claim)}
        if seen:
            u = compare(unseen[a].tau() / unseen[b].tau(), held[a] / held[b], level)
            row |= {"unseen": u["ratio"], "unseen_lo": u["lo"], "unseen_hi": u["hi"], "seen_prompts": len(seen),
                    "unseen_reading": primary_verdict(u["lo"], u["hi"], design.margin, design.smallest_claim)}
        rows.append(row)
    return pd.DataFrame(rows)


def spread(table: dict[Key, Cell]) -> pd.DataFrame:
    """Per cell: its seeds' mean tau, their standard deviation (seed to seed), and the mean half-width of
    one seed's 95% interval over prompts (prompt to prompt, from each seed's per-prompt ratio variance)."""
    rows = []
    for (arm, budget, share, tree), c in table.items():
        per_seed = c.tokens.sum(1) / c.steps.sum(1)
        n = c.tokens.shape[1]
        # delta-method standard error of a ratio of sums, per seed
        resid = c.tokens - per_seed[:, None] * c.steps
        se = np.sqrt((resid ** 2).sum(1) * n / (n - 1)) / c.steps.sum(1)
        rows.append({"arm": arm, "budget": budget, "share": share, "tree": tree, "seeds": len(c.seeds),
                     "tau": per_seed.mean(), "seed_sd": per_seed.std(ddof=1) if len(c.seeds) > 1 else np.nan,
                     "prompt_half_width": 1.96 * se.mean()})
    return pd.DataFrame(rows)


def _spreads(table: dict[Key, Cell], num: str, den: str, budget: int, tree: str):
    """Each arm's per-seed tau, and the variance of the mean of the per-prompt differences of the seed means."""
    a, b = table[(num, budget, 1.0, tree)], table[(den, budget, 1.0, tree)]
    per_prompt = a.tokens.mean(0) / a.steps.mean(0) - b.tokens.mean(0) / b.steps.mean(0)
    return a.tokens.sum(1) / a.steps.sum(1), b.tokens.sum(1) / b.steps.sum(1), per_prompt.var(ddof=1) / len(per_prompt)


def power(table: dict[Key, Cell], num: str, den: str, *, budget: int, level: float, target_half_width: float,
          tree: str = "eagle25") -> dict:
    """The half-width (as a share of the ratio) the primary interval should have with these seeds, and
    the seeds per arm that would bring it under `target_half_width`: the seed variance of the difference
    from each arm's own seed spread (never from the difference itself), the prompt variance from the
    per-prompt differences of the seed means."""
    tau_a, tau_b, prompt_var = _spreads(table, num, den, budget, tree)
    seed_var = tau_a.var(ddof=1) + tau_b.var(ddof=1)
    seeds = min(len(tau_a), len(tau_b))
    z = norm.ppf(1 - (1 - level) / 2)
    half = lambda s: z * math.sqrt(seed_var / s + prompt_var) / tau_b.mean()  # noqa: E731
    needed = next((s for s in range(2, 101) if half(s) <= target_half_width), None)
    return {"seeds": seeds, "seed_sd_of_difference": math.sqrt(seed_var), "prompt_se": math.sqrt(prompt_var),
            "half_width": half(seeds), "seeds_for_target": needed}


RULE_DIFFERENCE, RULE_POWER = 0.03, 0.80  # amendment 1: seeds enough to find a 3% difference 80% of the time


def detection_power(table: dict[Key, Cell], num: str, den: str, *, budget: int, difference: float, alpha: float,
                    tree: str = "eagle25") -> float:
    """The power of a two-sided test at `alpha` to find a tau ratio of 1 + `difference` between two arms with
    the seeds they have (normal approximation): the seed variance from each arm's own spread, each over its
    own seed count, the prompt variance from the per-prompt differences of the seed means (as `power`)."""
    tau_a, tau_b, prompt_var = _spreads(table, num, den, budget, tree)
    variance = tau_a.var(ddof=1) / len(tau_a) + tau_b.var(ddof=1) / len(tau_b) + prompt_var
    return float(norm.cdf(difference / (math.sqrt(variance) / tau_b.mean()) - norm.ppf(1 - alpha / 2)))


def power_rule(design: DesignConfig, replays: pd.DataFrame, dev: dict) -> pd.DataFrame:
    """Amendment 1's rule for each arm with `more_seeds`: once its first `seeds` seeds and every primary arm's
    seeds are replayed at their chosen rates (main budget, first tree), the power of each primary arm's
    comparison with it to find a `RULE_DIFFERENCE` at Holm's strictest step of the architectures family;
    its `more_seeds` are added where any is below `RULE_POWER`. One row per comparison (none before then);
    read from the first seeds alone, so that the seeds it adds do not decide it again."""
    rows, m = [], len(design.primary) * len(rivals(design))
    for arm, spec in design.arms.items():
        if not spec.more_seeds or spec.cut or replays.empty:
            continue
        table = cells(replays[(replays.arm != arm) | (replays.seed < spec.seeds)], design, dev)
        keys = {a: (a, design.main, 1.0, design.trees[0]) for a in (arm, *design.primary)}
        if not all(k in table and len(table[k].seeds) >= design.arms[a].seeds for a, k in keys.items()):
            continue
        for p in design.primary:
            rows.append({"arm": arm, "comparison": f"{p} / {arm}",
                         "seeds": f"{len(table[keys[p]].seeds)} vs {len(table[keys[arm]].seeds)}",
                         "difference": RULE_DIFFERENCE, "alpha": 0.05 / m,
                         "power": detection_power(table, p, arm, budget=design.main, difference=RULE_DIFFERENCE,
                                                  alpha=0.05 / m, tree=design.trees[0])})
    out = pd.DataFrame(rows)
    if not out.empty:
        out["seeds_added"] = out.arm.map(lambda a: design.arms[a].more_seeds
                                         if (out[out.arm == a].power < RULE_POWER).any() else 0)
    return out


def with_power_rule(design: DesignConfig, replays: pd.DataFrame, dev: dict) -> DesignConfig:
    """`design` with the seeds `power_rule` adds planned for their arms."""
    rule = power_rule(design, replays, dev)
    added = dict(zip(rule.arm, rule.seeds_added)) if not rule.empty else {}
    return replace(design, arms={a: replace(s, seeds=s.seeds + int(added[a])) if added.get(a) else s
                                 for a, s in design.arms.items()})


def log_linear(tokens, a, b):
    return 1 + a + b * np.log(tokens)


def power_law(tokens, scale, exponent):
    return 1 + scale * np.power(tokens, exponent)


def saturating(tokens, tau_max, scale, alpha):
    return tau_max - scale * np.power(tokens / 1e6, -alpha)


FIT_FORMS = {"log_linear": "log-linear", "power_law": "power law", "saturating": "saturating"}  # the page's words


def curve_fits(points: pd.DataFrame, at: float, ceiling: float = math.inf) -> pd.DataFrame:
    """Per arm, tau against training tokens (`points`: arm, tokens, tau; annealed runs), fitted by a
    log-linear law (tau gains the same amount per doubling of tokens), a power law in tau - 1 (tau - 1
    gains the same share per doubling: the form of EAGLE-3's published data scaling) and, with a point
    to spare for its three parameters, a saturating power law; each read at `at` tokens, with the range
    they span there and the power law's gain in tau - 1 per doubling (2^b - 1). A reading above `ceiling`
    (the tree's largest tau: its depth plus the bonus token) is no value tau can take: it is left out of
    the range (inf) and counted in `above_ceiling`; a form that could not be fitted is NaN."""
    rows = []
    for arm, g in points.groupby("arm"):
        g = g.sort_values("tokens")
        x, y = g.tokens.to_numpy(float), g.tau.to_numpy(float)
        if len(g) < 3 or (y <= 1).any():  # two points are not a fit: each form passes through them
            continue
        b, a = np.polyfit(np.log(x), y - 1, 1)  # least squares of the log-linear law
        e, c = np.polyfit(np.log(x), np.log(y - 1), 1)  # and of the power law, on log(tau - 1)
        fits = {"log_linear": float(log_linear(at, a, b)), "power_law": float(power_law(at, math.exp(c), e))}
        if len(g) >= 4:  # three parameters need a point to spare
            try:
                p, _ = curve_fit(saturating, x, y, p0=(y[-1] + 0.5, 0.5, 0.5), bounds=([y[-1], 0, 0.01], [20, 50, 3]),
                                 maxfev=20000)
                fits["saturating"] = float(saturating(at, *p))
            except RuntimeError:
                fits["saturating"] = np.nan
        above = [k for k, v in fits.items() if v > ceiling]
        fits = {k: np.inf if k in above else v for k, v in fits.items()}  # inf: above what tau can be; NaN: no fit
        values = [v for v in fits.values() if np.isfinite(v)]
        rows.append({"arm": arm, "points": len(g), **{f"at_budget_{k}": v for k, v in fits.items()},
                     "range_lo": min(values, default=np.nan), "range_hi": max(values, default=np.nan),
                     "above_ceiling": len(above), "ceiling": ceiling, "relative_slope_per_doubling": 2 ** e - 1})
    return pd.DataFrame(rows)


def analyze(design: DesignConfig, runs: pd.DataFrame, replays: pd.DataFrame, dev: dict, *,
            seen: Sequence[int] = ()) -> dict[str, pd.DataFrame]:
    """Every table of the study's results page from its records (`runs.csv`) and replays
    (`replays.csv`): the grids' dev measure, each arm's tau and spreads, the verdicts, the power of
    the primary comparisons and their other readings (`weighting`, without the prompts `seen` in
    development too), the learning curve with its fits, and the data against repetition."""
    tables = {"grid": runs[(runs.seed == 0) & (runs.budget == design.main) & (runs.share == 1)][
        ["arm", "lr", "dev", "tokens", "epochs"]].sort_values(["arm", "lr"])}  # no times: the study shares its machine
    chosen = {a: chosen_lr(design, a, dev) for a in design.arms}
    tables["grid"]["chosen"] = [math.isclose(lr, chosen.get(a) or -1)
                                for a, lr in zip(tables["grid"].arm, tables["grid"].lr)]
    table = cells(replays, design, dev) if not replays.empty else {}
    if not table:
        return tables
    tables["spread"] = spread(table)
    tables["verdicts"] = verdicts(design, table)
    if len(ablation := parts(design, tables["verdicts"], tables["spread"])):
        tables["parts"] = ablation
    tables["power"] = pd.DataFrame([{"comparison": f"{a} / {design.reference}",
                                     **power(table, a, design.reference, budget=design.main,
                                             level=primary_level(design), target_half_width=TARGET_HALF_WIDTH)}
                                    for a in design.primary
                                    if all((x, design.main, 1.0, "eagle25") in table and
                                           len(table[(x, design.main, 1.0, "eagle25")].seeds) > 1
                                           for x in (a, design.reference))])
    points = []  # each arm's curve at one rate, its pinned one (`curve_lrs`) at every budget
    curve_cells = cells(replays, design, dev, curve=True)
    seeded = spread(curve_cells).set_index(["arm", "budget", "share", "tree"])
    for (arm, budget, share, tree), c in curve_cells.items():
        if tree != "eagle25" or 0 not in c.seeds:
            continue
        lr = run_lr(design, arm, dev, budget=budget, share=share, curve=True)
        row = runs[(runs.arm == arm) & (runs.budget == budget) & (runs.share == share) & (runs.seed == 0)
                   & np.isclose(runs.lr, lr)]
        i, s = c.seeds.index(0), seeded.loc[(arm, budget, share, tree)]
        points.append({"arm": arm, "lr": lr, "budget": budget, "share": share, "tokens": int(row.tokens.iloc[0]),
                       "epochs": float(row.epochs.iloc[0]), "tau": c.tokens[i].sum() / c.steps[i].sum(),
                       "seeds": int(s.seeds), "seeds_tau": s.tau, "seed_sd": s.seed_sd})
    tables["curve"] = pd.DataFrame(points).sort_values(["arm", "share", "budget"])
    curve = tables["curve"].set_index(["arm", "share", "budget"]).tau
    tables["data"] = pd.DataFrame([
        {"arm": arm,
         "twice the steps": curve[(arm, 1.0, design.main)] / curve[(arm, 1.0, design.budgets[0])],
         "twice the unique data": curve[(arm, 1.0, design.main)] / curve[(arm, design.half_data, design.main)]}
        for arm in design.arms if design.half_data and {(arm, 1.0, design.main), (arm, 1.0, design.budgets[0]),
                                                        (arm, design.half_data, design.main)} <= set(curve.index)])
    full = tables["curve"][tables["curve"].share == 1]
    tables["fits"] = curve_fits(full[full.arm.isin([*design.primary, design.reference])], at=PAPER_ANSWER_TOKENS,
                                ceiling=int(parse_tree(design.trees[0]).depth.max()) + 1)
    tables["per_task"] = per_task(design, replays, dev)
    tables["weighting"] = weighting(design, table, seen=seen)
    tables["positions"] = positions(design, replays, dev)
    tables["replicate"] = machine_replicate(design, runs, replays, tables["spread"])
    return tables


def machine_replicate(design: DesignConfig, runs: pd.DataFrame, replays: pd.DataFrame,
                      spread_table: pd.DataFrame) -> pd.DataFrame:
    """The machine replicate (`DesignConfig.replicate`): one seed of an arm trained again on another CPU
    kind, its tau on each tree beside the original run's and the arm's seed-to-seed standard deviation
    there (descriptive: what the machine does to tau, beside what the seed does). Empty until it is replayed."""
    if not design.replicate or replays.empty:
        return pd.DataFrame()
    arm, trained = design.replicate[0], runs.set_index("run")
    sds = spread_table.set_index(["arm", "budget", "share", "tree"]).seed_sd
    rows = []
    for (run, tree), again in replays[replays.arm == f"{arm}-replicate"].groupby(["run", "tree"], sort=False):
        original = run.replace(f"{arm}-replicate/", f"{arm}/", 1)
        first = replays[(replays.run == original) & (replays.tree == tree)]
        if first.empty or not {run, original} <= set(trained.index):
            continue
        budget, share = int(again.budget.iloc[0]), float(again.share.iloc[0])
        sd = float(sds.get((arm, budget, share, tree), np.nan))
        tau_first, tau_again = first.tokens.sum() / first.steps.sum(), again.tokens.sum() / again.steps.sum()
        rows.append({"arm": arm, "seed": int(again.seed.iloc[0]), "budget": budget, "tree": tree,
                     "first_cpu": trained.cpu[original], "again_cpu": trained.cpu[run],
                     "same_weights": trained.weights_sha256[original] == trained.weights_sha256[run],
                     "tau_first": tau_first, "tau_again": tau_again, "ratio": tau_again / tau_first,
                     "seed_sd": sd, "in_seed_sds": (tau_again - tau_first) / sd})
    return pd.DataFrame(rows)


def positions(design: DesignConfig, replays: pd.DataFrame, dev: dict) -> pd.DataFrame:
    """Acceptance by draft position: per arm at its chosen rate (the main budget, all the data, the first tree),
    the share of steps that accept a draft token at depth k given that they accepted the one at depth k - 1
    (the per-position acceptance rate vLLM prints), pooled over seeds, prompts and steps, with the steps behind it
    and the mean accepted draft tokens a step (tau - 1, pooled alike). Descriptive."""
    if not {"lengths", "depth"} <= set(replays.columns):  # replays recorded without each step's length
        return pd.DataFrame()
    tree = design.trees[0]
    rows = []
    for arm in design.arms:
        lr = run_lr(design, arm, dev, budget=design.main)
        r = replays[(replays.arm == arm) & (replays.budget == design.main) & (replays.share == 1)
                    & (replays.tree == tree) & np.isclose(replays.lr, lr if lr is not None else -1)]
        if r.empty:
            continue
        accepted = np.array([int(n) - 1 for lengths in r.lengths for n in str(lengths).split()])  # draft tokens
        reach = [1.0, *((accepted >= k).mean() for k in range(1, int(r.depth.max()) + 1))]
        rows.append({"arm": arm, "seeds": r.seed.nunique(), "steps": len(accepted),
                     **{f"position_{k}": reach[k] / reach[k - 1] if reach[k - 1] else np.nan
                        for k in range(1, len(reach))},
                     "accepted_per_step": accepted.mean()})
    return pd.DataFrame(rows)


def per_task(design: DesignConfig, replays: pd.DataFrame, dev: dict) -> pd.DataFrame:
    """Every comparison of two cells (the budget family's ratio of ratios apart) within each task's prompts:
    its tau ratio and 95% interval from the same two-level bootstrap on that task's prompts alone
    (descriptive: about 24 prompts a task), beside the paper's Clover-2 / EAGLE-1 ratio for that task where
    it publishes one (the mean of its two targets)."""
    paper = clover2_over_eagle1(paper_tau().rename(columns={"target": "source"})).groupby("task").tau_ratio.mean()
    rows = []
    for task, r in replays.groupby("task"):
        table = cells(r, design, dev)
        if not table:
            continue
        draws, point = bootstrap(table, design.n_boot), {k: c.tau() for k, c in table.items()}
        for c in comparisons(design, table):
            if isinstance(c["num"][0], tuple):
                continue
            stats = compare(point[c["num"]] / point[c["den"]], draws[c["num"]] / draws[c["den"]], 0.95)
            rows.append({"family": c["family"], "comparison": c["comparison"], "tree": c["num"][3], "task": task,
                         "prompts": table[c["num"]].tokens.shape[1], **{k: stats[k] for k in ("ratio", "lo", "hi")},
                         "paper": paper.get(task, np.nan) if c["den"][0] == design.reference else np.nan})
    return pd.DataFrame(rows)


def machine_time(runs: pd.DataFrame, sittings: pd.DataFrame, main: int) -> pd.DataFrame:
    """Where the study's machine time went, per CPU: the hours its runs trained (`runs.csv`, wall clock
    on a machine that may have been shared) and the hours of the sittings of `clover2 study run`
    logged in `sittings.csv` (data, training, replays and the speed run; logged from 2026-12-04)."""
    own = runs.own_seconds if "own_seconds" in runs else pd.Series(np.nan, index=runs.index)
    # rows written before own_seconds was recorded (budgets up to `main`): a shorter budget's branch
    # trained its last fifth itself
    branch = runs.budget < main
    own = own.fillna(runs.train_seconds.where(~branch, runs.train_seconds * 0.2))
    train = runs.assign(own=own / 3600).groupby("cpu").agg(runs=("run", "size"), training_hours=("own", "sum"))
    if not sittings.empty:
        logged = sittings.groupby("cpu").agg(sittings=("seconds", "size"), sitting_hours=("seconds", "sum"))
        train = train.join(logged / [1, 3600], how="outer")
    return train.reset_index()


def machine_text(table: pd.DataFrame) -> str:
    """`machine_time` in words, for the results page's first paragraph."""
    def one(r) -> str:  # a CPU may have logged time and no runs (one that only replayed or timed)
        trained = ("no runs trained" if pd.isna(r.runs)
                   else f"{int(r.runs)} runs trained in {r.training_hours:.1f} hours")
        logged = "" if pd.isna(r.get("sittings", np.nan)) else (
            f", {r.sitting_hours:.1f} hours in the {int(r.sittings)} stretch{'es' * (r.sittings != 1)} of "
            "`clover2 study run` logged" + (" (fewer than it trained: stretches stopped outright went unlogged "
                                            "until 2026-12-06)" if r.sitting_hours < (r.training_hours or 0) else ""))
        return f"{r.cpu}, {trained}{logged}"
    return "; ".join(one(r) for _, r in table.iterrows())


def arm_of(method: str) -> str:
    """The arm a study speed run's method decodes with: its published draft's folder name (plain decoding: ar)."""
    return method.rsplit("=", 1)[-1].rstrip("/").rsplit("/", 1)[-1] if "=" in method else method


def superseded(env: dict, published: Path) -> list[str]:
    """The drafts a timed run's `env` (its env.json) names whose folder under `published` now holds other weights,
    or none: its numbers are of drafts the study no longer publishes (a rate its grid no longer chooses)."""
    out = []
    for name, d in env.get("drafts", {}).items():
        sidecar = published / d.get("folder", name) / "draft.json"
        now = json.loads(sidecar.read_text()).get("weights_sha256") if sidecar.exists() else None
        if now != d.get("weights_sha256"):
            out.append(d.get("folder", name))
    return out


def speed_table(bench: pd.DataFrame, pairs: pd.DataFrame, env: dict, reference: str) -> pd.DataFrame:
    """The primary pair's speed run (`Experiment.speed`) at T = 0, one row per method: tau, tokens/s,
    the speedup over plain decoding and, for each draft, its tau and speed ratios to the reference's draft,
    all paired by prompt (geometric means with 95% bootstrap intervals), the machine and its load beside them."""
    rows = bench[(bench.task == "overall") & (bench.temperature == 0)].assign(arm=lambda d: d.method.map(arm_of))
    pairs = pairs[pairs.temperature == 0].assign(arm=lambda d: d.method.map(arm_of),
                                                  versus_arm=lambda d: d.versus.map(arm_of))
    ref = pairs[pairs.versus_arm == reference].set_index("arm")[["tau_ratio", "speed_ratio", "speed_ratio_lo",
                                                                  "speed_ratio_hi"]]
    out = rows.set_index("arm")[["tau", "tokens_per_s", "speedup", "speedup_lo", "speedup_hi", "n_prompts"]]
    out = out.join(ref.rename(columns=lambda c: c.replace("_ratio", "_versus_reference")))
    return out.reset_index().assign(reference=reference, cpu=env["cpu_name"], commit=env["commit"],
                                    contended=bool(env.get("contended", False)))


def markdown(df: pd.DataFrame, digits: int = 3) -> str:
    """A pipe table (floats rounded), for the generated results page."""
    if df.empty:
        return "(nothing yet)"
    def cell(v) -> str:
        if not isinstance(v, float) or np.isnan(v):
            return "" if isinstance(v, float) else str(v)
        if v.is_integer():
            return str(int(v))
        return f"{v:.2g}" if abs(v) < 0.01 else f"{v:.{digits}f}"

    cells = df.map(cell)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells.itertuples(index=False)])


def _tree(tree: str) -> str:
    """A tree as a reader names it: EAGLE-1's 25 nodes, or a dynamic tree by its node budget."""
    return "25-node" if tree == "eagle25" else f"{tree.split(':')[1]}-node dynamic" if tree.startswith("dynamic:") \
        else tree


def _column(budget: int, share: float, tree: str = "eagle25") -> str:
    return (f"{budget} steps" + ("" if share == 1 else f", {share:.0%} of the data")
            + ("" if tree == "eagle25" else f", {_tree(tree)} tree"))


def _by_arm(df: pd.DataFrame, keys: list[str], seeds: pd.Series | None = None) -> pd.DataFrame:
    """`df`'s `value` with one row per arm and one column per combination of `keys` (budget first)."""
    wide = df.pivot_table(index="arm", columns=keys, values="value", aggfunc="first")
    order = sorted(wide.columns, key=lambda k: (k[0], -k[1], len(k) > 2 and k[2] != "eagle25"))  # 25-node first
    wide = wide[order]
    wide.columns = [_column(*k) for k in order]
    out = wide.fillna("").reset_index()
    if seeds is not None:
        out.insert(1, "seeds", out.arm.map(seeds))
    return out


def readable(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """A table of `analyze` as the results page shows it: an interval in one cell, counts with their
    thousands, columns named in words. The CSVs keep every column as computed."""
    if df.empty:
        return df
    if name in ("verdicts", "earlier"):
        named = [c if t == "eagle25" else f"{c}, {_tree(t)} tree" for c, t in zip(df.comparison, df.tree)]
        out = pd.DataFrame({  # the raw p and the prompt count are in verdicts.csv; the 25-node tree unless named
            "family": df.family, "comparison": named, "steps": df.budget,
            "tau ratio [interval]": [f"{r.ratio:.3f} {bracket(r.lo, r.hi)}" for r in df.itertuples()],
            "tau - 1 ratio": [f"{x:.3f}" if x == x else ""  # none for a ratio of ratios
                              for x in df.get("excess_ratio", pd.Series(np.nan, df.index))],
            "adjusted p": df.p_adjusted.map(p_text), "seeds": df.seeds, "verdict": df.verdict})
        return out.drop(columns=["steps"]) if df.budget.nunique() == 1 else out
    if name == "parts":
        out = pd.DataFrame({
            "the part": df.part, "seeds": df.seeds,
            "tau without it": df.tau_without.map("{:.3f}".format),
            "tau, official": df.tau_official.map("{:.3f}".format),
            "effect on tau [interval]": [f"{r.effect:+.1%} [{r.effect_lo:+.1%}, {r.effect_hi:+.1%}]"
                                                    for r in df.itertuples()],
            "adjusted p": df.p_adjusted.map(p_text), "verdict": df.verdict})
        if "cpu_profile_effect" in df and df.cpu_profile_effect.notna().any():
            out["`cpu` profile, one seed"] = df.cpu_profile_effect.map(lambda x: "" if x != x else f"{x:+.1%}")
        return out
    if name == "spread":  # one row per arm, one column per budget, data share and tree
        cell = lambda r: (f"{r.tau:.3f} ({'' if np.isnan(r.seed_sd) else f'{r.seed_sd:.3f}, '}"  # noqa: E731
                          f"±{r.prompt_half_width:.3f})")
        return _by_arm(df.assign(value=[cell(r) for r in df.itertuples()]), ["budget", "share", "tree"],
                       seeds=df.groupby("arm").seeds.max())
    if name == "positions":
        cols = [c for c in df.columns if c.startswith("position_")]
        return pd.DataFrame({"arm": df.arm, "seeds": df.seeds, "steps": df.steps.map("{:,}".format),
                             **{f"depth {c.split('_')[1]}": df[c].map("{:.2f}".format) for c in cols},
                             "draft tokens a step": df.accepted_per_step.map("{:.3f}".format)})
    if name == "weighting":
        return pd.DataFrame({"comparison": df.comparison,
                             "pooled (the verdict's)": [f"{r.pooled:.3f} {bracket(r.pooled_lo, r.pooled_hi)}"
                                                        for r in df.itertuples()],
                             "each prompt alike": [f"{r.prompts_alike:.3f} "
                                                   f"{bracket(r.prompts_alike_lo, r.prompts_alike_hi)}"
                                                   for r in df.itertuples()],
                             "the rule's reading of each prompt alike": df.reading,
                             **({f"pooled, without the {int(df.seen_prompts.iloc[0])} prompts seen in development": [
                                 f"{r.unseen:.3f} {bracket(r.unseen_lo, r.unseen_hi)}" for r in df.itertuples()],
                                 "the rule's reading without them": df.unseen_reading}
                                if "unseen" in df else {})})
    if name == "power_rule":
        return pd.DataFrame({"comparison": df.comparison, "seeds": df.seeds,
                             "power": df.power.map("{:.0%}".format), "seeds added": df.seeds_added})
    if name == "grid":  # one row per arm, one column per rate; the chosen rate's measure in bold
        value = [f"**{r.dev:.3f}**" if r.chosen else f"{r.dev:.3f}" for r in df.itertuples()]
        wide = df.assign(value=value).pivot_table(index="arm", columns="lr", values="value", aggfunc="first")
        return wide.rename(columns=rate).fillna("").reset_index().rename_axis(columns=None)
    if name == "curve":  # one rate an arm, named with it
        return _by_arm(df.assign(arm=[f"{a} (lr {lr:g})" for a, lr in zip(df.arm, df.lr)],
                                 value=df.tau.map("{:.3f}".format)), ["budget", "share"])
    if name == "fits":  # one column per form, so that every arm is read in the same forms
        forms = [(k, label) for k, label in FIT_FORMS.items() if f"at_budget_{k}" in df]
        return pd.DataFrame({
            "arm": df.arm, "points": df.points,
            **{f"tau at 1.18B tokens, {label}": [f"{v:.2f}" if np.isfinite(v) else f"above {c:g}" if v > 0 else ""
                                                 for v, c in zip(df[f"at_budget_{k}"], df.ceiling)]
               for k, label in forms},
            "gain in tau - 1 per doubling": df.relative_slope_per_doubling.map("{:+.0%}".format)})
    if name == "per_task":  # one row per comparison, one column per task; the paper's ratios in a last row
        named = [c if t == "eagle25" else f"{c}, {_tree(t)} tree" for c, t in zip(df.comparison, df.tree)]
        cell = [f"{r.ratio:.2f} ({r.lo:.2f}-{r.hi:.2f})" for r in df.itertuples()]
        tasks = [t for t in TASK_LABELS if t in set(df.task)]
        wide = df.assign(comparison=named, value=cell).pivot_table(index="comparison", columns="task", values="value",
                                                                   aggfunc="first", sort=False)[tasks]
        paper = df.dropna(subset=["paper"]).drop_duplicates("task").set_index("task").paper.reindex(tasks)
        wide.loc["the paper: Clover-2 / EAGLE-1"] = paper.map(lambda v: "" if np.isnan(v) else f"{v:.2f}")
        return wide.rename(columns=TASK_LABELS).reset_index().rename_axis(columns=None)
    if name == "speed":  # the drafts only: plain decoding's speed is the note's
        ref, df = df.reference.iloc[0], df[df.arm != "ar"]
        return pd.DataFrame({
            "method": df.arm, "tau": df.tau.map("{:.3f}".format),
            "speedup [interval]": [f"{r.speedup:.3f} {bracket(r.speedup_lo, r.speedup_hi)}" for r in df.itertuples()],
            f"tau over {ref}": ["" if np.isnan(r.tau_versus_reference) else f"{r.tau_versus_reference:.3f}"
                                for r in df.itertuples()],
            f"speed over {ref} [interval]": [
                "" if np.isnan(r.speed_versus_reference) else
                f"{r.speed_versus_reference:.3f} {bracket(r.speed_versus_reference_lo, r.speed_versus_reference_hi)}"
                for r in df.itertuples()]})
    if name == "power":
        out = pd.DataFrame({
            "comparison": df.comparison, "seeds per arm": df.seeds,
            "seed SD of the difference": df.seed_sd_of_difference.map("{:.3f}".format),
            "prompt SE": df.prompt_se.map("{:.3f}".format),
            "half-width of the interval": df.half_width.map("±{:.1%}".format),
            f"seeds per arm for ±{TARGET_HALF_WIDTH:.1%}": df.seeds_for_target.map(
                lambda s: "over 100" if pd.isna(s) else f"{s:.0f}")})
        return out.drop(columns=["seeds per arm"]) if df.seeds.nunique() == 1 else out  # one count: in the note
    if name == "speed_claims":
        return pd.DataFrame({"claim": df.claim, "comparison": df.comparison,
                             "speed ratio [interval]": [f"{r.ratio:.3f} {bracket(r.lo, r.hi)}"
                                                        for r in df.itertuples()],
                             "Holm p": df.p_holm.map(p_text), "seeds": df.seeds, "verdict": df.verdict})
    if name == "speedups":
        return pd.DataFrame({"method": df.arm, "tree": df.get("tree", ""), "seeds": df.seeds,
                             "speedup [interval]": [f"{r.speedup:.3f} {bracket(r.lo, r.hi)}" for r in df.itertuples()],
                             "tau": df.get("tau", np.nan)})
    if name == "replicate":
        return pd.DataFrame({"arm": df.arm, "seed": df.seed, "steps": df.budget, "tree": df.tree.map(_tree),
                             "trained first on": df.first_cpu, "trained again on": df.again_cpu,
                             "same weights": df.same_weights.map({True: "yes", False: "no"}),
                             "tau, first": df.tau_first.map("{:.3f}".format),
                             "tau, again": df.tau_again.map("{:.3f}".format), "ratio": df.ratio.map("{:.3f}".format),
                             "seed-to-seed SD": df.seed_sd.map("{:.3f}".format)})
    if name == "tree_choice":
        return pd.DataFrame({"arm": df.arm, "tree": df.tree, "chosen": df.chosen.map({True: "yes", False: ""}),
                             "measured speedup [interval]": [f"{r.speedup:.3f} {bracket(r.lo, r.hi)}"
                                                             for r in df.itertuples()],
                             "decoding steps alone": df.decode_speedup.map("{:.3f}".format),
                             "fit's prediction": df.predicted_speedup.map(lambda v: "" if v != v else f"{v:.3f}"),
                             "tau": df.tau.map("{:.3f}".format)})
    if name == "published":
        out = df.rename(columns={"committed_tau": "committed tau", "published_tau": "replayed tau"})
        # where and when the check replayed them
        return out.assign(**{"tree": out.tree.map(_tree), "replayed on": out.cpu + ", " + out.date}).drop(
            columns=["cpu", "date"])
    return df


def _beyond(curve: pd.DataFrame | None) -> str:
    """How far the paper's budget lies beyond the curve's last point, in words."""
    if curve is None or curve.empty:
        return ""
    return f", {PAPER_ANSWER_TOKENS / curve.tokens.max():,.0f} times the last point's tokens"


def _seed_noise(design: DesignConfig, spread: pd.DataFrame | None) -> str:
    """The seeds' spread of tau at the main budget, as the yardstick of seed 0's single ratios."""
    if spread is None or spread.empty:
        return ""
    s = spread[(spread.budget == design.main) & (spread.share == 1) & (spread.tree == "eagle25") & (spread.seeds > 1)
               & spread.arm.isin((*design.primary, design.reference))]  # the arms the curve's table reads
    if s.empty:
        return ""
    share = s.seed_sd / s.tau
    return (f", one seed each: the seeds' standard deviation of tau is {share.min():.1%}-{share.max():.1%} of it at "
            f"{design.main} steps, and a ratio of two single runs varies by about 1.4 times that")


def rate(lr: float) -> str:
    """A learning rate as a grid's column names it, short enough for a row of many: `5.2e-3`, `1e-3`."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def _ceiling(fits: pd.DataFrame | None) -> str:
    return "?" if fits is None or fits.empty else f"{fits.ceiling.iloc[0]:g}"


def _cpu_speed_note(claims: pd.DataFrame | None) -> str:
    """The speed claims' note: the statistic, the rule and where they were timed."""
    env = getattr(claims, "attrs", {}).get("env", {}) if claims is not None else {}
    load, retrained = env.get("evaluation", {}), env.get("retrained", [])
    where = (f" Timed on {env.get('cpu_name', '?')}, code at {env.get('commit', '?')}, the target's kernels "
             f"measured fastest there when the stage began ({env.get('kernel_plan', '?')}); other processes took "
             f"{load.get('other_load', 0):.1%} of the machine; {load.get('prompts_timed_again', 0)} prompts were "
             f"timed again for load over {env.get('speed_claims', {}).get('contended_share', 0.05):.0%} "
             f"({load.get('prompts_still_contended', 0)} still over it). "
             + (f"The timed drafts are the ones kept in `results/study/drafts/` (bf16 weights; {len(retrained)} "
                f"trained again for the stage, the same rate, seed and data); their tau differs from the committed "
                f"runs' by at most {env.get('timed_tau_difference', 0):.3f} (`drafts.csv`). ")
             + (f"{env['near_ties']} outputs parted from plain decoding's at a near tie, where the kernels' "
                "rounding decides (`near-ties.csv`); every other output is plain decoding's, token for token."
                if env.get("near_ties") else "Every output is plain decoding's, token for token.")) if env else ""
    return ("Amendment 1's claims in their CPU form: each Clover-2 faster than plain decoding (C1) and than EAGLE-1 "
            "(C2), every seed of each draft on the tree measured fastest for it here, interleaved with plain "
            "decoding prompt by prompt; the ratio is the geometric mean of paired per-prompt speed ratios, "
            "averaged in logs over seeds, with its 95% interval over seeds and prompts; Holm over the four decides, "
            "so an interval that leaves out 1 can still read \"no difference shown\" where the family's correction "
            "is stricter than the claim's own interval." + where)


def at_edge(design: DesignConfig, grid: pd.DataFrame | None) -> list[str]:
    """The arms whose chosen rate is still at an edge of their extended grid: the protocol stops there,
    so a rate beyond it might do better. (An arm at another arm's rate has no grid of its own.)"""
    if grid is None or grid.empty:
        return []
    return [a for a, g in grid.groupby("arm", sort=False) if g.chosen.any() and not design.arms[a].lr_from
            and len(g) > len(design.arms[a].lrs)
            and g[g.chosen].lr.iloc[0] in (g.lr.min(), g.lr.max())]


def _said(design: DesignConfig, row) -> str:
    """A primary row's verdict as the page gives it: the rule's status, then its reason (both readings where
    a bound is 1 within resampling error)."""
    if row.verdict == WAITS:
        return WAITS
    status = row.verdict.split(": ", 1)[0]
    why = reason(row.lo, row.hi, design.margin, design.smallest_claim, design.largest_claim, design.reference)
    return status if why == status else f"{status}: {why}"


def _still_at_edge(design: DesignConfig, grid: pd.DataFrame | None, said: list[str] = ()) -> str:
    """The arms still at their grid's edge after its extensions, but those `said` above the grid already."""
    edge = [a for a in at_edge(design, grid) if a not in said]
    times = "once" if design.extend_edge == 1 else f"up to {design.extend_edge} times"
    return ("" if not edge else f" Still at the edge after extending: {', '.join(edge)}; the protocol extends "
            f"{times}, so a rate beyond it might do better for that arm.")


def _seeds_added(power: pd.DataFrame | None, seeds: int) -> str:
    """The protocol's rule for adding seeds, applied once the primary arms have their planned seeds: it
    looks at the predicted half-width only, never at the ratio."""
    if power is None or power.empty:
        return ""
    done = power[power.seeds >= seeds]
    if done.empty:
        return ""
    under = done.half_width <= TARGET_HALF_WIDTH
    widths = ", ".join(f"±{w:.1%}" for w in done.half_width)
    return (f" With {seeds} seeds per arm the predicted half-width{'s' * (len(done) > 1)} ({widths}) "
            + (f"{'are' if len(done) > 1 else 'is'} within the protocol's ±{TARGET_HALF_WIDTH:.1%}, so no seeds "
               "are added." if under.all() else
               f"{'are' if len(done) > 1 else 'is'} not all within the protocol's ±{TARGET_HALF_WIDTH:.1%}, so "
               "seeds are added as machine time allows."))


def _tokens_seen(curve: pd.DataFrame | None) -> str:
    """What each budget's runs saw, in answer tokens and epochs (the same for every arm: one data order)."""
    if curve is None or curve.empty:
        return ""
    seen = curve.groupby(["budget", "share"]).agg(tokens=("tokens", "max"), epochs=("epochs", "max"))
    return "Answer tokens seen: " + "; ".join(f"{_column(b, sh)}: {int(r.tokens):,} ({r.epochs:.2f} epochs)"
                                               for (b, sh), r in seen.iterrows()) + "."


def _curve_rates(design: DesignConfig, tables: dict[str, pd.DataFrame]) -> str:
    """The learning rate of each headline arm's curve (one a curve), and where it is not the rate the arm's
    grid chooses now, that one beside it."""
    c, g = tables.get("curve", pd.DataFrame()), tables.get("grid", pd.DataFrame())
    if c.empty:
        return ""
    chosen = g[g.chosen].set_index("arm").lr if not g.empty else pd.Series(dtype=float)
    rates = c[c.arm.isin((*design.primary, design.reference))].groupby("arm", sort=False).lr.first()
    words = [f"{arm} {lr:g}" + (f" (its grid now chooses {chosen[arm]:g}: the curve was trained first)"
                                if arm in chosen and not math.isclose(lr, chosen[arm]) else "")
             for arm, lr in rates.items()]
    return f"Each curve is at one learning rate: {', '.join(words)}." if words else ""


def _rule_note(design: DesignConfig, rule: pd.DataFrame | None) -> str:
    """The power rule's table's caption: the rule, and what it decided."""
    if rule is None or rule.empty:
        return ""
    added = rule.groupby("arm").seeds_added.first()
    return (f"Amendment 1's rule: once an arm's first seeds are replayed, the rule computes the power of each "
            f"primary arm's comparison with it to find a {rule.difference.iloc[0]:.0%} difference in tau at Holm's "
            f"strictest step of the architectures family (two-sided at {rule.alpha.iloc[0]:.4f}), from each arm's "
            f"own seed spread and the prompts' paired differences. Where a power is below {RULE_POWER:.0%}, the "
            "arm's planned extra seeds are added. "
            + " ".join(f"{arm}: {'no seeds added' if not n else f'{n} seeds added'}." for arm, n in added.items()))


def _single_stream(before: pd.DataFrame | None) -> str:
    """The primary intervals as the bootstrap before amendment 1 gave them (one random stream for every arm),
    from the table committed then (`earlier-bootstrap.csv`): shown once beside the new ones (amendment 1)."""
    if before is None or before.empty:
        return ""
    return (" The bootstrap before amendment 1 drew every arm's seeds from one random stream; on the same runs "
            f"it gave {'; '.join(f'{r.comparison} {r.ratio:.3f} {bracket(r.lo, r.hi)}' for r in before.itertuples())}"
            f" (`earlier-bootstrap.csv`, as committed at {before.commit.iloc[0]}).")


def _points(fits: pd.DataFrame | None) -> int:
    """The most annealed points any arm's fit had."""
    return 0 if fits is None or fits.empty else int(fits.points.max())


def _seed_count(power: pd.DataFrame | None) -> str:
    """The seeds per arm behind every power row, when they share one count (the table then leaves it out)."""
    return f": {int(power.seeds.iloc[0])} per arm" if power is not None and power.seeds.nunique() == 1 else ""


def _speed_note(speed: pd.DataFrame | None, design: DesignConfig) -> str:
    """Where and how the pair's speed was measured, and whether the machine was left alone while it ran."""
    if speed is None or speed.empty:
        return ""
    r, plain = speed.iloc[0], speed[speed.arm == "ar"].tokens_per_s
    load = ("Another job loaded the machine during the run: these speeds are flagged, not evidence."
            if speed.contended.any() else "No other job loaded the machine during the run.")
    return (f"Seed 0's published drafts (float, 25-node tree) timed against plain decoding prompt by prompt in one "
            f"run ({int(r.n_prompts)} prompts, {design.max_new_tokens} new tokens, T = 0) on {r.cpu}, code at "
            f"{r.commit}" + (f"; plain decoding {plain.iloc[0]:.1f} tokens/s" if len(plain) else "")
            + ": geometric means of per-prompt ratios, 95% bootstrap intervals over prompts only (one draft "
            f"per arm; the seeded tau ratios are above). A speed ratio above the tau ratio is the cheaper draft step. "
            f"{load} A CPU is not the hardware of the paper's speed claim (the protocol).")


def claim_band(design: DesignConfig) -> tuple[float, float]:
    """The paper's claimed gain in tau as the protocol reads it, as the ratios 1 + its smallest and largest."""
    return 1 + design.smallest_claim, 1 + design.largest_claim


def drawn_apart(design: DesignConfig) -> float:
    """How far from 1 a comparison's whole tau interval must lie for the forest plot to draw it in a row of its
    own (so that it does not squeeze the others' scale): twice the paper's largest claimed gain."""
    return 2 * design.largest_claim


def _per_task_prompts(per_task: pd.DataFrame) -> str:
    """The prompts a task holds, as the per-task notes say it: their count, or about their median count."""
    counts = per_task.prompts.unique()
    return f"{counts[0]}" if len(counts) == 1 else f"about {int(np.median(per_task.prompts))}"


def _findings(design: DesignConfig, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The page's findings after the primary pair, one bullet each, from the tables: every other family's
    comparisons and verdicts, the primary pair's range over the tasks beside the paper's, and what more
    training gave seed 0 of the primary arms and the reference."""
    lines = []
    v = tables.get("verdicts", pd.DataFrame())
    if not v.empty:
        rest = v[v.family != "primary"]
        named = readable("verdicts", rest).comparison if len(rest) else pd.Series(dtype=str)
        for family, g in rest.assign(named=named.to_numpy()).groupby("family", sort=False):
            lines.append(f"- **{family}**: " + "; ".join(
                f"{r.named}: {r.ratio:.3f} {bracket(r.lo, r.hi)}, {r.verdict}" for r in g.itertuples()) + ".")
    t = tables.get("per_task", pd.DataFrame())
    t = t[(t.family == "primary") & (t.tree == "eagle25")] if not t.empty else t
    if not t.empty:
        spans = [f"{c} {g.ratio.min():.2f} to {g.ratio.max():.2f}" for c, g in t.groupby("comparison", sort=False)]
        paper = t.drop_duplicates("task").paper.dropna()
        lines.append(f"- **per task** (descriptive, {_per_task_prompts(t)} prompts a task): " + ", ".join(spans)
                     + (f"; the paper's Clover-2 / EAGLE-1 {paper.min():.2f} to {paper.max():.2f} (the mean of its "
                        "targets)" if len(paper) else "") + ".")
    m = tables.get("replicate", pd.DataFrame())
    for r in m.itertuples():
        if r.tree == "eagle25":
            lines.append(f"- **machine** (descriptive): {r.arm} seed {r.seed} trained again on {r.again_cpu} (first on "
                         f"{r.first_cpu}), {'the same' if r.same_weights else 'other'} weights: tau {r.tau_again:.3f} "
                         f"against {r.tau_first:.3f} on the 25-node tree ({r.ratio:.3f} times), "
                         + (f"{abs(r.in_seed_sds):.2f} seed-to-seed standard deviations ({r.seed_sd:.3f}) "
                            f"{'above' if r.in_seed_sds > 0 else 'below'}." if r.seed_sd == r.seed_sd else "."))
    pos = tables.get("positions", pd.DataFrame())
    pos = pos[pos.arm.isin((*design.primary, design.reference))].set_index("arm") if not pos.empty else pos
    if len(pos) > 1 and "position_2" in pos:
        at = lambda k: ", ".join(f"{arm} {r[f'position_{k}']:.2f}" for arm, r in pos.iterrows())  # noqa: E731
        lines.append(f"- **by draft position** (descriptive, the {_tree(design.trees[0])} tree, pooled over seeds, "
                     f"prompts and steps): a first draft token accepted in {at(1)} of steps; a second, given the "
                     f"first, in {at(2)}: where a short "
                     "tree (a CPU's) reads only the first position, a draft's lead at later ones does not count.")
    c = tables.get("curve", pd.DataFrame())
    c = c[c.arm.isin((*design.primary, design.reference)) & (c.share == 1)] if not c.empty else c
    if not c.empty and c.budget.nunique() > 1:
        first, last = c.budget.min(), c.budget.max()
        ends = c[c.budget.isin([first, last])].pivot_table(index=["arm", "lr"], columns="budget", values="tau",
                                                            sort=False)
        lines.append(f"- **longer training**: seed 0's tau on the 25-node tree from {first} to {last} steps, "
                     + ", ".join(f"{arm} (lr {lr:g}) {r[first]:.3f} to {r[last]:.3f}"
                                 for (arm, lr), r in ends.dropna().iterrows()) + ".")
    return lines


FIGURE_NAMES = {"verdicts": "study-forest", "per_task": "study-per-task", "curve": "study-curve"}  # MyST labels


def _captions(design: DesignConfig, tables: dict[str, pd.DataFrame]) -> dict[str, tuple[str, str]]:
    """Each figure's alt text and caption, by the table it is drawn from."""
    lo, hi = claim_band(design)
    ours = paper_ratios()  # the paper's own Clover-2 / EAGLE-1 ratios, per target and task
    excess = ours.extra_tokens_ratio
    v = tables.get("verdicts", pd.DataFrame())
    primary = ", ".join(f"P{i + 1}" for i in range(int((v.family == "primary").sum()))) if len(v) else ""
    t = tables.get("per_task", pd.DataFrame())
    return {
        "verdicts": ("Forest plot of every comparison's tau ratio and ratio of tau - 1 with its interval",
                     f"Every comparison of the study, the primary ones ({primary}) first: the ratio of the two "
                     "arms' tau with its interval over seeds and prompts (97.5% for the primary ones, 95% for the "
                     "rest), left in tau, right in the paper's own convention, the ratio of the extra tokens per "
                     f"step (tau - 1). Shaded on the left: the paper's claimed gain as the protocol reads it "
                     f"({lo - 1:+.0%} to {hi - 1:+.0%}) and the equivalence margin (±{design.margin:.0%}); on the "
                     f"right: the range of the paper's own ratios of tau - 1 over its {ours.source.nunique()} "
                     f"targets and {ours.task.nunique()} tasks ({excess.min() - 1:+.1%} to {excess.max() - 1:+.1%}). "
                     f"A comparison whose whole interval lies more than {drawn_apart(design):.0%} from 1 is drawn in "
                     "a row below, on its own scale. The budget family's ratios of ratios are in the table below."),
        "per_task": ("The primary comparisons' tau ratio per task beside the paper's",
                     "The primary comparisons' tau ratio within each task's prompts (25-node tree; "
                     + (f"{_per_task_prompts(t)} prompts a task; " if len(t) else "") + "95% intervals over those "
                     "prompts and the seeds), beside the paper's Clover-2 / EAGLE-1 ratio for the task: each of its "
                     "targets, and their mean (the number in the per-task table below)."),
        "curve": ("tau against the answer tokens seen, per arm",
                  "Seed 0's tau on the 25-node tree at every annealed budget against the answer tokens it saw (log "
                  "scale), and at the budgets with several seeds their mean and standard deviation (open squares); "
                  "each arm at one learning rate, in the legend. " + _curve_rates(design, tables)),
    }


def _figure(path: str, name: str, alt: str, caption: str) -> list[str]:
    """A MyST figure: its image, label, alt text and caption."""
    return ["", f"```{{figure}} {path}", f":name: {name}", f":alt: {alt}", "", caption, "```"]


def page(design: DesignConfig, tables: dict[str, pd.DataFrame], status: pd.DataFrame, *, machine: str,
         commits: str, figures: dict[str, str] | None = None, amended: bool = True,
         downloads: list[str] = ()) -> str:
    """The study's results page, generated from its tables: its findings first (the primary verdicts in
    words, then every other comparison, the tasks and the learning curve in a line each), then its figures
    (`figures`: each one's path relative to the page, by the table it is drawn from) with their captions,
    then every table, what is not finished, how and where the study ran, and the files behind it
    (`downloads`, relative to the page: served by the built book). `amended`: False while amendment 1's
    grids run and the page reads the protocol's earlier rules (said with the findings). Nothing on it is
    typed by hand."""
    figures = figures or {}
    elsewhere = status.state == ELSEWHERE  # the machine replicate, until the study meets another CPU kind
    done, left = (status.state == "done").sum(), status[(status.state != "done") & ~elsewhere]
    cut = (f" Cut for machine time, so not run: {', '.join(design.cut)} (the protocol's \"Order and cuts\" says "
           "what each cut costs)." if design.cut else "")
    cut += "".join(f" The machine replicate {run} waits for a CPU kind other than the one that trained its original."
                   for run in status.run[elsewhere])
    progress = (f"Every planned run is done ({done}).{cut}" if left.empty else
                f"{done} of {len(status)} planned runs finished ({int(status.steps.isna().sum())} more wait for a "
                "learning-rate choice).")
    lines = ["# The designed study: results", "",
             "What the study found, each verdict given by the rules its protocol fixed before the runs "
             f"({{doc}}`../../book/protocol`: amended once, after the first study was audited and before the "
             f"amendment's own runs). {progress} How and where it ran is at the end of the page.", ""]
    if not amended:
        lines += ["Amendment 1's learning-rate grids are still running, so every reading below is made by the "
                  "protocol's rules from before it (a grid extended once, no half steps), with its bootstrap's "
                  "one random generator per arm; the readings by the amendment's rules replace these once its "
                  "grids are finished.", ""]
    v = tables.get("verdicts", pd.DataFrame())
    primary = v[v.family == "primary"] if not v.empty else v
    lines += ["## Findings", ""]
    lines += (["No primary comparison has its replays yet.", ""] if primary.empty else
              ["The primary comparisons, each a tau ratio with its interval:", ""])
    for r in primary.itertuples():
        lines += [f"- **{r.comparison}** (tau ratio, {_tree(r.tree)} tree, {r.budget} steps, {r.seeds} seeds, "
                  f"{r.prompts} prompts): {r.ratio:.3f} {bracket(r.lo, r.hi)} at {r.level:.1%}: "
                  f"**{_said(design, r)}**; in the paper's own convention, the ratio of the extra tokens per "
                  f"step (tau - 1), {r.excess_ratio:.3f} {bracket(r.excess_lo, r.excess_hi)}."]
    edge = [a for a in design.primary if a in at_edge(design, tables.get("grid"))]
    said = edge if not primary.empty else []  # arms whose edge caveat is given here, not again under the grid
    if said:
        lines += ["", (f"The learning rate chosen for {edge[0]} is at the edge of its extended grid" if len(edge) == 1
                       else f"The learning rates chosen for {' and '.join(edge)} are at the edges of their extended "
                       "grids") + " (below): each verdict is the protocol's at the rates it chose, and a rate beyond "
                  "the grid might do better."]
    found = _findings(design, tables)
    if found:
        lines += ["", "The other comparisons, each family Holm-corrected on its own (the tau ratio with its 95% "
                  "interval and the verdict), then what the tasks and the learning curve show, without verdicts:", "",
                  *found]
    drawn = [key for key in FIGURE_NAMES if key in figures]
    if drawn:
        captions = _captions(design, tables)
        lines += ["", "## The study in figures"]
        for key in drawn:
            lines += _figure(figures[key], FIGURE_NAMES[key], *captions[key])
    names = {
        "verdicts": ("The secondary comparisons", f"The tau ratio at {design.main} steps on the 25-node tree unless "
                     "named, with its interval over seeds and prompts (95%), and the ratio of tau - 1 (the "
                     "paper's extra tokens per step); the bootstrap's two-sided p, adjusted by Holm within each "
                     "family over all its planned comparisons (those not replayed yet counted at p = 1, so that a "
                     "verdict never loosens as they arrive); a part \"helps\" where the arm without it is behind. "
                     "Every comparison with its raw p and prompt count, the primary two too (their intervals 97.5% "
                     "and their p adjusted by Bonferroni, as their intervals are), is in `verdicts.csv`. The first "
                     "figure above shows every comparison, the primary two included, "
                     f"against the paper's claimed gain of {design.smallest_claim:.0%}-{design.largest_claim:.0%}."),
        "parts": ("Clover-2's parts", f"Each part of the official recipe removed on its own (amendment 1; the "
                  "arm without it is named in the parts family above), at "
                  f"the official arm's rate, {design.main} steps, the {_tree(design.trees[0])} tree: the part's "
                  "effect is the official arm's tau over the arm without it, less 1, with the comparison's 95% "
                  "interval over seeds and prompts; p adjusted by Holm within the parts family; \"helps\" where "
                  "the arm without it is behind. Each is removed from the official recipe, whose value gain of 1 "
                  "adds the token's embedding to a state far larger than it (glossary: value gain): "
                  "a part that moves where the token meets the state (the extraction order) may act through the "
                  "token's scale there as much as through its place; not separated here."
                  + (" Beside it, where the `cpu` profile removed the same part from this project's Clover-2 (one "
                     "seed of 90 steps, 24 prompts: no interval over seeds), its reading."
                     if "cpu_profile_effect" in tables.get("parts", ()) and
                     tables["parts"].cpu_profile_effect.notna().any() else "")),
        "earlier": ("The primary comparisons by the protocol's first rules", "Each arm at the rate the protocol's "
                    "first grid chose (extended once, no half steps), re-read with the current bootstrap (one random "
                    "generator per arm; 97.5% intervals; p adjusted by Bonferroni, as they are): the amendment's "
                    "readings above replace these." + _single_stream(
                        tables.get("earlier_bootstrap"))),
        "weighting": ("Other readings of the primary comparisons", "The protocol's tau pools tokens and target "
                      "forwards over the prompts, so a prompt counts in proportion to the forwards it took (the "
                      "convention of vLLM's and SGLang's acceptance length); beside it, every prompt weighted "
                      "alike (the geometric mean of the per-prompt tau ratios, the seeds averaged in logs), from "
                      "the same bootstrap at the primary family's 97.5%"
                      + (f"; and pooled without the {int(tables['weighting'].seen_prompts.iloc[0])} evaluation "
                         f"prompts that the `{design.developed_on}` profile's benchmark also samples, on which this "
                         "project's value gain was developed" if "unseen" in tables.get("weighting", ()) else "")
                      + ". Descriptive, added after the primary comparisons (P1: the official Clover-2 over EAGLE-1; "
                      "P2: this project's Clover-2 over EAGLE-1) were read: the verdicts are the pooled ratio's."),
        "positions": ("Acceptance by draft position", f"Per arm at its chosen rate ({design.main} steps, the "
                      f"{_tree(design.trees[0])} tree, every seed), the share of decoding steps that accept a "
                      "draft token at each depth given they accepted the one before it (the per-position "
                      "acceptance rate serving engines print), pooled over seeds, prompts and steps, and the "
                      "draft tokens accepted a step (tau - 1, pooled alike). Descriptive: where in the tree a "
                      "draft gains or loses."),
        "per_task": ("Per task", "Each comparison's tau ratio within each Spec-Bench task's prompts ("
                     + (f"{_per_task_prompts(tables['per_task'])} a task; " if len(tables.get("per_task", ())) else "")
                     + "95% intervals over those prompts and the seeds; descriptive, no verdict), beside the "
                     "paper's Clover-2 / EAGLE-1 ratio per task (the mean of its two targets)."),
        "spread": ("tau per arm", "The seeds' mean tau at each budget and tree (EAGLE-1's 25-node tree unless "
                   "named), with the seed-to-seed standard deviation and the half-width of one seed's 95% interval "
                   "over prompts in brackets."),
        "power": ("Power of the primary comparisons", "From the seeds finished so far (the fewer of the two arms'"
                  + _seed_count(tables.get("power")) + "): "
                  "the half-width of the primary interval as a share of the ratio, and the seeds per arm that "
                  f"would bring it under {TARGET_HALF_WIDTH:.1%}." + _seeds_added(tables.get("power"), min(
                      design.arms[a].seeds for a in (*design.primary, design.reference)))),
        "power_rule": ("Seeds added by the power rule", _rule_note(design, tables.get("power_rule"))),
        "grid": ("Learning-rate grids", f"The dev measure (simulated chain length) of seed 0 after {design.main} "
                 "steps, per learning rate (one column each); the best rate (in bold) is chosen, and a best rate "
                 "at the grid's edge "
                 + ("extends the grid x3 until the best is interior, then a half step each side of it for the "
                    "primary arms and EAGLE-3 (amendment 1)." if amended else "extends the grid once.")
                 + _still_at_edge(design, tables.get("grid"), said=said)),
        "curve": ("The learning curve", f"Seed 0 of {', '.join((*design.primary, design.reference))} at every "
                  "annealed budget, tau on the 25-node tree (the other arms' are in `curve.csv`). "
                  + _curve_rates(design, tables) + " " + _tokens_seen(tables.get("curve"))),
        "fits": ("tau at the paper's budget", "Seed 0's annealed points (each arm at its curve's rate) fitted by "
                 "a log-linear law, a power law in tau - 1 and "
                 + ("a saturating power law" if _points(tables.get("fits")) >= 4 else
                    f"(from four points; each curve here has {_points(tables.get('fits'))}) a saturating one")
                 + ", each read at the paper's 1.18B answer tokens" + _beyond(tables.get("curve"))
                 + ": how far apart the forms land is the message, not a prediction; a reading above the tree's "
                 "largest tau "
                 f"({_ceiling(tables.get('fits'))}) is no value tau can take. The gain per doubling is the power "
                 "law's (EAGLE-3's published data scaling: about +7%). Beside them, seed 0's tau ratio from twice "
                 "the steps and from twice the unique data" + _seed_noise(design, tables.get("spread")) + "."),
        "data": ("Data or repetition", "The tau ratio from twice the steps beside the one from twice the unique "
                 "data, seed 0, each arm at its curve's rate."),
        "speed_claims": ("The speed claims on this CPU", _cpu_speed_note(tables.get("speed_claims"))),
        "speedups": ("Speed over plain decoding, every draft and baseline", "The geometric mean over the "
                     "evaluation's prompts of plain decoding's time over the method's, averaged in logs over the "
                     "seeds, with its 95% interval over seeds and prompts; tau on the same runs. `suffix+ARM` is "
                     "the arm's seed 0 behind the suffix cache."),
        "tree_choice": ("How each draft's tree was chosen", "Seed 0 of each timed arm on every candidate tree, "
                        "timed against plain decoding on dev prompts the evaluation never sees: the fastest is "
                        "chosen. The fit's predicted speedup stands beside the measured one (of the decoding "
                        "steps alone, what the fit models); a fitted tree of one node is the one-token chain, timed "
                        "once."),
        "replicate": ("The machine", "One seed trained again on another CPU kind from the same data, settings and "
                      "seed, replayed alike: its tau beside the first run's, and the arm's seed-to-seed standard "
                      "deviation at that budget and tree (descriptive)."),
        "speed": ("Speed of the primary pair at the 25-node tree", _speed_note(tables.get("speed"), design)),
        "published": ("The published drafts", "`results/study/drafts/`, bf16: seed 0 of every arm with a grid of "
                      "its own, tau replayed from it by `clover2 study check` beside the committed tau of the run it "
                      "came from."
                      + (" The arms without one of Clover-2's parts are ablations, not drafts to use, and are not "
                         "published (20 MB each); each can be trained again from the study's profile (`profile.yaml`) "
                         "and its row in `runs.csv`."
                         if any(s.lr_from for s in design.arms.values()) else ""))}
    shown = {"verdicts": lambda d: d[d.family != "primary"],  # the primary pair is above, in words
             "spread": lambda d: d[d.budget.isin(design.budgets) & (d.share == 1)],  # curve points: below
             "curve": lambda d: d[d.arm.isin((*design.primary, design.reference))]}
    data = tables.get("data", pd.DataFrame())
    for key, (title, note) in names.items():  # a table with nothing in it yet is left out
        table = tables.get(key, pd.DataFrame())
        table = shown.get(key, lambda d: d)(table) if not table.empty else table
        if key == "data" and not tables.get("fits", pd.DataFrame()).empty:
            continue  # beside the fits, in one table
        if not table.empty:
            frame = readable(key, table)
            if key == "fits" and not data.empty:
                frame = frame.merge(data, on="arm", how="outer").fillna("")
            if key == "published" and frame["replayed on"].nunique() == 1:  # said once, not on every row
                note += f" Replayed on {frame['replayed on'].iloc[0]}."
                frame = frame.drop(columns=["replayed on"])
            lines += ["", f"## {title}", "", note, "", markdown(frame)]
    if not left.empty:
        runs = left.groupby("arm", sort=False).run.size()
        todo = (f"{len(left)} run{'s' * (len(left) != 1)} ({int(left.steps.isna().sum())} of them wait for their "
                f"arm's learning rate), {int(left.steps.sum()):,} training steps planned for the others; by arm: "
                + ", ".join(f"{arm} {n}" for arm, n in runs.items()) + ".")
        lines += ["", "## Not finished", "", todo + cut + " `clover2 study status` lists every run.", ""]
    elif tables.get("speed_claims", pd.DataFrame()).empty and design.speed_claims is not None:
        lines += ["", "The speed claims are timed last, alone on the machine (the next `clover2 study run`).", ""]
    while lines and not lines[-1]:  # one blank line before the next heading
        lines.pop()
    lines += ["", "## How and where it ran", "",
              f"Generated from `results/study/runs.csv` and `replays.csv` by `clover2 study report`. Trained in "
              f"fp32, code at {commits} (each run's in `runs.csv`); by CPU (wall clock: `runs.csv`, and each "
              f"stretch of `clover2 study run`, logged in `sittings.csv` since 2026-12-04): {machine}.", ""]
    if downloads:
        link = lambda path, text=None: f"{{download}}`{text or path.rpartition('/')[2]} <{path}>`"  # noqa: E731
        groups: dict[str, list[str]] = {}
        for path in downloads:
            groups.setdefault(path.rpartition("/")[0], []).append(path)
        rows = [f"- **{folder or 'tables'}**: " + ", ".join(map(link, paths)) for folder, paths in groups.items()]
        lines += ["## The files behind this page", "",
                  "Every table above and the published drafts, as the study wrote them (the columns: "
                  "`results/README.md`; a draft's folder, both files, loads with `clover2.load_draft`):", "",
                  *rows, ""]
    return "\n".join(lines)
