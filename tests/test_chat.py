"""Chat templates and multi-turn training data: every answer lands in the loss mask exactly once,
with its template's own end-of-turn markup, whatever the template (SmolLM2's ChatML, Vicuna v1.5's
FastChat format, LLaMA-3-Instruct's headers). The tokenizer is SmolLM2's, which ships here."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from clover2.decoding.builtin import CHAT_TEMPLATES, DEFAULT_TARGET
from clover2.decoding.target import Target, prepare_builtin
from clover2.errors import Clover2Error
from clover2.training.data import conversation_ids

pytestmark = pytest.mark.slow

# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
          "{% endif %}")

TURNS = [("What is the capital of France?", "The capital of France is Paris."),
         ("And of Italy?", "Rome is the capital of Italy."),
         ("Name a river in Rome.", "The Tiber flows through Rome.")]
MESSAGES = [m for q, a in TURNS for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]


def _target(template: str | None) -> Target:
    tokenizer = AutoTokenizer.from_pretrained(prepare_builtin(DEFAULT_TARGET))
    if template is not None:
        tokenizer.chat_template = template
    return Target(model=None, tokenizer=tokenizer, name=f"smollm2 with {template and template[:12]!r}")


def _answer_runs(target: Target, ids: list[int], mask: list[bool]) -> list[str]:
    runs, current = [], []
    for token, keep in zip(ids + [None], mask + [False]):
        if keep:
            current.append(token)
        elif current:
            runs.append(target.tokenizer.decode(current))
            current = []
    return runs


@pytest.mark.parametrize("template, end_of_turn", [(None, "<|im_end|>"), (CHAT_TEMPLATES["vicuna"], "</s>"),
                                                   (LLAMA3, "<|eot_id|>")])
def test_every_answer_is_in_the_mask_exactly_once(template, end_of_turn):
    target = _target(template)
    ids, mask = conversation_ids(target, MESSAGES)
    assert (len(ids) == len(mask)
            and target.tokenizer.decode(ids) == target.render_chat(MESSAGES, add_generation_prompt=False))
    runs = _answer_runs(target, ids, mask)
    assert len(runs) == len(TURNS)
    for run, (question, answer) in zip(runs, TURNS):
        assert run.strip().startswith(answer) and question not in run
        # the answer's end is learned with the template's own end-of-turn markup
        assert run.strip()[len(answer):].startswith(end_of_turn)


def test_vicuna_is_fastchats_conversation_format():
    target = _target(CHAT_TEMPLATES["vicuna"])
    text = target.render_chat(MESSAGES[:3])
    bos = target.tokenizer.bos_token or ""
    assert text == (bos + "A chat between a curious user and an artificial intelligence assistant. The assistant "
                    "gives helpful, detailed, and polite answers to the user's questions. USER: What is the capital "
                    "of France? ASSISTANT: The capital of France is Paris.</s>USER: And of Italy? ASSISTANT:")


def test_a_template_that_rewrites_earlier_answers_is_refused():
    """Like templates that drop earlier turns' reasoning: the earlier answer would silently leave the loss."""
    rewrites = ("{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}[earlier answer]"
                "{% else %}{{ m['content'] }}{% endif %}\n{% endfor %}")
    with pytest.raises(Clover2Error, match="renders turn 1 differently"):
        conversation_ids(_target(rewrites), MESSAGES)
