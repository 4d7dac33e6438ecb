"""Embedding: which model a name means, its vectors cached in Parquet, and who runs it.

- `registry`: model names → folders (bundled, built locally, local paths), fingerprints, prompts;
- `cache`: `EmbeddingCache`, vectors keyed by text hash under the model's fingerprint;
- `embedder`: `Embedder`, which embeds what the cache lacks, and the device choice;
- `backends`: torch, onnx and openvino runners and their exports; `auto`: the fastest lossless one, probed once;
- `static`: models chunkeval distils locally (`minilm-static`); `built`: folders built once, atomically.
"""

from chunkeval.engine.embedding.cache import PART_COLUMNS, EmbeddingCache, text_hash
from chunkeval.engine.embedding.embedder import (
    DEVICES,
    Embedder,
    check_batch_size,
    check_device,
    fitting_batch,
    pick_device,
)
from chunkeval.engine.embedding.registry import (
    check_model,
    embedder_fingerprint,
    model_fingerprint,
    model_prompts,
    prompt_for,
    resolve_model,
)
from chunkeval.vocabulary import DEFAULT_MODEL

__all__ = [
    "DEFAULT_MODEL",
    "DEVICES",
    "PART_COLUMNS",
    "EmbeddingCache",
    "Embedder",
    "check_batch_size",
    "check_device",
    "check_model",
    "embedder_fingerprint",
    "fitting_batch",
    "model_fingerprint",
    "model_prompts",
    "pick_device",
    "prompt_for",
    "resolve_model",
    "text_hash",
]
