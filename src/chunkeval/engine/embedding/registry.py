"""Which model a name means (bundled, built locally, or a local folder), its fingerprints and its prompts."""

from __future__ import annotations

from pathlib import Path

from chunkeval.engine.embedding import auto, backends, precision, static
from chunkeval.engine.embedding.folders import BUNDLED, existing_folder
from chunkeval.errors import InputError
from chunkeval.files import hash_folder
from chunkeval.limits import short
from chunkeval.vocabulary import DEFAULT_MODEL, close_names

_NOT_MODEL_FILES = frozenset({"README.md", ".gitattributes"})


def resolve_model(model: str) -> Path:
    """The folder of a sentence-transformers model: the bundled all-MiniLM-L6-v2, a model chunkeval
    builds locally on first use (`minilm-static`, see `chunkeval.engine.embedding.static`), or a local path."""
    if static.is_buildable(model):
        return static.ensure_model(model)
    folder = existing_folder(model)
    if folder is None:
        hint = close_names(model, [*BUNDLED, *static.MODELS])
        raise InputError(
            f"model {short(model)} is neither the bundled {DEFAULT_MODEL}, nor one chunkeval builds "
            f"({', '.join(static.MODELS)}), nor a local folder" + (f"; {hint}" if hint else " (nothing downloads)")
        )
    return folder


def is_named_model(model: str) -> bool:
    """Whether `model` is a name chunkeval knows (bundled or built locally), not a folder."""
    return model in BUNDLED or static.is_buildable(model)


def check_model(model: str) -> None:
    """The one-line error for a model that cannot be had, checked before any work (nothing is built here)."""
    if not static.is_buildable(model):
        resolve_model(model)


def check_model_runs_on(model: str, backend: str, source: str | None = None, precision_: str = "fp32") -> None:
    """One line, before any work (nothing is built), for a model an exported backend cannot run (its
    modules, pooling or tokenizer file) or a precision it cannot run in (a static model runs in fp32 only);
    models chunkeval builds are static and run on every backend."""
    if precision_ != "fp32":
        is_static = static.is_buildable(model) or not backends.is_transformer(resolve_model(model))
        precision.check_static(model, is_static, precision_, source)
    if backend not in ("torch", "auto") and not static.is_buildable(model):  # auto skips what cannot run
        backends.check_folder_runs_on(resolve_model(model), backend, source)


def model_prompts(model: str) -> dict[str, str]:
    """The model's own prompts (sentence-transformers' `prompts` in config_sentence_transformers.json),
    e.g. {"query": "query: ", "document": "passage: "} for e5-style models; {} for most models."""
    import json

    path = resolve_model(model) / "config_sentence_transformers.json"
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in prompts.items() if v}


def prompt_for(prompts: dict[str, str], kind: str) -> str:
    """The prompt of a query (`query`) or of a chunk (`document`, else `passage`): '' where the model has none."""
    names = ("query",) if kind == "query" else ("document", "passage", "corpus")
    return next((prompts[n] for n in names if n in prompts), "")


def model_fingerprint(model: str) -> str:
    """SHA-256 (hex) over the relative path and content of every file of the model folder."""
    return hash_folder(resolve_model(model), _NOT_MODEL_FILES)


def embedder_fingerprint(model: str, backend: str = "torch", quantize: str = "none", precision_: str = "fp32") -> str:
    """The fingerprint that keys a model's vectors when `backend` runs it (`chunkeval.engine.embedding.backends`)
    in a precision (`chunkeval.engine.embedding.precision`), and that says whether a run's model changed.

    Lossless backends compute interchangeable vectors (every vector within a cosine of 0.99999 and 1e-4 a
    component of torch fp32's: `chunkeval.engine.embedding.auto`), so they share the model's own fingerprint: a
    switch between torch, onnx and openvino in fp32 (`auto` choosing another, a backend named) is no model change
    and embeds nothing again. A backend this machine's probe found lossy, int8 weights and a lower precision key
    vectors of their own. `auto` is never a key: in fp32 it is lossless by definition, so nothing is resolved (or
    probed) to know its fingerprint; with a lower precision it means torch."""
    fingerprint = model_fingerprint(model)
    folder = resolve_model(model)
    if backend == "auto":
        backend = "torch"  # auto's choice is lossless: torch's key (with bf16 or fp16, auto is torch)
    lossless = quantize == "none" and precision_ == "fp32" and not auto.lossy_here(fingerprint, backend)
    if backend != "torch" and not lossless:
        fingerprint = backends.backend_fingerprint(fingerprint, folder, backend, quantize)
    return precision.precision_fingerprint(fingerprint, precision_)
