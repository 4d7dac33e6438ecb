"""Compressed vectors, an axis of the grid (docs/vectors.md): how the dense half of `dense` and `hybrid` stores and
searches its vectors under exact search.

- `dims: D` (Matryoshka truncation): the first D dimensions of every vector, renormalised to length 1; `full`
  keeps them all. Applied before quantization.
- `vectors: float32`: today's exact cosine search.
- `vectors: int8`: scalar quantization calibrated on the corpus's chunk vectors (those a search is given: every
  corpus pooled, or each question's own with `own_corpus`): per dimension, the range [min, max] of the chunk
  vectors is cut into 255 steps of (max - min) / 255 (a step of 1 where max = min), and a value v becomes
  clip(floor((v - min) / step), 0, 255) - 128: sentence-transformers' `quantize_embeddings(..., "int8",
  ranges=...)` with those ranges, as its `calibration_embeddings` computes them. Questions are quantized with
  the same ranges (a value outside them takes the nearest end). A chunk's score is the integer dot product of
  the two int8 vectors.
- `vectors: binary`: the sign bits (v > 0) packed 8 to a byte (`np.packbits`), searched by Hamming distance; a
  chunk's score is the number of bits it shares with the question (D - Hamming distance), an integer.
- `vectors: binary-rescore:depth=N`: the N nearest chunks by Hamming distance, re-scored by the float cosine of
  the (truncated) vectors, best first: a list of N chunks at most (a k above N is not scored; `notes.py`).

Integer scores tie often: which of the tied chunks a search keeps at its cut is the lowest chunk index (as exact
search does); their order in the ranking then follows the experiment's tie policy (`chunkeval.engine.retrieval.ties`).
With faiss installed (the `indexes` extra) binary search runs on `faiss.IndexBinaryFlat`; without it on numpy
(the dot product of ±1 vectors is D - 2 × Hamming): both give the same chunks and scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunkeval.engine.retrieval.indexes.measure import Measures, _timed, found_at, parts
from chunkeval.engine.retrieval.retrievers.dense import top_k
from chunkeval.errors import InputError
from chunkeval.limits import short
from chunkeval.vocabulary import VECTOR_KEYS, not_one_of

KINDS = ("float32", "int8", "binary", "binary-rescore")
FLOAT, FULL = VECTOR_KEYS["vectors"], VECTOR_KEYS["dims"]
MAX_DEPTH = 10_000  # a rescoring depth, as the reranker's candidates


@dataclass(frozen=True)
class VectorSpec:
    """One value of the `vectors` axis (`depth`: binary-rescore's) and one of `dims` (None: full)."""

    kind: str = FLOAT
    depth: int | None = None
    dims: int | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:depth={self.depth}" if self.depth is not None else self.kind

    @property
    def dims_key(self) -> str:
        return FULL if self.dims is None else str(self.dims)

    @property
    def compressed(self) -> bool:
        """Whether search differs from exact float search of the whole vectors."""
        return self.kind != FLOAT or self.dims is not None

    def bytes_per_vector(self, width: int) -> int:
        d = self.dims or width
        return {"float32": 4 * d, "int8": d}.get(self.kind, -(-d // 8))


def parse_vectors(text, source=None) -> VectorSpec:
    """`float32`, `int8`, `binary` or `binary-rescore:depth=N`: one line naming the setting otherwise."""
    kind, _, rest = str(text).strip().partition(":")
    if kind not in KINDS:
        raise InputError(
            not_one_of("vectors", text, KINDS, f"{', '.join(KINDS[:-1])} or binary-rescore:depth=N"), source
        )
    if kind != "binary-rescore":
        if rest:
            raise InputError(f"vectors {kind} takes no parameters, got {short(text)}", source)
        return VectorSpec(kind)
    name, _, value = rest.partition("=")
    if name.strip() != "depth" or not value.strip().isdigit():
        raise InputError(f"vectors binary-rescore takes depth=N (whole number), got {short(text)}", source)
    depth = int(value)
    if not 1 <= depth <= MAX_DEPTH:
        raise InputError(
            f"vectors binary-rescore depth must be 1 … {MAX_DEPTH:,} (docs/limits.md), got {depth}", source
        )
    return VectorSpec(kind, depth)


def parse_dims(text, source=None) -> int | None:
    """`full` (None) or a whole number of leading dimensions, at least 1."""
    value = str(text).strip()
    if value == FULL:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"dims must be full or a whole number of dimensions of at least 1, got {short(text)}", source)
    if int(value) > MAX_DEPTH:
        raise InputError(f"dims must be at most {MAX_DEPTH:,}, got {short(text)}", source)
    return int(value)


def spec_of(vectors: str, dims: str) -> VectorSpec:
    spec = parse_vectors(vectors)
    return VectorSpec(spec.kind, spec.depth, parse_dims(dims))


def check_axis(
    vectors: tuple[str, ...], dims: tuple[str, ...], ks: tuple[int, ...], source=None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The axes' values, checked and written canonically (`binary-rescore:depth=50`, `full`); a rescoring depth
    below every k is refused (as the reranker's candidates are)."""
    if not vectors or not dims:
        raise InputError("an experiment needs at least one vectors and one dims value (float32, full)", source)
    keys = tuple(parse_vectors(v, source).key for v in vectors)
    sizes = tuple(VectorSpec(dims=parse_dims(d, source)).dims_key for d in dims)
    for name, values in (("vectors", keys), ("dims", sizes)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise InputError(f"{name} {', '.join(map(repr, twice))} listed twice", source)
    shallow = [d for v in keys if (d := parse_vectors(v).depth) is not None and ks and d < min(ks)]
    if shallow:
        raise InputError(
            f"binary-rescore depth {', '.join(map(str, shallow))} below every k ({', '.join(map(str, ks))})", source
        )
    return keys, sizes


def check_fits(dims: tuple[str, ...], model: str, width: int) -> None:
    """A dims value above the model's width: one line naming both."""
    over = [d for d in dims if d != FULL and int(d) > width]
    if over:
        raise InputError(f"dims {', '.join(over)} exceed{'s' if len(over) == 1 else ''} the {width} of model {model}")


# --------------------------------------------------------------------------- the transforms


def truncate(vectors: np.ndarray, dims: int | None) -> np.ndarray:
    """The first `dims` dimensions, each row renormalised to length 1 (float32; a zero row stays zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    if dims is None or dims >= v.shape[1]:
        return v
    cut = v[:, :dims]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return (cut / np.where(norms > 0, norms, 1)).astype(np.float32)


def int8_ranges(corpus: np.ndarray) -> np.ndarray:
    """(2, D): per dimension the min and max of the corpus's vectors."""
    return np.vstack((corpus.min(axis=0), corpus.max(axis=0))).astype(np.float32)


def quantize_int8(vectors: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """int8 codes of `vectors` in `ranges`, by sentence-transformers' `quantize_embeddings`."""
    from sentence_transformers.util.quantization import quantize_embeddings

    return quantize_embeddings(np.asarray(vectors, dtype=np.float32), precision="int8", ranges=ranges)


def pack_bits(vectors: np.ndarray) -> np.ndarray:
    """The sign bits (v > 0) of each row packed 8 to a byte (uint8), as `quantize_embeddings(..., "ubinary")`."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


# --------------------------------------------------------------------------- search


def searcher(spec: VectorSpec):
    """`search(queries, chunks, depth) -> (indices, scores)` over float vectors, as `RetrievalRequest.search` takes
    it; None for exact float search of the whole vectors (the retrievers' own)."""
    if not spec.compressed:
        return None
    return lambda queries, chunks, depth: search(spec, queries, chunks, depth)


def search(spec: VectorSpec, queries: np.ndarray, chunks: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The `depth` best chunks of each query (int64, -1 padded) under `spec`, and their scores (float64)."""
    q, c = truncate(queries, spec.dims), truncate(chunks, spec.dims)
    if spec.kind == FLOAT:
        return top_k(q, c, depth)
    if spec.kind == "int8":
        ranges = int8_ranges(c)
        # integer dot products, exact in float64 (|sum| < 2^53), through the exact search's own selection
        return top_k(quantize_int8(q, ranges).astype(np.float64), quantize_int8(c, ranges).astype(np.float64), depth)
    ids, shared = hamming_top(pack_bits(q), pack_bits(c), q.shape[1], depth if spec.depth is None else spec.depth)
    if spec.kind == "binary":
        return ids, shared
    return rescore(q, c, ids, depth)


def rescore(q: np.ndarray, c: np.ndarray, ids: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates `ids` re-ranked by their float cosine (ties: lower chunk index first), at most `depth`."""
    safe = np.where(ids >= 0, ids, 0)
    scores = np.einsum("qd,qkd->qk", q, c[safe]).astype(np.float64)
    scores = np.where(ids >= 0, scores, -np.inf)
    order = np.lexsort((np.where(ids >= 0, ids, np.iinfo(np.int64).max), -scores), axis=1)[:, :depth]
    ids, scores = np.take_along_axis(ids, order, 1), np.take_along_axis(scores, order, 1)
    width = ids.shape[1]
    if width < depth:
        ids = np.pad(ids, ((0, 0), (0, depth - width)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, depth - width)), constant_values=-np.inf)
    return ids, scores


def hamming_top(q_bits: np.ndarray, c_bits: np.ndarray, dims: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The `depth` chunks of fewest differing bits (ties: lower chunk index), and the bits each shares with the
    query (`dims` - Hamming distance): faiss's IndexBinaryFlat where installed, else numpy."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return _numpy_hamming(q_bits, c_bits, dims, depth)
    return _faiss_hamming(q_bits, c_bits, dims, depth)


def _numpy_hamming(q_bits, c_bits, dims: int, depth: int):
    """Through the exact search of ±1 vectors: their dot product is dims - 2 × Hamming (exact in float64)."""
    signs = np.array([-1.0, 1.0])
    q = signs[np.unpackbits(q_bits, axis=1, count=dims)]
    c = signs[np.unpackbits(c_bits, axis=1, count=dims)]
    ids, dot = top_k(q, c, depth)
    return ids, np.where(ids >= 0, (dims + dot) / 2, -np.inf)


def _faiss_hamming(q_bits, c_bits, dims: int, depth: int):
    """faiss's search, asked deeper than `depth` so that every chunk tied with the last kept is seen; rows whose
    tie runs past what faiss returned are searched again whole. Then ordered by distance, then chunk index."""
    import faiss

    n_q, n_c = len(q_bits), len(c_bits)
    ids = np.full((n_q, depth), -1, dtype=np.int64)
    shared = np.full((n_q, depth), -np.inf)
    if not n_q or not n_c:
        return ids, shared
    padded = -(-dims // 8) * 8  # faiss counts whole bytes: the padding bits are 0 on both sides
    index = faiss.IndexBinaryFlat(padded)
    index.add(np.ascontiguousarray(c_bits))
    width = min(depth, n_c)
    wide = min(n_c, 2 * width + 64)
    dist, found = index.search(np.ascontiguousarray(q_bits), wide)
    dist = np.where(found >= 0, dist, np.iinfo(np.int32).max).astype(np.int64)
    short_rows = np.flatnonzero(dist[:, wide - 1] <= dist[:, width - 1]) if wide < n_c else []
    if len(short_rows):  # the tie at the cut may go on past what was returned: every chunk of those rows
        d2, f2 = index.search(np.ascontiguousarray(q_bits[short_rows]), n_c)
        dist = np.pad(dist, ((0, 0), (0, n_c - wide)), constant_values=np.iinfo(np.int32).max)
        found = np.pad(found, ((0, 0), (0, n_c - wide)), constant_values=-1)
        dist[short_rows], found[short_rows] = d2, f2
    order = np.lexsort((np.where(found >= 0, found, np.iinfo(np.int64).max), dist), axis=1)[:, :width]
    kept, kept_dist = np.take_along_axis(found, order, 1), np.take_along_axis(dist, order, 1)
    ids[:, :width] = kept
    shared[:, :width] = np.where(kept >= 0, dims - kept_dist, -np.inf)
    ids[~np.isfinite(shared)] = -1
    return ids, shared


# --------------------------------------------------------------------------- what a setting costs


def measure(
    spec: VectorSpec,
    queries: np.ndarray,
    chunks: np.ndarray,
    ks: tuple[int, ...],
    query_groups: np.ndarray | None = None,
    chunk_groups: np.ndarray | None = None,
    group_names: list[str] | None = None,
):
    """What `spec` costs against exact float search of the whole vectors, per k (`ann_recall_at_k`: the share
    of its k chunks whose exact float score reaches the exact k-th, as for indexes), its bytes per vector and in
    all, and the search time per question (batched, and one question at a time), as
    `chunkeval.engine.retrieval.indexes.measure.Measures`; float32/full is timed as the baseline."""
    ks = tuple(ks)
    n_q = len(queries)
    out = Measures(ks, np.zeros((len(ks), n_q)), np.zeros((len(ks), n_q)))
    out.nbytes = spec.bytes_per_vector(chunks.shape[1]) * len(chunks)
    search_depth = max(ks) if spec.depth is None else spec.depth
    sample, every = parts(n_q, len(chunks), query_groups, chunk_groups, group_names)
    for qi, ci, _ in every:
        q, c = queries[qi], chunks[ci]

        def run(qv, d, c=c):
            return search(spec, qv, c, d) if spec.compressed else top_k(qv, c, d)

        ids = _timed(run, q, search_depth, qi, out, sample)
        exact_ids, _ = top_k(q, c, max(ks))
        for i, k in enumerate(ks):
            out.depth[i, qi] = min(k, len(c))
            out.found[i, qi] = found_at(q, c, ids[:, :k], exact_ids[:, :k]) if spec.compressed else out.depth[i, qi]
    return out  # nothing is built apart from the search: quantizing is part of each search, and timed with it


def stats(spec: VectorSpec, measured, width: int) -> dict:
    """The index statistics of a vectors setting, and its bytes per vector (`vector_bytes`)."""
    return {**measured.stats(), "vector_bytes": spec.bytes_per_vector(width)}


# --------------------------------------------------------------------------- the axis in a grid


def applies(retriever: str, index) -> bool:
    """Whether the axis applies to a configuration: dense, or hybrid's dense half, under exact search."""
    return retriever in ("dense", "hybrid") and index is not None and not index.approximate


def vector_grid(exp, config) -> list[tuple[str, str]]:
    """The (vectors, dims) a configuration (`chunkeval.engine.pipeline.records.Config`) runs with: every one of the axes where
    they apply and some k is within a rescoring depth; float32/full alone elsewhere (`axis_notes` says which)."""
    if not applies(config.retriever, config.index):
        return [(FLOAT, FULL)]
    return [(v, d) for v in exp.vectors for d in exp.dims if (parse_vectors(v).depth or max(exp.k)) >= min(exp.k)]


def scored_ks(vectors: str, ks: tuple[int, ...]) -> tuple[int, ...]:
    """The k a configuration of `vectors` is scored at: those within its rescoring depth."""
    depth = parse_vectors(vectors).depth
    return ks if depth is None else tuple(k for k in ks if k <= depth)


def axis_notes(exp) -> list[str]:
    """One line where the axes leave combinations out: an approximate index or a retriever that reads no vectors
    (they run with float32/full alone), and rescoring depths below k."""
    if (tuple(exp.vectors), tuple(exp.dims)) == ((FLOAT,), (FULL,)):
        return []
    notes = []
    skipped = [s.key for s in exp.index_specs() if s.approximate]
    others = [r for r in exp.retriever if r not in ("dense", "hybrid")]
    if skipped or others:
        where = ", ".join([f"index {k}" for k in skipped] + [f"retriever {r}" for r in others])
        notes.append(
            f"vectors and dims apply to dense and hybrid under exact search: {where} run with float32/full alone"
        )
    below = sorted({(d, k) for v in exp.vectors if (d := parse_vectors(v).depth) for k in exp.k if d < k})
    if below:
        notes.append(
            "binary-rescore is not scored where its depth < k: " + ", ".join(f"depth {d} at k {k}" for d, k in below)
        )
    return notes


def vector_spec(config) -> VectorSpec:
    return spec_of(config.vectors, config.dims)


def compares_vectors(config, exp) -> bool:
    """Whether a configuration's costs are those of its vectors setting: a compressed one, or float32/full where
    the grid compresses (the baseline, timed)."""
    if not applies(config.retriever, config.index):
        return False
    return vector_spec(config).compressed or any(spec_of(v, d).compressed for v in exp.vectors for d in exp.dims)


def with_vector_keys(table, config):
    """A table of one configuration with its `vectors` and `dims` columns set to the configuration's."""
    import pyarrow as pa

    for key in VECTOR_KEYS:
        at = table.schema.get_field_index(key)
        if at >= 0:
            table = table.set_column(at, key, pa.array([getattr(config, key)] * table.num_rows, pa.string()))
    return table


def with_found(table, found, every: tuple[int, ...], ks: tuple[int, ...]):
    """A configuration's per-query table (rows by k, in the order of `sorted(set(ks))`) with `ann_recall_at_k`,
    `ann_found` and `ann_depth` of `found` (measured at the k of `every`)."""
    import pyarrow as pa

    rows = [every.index(k) for k in sorted(set(ks))]
    table = table.append_column("ann_recall_at_k", pa.array(np.concatenate([found.recall(i) for i in rows])))
    table = table.append_column("ann_found", pa.array(found.found[rows].reshape(-1)))
    return table.append_column("ann_depth", pa.array(found.depth[rows].reshape(-1)))
