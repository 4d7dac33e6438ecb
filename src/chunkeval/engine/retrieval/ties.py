"""Ties: rankings in which items have exactly (bit-)equal scores. Definitions: docs/metrics.md ("Ties").

- `trec_order` orders each row of a ranking as trec_eval does: score descending, exactly equal scores by the
  item's id in descending string order (byte order of the id: `b9` before `b10`). Near-equal floats are
  numerics, not ties: nothing is rounded.
- `tie_aware` gives the expected value of ndcg@k, precision@k, recall@k and reciprocal rank over every ordering
  of each group of tied items (McSherry and Najork, 2008), in closed form per group: the item at a position
  of a group of n tied items is each of them with probability 1/n.

Everything is vectorised over queries × ranks; ids are compared as strings only for the items that tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def _key(items: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Scores as a sort key: padding (-1) and NaN below every score."""
    return np.where((items >= 0) & ~np.isnan(scores), scores, -np.inf)


def tied_with_previous(items: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """(Q, L) bool: the item at this rank has exactly the score of the one before it (padding never ties)."""
    s = _key(items, scores)
    out = np.zeros(items.shape, dtype=bool)
    out[:, 1:] = (s[:, 1:] == s[:, :-1]) & (items[:, 1:] >= 0) & np.isfinite(s[:, 1:])
    return out


def trec_order(
    items: np.ndarray, scores: np.ndarray | None, names: Callable[[np.ndarray], Sequence[str]]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each row of `items` (indices, -1 padding) and `scores` reordered as trec_eval orders a run: score
    descending, exact ties by the item's id (`names(indices)`) in descending string order. Without scores (a
    plug-in that gives ranks only) the order is the retriever's."""
    if scores is None or not items.size:
        return items, scores
    s = _key(items, np.asarray(scores, dtype=np.float64))
    ordered = bool((s[:, 1:] <= s[:, :-1]).all())
    if ordered and not tied_with_previous(items, s).any():
        return items, scores  # nothing ties: the usual case, no id is looked at
    # id ranks of the items that share a score with another of their row (the others keep rank 0: they tie with none)
    tied = np.zeros(items.shape, dtype=bool)
    if ordered:
        t = tied_with_previous(items, s)
        tied[:, 1:] |= t[:, 1:]
        tied[:, :-1] |= t[:, 1:]
    else:
        order = np.argsort(-s, axis=1, kind="stable")
        t = tied_with_previous(np.take_along_axis(items, order, 1), np.take_along_axis(s, order, 1))
        t[:, :-1] |= t[:, 1:]
        np.put_along_axis(tied, order, t, 1)
    involved = np.unique(items[tied])
    rank = np.zeros(int(items.max()) + 1, dtype=np.int64)
    text = np.asarray(list(names(involved)), dtype=object)
    rank[involved[sorted(range(len(text)), key=lambda i: text[i].encode())]] = np.arange(len(involved))
    order = np.lexsort((-np.where(items >= 0, rank[np.maximum(items, 0)], -1), -s), axis=1)
    return np.take_along_axis(items, order, 1), np.take_along_axis(np.asarray(scores), order, 1)


def tie_groups(items: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each position of rankings sorted by score, the first position of its group of tied items and the
    position after its last (a position that ties with none is a group of one)."""
    n_q, width = items.shape
    cols = np.broadcast_to(np.arange(width), (n_q, width))
    starts = ~tied_with_previous(items, scores)
    start = np.maximum.accumulate(np.where(starts, cols, 0), axis=1)
    ends = np.ones((n_q, width), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    end = np.minimum.accumulate(np.where(ends, cols + 1, width)[:, ::-1], axis=1)[:, ::-1]
    return start, end


def ties_in_top(items: np.ndarray, scores: np.ndarray | None, k: int) -> np.ndarray:
    """(Q,) bool: whether a query's top k hold two items of exactly equal score, or its k-th item ties with the
    one after it (which of them makes the top k is then the tie policy's choice)."""
    if scores is None:
        return np.zeros(len(items), dtype=bool)
    return tied_with_previous(items, scores)[:, 1 : k + 1].any(axis=1)


def tie_aware(
    gains: np.ndarray, items: np.ndarray, scores: np.ndarray, ideal: np.ndarray, n_relevant: np.ndarray, k: int
) -> dict[str, np.ndarray]:
    """Expected ndcg@k, precision@k, recall@k and reciprocal rank (`chunkeval.vocabulary.TIE_AWARE`) of rankings sorted by score (`gains` of each
    position, its item and score; `ideal`: the positive grades, highest first) over every ordering of each tied
    group. A group of n tied items from position a to b - 1 (0-based) puts each of its items at each of its
    positions with probability 1/n: the expected gain at each of its positions is the group's mean gain, so
    DCG@k and hits@k are sums of the mean gain (mean relevance) times the discount (times 1) of the positions
    before k. Reciprocal rank: in the first group holding r relevant items of its n, the first relevant one is at
    its position a + i with probability C(n - 1 - i, r - 1) / C(n, r)."""
    n_q, width = gains.shape
    start, end = tie_groups(items, scores)
    size = end - start
    rows = np.arange(n_q)[:, None]

    def group_mean(values: np.ndarray) -> np.ndarray:
        total = np.concatenate([np.zeros((n_q, 1)), np.cumsum(values, axis=1)], axis=1)
        return (total[rows, end] - total[rows, start]) / size

    depth = min(k, width)
    discount = np.zeros(width)
    discount[:depth] = 1.0 / np.log2(np.arange(2, depth + 2))
    ideal_discount = 1.0 / np.log2(np.arange(2, min(k, ideal.shape[1]) + 2))
    idcg = (ideal[:, :k] * ideal_discount).sum(axis=1)
    dcg = (group_mean(gains) * discount).sum(axis=1)
    relevant = (gains > 0).astype(np.float64)
    hits = group_mean(relevant)[:, :depth].sum(axis=1)
    # reciprocal rank: the first group with a relevant item
    first = np.where(relevant.any(axis=1), relevant.argmax(axis=1), 0)
    a = start[np.arange(n_q), first]
    n = size[np.arange(n_q), first]
    r = np.rint(group_mean(relevant)[np.arange(n_q), first] * n)
    i = np.arange(width)[None, :]
    # P(no relevant item in the first i positions of the group) = prod_{t < i} (n - r - t) / (n - t)
    step = np.where(i < (n - r)[:, None], (n - r)[:, None] - i, 0) / np.maximum(n[:, None] - i, 1)
    none_before = np.concatenate([np.ones((n_q, 1)), np.cumprod(step, axis=1)[:, :-1]], axis=1)
    p_first = none_before * np.where(i < n[:, None], r[:, None] / np.maximum(n[:, None] - i, 1), 0)
    rr = (p_first / (a[:, None] + i + 1)).sum(axis=1)
    found = relevant.any(axis=1)
    safe = np.maximum(n_relevant, 1)
    return {
        "ndcg_at_k": np.divide(dcg, idcg, out=np.zeros(n_q), where=idcg > 0),
        "precision_at_k": hits / k,
        "recall_at_k": np.where(n_relevant > 0, hits / safe, 0.0),
        "mrr": np.where(found, rr, 0.0),
    }
