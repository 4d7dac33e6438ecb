"""Embedding-based chunkers: exact offsets with the real model, the DP against brute force, the threshold search."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkeval.engine.chunking import CHUNKERS, ChunkerSpec, chunk_corpora, count_tokens, register_chunker
from chunkeval.engine.chunking.semantic import (
    breakpoint_threshold,
    cluster_semantic,
    neighbour_windows,
    optimal_segmentation,
    segment_similarity,
    semantic_breakpoint,
    semantic_pieces,
    similarity_rewards,
    vector_rewards,
)
from chunkeval.errors import InputError

DEMO = Path(__file__).resolve().parent / "data" / "tiny_demo"

SEMANTIC = {"cluster_semantic": cluster_semantic, "semantic_breakpoint": semantic_breakpoint}


@pytest.fixture(scope="module")
def embed(embedder_factory):
    embedder = embedder_factory()
    return lambda texts: embedder.embed(texts)[0]


# Texts with enough words for several 50-token pieces, mixed separators and some arbitrary characters.
WORDS = [
    "bees",
    "hive",
    "honey",
    "queen",
    "lighthouse",
    "keeper",
    "lamp",
    "storm",
    "sourdough",
    "starter",
    "flour",
    "oven",
    "the",
    "a",
    "of",
    "and",
    "naïve",
    "café",
    "日本",
    "🙂",
]
SEPARATORS = [" ", " ", " ", " ", ". ", "? ", "!", "\n", "\n\n", "  ", "\t"]
tokens = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(SEPARATORS),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3),
)
texts = st.lists(tokens, max_size=260).map("".join)


def check_offsets(text, starts, ends):
    starts, ends = np.asarray(starts), np.asarray(ends)
    assert starts.shape == ends.shape
    if len(starts):
        assert starts[0] >= 0 and ends[-1] <= len(text)
        assert np.all(ends > starts)
        assert np.all(starts[1:] >= ends[:-1])  # in order, no overlap
    covered = np.zeros(len(text), dtype=bool)
    for s, e in zip(starts.tolist(), ends.tolist()):
        covered[s:e] = True
    missed = [c for c, hit in zip(text, covered) if not hit and not c.isspace()]
    assert not missed


@settings(max_examples=25, deadline=None)
@given(text=texts, name=st.sampled_from(sorted(SEMANTIC)), chunk_size=st.sampled_from([50, 100, 200]))
def test_offsets_are_exact_ordered_and_cover_the_text(embed, text, name, chunk_size):
    fn = SEMANTIC[name]
    starts, ends = fn(text, chunk_size, 0, embed=embed)
    check_offsets(text, starts, ends)
    again = fn(text, chunk_size, 0, embed=embed)
    assert np.array_equal(starts, again[0]) and np.array_equal(ends, again[1])  # deterministic
    piece_starts, piece_ends = semantic_pieces(text)
    # every chunk is a run of whole pieces
    assert set(starts.tolist()) <= set(piece_starts.tolist()) and set(ends.tolist()) <= set(piece_ends.tolist())
    if name == "cluster_semantic":
        per_chunk = np.searchsorted(piece_starts, ends, side="left") - np.searchsorted(piece_starts, starts)
        assert np.all(per_chunk <= chunk_size // 50)


def test_blank_text_gives_no_chunks_and_embeds_nothing():
    def embed(texts):
        raise AssertionError("nothing to embed")

    for fn in SEMANTIC.values():
        for text in ["", "   \n\n\t "]:
            starts, ends = fn(text, 100, 0, embed=embed)
            assert len(starts) == len(ends) == 0


def test_chunk_size_below_the_piece_size_is_an_input_error():
    for name, fn in SEMANTIC.items():
        with pytest.raises(
            InputError, match=rf"chunker '{name}' needs chunk_size ≥ 50 \(its pieces are 50 tokens\), got 30"
        ):
            fn("Some text.", 30, 0, embed=lambda texts: np.ones((len(texts), 2), dtype=np.float32))
        with pytest.raises(InputError, match="got 49"):
            chunk_corpora({"x": "Some text."}, ChunkerSpec(name, 49, 0), embed=lambda t: np.ones((len(t), 2)))


def test_chunk_corpora_passes_embed_only_to_chunkers_that_ask():
    for name in SEMANTIC:
        assert CHUNKERS[name].needs_embeddings is True
        with pytest.raises(InputError, match="needs an embedding function"):
            chunk_corpora({"x": "Some text."}, ChunkerSpec(name, 100, 0))
    assert not getattr(CHUNKERS["recursive_token"], "needs_embeddings", False)
    seen = []

    @register_chunker("embed_probe_test", needs_embeddings=True)
    def probe(text, chunk_size, chunk_overlap, *, embed):
        seen.append(embed([text]).shape)
        return np.array([0]), np.array([len(text)])

    try:
        chunks = chunk_corpora(
            {"x": "One. Two."}, ChunkerSpec("embed_probe_test", 5, 0), embed=lambda t: np.ones((len(t), 3))
        )
    finally:
        del CHUNKERS["embed_probe_test"]
    assert seen == [(1, 3)] and chunks.ids() == ["x:0-9"]
    # a chunker that does not ask is called as before, whatever embed is
    assert len(chunk_corpora({"x": "One. Two."}, ChunkerSpec("fixed_token", 2, 0), embed=lambda t: 1 / 0)) == 2


# --------------------------------------------------------------------------- the DP


def brute_force(matrix, max_cluster):
    """Best total over every split into consecutive groups of at most max_cluster, scored as Chroma does."""
    m = np.array(matrix, dtype=np.float64)
    n = len(m)
    if n > 1:
        m -= np.mean(m[np.triu_indices(n, k=1)])
    np.fill_diagonal(m, 0)
    scored = []
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        groups = list(zip(bounds, bounds[1:]))
        if all(b - a <= max_cluster for a, b in groups):
            scored.append((sum(m[a:b, a:b].sum() for a, b in groups), [(a, b - 1) for a, b in groups]))
    scored.sort(key=lambda x: -x[0])
    return scored


def test_dp_equals_brute_force_on_small_matrices():
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 10))
        k = int(rng.integers(1, 6))
        if trial % 2:
            vectors = rng.normal(size=(n, 4))
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            matrix = vectors @ vectors.T
        else:
            raw = rng.uniform(-1, 1, size=(n, n))
            matrix = (raw + raw.T) / 2
        first, last = segment_similarity(matrix, k)
        scored = brute_force(matrix, k)
        groups = list(zip(first.tolist(), last.tolist()))
        assert groups[0][0] == 0 and groups[-1][1] == n - 1
        assert all(b - a + 1 <= k for a, b in groups)
        assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(groups, groups[1:]))
        score = dict((tuple(g), s) for s, g in scored)[tuple(groups)]
        assert score == pytest.approx(scored[0][0], abs=1e-9)
        if len(scored) == 1 or scored[0][0] - scored[1][0] > 1e-9:
            assert groups == scored[0][1]


def chroma_dp(matrix, max_cluster):
    """ClusterSemanticChunker._optimal_segmentation, transcribed: best totals start at 0, strictly better wins."""
    m = np.array(matrix, dtype=np.float64)
    m = m - np.mean(m[np.triu_indices(m.shape[0], k=1)])
    np.fill_diagonal(m, 0)
    n = len(m)
    dp, seg, chosen = np.zeros(n), np.zeros(n, dtype=int), np.zeros(n, dtype=bool)
    for i in range(n):
        for size in range(1, max_cluster + 1):
            if i - size + 1 >= 0:
                reward = np.sum(m[i - size + 1 : i + 1, i - size + 1 : i + 1]) + (dp[i - size] if i - size >= 0 else 0)
                if reward > dp[i]:
                    dp[i], seg[i], chosen[i] = reward, i - size + 1, True
    groups, i = [], n - 1
    while i >= 0:
        groups.append((int(seg[i]), i))
        i = seg[i] - 1
    return groups[::-1], chosen


def test_dp_agrees_with_chroma_except_its_leading_zero_stretch():
    rng = np.random.default_rng(5)
    compared = 0
    for _ in range(300):
        n, k = int(rng.integers(2, 30)), int(rng.integers(1, 9))
        vectors = rng.normal(size=(n, 6)) + rng.normal(size=6)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        theirs, chosen = chroma_dp(vectors @ vectors.T, k)
        if not all(chosen[b] for a, b in theirs if b > a):  # a group from Chroma's default start, never scored
            continue
        compared += 1
        ours = list(zip(*(x.tolist() for x in segment_similarity(vectors @ vectors.T, k))))
        assert ours == theirs
    assert compared > 200


def test_vector_rewards_equal_matrix_rewards():
    rng = np.random.default_rng(3)
    for n, k in [(1, 1), (1, 4), (2, 3), (7, 2), (40, 8)]:
        vectors = rng.normal(size=(n, 16))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        expected = similarity_rewards(vectors @ vectors.T, k)
        got = vector_rewards(vectors, k)
        assert np.array_equal(np.isinf(got), np.isinf(expected))
        np.testing.assert_allclose(got[np.isfinite(got)], expected[np.isfinite(expected)], atol=1e-9)
        assert np.array_equal(np.concatenate(optimal_segmentation(got)), np.concatenate(optimal_segmentation(expected)))


def test_similarity_rewards_leave_the_matrix_alone():
    matrix = np.eye(3) + 0.5
    before = matrix.copy()
    similarity_rewards(matrix, 2)
    assert np.array_equal(matrix, before)


# --------------------------------------------------------------------------- the threshold search


def test_threshold_search_gives_the_requested_number_of_cuts():
    rng = np.random.default_rng(11)
    for _ in range(200):
        distances = rng.uniform(0, 1, size=int(rng.integers(0, 60)))
        cuts = int(rng.integers(0, 30))
        above = int(np.count_nonzero(distances > breakpoint_threshold(distances, cuts)))
        if cuts < len(distances):
            assert above in (cuts, cuts + 1)
        else:  # more cuts asked than there are gaps: the threshold falls to about 0 and every gap breaks
            assert above == len(distances)


def test_neighbour_windows_span_three_pieces_either_side():
    starts, ends = np.array([0, 10, 20, 30, 40, 50, 60, 70, 80]), np.array([8, 18, 28, 38, 48, 58, 68, 78, 88])
    ws, we = neighbour_windows(starts, ends)
    assert ws.tolist() == [0, 0, 0, 0, 10, 20, 30, 40, 50]
    assert we.tolist() == [38, 48, 58, 68, 78, 88, 88, 88, 88]


@pytest.mark.parametrize("chunk_size", [100, 200])
def test_breakpoint_chunks_average_the_target_size_on_real_text(embed, chunk_size):
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((DEMO / "corpora").glob("*.md")))
    piece_starts, piece_ends = semantic_pieces(text)
    total = int(count_tokens([text[s:e] for s, e in zip(piece_starts.tolist(), piece_ends.tolist())]).sum())
    chunks = chunk_corpora({"demo": text}, ChunkerSpec("semantic_breakpoint", chunk_size, 0), embed=embed)
    check_offsets(text, chunks.start, chunks.end)
    assert len(chunks) - 1 in (total // chunk_size, total // chunk_size + 1)
    assert chunks.n_tokens.mean() == pytest.approx(chunk_size, rel=0.2)
    clusters = chunk_corpora({"demo": text}, ChunkerSpec("cluster_semantic", chunk_size, 0), embed=embed)
    check_offsets(text, clusters.start, clusters.end)
    assert len(clusters) >= total // chunk_size  # at most chunk_size // 50 pieces of ≤ 50 tokens a chunk
