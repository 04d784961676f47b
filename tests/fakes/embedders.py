"""Test-only embedders, loaded through GROUNDED_EMBEDDER_PLUGINS=tests.fakes.embedders (also in workers).

- "hash-counting:<dim>": the hash embedder, and every embedded text's sha256 is counted in the Redis
  hash `counter_key()` (so a test can prove each chunk was embedded exactly once, across processes).
- "hash-slow:<dim>": counting, and sleeps GROUNDED_SLOW_EMBED_S seconds (default 0.4) per call, so a
  worker can be killed mid-job.
- "hash-flaky:<dim>": raises TransientEmbeddingError on its first GROUNDED_FLAKY_FAILS calls
  (counted in Redis), then behaves.
"""

from __future__ import annotations

import hashlib
import time

import redis

from kb.embedding import HashEmbedder, Task, TransientEmbeddingError
from tenants.conf.environment import get_float, get_int, get_str

REDIS_URL = get_str("GROUNDED_TEST_REDIS_URL")


def counter_key() -> str:
    return f"grounded:test:embedcount:{get_str('GROUNDED_DB_NAME')}"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def embed_counts() -> dict[str, int]:
    """sha256(text) -> number of times it was embedded."""
    return {k.decode(): int(v) for k, v in _redis().hgetall(counter_key()).items()}


def reset_counts() -> None:
    r = _redis()
    r.delete(counter_key(), counter_key() + ":flaky")


class CountingHashEmbedder(HashEmbedder):
    def __init__(self, name: str, dim: int, delay_s: float = 0.0) -> None:
        super().__init__(dim, model_key=f"{name}:{dim}")
        self.delay_s = delay_s

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        if task == "document" and texts:
            pipe = _redis().pipeline()
            for text in texts:
                pipe.hincrby(counter_key(), hashlib.sha256(text.encode()).hexdigest(), 1)
            pipe.execute()
        return super().embed(texts, task)


class FlakyHashEmbedder(HashEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim, model_key=f"hash-flaky:{dim}")

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        calls = _redis().incr(counter_key() + ":flaky")
        if calls <= get_int("GROUNDED_FLAKY_FAILS"):
            raise TransientEmbeddingError(f"scripted transient failure {calls}")
        return super().embed(texts, task)


def resolve(name: str, dim: int):
    if name == "hash-counting":
        return CountingHashEmbedder(name, dim or 64)
    if name == "hash-slow":
        return CountingHashEmbedder(name, dim or 64, delay_s=get_float("GROUNDED_SLOW_EMBED_S"))
    if name == "hash-flaky":
        return FlakyHashEmbedder(dim or 64)
    return None
