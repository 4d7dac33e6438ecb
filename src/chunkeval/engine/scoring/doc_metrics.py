"""Scoring against document-level gold (qrels): chunk-level metrics with each chunk judged by its document's
grade, and document-level metrics by MaxP. Definitions: docs/metrics.md ("Document-level gold").

The chunks of a run over documents are made per document (`Chunks.corpus_names` are the document ids), so a
chunk's document is `chunks.corpus`. MaxP: a document's score is its best chunk's; the documents are ranked by
the rank of their best chunk, looking at most `DOC_DEPTH` chunks deep, and the first k make the list (fewer
when fewer distinct documents were found, as in trec_eval). Everything is vectorised over queries × ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from chunkeval.engine.inputs.document_gold import DOC_DEPTH, DocGold
from chunkeval.engine.retrieval.ties import trec_order
from chunkeval.engine.scoring import metrics as M
from chunkeval.engine.scoring.configuration import config_values, key_columns, tie_columns
from chunkeval.files import field, write_text
from chunkeval.vocabulary import CONFIG_KEYS, DOC_METRICS, OPTIONAL_KEYS, SPAN_METRICS, TIE_POLICIES, config_label

if TYPE_CHECKING:
    from chunkeval.engine.chunking import ChunkerSpec, Chunks


SHALLOW_DEPTH = 100  # how deep `shallow_first` looks before it looks again, for the queries that need it


def retrieval_depth(k_max: int, n_chunks: int) -> int:
    """How deep a run over document gold retrieves chunks: its largest k, or deep enough for MaxP; never deeper
    than the chunks there are (a k beyond them ranks them all)."""
    return min(max(k_max, min(DOC_DEPTH, n_chunks)), max(n_chunks, 1))


def distinct_docs(topk: np.ndarray, doc_of_chunk: np.ndarray) -> np.ndarray:
    """How many documents each query's ranked chunks (-1 padding) come from."""
    docs = np.sort(np.where(topk >= 0, doc_of_chunk[np.maximum(topk, 0)], -1), axis=1)
    return (docs[:, :1] >= 0).sum(axis=1) + ((np.diff(docs, axis=1) != 0) & (docs[:, 1:] >= 0)).sum(axis=1)


