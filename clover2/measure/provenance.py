"""What every number is recorded with: the machine, the versions, the commit, and the code's own hash.

`code_version(parts)` hashes the source of the named parts of clover2 (subpackages or modules):
cache entries (data, drafts, benchmark runs) are keyed by it, so changed code never reuses an
entry made by older code, while a change elsewhere in the package leaves the entry valid.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import os
import platform
import re
import subprocess
from pathlib import Path

import torch
import transformers

from clover2 import __version__
from clover2.decoding.kernels import cpuinfo
from clover2.decoding.target import Target
from clover2.paths import repo_root

PACKAGE = Path(__file__).resolve().parent.parent


@functools.cache
def code_version(*parts: str) -> str:
    """A short hash of the source files of `parts` ("decoding", "drafts", "training/data.py", ...;
    none: all of clover2)."""
    roots = [PACKAGE / p for p in parts] or [PACKAGE]
    files = sorted({f for r in roots for f in ([r] if r.is_file() else r.rglob("*.py"))})
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def commit() -> str:
    """The checkout's commit (`-dirty` with uncommitted changes to what runs: outside `results/`, which runs
    write into, the book's prose and the README), or the installed version's."""
    root = repo_root()
    if root is None:
        return __version__  # setuptools-scm puts the commit into the version of a package built from git
    git = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()  # noqa: E731
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results", ":(exclude)book",
                ":(exclude)README.md")
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")


# The CPU flags a run's speed depends on (vector width, native bf16 and fp16, matrix tiles), recorded where present
CPU_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_int8")


def machine() -> dict:
    """What decides the speed of a run: the processor (its model name, vendor, family, model and
    stepping, the `CPU_FLAGS` it has, and `cpu_name`, a short name derived from them), threads,
    accelerator."""
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    cpu = {"cpu": info.get("model name") or platform.processor(), "cpu_vendor": info.get("vendor_id", ""),
           **{f"cpu_{k}": int(info[field]) if info.get(field, "").isdigit() else None
              for k, field in (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))},
           "cpu_flags": [f for f in CPU_FLAGS if f in flags]}
    return {**cpu, "cpu_name": cpu_name(cpu), "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def cpu_name(cpu: dict) -> str:
    """A short name that tells machines apart where the model name does not ("AMD EPYC Processor"
    is a Zen 3 or a Zen 4): the brand, AMD's microarchitecture from family and model, and the
    widest vector and matrix units, e.g. "Intel Xeon (AVX-512, AMX-BF16)", "AMD EPYC Zen 3 (AVX2)",
    "AMD EPYC Zen 4 (AVX-512 BF16)". `cpu`: `machine()`'s cpu_* fields."""
    model_name, family, model = cpu.get("cpu", ""), cpu.get("cpu_family"), cpu.get("cpu_model")
    brand = next((b for b in ("Xeon", "Core", "EPYC", "Ryzen") if b.lower() in model_name.lower()), "")
    maker = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(cpu.get("cpu_vendor", ""), "")
    if not maker:  # another architecture: its model name, trademarks dropped
        return re.sub(r"\((R|TM)\)| Processor", "", model_name).strip() or "unknown CPU"
    arch = ""
    if maker == "AMD" and family == 25 and model is not None:
        arch = "Zen 3" if model <= 0x0F or 0x20 <= model <= 0x5F else "Zen 4" if model <= 0xAF else ""
    elif maker == "AMD" and family == 26:
        arch = "Zen 5"
    elif maker == "AMD" and family == 23 and model is not None:
        arch = "Zen 2" if model >= 0x30 else "Zen"
    flags = set(cpu.get("cpu_flags", ()))
    units = ("AVX-512, AMX-BF16" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags
             else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "")
    return " ".join(x for x in (maker, brand, arch) if x) + (f" ({units})" if units else "")


def environment(target: Target) -> dict:
    """Hardware, versions and commit, recorded beside every number."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **machine(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "target": target.name, "dtype": str(target.dtype).removeprefix("torch."),
            "device": str(target.device), "kernels": target.kernel_record(), "commit": commit(), "clover2": __version__,
            "load_average_1m": os.getloadavg()[0]}  # other work on the machine biases every comparison


