"""Distillation data: ShareGPT conversations as they are, labelled by the target in packed forwards;
the held-out split; no benchmark text in the training data; resumable shards."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import tiny_target
from test_training import fake_data

from clover2.errors import Clover2Error
from clover2.training.corpora import _messages
from clover2.training.data import (
    ARRAYS,
    DataConfig,
    DistillData,
    _block_causal_mask,
    _write_shard,
    decontaminate,
    held_out,
    prepare_data,
)

CONVERSATIONS = [(list(range(3, 3 + n)), [i >= n // 3 for i in range(n)]) for n in (17, 5, 30, 9, 23)]


def _shard(tiny, tmp_path, name: str, pack_tokens: int) -> dict[str, np.ndarray]:
    config = DataConfig(max_tokens=1, pack_tokens=pack_tokens, top_k=4)
    _write_shard(tmp_path / name, tiny, CONVERSATIONS, config, seconds=0.0)
    return {a: np.load(tmp_path / name / f"{a}.npy") for a in (*ARRAYS, "offsets")}


def test_packed_labels_equal_one_conversation_at_a_time(tiny, tmp_path):
    """Several conversations in one forward (block-diagonal mask, positions restarting) give each
    token the hidden state and top-k it gets alone, on Llama, Qwen2 and Gemma-3 (sliding windows)."""
    alone, packed = _shard(tiny, tmp_path, "alone", 1), _shard(tiny, tmp_path, "packed", 64)
    np.testing.assert_array_equal(alone["offsets"], packed["offsets"])
    np.testing.assert_array_equal(alone["ids"], packed["ids"])
    np.testing.assert_array_equal(alone["response"], packed["response"])
    np.testing.assert_allclose(alone["hidden"].astype(np.float32), packed["hidden"].astype(np.float32),
                               atol=2e-3, rtol=1e-3)
    np.testing.assert_allclose(alone["topk_logp"].astype(np.float32), packed["topk_logp"].astype(np.float32), atol=2e-3)
    assert (alone["topk_ids"][:, 0] == packed["topk_ids"][:, 0]).mean() > 0.99
    stats = json.loads((tmp_path / "packed" / "stats.json").read_text())
    assert stats["tokens"] == sum(len(ids) for ids, _ in CONVERSATIONS)


def test_block_causal_mask_keeps_conversations_apart(tiny):
    mask = _block_causal_mask([2, 3], tiny)[0, 0] == 0
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]])
    assert (mask == expected.bool()).all()


def test_sharegpt_conversations_keep_alternating_turns_as_they_are():
    raw = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": " Hello! "},
                             {"from": "human", "value": "Bye"}, {"from": "human", "value": "again"},
                             {"from": "gpt", "value": "lost"}]}
    assert _messages(raw) == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                              {"role": "user", "content": "Bye"}]
    assert _messages({"conversations": [{"from": "gpt", "value": "I start"}]}) == []


def test_decontamination_drops_every_conversation_with_a_benchmark_line():
    question = "Compose an engaging travel blog post about a recent trip to Hawaii."
    corpus = [[{"role": "user", "content": f"Please help.\n  {question.upper()}  \nThanks"}],
              [{"role": "user", "content": "Write a travel blog post."}, {"role": "assistant", "content": "Sure."}]]
    assert decontaminate(corpus, [question]) == corpus[1:]


def test_held_out_split_is_stable_and_small():
    corpus = [[{"role": "user", "content": f"question number {i}"}] for i in range(5000)]
    held = [c for c in corpus if held_out(c)]
    assert 50 < len(held) < 150 and held == [c for c in reversed(corpus) if held_out(c)][::-1]


def _char_chat(tiny, monkeypatch) -> None:
    """A one-character-per-token chat template for the tiny target (its tokenizer has no offsets)."""
    monkeypatch.setattr(type(tiny), "render_chat", lambda self, m, add_generation_prompt=True: "".join(
        f"<{x['role'][0]}>{x['content']}" for x in m) + ("<a>" if add_generation_prompt else ""))
    monkeypatch.setattr(type(tiny), "tokenize", lambda self, text, offsets=False: (
        [ord(c) % 90 for c in text], [(i, i + 1) for i in range(len(text))])
        if offsets else [ord(c) % 90 for c in text])


def test_corpus_data_resumes_and_refuses_other_settings(tiny, tmp_path, monkeypatch):
    """Conversations in seeded order until the token budget; an interrupted run finishes only what
    is missing; another config in the same folder is refused."""
    chat = [[{"role": "user", "content": "ab" * (3 + i % 5)}, {"role": "assistant", "content": "cd" * (2 + i % 7)}]
            for i in range(40)]
    _char_chat(tiny, monkeypatch)
    config = DataConfig(tokens=300, max_tokens=40, pack_tokens=80, shard_conversations=4, top_k=4)
    meta = prepare_data(tiny, chat, tmp_path / "d", config)
    assert meta["tokens"] >= 300 and meta["label_tokens_per_s"] > 0
    data = DistillData(tmp_path / "d")
    assert all(s["response"].any() for s in data.shards)
    first = np.load(tmp_path / "d" / "shard_00001" / "hidden.npy")
    (tmp_path / "d" / "meta.json").write_text(json.dumps({**meta, "complete": False}))
    import shutil

    shutil.rmtree(tmp_path / "d" / "shard_00001")
    prepare_data(tiny, chat, tmp_path / "d", config)
    np.testing.assert_array_equal(np.load(tmp_path / "d" / "shard_00001" / "hidden.npy"), first)
    with pytest.raises(Exception, match="another data config"):
        prepare_data(tiny, chat, tmp_path / "d", DataConfig(tokens=301, max_tokens=40, pack_tokens=80, top_k=4))



def test_fused_states_are_the_fused_layers_inputs_beside_the_same_last_state(tiny, tmp_path):
    """With `fused_states` a shard also stores EAGLE-3's inputs (target layers 2, L/2, L-3) from the
    same packed forward; the last hidden state is the one stored without them."""
    from clover2.drafts.eagle3 import fused_layers

    config = DataConfig(max_tokens=1, pack_tokens=64, top_k=4)
    _write_shard(tmp_path / "plain", tiny, CONVERSATIONS, config, seconds=0.0)
    _write_shard(tmp_path / "fused", tiny, CONVERSATIONS, replace(config, fused_states=True), seconds=0.0)
    plain, fused = (np.load(tmp_path / d / "hidden.npy") for d in ("plain", "fused"))
    np.testing.assert_array_equal(plain, fused)
    assert not (tmp_path / "plain" / "fused.npy").exists()
    stored = np.load(tmp_path / "fused" / "fused.npy").astype(np.float32)
    ids, _ = CONVERSATIONS[2]
    start = sum(len(c[0]) for c in CONVERSATIONS[:2])
    n, L = len(ids), tiny.config.num_hidden_layers
    with torch.no_grad():
        alone = tiny.forward(torch.tensor([ids]), torch.arange(n)[None], tiny.causal_mask(n), tiny.new_cache(),
                             hidden=True, layers=fused_layers(L)).hidden[0].numpy()
    assert stored.shape == (sum(len(c[0]) for c in CONVERSATIONS), 3 * tiny.config.hidden_size)
    np.testing.assert_allclose(stored[start:start + n], alone, atol=2e-2, rtol=1e-3)


def test_a_draft_that_reads_fused_states_trains_on_them_and_refuses_data_without(tiny, tmp_path, monkeypatch):
    """EAGLE-3 trains on data prepared with `fused_states` (its 7 unrolled heads logged); data
    without them is refused with the setting to change, before any step."""
    from clover2.drafts.config import DraftConfig
    from clover2.training.train import TrainConfig, train

    chat = [[{"role": "user", "content": "ab" * (3 + i % 5)}, {"role": "assistant", "content": "cd" * (2 + i % 7)}]
            for i in range(40)]
    _char_chat(tiny, monkeypatch)
    config = DataConfig(tokens=300, max_tokens=40, pack_tokens=80, shard_conversations=8, top_k=4)
    cfg = TrainConfig(batch_size=4, max_len=32, max_steps=4, eval_every=4, eval_batches=1, warmup_steps=1, held_out=0.2)
    prepare_data(tiny, chat, tmp_path / "plain", config)
    with pytest.raises(Clover2Error, match="fused_states: true"):
        train(tiny, tmp_path / "plain", tmp_path / "refused", DraftConfig.for_arch("eagle3"), cfg)
    assert not (tmp_path / "refused").exists()
    meta = prepare_data(tiny, chat, tmp_path / "fused", replace(config, fused_states=True))
    assert meta["fused_layers"] == [1, 1, 0] and meta["bytes_per_token"] > 3 * 64 * 2
    ev = train(tiny, tmp_path / "fused", tmp_path / "eagle3", DraftConfig.for_arch("eagle3"), cfg)
    assert {f"head{i}_top1" for i in range(7)} <= set(ev)

@pytest.mark.slow
def test_training_corpus_shares_no_line_with_any_benchmark_task():
    from clover2.training.corpora import sharegpt_conversations
    from clover2.training.data import _lines, split_corpus
    from clover2.training.tasks import benchmark_texts

    texts = benchmark_texts()
    training, held = split_corpus(sharegpt_conversations(), texts)
    assert len(training) > 10_000 and 100 < len(held) < len(training) // 20
    banned = _lines(texts, 40)
    assert not any(_lines((m["content"] for m in c), 40) & banned for c in training + held)


def test_label_mask_drops_answer_tokens_outside_the_targets_top_k(tmp_path):
    data = DistillData(fake_data(tmp_path / "d", tiny_target("llama"), seqs=4, length=12, k=2))
    t2d = torch.arange(96)
    full = data.batch([0, 1], max_len=12, t2d=t2d)
    masked = data.batch([0, 1], max_len=12, t2d=t2d, label_mask=True)
    inside = (full.topk_ids == full.next_ids[..., None]).any(-1)  # x_{t+1} among the target's top-k at t
    assert torch.equal(masked.mask, full.mask & inside) and masked.mask.sum() < full.mask.sum()


def test_a_mix_holds_both_sources_and_weights_the_targets_own_answers(tiny, tmp_path, monkeypatch):
    """`tokens` of corpus text plus `conversations` answered by the target: both sources land in
    their own shards, and an epoch draws each self-generated sequence `self_weight` times."""
    from clover2.training.train import epoch_sequences

    chat = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
            for i in range(30)]
    _char_chat(tiny, monkeypatch)
    config = DataConfig(tokens=60, conversations=3, max_tokens=24, pack_tokens=48, max_new_tokens=4,
                        shard_conversations=2, top_k=4)
    prepare_data(tiny, chat, tmp_path / "d", config)
    data = DistillData(tmp_path / "d")
    assert data.source.count("self") == 3 and data.source.count("corpus") >= 2
    idx = list(range(len(data.source)))
    epoch = epoch_sequences(idx, data.source, 3)
    assert all(epoch.count(i) == (3 if data.source[i] == "self" else 1) for i in idx)
    assert len(epoch) == len(idx) + 2 * 3


def test_prompts_that_quote_a_passage_in_common_share_a_split():
    """RAG prompts reuse retrieved claims: the split groups prompts by passage (transitively), so no
    passage is in two splits; prompts without one split as before, each by the hash of its turns."""
    from clover2.decoding.prompts import PromptRecord
    from clover2.files import stable_hash
    from clover2.training.tasks import SPLITS, in_split, passages

    def rag(i, *claims):
        return PromptRecord(id=f"rag-{i}", category="rag", turns=("Answer from the claims.\n\n"
                            + "\n".join(f"claim: {c}" for c in claims) + f"\nquestion: q{i}?",))
    records = [rag(3 * k + j, f"fact {k}", f"aside {3 * k + j}") for k in range(40) for j in range(3)]  # 40 triples
    records += [rag(200, "x", "y"), rag(201, "y", "z"), rag(202, "z", "w")]  # a chain: one group
    assert passages(records[0]) == {"claim: fact 0", "claim: aside 0"}
    split_of = {r.id: s for s in SPLITS for r in in_split(records, s)}
    assert len(split_of) == len(records)
    for k in range(40):
        assert len({split_of[f"rag-{3 * k + j}"] for j in range(3)}) == 1
    assert split_of["rag-200"] == split_of["rag-201"] == split_of["rag-202"]
    for s in SPLITS:  # no passage in two splits
        mine = {c for r in in_split(records, s) for c in passages(r)}
        assert not mine & {c for t in SPLITS if t != s for r in in_split(records, t) for c in passages(r)}
    plain = [PromptRecord(id=f"q{i}", turns=(f"question {i}",)) for i in range(60)]
    ranked = sorted(plain, key=lambda r: (stable_hash(r.turns), r.id))
    assert in_split(plain, "dev") == [r for r in plain if r in ranked[:12]]  # the first fifth by hash


@pytest.mark.slow
def test_task_splits_are_disjoint_and_training_prompts_never_bench_or_dev():
    """Every built-in task's records fall in exactly one split for good; the dev split has at least
    3 records per task; the training prompts hold no benchmark or dev record, by id or by text, nor
    any retrieved passage that a benchmark or dev prompt quotes."""
    from clover2.training.tasks import SPLITS, TASKS, load_task, passages, training_prompts

    held = set()
    for name, task in TASKS.items():
        records = task()
        parts = {s: load_task(name, split=s) for s in SPLITS}
        ids = [r.id for part in parts.values() for r in part]
        assert sorted(ids) == sorted(r.id for r in records) and len(set(ids)) == len(ids)
        assert len(parts["dev"]) >= 3 and load_task(name) == parts["bench"]
        assert load_task(name, 2, seed=1, split="dev") == load_task(name, 2, seed=1, split="dev")
        held |= {t for s in ("bench", "dev") for r in parts[s] for t in r.turns}
    train = training_prompts()
    assert len(train) > 300 and not held & {t for r in train for t in r.turns}
    quoted = {c for name in TASKS for s in ("bench", "dev") for r in load_task(name, split=s) for c in passages(r)}
    assert len(quoted) > 500 and not quoted & {c for r in train for c in passages(r)}  # nor a retrieved passage
    with pytest.raises(Exception, match="unknown split"):
        load_task("qa", split="test")


def test_held_out_set_answers_each_tasks_dev_prompts(tiny, tmp_path, monkeypatch):
    """The held-out set: the target's own answers to held-out ShareGPT prompts and to `dev_per_task`
    dev prompts of each task, one category per shard; training data takes the tasks' train prompts."""
    import clover2.training.data as data_mod
    from clover2.decoding.prompts import PromptRecord

    def load_task(name, n, seed, *, split):
        return [PromptRecord(id=f"{name}-{split}-{i}", turns=(f"{split} {name} {i}",), category=name) for i in range(n)]

    monkeypatch.setattr(data_mod, "load_task", load_task)
    monkeypatch.setattr(data_mod, "training_prompts", lambda: load_task("qa", 3, 0, split="train"))
    _char_chat(tiny, monkeypatch)
    chat = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "answer"}]
            for i in range(9)]
    config = DataConfig(tokens=0, conversations=2, task_prompts=True, eval_conversations=3, dev_per_task=2,
                        max_tokens=40, pack_tokens=80, max_new_tokens=3, shard_conversations=4, top_k=4)
    prepare_data(tiny, chat, tmp_path / "eval", config.held_out_set())
    held = DistillData(tmp_path / "eval")
    assert held.category == [t for t in data_mod.SPEC_BENCH_TASKS for _ in range(2)] + ["sharegpt"] * 3
    first = held.shards[0]["ids"][: int(held.shards[0]["offsets"][1])].tolist()
    assert bytes(x for x in first).find(b"") == 0 and set(held.source) == {"self"}
    prepare_data(tiny, chat, tmp_path / "train", config)
    assert DistillData(tmp_path / "train").category == ["qa"] * 3 + ["sharegpt"] * 2
    assert json.loads((tmp_path / "train" / "meta.json").read_text())["answer_tokens_per_s"] > 0


