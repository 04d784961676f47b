"""Loading a sentence-transformers model from a local directory (the local-embed extra).

Shared by the torch runtime (kb.embedding) and the ONNX export (kb.onnx_embed), so neither imports
the other for it."""

from __future__ import annotations

import os
from typing import Any


def load_sentence_transformer(path: str) -> tuple[Any, Any]:
    """A sentence-transformers model from a local directory, never from the network, with a
    private copy of its Rust tokenizer for counting: ~10x cheaper per call than the transformers
    wrapper, and free of the truncation state encode() leaves on the shared one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Optional dependencies (the local-embed extra), imported only when a local model loads: sentence-transformers
    # imports torch (~5 s), and reads the HF_* variables set above.
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    from transformers.utils import logging as transformers_logging

    # transformers draws a "Loading weights" progress bar on stderr for every load, even from a local
    # folder: noise in a server's or a worker's output, so off in this process (issue 52).
    transformers_logging.disable_progress_bar()
    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    model.eval()
    counter = Tokenizer.from_str(model.tokenizer.backend_tokenizer.to_str())
    counter.no_truncation()
    counter.no_padding()
    return model, counter
