"""Rank metrics of ranked lists over a judged pool (docs/traces.md, "Replay, judge and decide").

A list's items are character spans (query_id, corpus_id, start, end): the chunks a configuration retrieved, the
documents production retrieved (placed in the corpus, or `production:<content hash>`). An item's grade is the grade
the judge gave that very span of that query (`gold judge` pools every list to its depth, so each item within it
was judged); an item never judged counts as not relevant, as in pooled TREC judging, and the share judged is kept.
Relevant is a grade of at least `min_grade`. At cutoff k, for a query with R relevant judged passages (gains g,
the grade where relevant, else 0):

- ndcg_at_k: Σ_{rank i ≤ k} g_i / log2(i + 1), over the same sum of the query's judged gains sorted (TREC's
  linear gain, pytrec_eval's `ndcg_cut_k`);
- precision_at_k: relevant items in the top k / k (`P_k`); recall_at_k: relevant in the top k / R (`recall_k`);
- mrr: 1 / the rank of the first relevant item of the list (`recip_rank`), 0 where none.

A query none of whose judged passages is relevant measures nothing (every list scores 0): it is left out of the
comparison and counted. Held to pytrec_eval on the same qrels and run in tests/test_traces_compare.py.
"""

from __future__ import annotations

import math

METRICS = ("ndcg_at_k", "precision_at_k", "recall_at_k", "mrr")
PRODUCTION = "production"


def gains(grades: dict, min_grade: int) -> dict:
    """(query_id, corpus_id, start, end) → gain: the grade where it is at least `min_grade`, else 0."""
    return {key: (g if g >= min_grade else 0) for key, g in grades.items()}


def ideal(gain: dict) -> dict[str, list[int]]:
    """query_id → its judged gains, highest first (what an ideal list would rank)."""
    out: dict[str, list[int]] = {}
    for (q, *_), g in gain.items():
        out.setdefault(q, []).append(g)
    return {q: sorted(v, reverse=True) for q, v in out.items()}


def list_metrics(items: list[tuple], query: str, gain: dict, best: dict[str, list[int]], k: int) -> dict:
    """The metrics of one ranked list (`items`: (corpus_id, start, end), best first) of `query` at cutoff `k`,
    with how many of its top k were judged."""
    top = items[:k]
    g = [gain.get((query, *it), 0) for it in top]
    judged = sum(1 for it in top if (query, *it) in gain)
    ideal_gains = best.get(query, [])[:k]
    idcg = sum(x / math.log2(i + 2) for i, x in enumerate(ideal_gains))
    relevant = sum(1 for x in best.get(query, []) if x > 0)
    dcg = sum(x / math.log2(i + 2) for i, x in enumerate(g))
    first = next((i for i, it in enumerate(items, start=1) if gain.get((query, *it), 0) > 0), None)
    hits = sum(1 for x in g if x > 0)
    return {
        "ndcg_at_k": dcg / idcg if idcg else 0.0,
        "precision_at_k": hits / k,
        "recall_at_k": hits / relevant if relevant else 0.0,
        "mrr": 1.0 / first if first else 0.0,
        "judged": judged,
        "listed": len(top),
    }


def measurable(queries, gain: dict) -> tuple[list[str], list[str]]:
    """(queries with at least one relevant judged passage, the others: they measure nothing)."""
    best = ideal(gain)
    kept = [q for q in queries if any(x > 0 for x in best.get(q, []))]
    return kept, [q for q in queries if q not in set(kept)]
