from __future__ import annotations

import numpy as np
import pytest

from chunkeval.errors import InputError
from chunkeval.retrieval import top_k


def test_top_k_orders_by_score_then_chunk_order():
    chunks = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8], [1, 0]], dtype=np.float32)
    queries = np.array([[1, 0], [0, 1]], dtype=np.float32)
    idx, score = top_k(queries, chunks, 3)
    assert idx[0].tolist() == [0, 2, 4]  # three exact ties: chunk order
    assert idx[1].tolist() == [1, 3, 0]
    assert np.all(np.diff(score, axis=1) <= 0)


def test_ties_across_the_cut_keep_the_earliest_chunks():
    rng = np.random.default_rng(0)
    chunks = np.ones((200, 4), dtype=np.float32)
    queries = rng.random((3, 4)).astype(np.float32)
    idx, _ = top_k(queries, chunks, 5)
    assert idx.tolist() == [[0, 1, 2, 3, 4]] * 3


def test_matches_full_sort_on_random_vectors():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((700, 16)).astype(np.float32)  # more than one block of queries
    c = rng.standard_normal((300, 16)).astype(np.float32)
    idx, _ = top_k(q, c, 7)
    full = np.argsort(-(q @ c.T), axis=1, kind="stable")[:, :7]
    assert np.array_equal(idx, full)


def test_own_corpus_and_fewer_chunks_than_k():
    chunks = np.eye(3, dtype=np.float32)
    queries = np.array([[1, 1, 0], [0, 0, 1]], dtype=np.float32)
    idx, score = top_k(queries, chunks, 4, np.array([0, 1]), np.array([0, 1, 1]))
    assert idx[0].tolist() == [0, -1, -1, -1]
    assert idx[1].tolist() == [2, 1, -1, -1]
    assert np.isneginf(score[0, 1:]).all()
    with pytest.raises(InputError):
        top_k(queries, chunks, 0)
