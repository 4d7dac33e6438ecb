from __future__ import annotations

import math
import re

import numpy as np
import pytest
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from chunkeval.engine.retrieval.retrievers import RetrievalRequest, needs_embeddings, retrieve, retrieve_scored
from chunkeval.engine.retrieval.retrievers.bm25 import bm25_scores, tokenize
from chunkeval.engine.retrieval.retrievers.dense import top_k
from chunkeval.engine.retrieval.retrievers.hybrid import rrf
from chunkeval.errors import InputError

HERE = __name__  # plug-ins below are named f"{HERE}:function"


def reference_tokens(text: str) -> list[str]:
    stem = Stemmer.Stemmer("english").stemWord
    return [stem(t) for t in re.findall(r"(?u)\b\w\w+\b", text.lower()) if t not in STOPWORDS_EN]


def reference_bm25(queries: list[str], chunks: list[str], k1=1.5, b=0.75) -> np.ndarray:
    """Lucene BM25, term by term: sum over query terms (repeats included) of
    ln(1 + (N - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len / avglen))."""
    docs = [reference_tokens(c) for c in chunks]
    n, avglen = len(docs), sum(map(len, docs)) / len(docs)
    scores = np.zeros((len(queries), n))
    for qi, query in enumerate(queries):
        for term in reference_tokens(query):
            df = sum(term in doc for doc in docs)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for di, doc in enumerate(docs):
                tf = doc.count(term)
                scores[qi, di] += idf * tf / (tf + k1 * (1 - b + b * len(doc) / avglen))
    return scores


def unit(rng: np.random.Generator, n: int, dim: int = 8) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_tokenisation_lowercases_drops_stopwords_and_short_tokens_and_stems():
    assert tokenize(["The Cats are RUNNING, a b x1!", ""]) == [["cat", "run", "x1"], []]


CHUNKS = [
    "the cat sat on the mat with another cat",
    "dogs chase cats in the park",
    "a quiet mat",
    "",  # empty: length 0, still counted in N and in the average length
    "parks and gardens of the city, with dogs",
    "of the",  # stopwords only
]
QUERIES = ["cat on a mat", "Dog parks", "cat cat", "unknown words only"]


def test_bm25_scores_match_the_formula():
    got = bm25_scores(QUERIES, CHUNKS).toarray()
    assert got.shape == (4, 6)
    np.testing.assert_allclose(got, reference_bm25(QUERIES, CHUNKS), rtol=0, atol=1e-9)
    assert got[2] == pytest.approx(2 * bm25_scores(["cat"], CHUNKS).toarray()[0])  # a repeated query term counts twice
    other = bm25_scores(QUERIES, CHUNKS, k1=0.9, b=0.4).toarray()
    np.testing.assert_allclose(other, reference_bm25(QUERIES, CHUNKS, k1=0.9, b=0.4), rtol=0, atol=1e-9)


def test_bm25_weights_are_those_of_bm25s_index_to_the_bit():
    """chunkeval makes bm25s's weights over arrays, with bm25s's own formulas; bm25s's `BM25.index`, chunk by
    chunk, gives the same floats for every variant."""
    import bm25s
    import scipy.sparse as sp

    from chunkeval.engine.retrieval.retrievers.bm25 import bm25_matrices, token_ids

    chunks = CHUNKS + [" ".join(CHUNKS[i % 3] for i in range(n)) for n in (2, 5, 9)]  # longer, repeated terms
    ids, lengths, n_terms = token_ids([*chunks, *QUERIES])
    per_chunk = np.split(ids[: lengths[: len(chunks)].sum()], np.cumsum(lengths[: len(chunks)])[:-1])
    for method, k1, b in (("lucene", 1.5, 0.75), ("robertson", 1.2, 0.4), ("atire", 0.9, 1.0)):
        model = bm25s.BM25(k1=k1, b=b, method=method, dtype="float64")
        model.index(
            ([p.tolist() for p in per_chunk], {i: i for i in range(n_terms)}),
            create_empty_token=False,
            show_progress=False,
        )
        s = model.scores
        theirs = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(len(chunks), n_terms)).T.toarray()
        mine = bm25_matrices(QUERIES, chunks, k1=k1, b=b, method=method)[1].toarray()
        assert np.array_equal(mine, theirs), method


def test_bm25_ranks_by_score_and_never_retrieves_zero_scores():
    scores = reference_bm25(QUERIES, CHUNKS)
    got = retrieve("bm25", RetrievalRequest(QUERIES, CHUNKS, k=4))
    for row, s in zip(got, scores, strict=True):
        expected = [int(i) for i in np.argsort(-s, kind="stable") if s[i] > 0][:4]
        assert row.tolist() == expected + [-1] * (4 - len(expected))
    assert got[3].tolist() == [-1, -1, -1, -1]  # no term in common with any chunk


