"""What every draft architecture computes, fingerprinted on the tiny targets: training outputs and
gradients (noise on, a fixed seed) and the decode path's logits and states at depths 0-2. The file
`tests/data/formulation.safetensors` holds them as the code computed them before training and
decoding were written as one formulation (`clover2.drafts.base`); `test_drafts` checks the code
still computes them. Regenerate only for an intended change of what a draft computes:

    python tests/formulation.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import FAMILIES, tiny_target
from safetensors.torch import save_file

from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.base import TreeAttention
from clover2.drafts.config import DraftConfig

FILE = Path(__file__).parent / "data" / "formulation.safetensors"
IDS = [5, 17, 33, 2, 71, 8, 40, 40, 12, 90, 3, 64, 27, 55, 9, 81]  # 16 tokens of the tiny vocabulary


def fingerprint(target, arch: str) -> dict[str, torch.Tensor]:
    """Outputs of a perturbed fresh draft: per trained depth (its own count and 3) every 5th position's
    first 16 output dimensions, each parameter's gradient norm, and the decode path at position 9."""
    torch.manual_seed(1)
    model = build_draft(DraftConfig.for_arch(arch, num_heads=3, input_noise=0.1), target)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    ids = torch.tensor([IDS, IDS[::-1]])
    n = ids.shape[1]
    with torch.no_grad():
        h = target.forward(ids, torch.arange(n)[None].expand(2, -1), target.causal_mask(n).expand(2, -1, -1, -1),
                           target.new_cache(), hidden=True, layers=model.hidden_layers).hidden
    out = {}
    for steps in (0, 3):
        model.train()
        model.zero_grad()
        torch.manual_seed(5)
        outs = [o[:, :n - 1 - i] for i, o in enumerate(model(h, ids.roll(-1, 1), steps=steps))]
        sum((model.logits(o) ** 2).mean() + o.pow(2).mean() for o in outs).backward()
        out |= {f"train{steps}/depth{i}": o[:, ::5, :16].detach() for i, o in enumerate(outs)}
        out |= {f"grad{steps}/{name}": p.grad.norm()[None]
                for name, p in model.named_parameters() if p.grad is not None}
    model.eval()
    with torch.no_grad():
        cache, t = model.new_cache(), 9
        root = model.advance(h[:1, :t + 1], ids[:1, 1:t + 2], cache)
        committed = cache.get_seq_length()
        state, out["decode/logits0"] = root, model.root_logits(root)[0]
        for d in (1, 2):
            attention = TreeAttention(committed, [list(range(committed, committed + d - 1))])
            state, logits = model.step(state, ids[0, t + 1 + d:t + 2 + d], d, cache=cache, attention=attention)
            out[f"decode/logits{d}"], out[f"decode/state{d}"] = logits[0], state[0]
    return out


def all_fingerprints() -> dict[str, torch.Tensor]:
    return {f"{family}/{arch}/{k}": v.clone() for family in FAMILIES for arch in ARCHITECTURES
            for k, v in fingerprint(tiny_target(family), arch).items()}


if __name__ == "__main__":
    FILE.parent.mkdir(exist_ok=True)
    save_file(all_fingerprints(), FILE)
