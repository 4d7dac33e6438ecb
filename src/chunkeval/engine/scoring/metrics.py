"""The three metric families, vectorized over queries. Definitions: docs/metrics.md.

Rank and set metrics work on a `Judged` ranked list: `gains[q, j]` is the grade of the item at rank
j + 1 of query q (0 when it is not relevant or when the list is shorter). Each metric is one small
function of it, as in ranx. They agree with trec_eval (P_k, recall_k, recip_rank, map, ndcg_cut).

Span metrics work on character positions: every character of every reference is one entry of a
`ReferenceChars` array, and a retrieved chunk covers it when the chunk's `[start, end)` holds it.
The rank at which each reference character is first covered gives every depth k at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from chunkeval import vocabulary as V
from chunkeval.engine.inputs.run_files import Qrels, RankedLists
from chunkeval.engine.inputs.span_gold import SpanGold
from chunkeval.errors import InputError
from chunkeval.stats import aggregate as AGG
from chunkeval.stats.summaries import summarize

if TYPE_CHECKING:
    from chunkeval.engine.chunking import Chunks


def safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros(np.broadcast(num, den).shape), where=den != 0)


def harmonic_mean(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """2pr / (p + r), 0 where both are 0."""
    return safe_div(2 * np.asarray(p) * r, np.asarray(p) + r)


# --------------------------------------------------------------------------- judged ranked lists


@dataclass(frozen=True)
class Judged:
    """Ranked lists with their gains. Non-positive grades are not relevant and gain 0."""

    gains: np.ndarray  # (Q, L) float64
    n_retrieved: np.ndarray  # (Q,) int64: length of each list
    n_relevant: np.ndarray  # (Q,) int64: relevant items in the gold set
    ideal: np.ndarray  # (Q, M) float64: the gold set's positive grades, highest first


def _fill(rows: np.ndarray, values: np.ndarray, n_rows: int) -> np.ndarray:
    """Matrix whose row q holds, left-aligned and in the order given, the values whose row is q."""
    counts = np.bincount(rows, minlength=n_rows)
    width = int(counts.max()) if len(counts) else 0
    out = np.zeros((n_rows, max(width, 1)), dtype=np.float64)
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    col = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    out[rows, col] = values[order]
    return out


def judge(gold: Qrels, ranked: RankedLists) -> tuple[list[str], Judged]:
    """Query ids (the gold set's order) and their judged lists; a gold query missing from the ranked lists has an empty list."""
    qids = list(gold.judgments)
    q_of = {q: i for i, q in enumerate(qids)}
    g_q = np.fromiter((q_of[q] for q, items in gold.judgments.items() for _ in items), dtype=np.int64)
    g_item = [item for items in gold.judgments.values() for item in items]
    g_grade = np.fromiter(
        (g for items in gold.judgments.values() for g in items.values()), dtype=np.float64, count=len(g_item)
    )
    r_q = np.fromiter((q_of[q] for q, items in ranked.ranked.items() for _ in items), dtype=np.int64)
    r_item = [item for items in ranked.ranked.values() for item in items]
    codes = (
        np.unique(np.asarray(g_item + r_item, dtype=object), return_inverse=True)[1].astype(np.int64)
        if g_item or r_item
        else np.zeros(0, np.int64)
    )
    n_codes = int(codes.max()) + 1 if len(codes) else 1
    g_key = g_q * n_codes + codes[: len(g_item)]
    r_key = r_q * n_codes + codes[len(g_item) :]
    order = np.argsort(g_key)
    pos = np.clip(np.searchsorted(g_key[order], r_key), 0, max(len(g_key) - 1, 0))
    matched = (g_key[order][pos] == r_key) if len(g_key) else np.zeros(len(r_key), dtype=bool)
    r_gain = np.where(matched, np.maximum(g_grade[order][pos] if len(g_key) else 0.0, 0.0), 0.0)
    positive = g_grade > 0
    ideal_order = np.lexsort((-g_grade[positive], g_q[positive]))
    n_q = len(qids)
    return qids, Judged(
        gains=_fill(r_q, r_gain, n_q),
        n_retrieved=np.bincount(r_q, minlength=n_q),
        n_relevant=np.bincount(g_q[positive], minlength=n_q),
        ideal=_fill(g_q[positive][ideal_order], g_grade[positive][ideal_order], n_q),
    )


def judge_topk(topk: np.ndarray, relevant_keys: np.ndarray, n_relevant: np.ndarray, n_chunks: int) -> Judged:
    """Judged lists from retrieved chunk indices (-1 = none) and the sorted keys `query * n_chunks + chunk`
    of the relevant (query, chunk) pairs: binary gains."""
    n_q, k = topk.shape
    keys = np.arange(n_q, dtype=np.int64)[:, None] * n_chunks + topk
    gains = (np.isin(keys, relevant_keys) & (topk >= 0)).astype(np.float64)
    width = max(k, 1)
    ideal = (np.arange(width)[None, :] < n_relevant[:, None]).astype(np.float64)
    return Judged(gains, (topk >= 0).sum(axis=1), n_relevant, ideal)


def hits_at_k(j: Judged, k: int) -> np.ndarray:
    return (j.gains[:, :k] > 0).sum(axis=1)


def precision_at_k(j: Judged, k: int) -> np.ndarray:
    """Relevant in the top k / k (k even when fewer were retrieved)."""
    return hits_at_k(j, k) / k


def recall_at_k(j: Judged, k: int) -> np.ndarray:
    """Relevant in the top k / relevant in all."""
    return safe_div(hits_at_k(j, k), j.n_relevant)


def hit_rate(j: Judged, k: int) -> np.ndarray:
    """1 when a relevant item is in the top k."""
    return (hits_at_k(j, k) > 0).astype(np.float64)


def reciprocal_rank(j: Judged) -> np.ndarray:
    """1 / rank of the first relevant item of the whole list, 0 when there is none."""
    rel = j.gains > 0
    return np.where(rel.any(axis=1), 1.0 / (rel.argmax(axis=1) + 1), 0.0)


def average_precision(j: Judged) -> np.ndarray:
    """Mean over all relevant items of the precision at each one's rank (0 for those not retrieved)."""
    rel = j.gains > 0
    precision = np.cumsum(rel, axis=1) / np.arange(1, rel.shape[1] + 1)
    return safe_div((precision * rel).sum(axis=1), j.n_relevant)


def ndcg_at_k(j: Judged, k: int) -> np.ndarray:
    """DCG@k / ideal DCG@k, gain = grade, discount log2(rank + 1)."""
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (j.gains[:, :k] * discount[: min(k, j.gains.shape[1])]).sum(axis=1)
    idcg = (j.ideal[:, :k] * discount[: min(k, j.ideal.shape[1])]).sum(axis=1)
    return safe_div(dcg, idcg)


def set_counts(j: Judged) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TP, FP, FN of the retrieved set (the whole list) against the gold set."""
    tp = (j.gains > 0).sum(axis=1)
    return tp, j.n_retrieved - tp, j.n_relevant - tp


def rank_metrics(j: Judged, k: int) -> dict[str, np.ndarray]:
    """Per-query set and rank metrics with the counts their micro averages need."""
    tp, fp, fn = set_counts(j)
    precision = safe_div(tp, tp + fp)
    recall = safe_div(tp, tp + fn)
    return {
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "n_retrieved": j.n_retrieved,
        "n_relevant": j.n_relevant,
        "hits_at_k": hits_at_k(j, k),
        "precision": precision,
        "recall": recall,
        "f1": harmonic_mean(precision, recall),
        "precision_at_k": precision_at_k(j, k),
        "recall_at_k": recall_at_k(j, k),
        "hit_rate": hit_rate(j, k),
        "mrr": reciprocal_rank(j),
        "map": average_precision(j),
        "ndcg_at_k": ndcg_at_k(j, k),
    }


# --------------------------------------------------------------------------- span metrics


@dataclass(frozen=True)
class ReferenceChars:
    """One entry per character of each reference (a character in two references of a query appears twice)."""

    query: np.ndarray  # int64
    corpus: np.ndarray  # int64, index into the run's corpus names
    pos: np.ndarray  # int64, offset in the corpus
    primary: np.ndarray  # bool: first entry of its (query, pos), so unions count a character once
    n_queries: int


def reference_chars(gold: SpanGold, corpus_names: tuple[str, ...]) -> ReferenceChars:
    lengths = gold.ref_end - gold.ref_start
    ref_of = np.repeat(np.arange(len(lengths)), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = gold.ref_start[ref_of] + within
    query = gold.ref_query[ref_of]
    index = {name: i for i, name in enumerate(corpus_names)}
    corpus = (
        np.asarray([index[c] for c in gold.corpus_ids], dtype=np.int64)[query] if len(query) else np.zeros(0, np.int64)
    )
    return ReferenceChars(query, corpus, pos, first_of_each(query, pos), gold.n_queries)


def first_of_each(query: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """True at the first entry of each distinct (query, position): what a union counts once."""
    primary = np.zeros(len(pos), dtype=bool)
    primary[np.unique(query * (int(pos.max(initial=0)) + 1) + pos, return_index=True)[1]] = True
    return primary


def first_covering_rank(ref: ReferenceChars, topk: np.ndarray, chunks: Chunks) -> np.ndarray:
    """For each reference character, the 0-based rank of the first retrieved chunk holding it (K if none)."""
    k_max = topk.shape[1]
    first = np.full(len(ref.pos), k_max, dtype=np.int64)
    for rank in range(k_max):  # a loop over ranks; every step is vectorized over all characters
        c = topk[ref.query, rank]
        safe = np.maximum(c, 0)
        hit = (
            (c >= 0)
            & (chunks.corpus[safe] == ref.corpus)
            & (chunks.start[safe] <= ref.pos)
            & (ref.pos < chunks.end[safe])
        )
        first[(first == k_max) & hit] = rank
    return first


def span_metrics(
    ref: ReferenceChars, first: np.ndarray, topk: np.ndarray, chunks: Chunks, k: int
) -> dict[str, np.ndarray]:
    """Per-query span precision, recall, F1 and IoU of the top k, with their counts."""
    n = ref.n_queries
    covered = np.bincount(ref.query, weights=ref.primary & (first < k), minlength=n)
    uncovered = np.bincount(ref.query, weights=first >= k, minlength=n)
    ref_chars = np.bincount(ref.query, minlength=n)
    top = topk[:, :k]
    retrieved_chars = np.where(top >= 0, chunks.length[np.maximum(top, 0)], 0).sum(axis=1)
    retrieved_tokens = np.where(top >= 0, chunks.n_tokens[np.maximum(top, 0)], 0).sum(axis=1)
    precision = safe_div(covered, retrieved_chars)
    recall = safe_div(covered, ref_chars)
    return {
        "covered": covered.astype(np.int64),
        "ref_chars": ref_chars,
        "retrieved_chars": retrieved_chars,
        "uncovered": uncovered.astype(np.int64),
        "retrieved_tokens": retrieved_tokens,
        "span_precision": precision,
        "span_recall": recall,
        "span_f1": harmonic_mean(precision, recall),
        "span_iou": safe_div(covered, retrieved_chars + uncovered),
    }


@dataclass(frozen=True)
class ChunkRelevance:
    """Which chunks overlap a reference of each query, and the precision Ω counts."""

    keys: np.ndarray  # sorted int64 keys query * n_chunks + chunk of the relevant pairs
    n_relevant: np.ndarray  # (Q,) relevant chunks per query
    covered_all: np.ndarray  # (Q,) reference characters held by some chunk (a union)
    omega_union: np.ndarray  # (Q,) characters in the union of the relevant chunks


def chunks_by_start(chunks: Chunks, corpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A corpus's chunk indices ordered by start, their starts, and the running maximum of their ends."""
    in_corpus = np.flatnonzero(chunks.corpus == corpus)
    order = in_corpus[np.argsort(chunks.start[in_corpus], kind="stable")]
    ends = chunks.end[order]
    return order, chunks.start[order], np.maximum.accumulate(ends) if len(ends) else ends


def furthest_end(starts: np.ndarray, reach: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """For each position, the furthest end of the chunks (from `chunks_by_start`) starting at or before it; -1 if none."""
    if not len(starts):
        return np.full(len(pos), -1, dtype=np.int64)
    slot = np.searchsorted(starts, pos, side="right") - 1
    return np.where(slot >= 0, reach[np.maximum(slot, 0)], -1)


def share_held(relevance: str) -> float:
    """The share of some reference a chunk must hold to be relevant under a `relevance` rule: `overlap`
    (any character: 0), `coverage:F` (F) or `contains` (the whole reference: 1). docs/metrics.md."""
    if relevance == "overlap":
        return 0.0
    if relevance == "contains":
        return 1.0
    name, _, value = relevance.partition(":")
    try:
        share = float(value) if name == "coverage" else float("nan")
    except ValueError:
        share = float("nan")
    if not 0 < share <= 1:  # NaN too
        raise InputError(f"relevance must be overlap, coverage:F with F in (0, 1], or contains; got {relevance!r}")
    return share


def chunk_relevance(gold: SpanGold, ref: ReferenceChars, chunks: Chunks, relevance: str = "overlap") -> ChunkRelevance:
    """Which chunks are relevant to each query under the `relevance` rule (`share_held`); precision Ω's union
    is of the chunks that overlap a reference whatever the rule (span metrics do not follow it)."""
    share = share_held(relevance)
    n_q, n_c = gold.n_queries, len(chunks)
    names = {name: i for i, name in enumerate(chunks.corpus_names)}
    ref_corpus = np.asarray([names[gold.corpus_ids[q]] for q in gold.ref_query.tolist()], dtype=np.int64)
    covered = np.zeros(len(ref.pos), dtype=bool)
    pair_q, pair_c, held = [], [], []
    for corpus in range(len(chunks.corpus_names)):  # a loop over corpora, vectorized within
        order, starts, reach = chunks_by_start(chunks, corpus)
        here = np.flatnonzero(ref.corpus == corpus)
        covered[here] = furthest_end(starts, reach, ref.pos[here]) > ref.pos[here]
        refs = np.flatnonzero(ref_corpus == corpus)
        # The chunks overlapping [s, e): those starting before e (a binary search on the starts), less
        # those before the first whose running maximum end passes s; the few left that end by s are dropped.
        hi = np.searchsorted(starts, gold.ref_end[refs], side="left")
        lo = np.searchsorted(reach, gold.ref_start[refs], side="right")
        n = np.maximum(hi - lo, 0)
        ref_of = np.repeat(refs, n)
        slot = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        c = order[slot]
        keep = chunks.end[c] > gold.ref_start[ref_of]
        pair_q.append(gold.ref_query[ref_of[keep]])
        pair_c.append(c[keep])
        r, c = ref_of[keep], c[keep]
        inside = np.minimum(chunks.end[c], gold.ref_end[r]) - np.maximum(chunks.start[c], gold.ref_start[r])
        held.append(inside >= share * (gold.ref_end[r] - gold.ref_start[r]) - 1e-9)
    none = [np.zeros(0, np.int64)]
    every = np.concatenate(pair_q + none) * n_c + np.concatenate(pair_c + none)
    keys = np.unique(every)
    ruled = np.unique(every[np.concatenate(held + [np.zeros(0, bool)])]) if share > 0 else keys
    q, c = keys // max(n_c, 1), keys % max(n_c, 1)
    # Union length of each query's relevant chunks: sort by (query, start), then a running maximum of
    # ends, offset per query so that the maximum never carries from one query to the next.
    offset = q * (int(chunks.end.max(initial=0)) + 1)
    order = np.lexsort((chunks.start[c], q))
    s, e = (offset + chunks.start[c])[order], (offset + chunks.end[c])[order]
    before = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1])) if len(e) else e
    gain = np.maximum(0, e - np.maximum(s, before))
    return ChunkRelevance(
        keys=ruled,
        n_relevant=np.bincount(ruled // max(n_c, 1), minlength=n_q),
        covered_all=np.bincount(ref.query, weights=ref.primary & covered, minlength=n_q).astype(np.int64),
        omega_union=np.bincount(q[order], weights=gain, minlength=n_q).astype(np.int64),
    )


# --------------------------------------------------------------------------- aggregation

# the metrics, in column order, and how their micro averages are formed: chunkeval.stats.aggregate
METRICS, RANK_METRICS, SPAN_METRICS = V.METRICS, V.RANK_METRICS, V.SPAN_METRICS  # the names, re-exported
MICRO, MICRO_F1 = AGG.MICRO, AGG.MICRO_F1


def score_run(gold: Qrels, ranked: RankedLists, k: int, skip_empty_gold: bool = False) -> tuple[pa.Table, pa.Table]:
    """Per-query set and rank metrics of a run file against its gold set, and their macro/micro summary."""
    qids, judged = judge(gold, ranked)
    values = rank_metrics(judged, k)
    per_query = pa.table(
        {
            "query_id": qids,
            "k": np.full(len(qids), k),
            "has_gold": judged.n_relevant > 0,
            **{name: values[name] for name in RANK_METRICS},
            **{name: values[name] for name in ("tp", "fp", "fn", "n_retrieved", "n_relevant", "hits_at_k")},
        }
    )
    counted = per_query if skip_empty_gold else per_query.drop_columns(["has_gold"])
    return per_query, summarize(counted, ["k"])
