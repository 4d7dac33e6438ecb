from __future__ import annotations

import numpy as np
import pytest

from chunkeval.engine.retrieval.retrievers.dense import top_k
from chunkeval.errors import InputError


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


# --------------------------------------------------------------------------- the tiled choice of the k best


def full_sort(queries, chunks, k, query_groups=None, chunk_groups=None):
    """The definition: every score sorted, best first, ties to the lower chunk index; -1 and -inf past the chunks."""
    sims = queries @ chunks.T
    if query_groups is not None:
        sims[query_groups[:, None] != chunk_groups[None, :]] = -np.inf
    best = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    score = np.full((len(queries), k), -np.inf, dtype=np.float32)
    score[:, : best.shape[1]] = np.take_along_axis(sims, best, axis=1)
    index = np.full((len(queries), k), -1, dtype=np.int64)
    index[:, : best.shape[1]] = best
    index[~np.isfinite(score)] = -1
    return index, score


@pytest.mark.parametrize("tile", [1, 3, 8, 64])
def test_tiles_give_the_full_sort_with_ties_groups_and_padding(monkeypatch, tile):
    """Small integer vectors: exact scores with many ties, within and across tiles and at the k-th place."""
    import chunkeval.engine.retrieval.retrievers.dense as R

    monkeypatch.setattr(R, "_TILE", tile)
    rng = np.random.default_rng(tile)
    for trial in range(40):
        n_q, n_c, k = int(rng.integers(1, 30)), int(rng.integers(1, 200)), int(rng.integers(1, 12))
        queries = rng.integers(-2, 3, (n_q, 3)).astype(np.float32)
        chunks = rng.integers(-2, 3, (n_c, 3)).astype(np.float32)
        groups = {}
        if trial % 2:  # own corpus: a query's group may have fewer than k chunks, or none, and come late
            groups = {"query_groups": rng.integers(0, 4, n_q), "chunk_groups": np.sort(rng.integers(0, 4, n_c))}
        got, want = top_k(queries, chunks, k, **groups), full_sort(queries, chunks, k, **groups)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_tie_at_the_kth_place_keeps_the_earlier_chunk_across_tiles(monkeypatch):
    import chunkeval.engine.retrieval.retrievers.dense as R

    monkeypatch.setattr(R, "_TILE", 4)
    chunks = np.zeros((20, 2), dtype=np.float32)
    chunks[[2, 9, 13, 17], 0] = 1  # four chunks tie for the best score, in three tiles
    chunks[[5, 11], 0] = 2  # two better ones
    idx, score = top_k(np.array([[1, 0]], dtype=np.float32), chunks, 4)
    assert idx.tolist() == [[5, 11, 2, 9]]
    assert score.tolist() == [[2, 2, 1, 1]]


def test_threads_and_tiles_change_nothing(monkeypatch):
    """Random vectors: the rows shared among threads, and any tile width, give the same bits as one thread
    choosing from the whole row (the matrix product is the same)."""
    import chunkeval.engine.retrieval.retrievers.dense as R

    rng = np.random.default_rng(7)
    queries = rng.standard_normal((1100, 24)).astype(np.float32)  # three blocks of queries, the last short
    chunks = rng.standard_normal((2000, 24)).astype(np.float32)
    groups = rng.integers(0, 3, 1100), np.repeat(np.arange(3), [400, 1200, 400])
    monkeypatch.setattr(R, "_threads", lambda: 1)
    monkeypatch.setattr(R, "_TILE", 1 << 20)  # one tile: the whole row at once
    whole = top_k(queries, chunks, 10), top_k(queries, chunks, 10, *groups)
    for threads, tile in [(1, 128), (3, 128), (4, 300), (2, 1000)]:
        monkeypatch.setattr(R, "_threads", lambda: threads)  # noqa: B023
        monkeypatch.setattr(R, "_TILE", tile)
        for got, want in zip((top_k(queries, chunks, 10), top_k(queries, chunks, 10, *groups)), whole, strict=True):
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_nan_scores_rank_last_as_in_a_full_sort(monkeypatch):
    import chunkeval.engine.retrieval.retrievers.dense as R

    monkeypatch.setattr(R, "_TILE", 4)
    chunks = np.arange(1, 41, dtype=np.float32)[:, None]
    chunks[[0, 1, 2, 30, 39]] = np.nan
    queries = np.array([[1], [-1], [np.nan]], dtype=np.float32)
    idx, score = top_k(queries, chunks, 3)
    assert idx.tolist() == [[38, 37, 36], [3, 4, 5], [-1, -1, -1]]
    assert np.isnan(score[2]).all()
    idx, score = top_k(queries[:1], chunks[:6], 5)  # fewer numbers than k: NaN fills the rest
    assert idx.tolist() == [[5, 4, 3, -1, -1]] and np.isnan(score[0, 3:]).all()


