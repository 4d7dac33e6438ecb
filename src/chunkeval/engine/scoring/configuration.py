"""Scoring one configuration: its retrieved top k against the gold set, at every k.

The path reads one way: the gold set a k is scored against is resolved first (for `duplicates: credit`,
each reference's copy the top k cover most: `chunkeval.engine.inputs.duplicates`), then the metric functions of
`chunkeval.engine.scoring.metrics` run on it. Neither of those modules imports the other; this one joins them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from chunkeval.engine.chunking import ChunkerSpec, Chunks, count_tokens
from chunkeval.engine.inputs.document_gold import DocGold
from chunkeval.engine.inputs.duplicates import Copies, credited_copies
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.engine.retrieval.ties import tie_aware, ties_in_top
from chunkeval.engine.scoring import metrics as M
from chunkeval.stats.summaries import summarize_slices as summarize_by_slice
from chunkeval.vocabulary import (
    CHUNKING_KEYS,
    CONFIG_KEYS,
    DOC_METRICS,
    NO_EXPAND,
    NO_MODEL,
    NO_RERANKER,
    NUMBER_KEYS,
    OPTIONAL_KEYS,
    TIE_AWARE,
    VECTOR_KEYS,
)


def span_scoring(
    gold: SpanGold, topk: np.ndarray, chunks: Chunks, copies: Copies | None = None, relevance: str = "overlap"
) -> tuple[M.ChunkRelevance, Callable[[int], dict[str, np.ndarray]]]:
    """The chunk relevance of the configuration under the `relevance` rule, and `k -> span metrics of the top
    k`: positional without `copies`, credit with them."""
    if copies is None:
        ref = M.reference_chars(gold, chunks.corpus_names)
        first = M.first_covering_rank(ref, topk, chunks)
        return M.chunk_relevance(gold, ref, chunks, relevance), lambda k: M.span_metrics(ref, first, topk, chunks, k)
    every = copies.gold_set(gold)
    ref = M.reference_chars(every, chunks.corpus_names)
    first = M.first_covering_rank(ref, topk, chunks)  # once for the characters of every copy
    copy_of = np.repeat(np.arange(len(copies.ref)), copies.end - copies.start)

    def spans(k: int) -> dict[str, np.ndarray]:
        # the gold set of this k: each reference's copy the top k cover most, resolved before the metrics
        keep = credited_copies(copies, np.bincount(copy_of, weights=first < k, minlength=len(copies.ref)))[copy_of]
        query, pos = ref.query[keep], ref.pos[keep]
        picked = M.ReferenceChars(query, ref.corpus[keep], pos, M.first_of_each(query, pos), ref.n_queries)
        return M.span_metrics(picked, first[keep], topk, chunks, k)

    return M.chunk_relevance(every, ref, chunks, relevance), spans


def config_values(
    spec: ChunkerSpec,
    model: str = NO_MODEL,
    retriever: str = "dense",
    index: str = "exact",
    reranker: str = NO_RERANKER,
    candidates: int | None = None,
    expand: str = NO_EXPAND,
) -> dict:
    """A configuration's keys but k, as values (`vocabulary.CONFIG_KEYS`)."""
    return {
        "model": model,
        "retriever": retriever,
        "index": index,
        **VECTOR_KEYS,  # a compressed configuration's are set by the sweep (`chunkeval.engine.retrieval.vectors`)
        "reranker": reranker,
        "candidates": candidates,
        "expand": expand,
        "chunker": spec.chunker,
        "chunk_size": spec.chunk_size,
        "chunk_overlap": spec.chunk_overlap,
    }


def key_columns(gold, values: dict, k: int) -> dict[str, pa.Array]:
    """The columns that say which configuration (`values` of `config_values`), depth, query and corpus a
    per-query row is of."""
    n = gold.n_queries
    keys = {**values, "k": k}
    keys = {**OPTIONAL_KEYS, **keys}  # the axes a configuration's values may leave out, at their default
    columns = {key: pa.array([keys[key]] * n, pa.int64() if key in NUMBER_KEYS else pa.string()) for key in CONFIG_KEYS}
    return {**columns, "query_id": pa.array(gold.query_ids), "corpus_id": pa.array(gold.query_corpora)}


