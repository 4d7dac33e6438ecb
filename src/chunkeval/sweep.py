"""A sweep: every chunking setting of an experiment, scored at every k, from plain functions.

The steps are separate so that a flow can run each as a task:
`load_inputs` → `chunk_corpora` (per setting) → `embed_all` → `retrieve` (per setting, once at the
largest k) → `score_chunking` and `reference_table` (per setting) → `summarize_sweep`.
Each distinct text (chunk or question) is embedded once across the whole grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from chunkeval import metrics as M
from chunkeval.chunking import ChunkerSpec, Chunks, chunk_corpora, count_tokens
from chunkeval.embedding import Embedder
from chunkeval.experiment import Experiment
from chunkeval.ingest import SpanGold, corpus_ids_in, load_corpora, load_span_gold
from chunkeval.retrieval import top_k

CONFIG_KEYS = ["chunker", "chunk_size", "chunk_overlap", "k"]


@dataclass(frozen=True)
class Inputs:
    corpora: dict[str, str]
    gold: SpanGold


@dataclass(frozen=True)
class Embedded:
    """Question vectors, and per chunking its chunk vectors and how many chunks were truncated."""

    queries: np.ndarray
    chunks: list[np.ndarray]
    truncated: list[int]


@dataclass(frozen=True)
class SweepResult:
    per_query: pa.Table
    summary: pa.Table
    by_corpus: pa.Table
    references: pa.Table
    texts_embedded: int
    model_loaded: bool


def load_inputs(exp: Experiment) -> Inputs:
    corpora = load_corpora(Path(exp.corpus_dir), list(exp.corpus) or None)
    return Inputs(corpora, load_span_gold(Path(exp.questions), corpora, corpus_ids_in(Path(exp.corpus_dir))))


def embed_all(inputs: Inputs, chunkings: list[Chunks], embedder: Embedder) -> Embedded:
    """One embedding call for the questions and every chunking's chunks: repeats are embedded once."""
    texts = list(inputs.gold.questions)
    bounds = [len(texts)]
    for chunks in chunkings:
        texts += chunks.texts(inputs.corpora)
        bounds.append(len(texts))
    vectors, truncated = embedder.embed(texts)
    return Embedded(
        queries=vectors[: bounds[0]],
        chunks=[vectors[a:b] for a, b in zip(bounds, bounds[1:])],
        truncated=[int(truncated[a:b].sum()) for a, b in zip(bounds, bounds[1:])],
    )


def retrieve(inputs: Inputs, chunks: Chunks, query_vectors: np.ndarray, chunk_vectors: np.ndarray,
             k: int, own_corpus: bool = False) -> np.ndarray:
    """Top-k chunk indices per question (-1 padding), over the pooled corpora or each question's own."""
    if not own_corpus:
        return top_k(query_vectors, chunk_vectors, k)[0]
    index = {name: i for i, name in enumerate(chunks.corpus_names)}
    q_groups = np.asarray([index[c] for c in inputs.gold.corpus_ids], dtype=np.int64)
    return top_k(query_vectors, chunk_vectors, k, q_groups, chunks.corpus.astype(np.int64))[0]


def score_chunking(gold: SpanGold, spec: ChunkerSpec, chunks: Chunks, topk: np.ndarray, ks: tuple[int, ...]) -> pa.Table:
    """Per-query span, set and rank metrics of one chunking at every k (topk holds the largest k)."""
    ref = M.reference_chars(gold, chunks.corpus_names)
    first = M.first_covering_rank(ref, topk, chunks)
    relevance = M.chunk_relevance(gold, ref, chunks)
    omega = M.safe_div(relevance.covered_all, relevance.omega_union)
    parts = []
    n = gold.n_queries
    for k in sorted(set(ks)):
        spans = M.span_metrics(ref, first, topk, chunks, k)
        judged = M.judge_topk(topk[:, :k], relevance.keys, relevance.n_relevant, len(chunks))
        ranks = M.rank_metrics(judged, k)
        columns = {
            "chunker": pa.array([spec.chunker] * n), "chunk_size": pa.array(np.full(n, spec.chunk_size)),
            "chunk_overlap": pa.array(np.full(n, spec.chunk_overlap)), "k": pa.array(np.full(n, k)),
            "query_id": pa.array(gold.query_ids), "corpus_id": pa.array(gold.corpus_ids),
            "has_gold": pa.array(spans["ref_chars"] > 0),
        }
        columns.update({name: pa.array(spans[name]) for name in M.SPAN_METRICS if name in spans})
        columns["precision_omega"] = pa.array(omega)
        columns.update({name: pa.array(ranks[name]) for name in M.RANK_METRICS})
        columns.update({name: pa.array(spans[name]) for name in ("covered", "ref_chars", "retrieved_chars", "uncovered", "retrieved_tokens")})
        columns["covered_all"] = pa.array(relevance.covered_all)
        columns["omega_union"] = pa.array(relevance.omega_union)
        columns.update({name: pa.array(ranks[name]) for name in ("tp", "fp", "fn", "n_retrieved", "n_relevant", "hits_at_k")})
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)


