"""Embedders: text in, unit-length vectors out. One Protocol, several implementations.

`get_embedder(model_key)` resolves the key stored on a corpus ("minilm-l6-v2:384",
"gemini-embedding-001:768", "hash:64") to an instance. Keys name model and dimension so
vectors of different models are never mixed.
"""

from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache
from typing import Literal, Protocol, runtime_checkable

Task = Literal["document", "query"]


@runtime_checkable
class Embedder(Protocol):
    model_key: str  # "<model>:<dim>"
    dim: int
    max_tokens: int  # the model's input limit; longer input is silently truncated by the model

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        """One unit-length vector per text, in order."""
        ...

    def count_tokens(self, text: str) -> int:
        """Length of `text` in the model's own tokens (used to size chunks)."""
        ...


_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for unit tests: similar words, similar vectors.

    Not a semantic model; never the default outside tests.
    """

    max_tokens = 512

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.model_key = f"hash:{dim}"

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                vec[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            if norm == 1.0 and not any(vec):
                vec[0] = 1.0
            out.append([v / norm for v in vec])
        return out

    def count_tokens(self, text: str) -> int:
        return len(_WORD.findall(text))


@lru_cache(maxsize=8)
def get_embedder(model_key: str) -> Embedder:
    """Resolve a stored model key to an embedder instance (cached per process)."""
    name, _, dim_text = model_key.partition(":")
    dim = int(dim_text) if dim_text else 0
    if name == "hash":
        return HashEmbedder(dim or 64)
    raise ValueError(f"unknown embedding model {model_key!r}")
