"""BM25 over chunk texts: bm25s builds the per-(chunk, term) weights, one sparse product scores every query.

Tokenisation (the same for chunks and queries): `bm25s.tokenize` lowercases, splits on its default
pattern `(?u)\\b\\w\\w+\\b` (runs of two or more word characters), drops bm25s's English stopwords and
stems with PyStemmer's English Snowball stemmer. The default scoring is bm25s's "lucene" variant,
k1 = 1.5, b = 0.75 (see docs/retrievers.md). A chunk that shares no term with the query scores 0 and
is never retrieved: such rows end in -1 padding.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from chunkeval.engine.retrieval.retrievers._rank import sparse_top_positive

if TYPE_CHECKING:
    import scipy.sparse as sp

K1, B, METHOD = 1.5, 0.75, "lucene"
METHODS = ("lucene", "robertson", "atire")  # variants whose score sums over the matched terms only
_BLOCK = 256  # queries scored at a time, at most; fewer over many chunks:
_BLOCK_ENTRIES = 2**25  # a block's sparse scores hold at most this many entries (12 bytes each)


def _bm25s():
    """bm25s, imported when used (reading results never needs it), and without numba: bm25s imports numba where it
    is installed for its numba backend, which chunkeval does not use (it scores with its own sparse products and
    bm25s's plain-Python formulas), and numba's import is 0.13 s of every run that has bm25."""
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    hidden = "numba" not in sys.modules
    if hidden:
        sys.modules["numba"] = None  # `import numba` raises ImportError, which bm25s takes as numba absent
    try:
        import bm25s
    finally:
        if hidden and sys.modules.get("numba", 0) is None:
            del sys.modules["numba"]
    return bm25s


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Lowercased, stopword-free, stemmed tokens of each text."""
    import Stemmer

    bm25s = _bm25s()

    return bm25s.tokenize(
        list(texts),
        lower=True,
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=False,
        show_progress=False,
    )


def token_ids(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """The tokens of every text (as `tokenize` makes them) as term ids, one flat array, with each text's number
    of tokens and the number of terms. Term ids are in the terms' sorted order, so that sums (and so near-ties)
    do not depend on string hashing."""
    import Stemmer

    found = _bm25s().tokenize(
        list(texts), lower=True, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
    )
    terms = sorted(found.vocab)
    rank = np.empty(len(terms), dtype=np.int64)
    rank[[found.vocab[t] for t in terms]] = np.arange(len(terms))
    lengths = np.fromiter(map(len, found.ids), dtype=np.int64, count=len(found.ids))
    flat = np.fromiter(chain.from_iterable(found.ids), dtype=np.int64, count=int(lengths.sum()))
    return rank[flat], lengths, len(terms)


def bm25_matrices(
    query_texts: Sequence[str], chunk_texts: Sequence[str], *, k1: float = K1, b: float = B, method: str = METHOD
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """The query term counts (queries x terms) and the BM25 weights by term (terms x chunks, float64), statistics
    from these chunks: a query's scores are its row of counts times the weights.

    The weights are bm25s's, made with its own idf and term-frequency formulas (so equal to the bit to what its
    `BM25.index` makes, which `tests/test_retrievers.py` checks), over arrays of every (chunk, term) pair at once
    instead of a Python loop over chunks."""
    import scipy.sparse as sp

    _bm25s()
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

    if method not in METHODS:
        raise ValueError(f"unsupported BM25 method {method!r}: choose from {', '.join(METHODS)}")
    n_q, n_c = len(query_texts), len(chunk_texts)
    ids, lengths, n_terms = token_ids([*chunk_texts, *query_texts])
    n_chunk_tokens = int(lengths[:n_c].sum())
    if not n_chunk_tokens:  # no chunk has a term: nothing can match (and avgdl would be 0)
        return sp.csr_matrix((n_q, 0)), sp.csr_matrix((0, n_c))
    chunk_of = np.repeat(np.arange(n_c), lengths[:n_c])
    tf = sp.csr_matrix((np.ones(n_chunk_tokens), (chunk_of, ids[:n_chunk_tokens])), shape=(n_c, n_terms))
    tf.sum_duplicates()  # one entry per (chunk, term): its term frequency
    df = np.bincount(tf.indices, minlength=n_terms)
    idf = np.zeros(n_terms)
    idf_of = _select_idf_scorer(method)
    for term in np.flatnonzero(df).tolist():  # bm25s's idf, a term at a time (math.log, as bm25s computes it)
        idf[term] = idf_of(int(df[term]), N=n_c)
    doc_len = np.repeat(lengths[:n_c], np.diff(tf.indptr))
    tfc = _select_tfc_scorer(method)(tf_array=tf.data, l_d=doc_len, l_avg=lengths[:n_c].mean(), k1=k1, b=b, delta=None)
    weights = sp.csr_matrix((idf[tf.indices] * tfc, tf.indices, tf.indptr), shape=(n_c, n_terms))
    rows = np.repeat(np.arange(n_q), lengths[n_c:])
    counts = sp.csr_matrix(  # a repeated term counts again
        (np.ones(len(rows)), (rows, ids[n_chunk_tokens:])), shape=(n_q, n_terms)
    )
    return counts, weights.T.tocsr()


def bm25_scores(query_texts: Sequence[str], chunk_texts: Sequence[str], **params) -> sp.csr_matrix:
    """BM25 score of every chunk for every query (queries x chunks, float64), statistics from these chunks."""
    counts, by_term = bm25_matrices(query_texts, chunk_texts, **params)
    return (counts @ by_term).tocsr()


def bm25_top_k(query_texts: Sequence[str], chunk_texts: Sequence[str], k: int, **params) -> np.ndarray:
    """Indices (int64, n_queries x k) of the k best-scoring chunks with a positive score, -1 padded."""
    return bm25_ranked(query_texts, chunk_texts, k, **params)[0]


def bm25_ranked(
    query_texts: Sequence[str], chunk_texts: Sequence[str], k: int, **params
) -> tuple[np.ndarray, np.ndarray]:
    """`bm25_top_k`, and the BM25 score of each chunk it ranks (float64, NaN in the padding). The scores are made
    a block of queries at a time and stay sparse: a block's entries are the (query, chunk) pairs that share a
    term, never queries x chunks."""
    counts, by_term = bm25_matrices(query_texts, chunk_texts, **params)
    index = np.full((counts.shape[0], k), -1, dtype=np.int64)
    values = np.full((counts.shape[0], k), np.nan)
    block = max(1, min(_BLOCK, _BLOCK_ENTRIES // max(1, len(chunk_texts))))
    for lo in range(0, counts.shape[0], block):
        top = sparse_top_positive((counts[lo : lo + block] @ by_term).tocsr(), k)
        index[lo : lo + block], values[lo : lo + block] = top
    return index, values
