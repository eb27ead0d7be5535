"""The research workflow behind the notebooks: one profile, its target, data, drafts and results.

Notebooks stay thin: a `parameters` cell, then `study = Study.open(profile, target=...)`, which
checks every parameter at once (an unknown profile, a target path that does not exist, a drafts
folder holding drafts for another target), so a bad one fails in the first cell with a clear
message. Every long step is resumable and cached: data under `$CLOVER2_CACHE/data/<profile>`,
drafts under `$CLOVER2_CACHE/drafts/<profile>/<variant>`; what the book shows goes to
`results/<profile>/`.

Draft *variants* are the architectures and the paper's ablations, each a name for an architecture
plus the `DraftConfig` switches it changes (`VARIANTS`); all train on the same data with the same
budget, so that every difference comes from the architecture or the loss.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from clover2.errors import Clover2Error
from clover2.profiles import Profile, load_profile
from clover2.target import Target, cache_root, load_target

REPO = Path(__file__).resolve().parent.parent

VARIANTS: dict[str, tuple[str, dict]] = {
    # the architectures compared in the paper
    "medusa": ("medusa", {}),
    "eagle1": ("eagle1", {}),
    "clover1": ("clover1", {}),
    "clover2": ("clover2", {}),
    # Clover-2 with one enhancement removed (the paper's ablation table)
    "clover2-extraction-after": ("clover2", {"extraction": "after"}),  # token fused after the block
    "clover2-no-projector": ("clover2", {"output_projector": False}),  # no FC output projectors
    "clover2-1-layer-block": ("clover2", {"aug_layers": 1}),  # the weaker Augmenting Block
    "clover2-hard-labels": ("clover2", {"loss": "hard", "regression_weight": 0.0}),  # no distillation
    # the distillation loss's other parts
    "clover2-no-regression": ("clover2", {"regression_weight": 0.0}),
    "clover2-no-decay": ("clover2", {"head_decay": 1.0}),
    # embedding and vocabulary options
    "clover2-input-embedding": ("clover2", {"embedding": "input"}),
    "clover2-full-vocab": ("clover2", {"draft_vocab": 0}),
}


@dataclass
class Study:
    profile: Profile
    target: Target
    results: Path  # results/<profile>: what the book shows
    data_dir: Path  # the self-distilled data (cache)
    drafts_dir: Path  # one folder per variant (cache)

    @classmethod
    def open(cls, profile: str = "smoke", *, target: str | None = None, drafts: str | Path | None = None,
             results: str | Path | None = None) -> Study:
        """Check the parameters and load the target: the first cell of every notebook."""
        prof = load_profile(profile)
        study = cls(profile=prof, target=load_target(target or prof.target, dtype=prof.dtype, device=prof.device),
                    results=Path(results) if results else REPO / "results" / prof.name,
                    data_dir=cache_root() / "data" / prof.name,
                    drafts_dir=Path(drafts) if drafts else cache_root() / "drafts" / prof.name)
        study._check_drafts()
        return study

    def _check_drafts(self) -> None:
        """Drafts already in the drafts folder must belong to this target."""
        from clover2.checkpoint import load_draft

        for sidecar in sorted(self.drafts_dir.glob("*/draft.json")):
            load_draft(sidecar.parent, self.target)

    # -- data and drafts ----------------------------------------------------------------------

    def prepare_data(self) -> dict:
        """The target answers the profile's ShareGPT prompts (resumes; instant when done)."""
        from clover2.corpora import sharegpt_user_turns
        from clover2.data import prepare_data

        return prepare_data(self.target, sharegpt_user_turns(), self.data_dir, self.profile.data)

    def draft(self, variant: str) -> Path:
        """The trained draft of `variant`, training it first if needed (resumes an interrupted run).
        Its sidecar and metrics log are copied to results/<profile>/drafts/<variant>/."""
        from clover2.train import train

        if variant not in VARIANTS:
            raise Clover2Error(f"unknown draft variant {variant!r}; known: {', '.join(VARIANTS)}")
        arch, overrides = VARIANTS[variant]
        config = self.profile.draft_config(arch, **overrides)
        out = self.drafts_dir / variant
        sidecar = out / "draft.json"
        if sidecar.exists():
            meta = json.loads(sidecar.read_text())
            if not (_same(meta.get("draft_config"), _jsonable(config))
                    and _same(meta.get("train_config"), _jsonable(self.profile.train))):
                raise Clover2Error(f"{out} holds a {variant} draft trained with other settings than profile "
                                   f"{self.profile.name!r}; move it away (or pass another drafts folder) to retrain")
        else:
            self.prepare_data()
            train(self.target, self.data_dir, out, config, self.profile.train)
        keep = self.results / "drafts" / variant
        keep.mkdir(parents=True, exist_ok=True)
        for name in ("draft.json", "metrics.jsonl"):
            shutil.copyfile(out / name, keep / name)
        return out

    def metrics(self, variants: list[str]) -> pd.DataFrame:
        """Training logs of the variants, one row per evaluation, in long form per head."""
        rows = []
        for v in variants:
            for line in (self.results / "drafts" / v / "metrics.jsonl").read_text().splitlines():
                m = json.loads(line)
                heads = sorted({int(k.split("_")[1][4:]) for k in m if k.startswith("eval_head")})
                rows += [{"variant": v, "step": m["step"], "train_seconds": m["train_seconds"], "head": h,
                          "loss": m.get(f"eval_head{h}_loss"), "top1": m.get(f"eval_head{h}_top1"),
                          "top5": m.get(f"eval_head{h}_top5")} for h in heads]
        return pd.DataFrame(rows)

    # -- measurements -------------------------------------------------------------------------

    def tau(self, variants: list[str], *, tasks: tuple[str, ...] | None = None, n_per_task: int | None = None,
            max_new_tokens: int | None = None, tree: str = "eagle25") -> pd.DataFrame:
        """Greedy tau (tokens per target forward, bonus included) of each variant per task, on the same
        prompts and tree. Greedy tau does not depend on timing, so no plain-decoding pairs are needed."""
        from clover2.bench import parse_tree
        from clover2.checkpoint import load_draft
        from clover2.decode import DecodeConfig, generate
        from clover2.model_drafter import ModelDrafter
        from clover2.tasks import load_task

        n_per_task = n_per_task or self.profile.study.ablation_n_per_task
        max_new_tokens = max_new_tokens or self.profile.study.ablation_max_new_tokens
        records = [r for t in (tasks or self.profile.bench.tasks) for r in load_task(t, n_per_task)]
        prompts = [(r.category, self.target.encode_chat([{"role": "user", "content": r.turns[0]}])) for r in records]
        config, shape, rows = DecodeConfig(max_new_tokens=max_new_tokens), parse_tree(tree), []
        for v in variants:
            model = load_draft(self.draft(v), self.target)
            for task, ids in tqdm(prompts, desc=f"tau {v}", unit="prompt"):
                g = generate(self.target, ModelDrafter(model, shape), ids, config)
                rows.append({"variant": v, "task": task, "tokens": len(g.output_ids), "steps": len(g.steps)})
        df = pd.DataFrame(rows)
        per_task = df.groupby(["variant", "task"], sort=False)[["tokens", "steps"]].sum().reset_index()
        overall = df.groupby("variant", sort=False)[["tokens", "steps"]].sum().reset_index().assign(task="overall")
        out = pd.concat([per_task, overall], ignore_index=True)
        out["tau"] = out.tokens / out.steps
        return out

    def bench(self, name: str = "bench", *, rerun: bool = False, **overrides) -> pd.DataFrame:
        """The profile's benchmark (fields of BenchConfig overridable) into results/<profile>/<name>/.
        Drafts it names are trained first. A finished run with the same settings and target is
        read back instead of measured again, unless `rerun`."""
        from clover2.bench import DRAFT_ARCHS, parse_method, run_bench

        config = replace(self.profile.bench, **overrides)
        out = self.results / name
        if not rerun and (out / "bench.csv").exists() and (out / "env.json").exists():
            env = json.loads((out / "env.json").read_text())
            if env.get("bench") == _jsonable(config) and env.get("target") == self.target.name:
                return pd.read_csv(out / "bench.csv")
        for spec in config.methods:
            arch, _, _, path = parse_method(spec)
            if arch in DRAFT_ARCHS and path is None:
                self.draft(arch)
        return run_bench(self.target, config, self.drafts_dir, out)



def _jsonable(config) -> dict:
    """A config dataclass as its JSON sidecar stores it (tuples become lists)."""
    return json.loads(json.dumps(asdict(config)))


def _same(stored: dict | None, current: dict) -> bool:
    """Whether a stored config matches the current one (settings since removed from the code are ignored)."""
    return stored is not None and all(stored.get(k) == v for k, v in current.items())
