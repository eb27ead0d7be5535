"""Greedy decoding replayed against the target's known continuation: tau without the target's forwards.

Greedy speculative decoding is lossless, so whatever a drafter proposes, the tokens it commits are
plain greedy decoding's and the hidden states a draft reads are the target's on them. `ReplayCache`
takes the target's place in `speculative_steps` (the decode loop is unchanged): where a tree node's
path is a prefix of the known continuation its logits row picks the continuation's next token, as
the target's would (greedy acceptance reads no other row), and the kept positions get the hidden
states plain decoding computed there. The drafter runs for real, so a replay proposes, accepts and
commits what real decoding does (up to float rounding: real decoding computes the kept positions'
states inside tree forwards, the replay takes plain decoding's), at the cost of the drafts alone.
Accept lengths and tau only: a replay's time is not decoding's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from clover2.decoding.decode import DecodeConfig, Generation, generate, speculative_steps
from clover2.decoding.drafter import Drafter, NoDrafter
from clover2.decoding.target import Target, TargetOutput
from clover2.errors import Clover2Error


@dataclass(frozen=True)
class Reference:
    """Plain greedy decoding of one prompt: the committed sequence and the hidden state at each position."""

    ids: list[int]  # prompt + output
    hidden: torch.Tensor  # (len(ids) - 1, H): every position whose KV entry plain decoding committed
    prompt_len: int
    config: DecodeConfig
    layers: tuple[int, ...] = ()  # whose inputs `hidden` holds, concatenated (index L: the last state)


class _Recorder(NoDrafter):
    """Plain decoding that keeps the hidden states the decoder hands a drafter."""

    needs_hidden = True

    def __init__(self, layers: tuple[int, ...] = ()):
        self.hidden: list[torch.Tensor] = []
        self.hidden_layers = layers

    def begin(self, prompt_ids, hidden):
        self.hidden = [] if hidden is None else [hidden]

    def observe(self, new_ids, hidden):
        self.hidden.append(hidden)


def plain_reference(target: Target, prompt_ids: Sequence[int], config: DecodeConfig, *,
                    layers: tuple[int, ...] = ()) -> Reference:
    """Decode `prompt_ids` plainly (greedy, `config`'s limits and stops), keeping the hidden states:
    the inputs of target `layers` (`Target.forward`'s; index L is the last hidden state, the default),
    enough for replaying every drafter whose `hidden_layers` are among them."""
    if not config.sampling.greedy:
        raise Clover2Error("a replay reproduces greedy decoding only (temperature 0)")
    layers = tuple(layers) or (target.config.get_text_config().num_hidden_layers,)
    recorder = _Recorder(layers)
    g = generate(target, recorder, prompt_ids, config)
    return Reference(ids=list(prompt_ids) + g.output_ids, hidden=torch.cat(recorder.hidden), prompt_len=len(prompt_ids),
                     config=config, layers=layers)


class ReplayCache:
    """Plays the target and its cache in `speculative_steps` from a `Reference`."""

    def __init__(self, ref: Reference, vocab_size: int):
        self.ref, self.vocab, self.length = ref, vocab_size, 0
        self.seq = torch.tensor(ref.ids)

    def get_seq_length(self) -> int:
        return self.length

    def run(self, target, ids: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor | None, *,
            hidden: bool = False, layers: tuple[int, ...] = (), logits_to_keep: int = 0) -> TargetOutput:
        n, past, last = len(ids), self.length, len(self.ref.ids) - 1
        if visible is None:  # the prefill: the prompt's positions, in order
            visible = torch.ones(n, n, dtype=torch.bool).tril()
        pos = positions.clamp(max=last)
        on_path = (ids == self.seq[pos]) & (positions <= last)  # node i's token is the continuation's there
        match = ~(visible & ~on_path[None, :]).any(1)  # ... and so are all its ancestors'
        logits = torch.zeros(n, self.vocab)
        nxt = (positions + 1).clamp(max=last)
        rows = torch.nonzero(match & (positions < last)).flatten()
        logits[rows, self.seq[nxt[rows]]] = 1.0  # the target's greedy choice after a node on the path
        keep = slice(n - logits_to_keep, n) if logits_to_keep else slice(0, n)
        states = self._states(target, layers)[pos.clamp(max=len(self.ref.hidden) - 1)][None] if hidden else None
        self.length = past + n
        return TargetOutput(logits=logits[None, keep], hidden=states)

    def commit(self, past: int, path: list[int]) -> None:
        self.length = past + len(path)

    def _states(self, target, layers: tuple[int, ...]) -> torch.Tensor:
        """The recorded states of `layers` (empty: the last hidden state), concatenated in that order."""
        want = layers or (target.config.get_text_config().num_hidden_layers,)
        if not set(want) <= set(self.ref.layers):
            raise Clover2Error(f"the drafter reads the inputs of target layers {list(want)}; this reference holds "
                               f"{list(self.ref.layers)}: record it with plain_reference(..., layers=...)")
        blocks = self.ref.hidden.unflatten(-1, (len(self.ref.layers), -1))
        return blocks[:, [self.ref.layers.index(i) for i in want]].flatten(-2)


def replay(target: Target, drafter: Drafter, ref: Reference) -> Generation:
    """What `generate(target, drafter, prompt, ref.config)` commits, step by step, without the target."""
    if drafter.reads_logits:
        raise Clover2Error(f"{type(drafter).__name__} learns from the target's logits over the whole tree, "
                           "which a replay does not have: decode it for real")
    gen = Generation(prompt_ids=ref.ids[:ref.prompt_len])
    cache = ReplayCache(ref, target.config.get_text_config().vocab_size)
    with torch.inference_mode():
        for step in speculative_steps(target, drafter, gen.prompt_ids, ref.config, cache=cache):
            gen.add(replace(step, verify_s=0.0))
    if gen.output_ids != ref.ids[ref.prompt_len:]:  # cannot happen unless the replay itself is wrong
        raise Clover2Error("the replay committed tokens plain decoding did not: a bug in clover2.decoding.replay")
    return gen