def reference_table(inputs: Inputs, spec: ChunkerSpec, chunks: Chunks) -> pa.Table:
    """One row per reference: its question, length in tokens, and whether it straddles a chunk
    boundary (no single chunk of this chunking holds it whole: the usual cause of partial recall)."""
    gold = inputs.gold
    straddles = np.ones(len(gold.ref_start), dtype=bool)
    corpus_of_ref = np.asarray([gold.corpus_ids[q] for q in gold.ref_query.tolist()], dtype=object)
    for index, name in enumerate(chunks.corpus_names):  # a loop over corpora, vectorized within
        refs = np.flatnonzero(corpus_of_ref == name)
        _, starts, reach = M.chunks_by_start(chunks, index)
        straddles[refs] = M.furthest_end(starts, reach, gold.ref_start[refs]) < gold.ref_end[refs]
    n = len(gold.ref_start)
    texts = [inputs.corpora[c][s:e] for c, s, e in zip(corpus_of_ref, gold.ref_start.tolist(), gold.ref_end.tolist())]
    q = gold.ref_query.tolist()
    return pa.table({
        "chunker": [spec.chunker] * n, "chunk_size": np.full(n, spec.chunk_size), "chunk_overlap": np.full(n, spec.chunk_overlap),
        "query_id": [gold.query_ids[i] for i in q], "corpus_id": corpus_of_ref.tolist(), "question": [gold.questions[i] for i in q],
        "ref_start": gold.ref_start, "ref_end": gold.ref_end, "ref_tokens": count_tokens(texts), "straddles": straddles,
    })


def summarize_sweep(per_query: pa.Table, chunk_stats: pa.Table, skip_empty_gold: bool = False) -> tuple[pa.Table, pa.Table]:
    """(summary per configuration, summary per configuration and corpus), with chunk counts joined."""
    table = per_query if skip_empty_gold else per_query.drop_columns(["has_gold"])
    summary = M.summarize(table, CONFIG_KEYS)
    by_corpus = M.summarize(table, CONFIG_KEYS + ["corpus_id"])
    keys = CONFIG_KEYS[:3]
    return (summary.join(chunk_stats, keys).sort_by([(c, "ascending") for c in CONFIG_KEYS]),
            by_corpus.sort_by([(c, "ascending") for c in CONFIG_KEYS + ["corpus_id"]]))


def chunk_stats(specs: list[ChunkerSpec], chunkings: list[Chunks], truncated: list[int]) -> pa.Table:
    return pa.table({
        "chunker": [s.chunker for s in specs], "chunk_size": [s.chunk_size for s in specs],
        "chunk_overlap": [s.chunk_overlap for s in specs], "n_chunks": [len(c) for c in chunkings],
        "truncated_chunks": truncated,
    })


def run_sweep(exp: Experiment, embedder: Embedder) -> SweepResult:
    """The whole sweep of an experiment in one process (the flow runs the same steps as tasks)."""
    inputs = load_inputs(exp)
    specs = exp.grid()
    chunkings = [chunk_corpora(inputs.corpora, spec) for spec in specs]
    embedded = embed_all(inputs, chunkings, embedder)
    k_max = max(exp.k)
    tables = [
        score_chunking(inputs.gold, spec, chunks, retrieve(inputs, chunks, embedded.queries, vectors, k_max, exp.own_corpus), exp.k)
        for spec, chunks, vectors in zip(specs, chunkings, embedded.chunks)
    ]
    per_query = pa.concat_tables(tables)
    summary, by_corpus = summarize_sweep(per_query, chunk_stats(specs, chunkings, embedded.truncated), exp.skip_empty_gold)
    references = pa.concat_tables([reference_table(inputs, spec, chunks) for spec, chunks in zip(specs, chunkings)])
    return SweepResult(per_query, summary, by_corpus, references, embedder.texts_embedded, embedder.model_loaded)