# issue 30: a k beyond the chunks there are is clamped, its metrics keep their definition at the requested k
AT_K = {"precision_at_k", "precision_at_k_tie_aware", "doc_precision_at_k", "doc_precision_at_k_tie_aware"}


def _clamped_run(exp, embedder_factory):
    """Per-query rows of one sweep at k = its fewest chunks and at k far beyond, and the sweep's notes."""
    from chunkeval.engine.pipeline.sweep import run_sweep

    result = run_sweep(exp, embedder_factory())
    rows = result.per_query.to_pylist()
    return {k: [r for r in rows if r["k"] == k] for k in exp.k}, result.notes


@pytest.mark.parametrize("gold", ["spans", "documents"])
def test_a_k_beyond_the_chunks_ranks_them_all_and_keeps_each_metric_at_that_k(gold, embedder_factory, tmp_path):
    """The demo at 6 chunks (spans) and a 5-document BEIR set at 14 chunks (documents), every built-in retriever:
    each metric at k 50 and 10,000 is its value at k = the chunk count, precision@k rescaled (it divides by k,
    as trec_eval's P_k does), to 1e-12; the retrieved lists hold no rank past the chunks; one note says so."""
    from chunkeval.engine.pipeline.experiment import Experiment
    from chunkeval.paths import DEMO_DIR

    grid = dict(chunker=("fixed_token",), overlaps=("0",), retriever=("dense", "bm25", "hybrid"))
    if gold == "spans":
        inputs = dict(corpus_dir=str(DEMO_DIR / "corpora"), questions=str(DEMO_DIR / "questions.csv"))
        exp, n_chunks = Experiment(name="clamp", chunk_sizes=(400,), k=(6, 50, 10_000), **inputs, **grid), 6
    else:
        (tmp_path / "qrels").mkdir()
        docs = "".join(
            f'{{"_id": "d{i}", "text": "{" ".join(f"word{i} w{j}" for j in range(i + 3))}"}}\n' for i in range(5)
        )
        (tmp_path / "corpus.jsonl").write_text(docs)
        (tmp_path / "queries.jsonl").write_text("".join(f'{{"_id": "q{i}", "text": "word{i} w1"}}\n' for i in range(4)))
        qrels = "".join(f"q{i}\td{i}\t{1 + i % 2}\n" for i in range(4))
        (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
        exp, n_chunks = Experiment(name="clamp", beir=str(tmp_path), chunk_sizes=(8,), k=(14, 50, 10_000), **grid), 14
    by_k, notes = _clamped_run(exp, embedder_factory)
    assert [n for n in notes if n.startswith("k 50, 10000 exceed the chunks there are")] == [
        f"k 50, 10000 exceed the chunks there are (fewest: {n_chunks}, fixed_token {exp.chunk_sizes[0]}/0): clamped, "
        "every chunk is ranked; metrics keep their definition at the requested k (precision@k still divides by k)"
    ]
    compared = 0
    for k in exp.k[1:]:
        assert len(by_k[k]) == len(by_k[n_chunks]) > 0
        for at, deep in zip(by_k[n_chunks], by_k[k], strict=True):
            for name, value in at.items():
                if name == "k" or value is None or isinstance(value, (str, bool)):
                    assert name == "k" or deep[name] == value, name
                    continue
                want = value * n_chunks / k if name in AT_K else value
                assert deep[name] == pytest.approx(want, abs=1e-12), (name, k)
                compared += 1
    assert compared > 100


def test_retrieval_allocates_no_rank_past_the_chunks():
    """k 10,000 over 5 chunks: every retriever answers 5 ranks a query (not 10,000), per group too."""
    from chunkeval.engine.retrieval.retrievers import RetrievalRequest, retrieve_scored

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((8, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = ["alpha beta", "beta gamma", "gamma delta", "delta alpha", "beta beta"]
    request = RetrievalRequest(["alpha", "beta", "gamma"], texts, 10_000, vectors[:3], vectors[3:])
    groups = {"query_groups": np.array([0, 1, 1]), "chunk_groups": np.array([0, 0, 1, 1, 1])}
    for name in ("dense", "bm25", "hybrid"):
        for options in ({}, groups):
            index, scores = retrieve_scored(name, request, **options)
            assert index.shape == scores.shape == (3, 5), (name, options)
            ranked = set(index[0][index[0] >= 0].tolist())  # bm25 ranks only the chunks that share a word
            assert ranked <= ({0, 1} if options else {0, 1, 2, 3, 4}) and (
                name == "bm25" or len(ranked) == 2 + 3 * (not options)
            )
