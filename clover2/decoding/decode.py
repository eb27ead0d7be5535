"""The speculative decode loop, written once: draft, verify, accept, commit.

Invariant between steps: the KV cache holds every committed token except the last one (the
*root* of the next tree), whose successor the target has not computed yet. The prefill is the first
step: the whole prompt in one causal forward, its last token the root of an empty tree, so it commits
the first new token as Hugging Face `generate` does. Plain decoding is the same loop with the empty
tree (`NoDrafter`), so the baseline and the method share every line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch

from clover2.decoding.cache import BUCKETS, ENGINES, new_cache
from clover2.decoding.drafter import Drafter
from clover2.decoding.sampling import SamplingConfig
from clover2.decoding.target import Target, TargetOutput
from clover2.decoding.transfer import to_device
from clover2.decoding.tree import NO_DRAFT
from clover2.decoding.verify import accept, verify
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 256  # hard cap on generated tokens (also capped by the context length)
    stop_at_eos: bool = True  # stop after the target's EOS token (kept in the output)
    stop_strings: tuple[str, ...] = ()  # stop once the decoded output contains one of these
    sampling: SamplingConfig = SamplingConfig()  # temperature 0: greedy; > 0: lossless sampling
    engine: str = "eager"  # the target's KV cache: eager (the reference), static, or graphs (clover2.decoding.cache)
    # Wait for the device at each phase's end, so that Step.draft_s and verify_s time the work and not
    # its launch: free on a CPU, two extra host waits a step on a GPU (benchmarks set it).
    timed: bool = False

    def __post_init__(self):
        if self.max_new_tokens <= 0:
            raise Clover2Error(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.engine not in ENGINES:
            raise Clover2Error(f"unknown engine {self.engine!r}; use one of: {', '.join(ENGINES)}")
        if any(not s for s in self.stop_strings):
            raise Clover2Error("stop strings must be non-empty")


@dataclass(frozen=True)
class Step:
    tokens: list[int]  # committed this step: accepted draft tokens, then the bonus token
    draft_nodes: int  # size of the proposed tree, root excluded
    draft_s: float  # seconds spent proposing
    verify_s: float  # seconds in the target forward, acceptance and commit
    stop: str | None  # "eos", "length", "stop_string", or None to go on


@dataclass
class Generation:
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    prefill: Step | None = None  # the prompt's forward, which commits the first output token
    steps: list[Step] = field(default_factory=list)  # the decoding steps after it
    seconds: float = 0.0  # wall time of the whole call, prefill included

    def add(self, step: Step) -> None:
        """Collect the next step of `speculative_steps` (the first is the prefill)."""
        if self.prefill is None:
            self.prefill = step
        else:
            self.steps.append(step)
        self.output_ids.extend(step.tokens)

    @property
    def accept_lengths(self) -> list[int]:
        """Tokens committed per decoding step (bonus included; the prefill's first token is not
        counted): plain decoding gives all 1s."""
        return [len(s.tokens) for s in self.steps]

    @property
    def step_ids(self) -> list[int]:
        """The output the decoding steps committed: all of it but the prefill's first token."""
        return self.output_ids[len(self.prefill.tokens) if self.prefill else 0:]

    @property
    def tau(self) -> float:
        """Mean accept length: tokens per decoding step, the paper's tau (1.0 if the prefill stopped)."""
        return sum(self.accept_lengths) / len(self.steps) if self.steps else 1.0

    @property
    def stop_reason(self) -> str | None:
        last = self.steps[-1] if self.steps else self.prefill
        return last.stop if last else None


class Stopper:
    """Cuts a step's tokens at the first stop condition: EOS, the length cap, a stop string."""

    def __init__(self, config: DecodeConfig, *, limit: int, eos_ids: Sequence[int],
                 decode: Callable[[list[int]], str] | None):
        if config.stop_strings and decode is None:
            raise Clover2Error("stop strings need a tokenizer to decode the output")
        self.limit, self.eos = limit, set(eos_ids) if config.stop_at_eos else set()
        self.stop_strings, self.decode = config.stop_strings, decode
        # Enough trailing tokens to hold any stop string (each token decodes to >= 0 characters,
        # so one extra token per character plus slack covers it).
        self.window = max((len(s) for s in self.stop_strings), default=0) + 4
        self.out: list[int] = []

    def cut(self, tokens: list[int]) -> tuple[list[int], str | None]:
        for i, tok in enumerate(tokens):
            self.out.append(tok)
            reason = ("eos" if tok in self.eos else "length" if len(self.out) >= self.limit
                      else "stop_string" if self._hit_stop_string() else None)
            if reason:
                return tokens[: i + 1], reason
        return tokens, None

    def _hit_stop_string(self) -> bool:
        if not self.stop_strings:
            return False
        tail = self.decode(self.out[-self.window:])
        return any(s in tail for s in self.stop_strings)


