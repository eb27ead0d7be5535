"""Exported drafts: each format's files, its config readable as the engines read it, and a round trip
that proposes exactly what the draft it came from proposes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from test_decode_exact import PROMPTS
from transformers import LlamaConfig

from clover2.decoding.decode import prefill
from clover2.decoding.tree import EAGLE_25
from clover2.drafts import build_draft
from clover2.drafts.config import DraftConfig
from clover2.drafts.drafter import DynamicTree, ModelDrafter
from clover2.drafts.export import FORMATS, export_draft, load_exported
from clover2.errors import Clover2Error


def _draft(target, arch: str):
    """A draft with a draft vocabulary in no particular order, its trained weights moved off their start
    (the parts borrowed from the target stay the target's, as training keeps them)."""
    torch.manual_seed(0)
    d2t = torch.randperm(target.config.vocab_size)[:48]
    model = build_draft(DraftConfig.for_arch(arch, draft_vocab=48), target, d2t=d2t).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    return model


def _proposals(target, model, tree):
    drafter = ModelDrafter(model, tree)
    prompt = PROMPTS[0]
    with torch.no_grad():
        hidden = prefill(target, target.new_cache(), prompt[:-1], hidden=True, layers=model.hidden_layers).hidden
        drafter.begin(prompt, hidden[0])
        draft = drafter.propose(prompt)
    return draft.tree.parents, draft.tokens.tolist()


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_an_export_read_back_proposes_what_its_draft_proposes(tiny, fmt, tmp_path):
    model = _draft(tiny, FORMATS[fmt][0])
    if tiny.config.model_type == "gemma3_text" and fmt in ("specforge", "speculators", "eagle"):  # not Llama-shaped
        with pytest.raises(Clover2Error, match="not Llama-shaped"):
            export_draft(model, tiny, tmp_path / fmt, fmt)
        return
    export_draft(model, tiny, tmp_path / fmt, fmt)
    back = load_exported(tmp_path / fmt, tiny)
    for tree in (EAGLE_25, DynamicTree(budget=20, depth=4, top_k=4)):
        assert _proposals(tiny, back, tree) == _proposals(tiny, model, tree), (fmt, tree)


def test_the_eagle3_formats_hold_what_engines_read(tiny, tmp_path):
    if tiny.config.model_type == "gemma3_text":
        pytest.skip("a Gemma draft is refused (the round trip's test)")
    model = _draft(tiny, "eagle3")
    for fmt in ("specforge", "speculators"):
        export_draft(model, tiny, tmp_path / fmt, fmt)
    forge = json.loads((tmp_path / "specforge" / "config.json").read_text())
    assert forge["architectures"] == ["LlamaForCausalLMEagle3"] and forge["num_hidden_layers"] == 1
    assert forge["draft_vocab_size"] == 48
    # SpecForge and SGLang name the layers whose outputs are read; vLLM, speculators and llama.cpp (and
    # clover2) the layers whose inputs are: the same three hidden states, numbered one apart
    outputs_of = forge["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert [i + 1 for i in outputs_of] == list(model.hidden_layers)
    config = LlamaConfig(**{k: v for k, v in forge.items() if k != "eagle_config"})  # as SGLang reads it
    assert config.attention_bias == (tiny.config.model_type == "qwen2")
    w = load_file(tmp_path / "specforge" / "model.safetensors")
    assert {"fc.weight", "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= set(w)
    ids = w["d2t"] + torch.arange(48)  # draft id + offset = target id, ascending; t2d marks the same ids
    assert torch.equal(ids, model.d2t.sort().values) and torch.equal(w["t2d"].nonzero().flatten(), ids)
    assert w["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * tiny.config.hidden_size  # reads [E; g]
    spec = json.loads((tmp_path / "speculators" / "config.json").read_text())
    assert spec["speculators_model_type"] == "eagle3" and spec["speculators_config"]["verifier"]["name_or_path"]
    assert spec["transformer_layer_config"]["num_hidden_layers"] == 1
    assert spec["eagle_aux_hidden_state_layer_ids"] == list(model.hidden_layers)  # inputs of these layers
    assert "layers.0.hidden_norm.weight" in load_file(tmp_path / "speculators" / "model.safetensors")
    assert "embed_tokens.weight" not in w  # the engines take the target's own embedding
    # OpenVINO's exporter reads the draft's own: written on request, and a read-back draft unchanged by it
    export_draft(model, tiny, tmp_path / "with-embedding", "specforge", embeddings=True)
    embed = load_file(tmp_path / "with-embedding" / "model.safetensors")["embed_tokens.weight"]
    assert torch.equal(embed, tiny.model.get_input_embeddings().weight.float())
    back, plain = (load_exported(tmp_path / f, tiny).state_dict() for f in ("with-embedding", "specforge"))
    assert back.keys() == plain.keys() and all(torch.equal(back[k], plain[k]) for k in back)
    with pytest.raises(Clover2Error, match="EAGLE-3 exports only"):
        export_draft(_draft(tiny, "eagle1"), tiny, tmp_path / "e1", "eagle", embeddings=True)


def test_an_export_refuses_the_wrong_architecture_format_or_target(tmp_path):
    from conftest import tiny_target

    tiny = tiny_target("llama")
    with pytest.raises(Clover2Error, match="carries eagle3 drafts, not clover2"):
        export_draft(_draft(tiny, "clover2"), tiny, tmp_path / "x", "specforge")
    with pytest.raises(Clover2Error, match="unknown export format"):
        export_draft(_draft(tiny, "eagle3"), tiny, tmp_path / "x", "gguf")
    export_draft(_draft(tiny, "eagle3"), tiny, tmp_path / "ok", "specforge")
    with pytest.raises(Clover2Error, match="exported for target"):
        load_exported(tmp_path / "ok", tiny_target("qwen2"))
    with pytest.raises(Clover2Error, match="not a clover2 export"):
        load_exported(tmp_path, tiny)


def test_speculators_own_eagle3_model_computes_what_the_draft_computes(tmp_path):
    """The defining library, where it installs (`speculators` pins an older transformers than this
    project, so it is not a dependency: install it with --no-deps on a side path to run this), loads the
    export with its own config and model classes and computes the same first-step logits."""
    pytest.importorskip("speculators")
    from conftest import tiny_target
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel

    tiny = tiny_target("llama")
    model = _draft(tiny, "eagle3")
    export_draft(model, tiny, tmp_path, "speculators")
    theirs = Eagle3DraftModel(Eagle3SpeculatorConfig.from_pretrained(tmp_path)).eval()
    result = theirs.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False)
    assert not result.unexpected_keys and set(result.missing_keys) <= {
        "embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight"}  # the verifier's own parts
    ids = torch.tensor([PROMPTS[3][:24]])
    T, got = ids.shape[1], {}
    with torch.no_grad():
        theirs.embed_tokens.weight.copy_(tiny.model.get_input_embeddings().weight)
        h = tiny.forward(ids, torch.arange(T)[None], tiny.causal_mask(T), tiny.new_cache(), hidden=True,
                         layers=model.hidden_layers).hidden
        ours = model.logits(model(h, ids.roll(-1, 1), steps=1)[0])
        theirs.lm_head.register_forward_hook(lambda m, i, o: got.setdefault("logits", o))
        theirs(hidden_states=h, input_ids=ids.roll(-1, 1), document_ids=torch.zeros(1, T, dtype=torch.long),
               ttt_steps=1)
    by_target_id = torch.argsort(torch.argsort(model.d2t))  # their draft ids (in target-id order) to ours
    torch.testing.assert_close(got["logits"][..., by_target_id], ours, rtol=1e-4, atol=1e-4)
