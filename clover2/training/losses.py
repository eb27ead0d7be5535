"""Draft losses as pure functions of head outputs and a batch (no state, no model calls).

Alignment: head i's output at position t predicts x_{t+2+i}. Its targets sit at u = t + 1 + i:
the target's (normed) hidden state h_u, its next-token distribution at u (which is over x_{u+1}),
and the data token x_{u+1}. The official Clover-2 loss is, per head i,

    0.7^i * (10 * SmoothL1(o_i, norm(h_u)) + 1 * soft-CE(p_target(.|u), q_i))

where soft-CE is -sum_v p(v) log q(v) over the stored top-k of p (forward KL up to a constant).
EAGLE-3's (`loss: eagle3`) renormalizes p over the draft vocabulary and counts only the positions
whose target top-1 lies inside it.
All losses are normalized by the number of positions that count (`denominator`), which callers
may pass in globally so that data-parallel ranks add up to the single-process loss exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clover2.training.data import Batch


def head_slices(batch: Batch, i: int, length: int) -> dict[str, torch.Tensor]:
    """Batch fields aligned with head i's outputs at positions t = 0..length-1 (targets at u = t+1+i)."""
    u = slice(1 + i, 1 + i + length)
    return {"topk_ids": batch.topk_ids[:, u], "topk_p": batch.topk_p[:, u], "label_ids": batch.label_ids[:, u],
            "mask": batch.mask[:, u]}


def soft_ce(logits: torch.Tensor, topk_ids: torch.Tensor, topk_p: torch.Tensor, *,
            renormalize: bool = False) -> torch.Tensor:
    """Per-position -sum_k p_k log q(id_k); tokens outside the draft vocabulary drop out (with
    `renormalize`, the p of the tokens inside are rescaled to sum to 1). `(..., V) -> (...)`."""
    logq = torch.log_softmax(logits, dim=-1)
    inside = topk_ids >= 0
    p = topk_p * inside
    if renormalize:
        p = p / p.sum(-1, keepdim=True).clamp(min=1e-12)
    return -(p * logq.gather(-1, topk_ids.clamp(min=0))).sum(-1)


def hard_ce(logits: torch.Tensor, label_ids: torch.Tensor) -> torch.Tensor:
    """Per-position cross-entropy on the data token; 0 where it is outside the draft vocabulary."""
    ce = F.cross_entropy(logits.flatten(0, -2), label_ids.clamp(min=0).flatten(), reduction="none")
    return ce.view(label_ids.shape) * (label_ids >= 0)


def regression(o: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-position SmoothL1 (beta 1), averaged over the hidden dimension."""
    return F.smooth_l1_loss(o, target, reduction="none").mean(-1)


def draft_loss(config, outs: list[torch.Tensor], lm_head, reg_targets: torch.Tensor | None, batch: Batch, *,
               denominator: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The configured loss over all trained heads, and per-head metrics (loss, top-1, top-5).

    The LM head (`lm_head`: head outputs -> draft-vocabulary logits) runs only at the positions that
    count: prompt and padding positions never reach it, which halves the cost of a training step.
    `reg_targets` may be None when `config.regression_weight` is 0.
    """
    total = outs[0].new_zeros(())
    metrics: dict[str, float] = {}
    for i, o in enumerate(outs):
        n = min(o.shape[1], batch.mask.shape[1] - 1 - i)
        tgt = head_slices(batch, i, n)
        m = tgt["mask"]
        denom = denominator[i] if denominator is not None else m.sum().clamp(min=1)
        o_m = o[:, :n][m]  # (K, H) outputs at the positions that count
        lg = lm_head(o_m)  # (K, V_draft)
        if config.loss == "eagle3":  # the target's top-1 inside the draft vocabulary, p renormalized there
            ids = tgt["topk_ids"][m]
            per_pos = config.ce_weight * soft_ce(lg, ids, tgt["topk_p"][m], renormalize=True) * (ids[:, 0] >= 0)
        elif config.loss in ("distill", "eagle"):
            per_pos = config.ce_weight * soft_ce(lg, tgt["topk_ids"][m], tgt["topk_p"][m])
        else:
            per_pos = config.ce_weight * hard_ce(lg, tgt["label_ids"][m])
        if config.regression_weight:
            per_pos = per_pos + config.regression_weight * regression(o_m, reg_targets[:, 1 + i:1 + i + n][m])
        head_loss = per_pos.sum() / denom
        total = total + config.head_decay ** i * head_loss
        with torch.no_grad():
            best = tgt["topk_ids"][m][:, 0]  # the target's own top-1 (what greedy verification accepts)
            top5 = lg.topk(min(5, lg.shape[-1]), dim=-1).indices
            count = max(1, int(m.sum()))
            metrics[f"head{i}_loss"] = head_loss.item()
            metrics[f"head{i}_top1"] = (top5[:, 0] == best).sum().item() / count
            metrics[f"head{i}_top5"] = (top5 == best[:, None]).any(-1).sum().item() / count
    metrics["loss"] = total.item()
    return total, metrics


def head_counts(batch: Batch, heads: int) -> torch.Tensor:
    """Positions that count for each head: the data-parallel denominator, before all-reduce."""
    T = batch.mask.shape[1]
    return torch.stack([batch.mask[:, 1 + i:].float().sum() for i in range(heads)]) if T > heads else \
        torch.ones(heads)
