"""ONNX Runtime backend for the local sentence-transformers embedders (MiniLM, all-mpnet-base-v2).

The ONNX graphs are exported here, offline, from the weights the model directory ships (no
download): the transformer's token outputs only, so tokenisation, attention-mask-weighted mean
pooling and L2 normalisation are done by this module exactly as sentence-transformers does them
(text stripped, truncated to the model's max_seq_length including its special tokens). Two
variants per model:

- `fp32`: the exported graph. Its vectors equal torch's up to float rounding, so it serves the
  same model key ("minilm-l6-v2:384") as the torch backend: GROUNDED_EMBED_BACKEND picks the
  runtime, never the vectors.
- `int8`: dynamic quantisation of that graph (ONNX Runtime's `quant_pre_process`, then
  `quantize_dynamic` with per-channel signed 8-bit weights on the MatMul/Gemm nodes that multiply
  by a weight; the activation x activation MatMuls of attention, the embeddings, LayerNorm and the
  pooling stay float). Its vectors are close to fp32 but not equal, so it has its own model key
  ("minilm-l6-v2-int8:384"): one index never mixes the two.

Graphs are cached in GROUNDED_ONNX_DIR under a folder named by a hash of the source files and of
this module's recipe version; the first process that needs one builds it under a file lock
(torch is imported only then), the others wait and load it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kb.sentence_models import load_sentence_transformer
from tenants.conf import product_settings

Variant = Literal["fp32", "int8"]
VARIANTS: tuple[Variant, ...] = ("fp32", "int8")
RECIPE_VERSION = 1  # bump when the export or quantisation recipe changes: old caches are then ignored
SOURCE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                "special_tokens_map.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")

_lock = threading.Lock()
_sessions: dict[tuple[str, str], tuple[Any, Any, Any, dict]] = {}


def source_hash(source: Path) -> str:
    """sha256 over the model directory's files that decide its vectors, and the recipe version."""
    digest = hashlib.sha256(f"grounded-onnx-recipe-{RECIPE_VERSION}".encode())
    for name in SOURCE_FILES:
        path = source / name
        if path.exists():
            digest.update(name.encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def cache_dir(source: Path) -> Path:
    """The folder holding this model's exported graphs: GROUNDED_ONNX_DIR/<model dir name>-<hash>."""
    return Path(product_settings.GROUNDED_ONNX_DIR) / f"{source.name}-{source_hash(source)[:16]}"


def ensure_exported(source: Path, variant: Variant) -> Path:
    """The cache folder with `model-<variant>.onnx`, `tokenizer.json` and `meta.json` in it,
    building what is missing (under an exclusive lock, so concurrent processes build it once)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r}; known: {VARIANTS}")
    folder = cache_dir(source)
    if (folder / f"model-{variant}.onnx").exists() and (folder / "meta.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "model-fp32.onnx").exists() or not (folder / "meta.json").exists():
            _export_fp32(source, folder)
        if variant == "int8" and not (folder / "model-int8.onnx").exists():
            _quantise_int8(folder)
    return folder


def _export_fp32(source: Path, folder: Path) -> None:
    """The transformer (token embeddings out) as ONNX, and the exact tokenizer and settings the
    torch pipeline uses."""
    import torch  # optional dependency (local-embed extra): only needed to build the cache

    model, _ = load_sentence_transformer(str(source))
    transformer = model[0]
    auto_model = transformer.auto_model
    auto_model.config._attn_implementation = "eager"  # plain ops: the exporter traces them faithfully
    auto_model.eval()
    pooling = model[1].get_config_dict() if len(model) > 1 else {}
    if pooling.get("pooling_mode", "mean" if pooling.get("pooling_mode_mean_tokens") else None) != "mean":
        raise ValueError(f"{source}: the ONNX backend does mean pooling only, the model asks for {pooling}")
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in model.tokenizer.model_input_names]
    sample = model.tokenizer(["an example sentence to trace the graph", "and a second one"], padding=True, return_tensors="pt")

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = auto_model

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args, strict=True)), return_dict=True).last_hidden_state

    tmp = folder / "model-fp32.onnx.tmp"
    with torch.no_grad():
        torch.onnx.export(TokenEmbeddings(), tuple(sample[name] for name in inputs), str(tmp), input_names=inputs,
                          output_names=["token_embeddings"], opset_version=17, dynamo=False,
                          dynamic_axes={**{name: {0: "batch", 1: "sequence"} for name in inputs},
                                        "token_embeddings": {0: "batch", 1: "sequence"}})
    (folder / "tokenizer.json").write_text(model.tokenizer.backend_tokenizer.to_str())
    meta = {"max_seq_length": int(transformer.max_seq_length), "do_lower_case": bool(getattr(transformer, "do_lower_case", False)),
            "inputs": inputs, "dim": int(model.get_sentence_embedding_dimension()), "pooling": pooling,
            "pad_token": model.tokenizer.pad_token, "pad_id": int(model.tokenizer.pad_token_id)}
    os.replace(tmp, folder / "model-fp32.onnx")
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


def _quantise_int8(folder: Path) -> None:
    """Dynamic int8: pre-processed graph (shape inference, constant folding), per-channel QInt8
    weights on the MatMul/Gemm nodes whose second operand is a weight; everything else stays fp32."""
    # Optional dependencies (local-embed extra), only when the int8 graph is built.
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = folder / "model-fp32-prepared.onnx"
    # skip_symbolic_shape: symbolic shape inference cannot finish on these graphs (ONNX shape inference still runs)
    quant_pre_process(str(folder / "model-fp32.onnx"), str(prepared), skip_symbolic_shape=True)
    graph = onnx.load(str(prepared)).graph
    weights = {init.name for init in graph.initializer}
    weight_matmuls = [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in weights]
    tmp = folder / "model-int8.onnx.tmp"
    quantize_dynamic(str(prepared), str(tmp), per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                     nodes_to_quantize=weight_matmuls)
    os.replace(tmp, folder / "model-int8.onnx")
    prepared.unlink(missing_ok=True)


def load_session(source: Path, variant: Variant) -> tuple[Any, Any, Any, dict]:
    """(InferenceSession, truncating+padding tokenizer, counting tokenizer, meta), once per process."""
    key = (str(source), variant)
    if key not in _sessions:
        with _lock:
            if key not in _sessions:
                _sessions[key] = _open(source, variant)
    return _sessions[key]


def _open(source: Path, variant: Variant) -> tuple[Any, Any, Any, dict]:
    import onnxruntime as ort  # optional dependency (local-embed extra)
    from tokenizers import Tokenizer  # optional dependency (comes with the local-embed extra)

    folder = ensure_exported(source, variant)
    meta = json.loads((folder / "meta.json").read_text())
    options = ort.SessionOptions()
    options.intra_op_num_threads = product_settings.GROUNDED_ONNX_THREADS or os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # No busy-waiting between ops: on a machine shared with a web server, a database and other
    # workers, spinning threads burn CPU the others need (measured: ~15 % less CPU per batch).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(folder / f"model-{variant}.onnx"), options, providers=["CPUExecutionProvider"])
    text = (folder / "tokenizer.json").read_text()
    batch_tokenizer = Tokenizer.from_str(text)
    batch_tokenizer.enable_truncation(max_length=meta["max_seq_length"], strategy="longest_first")
    batch_tokenizer.enable_padding(pad_id=meta["pad_id"], pad_token=meta["pad_token"])
    counter = Tokenizer.from_str(text)
    counter.no_truncation()
    counter.no_padding()
    return session, batch_tokenizer, counter, meta


def embed(source: Path, variant: Variant, texts: list[str], batch_size: int) -> np.ndarray:
    """Unit-length float32 vectors for `texts`, in order: sentence-transformers' Transformer ->
    mean Pooling -> Normalize, on ONNX Runtime. Texts are batched by token length (less padding),
    as sentence-transformers batches by character length; padding never changes a vector."""
    session, tokenizer, _, meta = load_session(source, variant)
    out = np.empty((len(texts), meta["dim"]), dtype=np.float32)
    cleaned = [t.strip().lower() if meta["do_lower_case"] else t.strip() for t in texts]
    lengths = [len(e.ids) for e in tokenizer.encode_batch(cleaned)] if len(texts) > batch_size else [0] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    for start in range(0, len(order), batch_size):
        picked = order[start:start + batch_size]
        encodings = tokenizer.encode_batch([cleaned[i] for i in picked])
        feeds = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                 "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}
        if "token_type_ids" in meta["inputs"]:
            feeds["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        tokens = session.run(None, feeds)[0]
        mask = feeds["attention_mask"][:, :, None].astype(np.float32)
        pooled = (tokens * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out[picked] = pooled / np.clip(norms, 1e-12, None)
    return out