def test_bm25_ties_go_to_the_lower_chunk_index():
    chunks = ["red fox", "blue fox", "red fox", "red fox", "fox red"]
    got = retrieve("bm25", RetrievalRequest(["red"], chunks, k=3))
    assert got.tolist() == [[0, 2, 3]]


A = ["apple kiwi", "banana kiwi", "banana plum"]  # corpus 0: apple is the rarer term
B = ["apple fig", "apple pear", "apple lime", "grape"]  # corpus 1: makes apple common when pooled
GROUPS = np.array([0, 0, 0, 1, 1, 1, 1])


def test_own_corpus_statistics_come_from_that_corpus_alone():
    queries, query_groups = ["apple banana", "apple"], np.array([0, 1])
    own = bm25_scores(["apple"], A).toarray()[0, 0]
    pooled = bm25_scores(["apple"], A + B).toarray()[0, 0]
    assert own == pytest.approx(reference_bm25(["apple"], A)[0, 0], abs=1e-9)
    assert pooled == pytest.approx(reference_bm25(["apple"], A + B)[0, 0], abs=1e-9)
    assert own > pooled  # apple is in 1 of 3 chunks of its corpus, in 4 of 7 pooled

    request = RetrievalRequest(queries, A + B, k=3)
    assert retrieve("bm25", request).tolist() == [[1, 2, 0], [0, 3, 4]]  # banana outranks apple when pooled
    own_ranks = retrieve("bm25", request, query_groups=query_groups, chunk_groups=GROUPS)
    assert own_ranks.tolist() == [[0, 1, 2], [3, 4, 5]]  # global indices, each query within its corpus


def test_own_corpus_dense_equals_masked_top_k():
    rng = np.random.default_rng(3)
    q, c = unit(rng, 5), unit(rng, 7)
    query_groups = np.array([1, 0, 1, 2, 0])  # corpus 2 has no chunks
    request = RetrievalRequest(["q"] * 5, A + B, k=4, query_vectors=q, chunk_vectors=c)
    got = retrieve("dense", request, query_groups=query_groups, chunk_groups=GROUPS)
    assert np.array_equal(got, top_k(q, c, 4, query_groups, GROUPS)[0])
    assert got[3].tolist() == [-1] * 4
    assert np.array_equal(retrieve("dense", request), top_k(q, c, 4)[0])


# Hybrid on a toy case. Query "apple" against:
#   chunk 0 "apple apple"    (bm25 rank 1; cosine 0.2 -> dense rank 3)
#   chunk 1 "plum"           (no bm25 match; cosine 0.9 -> dense rank 1)
#   chunk 2 "apple pear fig" (bm25 rank 3; cosine 0.8 -> dense rank 2)
#   chunk 3 "apple"          (bm25 rank 2; cosine 0.1 -> dense rank 4)
# c = 60: chunk 0 1/63 + 1/61 = 0.03227, chunk 2 1/62 + 1/63 = 0.03200, chunk 3 1/64 + 1/62 = 0.03175,
#         chunk 1 1/61 = 0.01639                                   -> [0, 2, 3, 1]
# c = 0:  chunk 0 1/3 + 1 = 1.333, chunk 1 1, chunk 2 1/2 + 1/3 = 0.833, chunk 3 1/4 + 1/2 = 0.75 -> [0, 1, 2, 3]
# depth 2 (dense [1, 2], bm25 [0, 3]): 1/61 for chunks 0 and 1, 1/62 for 2 and 3 -> ties: [0, 1, 2, 3]
HYBRID_CHUNKS = ["apple apple", "plum", "apple pear fig", "apple"]


def hybrid_request(k: int) -> RetrievalRequest:
    cos = np.array([0.2, 0.9, 0.8, 0.1])
    chunks = np.stack([cos, np.sqrt(1 - cos**2)], axis=1).astype(np.float32)
    return RetrievalRequest(
        ["apple"], HYBRID_CHUNKS, k=k, query_vectors=np.array([[1, 0]], np.float32), chunk_vectors=chunks
    )


