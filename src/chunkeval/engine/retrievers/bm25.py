"""BM25 over chunk texts: bm25s builds the per-(chunk, term) weights, one sparse product scores every query.

Tokenisation (the same for chunks and queries): `bm25s.tokenize` lowercases, splits on its default
pattern `(?u)\\b\\w\\w+\\b` (runs of two or more word characters), drops bm25s's English stopwords and
stems with PyStemmer's English Snowball stemmer. The default scoring is bm25s's "lucene" variant,
k1 = 1.5, b = 0.75 (see docs/retrievers.md). A chunk that shares no term with the query scores 0 and
is never retrieved: such rows end in -1 padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from chunkeval.engine.retrievers._rank import top_positive

if TYPE_CHECKING:
    import scipy.sparse as sp

K1, B, METHOD = 1.5, 0.75, "lucene"
METHODS = ("lucene", "robertson", "atire")  # variants whose score sums over the matched terms only
_BLOCK = 256  # queries densified at a time: bounds memory at BLOCK x n_chunks float64 scores


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Lowercased, stopword-free, stemmed tokens of each text."""
    import bm25s  # imported when used: it pulls numba and scipy, which reading results never needs
    import Stemmer

    return bm25s.tokenize(
        list(texts),
        lower=True,
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=False,
        show_progress=False,
    )


def bm25_scores(
    query_texts: Sequence[str], chunk_texts: Sequence[str], *, k1: float = K1, b: float = B, method: str = METHOD
) -> sp.csr_matrix:
    """BM25 score of every chunk for every query (queries x chunks, float64), statistics from these chunks."""
    import bm25s
    import scipy.sparse as sp

    if method not in METHODS:
        raise ValueError(f"unsupported BM25 method {method!r}: choose from {', '.join(METHODS)}")
    n_q, n_c = len(query_texts), len(chunk_texts)
    tokens = tokenize([*chunk_texts, *query_texts])
    if not any(tokens[:n_c]):  # no chunk has a term: nothing can match (and avgdl would be 0)
        return sp.csr_matrix((n_q, n_c))
    # Term ids in sorted order, so that sums (and so near-ties) do not depend on string hashing.
    vocab = {term: i for i, term in enumerate(sorted(set(chain.from_iterable(tokens))))}
    ids = [[vocab[t] for t in doc] for doc in tokens]
    model = bm25s.BM25(k1=k1, b=b, method=method, dtype="float64")
    model.index((ids[:n_c], vocab), create_empty_token=False, show_progress=False)
    s = model.scores
    weights = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(n_c, len(vocab)))
    q_ids = ids[n_c:]
    rows = np.repeat(np.arange(n_q), [len(doc) for doc in q_ids])
    cols = np.fromiter(chain.from_iterable(q_ids), dtype=np.int64, count=len(rows))
    counts = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_q, len(vocab)))  # a repeated term counts again
    return (counts @ weights.T).tocsr()


def bm25_top_k(query_texts: Sequence[str], chunk_texts: Sequence[str], k: int, **params) -> np.ndarray:
    """Indices (int64, n_queries x k) of the k best-scoring chunks with a positive score, -1 padded."""
    return bm25_ranked(query_texts, chunk_texts, k, **params)[0]


def bm25_ranked(
    query_texts: Sequence[str], chunk_texts: Sequence[str], k: int, **params
) -> tuple[np.ndarray, np.ndarray]:
    """`bm25_top_k`, and the BM25 score of each chunk it ranks (float64, NaN in the padding)."""
    scores = bm25_scores(query_texts, chunk_texts, **params)
    index = np.full((scores.shape[0], k), -1, dtype=np.int64)
    values = np.full((scores.shape[0], k), np.nan)
    for lo in range(0, scores.shape[0], _BLOCK):
        block = scores[lo : lo + _BLOCK].toarray()
        index[lo : lo + len(block)], values[lo : lo + len(block)] = top_positive(block, k)
    return index, values
