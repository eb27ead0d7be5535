"""A benchmarked method and one run of it: what `clover2.measure.bench` interleaves and tabulates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clover2.decoding.drafter import Memory
from clover2.drafts.methods import MethodSpec


@dataclass(frozen=True)
class Run:
    output_ids: list[int]
    seconds: float
    accept_lengths: list[int] | None  # tokens each decoding step committed; None where not reported
    draft_s: float = 0.0
    decode_s: float = float("nan")  # the steps' time: `seconds` less the prefill (unknown for HF generate)
    accepted: dict[str, int] | None = None  # hybrids and unions: accepted draft tokens per source (Union.accepted)
    # (steps, tokens they committed) where an engine reports only totals (clover2.measure.engine)
    totals: tuple[int, int] | None = None

    @property
    def steps(self) -> float:
        """The decoding steps after the prefill (NaN where not reported)."""
        if self.totals is not None:
            return self.totals[0]
        return len(self.accept_lengths) if self.accept_lengths is not None else float("nan")

    @property
    def step_tokens(self) -> float:
        """Tokens the decoding steps committed: all but the prefill's first (NaN where not reported)."""
        if self.totals is not None:
            return self.totals[1]
        return sum(self.accept_lengths) if self.accept_lengths is not None else float("nan")


@dataclass(frozen=True)
class Method:
    """One benchmarked method: its spec and the function generating an answer to a prompt."""

    spec: MethodSpec
    run: Callable[[list[int]], Run]
    # an untimed run that leaves the drafters' memories (clover2.decoding.drafter.Memory) as they were
    # before it; None: `run` (a method that remembers nothing across prompts)
    warm_up: Callable[[list[int]], Run] | None = None
    # what its drafters remember across prompts (shared by every generation), for a caller that must put
    # it back as it was (a prompt timed again; a timing resumed after others)
    memories: tuple[Memory, ...] = ()
    draft_weights: str = ""  # the draft's precision (float or int8); "" for methods without a draft
    # the method whose greedy output this one's must equal (`identical`): plain decoding, or, for an
    # engine's methods, that engine's own plain decoding
    reference: str = "ar"

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def temperature(self) -> float:
        return self.spec.temperature