def test_hybrid_fuses_reciprocal_ranks():
    assert retrieve("dense", hybrid_request(4)).tolist() == [[1, 2, 0, 3]]
    assert retrieve("bm25", hybrid_request(4)).tolist() == [[0, 3, 2, -1]]
    assert retrieve("hybrid", hybrid_request(4)).tolist() == [[0, 2, 3, 1]]
    assert retrieve("hybrid", hybrid_request(4), rrf_k=0).tolist() == [[0, 1, 2, 3]]
    assert retrieve("hybrid", hybrid_request(2)).tolist() == [[0, 2]]
    assert retrieve("hybrid", hybrid_request(2), fuse_depth=2).tolist() == [[0, 1]]


def test_the_built_in_retrievers_give_the_score_they_ranked_by():
    """The worked example above, with scores: hybrid's fused scores, bm25's BM25 scores, dense's cosines,
    best first, NaN in the padding; a plug-in gives ranks only (None)."""
    index, scores = retrieve_scored("hybrid", hybrid_request(4))
    assert index.tolist() == [[0, 2, 3, 1]]
    assert scores[0].tolist() == pytest.approx([1 / 63 + 1 / 61, 1 / 62 + 1 / 63, 1 / 64 + 1 / 62, 1 / 61], abs=1e-15)
    index, scores = retrieve_scored("bm25", hybrid_request(4))
    assert index.tolist() == [[0, 3, 2, -1]] and np.isnan(scores[0, 3])
    assert scores[0, :3].tolist() == pytest.approx(bm25_scores(["apple"], HYBRID_CHUNKS).toarray()[0, [0, 3, 2]])
    index, scores = retrieve_scored("dense", hybrid_request(4))
    assert index.tolist() == [[1, 2, 0, 3]] and scores[0].tolist() == pytest.approx([0.9, 0.8, 0.2, 0.1], abs=1e-6)
    grouped = retrieve_scored(
        "bm25", hybrid_request(4), query_groups=np.array([0]), chunk_groups=np.array([0, 1, 0, 0])
    )
    statistics_of_three = bm25_scores(["apple"], [HYBRID_CHUNKS[i] for i in (0, 2, 3)]).toarray()[0]
    assert grouped[0].tolist() == [[0, 3, 2, -1]] and grouped[1][0, :3].tolist() == pytest.approx(
        statistics_of_three[[0, 2, 1]]
    )
    assert retrieve_scored(f"{HERE}:last_first", RetrievalRequest(["q"], ["a", "b"], k=1))[1] is None


def test_rrf_ties_go_to_the_lower_chunk_index():
    dense = np.array([[2, 0, 5], [4, -1, -1]])
    lexical = np.array([[0, 2, -1], [-1, -1, -1]])
    # row 0: chunks 0 and 2 both score 1/61 + 1/62; chunk 5 1/63. Row 1: chunk 4 alone.
    assert rrf([dense, lexical], 6, 4).tolist() == [[0, 2, 5, -1], [4, -1, -1, -1]]


def test_rrf_fuses_sparsely_to_the_scores_of_a_full_matrix():
    """The fusion keeps only the chunks the lists hold (memory follows them, not queries x chunks): its top k and
    scores equal, bit for bit, those of the whole query x chunk matrix filled list after list and sorted by
    score, then chunk; over three lists of random depths, with padding and queries past one block."""
    from chunkeval.engine.retrieval.retrievers.hybrid import _BLOCK, rrf_ranked

    rng = np.random.default_rng(3)
    n_q, n_chunks, k, c = _BLOCK + 7, 300, 12, 60
    lists = []
    for depth in (40, 25, 60):
        ranked = np.argsort(rng.random((n_q, n_chunks)), axis=1)[:, :depth]
        ranked[rng.random((n_q, depth)) < 0.1] = -1  # holes: a list shorter for some queries
        lists.append(np.where(np.cumsum(ranked < 0, axis=1) > 0, -1, ranked))
    fused = np.zeros((n_q, n_chunks))
    for ranked in lists:
        row, pos = np.nonzero(ranked >= 0)
        fused[row, ranked[row, pos]] += 1.0 / (c + pos + 1)
    index, values = rrf_ranked(lists, n_chunks, k, c)
    for q in range(n_q):
        held = np.flatnonzero(fused[q] > 0)
        order = held[np.lexsort((held, -fused[q, held]))][:k]
        assert index[q, : len(order)].tolist() == order.tolist() and (index[q, len(order) :] == -1).all()
        assert np.array_equal(values[q, : len(order)], fused[q, order])


def test_unknown_retrievers_are_input_errors():
    with pytest.raises(
        InputError, match=r"unknown retriever 'bm26'; did you mean bm25\? \(or module:function for your own\)"
    ):
        retrieve("bm26", RetrievalRequest(["q"], ["c"], k=1))
    with pytest.raises(InputError, match="cannot import 'no_such_module_xyz'"):
        needs_embeddings("no_such_module_xyz:f")
    with pytest.raises(InputError, match=f"'{HERE}' has no 'missing'"):
        needs_embeddings(f"{HERE}:missing")
    with pytest.raises(InputError, match="k must be at least 1"):
        retrieve("bm25", RetrievalRequest(["q"], ["c"], k=0))