def tie_columns(
    prefix: str, judged: M.Judged, items: np.ndarray, scores: np.ndarray | None, k: int
) -> dict[str, pa.Array]:
    """Whether each query's top k hold exactly tied scores (`<prefix>tied_at_k`), and the tie-aware expected
    value of the rank metrics `vocabulary.TIE_AWARE` (`<prefix><metric>_tie_aware`; docs/metrics.md, "Ties") over
    the judged ranking `items` sorted by the tie policy, as deep as it was retrieved; null without scores."""
    names = [f"{prefix}{m}_tie_aware" for m in TIE_AWARE]
    if scores is None:
        n = len(items)
        return {f"{prefix}tied_at_k": pa.nulls(n, pa.bool_()), **{name: pa.nulls(n, pa.float64()) for name in names}}
    expected = tie_aware(judged.gains, items, scores, judged.ideal, judged.n_relevant, k)
    return {
        f"{prefix}tied_at_k": pa.array(ties_in_top(items, scores, k)),
        **{name: pa.array(expected[m], pa.float64()) for name, m in zip(names, TIE_AWARE)},
    }


def score_chunking(
    gold: SpanGold,
    spec: ChunkerSpec,
    chunks: Chunks,
    topk: np.ndarray,
    ks: tuple[int, ...],
    model: str = NO_MODEL,
    retriever: str = "dense",
    copies: Copies | None = None,
    reranker: str = NO_RERANKER,
    candidates: int | None = None,
    index: str = "exact",
    rule: str = "overlap",
    scores: np.ndarray | None = None,
    expand: str = NO_EXPAND,
    counted: M.ChunkRelevance | None = None,
) -> pa.Table:
    """Per-query span, set and rank metrics of one configuration at every k (topk holds the largest k);
    with `copies`, a reference's copies get credit (`chunkeval.engine.inputs.duplicates`); set and rank metrics
    count the chunks relevant under the relevance `rule` (`metrics.share_held`). `scores`: of each ranked chunk,
    for the ties in each top k and the tie-aware metrics (`tie_columns`; null without them). `counted`: where
    the relevant items are counted and precision Ω measured other than over `chunks` (small-to-big retrieval:
    `chunks` are a depth's merged units, `chunkeval.engine.scoring.expansion`)."""
    values = config_values(spec, model, retriever, index, reranker, candidates, expand)
    relevance, span_metrics = span_scoring(gold, topk, chunks, copies, rule)
    counted = relevance if counted is None else counted
    omega = M.safe_div(counted.covered_all, counted.omega_union)
    parts = []
    n = gold.n_queries
    for k in sorted(set(ks)):
        spans = span_metrics(k)
        judged = M.judge_topk(topk[:, :k], relevance.keys, counted.n_relevant, len(chunks))
        ranks = M.rank_metrics(judged, k)
        columns = {**key_columns(gold, values, k), "has_gold": pa.array(spans["ref_chars"] > 0)}
        columns.update({name: pa.array(spans[name]) for name in M.SPAN_METRICS if name in spans})
        columns["precision_omega"] = pa.array(omega)
        columns.update({name: pa.array(ranks[name]) for name in M.RANK_METRICS})
        columns.update(
            {
                name: pa.array(spans[name])
                for name in ("covered", "ref_chars", "retrieved_chars", "uncovered", "retrieved_tokens")
            }
        )
        columns["covered_all"] = pa.array(counted.covered_all)
        columns["omega_union"] = pa.array(counted.omega_union)
        columns.update(
            {name: pa.array(ranks[name]) for name in ("tp", "fp", "fn", "n_retrieved", "n_relevant", "hits_at_k")}
        )
        columns.update({name: pa.nulls(n, pa.float64()) for name in DOC_METRICS})  # measured under document gold
        deep = M.judge_topk(topk, relevance.keys, counted.n_relevant, len(chunks))  # tied groups past k whole
        columns.update(tie_columns("", deep, topk, scores, k))
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)