def test_the_target_answers_again_the_corpus_conversations_first_prompts(tiny, tmp_path, monkeypatch):
    """The self part's ShareGPT prompts are the corpus part's first ones, in the same seeded order,
    each cut to its own window (`corpus_max_tokens` for the corpus, `max_tokens` for the answers)."""
    chat = [[{"role": "user", "content": f"question {i} " + "x" * (i % 3)},
             {"role": "assistant", "content": "answer " * 9}]
            for i in range(12)]
    _char_chat(tiny, monkeypatch)
    config = DataConfig(tokens=100, corpus_max_tokens=20, conversations=3, max_tokens=60, pack_tokens=80,
                        max_new_tokens=4, shard_conversations=16, top_k=4)
    prepare_data(tiny, chat, tmp_path / "d", config)
    data = DistillData(tmp_path / "d")
    lengths = [b - a for _, a, b in data.sequences]
    corpus = [n for n, s in zip(lengths, data.source) if s == "corpus"]
    assert max(corpus) == 20 and sum(corpus) >= 100
    ids = lambda k: data.shards[data.sequences[k][0]]["ids"][data.sequences[k][1]:data.sequences[k][2]].tolist()  # noqa: E731
    first_self = data.source.index("self")
    for j in range(3):  # the same prompt as the j-th corpus conversation, answered anew (longer than 20 tokens here)
        prompt = ids(j)[: ids(j).index(ord("<") % 90, 3)]
        assert ids(first_self + j)[: len(prompt)] == prompt and lengths[first_self + j] > len(prompt)


@pytest.mark.slow
def test_the_translation_task_is_german_into_english():
    """Spec-Bench's WMT14 de-en stand-in: German text the 135M target can translate (its earlier
    Japanese stand-in was answered in Japanese, outside the draft vocabulary)."""
    from clover2.training.tasks import translation

    records = translation()
    assert len(records) == 575 and len({r.id for r in records}) == 575
    intro = "Translate the following German text into English.\n\n"
    assert all(r.turns[0].startswith(intro) and not r.turns[0].endswith("Answer:") for r in records)
    german = [r for r in records
              if {"der", "die", "das", "und", "ist", "ein", "eine"} & set(r.turns[0][len(intro):].split())]
    assert len(german) > 0.9 * len(records)
