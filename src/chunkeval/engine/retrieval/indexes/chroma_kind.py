"""`chroma`: a real Chroma collection, embedded (a persistent client under `$CHUNKEVAL_HOME/indexes/chroma/`,
one folder per collection, so that its size on disk is the index's) or on a Chroma server
(`chroma:url=http://HOST:PORT`).

A collection holds one matrix of chunk vectors with cosine space and the setting's HNSW build
parameters (`m` is Chroma's `max_neighbors`); it is named by what it holds (a hash of the vectors and
the build parameters), so a warm run finds it and adds nothing. It is created with
`embedding_function=None` (Chroma's default function would download a model) and marked complete in
its metadata only after every vector is in: a collection a killed run left half-filled is dropped and
made again. `ef_search` is a setting of the collection that Chroma reads at query time: settings that
differ only in it share the collection, which is set to each one's value before it is queried (always:
another process may have set another), under a lock file (so that two processes of one machine do not interleave).

Every failure to reach a server is one line naming its URL (`InputError`, exit 2 at the CLI).
"""

from __future__ import annotations

import fcntl
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from chunkeval.engine.retrieval.indexes.spec import IndexSpec, load_library
from chunkeval.errors import InputError


class ChromaIndex:
    def __init__(self, spec: IndexSpec, name: str, root: Path):
        self.spec, self.name = spec, name
        self.folder = None if spec.url else root / "chroma" / name
        self.lock_path = root / "chroma" / f"{name}.lock"
        self._client = None
        self._collection = None
        self.build_seconds = 0.0
        self.count = 0

    # ------------------------------------------------------------------ connection

    def client(self):
        if self._client is None:
            chromadb = load_library("chromadb")
            settings = chromadb.config.Settings(anonymized_telemetry=False)  # nothing leaves the machine
            with self.errors():
                if self.spec.url:
                    parts = urlsplit(self.spec.url)
                    self._client = chromadb.HttpClient(
                        host=parts.hostname, port=parts.port, ssl=parts.scheme == "https", settings=settings
                    )
                    self._client.heartbeat()
                else:
                    self._client = chromadb.PersistentClient(path=str(self.folder), settings=settings)
        return self._client

    @contextmanager
    def errors(self):
        """Chroma's failures as one line: the server's URL, or the embedded collection's folder."""
        try:
            yield
        except InputError:
            raise
        except Exception as exc:  # chromadb raises httpx, its own and builtin errors
            where = f"Chroma server {self.spec.url}" if self.spec.url else f"Chroma collection at {self.folder}"
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise InputError(f"{where}: {reason}") from None

    # ------------------------------------------------------------------ build

    def open(self) -> bool:
        """The complete collection, if one exists already (True), else nothing (False)."""
        with self.errors():
            client = self.client()
            try:
                col = client.get_collection(self.name, embedding_function=None)
            except Exception:
                return False
            if (col.metadata or {}).get("chunkeval_complete") is True:
                self._collection, self.count = col, col.count()
                self.build_seconds = float(col.metadata.get("chunkeval_build_seconds", 0.0))
                return True
            client.delete_collection(self.name)  # a build a killed run left half done
            return False

    def build(self, vectors: np.ndarray) -> None:
        started = time.perf_counter()
        with self.errors():
            client = self.client()
            hnsw = {
                "space": "cosine",
                "max_neighbors": self.spec.get("m"),
                "ef_construction": self.spec.get("ef_construction"),
                "ef_search": self.spec.get("ef_search"),
            }
            col = client.create_collection(
                self.name, configuration={"hnsw": hnsw}, metadata={"chunkeval_complete": False}, embedding_function=None
            )
            step = max(1, min(client.get_max_batch_size(), 5000))
            x = np.asarray(vectors, dtype=np.float32)
            for lo in range(0, len(x), step):
                col.add(ids=[str(i) for i in range(lo, min(lo + step, len(x)))], embeddings=x[lo : lo + step])
            self.build_seconds = time.perf_counter() - started
            col.modify(metadata={"chunkeval_complete": True, "chunkeval_build_seconds": self.build_seconds})
            self._collection, self.count = col, len(x)

    def set_aside(self) -> None:
        """Move a damaged embedded collection's folder out of the way (the next build makes it again)."""
        self._client = None
        if self.folder is not None and self.folder.exists():
            shutil.rmtree(self.folder.with_name(self.folder.name + ".damaged"), ignore_errors=True)
            self.folder.rename(self.folder.with_name(self.folder.name + ".damaged"))

    @property
    def nbytes(self) -> int | None:
        """Bytes on disk of an embedded collection; a server's are not known to the client (None)."""
        if self.folder is None:
            return None
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())

    # ------------------------------------------------------------------ search

    def search(self, spec: IndexSpec, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk indices (-1 padded) and cosine scores of the `depth` best per query, with `spec`'s ef_search."""
        with self.searching(spec) as search:
            return search(queries, depth)

    @contextmanager
    def searching(self, spec: IndexSpec):
        """`(queries, depth) -> (indices, scores)` with the collection set to `spec`'s ef_search once, for
        many searches (one query at a time, as latency is measured): no request but the queries'."""
        with self.errors(), self._ef(spec.get("ef_search")):
            yield self._query

    def _query(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        n_q = len(queries)
        ids = np.full((n_q, depth), -1, dtype=np.int64)
        scores = np.full((n_q, depth), -np.inf, dtype=np.float32)
        if n_q == 0:
            return ids, scores
        with self.errors():
            col = self._collection
            n = min(depth, self.count)  # known since the build: no request per search for it
            step = max(1, min(self.client().get_max_batch_size(), 1000))
            for lo in range(0, n_q, step):
                found = col.query(
                    query_embeddings=np.asarray(queries[lo : lo + step], dtype=np.float32),
                    n_results=n,
                    include=["distances"],
                )
                for row, (got, dist) in enumerate(zip(found["ids"], found["distances"]), start=lo):
                    ids[row, : len(got)] = np.asarray(got, dtype=np.int64)
                    scores[row, : len(got)] = 1.0 - np.asarray(dist, dtype=np.float32)
        return ids, scores

    @contextmanager
    def _ef(self, ef_search: int):
        """The collection set to `ef_search` while the caller queries it (under the collection's lock file)."""
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self._collection.modify(configuration={"hnsw": {"ef_search": ef_search}})
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
