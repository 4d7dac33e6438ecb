"""Embedding models that chunkeval builds locally, offline, from what is installed.

`ensure_model(name)` returns the folder of a registered model under `$CHUNKEVAL_HOME/models/<name>/`,
building it on first use. The folder is an ordinary sentence-transformers folder, so
`SentenceTransformer(folder)` and `chunkeval --model <folder>` read it like any local model.

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

import contextlib
import json
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from chunkeval.errors import InputError
from chunkeval.experiment import home
from chunkeval.files import pid_alive

RECORD = "chunkeval_model.json"
_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{32}\.(tmp|old)$")


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


def _unit_token_vectors(base: Path, token_ids: np.ndarray, prefix: list[int], suffix: list[int],
                        batch: int = 512) -> np.ndarray:
    """Mean-pooled last hidden state of `prefix + [id] + suffix` (`[CLS] id [SEP]`) for each id, float64."""
    import inspect

    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(base)).eval()
    types = "token_type_ids" in inspect.signature(model.forward).parameters
    out = np.empty((len(token_ids), model.config.hidden_size), dtype=np.float64)
    ids = torch.as_tensor(token_ids, dtype=torch.long)
    with torch.inference_mode():
        for lo in range(0, len(ids), batch):
            piece = ids[lo:lo + batch, None]
            seq = torch.cat([torch.tensor([prefix] * len(piece), dtype=torch.long).reshape(len(piece), -1), piece,
                             torch.tensor([suffix] * len(piece), dtype=torch.long).reshape(len(piece), -1)], dim=1)
            extra = {"token_type_ids": torch.zeros_like(seq)} if types else {}
            hidden = model(input_ids=seq, attention_mask=torch.ones_like(seq), **extra).last_hidden_state
            out[lo:lo + len(piece)] = hidden.double().mean(dim=1).numpy()
    return np.nan_to_num(out)


def _pca(x: np.ndarray, dims: int) -> np.ndarray:
    """Projection of `x` on its first `dims` principal components, each signed so that its largest score is positive."""
    centred = x - x.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(centred.T @ centred / (len(x) - 1))
    components = eigvecs[:, ::-1][:, :dims]
    scores = centred @ components
    signs = np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(scores.shape[1])])
    return scores * np.where(signs == 0, 1.0, signs)


def build_static(folder: Path, base: str = "all-MiniLM-L6-v2", dims: int = 256, sif: float = 1e-4,
                 drop: str = r"\[unused\d+\]", max_pieces: int | None = None) -> None:
    """Distil a static model from the sentence-transformers model `base` (a bundled name or a folder) into `folder`.

    `max_pieces` keeps only the first word pieces of the vocabulary (the others get zero vectors): for tests.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
    from tokenizers import Tokenizer

    from chunkeval.embedding import resolve_model

    root = resolve_model(base)
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
    vectors = _unit_token_vectors(transformer, keep, prefix, suffix)
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
    spec.name: spec for spec in [
        ModelSpec("minilm-static", "static embeddings distilled from all-MiniLM-L6-v2", build_static,
                  {"base": "all-MiniLM-L6-v2", "dims": 256, "sif": 1e-4}),
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


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RECORD}


def is_built(name: str) -> bool:
    """Whether the folder of `name` is complete: its record matches the recipe and its files."""
    return name in MODELS and folder_is_built(model_dir(name), MODELS[name].record(), "modules.json")


def folder_is_built(folder: Path, record: dict, needs: str | None = None) -> bool:
    """Whether `folder` was built whole from `record`: its record file names the recipe and its files."""
    try:
        written = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        return (written.get("model") == record and written.get("files") == _files(folder)
                and (needs is None or (folder / needs).is_file()))
    except (OSError, ValueError, AttributeError):
        return False


def _remove_leftovers(final: Path) -> None:
    """Temporary folders of builds of `final` whose process is gone."""
    for path in final.parent.glob(f".{final.name}.*"):
        match = _TMP.match(path.name)
        if match and match["name"] == final.name and not pid_alive(int(match["pid"])):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _lock(final: Path):
    """An exclusive lock on `.<name>.lock` beside `final` (released by the system if the process dies)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the renames alone keep folders whole
        yield
        return
    with open(final.parent / f".{final.name}.lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stage(final: Path, kind: str = "tmp") -> Path:
    return final.parent / f".{final.name}.{os.getpid()}.{uuid.uuid4().hex}.{kind}"


def ensure_model(name: str, quiet: bool = False) -> Path:
    """The folder of the registered model `name`, built once (a progress line goes to stderr)."""
    if not is_buildable(name):
        raise InputError(f"no model named {name!r} can be built here; known: {', '.join(sorted(MODELS))}")
    spec = MODELS[name]
    return build_folder(model_dir(name), spec.record(), lambda tmp: spec.build(tmp, **spec.params),
                        f"building {name} ({spec.description})", quiet, needs="modules.json")


def build_folder(final: Path, record: dict, build: Callable[[Path], None], doing: str, quiet: bool = False,
                 needs: str | None = None) -> Path:
    """`final`, built once by `build(folder)` from `record` (its recipe): in a temporary folder beside
    it under a lock, then renamed. A folder whose record disagrees with `record` or its files is rebuilt."""
    if folder_is_built(final, record, needs):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _lock(final):
        if folder_is_built(final, record, needs):  # another process built it while this one waited
            return final
        _remove_leftovers(final)
        if not quiet:
            print(f"chunkeval: {doing}, once…", file=sys.stderr, flush=True)
        tmp = _stage(final)
        try:
            tmp.mkdir()
            with _quiet_libraries():
                build(tmp)
            files = {"model": record, "files": _files(tmp)}
            (tmp / RECORD).write_text(json.dumps(files, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            if final.exists():  # damaged or from an older recipe: moved aside, then removed
                old = _stage(final, "old")
                os.replace(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextlib.contextmanager
def _quiet_libraries():
    """No progress bars or load reports from transformers during a build."""
    import logging

    names = ["transformers", "sentence_transformers", "huggingface_hub"]
    levels = {n: logging.getLogger(n).level for n in names}
    previous = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        from transformers.utils import logging as tlog

        bars = tlog.is_progress_bar_enabled()
        tlog.disable_progress_bar()
    except Exception:  # noqa: BLE001 - an older transformers: keep its bars
        tlog, bars = None, False
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        if tlog is not None and bars:
            tlog.enable_progress_bar()
        if previous is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = previous
