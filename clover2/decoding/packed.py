"""Pre-packed linear layers: the target's weights laid out once for oneDNN's CPU matmul kernels.

A decoding step of a small model on a CPU reads every weight from memory once, so verifying a
handful of tokens should cost about what one token does. With the stock `F.linear` it does not:
for 4-16 rows its GEMM re-lays out (packs) the weight on every call, and the SmolLM2 forward of 8
tokens costs ~2x one token's on a 2-core Xeon. oneDNN with the weight re-ordered once into its
blocked layout (what torch.compile's freezing pass does for CPU linears) skips that work: on the
49152x576 LM head, 8 rows took 7.6 ms instead of 21 ms (1 row: 5 ms either way).

`pack_linears(model)` gives every `nn.Linear` of a frozen model a packed copy of its weight and a
forward that uses it for calls of `MIN_ROWS` rows or more. No modeling file is touched and the
original parameters stay in place (state dict, tied embeddings, fingerprints), at the price of a
second copy of the linear weights in memory. Results differ from the stock kernel's only in float
rounding, as the stock kernel's own 1-row and many-row paths already do; the greedy exactness
tests (speculative output == plain greedy output, fp32) run on this path.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from clover2.errors import Clover2Error

KERNELS = ("auto", "packed", "stock")
# Fewer rows than this go through the stock kernel: for 1-3 rows MKL's own gemv/gemm reads the
# weights as fast as oneDNN's packed kernel or faster (2-core Xeon: a whole SmolLM2 forward of 1
# token took 52 ms stock vs 63 ms packed, of 8 tokens 102 ms stock vs 83 ms packed).
MIN_ROWS = 4


def packing_available(dtype: torch.dtype, device: torch.device | str) -> bool:
    """oneDNN packs CPU weights in fp32, and in bf16 where the CPU computes it natively."""
    from clover2.decoding.target import cpu_has_native_bf16

    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and cpu_has_native_bf16())


def resolve_kernels(kernels: str, dtype: torch.dtype, device: torch.device | str) -> str:
    """`auto` is `packed` where oneDNN can pack these weights, else `stock`."""
    if kernels not in KERNELS:
        raise Clover2Error(f"unknown kernels {kernels!r}: use one of {', '.join(KERNELS)}")
    if kernels == "packed" and not packing_available(dtype, device):
        raise Clover2Error(f"kernels 'packed' needs a CPU with oneDNN and fp32 weights (or bf16 on a CPU "
                           f"with native bf16); got {dtype} on {device}: use kernels 'stock' or 'auto'")
    if kernels == "auto":
        return "packed" if packing_available(dtype, device) else "stock"
    return kernels


def pack_linears(model: torch.nn.Module) -> int:
    """Give every `nn.Linear` of `model` a pre-packed weight and a forward that uses it; returns how many.

    Call it once the weights are final (after any adapter merge and device move): a packed copy
    does not follow later changes to its parameter, so the model must stay frozen."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and not hasattr(module, "packed_weight"):
            module.packed_weight = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach())
            module.forward = types.MethodType(_packed_forward, module)
            count += 1
    return count


def _packed_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.numel() < MIN_ROWS * x.shape[-1] or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
        return F.linear(x, self.weight, self.bias)  # few rows; or a gradient, which oneDNN's packed call lacks
    return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")
