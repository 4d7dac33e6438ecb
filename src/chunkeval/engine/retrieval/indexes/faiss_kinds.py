"""`hnsw` and `ivf` in process, through faiss.

Why faiss: it is the engine benchmark's yardstick already, it has both graph (HNSW) and inverted-file
indexes (flat and product-quantised) behind one API, its search parameters can be given per call
(`SearchParametersHNSW`, `SearchParametersIVF`), so settings that differ only in `ef_search` or `nprobe`
share one built index without changing it, and it writes an index to a file and reads it back whole.

Builds are deterministic: faiss's HNSW insertion and k-means run with one OpenMP thread (threads change
the graph and the centroids' rounding), k-means keeps faiss's fixed seed, and vectors are added in chunk
order; so a rebuild of the same vectors answers the same, and cannot move recall on its own.
Scores are inner products of L2-normalised vectors: cosine, as the exact search ranks.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

import numpy as np

from chunkeval.engine.retrieval.indexes.spec import IndexSpec, load_library
from chunkeval.errors import InputError


@contextmanager
def one_thread(faiss):
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def check_fits(spec: IndexSpec, n: int, width: int, where: str = "") -> None:
    """The parameters that depend on the vectors: nlist at most their number, pq_m dividing their width."""
    at = f" ({where})" if where else ""
    if spec.kind != "ivf":
        return
    nlist, pq_m = spec.get("nlist"), spec.get("pq_m")
    if nlist > n:
        raise InputError(f"index {spec.key}: nlist {nlist} is above the number of vectors, {n}{at}")
    if pq_m is not None:
        if width % pq_m:
            raise InputError(f"index {spec.key}: pq_m {pq_m} does not divide the vector width {width}{at}")
        if n < 2 ** spec.get("pq_nbits"):
            raise InputError(
                f"index {spec.key}: product quantisation with pq_nbits {spec.get('pq_nbits')} trains on at least "
                f"{2 ** spec.get('pq_nbits')} vectors, got {n}{at}"
            )


def build(spec: IndexSpec, vectors: np.ndarray):
    """A faiss index of `vectors` (float32, rows L2-normalised) for `spec`'s build parameters."""
    faiss = load_library("faiss")
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, width = x.shape
    check_fits(spec, n, width)
    with one_thread(faiss):
        if spec.kind == "hnsw":
            index = faiss.IndexHNSWFlat(width, spec.get("m"), faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = spec.get("ef_construction")
        else:
            quantizer = faiss.IndexFlatIP(width)
            if spec.get("pq_m") is None:
                index = faiss.IndexIVFFlat(quantizer, width, spec.get("nlist"), faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexIVFPQ(
                    quantizer,
                    width,
                    spec.get("nlist"),
                    spec.get("pq_m"),
                    spec.get("pq_nbits"),
                    faiss.METRIC_INNER_PRODUCT,
                )
            index.cp.seed = 1234  # faiss's default, written down: the k-means of every build starts alike
            index.train(x)
        index.add(x)
    return index


def search(index, spec: IndexSpec, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk indices (-1 where the index found fewer) and scores of the `depth` best per query. faiss
    searches HNSW with ef = max(ef_search, depth) (as hnswlib does)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    scores, ids = index.search(q, depth, params=_params(spec))
    return ids.astype(np.int64, copy=False), scores


@lru_cache(maxsize=64)
def _params(spec: IndexSpec):
    """faiss's search parameters of a setting, made once (a search of one query should cost faiss's alone)."""
    faiss = load_library("faiss")
    if spec.kind == "hnsw":
        return faiss.SearchParametersHNSW(efSearch=spec.get("ef_search"))
    return faiss.SearchParametersIVF(nprobe=spec.get("nprobe"))
