"""Retrievers by name: `dense`, `bm25`, `hybrid`, or `module:function` for one's own retriever or reranker.

Every retriever maps a `RetrievalRequest` to chunk indices (int, n_queries x k, best first, -1 padding);
the built-in ones also give their score of each (`retrieve_scored`), a plug-in gives ranks only.
With `query_groups`/`chunk_groups` each query only sees the chunks of its own group (its corpus): the
retriever is called once per group on that group's queries and chunks, so corpus statistics (BM25's
IDF and average length) come from that corpus alone, and the indices are mapped back to global ones.
See docs/retrievers.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from chunkeval.engine.retrieval.retrievers.bm25 import bm25_ranked
from chunkeval.engine.retrieval.retrievers.dense import top_k
from chunkeval.engine.retrieval.retrievers.hybrid import FUSE_DEPTH, RRF_K, rrf_ranked
from chunkeval.engine.settings import plugins
from chunkeval.errors import InputError

BUILTIN = ("dense", "bm25", "hybrid")


@dataclass(frozen=True)
class RetrievalRequest:
    """What a retriever is given. Vectors are L2-normalized rows (or None when not embedded);
    `candidates` holds dense top-N chunk indices (-1 padded) for a reranker, or None. `search` is how the
    dense half finds its best chunks: `search(query_vectors, chunk_vectors, depth) -> (indices, scores)`,
    the experiment's index (`chunkeval.engine.retrieval.indexes`), or None for the exact top-k."""

    query_texts: Sequence[str]
    chunk_texts: Sequence[str]
    k: int
    query_vectors: np.ndarray | None = None
    chunk_vectors: np.ndarray | None = None
    candidates: np.ndarray | None = None
    search: Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]] | None = None


def vector_top(request: RetrievalRequest, depth: int) -> np.ndarray:
    """The `depth` nearest chunks of each query by its vectors, through the request's index (exact without one)."""
    return vector_ranked(request, depth)[0]


def vector_ranked(request: RetrievalRequest, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """`vector_top`, and the search's score of each chunk (float64, NaN in the padding)."""
    _require_vectors("dense search", request)
    search = request.search or top_k
    index, scores = search(request.query_vectors, request.chunk_vectors, depth)
    return index, np.where(index >= 0, scores, np.nan).astype(np.float64)


Retriever = Callable[[RetrievalRequest], np.ndarray]


def retrieve(name: str, request: RetrievalRequest, **options) -> np.ndarray:
    """Top-k chunk indices (int64, n_queries x k, -1 padding) of retriever `name`, pooled or per group
    (`options`: those of `retrieve_scored`)."""
    return retrieve_scored(name, request, **options)[0]


def retrieve_scored(
    name: str,
    request: RetrievalRequest,
    *,
    query_groups: np.ndarray | None = None,
    chunk_groups: np.ndarray | None = None,
    rrf_k: float = RRF_K,
    fuse_depth: int = FUSE_DEPTH,
) -> tuple[np.ndarray, np.ndarray | None]:
    """`retrieve`, and the retriever's score of each chunk it ranks (float64, n_queries x k, NaN in the
    padding): the search's score for dense (the cosine; an index's own), the BM25 score for bm25, the fused
    score for hybrid. None for a plug-in, which gives ranks only."""
    fn = _resolve(name)
    if request.k < 1:
        raise InputError(f"k must be at least 1, got {request.k}")
    if rrf_k < 0 or fuse_depth < 1:
        raise InputError(f"hybrid needs rrf_k >= 0 and fuse_depth >= 1, got {rrf_k} and {fuse_depth}")
    if name == "hybrid":
        fn = partial(fn, c=rrf_k, depth=fuse_depth)
    n_q, n_c = len(request.query_texts), len(request.chunk_texts)
    # a k beyond the chunks there are ranks them all: nothing is allocated for ranks no chunk can fill (the
    # metrics keep their definition at the requested k: precision@k still divides by k; `clamped_k_note`)
    request = replace(request, k=min(request.k, max(n_c, 1)))
    if (query_groups is None) != (chunk_groups is None):
        raise ValueError("query_groups and chunk_groups go together")
    if query_groups is None:
        return _call(name, fn, request, np.arange(n_q))
    query_groups, chunk_groups = np.asarray(query_groups), np.asarray(chunk_groups)
    if len(query_groups) != n_q or len(chunk_groups) != n_c:
        raise ValueError("one group per query and one per chunk")
    index = np.full((n_q, request.k), -1, dtype=np.int64)
    scores = np.full((n_q, request.k), np.nan) if name in _BUILTINS else None
    for group in np.unique(query_groups):  # one call per corpus
        qi, ci = np.flatnonzero(query_groups == group), np.flatnonzero(chunk_groups == group)
        if len(ci) == 0:
            continue  # a corpus without chunks: nothing to retrieve
        local, local_scores = _call(name, fn, _subset(request, qi, ci), qi)
        index[qi] = np.where(local >= 0, ci[local], -1)
        if scores is not None:
            scores[qi] = local_scores
    return index, scores


def check_retriever(name: str) -> None:
    """Raise the user's one-line error when `name` is no retriever (checked before any work starts)."""
    _resolve(name)


def needs_embeddings(name: str) -> bool:
    """Whether retriever `name` reads vectors: dense and hybrid do, bm25 does not; a plug-in does unless its
    function sets `needs_embeddings = False` (and asks for no `candidates`)."""
    fn = _resolve(name)
    if name in BUILTIN:
        return name != "bm25"
    return bool(getattr(fn, "needs_embeddings", True)) or _candidate_depth(name, fn) is not None


# the built-in retrievers give (indices, scores)
def _dense(request: RetrievalRequest) -> tuple[np.ndarray, np.ndarray]:
    return vector_ranked(request, request.k)


def _bm25(request: RetrievalRequest) -> tuple[np.ndarray, np.ndarray]:
    return bm25_ranked(request.query_texts, request.chunk_texts, request.k)


def _hybrid(request: RetrievalRequest, c: float = RRF_K, depth: int = FUSE_DEPTH) -> tuple[np.ndarray, np.ndarray]:
    depth = max(depth, request.k)  # so that k chunks can be fused when k exceeds the depth
    dense = vector_top(request, depth)
    lexical = bm25_ranked(request.query_texts, request.chunk_texts, depth)[0]
    return rrf_ranked([dense, lexical], len(request.chunk_texts), request.k, c)


_BUILTINS: dict[str, Callable] = {"dense": _dense, "bm25": _bm25, "hybrid": _hybrid}


RETRIEVER = plugins.ExtensionPoint(
    "retriever",
    _BUILTINS,
    group="chunkeval.retrievers",
    modules=True,
    takes=("request",),
    check=lambda name, fn: _candidate_depth(name, fn),  # a reranker's depth, checked before any work
)


def _resolve(name: str) -> Retriever:
    return plugins.resolve(RETRIEVER, name)


def _candidate_depth(name: str, fn: Retriever) -> int | None:
    depth = getattr(fn, "candidates", None)
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool) or depth < 1):
        raise InputError(f"retriever {name!r}: its candidates attribute must be a positive integer, got {depth!r}")
    return depth


