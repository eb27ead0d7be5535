"""What every draft architecture computes, fingerprinted on the tiny targets: training outputs and
gradients (noise on, a fixed seed) and the decode path's logits and states at depths 0-2. The file
`tests/data/formulation.json` holds them as the code computed them before training and
decoding were written as one formulation (`clover2.drafts.base`); `test_drafts` checks the code
still computes them. Regenerate only for an intended change of what a draft computes:

    python tests/formulation.py
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import FAMILIES, tiny_target

from clover2.drafts import ARCHITECTURES, build_draft
from clover2.drafts.base import TreeAttention
from clover2.drafts.config import DraftConfig

FILE = Path(__file__).parent / "data" / "formulation.json"
IDS = [5, 17, 33, 2, 71, 8, 40, 40, 12, 90, 3, 64, 27, 55, 9, 81]  # 16 tokens of the tiny vocabulary


def decode_path(model, h, ids, t, depth):
    """Logits of the children at depths 0..depth along the data path x_{t+2}, x_{t+3}, ... through the
    decode path (advance, root_logits, step with the draft's cache), and the states it fed back; `h`
    and `ids` of one sequence `(1, n, ·)`, `(1, n)`."""
    cache = model.new_cache()
    root = model.advance(h[:, :t + 1], ids[:, 1:t + 2], cache)
    committed = cache.get_seq_length()
    logits, states = [model.root_logits(root)[0]], [root[0]]
    for d in range(1, depth + 1):
        attention = TreeAttention(committed, torch.ones(1, d - 1, dtype=torch.bool))  # a chain: every earlier step
        s, lg = model.step(states[-1][None], ids[0, t + 1 + d:t + 2 + d], d, cache=cache, attention=attention)
        logits.append(lg[0])
        states.append(s[0])
    return logits, states


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
        logits, states = decode_path(model, h[:1], ids[:1], 9, 2)
    out |= {f"decode/logits{d}": x for d, x in enumerate(logits)}
    out |= {f"decode/state{d}": x for d, x in enumerate(states) if d}
    return out


def load() -> dict[str, torch.Tensor]:
    """The fingerprints as the file holds them."""
    return {k: torch.tensor(v["values"]).reshape(v["shape"]) for k, v in json.loads(FILE.read_text()).items()}


def save(fingerprints: dict[str, torch.Tensor]) -> None:
    FILE.parent.mkdir(exist_ok=True)
    FILE.write_text(json.dumps({k: {"shape": list(v.shape), "values": [float(f"{x:.9g}") for x in v.flatten().tolist()]}
                                for k, v in fingerprints.items()}, separators=(",", ":")) + "\n")


def all_fingerprints() -> dict[str, torch.Tensor]:
    return {f"{family}/{arch}/{k}": v.clone() for family in FAMILIES for arch in ARCHITECTURES
            for k, v in fingerprint(tiny_target(family), arch).items()}


if __name__ == "__main__":
    save(all_fingerprints())
