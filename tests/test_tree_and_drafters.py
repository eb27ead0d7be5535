"""Token trees, presets, and the drafters without a model: prompt lookup, suffix cache, Token Recycling."""

from __future__ import annotations

import pytest
import torch

from clover2.decoding.drafter import Drafter
from clover2.decoding.prompt_lookup import PromptLookupConfig, PromptLookupDrafter
from clover2.decoding.suffix import SuffixCache, SuffixConfig
from clover2.decoding.token_recycling import TokenRecycling
from clover2.decoding.tree import EAGLE_25, MEDUSA_63, NO_DRAFT, Draft, Tree, preset
from clover2.decoding.union import Union, preference
from clover2.errors import Clover2Error


def test_presets_have_the_published_shapes():
    assert (EAGLE_25.size - 1, EAGLE_25.max_depth) == (25, 5)
    assert (MEDUSA_63.size - 1, MEDUSA_63.max_depth) == (63, 4)
    assert preset("chain5").parents == (-1, 0, 1, 2, 3, 4)
    assert len(EAGLE_25.paths()) == 15  # 4 leaves at depth 2, 7 at depth 3, 2 at 4, 2 at 5


def test_ancestor_matrix_and_depths():
    t = Tree(parents=(-1, 0, 0, 1, 3))
    assert t.depth.tolist() == [0, 1, 1, 2, 3]
    assert t.ancestors[4].nonzero().flatten().tolist() == [0, 1, 3, 4]
    assert t.ancestors[2].nonzero().flatten().tolist() == [0, 2]
    assert sorted(map(tuple, t.paths())) == [(0, 1, 3, 4), (0, 2)]


@pytest.mark.parametrize("parents", [(), (0,), (-1, 1), (-1, 0, 3, 0)])
def test_malformed_trees_are_rejected(parents):
    with pytest.raises(Clover2Error):
        Tree(parents=parents)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(Clover2Error, match="eagle25"):
        preset("eagle26")


def test_rank_paths_need_their_prefixes():
    with pytest.raises(Clover2Error, match="no parent"):
        Tree.from_paths([[0], [1, 0]])


def test_prompt_lookup_proposes_the_continuation_of_the_last_ngram():
    ids = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    draft = PromptLookupDrafter(PromptLookupConfig(max_depth=3)).propose(ids)
    assert draft.tree.parents == (-1, 0, 1, 2)
    assert draft.tokens.tolist() == [7, 8, 9]


def test_prompt_lookup_merges_different_continuations_into_a_tree():
    ids = [1, 2, 3, 4, 8, 1, 2, 5, 6, 9, 1, 2]  # "9 1 2" is new; "1 2" occurred twice
    draft = PromptLookupDrafter(PromptLookupConfig(max_depth=2, max_nodes=8)).propose(ids)
    # Two branches after "1 2": "5 6" (most recent) and "3 4".
    kids = [draft.tokens[i - 1].item() for i, p in enumerate(draft.tree.parents) if p == 0]
    assert sorted(kids) == [3, 5] and draft.tree.size == 5


def test_prompt_lookup_respects_its_node_budget_and_keeps_a_tree():
    ids = [1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 7, 8, 1, 2, 3, 9, 1, 2]
    draft = PromptLookupDrafter(PromptLookupConfig(max_depth=4, max_nodes=3, max_matches=4)).propose(ids)
    assert draft.tree.size == 4
    assert draft.tokens[0].item() == 3  # "3" follows "1 2" twice: the best-supported branch survives


def test_prompt_lookup_without_a_match_proposes_nothing():
    assert PromptLookupDrafter().propose([1, 2, 3, 4]) is NO_DRAFT


def test_suffix_cache_ranks_continuations_by_frequency_and_remembers_earlier_generations():
    cache = SuffixCache(SuffixConfig(max_nodes=3, max_depth=2, min_prob=0.2))
    first = cache.drafter()
    first.begin([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5], None)  # after "1 2": 3 twice, 5 once
    draft = first.propose([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 1, 2])
    kids = [draft.tokens[i - 1].item() for i, p in enumerate(draft.tree.parents) if p == 0]
    assert draft.tokens[0].item() == 3 and sorted(kids) == [3, 5] and draft.tree.size == 4
    assert draft.tokens.tolist() == [3, 5, 4]  # 3 (2/3), its child 4 (2/3 x 1), 5 (1/3); by depth
    later = cache.drafter()  # a new generation reads what the first one saw
    later.begin([9, 1, 2], None)
    assert later.propose([9, 1, 2]).tokens[0].item() == 3
    assert cache.drafter().propose([7, 7, 8]) is NO_DRAFT