def _call(
    name: str, fn: Retriever, request: RetrievalRequest, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Run one retriever on one (sub)request and check its answer; `rows` are the global query numbers.
    The scores of a built-in retriever, None for a plug-in."""
    n_q, n_c, k = len(request.query_texts), len(request.chunk_texts), request.k
    builtin = name in _BUILTINS
    if n_q == 0 or n_c == 0:
        return np.full((n_q, k), -1, dtype=np.int64), np.full((n_q, k), np.nan) if builtin else None
    if builtin:
        index, scores = fn(request)
        return _check(name, index, n_q, n_c, k, rows), scores
    if request.candidates is None and (depth := _candidate_depth(name, fn)):
        request = replace(request, candidates=vector_top(request, depth))
    return _check(name, fn(request), n_q, n_c, k, rows), None


def _check(name: str, result: object, n_q: int, n_c: int, k: int, rows: np.ndarray) -> np.ndarray:
    """The answer as int64, or an InputError naming the retriever and the first offending row."""
    try:
        index = np.asarray(result)
    except ValueError:  # ragged lists
        raise InputError(f"retriever {name!r} returned ragged rows, expected an array of shape ({n_q}, {k})") from None
    if index.shape != (n_q, k):
        raise InputError(f"retriever {name!r} returned shape {index.shape}, expected ({n_q}, {k})")
    if index.dtype.kind not in "iu":
        raise InputError(f"retriever {name!r} returned {index.dtype} values, expected integer chunk indices")
    index = index.astype(np.int64)
    bad = (index < -1) | (index >= n_c)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        detail = f"{index[r, c]} ≥ {n_c} chunks" if index[r, c] >= n_c else f"{index[r, c]} < -1"
        raise InputError(f"retriever {name!r} returned indices out of range (row {rows[r]}: {detail})")
    gap = (index[:, :-1] < 0) & (index[:, 1:] >= 0)
    if gap.any():
        r = np.flatnonzero(gap.any(axis=1))[0]
        raise InputError(f"retriever {name!r} returned a chunk after -1 padding (row {rows[r]})")
    ordered = np.sort(index, axis=1)
    twice = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if twice.any():
        r, c = np.argwhere(twice)[0]
        raise InputError(f"retriever {name!r} returned chunk {ordered[r, c]} twice (row {rows[r]})")
    return index


def _subset(request: RetrievalRequest, qi: np.ndarray, ci: np.ndarray) -> RetrievalRequest:
    """The request restricted to queries `qi` and chunks `ci`, candidates renumbered (others dropped)."""
    candidates = request.candidates
    if candidates is not None:
        local = np.full(len(request.chunk_texts) + 1, -1, dtype=np.int64)  # last slot: -1 maps to -1
        local[ci] = np.arange(len(ci))
        candidates = local[np.asarray(candidates)[qi]]
        candidates = np.take_along_axis(candidates, np.argsort(candidates < 0, axis=1, kind="stable"), axis=1)
    return RetrievalRequest(
        query_texts=[request.query_texts[i] for i in qi],
        chunk_texts=[request.chunk_texts[i] for i in ci],
        k=request.k,
        query_vectors=None if request.query_vectors is None else request.query_vectors[qi],
        chunk_vectors=None if request.chunk_vectors is None else request.chunk_vectors[ci],
        candidates=candidates,
        search=request.search,
    )


def _require_vectors(name: str, request: RetrievalRequest) -> None:
    if request.query_vectors is None or request.chunk_vectors is None:
        raise ValueError(f"retriever {name!r} needs query and chunk vectors")
