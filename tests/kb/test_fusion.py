"""kb.fusion: the one reciprocal-rank fusion (pure)."""

from kb.fusion import rrf_scores


def test_ranks_count_from_one_and_weights_scale():
    scores = rrf_scores([(["a", "b"], 1.0), (["b", "c"], 2.0)], rrf_k=60)
    assert scores["a"] == 1 / 61 and scores["c"] == 2 / 62
    assert scores["b"] == 1 / 62 + 2 / 61  # in both lists: ahead of either single-list item
    assert max(scores, key=scores.get) == "b"


def test_an_item_repeated_in_one_list_counts_once_at_its_first_rank():
    assert rrf_scores([(["a", "a", "b"], 1.0)], rrf_k=0) == {"a": 1.0, "b": 1 / 3}
