"""The index axis: how the dense half of retrieval searches (docs/indexes.md).

`exact` is chunkeval's exact top-k (`chunkeval.engine.retrieval.retrievers.dense.top_k`); `hnsw` and `ivf` are faiss
indexes in process (`faiss_kinds`); `chroma` a Chroma collection (`chroma_kind`). An index is built once per
(vectors, kind, build parameters): kept in memory for the settings that share it, and persisted (faiss
files under `$CHUNKEVAL_HOME/indexes/faiss/`, written in the background with their checksum and build
seconds beside them (`persist`); Chroma collections named by what they hold), so a warm run builds nothing.
A persisted index that does not match its checksum or cannot be read is set aside (renamed `.damaged`) and
built again, like a damaged embedding-cache part.

`search(spec, queries, chunks, depth)` is what a retriever calls instead of the exact top-k;
`chunkeval.engine.retrieval.indexes.measure` measures what an index costs (recall against exact, time, bytes).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunkeval.engine.retrieval.indexes import faiss_kinds, persist
from chunkeval.engine.retrieval.indexes.chroma_kind import ChromaIndex
from chunkeval.engine.retrieval.indexes.persist import Pending, vectors_digest
from chunkeval.engine.retrieval.indexes.spec import (  # noqa: F401 (the index vocabulary, re-exported)
    EXACT,
    KINDS,
    IndexSpec,
    library_versions,
    load_library,
    parse_index,
    parse_indexes,
)
from chunkeval.engine.retrieval.retrievers.dense import top_k
from chunkeval.paths import home
from chunkeval.vocabulary import NO_INDEX  # noqa: F401 (the index vocabulary, re-exported)

log = logging.getLogger("chunkeval")
_KEPT = 2  # built indexes kept in memory: the settings of one chunking and model come one after the other


def index_root() -> Path:
    return home() / "indexes"


@dataclass
class Built:
    """One built (or opened) index over one matrix of chunk vectors."""

    spec: IndexSpec  # the setting it was built for (its build parameters are every sharer's)
    handle: object  # a faiss index, a ChromaIndex, or the vectors themselves for exact
    build_seconds: float  # how long its build took (recorded beside it: a warm run reports the same)
    stored: int | Pending | None  # its bytes, or the file being written that will tell them
    n_vectors: int

    @property
    def nbytes(self) -> int | None:
        return self.stored.size if isinstance(self.stored, Pending) else self.stored

    def search(self, spec: IndexSpec, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        with self.searching(spec) as search:
            return search(queries, depth)

    @contextmanager
    def searching(self, spec: IndexSpec):
        """`(queries, depth) -> (indices, scores)` with `spec`'s search parameters, for many searches."""
        if spec.kind == EXACT:
            yield lambda queries, depth: top_k(queries, self.handle, depth)
        elif spec.kind == "chroma":
            with self.handle.searching(spec) as search:
                yield search
        else:
            yield lambda queries, depth: faiss_kinds.search(self.handle, spec, queries, depth)


_memory: OrderedDict[str, Built] = OrderedDict()


def build_name(spec: IndexSpec, digest: str) -> str:
    """What an index holds, as a name: its kind, build parameters, library version and vectors."""
    versions = library_versions([spec])
    key = f"{spec.kind}|{spec.build_params}|{sorted(versions.items())}|{digest}"
    return f"ce-{spec.kind}-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def get(spec: IndexSpec, vectors: np.ndarray, where: str = "") -> Built:
    """The index of `spec` over `vectors`: from memory, from disk or Chroma, or built now."""
    if spec.kind == EXACT:
        return Built(spec, vectors, 0.0, int(np.asarray(vectors).nbytes), len(vectors))
    faiss_kinds.check_fits(spec, len(vectors), vectors.shape[1], where)
    name = build_name(spec, vectors_digest(vectors))
    memo = f"{name}|{spec.url or ''}"
    if memo in _memory:
        _memory.move_to_end(memo)
        return _memory[memo]
    built = _open_chroma(spec, name, vectors) if spec.kind == "chroma" else _open_faiss(spec, name, vectors)
    _memory[memo] = built
    while len(_memory) > _KEPT:
        _memory.popitem(last=False)
    return built


def forget() -> None:
    """Drop the indexes kept in memory, their files written (a test's way to see what a fresh process reads
    from disk)."""
    persist.wait_all()
    _memory.clear()


def search(spec: IndexSpec, queries: np.ndarray, chunks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (-1 padded) and scores of the `depth` best chunks per query, through the index of `spec`."""
    if spec.kind == EXACT:
        return top_k(queries, chunks, depth)
    return get(spec, chunks).search(spec, queries, depth)


def reach(url: str) -> None:
    """Connect to the Chroma server at `url` (one line naming it when nothing answers there)."""
    ChromaIndex(IndexSpec("chroma", (), url), "reach", index_root()).client()


def _open_faiss(spec: IndexSpec, name: str, vectors: np.ndarray) -> Built:
    folder = index_root() / "faiss"
    path, record = folder / f"{name}.faiss", folder / f"{name}.json"
    persist.wait_all(path)  # one this process built, left memory and is still writing: read it, not build again
    if path.is_file():
        try:
            index, seconds = persist.read(path, record)
            return Built(spec, index, seconds, path.stat().st_size, len(vectors))
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:  # faiss: RuntimeError
            _set_aside(path, exc)
    started = time.perf_counter()
    index = faiss_kinds.build(spec, vectors)
    seconds = time.perf_counter() - started
    return Built(spec, index, seconds, Pending(index, path, record, seconds), len(vectors))


def _open_chroma(spec: IndexSpec, name: str, vectors: np.ndarray) -> Built:
    index = ChromaIndex(spec, name, index_root())
    try:
        found = index.open()
    except Exception as exc:
        if spec.url:
            raise
        index.set_aside()
        log.warning("damaged Chroma collection %s (%s) set aside; it will be built again", name, exc)
        found = False
    if not found:
        index.build(vectors)
    return Built(spec, index, index.build_seconds, index.nbytes, len(vectors))


def _set_aside(path: Path, exc: Exception) -> None:
    aside = path.with_name(path.name + ".damaged")
    os.replace(path, aside)
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("damaged index %s (%s) moved to %s; it will be built again", path, reason, aside.name)