# Plug-ins: each is named f"{HERE}:name".
def last_first(request: RetrievalRequest) -> np.ndarray:
    """Chunks in reverse order: the last chunk ranks first."""
    n = len(request.chunk_texts)
    row = [n - 1 - i if i < n else -1 for i in range(request.k)]
    return np.array([row] * len(request.query_texts))


last_first.needs_embeddings = False


def first_candidates(request: RetrievalRequest) -> np.ndarray:
    """A reranker that keeps the candidates' order."""
    return request.candidates[:, : request.k]


first_candidates.candidates = 3


def wrong_shape(request):
    return np.zeros((len(request.query_texts), request.k + 1), dtype=np.int64)


def floats(request):
    return np.zeros((len(request.query_texts), request.k))


def ragged(request):
    return [[0], [0, 1]]


def out_of_range(request):
    out = np.zeros((len(request.query_texts), request.k), dtype=np.int32)
    out[-1, 0] = len(request.chunk_texts) + 50
    return out


def twice(request):
    return np.array([[1, 1]] * len(request.query_texts))


def gap(request):
    return np.array([[-1, 0]] * len(request.query_texts))


def test_plugins_are_called_and_mapped_back_to_global_indices():
    request = RetrievalRequest(["q1", "q2"], A + B, k=2)
    assert retrieve(f"{HERE}:last_first", request).tolist() == [[6, 5], [6, 5]]
    own = retrieve(f"{HERE}:last_first", request, query_groups=np.array([0, 1]), chunk_groups=GROUPS)
    assert own.tolist() == [[2, 1], [6, 5]]
    assert not needs_embeddings(f"{HERE}:last_first")
    assert needs_embeddings(f"{HERE}:wrong_shape")  # the default
    assert needs_embeddings("dense") and needs_embeddings("hybrid") and not needs_embeddings("bm25")


def test_rerankers_get_dense_candidates():
    rng = np.random.default_rng(5)
    q, c = unit(rng, 3), unit(rng, 7)
    request = RetrievalRequest(["q"] * 3, A + B, k=2, query_vectors=q, chunk_vectors=c)
    assert needs_embeddings(f"{HERE}:first_candidates")
    assert np.array_equal(retrieve(f"{HERE}:first_candidates", request), top_k(q, c, 2)[0])
    groups = np.array([1, 0, 1])
    assert np.array_equal(
        retrieve(f"{HERE}:first_candidates", request, query_groups=groups, chunk_groups=GROUPS),
        top_k(q, c, 2, groups, GROUPS)[0],
    )
    # Given candidates are renumbered within a corpus; those of another corpus are dropped.
    given = RetrievalRequest(["q"] * 2, A + B, k=2, candidates=np.array([[4, 0, 5], [6, 0, 1]]))
    got = retrieve(f"{HERE}:first_candidates", given, query_groups=np.array([1, 0]), chunk_groups=GROUPS)
    assert got.tolist() == [[4, 5], [0, 1]]


@pytest.mark.parametrize(
    "name, message",
    [
        ("wrong_shape", r"returned shape \(3, 3\), expected \(3, 2\)"),
        ("floats", "returned float64 values, expected integer chunk indices"),
        ("ragged", r"returned ragged rows, expected an array of shape \(3, 2\)"),
        ("out_of_range", r"returned indices out of range \(row 2: 57 ≥ 7 chunks\)"),
        ("twice", r"returned chunk 1 twice \(row 0\)"),
        ("gap", r"returned a chunk after -1 padding \(row 0\)"),
    ],
)
def test_plugin_answers_are_validated(name, message):
    request = RetrievalRequest(["q1", "q2", "q3"], A + B, k=2)
    with pytest.raises(InputError, match=f"^retriever '{HERE}:{name}' " + message + "$"):
        retrieve(f"{HERE}:{name}", request)


def test_plugin_errors_name_the_global_row_in_own_corpus_scope():
    request = RetrievalRequest(["q1", "q2", "q3"], A + B, k=2)
    with pytest.raises(InputError, match=r"\(row 2: 53 ≥ 3 chunks\)"):  # the last query of corpus 0
        retrieve(f"{HERE}:out_of_range", request, query_groups=np.array([1, 0, 0]), chunk_groups=GROUPS)