def reference_table(
    gold: SpanGold, corpora: dict[str, str], spec: ChunkerSpec, chunks: Chunks, model: str | None
) -> pa.Table:
    """One row per reference: its question, length in tokens, and whether it straddles a chunk
    boundary (no single chunk of this chunking holds it whole: the usual cause of partial recall).
    `model` is the model a semantic chunking was made with, `none` for the others."""
    straddles = np.ones(len(gold.ref_start), dtype=bool)
    corpus_of_ref = np.asarray([gold.corpus_ids[q] for q in gold.ref_query.tolist()], dtype=object)
    for index, name in enumerate(chunks.corpus_names):  # a loop over corpora, vectorized within
        refs = np.flatnonzero(corpus_of_ref == name)
        _, starts, reach = M.chunks_by_start(chunks, index)
        straddles[refs] = M.furthest_end(starts, reach, gold.ref_start[refs]) < gold.ref_end[refs]
    n = len(gold.ref_start)
    texts = [corpora[c][s:e] for c, s, e in zip(corpus_of_ref, gold.ref_start.tolist(), gold.ref_end.tolist())]
    q = gold.ref_query.tolist()
    return pa.table(
        {
            "model": pa.array([model or NO_MODEL] * n, pa.string()),
            "chunker": [spec.chunker] * n,
            "chunk_size": np.full(n, spec.chunk_size),
            "chunk_overlap": np.full(n, spec.chunk_overlap),
            "query_id": [gold.query_ids[i] for i in q],
            "corpus_id": corpus_of_ref.tolist(),
            "question": [gold.questions[i] for i in q],
            "ref_start": gold.ref_start,
            "ref_end": gold.ref_end,
            "ref_tokens": count_tokens(texts),
            "straddles": straddles,
        }
    )


def summarize_slices(per_query: pa.Table, slices: pa.Table | None, skip_empty_gold: bool = False) -> pa.Table | None:
    """The summary per configuration and slice of the gold set (`chunkeval.engine.inputs.slices`); None without slices."""
    if slices is None:
        return None
    table = per_query if skip_empty_gold else per_query.drop_columns(["has_gold"])
    return summarize_by_slice(table, slices, CONFIG_KEYS)


def summarize_sweep(
    per_query: pa.Table, chunk_stats: pa.Table, skip_empty_gold: bool = False
) -> tuple[pa.Table, pa.Table]:
    """(summary per configuration, summary per configuration and corpus), with chunk counts joined."""
    table = per_query if skip_empty_gold else per_query.drop_columns(["has_gold"])
    summary = M.summarize(table, CONFIG_KEYS)
    one_corpus = pc.count_distinct(table["corpus_id"], mode="all").as_py() == 1
    if one_corpus:  # its groups are the summary's, and so are its numbers (a bootstrap interval depends on a
        # group's rows alone): the summary with its corpus
        corpus = pa.array([table["corpus_id"][0].as_py()] * summary.num_rows, table.schema.field("corpus_id").type)
        by_corpus = summary.add_column(len(CONFIG_KEYS), table.schema.field("corpus_id"), corpus)
    else:
        by_corpus = M.summarize(table, CONFIG_KEYS + ["corpus_id"])
    return (
        summary.join(chunk_stats, CHUNKING_KEYS).sort_by([(c, "ascending") for c in CONFIG_KEYS]),
        by_corpus.sort_by([(c, "ascending") for c in CONFIG_KEYS + ["corpus_id"]]),
    )


def reference_tables(gold, corpora: dict[str, str], chunkings) -> pa.Table:
    """`reference_table` of every chunking (`Chunking`s); under document gold its columns, no rows."""
    gold = gold.without_spans() if isinstance(gold, DocGold) else gold
    distinct = {(c.spec, c.model): c for c in chunkings}.values()  # the contexts of a chunking share its chunks
    return pa.concat_tables([reference_table(gold, corpora, c.spec, c.chunks, c.model) for c in distinct])
