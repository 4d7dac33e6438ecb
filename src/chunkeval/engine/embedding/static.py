"""Embedding models that chunkeval builds locally, offline, from what is installed.

`ensure_model(name)` returns the folder of a registered model under `$CHUNKEVAL_HOME/models/<name>/`,
building it on first use. The folder is an ordinary sentence-transformers folder, so
`SentenceTransformer(folder)` and `chunkeval run --model <folder>` read it like any local model.

`minilm-static` is a static (bag of word pieces) model distilled from the bundled all-MiniLM-L6-v2 the
way model2vec does it: every word piece of MiniLM's vocabulary is embedded alone (`[CLS] piece [SEP]`,
mean pooled), the vectors are reduced to 256 dimensions by PCA and weighted by SIF over a Zipf
estimate of the pieces' frequencies. A text's vector is then the mean of its pieces' vectors: no
network, about 50x faster than MiniLM on a CPU, and weaker.

A build is written into a temporary folder beside the final one, then renamed: a killed build leaves
only a temporary folder, never used and removed by a later build. Builders hold a lock file, so two
processes asking at once build once and both get the finished folder. A finished folder carries
`chunkeval_model.json` (recipe and file sizes); a folder whose record is missing or disagrees with
its files is rebuilt. The build is deterministic: on one machine and installation the files, and so
chunkeval's model fingerprint, are the same at every build.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from chunkeval import progress
from chunkeval.engine.embedding.built import build_folder, folder_is_built
from chunkeval.engine.embedding.folders import existing_folder
from chunkeval.errors import InputError
from chunkeval.paths import home


@dataclass(frozen=True)
class ModelSpec:
    """A model chunkeval can build: `build(folder, **params)` writes a sentence-transformers folder."""

    name: str
    description: str
    build: Callable[..., None]
    params: dict = field(default_factory=dict)
    recipe: int = 1  # bump when the build changes, so that old folders are rebuilt

    def record(self) -> dict:
        return {"name": self.name, "recipe": self.recipe, "params": self.params}


# --------------------------------------------------------------------------- the static MiniLM


def _unit_token_vectors(
    base: Path, token_ids: np.ndarray, prefix: list[int], suffix: list[int], batch: int = 512, what: str = "building"
) -> np.ndarray:
    """Mean-pooled last hidden state of `prefix + [id] + suffix` (`[CLS] id [SEP]`) for each id, float64: the
    build's cost (about two thirds of it; loading torch and sentence-transformers the rest), shown as step `what`
    counting word pieces."""
    import inspect

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(base)).eval()
    types = "token_type_ids" in inspect.signature(model.forward).parameters
    out = np.empty((len(token_ids), model.config.hidden_size), dtype=np.float64)
    ids = torch.as_tensor(token_ids, dtype=torch.long)
    with torch.inference_mode():
        for lo in range(0, len(ids), batch):
            progress.step(what, lo, len(ids))
            piece = ids[lo : lo + batch, None]
            seq = torch.cat(
                [
                    torch.tensor([prefix] * len(piece), dtype=torch.long).reshape(len(piece), -1),
                    piece,
                    torch.tensor([suffix] * len(piece), dtype=torch.long).reshape(len(piece), -1),
                ],
                dim=1,
            )
            extra = {"token_type_ids": torch.zeros_like(seq)} if types else {}
            hidden = model(input_ids=seq, attention_mask=torch.ones_like(seq), **extra).last_hidden_state
            out[lo : lo + len(piece)] = hidden.double().mean(dim=1).numpy()
    progress.step(what, len(ids), len(ids))
    return np.nan_to_num(out)


def _pca(x: np.ndarray, dims: int) -> np.ndarray:
    """Projection of `x` on its first `dims` principal components, each signed so that its largest score is positive."""
    centred = x - x.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(centred.T @ centred / (len(x) - 1))
    components = eigvecs[:, ::-1][:, :dims]
    scores = centred @ components
    signs = np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(scores.shape[1])])
    return scores * np.where(signs == 0, 1.0, signs)


def build_static(
    folder: Path,
    base: str = "all-MiniLM-L6-v2",
    dims: int = 256,
    sif: float = 1e-4,
    drop: str = r"\[unused\d+\]",
    max_pieces: int | None = None,
) -> None:
    """Distil a static model from the sentence-transformers model `base` (a bundled name or a folder) into `folder`.

    `max_pieces` keeps only the first word pieces of the vocabulary (the others get zero vectors): for tests.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
    from tokenizers import Tokenizer

    root = existing_folder(base)
    if root is None:
        raise InputError(f"the base {base!r} of a static model is neither the bundled model nor a local folder")
    # the transformer is the first module of the sentence-transformers folder
    modules = json.loads((root / "modules.json").read_text()) if (root / "modules.json").is_file() else []
    first = next((m.get("path", "") for m in modules if m.get("type", "").endswith("Transformer")), "")
    transformer = root / first
    tokenizer = Tokenizer.from_file(str(transformer / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()  # MiniLM's file truncates at 128 pieces; a static model has no limit

    special = tokenizer.encode("", add_special_tokens=True).ids  # [CLS, SEP] for a BERT tokenizer
    prefix, suffix = special[:1], special[1:]
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    keep = np.array([i for tok, i in vocab if not (drop and re.fullmatch(drop, tok))], dtype=np.int64)
    if max_pieces is not None:
        keep = keep[:max_pieces]

    torch.manual_seed(0)
    vectors = _unit_token_vectors(transformer, keep, prefix, suffix, what="building static model")
    vectors = _pca(vectors, min(dims, vectors.shape[1], len(keep) - 1))
    rank_p = 1.0 / np.arange(2, len(keep) + 2)  # Zipf: the vocabulary is roughly in frequency order
    rank_p /= rank_p.sum()
    vectors *= (sif / (sif + rank_p))[:, None]

    weights = np.zeros((tokenizer.get_vocab_size(), vectors.shape[1]), dtype=np.float32)
    weights[keep] = vectors.astype(np.float32)
    static = StaticEmbedding(tokenizer, embedding_weights=weights, base_model=base)
    model = SentenceTransformer(modules=[static, Normalize()], device="cpu")
    model.save(str(folder), create_model_card=False)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "minilm-static",
            "static embeddings distilled from all-MiniLM-L6-v2",
            build_static,
            {"base": "all-MiniLM-L6-v2", "dims": 256, "sif": 1e-4},
        ),
    ]
}


# --------------------------------------------------------------------------- the folders


def models_dir() -> Path:
    return home() / "models"


def model_dir(name: str) -> Path:
    return models_dir() / name


def is_buildable(name: str) -> bool:
    """Whether `name` is a model chunkeval can build locally."""
    return name in MODELS


def is_built(name: str) -> bool:
    """Whether the folder of `name` is complete: its record matches the recipe and its files."""
    return name in MODELS and folder_is_built(model_dir(name), MODELS[name].record(), "modules.json")


def ensure_model(name: str, quiet: bool = False) -> Path:
    """The folder of the registered model `name`, built once (a progress line goes to stderr)."""
    if not is_buildable(name):
        raise InputError(f"no model named {name!r} can be built here; known: {', '.join(sorted(MODELS))}")
    spec = MODELS[name]
    if is_built(name):
        return model_dir(name)
    with progress.stage("building models"):  # a first run's own stage, not its checks'
        return build_folder(
            model_dir(name),
            spec.record(),
            lambda tmp: spec.build(tmp, **spec.params),
            f"building {name} ({spec.description})",
            quiet,
            needs="modules.json",
        )
