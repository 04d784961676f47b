"""bench/calibrate_relevance.py replays the judge's decisions from a trace (agents.judge.trace): an
answer stands only above its threshold and when its cited chunks hold the question's anchors."""

from __future__ import annotations

import json

from bench.calibrate_relevance import last_judgements, rates


def test_the_replay_declines_an_answer_that_misses_an_anchor(tmp_path):
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"question": "words, anchored", "best_passage": 0.6, "found_by_words": True, "words_anchored": True, "judged_anchored": False},
        {"question": "words, not anchored", "best_passage": 0.9, "found_by_words": True, "words_anchored": False, "judged_anchored": True},
        {"question": "model, anchored", "best_passage": 0.8, "found_by_words": False, "words_anchored": False, "judged_anchored": True},
        {"question": "model, no anchor", "best_passage": 0.99, "found_by_words": False, "words_anchored": False, "judged_anchored": False},
        {"question": "an old trace line", "best_passage": 0.99, "found_by_words": False},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    judged = last_judgements(trace)
    questions = {q["question"]: (str(i), True) for i, q in enumerate(rows)}
    declined, abstained, nulls, answerable = rates((judged, questions), 0.5, 0.7)
    assert (nulls, answerable) == (0, 5)
    assert abstained == 2 / 5  # the two answers whose citations miss an anchor
    assert rates((judged, questions), 0.5, 0.95)[1] == 3 / 5  # and the model's answer under a higher `sure`