def test_token_recycling_reads_the_matrix_along_its_tree_and_learns_from_verification():
    tr = TokenRecycling(10, Tree.from_paths([[0], [1], [0, 0]]))
    drafter = tr.drafter()
    assert drafter.propose([4]).tree.size == 1  # nothing learned yet
    logits = torch.zeros(3, 10)
    logits[0, [7, 2]] = torch.tensor([2.0, 1.0])  # after token 4 the target liked 7, then 2
    logits[1, 3] = 1.0  # after token 7: 3
    drafter.verified(4, Draft(Tree(parents=(-1, 0, 1)), torch.tensor([7, 9])), logits)
    draft = tr.drafter().propose([1, 4])  # the matrix outlives the generation
    assert draft.tree.parents == (-1, 0, 0, 1) and draft.tokens.tolist() == [7, 2, 3]
    with pytest.raises(Clover2Error, match="rank paths"):
        TokenRecycling(10, Tree(parents=(-1, 0)))


class _Fixed(Drafter):
    """Proposes one fixed draft every step."""

    def __init__(self, draft: Draft):
        self.draft = draft

    def propose(self, ids):
        return self.draft


def test_one_source_union_takes_prompt_lookup_where_it_matches_and_the_other_drafter_elsewhere():
    hybrid = Union({"pld": PromptLookupDrafter(), "model": _Fixed(Draft(Tree(parents=(-1, 0)), torch.tensor([42])))},
                   one_source=True)
    assert hybrid.propose([1, 2, 3, 1, 2]).tokens.tolist()[0] == 3
    assert hybrid.propose([1, 2, 3, 4]).tokens.tolist() == [42]


def _node_paths(draft: Draft) -> list[tuple[int, ...]]:
    """Each node's token path from the root, in node order."""
    tree, toks = draft.tree, draft.tokens.tolist()
    return [tuple(toks[j - 1] for j in tree.ancestors[i].nonzero().flatten().tolist() if j)
            for i in range(1, tree.size)]


def _paths(draft: Draft) -> set[tuple[int, ...]]:
    return set(_node_paths(draft))


def test_union_merges_shared_prefixes_and_keeps_each_sources_best_nodes():
    # model: 5 -> (6 -> 7), 8; scores rank 5 > 6 > 8 > 7. copy: 5 -> 6 -> 9, and 4
    model = Draft(Tree(parents=(-1, 0, 0, 1)), torch.tensor([5, 8, 6]), scores=torch.tensor([-0.1, -2.0, -0.5]))
    copy = Draft(Tree(parents=(-1, 0, 1, 2, 0)), torch.tensor([5, 6, 9, 4]))
    assert preference(model) == [1, 3, 2] and preference(copy) == [1, 2, 3, 4]
    union = Union({"model": _Fixed(model), "copy": _Fixed(copy)}, calibrating=True)
    draft = union.propose([1])
    assert _paths(draft) == {(5,), (8,), (5, 6), (5, 6, 9), (4,)}  # 5 and 5-6 shared: 5 nodes, not 7
    assert draft.tree.size == 6
    by_path = dict(zip(_node_paths(draft), union.ranks[-1]))
    assert by_path[(5,)] == {"model": 0, "copy": 0} and by_path[(5, 6)] == {"model": 1, "copy": 1}
    assert by_path[(8,)] == {"model": 2} and by_path[(4,)] == {"copy": 3}
    small = Union({"model": _Fixed(model), "copy": _Fixed(copy)}, {"model": 1, "copy": 2}).propose([1])
    assert _paths(small) == {(5,), (5, 6)}  # each source's best nodes: a subtree of each, merged
    assert Union({"model": _Fixed(NO_DRAFT), "copy": _Fixed(NO_DRAFT)}).propose([1]).tree.size == 1


def test_a_union_records_which_source_proposed_each_accepted_token():
    """Per step, the source of each accepted draft token, read along the committed tokens: a node two
    sources proposed counts for the first of them; the bonus token is the target's, no source's."""
    copy = Draft(Tree(parents=(-1, 0, 1)), torch.tensor([5, 6]))  # 5 -> 6
    model = Draft(Tree(parents=(-1, 0, 1, 2)), torch.tensor([5, 7, 8]))  # 5 -> 7 -> 8
    union = Union({"copy": _Fixed(copy), "model": _Fixed(model)})
    union.begin([1], None)
    union.observe([2], None)  # the prefill's token: no step, nothing proposed
    union.propose([1, 2])
    union.observe([5, 7, 9], None)  # 5 (both proposed it: the copy's), 7 (the model's), then the bonus 9
    union.propose([1, 2, 5, 7, 9])
    union.observe([4], None)  # nothing accepted
    assert union.accepted == [("copy", "model"), ()]
    hybrid = Union({"copy": _Fixed(NO_DRAFT), "model": _Fixed(model)}, one_source=True)
    hybrid.propose([1])
    hybrid.observe([5, 7, 8], None)  # cut at a stop: every token accepted, no bonus
    assert hybrid.accepted == [("model", "model", "model")]


@pytest.mark.parametrize("bad", [dict(min_ngram=0), dict(min_ngram=4, max_ngram=3), dict(max_nodes=0)])
def test_prompt_lookup_config_rejects_nonsense(bad):
    with pytest.raises(Clover2Error):
        PromptLookupConfig(**bad)


def test_draft_tokens_must_match_the_tree():
    with pytest.raises(ValueError):
        from clover2.decoding.tree import Draft
        Draft(EAGLE_25, torch.zeros(3, dtype=torch.long))