def shallow_first(
    search: Callable[[np.ndarray | None, int], tuple[np.ndarray, np.ndarray | None]],
    k_max: int,
    depth: int,
    doc_of_chunk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The chunk ranking MaxP reads, found shallow first: `search(rows, d)` gives the top d chunks of the queries
    `rows` (every query for None) and their scores (or None). Every query's first `SHALLOW_DEPTH` chunks are found; a query whose list holds
    fewer than `k_max` documents, and did not run out of chunks, is searched again to `depth`; the others' lists
    end there (-1 after them where another query's goes deeper). MaxP's first k documents are the same as from
    one search to `depth` for a search whose top d is the start of its top D (the exact dense top-k, ordered by
    score then chunk); finding 1,000 chunks a query among a million costs five times as much as finding 100."""
    depth = min(depth, max(len(doc_of_chunk), 1))  # every chunk ranked: no search can go deeper
    first = min(depth, max(SHALLOW_DEPTH, k_max))
    top, scores = search(None, first)
    short = np.flatnonzero((distinct_docs(top, doc_of_chunk) < k_max) & (top[:, -1] >= 0))
    if first >= depth or not len(short):
        return top, scores
    out = np.full((len(top), depth), -1, dtype=np.int64)
    out[:, :first] = top
    out_scores = None if scores is None else np.full((len(top), depth), np.nan)
    if out_scores is not None:
        out_scores[:, :first] = scores
    # One query is searched beside another: BLAS rounds a one-row product (matrix times vector) apart from the
    # same row of a larger one, and the scores of the deeper search are to be those of the first.
    rows = np.r_[short, (short[0] + 1) % len(top)] if len(short) == 1 and len(top) > 1 else short
    deeper, deeper_scores = search(rows, depth)
    out[short] = deeper[: len(short)]
    if out_scores is not None:
        out_scores[short] = deeper_scores[: len(short)]
    return out, out_scores


def maxp_ranking(
    topk: np.ndarray,
    doc_of_chunk: np.ndarray,
    n_docs: int,
    k: int,
    scores: np.ndarray | None = None,
    names: tuple[str, ...] | None = None,
) -> np.ndarray:
    """(Q, k) document indices ranked by their best chunk's rank (-1 padding): the first k distinct documents
    of each query's chunk ranking, at most `DOC_DEPTH` chunks deep. With `scores` (of each ranked chunk) and
    the documents' `names`, ordered by the tie policy trec_eval's (`maxp_scored`)."""
    if scores is not None and names is not None:
        return maxp_scored(topk, scores, doc_of_chunk, names)[0][:, :k]
    return _maxp(topk, doc_of_chunk, n_docs, k)[0]


def _maxp(topk: np.ndarray, doc_of_chunk: np.ndarray, n_docs: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first k distinct documents of each query's chunk ranking (-1 padding), and the rank (column) of
    each one's best chunk."""
    top = topk[:, :DOC_DEPTH]
    n_q, depth = top.shape
    docs = np.where(top >= 0, doc_of_chunk[np.maximum(top, 0)], -1)
    flat = (np.arange(n_q, dtype=np.int64)[:, None] * (n_docs + 1) + docs + 1).ravel()
    first = np.zeros(flat.shape, dtype=bool)
    first[np.unique(flat, return_index=True)[1]] = True
    first = first.reshape(n_q, depth) & (docs >= 0)
    rank = np.cumsum(first, axis=1) - 1
    keep = first & (rank < k)
    out = np.full((n_q, k), -1, dtype=np.int64)
    at = np.zeros((n_q, k), dtype=np.int64)
    rows, cols = np.nonzero(keep)
    out[rows, rank[rows, cols]] = docs[rows, cols]
    at[rows, rank[rows, cols]] = cols
    return out, at


def maxp_scored(
    topk: np.ndarray, scores: np.ndarray, doc_of_chunk: np.ndarray, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Every document MaxP finds in each query's chunk ranking (at most `DOC_DEPTH` chunks deep) with its
    score, its best chunk's, ordered as trec_eval orders a run of these scores: score descending, exact ties
    by document id in descending string order (`chunkeval.engine.retrieval.ties`). (Q, D) indices (-1 padding) and
    scores (NaN padding)."""
    depth = min(topk.shape[1], DOC_DEPTH)
    docs, at = _maxp(topk, doc_of_chunk, len(names), depth)
    best = np.where(docs >= 0, np.take_along_axis(np.asarray(scores, dtype=np.float64)[:, :depth], at, 1), np.nan)
    return trec_order(docs, best, lambda index: [names[i] for i in index.tolist()])


class Grades:
    """The qrels as sorted keys `query * n_docs + doc` with their grades (documents by index in `names`)."""

    def __init__(self, gold: DocGold, names: tuple[str, ...]):
        index = {name: i for i, name in enumerate(names)}
        self.n_docs = max(len(names), 1)
        self.n_queries = gold.n_queries
        q, d, g = [], [], []
        for qi, qid in enumerate(gold.query_ids):
            for doc, grade in gold.qrels[qid].items():
                q.append(qi)
                d.append(index[doc])
                g.append(grade)
        self.query = np.asarray(q, dtype=np.int64)
        self.doc = np.asarray(d, dtype=np.int64)
        keys = self.query * self.n_docs + self.doc
        order = np.argsort(keys)
        self.keys, self.grade = keys[order], np.asarray(g, dtype=np.float64)[order]
        self.query, self.doc = self.query[order], self.doc[order]

    def of(self, docs: np.ndarray) -> np.ndarray:
        """The grade of each (row = query, document) entry, 0 where unjudged or padding (-1)."""
        if not len(self.keys):
            return np.zeros(docs.shape)
        keys = np.arange(docs.shape[0], dtype=np.int64)[:, None] * self.n_docs + np.maximum(docs, 0)
        pos = np.clip(np.searchsorted(self.keys, keys), 0, len(self.keys) - 1)
        found = (self.keys[pos] == keys) & (docs >= 0)
        return np.where(found, np.maximum(self.grade[pos], 0.0), 0.0)

    def judged(self, docs: np.ndarray, weight: np.ndarray | None = None) -> M.Judged:
        """Judged lists of `docs` (document indices per query, -1 padding). With `weight` (items per document:
        chunks), each relevant document counts as that many relevant items of its grade."""
        positive = self.grade > 0
        q, grade = self.query[positive], self.grade[positive]
        times = weight[self.doc[positive]] if weight is not None else np.ones(len(q), dtype=np.int64)
        q, grade = np.repeat(q, times), np.repeat(grade, times)
        order = np.lexsort((-grade, q))
        return M.Judged(
            gains=self.of(docs),
            n_retrieved=(docs >= 0).sum(axis=1),
            n_relevant=np.bincount(q, minlength=self.n_queries),
            ideal=M._fill(q[order], grade[order], self.n_queries),
        )


def doc_metrics(judged: M.Judged, k: int) -> dict[str, np.ndarray]:
    """trec_eval's ndcg_cut_k, recall_k, P_k, recip_rank and map of the top-k document lists."""
    return {
        "doc_ndcg_at_k": M.ndcg_at_k(judged, k),
        "doc_recall_at_k": M.recall_at_k(judged, k),
        "doc_precision_at_k": M.precision_at_k(judged, k),
        "doc_mrr": M.reciprocal_rank(judged),
        "doc_map": M.average_precision(judged),
    }


def trec_run_lines(
    query_ids: list[str], rankings: list[list[str]], tag: str, scores: list[list[float] | None] | None = None
) -> list[str]:
    """A TREC run (`qid Q0 doc rank score tag`) of document rankings, with each document's raw score (its best
    chunk's, written so that it reads back bit-equal: `repr`) where `scores` gives them, so that trec_eval
    (which sorts by score, exact ties by document id descending) reads the order chunkeval scored under the
    tie policy `trec_eval`; else (no scores: a plug-in, the policy `retriever`, runs recorded before scores
    were kept) scores n, n-1, …, strictly decreasing in chunkeval's order."""
    scores = scores or [None] * len(query_ids)
    for qid, docs in zip(query_ids, rankings):  # a TREC run is split at white space: no id may hold any
        field(qid, " \t", "query_id", "a TREC run file")
        for doc in docs:
            field(doc, " \t", "document id", "a TREC run file")
    field(tag, " \t", "run tag", "a TREC run file")
    return [
        f"{qid} Q0 {doc} {rank} {repr(float(raw[rank - 1])) if raw else len(docs) - rank + 1} {tag}"
        for qid, docs, raw in zip(query_ids, rankings, scores)
        for rank, doc in enumerate(docs, start=1)
    ]


def _ranked_names(ranking: np.ndarray, names: tuple[str, ...]) -> pa.Array:
    """The MaxP rankings as document ids separated by spaces (a TREC run's ids hold no space), a column that
    CSV and Parquet both keep."""
    lookup = np.asarray(names, dtype=object)
    return pa.array([" ".join(lookup[row[row >= 0]].tolist()) for row in ranking], pa.string())


def _ranked_scores(ranking: np.ndarray, scores: np.ndarray | None) -> pa.Array:
    """The score of each document of the MaxP rankings (its best chunk's), separated by spaces as `doc_ranking`
    is, each written so that it reads back bit-equal (`repr`); null without scores."""
    if scores is None:
        return pa.nulls(len(ranking), pa.string())
    return pa.array([" ".join(map(repr, row[ids >= 0].tolist())) for ids, row in zip(ranking, scores)], pa.string())


def trec_runs(per_query: pa.Table, keys: list[str]) -> dict[str, str]:
    """Per configuration of a per-query table over document gold, its TREC run file's text, by a file name
    made of the configuration (`doc_ranking` of each query, the tag the configuration)."""
    if "doc_ranking" not in per_query.column_names:
        return {}
    runs: dict[tuple, list[str]] = {}
    columns = {k: per_query[k].to_pylist() for k in [*keys, "query_id", "doc_ranking"]}
    raw = per_query["doc_scores"].to_pylist() if "doc_scores" in per_query.column_names else [None] * len(per_query)
    raw = [None if text is None else [float(x) for x in text.split()] for text in raw]  # null: older runs
    for i, qid in enumerate(columns["query_id"]):
        config = tuple(columns[k][i] for k in keys)
        docs = (columns["doc_ranking"][i] or "").split()
        tag = config_label(dict(zip(keys, config)))  # chunkeval.vocabulary: the one short form
        runs.setdefault(config, []).extend(trec_run_lines([qid], [docs], tag.replace(" ", "_"), [raw[i]]))
    # a later axis at its default (context `none`) is left out of the name: files keep the names they had before it
    named = {
        c: tuple(None if k in OPTIONAL_KEYS and v == OPTIONAL_KEYS[k] else v for k, v in zip(keys, c)) for c in runs
    }
    return {_file_name(named[config]): "\n".join(lines) + "\n" for config, lines in runs.items()}


def write_doc_runs(per_query: pa.Table, folder: Path) -> Path | None:
    """Under document gold, each configuration's top-k document ranking (MaxP) as a TREC run file in `folder`
    (None, and nothing written, for span gold)."""
    runs = trec_runs(per_query, CONFIG_KEYS)
    if not runs:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in runs.items():
        write_text(folder / name, text)
    return folder


def _file_name(config: tuple) -> str:
    """A configuration's run file: its keys joined by `_` (a null key, candidates of a row not reranked, left out)."""
    text = "_".join(str(v) for v in config if v is not None)
    return "".join(c if c.isalnum() or c in "._=-" else "_" for c in text) + ".trec"


def score_documents(
    gold: DocGold,
    spec: ChunkerSpec,
    chunks: Chunks,
    topk: np.ndarray,
    ks: tuple[int, ...],
    model: str,
    retriever: str,
    index: str = "exact",
    reranker: str = "none",
    candidates: int | None = None,
    scores: np.ndarray | None = None,
    ties: str = TIE_POLICIES[0],
) -> tuple[pa.Table, dict[int, np.ndarray]]:
    """Per-query chunk-level rank and set metrics (a chunk relevant with its document's grade) and document
    metrics at every k, span metrics null, and the MaxP document ranking of the top k (`doc_ranking`, what
    `trec_run_lines` writes) with their scores under the tie policy `trec_eval` (`doc_scores`, null under
    `retriever` or without `scores`); and per k the rankings as document indices. `scores`: of each ranked
    chunk; with them, the ties and tie-aware metrics of both levels (`scoring.tie_columns`)."""
    values = config_values(spec, model, retriever, index, reranker, candidates)
    grades = Grades(gold, chunks.corpus_names)
    doc_of_chunk = chunks.corpus.astype(np.int64)
    per_doc = np.bincount(doc_of_chunk, minlength=len(chunks.corpus_names))
    n = gold.n_queries
    nothing = pa.nulls(n, pa.float64())
    parts, rankings = [], {}
    scored = scores is not None and ties == TIE_POLICIES[0]
    if scored:  # every document MaxP finds, by the tie policy, so that the tied groups at k are whole
        ranked, ranked_scores = maxp_scored(topk, scores, doc_of_chunk, chunks.corpus_names)
    else:
        ranked, ranked_scores = _maxp(topk, doc_of_chunk, len(chunks.corpus_names), min(topk.shape[1], DOC_DEPTH))
        if scores is not None:  # the best chunk's score of each, in the retriever's order
            at = ranked_scores
            ranked_scores = np.where(ranked >= 0, np.take_along_axis(np.asarray(scores, np.float64), at, 1), np.nan)
    all_docs = np.where(topk >= 0, doc_of_chunk[np.maximum(topk, 0)], -1)
    for k in sorted(set(ks)):
        top = topk[:, :k]
        chunk_docs = all_docs[:, :k]
        ranks = M.rank_metrics(grades.judged(chunk_docs, per_doc), k)
        width = min(k, ranked.shape[1])  # no wider than the documents MaxP found (a k beyond them is clamped)
        rankings[k] = np.full((n, width), -1, dtype=np.int64)
        rankings[k][:, :width] = ranked[:, :k]
        doc_scores = None
        if scored:
            doc_scores = np.full((n, width), np.nan)
            doc_scores[:, : min(k, ranked.shape[1])] = ranked_scores[:, :k]
        docs = doc_metrics(grades.judged(rankings[k]), k)
        retrieved_tokens = np.where(top >= 0, chunks.n_tokens[np.maximum(top, 0)], 0).sum(axis=1)
        columns = {
            **key_columns(gold, values, k),
            "has_gold": pa.array(grades.judged(rankings[k]).n_relevant > 0),
            **{name: nothing for name in SPAN_METRICS},
            **{name: pa.array(ranks[name]) for name in M.RANK_METRICS},
            "retrieved_tokens": pa.array(retrieved_tokens),
            **{name: pa.array(ranks[name]) for name in ("tp", "fp", "fn", "n_retrieved", "n_relevant", "hits_at_k")},
            **{name: pa.array(docs[name]) for name in DOC_METRICS},
            "doc_ranking": _ranked_names(rankings[k], chunks.corpus_names),  # the run file's lists
            "doc_scores": _ranked_scores(rankings[k], doc_scores),  # and their scores
            **tie_columns("", grades.judged(all_docs, per_doc), topk, scores, k),
            **tie_columns("doc_", grades.judged(ranked), ranked, None if scores is None else ranked_scores, k),
        }
        parts.append(pa.table(columns))
    return pa.concat_tables(parts), rankings