def speculative_steps(target: Target, drafter: Drafter, prompt_ids: Sequence[int], config: DecodeConfig,
                      *, cache=None) -> Iterator[Step]:
    """Decode from `prompt_ids` (greedy, or sampling with `config.sampling`), one `Step` per target forward.

    Pass `cache` (an empty `TreeCache`) to inspect it between steps; it holds the committed
    tokens but the last. A `clover2.decoding.replay.ReplayCache` replays a known greedy decoding
    instead of running the target. Otherwise the cache is `config.engine`'s.
    """
    prompt = list(prompt_ids)
    limit = _check_prompt(target, prompt, config)
    decode = target.decode if target.tokenizer is not None else None
    stopper = Stopper(config, limit=limit, eos_ids=target.eos_token_ids, decode=decode)
    if cache is None:
        cache = new_cache(target, config.engine, capacity=len(prompt) + limit + BUCKETS[-1],
                          hidden=drafter.needs_hidden, layers=drafter.hidden_layers)
    generator = torch.Generator().manual_seed(config.sampling.seed)  # every sampling decision draws from it
    t0 = t1 = clock(target, config.timed)
    out = prefill(target, cache, prompt,  # 0. prefill: the step of an empty tree
                  hidden=drafter.needs_hidden, layers=drafter.hidden_layers)
    drafter.begin(prompt, None if out.hidden is None else out.hidden[0, :-1])  # rooted at the prompt's last token
    out = replace(out, hidden=None if out.hidden is None else out.hidden[:, -1:])  # the root's state, as a step's
    ids, draft, past = prompt, NO_DRAFT, len(prompt) - 1
    while True:
        drafter.verified(ids[-1], draft, out.logits[0])
        accepted = accept(draft, out.logits[0], config.sampling, generator)  # 3. accept a path
        tokens, stop = stopper.cut(accepted.tokens)
        kept = accepted.path[: len(tokens)]
        cache.commit(past, kept)  # 4. commit: keep the KV entries of root + accepted nodes
        drafter.observe(tokens, None if out.hidden is None else out.hidden[0, to_device(kept, out.hidden.device)])
        ids = ids + tokens
        yield Step(tokens=tokens, draft_nodes=draft.tree.size - 1, draft_s=t1 - t0,
                   verify_s=clock(target, config.timed) - t1, stop=stop)
        if stop:
            return
        t0 = clock(target, config.timed)
        draft = drafter.propose(ids)  # 1. draft a token tree rooted at the last committed token
        t1 = clock(target, config.timed)
        past = cache.get_seq_length()
        out = verify(target, cache, ids[-1], draft,  # 2. verify it
                     hidden=drafter.needs_hidden, layers=drafter.hidden_layers)


def generate(target: Target, drafter: Drafter, prompt_ids: Sequence[int], config: DecodeConfig) -> Generation:
    """Run `speculative_steps` to the end and collect the output and per-step statistics."""
    gen = Generation(prompt_ids=list(prompt_ids))
    start = clock(target, True)
    with torch.inference_mode():
        for step in speculative_steps(target, drafter, prompt_ids, config):
            gen.add(step)
    gen.seconds = clock(target, True) - start
    return gen


def _check_prompt(target: Target, prompt: list[int], config: DecodeConfig) -> int:
    """Validate the prompt; return how many tokens may be generated."""
    if not prompt:
        raise Clover2Error("empty prompt: give at least one token")
    room = target.context_length - len(prompt)
    if room <= 0:
        raise Clover2Error(f"prompt of {len(prompt)} tokens does not fit the target's context of "
                           f"{target.context_length} tokens (nothing left to generate)")
    return min(config.max_new_tokens, room)


def prefill(target: Target, cache, ids: list[int], *, hidden: bool, layers: tuple[int, ...] = ()) -> TargetOutput:
    """Put `ids` (non-empty) into the empty cache with one causal forward: the logits after the last,
    `(1, 1, V)`, and every position's hidden state `(1, len(ids), H)` (or `layers`' inputs) if asked."""
    return cache.run(target, torch.tensor(ids), torch.arange(len(ids)), None, logits_to_keep=1, hidden=hidden,
                     layers=layers)


def clock(target: Target, wait: bool = True) -> float:
    """Wall time in seconds; with `wait`, after the target's device has finished its queued work."""
    if wait and target.device.type == "cuda":
        torch.cuda.synchronize(target.device)
    return time.perf_counter()
