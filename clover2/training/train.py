"""Training a draft by distillation: AdamW with warm-up, value clipping, a step or wall-clock budget,
held-out evaluation, atomic checkpoints that resume exactly, and data parallelism with torchrun.

Data parallel: every rank takes an equal slice of each global batch, losses are normalized by the
*global* count of positions that count, and DistributedDataParallel averages gradients, so N ranks
compute the same update as one process with the same global batch. On CPU the backend is gloo,
on GPU nccl. Run `torchrun --nproc-per-node N -m clover2.cli train ...`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from clover2.decoding.kernels import native_bf16
from clover2.decoding.target import Target
from clover2.drafts import build_draft
from clover2.drafts.base import BORROWED, DraftModel
from clover2.drafts.checkpoint import save_draft
from clover2.drafts.config import DraftConfig
from clover2.errors import Clover2Error
from clover2.files import atomic_path, same_config
from clover2.training.data import SOURCES, Batch, DistillData
from clover2.training.losses import draft_loss, head_counts, head_slices
from clover2.training.vocab import ranked_tokens


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 1e-3  # official Clover-2 learning rate
    betas: tuple[float, float] = (0.9, 0.95)  # official AdamW betas
    weight_decay: float = 0.01  # AdamW's default
    warmup_steps: int = 50  # linear warm-up from 0
    # after warm-up: "constant" (the official schedule is ~constant over its run), a decay to 0 at
    # the last step, "linear" or "cosine" (standard at small budgets), or "wsd": constant, then a
    # linear decay to 0 over the last `decay_share` of the run (one long run for learning curves)
    schedule: str = "constant"
    decay_share: float = 0.2  # wsd: the share of the run spent decaying
    clip_value: float = 0.5  # clip_grad_value_ as in the official code
    batch_size: int = 8  # sequences per global batch (split across ranks)
    max_len: int = 640  # tokens per sequence (longer ones are cut)
    max_steps: int = 0  # stop after this many steps (0: no step limit)
    max_minutes: float = 0.0  # stop after this much training time (0: no time limit)
    epochs: int = 21  # official epoch count; the step/time budget usually ends training first
    eval_every: int = 100  # steps between held-out evaluations (and checkpoints)
    checkpoint_every: int = 0  # steps between further checkpoints, without an evaluation (0: none)
    eval_batches: int = 0  # held-out batches per evaluation (0: the whole held-out set)
    held_out: float = 0.05  # share of sequences held out
    # bf16 autocast: True, False, or "auto": both timed on the first batch and the faster kept (on
    # CPUs it pays only where bf16 is native; a CPU that only emulates it keeps fp32 untimed: there a
    # bf16 step is many times slower; the README has the measurements)
    autocast_bf16: bool | str = False
    keep_best: bool = False  # the saved draft is the one with the lowest held-out loss, not the last
    # drop answer tokens outside the target's top-k from the training loss (what the official code's
    # unused --label_mask option intends); held-out evaluation always counts every answer token
    label_mask: bool = False
    # each of the target's own answers is drawn this many times per epoch (a corpus conversation once)
    self_weight: int = 1
    # the parts of the data trained on: "corpus" (conversations as they are) and "self" (the
    # target's own answers); one part alone is the other arm of a data A/B on the same folder
    sources: tuple[str, ...] = SOURCES
    # batches of similar lengths: each run of length_groups x batch_size shuffled sequences is sorted
    # by length and cut into batches, then the batches are shuffled (less padding; 0: off)
    length_groups: int = 0
    # training-time test (EAGLE-3's): the heads (decode depths) trained, each on the draft's own states
    # where its decoding feeds them back. 0: the architecture's own (EAGLE-1 1, EAGLE-3 7, Clover-2 and
    # Medusa their num_heads); k: k of them (EAGLE-1 + TTT; Clover-2's regressive heads already run on
    # their own states, so k there is how many of them train; Medusa's heads are its depths: at most num_heads)
    ttt_steps: int = 0
    seed: int = 0

    # -- What the research studies vary, or keep on the way; training one draft leaves them be. -------
    # steps at which the draft of that moment is also saved, with its held-out evaluation, into
    # OUT/snapshots/step_NNNNNN (a loadable draft each): the points of a learning curve
    snapshots: tuple[int, ...] = ()
    # steps at which the whole training state (weights, optimizer, schedule, random state) is also
    # kept, in OUT/states/step_NNNNNN.pt: a later run with another budget starts from it (`start_from`)
    states: tuple[int, ...] = ()
    # the share of the training sequences trained on: a fixed subset (the same for every seed and
    # architecture), to vary the unique data at equal steps (1: all of them)
    data_share: float = 1.0

    def __post_init__(self):
        if self.lr <= 0 or self.batch_size < 1 or self.max_len < 8 or self.eval_every < 1 or self.checkpoint_every < 0:
            raise Clover2Error(f"train config: need lr > 0, batch_size >= 1, max_len >= 8, eval_every >= 1, "
                               f"checkpoint_every >= 0: {self}")
        if min(self.max_steps, self.max_minutes, self.epochs) < 0:
            raise Clover2Error(f"train config: max_steps, max_minutes and epochs must be >= 0: {self}")
        if not self.max_steps and not self.max_minutes and self.epochs < 1:
            raise Clover2Error("train config: give max_steps, max_minutes or epochs")
        if self.autocast_bf16 not in (True, False, "auto"):
            raise Clover2Error(f"train config: autocast_bf16 must be true, false or auto, got {self.autocast_bf16!r}")
        if self.length_groups < 0:
            raise Clover2Error(f"train config: length_groups must be >= 0, got {self.length_groups}")
        if self.ttt_steps < 0:
            raise Clover2Error("train config: ttt_steps must be >= 0 (0: the architecture's own), "
                               f"got {self.ttt_steps}")
        if self.self_weight < 1:
            raise Clover2Error(f"train config: self_weight must be >= 1, got {self.self_weight}")
        if not self.sources or not set(self.sources) <= set(SOURCES):
            raise Clover2Error(f"train config: sources must be some of {', '.join(SOURCES)}; got {self.sources!r}")
        if self.schedule not in ("constant", "linear", "cosine", "wsd"):
            raise Clover2Error(f"train config: schedule={self.schedule!r}, expected constant, linear, cosine or wsd")
        if not 0 < self.decay_share <= 1 or any(s < 1 for s in (*self.snapshots, *self.states)):
            raise Clover2Error(f"train config: need 0 < decay_share <= 1 and snapshot and state steps >= 1: {self}")
        if not 0 < self.data_share <= 1:
            raise Clover2Error(f"train config: data_share must be in (0, 1], got {self.data_share}")

    def lr_factor(self, step: int, total: int) -> float:
        """The learning rate at `step` (0-based) of `total`, as a fraction of `lr`."""
        warm = min(1.0, (step + 1) / max(1, self.warmup_steps))
        progress = min(1.0, max(0.0, (step + 1 - self.warmup_steps) / max(1, total - self.warmup_steps)))
        tail = min(1.0, (total - step - 1) / max(1.0, self.decay_share * total))
        decay = {"constant": 1.0, "linear": 1.0 - progress, "cosine": 0.5 * (1 + math.cos(math.pi * progress)),
                 "wsd": tail}
        return warm * decay[self.schedule]

    def same_run_until(self, other: TrainConfig, step: int, total: int, other_total: int) -> bool:
        """Whether a run with `other` (of `other_total` steps) trains exactly as this one (of `total`)
        for its first `step` steps: every setting but the budget and what is saved on the way agrees,
        and so do the two learning-rate schedules (a warmup-stable-decay run, say, before either decays)."""
        free = {"max_steps": 0, "max_minutes": 0.0, "snapshots": (), "states": (), "eval_every": 1, "keep_best": False,
                "checkpoint_every": 0}
        return replace(self, **free) == replace(other, **free) and all(
            math.isclose(self.lr_factor(s, total), other.lr_factor(s, other_total)) for s in range(step))


def epoch_order(epoch_idx: list[int], lengths: list[int], config: TrainConfig, epoch: int) -> np.ndarray:
    """The sequences of one epoch in the order they are batched (seeded by the epoch)."""
    rng = np.random.default_rng([config.seed, epoch])
    perm = rng.permutation(epoch_idx)
    if not config.length_groups:
        return perm
    B, group = config.batch_size, config.length_groups * config.batch_size
    runs = [sorted(perm[i:i + group], key=lambda j: -lengths[j]) for i in range(0, len(perm), group)]
    batches = [run[i:i + B] for run in runs for i in range(0, len(run), B)]
    full = [b for b in batches if len(b) == B]  # a short batch at a run's end would break steps_per_epoch
    return np.asarray([j for k in rng.permutation(len(full)) for j in full[k]], dtype=perm.dtype)


def epoch_sequences(train_idx: list[int], source: list[str], self_weight: int) -> list[int]:
    """One epoch of the mix: every corpus conversation once, every self-generated one `self_weight` times."""
    return [i for i in train_idx for _ in range(self_weight if source[i] == "self" else 1)]


def train(target: Target, data_dir: Path | Sequence[Path], out: Path, draft_config: DraftConfig,
          config: TrainConfig, *, eval_dir: Path | None = None, start_from: Path | None = None) -> dict:
    """Train (or resume training) a draft into `out` on one data folder or a mix of several; returns
    the final evaluation metrics.

    Held-out evaluation reads `eval_dir` (the target's own answers to prompts never trained on: the
    distribution the draft meets when decoding), or else a held-out tail of the data.

    `start_from`: a state another run kept (`TrainConfig.states`) from which this one continues, when
    `out` holds no state of its own yet; that run must have trained exactly as this one would up to
    there (`TrainConfig.same_run_until`): a shorter budget branching off a warmup-stable-decay run
    before its decay is the run that would have ended there, decay included."""
    run = _Run.setup(target, data_dir, out, draft_config, config, eval_dir)
    state, best = run.resume(start_from)
    run.ddp = torch.nn.parallel.DistributedDataParallel(run.model) if run.world > 1 else run.model
    bar = tqdm(total=run.total, initial=state["step"], desc=f"train {draft_config.arch}", unit="step",
               disable=run.rank != 0)
    metrics: dict = {}
    if state["bf16"] == "auto":  # chosen once per run, by timing: a resumed run keeps the choice
        state["bf16"] = run.bf16_choice()
    with _sigterm_sets_event() as stop:
        while state["step"] < run.total:
            epoch = state["step"] // run.steps_per_epoch
            state, metrics = run.step(state)
            bar.update(1)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}", top1=f"{metrics.get('head0_top1', 0):.2f}")
            done = state["step"] >= run.total or (config.max_minutes and state["seconds"] >= 60 * config.max_minutes)
            metrics, best = run.evaluate_and_save(state, epoch, metrics, best, evaluate_now=done)
            if done:
                break
            if stop.is_set():  # SIGTERM (`timeout`, a scheduler): keep this step, then stop resumably
                if run.rank == 0:
                    run.save_state(run.checkpoint, state, best)
                raise Clover2Error(f"training stopped by SIGTERM after step {state['step']}; its state is in "
                                   f"{run.checkpoint.parent}: run the same command again to resume")
    bar.close()
    if config.keep_best and "model" in best:  # the weights of the best held-out evaluation
        run.model.load_state_dict(best["model"])
        metrics = best["eval"]
    if run.rank == 0:
        save_draft(out, run.model, target, draft_config,
                   extra=run.provenance | {"train_state": state, "eval": metrics,
                                           "best_step": best.get("step", state["step"])})
    return metrics


@dataclass
class _Run:
    """One training run: its data and their split, the draft, its optimizer and schedule, and the four
    things done with them (resume, step, evaluate and save, keep a state)."""

    target: Target
    out: Path
    draft_config: DraftConfig
    config: TrainConfig
    data: DistillData
    eval_data: DistillData
    eval_idx: list[int]
    model: DraftModel
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    t2d: torch.Tensor  # target id -> draft id (-1: outside the draft vocabulary)
    heads: int  # the heads trained
    fused: bool  # do the batches carry the fused target states (EAGLE-3)?
    epoch_idx: list[int]  # one epoch's sequences (the target's own answers `self_weight` times)
    lengths: list[int]
    steps_per_epoch: int
    total: int  # the run's length in steps
    rank: int
    world: int
    ddp: torch.nn.Module | None = None  # the model as trained (DistributedDataParallel with several ranks)
    order: tuple[int, np.ndarray] | None = None  # (epoch, its batching order)

    @classmethod
    def setup(cls, target: Target, data_dir, out: Path, draft_config: DraftConfig, config: TrainConfig,
              eval_dir: Path | None) -> _Run:
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        if config.batch_size % world:
            raise Clover2Error(f"batch_size {config.batch_size} is not divisible by {world} ranks")
        data = DistillData(*([data_dir] if isinstance(data_dir, (str, Path)) else data_dir))
        eval_data = data if eval_dir is None else DistillData(eval_dir)
        for d in (data, eval_data):
            d.check_target(target)
        if eval_dir is None:
            train_idx, eval_idx = data.split(config.held_out)
        else:
            train_idx, eval_idx = list(range(len(data.sequences))), list(range(len(eval_data.sequences)))
        train_idx = [i for i in train_idx if data.source[i] in config.sources]
        if config.data_share < 1:  # a subset fixed by the data alone: the same for every seed and draft
            share = max(1, round(config.data_share * len(train_idx)))
            train_idx = [train_idx[i] for i in sorted(np.random.default_rng(0).permutation(len(train_idx))[:share])]
        V = target.config.get_text_config().vocab_size
        d2t = None
        if draft_config.draft_vocab:
            d2t = torch.from_numpy(ranked_tokens(data, V, train_idx)[: draft_config.draft_vocab].copy())
        torch.manual_seed(config.seed)
        model = build_draft(draft_config, target, d2t=d2t)
        heads, fused = _trained(model, config)
        model.check_steps(heads)
        for d in (data, eval_data):
            d.check_states(model.hidden_layers)
        model.adapt_to(torch.from_numpy(np.asarray(data.shards[0]["hidden"][:4096], dtype=np.float32)))
        t2d = torch.full((V,), -1, dtype=torch.long)
        t2d[model.d2t] = torch.arange(len(model.d2t))
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
        epoch_idx = epoch_sequences(train_idx, data.source, config.self_weight)
        lengths = [min(b - a, config.max_len) for _, a, b in data.sequences]
        steps_per_epoch = len(epoch_order(epoch_idx, lengths, config, 0)) // config.batch_size
        if steps_per_epoch < 1:
            raise Clover2Error(f"only {len(epoch_idx)} training sequences for a batch of {config.batch_size}")
        total = config.epochs * steps_per_epoch
        total = min(total, config.max_steps) if config.max_steps else total
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: config.lr_factor(s, total))
        return cls(target, out, draft_config, config, data, eval_data, eval_idx, model, params, opt, sched, t2d,
                   heads, fused, epoch_idx, lengths, steps_per_epoch, total, rank, world)

    @property
    def checkpoint(self) -> Path:
        return self.out / "checkpoint" / "state.pt"

    @property
    def provenance(self) -> dict:
        return {"data_hash": self.data.hash, "eval_data_hash": self.eval_data.hash, "train_config": asdict(self.config)}

    def resume(self, start_from: Path | None) -> tuple[dict, dict]:
        """The state to go on from (this run's own checkpoint, or `start_from`'s kept state, or the
        start) and the best held-out evaluation so far (with its weights, for `keep_best`)."""
        config, own = self.config, self.checkpoint.exists()
        state = {"step": 0, "seconds": 0.0, "tokens": 0, "bf16": config.autocast_bf16}
        if not own and start_from is None:
            return state, {"loss": math.inf}
        saved = _load_state(self.checkpoint if own else Path(start_from))
        if not same_config(saved["draft_config"], self.draft_config) or (
                own and not same_config(saved["train_config"], config)):
            raise Clover2Error(f"{self.checkpoint.parent if own else start_from} was written with other settings; "
                               "use another --out or the same settings")
        if not own and not TrainConfig(**_tuples(saved["train_config"])).same_run_until(
                config, saved["state"]["step"], saved["total"], self.total):
            raise Clover2Error(f"{start_from}: the run that kept this state trained otherwise than this one would "
                               f"over its first {saved['state']['step']} steps (other settings, or a learning-rate "
                               "schedule that already differs there); start this run from scratch")
        _load_trained(self.model, saved["model"])
        self.opt.load_state_dict(saved["optimizer"])
        self.sched.load_state_dict(saved["scheduler"])  # its step count; the rates follow this run's own budget:
        for group, base in zip(self.opt.param_groups, self.sched.base_lrs):  # from the very next step on
            group["lr"] = base * config.lr_factor(self.sched.last_epoch, self.total)
        torch.set_rng_state(saved["rng"])
        return {"bf16": config.autocast_bf16} | saved["state"], saved["best"] if own else {"loss": math.inf}

    def bf16_choice(self) -> bool:
        """Whether bf16 autocast trains faster here, timed on the first batch as trained (and logged)."""
        config = self.config
        first = epoch_order(self.epoch_idx, self.lengths, config, 0)[:config.batch_size // self.world].tolist()
        batch = self.data.batch(first, max_len=config.max_len, t2d=self.t2d, fused=self.fused)
        choice, timing = _bf16_faster(self.ddp, self.model, batch, self.draft_config, self.target.device, self.heads)
        if self.rank == 0:
            _append_jsonl(self.out / "metrics.jsonl", {"step": 0, "autocast_bf16": choice, **timing})
        return choice

    def step(self, state: dict) -> tuple[dict, dict]:
        """One optimizer step on this rank's slice of the next global batch: the new state, the metrics."""
        config, world, step = self.config, self.world, state["step"]
        epoch, k = divmod(step, self.steps_per_epoch)
        if self.order is None or self.order[0] != epoch:
            self.order = (epoch, epoch_order(self.epoch_idx, self.lengths, config, epoch))
        glob = self.order[1][k * config.batch_size:(k + 1) * config.batch_size].tolist()
        local = glob[self.rank * len(glob) // world:(self.rank + 1) * len(glob) // world]
        start = time.perf_counter()
        batch = self.data.batch(local, max_len=config.max_len, t2d=self.t2d, label_mask=config.label_mask,
                                fused=self.fused)
        counts = head_counts(batch, self.heads)
        if world > 1:
            dist.all_reduce(counts)
        self.model.train()
        loss, metrics = _forward(self.ddp, self.model, batch, self.draft_config, self.target.device, state["bf16"],
                                 self.heads, denominator=counts.clamp(min=1).to(self.target.device))
        if world > 1:  # log the global loss, not this rank's share of it
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)
            metrics["loss"] = global_loss.item()
        self.opt.zero_grad(set_to_none=True)
        (loss * world).backward()  # DDP averages over ranks; the loss is already a global mean
        torch.nn.utils.clip_grad_value_(self.params, config.clip_value)
        self.opt.step()
        self.sched.step()
        elapsed = torch.tensor([time.perf_counter() - start])
        if world > 1:
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        return {"step": step + 1, "seconds": state["seconds"] + float(elapsed), "bf16": state["bf16"],
                "tokens": state["tokens"] + int(batch.mask.sum()) * world}, metrics

    def evaluate_and_save(self, state: dict, epoch: int, metrics: dict, best: dict, *,
                          evaluate_now: bool) -> tuple[dict, dict]:
        """After a step: at evaluation steps (every `eval_every`, each snapshot, and `evaluate_now`) the
        held-out evaluation, logged, with a checkpoint (and a snapshot's draft); further checkpoints
        and kept states where the config asks. Returns the latest metrics and the best evaluation."""
        config, step = self.config, state["step"]
        if evaluate_now or step % config.eval_every == 0 or step in config.snapshots:
            ev = evaluate(self.model, self.eval_data, self.eval_idx, self.t2d, config, self.target.device)
            if config.keep_best and ev["loss"] < best["loss"]:
                best = {"loss": ev["loss"], "step": step, "eval": ev,
                        "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()}}
            if self.rank == 0:
                _append_jsonl(self.out / "metrics.jsonl", {
                    "step": step, "epoch": epoch, "lr": self.sched.get_last_lr()[0],
                    "train_seconds": round(state["seconds"], 2), "tokens": state["tokens"],
                    "tokens_per_s": round(state["tokens"] / max(state["seconds"], 1e-9), 1),
                    **{f"train_{k}": v for k, v in metrics.items()}, **{f"eval_{k}": v for k, v in ev.items()}})
                if step in config.snapshots:
                    save_draft(self.out / "snapshots" / f"step_{step:06d}", self.model, self.target, self.draft_config,
                               extra=self.provenance | {"train_state": state, "eval": ev})
                self.save_state(self.checkpoint, state, best)
            metrics = ev
        elif self.rank == 0 and config.checkpoint_every and step % config.checkpoint_every == 0:
            self.save_state(self.checkpoint, state, best)
        if self.rank == 0 and step in config.states:
            self.save_state(self.out / "states" / f"step_{step:06d}.pt", state, {"loss": math.inf})
        return metrics, best

    def save_state(self, path: Path, state: dict, best: dict) -> None:
        """The resumable training state (with the best evaluation so far, and the run's length in steps),
        replaced atomically. The weights borrowed from the target are left out: the draft gets them again
        from the target when it is built."""
        trained = {k: v for k, v in self.model.state_dict().items() if not k.startswith(BORROWED)}
        with atomic_path(path) as tmp:
            torch.save({"model": trained, "optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                        "rng": torch.get_rng_state(), "state": state, "draft_config": asdict(self.draft_config),
                        "train_config": asdict(self.config), "best": best, "total": self.total}, tmp)


def _trained(model: DraftModel, config: TrainConfig) -> tuple[int, bool]:
    """The heads that train (`config.ttt_steps`, else the architecture's own) and whether the batches
    carry the fused target states the draft reads (EAGLE-3)."""
    return config.ttt_steps or model.trained_heads, bool(model.hidden_layers)


@torch.no_grad()
def evaluate(model: DraftModel, data: DistillData, eval_idx: list[int], t2d: torch.Tensor, config: TrainConfig,
             device) -> dict[str, float]:
    """The held-out loss and per-head accuracies (means over batches), and per category of prompt
    (`sharegpt` or a benchmark task), pooled over its answer tokens: each head's top-1 (head 0's is
    the 1-node tree's acceptance when decoding those prompts), head 0's top-1 on tokens that repeat
    their context and on the others, the share of each, and the share inside the draft vocabulary.
    The heads are those trained (`config.ttt_steps`, else the architecture's own)."""
    heads, fused = _trained(model, config)
    model.eval()
    sums: dict[str, float] = {}
    pooled: dict[str, dict[str, float]] = {}
    n = 0
    size = config.eval_batches * config.batch_size if config.eval_batches else len(eval_idx)
    for b in range(0, min(len(eval_idx), size), config.batch_size):
        idx = eval_idx[b:b + config.batch_size]
        batch = _to(data.batch(idx, max_len=config.max_len, t2d=t2d, fused=fused), device)
        outs = model(batch.h, batch.next_ids, steps=heads)
        _, m = draft_loss(model.config, outs, model.logits, _regression_targets(model, batch.h), batch)
        for k, v in m.items():
            sums[k] = sums.get(k, 0.0) + v
        n += 1
        copied = torch.from_numpy(data.copied(idx, batch.mask.shape[1])).to(device)
        for i, o in enumerate(outs):
            length = min(o.shape[1], batch.mask.shape[1] - 1 - i)
            tgt = head_slices(batch, i, length)
            hit = (model.logits(o[:, :length]).argmax(-1) == tgt["topk_ids"][..., 0]) & tgt["mask"]
            rows = {f"head{i}_top1": hit, f"head{i}_tokens": tgt["mask"]}
            if i == 0:
                u = copied[:, 1:1 + length] & tgt["mask"]
                rows |= {"copied_hits": hit & u, "copied": u, "in_vocab": (tgt["label_ids"] >= 0) & tgt["mask"]}
            for r, category in enumerate(data.category[j] for j in idx):
                acc = pooled.setdefault(category, {})
                for k, v in rows.items():
                    acc[k] = acc.get(k, 0.0) + float(v[r].sum())
    out = {k: v / max(1, n) for k, v in sums.items()}
    for category, acc in pooled.items():
        tokens, copies = max(1.0, acc["head0_tokens"]), acc["copied"]
        out |= {f"{category}_head{i}_top1": acc[f"head{i}_top1"] / max(1.0, acc[f"head{i}_tokens"])
                for i in range(len(outs))}
        out |= {f"{category}_tokens": acc["head0_tokens"], f"{category}_copied": copies / tokens,
                f"{category}_in_vocab": acc["in_vocab"] / tokens,
                f"{category}_top1_copied": acc["copied_hits"] / max(1.0, copies),
                f"{category}_top1_other": (acc["head0_top1"] - acc["copied_hits"]) / max(1.0, tokens - copies)}
    return out


@contextmanager
def _sigterm_sets_event():
    """Within it, SIGTERM sets the event it yields instead of killing the process (where signals
    can be caught: the main thread); the previous handler comes back on leaving."""
    event = threading.Event()
    try:
        previous = signal.signal(signal.SIGTERM, lambda *_: event.set())
    except ValueError:  # not the main thread: a SIGTERM stops training the usual way
        yield event
        return
    try:
        yield event
    finally:
        signal.signal(signal.SIGTERM, previous)


def _forward(ddp, model: DraftModel, batch: Batch, draft_config: DraftConfig, device, bf16: bool, heads: int, *,
             denominator: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The training loss of one batch over `heads` heads (and its metrics), under bf16 autocast or not."""
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bool(bf16)):
        outs = ddp(batch.h.to(device), batch.next_ids.to(device), steps=heads)  # one output per trained head
        b = _to(batch, device)
        return draft_loss(draft_config, outs, model.logits, _regression_targets(model, b.h), b, denominator=denominator)


def _regression_targets(model: DraftModel, h: torch.Tensor) -> torch.Tensor | None:
    return model.regression_targets(h) if model.config.regression_weight else None


def _bf16_faster(ddp, model: DraftModel, batch: Batch, draft_config: DraftConfig, device, heads: int,
                 repeats: int = 3) -> tuple[bool, dict]:
    """Whether a training step's forward and backward run faster under bf16 autocast here: each
    timed `repeats` times, alternating, after one warm-up each (the gradients are discarded; with
    several ranks, rank 0's choice is everyone's). A CPU that only emulates bf16 is not timed: there a
    bf16 step is tens of times slower than fp32's."""
    if device.type == "cpu" and not native_bf16():
        return False, {"bf16_untimed": "this CPU emulates bf16"}
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for k in range(repeats + 1):
        for bf16 in (False, True):
            start = time.perf_counter()
            _forward(ddp, model, batch, draft_config, device, bf16, heads)[0].backward()
            if k:
                seconds[bf16].append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    choice = torch.tensor([float(np.median(seconds[True]) < np.median(seconds[False]))])
    if dist.is_initialized():
        dist.broadcast(choice, 0)
    return bool(choice.item()), {"fp32_step_s": round(float(np.median(seconds[False])), 4),
                                 "bf16_step_s": round(float(np.median(seconds[True])), 4)}


def _to(batch: Batch, device) -> Batch:
    return Batch(**{f: getattr(batch, f).to(device) for f in batch.__dataclass_fields__})


def _load_state(path: Path) -> dict:
    """A state `_Run.save_state` wrote, or a clear error for a file that is not one."""
    try:
        saved = torch.load(path, weights_only=False)
        _ = saved["model"], saved["optimizer"], saved["state"]["step"], saved["train_config"], saved["total"]
    except FileNotFoundError:
        raise Clover2Error(f"{path}: no training state there") from None
    except Exception as e:  # truncated, another format, or a state from an older clover2
        raise Clover2Error(f"{path} is not a training state this version of clover2 wrote ({type(e).__name__}: {e}); "
                           "train from scratch") from None
    return saved


def _load_trained(model: DraftModel, weights: dict) -> None:
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any(not k.startswith(BORROWED) for k in missing):
        raise Clover2Error(f"a training state that does not fit this {model.config.arch} draft "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def _tuples(config: dict) -> dict:
    """A TrainConfig's fields as JSON or torch.save kept them: lists back to tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}


def _append_jsonl(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def setup_distributed() -> tuple[int, int]:
    """Join the torchrun process group if launched by torchrun; (rank, world size)."""
    if "RANK" not in os.environ or dist.is_initialized():
        return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()

