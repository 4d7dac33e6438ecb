"""What an index costs against exact search: `ann_recall_at_k` per query, build seconds, bytes, and latency.

`ann_recall_at_k` of a query is the share of the k chunks the index returned whose exact score is at least
the exact k-th score: a chunk tied with the k-th best counts as found (a corpus that repeats passages has
true ties, and exact search keeps only some of them). Exact scores of both sides are the same float32 dot
products (`np.einsum`, one pair at a time), so a chunk of the exact top k always counts. The exact search is
always computed as the reference; rows of `exact` score 1 without it. With fewer than k chunks, the
denominator is the number of chunks. Definitions: docs/indexes.md.

Latency is that of one query at a time (up to `LATENCY_QUERIES` questions, evenly spaced, after
`WARMUP` searches), at the depth the configuration retrieves (its largest k): p50 and p95 in milliseconds.
`batch_ms_per_query` is one batched search of every question, divided by their number. Exact search is timed
only where asked (`timed`: the sweep asks where the grid holds an approximate index, the baseline it is
compared with); untimed, its latency columns are empty: at a million chunks the timing alone would search every
question twice more.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from chunkeval.engine.retrieval import indexes
from chunkeval.engine.retrieval.indexes.spec import EXACT, IndexSpec
from chunkeval.engine.retrieval.retrievers.dense import top_k

LATENCY_QUERIES = 1000
WARMUP = 10
STATS = ("index_build_seconds", "index_bytes", "latency_p50_ms", "latency_p95_ms", "batch_ms_per_query")
VECTOR_STATS = ("vector_bytes",)  # bytes per vector of a `vectors` setting (chunkeval.engine.retrieval.vectors)


@dataclass
class Measures:
    """Per k (in the order given): found and depth per query; and the index's costs."""

    ks: tuple[int, ...]
    found: np.ndarray  # len(ks) x n_queries
    depth: np.ndarray  # len(ks) x n_queries
    build_seconds: float = 0.0
    nbytes: int | None = 0
    latencies_ms: list[float] = field(default_factory=list)
    batch_seconds: float = 0.0
    timed: bool = True  # False: exact search, not timed (its latency columns empty)

    def recall(self, i: int) -> np.ndarray:
        return np.divide(self.found[i], self.depth[i], out=np.zeros(self.found.shape[1]), where=self.depth[i] > 0)

    def stats(self) -> dict[str, float | int | None]:
        n_q = self.found.shape[1]
        lat = np.asarray(self.latencies_ms, dtype=np.float64)
        return {
            "index_build_seconds": float(self.build_seconds),
            "index_bytes": None if self.nbytes is None else int(self.nbytes),
            "latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
            "latency_p95_ms": float(np.percentile(lat, 95)) if len(lat) else None,
            "batch_ms_per_query": 1000.0 * self.batch_seconds / n_q if n_q and self.timed else None,
        }


def measure(
    spec: IndexSpec,
    queries: np.ndarray,
    chunks: np.ndarray,
    ks: tuple[int, ...],
    query_groups: np.ndarray | None = None,
    chunk_groups: np.ndarray | None = None,
    group_names: list[str] | None = None,
    timed: bool = True,
) -> Measures:
    """The measures of `spec` over these vectors, pooled or per group (each query against its corpus's
    index, as retrieval searched); exact search without its times unless `timed` (an index is always timed)."""
    ks = tuple(ks)
    n_q = len(queries)
    out = Measures(ks, np.zeros((len(ks), n_q)), np.zeros((len(ks), n_q)), timed=timed or spec.kind != EXACT)
    sample, searched = parts(n_q, len(chunks), query_groups, chunk_groups, group_names)
    out.nbytes = 0
    for qi, ci, where in searched:
        _measure_part(spec, queries[qi], chunks[ci], qi, out, sample, where)
    return out


def parts(n_q: int, n_c: int, query_groups=None, chunk_groups=None, group_names=None) -> tuple[set, list]:
    """The questions timed one at a time (up to `LATENCY_QUERIES`, evenly spaced), and the searches to measure:
    (questions, chunks, corpus name) pooled, or per group with both questions and chunks."""
    if query_groups is None:
        searched = [(np.arange(n_q), np.arange(n_c), "")]
    else:
        names = group_names or []
        searched = [
            (
                np.flatnonzero(query_groups == g),
                np.flatnonzero(chunk_groups == g),
                names[g] if 0 <= g < len(names) else "",
            )
            for g in np.unique(query_groups).tolist()
        ]
    sample = (
        set(np.unique(np.linspace(0, n_q - 1, min(n_q, LATENCY_QUERIES)).astype(np.int64)).tolist()) if n_q else set()
    )
    return sample, [(qi, ci, where) for qi, ci, where in searched if len(qi) and len(ci)]


def _measure_part(spec, q, c, rows, out: Measures, sample: set, where: str) -> None:
    depth = max(out.ks)
    built = indexes.get(spec, c, f"corpus {where}" if where else "")
    out.build_seconds += built.build_seconds
    if out.timed:
        with built.searching(spec) as search:
            ids = _timed(search, q, depth, rows, out, sample)
    # its size after the searches: a file just built is being written meanwhile (indexes.persist)
    out.nbytes = None if built.nbytes is None or out.nbytes is None else out.nbytes + built.nbytes
    for i, k in enumerate(out.ks):
        out.depth[i, rows] = min(k, len(c))
    if spec.kind == EXACT:
        out.found[:, rows] = out.depth[:, rows]
    else:
        exact_ids, _ = top_k(q, c, depth)
        for i, k in enumerate(out.ks):
            out.found[i, rows] = found_at(q, c, ids[:, :k], exact_ids[:, :k])


def _timed(search, q: np.ndarray, depth: int, rows: np.ndarray, out: Measures, sample: set) -> np.ndarray:
    """The batched search of every query (timed), then the sampled ones one at a time after a warm-up."""
    started = time.perf_counter()
    ids, _ = search(q, depth)
    out.batch_seconds += time.perf_counter() - started
    mine = [j for j, r in enumerate(rows.tolist()) if r in sample]
    for j in mine[:WARMUP]:
        search(q[j : j + 1], depth)
    for j in mine:
        started = time.perf_counter()
        search(q[j : j + 1], depth)
        out.latencies_ms.append(1000.0 * (time.perf_counter() - started))
    return ids


def exact_scores(queries: np.ndarray, chunks: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32 dot products of each query with the chunks of its row of `ids` (-inf where -1)."""
    safe = np.where(ids >= 0, ids, 0)
    scores = np.einsum("qd,qkd->qk", queries.astype(np.float32), chunks.astype(np.float32)[safe])
    return np.where(ids >= 0, scores, -np.inf).astype(np.float32)


def found_at(queries: np.ndarray, chunks: np.ndarray, ann_ids: np.ndarray, exact_ids: np.ndarray) -> np.ndarray:
    """Per query, how many of the index's chunks score at least the exact k-th score (ties count)."""
    if ann_ids.shape[1] == 0:
        return np.zeros(len(queries))
    kth = exact_scores(queries, chunks, exact_ids).min(axis=1, initial=np.inf, where=exact_ids >= 0)
    got = exact_scores(queries, chunks, ann_ids)
    return ((got >= kth[:, None]) & (ann_ids >= 0)).sum(axis=1).astype(np.float64)
